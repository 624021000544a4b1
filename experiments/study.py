"""The skeleton every study script shares: its common options and the steps each one
re-typed before (the family check, --quick sizing, loading the label sets it studies).

A study's ``Args`` extends :class:`StudyArgs` (or :class:`LabelStudyArgs` when it can also
read a label set instead of simulating), keeps its own options below, and declares its
--quick sizes in ``QUICK``::

    @dataclass(frozen=True)
    class Args(LabelStudyArgs):
        \"\"\"What the study answers.\"\"\"

        QUICK: ClassVar[Mapping[str, Any]] = dict(families=("long-horizon",), repos=3)
        experiment: str = opt("my-study", check=check_experiment_name)
        \"\"\"MLflow experiment name\"\"\"
        n_resamples: int = opt(2_000, min=100)
        \"\"\"bootstrap resamples per interval\"\"\"

    def study(args: Args) -> int:
        args = sized(args)
        data = load_label_sets(args)
        ...

Here rather than in ``ripplecp_policy``: simulated label sets come from
``oracle.simulator``, which the policy package must not import (the consumers read label
sets through ``labelsets`` only; tests/test_architecture.py). Nothing outside
``experiments`` imports this module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from oracle.simulator.workloads import family_names
from ripplecp_cli import CommandLineError, choice_error, existing_dir, opt, progress
from ripplecp_policy.budget import check_budget_specs
from ripplecp_policy.data import resolve_labels
from ripplecp_policy.tracking import check_experiment_name

if TYPE_CHECKING:  # the label sets (pandas) load when a study reads them: --help stays fast
    from labelsets.tables import LabelSet

#: the simulated families a default study runs (every registered one is accepted)
FAMILIES = ("swe-pilot", "dependency-resolution", "multi-stage-build", "long-horizon")
#: the reference every difference is taken against: the paper's first-boundary rule
REFERENCE = "first-boundary"

#: an ``Args`` dataclass with ``quick`` and ``QUICK`` (a StudyArgs, or a study with its own seeds)
A = TypeVar("A")


def check_families(families: Iterable[str], known: Iterable[str] | None = None,
                   flag: str = "--families") -> None:
    """Every name of ``families`` is one of ``known`` (default: the registered simulated
    families); a one-line error suggesting the nearest otherwise."""
    valid = list(family_names() if known is None else known)
    for fam in families:
        if fam not in valid:
            raise choice_error(fam, valid, flag)


def check_labels(spec: str) -> None:
    """``check=`` of ``--labels``: a shipped label set's name or an existing directory."""
    try:
        path = resolve_labels(spec)
    except LookupError as exc:
        raise ValueError(str(exc)) from None
    existing_dir(path)


@dataclass(frozen=True)
class StudyArgs:
    """The options every study over workload families shares (flags read the same in
    every experiment). A subclass redeclares a field to change its default."""

    #: --quick's sizes: option name -> value, applied by :func:`sized` to every option
    #: left at its default (options given explicitly win)
    QUICK: ClassVar[Mapping[str, Any]] = {}

    families: tuple[str, ...] = opt(FAMILIES, metavar="F")
    """workload families to study"""
    repos: int | None = opt(None, min=2)
    """simulated repositories per family, one leave-one-repository-out fold each (default:
    the family's own)"""
    tasks_per_repo: int | None = opt(None, min=1)
    """simulated tasks per repository (default: the family's own)"""
    seed: int = opt(0, min=0)
    """one seed for the simulator, the policies and their tuning"""
    budgets: tuple[str, ...] = opt(("count:1", "count:2"), check=check_budget_specs, metavar="SPEC")
    """budgets: count:N (N >= 1), seconds:S or seconds:Kx (K x mean creation s), bytes:B or
    bytes:Kx (S, B, K > 0)"""
    quick: bool = False
    """a CI-sized version of the same study (options given explicitly win)"""
    mlruns: str | None = opt(None, metavar="DIR")
    """MLflow store root (default: $RIPPLECP_MLRUNS or ./mlruns)"""
    mlflow: bool = True
    """log the study to MLflow"""
    experiment: str = opt("study", check=check_experiment_name)
    """MLflow experiment name"""

    def __post_init__(self) -> None:
        if getattr(self, "labels", None) is None:  # a label set's families are checked on loading
            check_families(self.families)


@dataclass(frozen=True)
class LabelStudyArgs(StudyArgs):
    """:class:`StudyArgs` for a study that can also read a label set instead of simulating."""

    families: tuple[str, ...] = opt(FAMILIES, metavar="F")
    """workload families to simulate; with --labels, the set's families to study (left at
    the default: every family of the set)"""
    labels: str | None = opt(None, check=check_labels, metavar="DIR|NAME")
    """an existing label-set directory (e.g. from a real agent), or a label set shipped with
    the toolkit by name (``shipped`` = llm-free-sparse), instead of the simulator"""


def sized(args: A) -> A:
    """``args`` with its class's --quick sizes (``QUICK``) for every option left at its
    default; with --labels the families stay the set's own. Unchanged without --quick."""
    if not args.quick:
        return args
    default = type(args)()
    labels = getattr(args, "labels", None)
    return dataclasses.replace(args, **{
        k: v for k, v in type(args).QUICK.items()
        if getattr(args, k) == getattr(default, k) and not (k == "families" and labels)
    })


def read_label_set(spec: str, flag: str = "--labels") -> LabelSet:
    """The label set ``spec`` names (a shipped name or a directory), verified on loading; a
    one-line error naming ``flag`` otherwise."""
    from labelsets.tables import LabelSet

    try:
        return LabelSet.load(resolve_labels(spec))
    except (ValueError, OSError) as exc:
        raise CommandLineError(f"argument {flag}: {exc}") from None


def family_of(data: LabelSet, family: str) -> LabelSet:
    """The tasks of ``family`` in ``data``."""
    return data.subset(data.tasks.loc[data.tasks["family"] == family, "task_id"])


def set_families(data: LabelSet, families: tuple[str, ...], default: tuple[str, ...] = FAMILIES) -> list[str]:
    """The families of ``data`` a study takes: all of them when ``families`` is left at the
    study's ``default``, else those named, each checked against the set."""
    present = sorted(str(f) for f in data.tasks["family"].unique())
    if families == default:
        return present
    check_families(families, present)
    return [f for f in present if f in families]


def load_label_sets(args: StudyArgs, *, repetitions: int = 2, shipped: bool = False,
                    shipped_set: str = "shipped") -> dict[str, LabelSet]:
    """One label set per family: the tasks of ``--labels`` grouped by family
    (:func:`set_families`), or each of ``--families`` simulated (full design: every
    placement priced, ``repetitions`` per recovery cell, the study's seed and sizes).
    ``shipped``: a real label set shipped with the toolkit too (``shipped_set``, by name: the
    default one unless named), by family, beside the simulated ones (a family name both have
    is an error)."""
    labels = getattr(args, "labels", None)
    if labels:
        full = read_label_set(labels)
        fams = set_families(full, args.families, type(args)().families)
        return {fam: family_of(full, fam) for fam in fams}
    from oracle.simulator import simulate_label_set

    out: dict[str, LabelSet] = {}
    for fam in progress(args.families, desc="simulate", leave=False):
        out[fam] = simulate_label_set(fam, n_repos=args.repos, tasks_per_repo=args.tasks_per_repo,
                                      design="full", repetitions=repetitions, seed=args.seed)
    if shipped:
        from labelsets.tables import LabelSet

        try:
            real = LabelSet.load(resolve_labels(shipped_set))
        except (ValueError, OSError) as exc:
            raise CommandLineError(f"the shipped label set: {exc} (--no-shipped leaves it out)") from None
        for fam in sorted(str(f) for f in real.tasks["family"].unique()):
            if fam in out:
                raise CommandLineError(f"the shipped label set's family {fam!r} is also simulated")
            out[fam] = family_of(real, fam)
    return out


def control_roles(families: Iterable[str]) -> dict[str, str]:
    """The control families among ``families``: name -> ``"positive"`` (learning is needed by
    construction: a study that cannot say yes there cannot say yes anywhere) or ``"null"``
    (learning cannot help: a yes there is a false one), as the simulator declares them
    (``FamilyConfig.control``); none for a family it does not know (a label set's)."""
    from oracle.simulator.workloads import get_family

    out = {}
    for fam in families:
        try:
            role = getattr(get_family(fam), "control", "")  # the simulator's declaration, where it has one
        except (KeyError, LookupError, ValueError):
            continue
        if role:
            out[fam] = str(role)
    return out


def splittable(data: dict[str, LabelSet], why: str = "no family has >= 2 repositories") -> dict[str, LabelSet]:
    """The families of ``data`` with >= 2 repositories (leave-one-repository-out needs
    them); a note for each left out, and ValueError ``why`` when none is left."""
    out = {}
    for fam, ls in data.items():
        if ls.tasks["repo"].nunique() < 2:
            print(f"note: {fam}: fewer than 2 repositories, no leave-one-repository-out; skipped")
            continue
        out[fam] = ls
    if not out:
        raise ValueError(why)
    return out


__all__ = ["FAMILIES", "REFERENCE", "LabelStudyArgs", "StudyArgs", "check_families",
           "check_labels", "control_roles", "family_of", "load_label_sets", "read_label_set", "set_families",
           "sized", "splittable"]
