"""The study's controls: did the positive control say yes, and did the null not?

Every simulated study runs two control families (``oracle.simulator.workloads``:
``POSITIVE_CONTROL``, ``NULL_CONTROL``):
the **positive control** (learning needed by construction: one decisive step at a random
position, seen only through online features) and the **null** (nothing observable tells
the valuable steps apart). A study that cannot say "yes" on its positive control cannot
say anything: a "no" elsewhere may be the study's blindness, not the policy's. So
:func:`controls_outcome` reads the study's verdicts and decides whether the study is
*informative*; :func:`mark_uninformative` labels every verdict of an uninformative study
so that no reader takes its "no" (or its "yes") at face value. The null is reported beside
it: a bar-(b) "yes" on the null says the study's "yes" may be false positives.

The rule, fixed before any run: the positive control passes when its verdicts say "yes"
on both bars (first-boundary and the best simple baseline); the null passes when none of
its bar-(b) verdicts says "yes". Only a family's confirmatory verdicts count when it has
any (:mod:`ripplecp_policy.verdicts`' confirmatory family: one learned policy and one
primary budget per family); a family without any (no confirmatory family declared, or
older outputs) counts all its verdicts: the positive control then passes when some policy
says "yes" on each bar at every budget it was judged at.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ripplecp_policy.verdicts import CONFIRMATORY

#: the two bars a positive control must pass, by their verdicts' ``bar`` names
BARS: tuple[str, str] = ("first-boundary", "best-simple")


@dataclass(frozen=True)
class ControlsOutcome:
    """How the study's controls came out.

    ``positive_yes``: the positive control said "yes" on both bars (None: the study ran
    none); ``null_yes``: the null said "yes" on bar (b) somewhere (None: ran none);
    ``informative``: the positive control said yes (every verdict of the study means
    something only then); ``detail``: which verdicts decided it, in words."""

    positive: str
    null: str
    positive_yes: bool | None
    null_yes: bool | None
    detail: str

    @property
    def informative(self) -> bool:
        return bool(self.positive_yes)

    @property
    def null_ok(self) -> bool | None:
        """The null did not say yes on bar (b) (None: the study ran no null)."""
        return None if self.null_yes is None else not self.null_yes

    def label(self) -> str:
        """'' for an informative study; else the label every verdict carries."""
        if self.informative:
            return ""
        why = ("the study ran no positive control" if self.positive_yes is None
               else f"the positive control {self.positive!r} did not say yes on both bars")
        return f"uninformative ({why})"

    def text(self) -> str:
        """One line for the headline: the controls' outcome and what follows."""
        pos = ("not run" if self.positive_yes is None else "yes on both bars" if self.positive_yes
               else "NOT yes on both bars")
        nul = ("not run" if self.null_yes is None else "a bar-(b) yes (the study's yes may be false "
               "positives)" if self.null_yes else "no bar-(b) yes, as it should")
        tail = ("verdicts informative" if self.informative
                else "every verdict of this study is uninformative")
        return f"controls: positive ({self.positive}) {pos}; null ({self.null}) {nul}: {tail}. {self.detail}"

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "informative": self.informative, "label": self.label()}


def _counted(verdicts: Iterable[Any], family: str) -> list[Any]:
    """The family's verdicts that count: its confirmatory ones when it has any, else all
    (a study without a confirmatory family, or older outputs); refused ones never."""
    mine = [v for v in verdicts if getattr(v, "family", "") == family and v.status != "refused"]
    return [v for v in mine if getattr(v, "scope", "") == CONFIRMATORY] or mine


def _positive_passes(vs: Sequence[Any]) -> tuple[bool, str]:
    """Yes on both bars: for confirmatory verdicts, every one of them (one per bar); else
    some policy with a yes on both bars at every budget it was judged at."""
    if not vs:
        return False, "no decided verdict"
    if any(getattr(v, "scope", "") == CONFIRMATORY for v in vs):
        bars = {v.bar: v for v in vs}
        ok = all(b in bars and bars[b].status == "yes" for b in BARS)
        return ok, ", ".join(f"{b}: {bars[b].status if b in bars else 'missing'}" for b in BARS)
    by_policy: dict[str, list[Any]] = {}
    for v in vs:
        by_policy.setdefault(v.policy, []).append(v)
    passing = [p for p, mine in by_policy.items()
               if all(any(v.bar == b for v in mine) for b in BARS)
               and all(v.status == "yes" for v in mine if v.bar in BARS)]
    return bool(passing), (f"yes on both bars at every budget: {', '.join(passing)}" if passing
                           else "no policy says yes on both bars at every budget")


def controls_outcome(verdicts: Iterable[Any], *, positive: str, null: str) -> ControlsOutcome:
    """Decide the study's controls from its verdicts (:class:`ripplecp_policy.verdicts.Verdict`
    or anything with ``family``, ``policy``, ``bar``, ``status`` and optionally ``scope``):
    the module docstring's rule. ``positive`` and ``null`` name the control families (a
    simulated study's: ``oracle.simulator.workloads.control_families()``, passed by the
    study, since policy code reads no simulator)."""
    vs = list(verdicts)
    fams = {getattr(v, "family", "") for v in vs}
    parts = []
    pos_yes: bool | None = None
    if positive in fams:
        pos_yes, why = _positive_passes(_counted(vs, positive))
        parts.append(f"positive control: {why}")
    null_yes: bool | None = None
    if null in fams:
        b = [v for v in _counted(vs, null) if v.bar == BARS[1]]
        yes = [v for v in b if v.status == "yes"]
        null_yes = bool(yes)
        parts.append("null: " + (", ".join(f"{v.policy} at {v.budget} says yes on bar (b)" for v in yes)
                                 or f"{len(b)} bar-(b) verdict(s), none yes"))
    return ControlsOutcome(positive, null, pos_yes, null_yes, "; ".join(parts))


def mark_uninformative(verdicts: Iterable[Any], outcome: ControlsOutcome) -> list[Any]:
    """The verdicts, each labelled with ``outcome.label()`` at the head of its ``reason``
    when the study is uninformative (copies; the originals are untouched). An informative
    study's verdicts come back unchanged."""
    label = outcome.label()
    out = []
    for v in verdicts:
        if label:
            reason = getattr(v, "reason", "")
            v = dataclasses.replace(v, reason=f"{label}; {reason}" if reason else label)
        out.append(v)
    return out
