"""Verdicts: does a policy beat a reference at a matched budget? (paper, Appendix D).

:func:`compare` takes the per-task results of :meth:`ripplecp_policy.evaluation.Evaluator.evaluate`
and gives one :class:`Verdict` per (policy, budget) against the reference (first-boundary by
default): the paired per-task difference with a two-stage bootstrap interval (repositories,
then tasks) and p-value, "yes" only
when the whole interval is below zero. Only online policies get verdicts: offline limits and
unmatched references are shown beside them, never judged. It refuses when budgets were not
matched (either side ran without a matched budget, the caps differ, or a side's mean spend
differs from the cap beyond tolerance), never printing a verdict for an unfair comparison.

:func:`two_bar_verdicts` is a study's judgement of its learned policies, with both bars fixed
in advance: (a) beats first-boundary (the paper's bar) and (b) beats the best simple
baseline (:data:`BEST_SIMPLE`: per held-out fold, the online simple baseline with the lowest
mean training objective at that budget, chosen before any held-out result is seen). Holm's
correction runs across every (family, policy, budget) of one bar in the study.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from ripplecp_policy.policy import Role
from ripplecp_policy.stats import difference_test, holm


class MismatchedBudgetError(ValueError):
    """A comparison between policies whose budgets or spends differ beyond tolerance."""


#: the name under which a study records bar (b)'s reference: per held-out fold and budget,
#: the held-out results of the online simple baseline chosen on the training folds
BEST_SIMPLE = "best-simple"
#: the two bars of :func:`two_bar_verdicts`, in the order they are reported
BARS: tuple[str, str] = ("first-boundary", BEST_SIMPLE)


@dataclass
class Verdict:
    """Does ``policy`` beat ``reference`` at a matched budget? ``status``: yes | no | refused."""

    policy: str
    reference: str
    budget: str
    status: str
    metric: str
    diff: float = math.nan  # mean of (policy - reference) per task; negative = policy cheaper
    low: float = math.nan
    high: float = math.nan
    confidence_level: float = 0.95
    n_tasks: int = 0
    spend: float = math.nan
    reference_spend: float = math.nan
    iqm_repo_diff: float = math.nan  # interquartile mean over repositories of the mean difference
    p_improvement: float = math.nan  # P(policy cost < reference cost) over tasks, ties 0.5
    reason: str = ""
    p_value: float = math.nan  # two-sided bootstrap p of "no difference", uncorrected
    p_adjusted: float = math.nan  # Holm-adjusted across the study's verdicts of this bar
    bar: str = ""  # "first-boundary" | "best-simple" (two_bar_verdicts), "" from compare
    chosen: str = ""  # bar (b): the baseline(s) chosen per fold, e.g. "time-tuned x3"
    family: str = ""

    def word(self) -> str:
        """The verdict in plain words: "yes", "no" or "refused: <why>"."""
        return f"refused: {self.reason}" if self.status == "refused" else self.status

    def text(self) -> str:
        if self.status == "refused":
            return f"{self.policy} vs {self.reference} at {self.budget}: verdict refused ({self.reason})"
        word = "yes" if self.status == "yes" else "no"
        line = (
            f"{self.policy} beats {self.reference} at matched budget {self.budget}: {word}, "
            f"difference {self.diff:+.2f} s, {self.confidence_level:.0%} interval "
            f"[{self.low:+.2f}, {self.high:+.2f}] over {self.n_tasks} tasks "
            f"(IQM over repos {self.iqm_repo_diff:+.2f}, P(improvement) {self.p_improvement:.2f}; "
            f"spend {self.spend:.3g} vs {self.reference_spend:.3g})"
        )
        if self.reason:
            line += f"; {self.reason}"
        return line

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _spend_mismatch(
    pol: pd.DataFrame, ref: pd.DataFrame, tolerance: float, symmetric: bool
) -> str:
    """Why two result sets are not budget-matched ('' when they are): either side's mean
    spend exceeds the cap by more than ``tolerance`` of it (with ``symmetric``, or falls
    short of it by more), measured against the cap itself, never the other side's spend."""
    if not pol["budget_matched"].all():
        return "policy ran without a matched budget (reference, not budget-matched)"
    if not ref["budget_matched"].all():
        return "reference ran without a matched budget"
    caps = set(zip(pol["budget_kind"], pol["budget_amount"], strict=True))
    ref_caps = set(zip(ref["budget_kind"], ref["budget_amount"], strict=True))
    if caps != ref_caps:
        return f"budgets differ: {sorted(caps)} vs {sorted(ref_caps)}"
    amount = float(pol["budget_amount"].mean())  # a relative budget's cap differs by fold
    scale = amount if amount > 0 else 1.0
    for side, frame in (("policy", pol), ("reference", ref)):
        spend = float(frame["spend"].mean())
        d = (spend - amount) / scale
        if d > tolerance or (symmetric and -d > tolerance):
            return (
                f"{side} mean spend {spend:.4g} differs from the cap {amount:g} by {d:+.1%}, "
                f"beyond tolerance {tolerance:.0%}"
            )
    return ""


#: costs within this relative difference are a tie (sums of the same seconds in another
#: order, or a mean over seeds of one placement, differ by rounding alone)
TIE_RTOL = 1e-9


def probability_of_improvement(policy_cost: pd.Series, reference_cost: pd.Series) -> float:
    """Fraction of tasks where the policy is cheaper than the reference; ties (equal up to
    :data:`TIE_RTOL`) count 0.5."""
    a, b = policy_cost.align(reference_cost, join="inner")
    if len(a) == 0:
        return math.nan
    tie = np.isclose(a.to_numpy(float), b.to_numpy(float), rtol=TIE_RTOL, atol=0.0)
    return float((((a < b).to_numpy() & ~tie).sum() + 0.5 * tie.sum()) / len(a))


def interquartile_mean(x: Sequence[float] | np.ndarray) -> float:
    """Mean of the middle 50% (scipy.stats.trim_mean(x, 0.25)); robust across repositories."""
    from scipy.stats import trim_mean

    arr = np.asarray(x, dtype=float)
    arr = arr[~np.isnan(arr)]
    return float(trim_mean(arr, 0.25)) if arr.size else math.nan


def paired_contrast(
    pol: pd.DataFrame, ref: pd.DataFrame, metric: str = "total_failure_cost", *,
    n_resamples: int = 10_000, seed: int = 20260818, confidence_level: float = 0.95,
) -> dict[str, float] | None:
    """The paired per-task difference ``policy - reference`` of ``metric`` between two
    result sets at one budget: mean with a two-stage bootstrap interval (repositories, then
    tasks within them; tasks alone when they come from one repository) and two-sided p-value
    (``diff``, ``low``, ``high``, ``p_value``; :func:`ripplecp_policy.stats.difference_test`),
    ``n_tasks``, the IQM over repositories of the per-repository mean difference, and the
    probability of improvement. None with fewer than two paired tasks."""
    a = pol.set_index("task_id")[metric].astype(float)
    b = ref.set_index("task_id")[metric].astype(float)
    for name, s in (("policy", a), ("reference", b)):
        if not s.index.is_unique:
            raise ValueError(f"paired_contrast: {name} has task {s.index[s.index.duplicated()][0]!r} more than once")
    a, b = a.align(b, join="inner")
    if len(a) < 2:
        return None
    repos = pol.set_index("task_id")["repo"].reindex(a.index)
    d = a - b
    two_stage = repos.nunique() >= 2
    t = difference_test(d.to_numpy(), repos.to_numpy() if two_stage else None,
                        n_resamples=n_resamples, seed=seed, confidence_level=confidence_level)
    per_repo = d.groupby(repos).mean()
    return {"diff": t.estimate, "low": t.low, "high": t.high, "p_value": t.p_value,
            "n_tasks": len(a), "iqm_repo_diff": interquartile_mean(per_repo.to_numpy()),
            "p_improvement": probability_of_improvement(a, b)}


def compare(
    results: pd.DataFrame,
    reference: str = "first-boundary",
    *,
    tolerance: float = 0.05,
    symmetric: bool = False,
    metric: str = "total_failure_cost",
    strict: bool = False,
    n_resamples: int = 10_000,
    seed: int = 20260818,
    confidence_level: float = 0.95,
    policies: Sequence[str] | None = None,
) -> list[Verdict]:
    """Verdicts for every online (policy, budget) in ``results`` against ``reference``
    (only those of ``policies`` when given).

    ``results`` has one row per (task, policy, budget) as returned by
    :meth:`Evaluator.evaluate`, whose ``role`` column says what each policy is: only online
    policies get a verdict; offline limits (oracle, optimum) and unmatched references
    (every-boundary) get none — they are limits and scale, not candidates. A verdict is
    **refused** when either side ran without a matched budget, when the budget caps differ,
    or when either side's mean spend exceeds the cap by more than ``tolerance`` (a fraction
    of the cap); with ``symmetric=True`` falling short of the cap beyond tolerance is
    refused too. (Spending less under the same cap is allowed by default: winning with
    fewer checkpoints is a fair win.) With ``strict=True`` a refusal raises
    :class:`MismatchedBudgetError` instead. The difference (policy - reference, per task,
    paired; :func:`paired_contrast`) gets a task-bootstrap interval; "yes" only when the
    whole interval is below zero.
    """
    out: list[Verdict] = []
    if reference not in set(results["policy"]):
        raise ValueError(f"reference policy {reference!r} is not in the results")
    if "role" not in results.columns:
        raise ValueError("compare: results lack the 'role' column (Evaluator.evaluate writes it)")
    for budget, by_budget in results.groupby("budget", sort=False):
        ref = by_budget[by_budget["policy"] == reference]
        for pol_name, pol in by_budget.groupby("policy", sort=False):
            if pol_name == reference or (pol["role"] != Role.ONLINE).any():
                continue
            if policies is not None and pol_name not in policies:
                continue
            if ref.empty:
                reason = f"no {reference} results at budget {budget}"
            else:
                reason = _spend_mismatch(pol, ref, tolerance, symmetric)
            v = Verdict(
                policy=str(pol_name), reference=reference, budget=str(budget), status="refused",
                metric=metric, spend=float(pol["spend"].mean()),
                reference_spend=float(ref["spend"].mean()) if len(ref) else math.nan,
                confidence_level=confidence_level,
            )
            if reason:
                if strict:
                    raise MismatchedBudgetError(f"{pol_name} vs {reference} at {budget}: {reason}")
                v.reason = reason
                out.append(v)
                continue
            c = paired_contrast(pol, ref, metric, n_resamples=n_resamples, seed=seed,
                                confidence_level=confidence_level)
            if c is None:
                paired = len(set(pol["task_id"]) & set(ref["task_id"]))
                v.reason = f"only {paired} paired task(s)"
                out.append(v)
                continue
            v.diff, v.low, v.high, v.n_tasks = c["diff"], c["low"], c["high"], int(c["n_tasks"])
            v.iqm_repo_diff, v.p_improvement = c["iqm_repo_diff"], c["p_improvement"]
            v.p_value = c["p_value"]
            v.status = "yes" if v.high < 0 else "no"
            if v.status == "no":
                v.reason = (
                    "interval includes zero" if v.low <= 0 <= v.high else "reference is cheaper"
                )
            cap = float(pol["budget_amount"].mean())
            if pol["spend"].mean() < cap - tolerance * max(cap, 1e-12):
                v.reason = (v.reason + "; " if v.reason else "") + (
                    f"policy left {1 - pol['spend'].mean() / cap:.0%} of the cap unused")
            out.append(v)
    return out


def _chosen(best: pd.DataFrame) -> str:
    """Which baselines bar (b)'s reference was, per fold: "time-tuned x3, fixed-k x1"."""
    if "chosen" not in best.columns or "fold" not in best.columns:
        return ""
    per_fold = best.groupby("fold", sort=False)["chosen"].first().value_counts()
    return ", ".join(f"{name} x{n}" for name, n in per_fold.items())


def two_bar_verdicts(
    results: pd.DataFrame,
    policies: Sequence[str],
    *,
    reference: str = BARS[0],
    best: str = BEST_SIMPLE,
    tolerance: float = 0.05,
    symmetric: bool = False,
    metric: str = "total_failure_cost",
    n_resamples: int = 10_000,
    seed: int = 20260818,
    confidence_level: float = 0.95,
) -> list[Verdict]:
    """Both bars for every policy of ``policies`` at every budget (per ``family`` when the
    results have that column), Holm-corrected.

    Bar (a): the policy against ``reference``; bar (b): against ``best``, the rows a study
    recorded for the best simple baseline chosen on each fold's training tasks (with a
    ``chosen`` column naming it). Each verdict carries the raw two-sided bootstrap p-value and
    the Holm-adjusted one, adjusted across every (family, policy, budget) verdict of its bar
    that was not refused. "yes" only when the difference is negative, the interval lies
    below zero and the adjusted p-value is below 1 - ``confidence_level``; refused verdicts
    (spend beyond tolerance of the cap) are neither tested nor counted.
    """
    fams = results.groupby("family", sort=False) if "family" in results.columns else [("", results)]
    out: list[Verdict] = []
    for fam, res in fams:
        for bar, ref in ((BARS[0], reference), (BARS[1], best)):
            if ref not in set(res["policy"]):
                raise ValueError(f"two_bar_verdicts: {fam or 'results'}: no {ref!r} rows for bar {bar!r}")
            chosen = _chosen(res[res["policy"] == ref]) if bar == BARS[1] else ""
            for v in compare(res, ref, tolerance=tolerance, symmetric=symmetric, metric=metric,
                             n_resamples=n_resamples, seed=seed, confidence_level=confidence_level,
                             policies=policies):
                v.bar, v.family = bar, str(fam)
                if bar == BARS[1]:
                    g = res[(res["policy"] == ref) & (res["budget"] == v.budget)]
                    v.chosen = _chosen(g) or chosen
                out.append(v)
    alpha = 1.0 - confidence_level
    for bar in BARS:
        mine = [v for v in out if v.bar == bar and v.status != "refused"]
        for v, p in zip(mine, holm([v.p_value for v in mine]), strict=True):
            v.p_adjusted = float(p)
            if v.status == "yes" and not p < alpha:
                v.status = "no"
                v.reason = f"not after Holm's correction (p {v.p_value:.3g}, adjusted {p:.3g})"
    return out
