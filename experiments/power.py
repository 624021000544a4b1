"""How big must a study be? Repositories x tasks x repetitions to detect an effect.

    python -m experiments.power                          # the default study's simulated families
    python -m experiments.power --labels shipped         # the real label set shipped with the toolkit
    python -m experiments.power --families positive-control --repos 4 --tasks-per-repo 2
    python -m experiments.power --labels DIR --repos 3 --effect 20 --reference time-tuned

A pilot measures what the plan needs (:mod:`ripplecp_policy.planning`): per family, the
reference policy (``--reference``, first-boundary by default) fitted
leave-one-repository-out and walked on each held-out task, the cross-fitted clairvoyant
limit on the same task, and the variance of their per-task difference split into between
repositories, within them, and one repetition's measurement noise. The pilot is a label
set (``--labels``: a directory or a shipped set's name; ``--repos``/``--tasks-per-repo``
take a small piece of it) or a small simulated study (``--families``, at ``--repos`` x
``--tasks-per-repo`` x ``--repetitions``).

The effect to detect is ``--effect`` seconds, or by default each family's measured limit
gain (the most any policy could gain over the reference: a study that cannot detect it
cannot detect any policy's). The level is ``--alpha`` / ``--tests`` (Holm's first step in a
confirmatory family of that many tests; default 2 per family, both bars), at 80 % power.
Per family it prints the pilot's estimates, the MDE at the pilot's own size, and for each
option of tasks per repository x repetitions the fewest repositories that reach the effect;
then one line per family: how many tasks it needs at its own tasks per repository and
repetitions (what a bigger version of the same collection would need), and the cheapest
option. ``plan.csv`` and ``pilot.csv`` go to ``--out``.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from baselines import BASELINES
from experiments.study import (
    check_families,
    check_labels,
    family_of,
    read_label_set,
    set_families,
)
from features.files import atomic_path, write_text_atomic
from oracle.simulator.workloads import family_names
from ripplecp_cli import CommandLineError, opt, progress, run
from ripplecp_policy.budget import HAZARDS, check_budget_specs
from ripplecp_policy.registry import entry
from ripplecp_policy.roles import Role

if TYPE_CHECKING:
    from labelsets.tables import LabelSet

PROG = "python -m experiments.power"
#: the default study's simulated families (experiments.matched_budget.FAMILIES, whose module
#: this one may not import): every registered family
FAMILIES = tuple(family_names())
REFERENCES = tuple(e.name for e in BASELINES if e.role is Role.ONLINE)


@dataclass(frozen=True)
class Args:
    """Plan repositories x tasks x repetitions for an effect, from a label set or a pilot."""

    labels: str | None = opt(None, check=check_labels, metavar="DIR|NAME")
    """the pilot: a label-set directory or a shipped set's name (``shipped``); default: a
    small simulated study of --families"""
    families: tuple[str, ...] = opt(FAMILIES, metavar="F")
    """simulated families to pilot; with --labels, the set's families to plan (left at the
    default: all of them)"""
    repos: int | None = opt(None, min=2)
    """pilot repositories per family (simulated: default 8; --labels: its first N, default all)"""
    tasks_per_repo: int | None = opt(None, min=1)
    """pilot tasks per repository (simulated: default 4; --labels: its first M, default all)"""
    repetitions: int = opt(2, min=2)
    """repetitions of every recovery cell in a simulated pilot (>= 2: the halves measure the
    repetition noise)"""
    budget: str = opt("count:1", check=lambda s: check_budget_specs([s]), metavar="SPEC")
    """the budget the verdict is at (the primary budget): count:N, seconds:S|Kx, bytes:B|Kx"""
    reference: str = opt("first-boundary", choices=REFERENCES)
    """the bar: the online baseline the limit's gain is measured against"""
    effect: float | None = opt(None, min=0.0)
    """the effect to detect, seconds per task (default: each family's measured limit gain)"""
    alpha: float = opt(0.05, min=1e-12, max=0.5)
    """the family-wise two-sided level"""
    tests: int | None = opt(None, min=1)
    """tests in the confirmatory family (the level applied is alpha / tests; default: 2 per
    planned family, both bars)"""
    tasks_options: tuple[int, ...] = opt((1, 2, 4, 8, 16), min=1, metavar="M")
    """tasks per repository to plan for"""
    repetition_options: tuple[int, ...] = opt((1, 2, 4), min=1, metavar="R")
    """repetitions of every recovery cell to plan for"""
    hazard: str = opt("uniform", choices=HAZARDS)
    """failure distribution the objective is taken under"""
    seed: int = opt(0, min=0)
    """seed of the simulated pilot and the reference policy"""
    out: str = opt("out/power", metavar="PATH")
    """where plan.csv and pilot.csv go"""

    def __post_init__(self) -> None:
        if self.labels is None:  # a label set's families are checked on loading
            check_families(self.families)


def main(argv: list[str] | None = None) -> int:
    return run(study, Args, argv, prog=PROG)


def study(args: Args) -> int:
    """The plan (the module docstring) for checked arguments."""
    import pandas as pd

    from oracle.simulator import simulate_label_set
    from ripplecp_policy.planning import cheapest, estimate, pilot_differences, plan, subsample
    from ripplecp_policy.policy import Setting, fold_settings

    out = Path(args.out)

    # 1. The pilots: one label set per family.
    pilots: dict[str, LabelSet] = {}
    if args.labels:
        full = read_label_set(args.labels)
        for fam in set_families(full, args.families, FAMILIES):
            pilots[fam] = subsample(family_of(full, fam), args.repos, args.tasks_per_repo)
        source = f"label set {args.labels}"
    else:
        for fam in progress(args.families, desc="simulate", leave=False):
            pilots[fam] = simulate_label_set(fam, n_repos=args.repos or 8, tasks_per_repo=args.tasks_per_repo or 4,
                                             design="full", repetitions=args.repetitions, seed=args.seed)
        source = f"simulated pilot, seed {args.seed}"
    tests = args.tests or 2 * len(pilots)
    level = args.alpha / tests
    out.mkdir(parents=True, exist_ok=True)

    # 2. Per family: the pilot's differences (reference fitted leave-one-repository-out, the
    #    cross-fitted limit), their variance components, and every design option.
    ref = entry(args.reference).make(seed=args.seed)
    pilot_rows, plan_rows, lines = [], [], []
    for fam, ls in progress(list(pilots.items()), desc="families"):
        n_repos = ls.tasks["repo"].nunique()
        if n_repos < 2:
            raise CommandLineError(f"family {fam!r}: the pilot has {n_repos} repository; a plan needs >= 2")
        (label, setting), = fold_settings([args.budget], ls, args.hazard)
        reps = int(ls.recovery["repetition"].max())
        diffs = pilot_differences(ls, Setting(setting.budget, setting.hazard), ref, seed=args.seed)
        est = estimate(diffs, reps)
        effect = args.effect if args.effect is not None else est.gain
        m_own = max(1, round(est.tasks_per_repo))
        # one repetition per cell: its noise cannot be told from the task-level spread (it
        # stays inside 'within'), so more repetitions cannot be planned for from this pilot
        rep_options = sorted({*args.repetition_options, reps}) if reps >= 2 else [reps]
        rows = plan(est, effect, alpha=level, tasks_per_repo=sorted({*args.tasks_options, m_own}),
                    repetitions=rep_options)
        own = next(r for r in rows if r.tasks_per_repo == m_own and r.repetitions == reps)
        best = cheapest(rows)
        pilot_mde = est.mde(est.n_repos, m_own, reps, alpha=level)
        pilot_rows.append(dict(family=fam, budget=label, reference=args.reference, **est.as_dict(),
                               effect=effect, alpha=level, tests=tests, mde_pilot=pilot_mde,
                               own_n_repos=own.n_repos, own_n_tasks=own.n_tasks))
        plan_rows += [dict(family=fam, **r.as_dict()) for r in rows]
        table = pd.DataFrame([r.as_dict() for r in rows])
        table["n_repos"] = table["n_repos"].map(lambda n: str(n) if n else "> 100,000")
        table["mde"] = table["mde"].map(lambda x: "-" if not math.isfinite(x) else f"{x:.3g}")
        noise = (f"one repetition's noise {est.repetition:.3g} (s^2)" if reps >= 2 else
                 "one repetition's noise: not measured (1 repetition per cell: it is inside 'within', "
                 "and designs with more repetitions are not planned)")
        lines += [
            "",
            f"== {fam}: pilot {est.n_repos} repositories x {est.n_tasks} tasks x {reps} repetitions "
            f"({source}), budget {label}, reference {args.reference} ==",
            f"  limit gain over {args.reference}: {est.gain:+.3g} s/task; variance between repositories "
            f"{est.between:.3g}, within {est.within:.3g} (s^2); {noise}",
            *(["  sparse design: the cells it did not execute are priced by the recovery model "
               "(labelsets.recovery_model); the limit is the placement that model (fitted on the "
               "other repositories) finds best, scored on each task's own prices: an unbiased price "
               "of that placement, no better than what the model can find"]
              if ls.provenance.get("design") == "sparse" else []),
            f"  effect {effect:.3g} s at alpha {args.alpha:g}/{tests} = {level:.3g}, 80 % power: the pilot's "
            f"own size detects {pilot_mde:.3g} s",
            "  " + table[["tasks_per_repo", "repetitions", "n_repos", "n_tasks", "mde"]]
            .to_string(index=False).replace("\n", "\n  "),
        ]
    text = "\n".join(lines)
    print(text)

    # 3. One line per family: what it needs.
    summary = ["", f"== what each family needs to detect its effect at alpha {args.alpha:g}/{tests} "
               "(80 % power) =="]
    for p in pilot_rows:
        fam_rows = [r for r in plan_rows if r["family"] == p["family"] and r["n_repos"] > 0]
        best = min(fam_rows, key=lambda r: (r["n_tasks"] * r["repetitions"], r["repetitions"]), default=None)
        own = (f"{p['own_n_tasks']} tasks ({p['own_n_repos']} repositories x "
               f"{round(p['n_tasks'] / p['n_repos'])} tasks, {p['repetitions']} repetitions)"
               if p["own_n_repos"] else "no design of <= 100,000 repositories")
        cheap = (f"; fewest task-repetitions: {best['n_tasks']} tasks ({best['n_repos']} x {best['tasks_per_repo']}, "
                 f"{best['repetitions']} repetitions)" if best else "")
        have = "" if p["mde_pilot"] > p["effect"] else " (the pilot itself reaches it)"
        summary.append(f"  {p['family']}: effect {p['effect']:.3g} s, has {p['n_tasks']} tasks{have}; "
                       f"needs {own}{cheap}")
    print("\n".join(summary))
    for name, frame in (("pilot.csv", pd.DataFrame(pilot_rows)), ("plan.csv", pd.DataFrame(plan_rows))):
        with atomic_path(out / name) as tmp:
            frame.to_csv(tmp, index=False)
    write_text_atomic(out / "report.txt", text + "\n" + "\n".join(summary) + "\n")
    print(f"\noutputs in {out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
