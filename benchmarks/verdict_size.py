"""Size and coverage of the verdicts' test (targets: false "yes" <= 5 %, coverage >= 0.93).

    python benchmarks/verdict_size.py                 # 200 A/A studies, 400 per world cell
    python benchmarks/verdict_size.py --quick         # CI-sized

Two checks of :func:`ripplecp_policy.verdicts.compare`'s decision (the cluster-robust t over
repositories, :func:`ripplecp_policy.power.cluster_test`), each over many simulated studies:

1. **A policy against an identical copy of itself.** Per study (seed s), a default-sized
   simulated family (its 8 repositories x 4 tasks; the families taken in turn) is
   evaluated at one checkpoint with the random baseline (the study's own 10 seeds) and with
   an identical copy of it on 10 other seeds; ``compare`` judges the copy against the
   original. The true difference is 0 by construction (the two are exchangeable), so a
   "yes" is false; the rate must stay <= 5 % (its nominal value is 2.5 %: "yes" is the
   negative side of a two-sided 5 % test), and the 95 % interval must cover 0.
2. **Zero-shift studies in a bootstrap world.** Per family, a large sample (8 repositories
   x ``--world-tasks`` tasks, a seed no study uses) is priced under first-boundary and the
   policies whose differences to it a study reports (no-checkpoint, fixed-k, time-tuned,
   the xgboost advantage regressor, all fitted on a separate default-sized training sample;
   and the clairvoyant optimum), at 1 and 2 checkpoints. Its per-task differences are the
   world: a study draws 8 repositories with replacement and 4 tasks with replacement within
   each (the study's own design), and the world's truth is its repository-balanced mean.
   Coverage: how often the study's 95 % interval contains the truth. Size: the same draws
   in the world shifted to truth 0 — every nonzero difference moved by the same amount, so
   the tasks where the two policies agree stay exactly 0 (shifting those too would turn an
   all-zero draw into a constant nonzero one, which the test rightly calls certain) —,
   counting "yes". A draw whose differences are all equal is bounded as the verdicts bound
   it: the unseen share of its repositories times the largest of its tasks' costs
   (``ripplecp_policy.power.cluster_test``'s ``bound``; ``degenerate`` says how often).
   Real shapes — most tasks exactly 0, a few large gains — without refitting anything per
   study, so thousands of studies take seconds.

Prints one table per check and the verdict, and beside it the same worlds under Hall's skew
correction (an option of ``cluster_test`` the verdicts do not take: it costs power); ``--out``
writes the CSVs.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import clone

from baselines import (
    ClairvoyantOptimum,
    FirstBoundary,
    FixedK,
    NoCheckpoint,
    RandomPolicy,
    TimeBased,
)
from oracle.simulator import simulate_label_set
from oracle.simulator.workloads import family_names
from ripplecp_cli import choice_error, opt, progress, run
from ripplecp_policy.evaluation import Evaluator
from ripplecp_policy.learned import AdvantageRegressorPolicy
from ripplecp_policy.policy import Budget, PlacementPolicy, Setting
from ripplecp_policy.power import cluster_test
from ripplecp_policy.verdicts import VerdictClass, compare

PROG = "python benchmarks/verdict_size.py"
FAMILIES = ("swe-pilot", "dependency-resolution", "multi-stage-build", "long-horizon")
SIZE_TARGET, COVERAGE_TARGET, ALPHA = 0.05, 0.93, 0.05
#: seeds of the world samples and their training samples, apart from every study's
WORLD_SEED, TRAIN_SEED = 7_000_001, 7_000_003


@dataclass(frozen=True)
class Args:
    """Size (false "yes" rate) and coverage of the verdicts' test over simulated studies."""

    families: tuple[str, ...] = opt(FAMILIES, metavar="F")
    """simulated workload families (the A/A studies take them in turn)"""
    aa_studies: int = opt(200, min=0)
    """A/A studies: a policy against an identical copy of itself (>= 200 for the claim)"""
    world_studies: int = opt(400, min=1)
    """zero-shift and coverage studies per (family, kind, budget) of the bootstrap world"""
    world_tasks: int = opt(24, min=2)
    """tasks per repository of each family's world sample"""
    repos: int = opt(8, min=2)
    """repositories per study (drawn with replacement from the world's 8)"""
    tasks_per_repo: int = opt(4, min=1)
    """tasks per repository per study"""
    seed: int = opt(0, min=0)
    """first A/A study seed; the world draws use it too"""
    quick: bool = False
    """CI-sized: one family, 6 A/A studies, 50 world studies, 4 world tasks per repository,
    no learned policy (options given explicitly win)"""
    learned: bool = True
    """include the xgboost advantage regressor among the world's kinds"""
    out: str | None = opt(None, metavar="PATH")
    """folder for aa.csv and world.csv (default: print only)"""
    jobs: int = opt(2, min=1)
    """worker processes (results do not depend on it)"""

    def __post_init__(self) -> None:
        known = family_names()
        for fam in self.families:
            if fam not in known:
                raise choice_error(fam, known, "--families")


QUICK = dict(families=("long-horizon",), aa_studies=6, world_studies=50, world_tasks=4, learned=False)


def sized(args: Args) -> Args:
    """``args`` with --quick's sizes for every option left at its default."""
    if not args.quick:
        return args
    default = Args()
    return replace(args, **{k: v for k, v in QUICK.items() if getattr(args, k) == getattr(default, k)})


def aa_study(fam: str, seed: int) -> dict[str, Any]:
    """One study of a policy against an identical copy of itself (random baseline, 10 seeds
    each, disjoint): the verdict and its interval."""
    ls = simulate_label_set(fam, design="full", repetitions=2, seed=seed)
    setting = Setting(Budget("count", 1))
    ev = Evaluator(ls)
    pol = RandomPolicy().fit(ls, setting)
    a = ev.evaluate(pol, ls.task_ids, setting, seeds=range(seed * 20, seed * 20 + 10))
    b = ev.evaluate(clone(pol).fit(ls, setting), ls.task_ids, setting,
                    seeds=range(seed * 20 + 10, seed * 20 + 20)).assign(policy="random (copy)")
    (v,) = compare(pd.concat([a, b], ignore_index=True), "random", policies=["random (copy)"])
    return dict(family=fam, seed=seed, diff=v.diff, low=v.low, high=v.high, p=v.p_value,
                verdict=str(v.verdict_class), n_repos=v.n_repos, mde=v.mde,
                false_yes=v.verdict_class == VerdictClass.YES, covered=v.low <= 0.0 <= v.high)


def kinds(learned: bool) -> list[PlacementPolicy]:
    """The reference and the policies whose differences to it make the world."""
    out: list[PlacementPolicy] = [FirstBoundary(), NoCheckpoint(), FixedK(), TimeBased(mode="tuned"),
                                  ClairvoyantOptimum()]
    if learned:
        out.append(AdvantageRegressorPolicy(model="xgboost", n_estimators=100, random_state=0))
    return out


def world(fam: str, args: Args) -> pd.DataFrame:
    """The family's world: per (kind, budget, task) the difference to first-boundary."""
    train = simulate_label_set(fam, design="full", repetitions=2, seed=TRAIN_SEED)
    big = simulate_label_set(fam, tasks_per_repo=args.world_tasks, design="full", repetitions=2,
                             seed=WORLD_SEED)
    ev = Evaluator(big)
    rows = []
    for k in (1, 2):
        setting = Setting(Budget("count", k))
        res = {p.name: ev.evaluate(clone(p).fit(train, setting), big.task_ids, setting)
               .set_index("task_id") for p in kinds(args.learned)}
        ref = res.pop("first-boundary")
        for name, r in res.items():
            rc = ref["total_failure_cost"].reindex(r.index)
            d = r["total_failure_cost"] - rc
            rows.append(pd.DataFrame(dict(family=fam, budget=f"{k}ckpt", kind=f"{name} - first-boundary",
                                          task_id=r.index, repo=r["repo"].to_numpy(), diff=d.to_numpy(),
                                          cost=r["total_failure_cost"].to_numpy(float),
                                          ref_cost=rc.to_numpy(float))))
    return pd.concat(rows, ignore_index=True)


def world_studies(w: pd.DataFrame, args: Args, seed: int) -> dict[str, Any]:
    """Draw ``args.world_studies`` studies from one world cell: coverage of its truth, and
    the false "yes" rate with the truth shifted to 0."""
    rng = np.random.default_rng(seed)
    by_repo = [g.to_numpy(float) for _, g in w.groupby("repo", sort=True)["diff"]]
    # per task the largest difference it could have (the larger cost): the verdicts' bound
    cap = [np.maximum(g["cost"], g["ref_cost"]).to_numpy(float) for _, g in w.groupby("repo", sort=True)]
    truth = float(np.mean([g.mean() for g in by_repo]))
    nonzero = float(np.mean([np.mean(g != 0.0) for g in by_repo]))
    shift = truth / nonzero if nonzero > 0 else 0.0  # moves the world's truth to 0
    null_by_repo = [np.where(g != 0.0, g - shift, 0.0) for g in by_repo]
    n, m = args.repos, args.tasks_per_repo
    labels = np.repeat(np.arange(n), m)
    covered = false_yes = rejected = degenerate = covered_nd = covered_hall = false_yes_hall = 0
    widths = []
    for _ in range(args.world_studies):
        picks = rng.integers(0, len(by_repo), n)
        within = [rng.integers(0, len(by_repo[i]), m) for i in picks]
        d = np.concatenate([by_repo[i][j] for i, j in zip(picks, within, strict=True)])
        bound = float(np.concatenate([cap[i][j] for i, j in zip(picks, within, strict=True)]).max())
        t = cluster_test(d, labels, bound=bound)
        hit = t.low - 1e-9 <= truth <= t.high + 1e-9
        covered += hit
        degenerate += math.isfinite(t.bound) or t.se == 0.0
        covered_nd += hit and not (math.isfinite(t.bound) or t.se == 0.0)
        widths.append(t.high - t.low)
        h = cluster_test(d, labels, bound=bound, skew=True)
        covered_hall += h.low - 1e-9 <= truth <= h.high + 1e-9
        zd = np.concatenate([null_by_repo[i][j] for i, j in zip(picks, within, strict=True)])
        z = cluster_test(zd, labels, bound=bound)
        false_yes += z.estimate < 0 and z.p_value < ALPHA
        rejected += z.p_value < ALPHA
        zh = cluster_test(zd, labels, bound=bound, skew=True)
        false_yes_hall += zh.estimate < 0 and zh.p_value < ALPHA
    s = args.world_studies
    nd = s - degenerate
    return dict(truth=truth, studies=s, coverage=covered / s,
                coverage_nondegenerate=covered_nd / nd if nd else math.nan, false_yes=false_yes / s,
                rejected=rejected / s, degenerate=degenerate / s, mean_width=float(np.mean(widths)),
                coverage_hall=covered_hall / s, false_yes_hall=false_yes_hall / s,
                share_zero=float(np.mean(w["diff"].to_numpy() == 0.0)))


def main(argv: list[str] | None = None) -> int:
    """``python benchmarks/verdict_size.py``: check every argument, then measure."""
    return run(measure, Args, argv, prog=PROG)


def _parallel(fn: Any, calls: list[tuple[Any, ...]], jobs: int, desc: str) -> list[Any]:
    n = min(jobs, len(calls))
    if n > 1:
        from joblib import Parallel, delayed

        it: Any = Parallel(n_jobs=n, return_as="generator")(delayed(fn)(*c) for c in calls)
    else:
        it = (fn(*c) for c in calls)
    return list(progress(it, total=len(calls), desc=desc))


def measure(args: Args) -> int:
    """The measurement (the module docstring) for checked arguments."""
    args = sized(args)
    t0 = time.perf_counter()
    fams = list(args.families)
    aa = pd.DataFrame(_parallel(aa_study, [(fams[i % len(fams)], args.seed + i) for i in range(args.aa_studies)],
                                args.jobs, "A/A studies"))
    worlds = pd.concat(_parallel(world, [(f, args) for f in fams], args.jobs, "worlds"), ignore_index=True)
    cells = []
    for i, ((fam, budget, kind), w) in enumerate(worlds.groupby(["family", "budget", "kind"], sort=False)):
        cells.append(dict(family=fam, budget=budget, kind=kind, **world_studies(w, args, args.seed + i)))
    cells_df = pd.DataFrame(cells)
    lines = [f"== size and coverage of the verdicts' test (cluster-robust t, CR3, t(k-1), alpha {ALPHA}); "
             f"took {time.perf_counter() - t0:.1f} s =="]
    if len(aa):
        lines += [
            f"1. a policy against an identical copy of itself: {len(aa)} studies "
            f"({', '.join(f'{f} {n}' for f, n in aa['family'].value_counts(sort=False).items())}), "
            f"{args.repos} repositories x {args.tasks_per_repo} tasks",
            f"   false 'yes' {aa['false_yes'].mean():.3f} (target <= {SIZE_TARGET}; nominal 0.025), "
            f"interval covers 0 in {aa['covered'].mean():.3f} (target >= {COVERAGE_TARGET}); "
            f"median MDE {aa['mde'].median():.3g} s",
        ]
    agg = cells_df.groupby("kind", sort=False).agg(
        cells=("studies", "size"), studies=("studies", "sum"), coverage=("coverage", "mean"),
        coverage_nondegenerate=("coverage_nondegenerate", "mean"),
        false_yes=("false_yes", "mean"), rejected=("rejected", "mean"),
        degenerate=("degenerate", "mean"), share_zero=("share_zero", "mean"),
        coverage_hall=("coverage_hall", "mean"), false_yes_hall=("false_yes_hall", "mean"))
    lines += [f"2. bootstrap worlds: {args.world_studies} studies per (family, kind, budget), "
              f"{args.repos} repositories x {args.tasks_per_repo} tasks drawn from {args.world_tasks} "
              "per repository",
              "   " + agg.to_string(float_format=lambda x: f"{x:.3f}").replace("\n", "\n   "),
              "   per cell:",
              "   " + cells_df.drop(columns=["studies"]).to_string(
                  index=False, float_format=lambda x: f"{x:.3f}").replace("\n", "\n   ")]
    overall_cov = float(cells_df["coverage"].mean())
    overall_size = float(cells_df["false_yes"].mean())
    ok = overall_cov >= COVERAGE_TARGET and overall_size <= SIZE_TARGET and (
        aa.empty or (aa["false_yes"].mean() <= SIZE_TARGET and aa["covered"].mean() >= COVERAGE_TARGET))
    lines.append(f"overall: world coverage {overall_cov:.3f} "
                 f"({cells_df['coverage_nondegenerate'].mean():.3f} of the draws whose differences "
                 f"are not all equal), world false 'yes' {overall_size:.3f}"
                 + (f", A/A false 'yes' {aa['false_yes'].mean():.3f}" if len(aa) else "")
                 + f" — {'targets met' if ok else 'a target is missed'}")
    lines.append(f"   (Hall's skew correction, an option the verdicts do not take: coverage "
                 f"{cells_df['coverage_hall'].mean():.3f}, false 'yes' {cells_df['false_yes_hall'].mean():.3f}, "
                 f"worst kind {agg['false_yes_hall'].max():.3f} against {agg['false_yes'].max():.3f})")
    print("\n".join(lines))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        aa.to_csv(out / "aa.csv", index=False)
        cells_df.to_csv(out / "world.csv", index=False)
        print(f"outputs in {out}/")
    return 0 if math.isfinite(overall_cov) else 1


if __name__ == "__main__":
    sys.exit(main())
