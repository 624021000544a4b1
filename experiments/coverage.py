"""Do the study's intervals cover? The 95 % interval of a default-sized study against the
difference measured on a large fresh sample of the same simulated family.

    python -m experiments.coverage                  # 20 seeds, every simulated family
    python -m experiments.coverage --quick          # CI-sized: one family, a few seeds

For every seed it simulates a default-sized study of each family (the family's repositories
and tasks per repository, as ``python -m experiments.matched_budget`` does), splits it
leave-one-repository-out, fits the policies of every difference kind on the training
repositories at each budget and evaluates them on the held-out repository, then computes
each reported difference (policy - first-boundary, paired per task) with the study's own
interval (:func:`ripplecp_policy.verdicts.paired_contrast`: the cluster-robust t over
repositories that decides the verdicts). The same fitted policies are also evaluated on fresh
samples of the held-out repository (``--fresh-draws`` other seeds, each of the study's own size:
the same task indices, so the same population of tasks — the simulator's step counts follow
a task's index, and a sample of 8 tasks per repository had more long tasks than the study's
6, a truth 2-7 s off that read as under-coverage): pooled over every
seed, that is the difference the study estimates — the expected held-out difference of the
procedure at the default size — measured on seeds x repositories x fresh tasks. Coverage is
the fraction of (seed, family, budget) intervals that contain it, per difference kind;
the target is >= 0.93. A kind below it whose exact 95 % interval (Clopper-Pearson over
its intervals) still reaches 0.93 is reported "within noise", not a miss: 20 seeds give
160 intervals a kind, a binomial SE of ~0.02. Beside it, per kind and family,
``se_ratio_min``: the smallest over the budgets of RMS(the interval's SE) / SD(the study's
difference over seeds). The second is
the estimate's own SE, so a ratio well below 1 says the interval is narrower than the study
varies (e.g. a tuned policy whose fit moves between studies: each fold's policy is fitted
on nearly the same repositories, so the folds move together, and an interval over held-out
repositories does not see it); with 20 seeds it is itself noisy (about +-16 %).

Kept cheap by default with the simple baselines (no learned fits): no-checkpoint (fits
nothing), fixed-k and time-tuned (tuned on the training folds), and the clairvoyant optimum
(an offline limit whose distance to first-boundary the study reports). ``--kinds`` takes any
registered policy instead, the learned ones included (``--kinds ridge xgboost``: each made
by its registry factory at the seed, its default parameters, no Optuna search), so the
intervals of the verdicts that matter can be checked where their fits vary most.

    python -m experiments.coverage --kinds time-tuned ridge --families multi-stage-build
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from baselines import BASELINES
from experiments.study import FAMILIES, REFERENCE, check_families, sized
from ripplecp_cli import opt, progress, run
from ripplecp_policy.budget import check_budget_specs
from ripplecp_policy.learned import LEARNED
from ripplecp_policy.registry import entry
from ripplecp_policy.roles import Role

if TYPE_CHECKING:  # type names only: these load where they are used, so --help stays fast
    import pandas as pd

    from labelsets.tables import LabelSet
    from ripplecp_policy.policy import PlacementPolicy

PROG = "python -m experiments.coverage"
TARGET = 0.93
#: the difference kinds checked by default (registry keys; each against first-boundary)
DEFAULT_KINDS = ("no-checkpoint", "fixed-k", "time-tuned", "optimum")
#: every kind --kinds takes: each registered policy at a matched budget but the reference
KINDS = tuple(e.key for e in (*BASELINES, *LEARNED) if e.key != REFERENCE and e.role is not Role.REFERENCE)
#: the fresh samples' seeds are offset from the study's (k-th sample: seed + (k + 1) x this)
#: so no task is shared
FRESH_SEED_OFFSET = 1_000_003


@dataclass(frozen=True)
class Args:
    """How often a default-sized study's 95 % interval covers the difference measured on a
    large fresh sample of the same simulated family, per difference kind. (Its own
    ``seeds``, not experiments.study.StudyArgs: each seed is a whole study.)"""

    #: --quick: one family, 3 seeds, one budget, one fresh sample, 500 resamples
    QUICK: ClassVar[dict[str, Any]] = dict(families=("long-horizon",), seeds=(0, 1, 2), budgets=("count:1",),
                                           fresh_draws=1, n_resamples=500)

    families: tuple[str, ...] = opt(FAMILIES, metavar="F")
    """simulated workload families"""
    seeds: tuple[int, ...] = opt(tuple(range(20)), min=0, metavar="N")
    """study seeds (each a fresh default-sized study; >= 20 for the coverage claim)"""
    budgets: tuple[str, ...] = opt(("count:1", "count:2"), check=check_budget_specs, metavar="SPEC")
    """budgets: count:N, seconds:S or seconds:Kx, bytes:B or bytes:Kx"""
    kinds: tuple[str, ...] = opt(DEFAULT_KINDS, choices=KINDS, metavar="KEY")
    """policies whose difference to first-boundary is checked (registry keys, learned ones
    included)"""
    fresh_draws: int = opt(2, min=1)
    """fresh samples per seed, each of the study's own size (pooled over seeds: the truth)"""
    n_resamples: int = opt(2_000, min=100)
    """bootstrap resamples per interval"""
    quick: bool = False
    """CI-sized: one family, 3 seeds, one budget, one fresh sample, 500
    resamples (options given explicitly win)"""
    out: str | None = opt(None, metavar="PATH")
    """folder for coverage.csv and intervals.csv (default: print only)"""
    jobs: int = opt(2, min=1)
    """worker processes over (family, seed) (results do not depend on it)"""

    def __post_init__(self) -> None:
        check_families(self.families)
        if not self.seeds:
            raise ValueError("argument --seeds: give at least one seed")
        twice = sorted({k for k in self.kinds if self.kinds.count(k) > 1})
        if twice:
            raise ValueError(f"argument --kinds: {twice[0]!r} given twice")


#: --quick's sizes (tests and the README read them here)
QUICK = Args.QUICK


def kinds(keys: tuple[str, ...] = DEFAULT_KINDS, seed: int = 0) -> list[PlacementPolicy]:
    """The reference and the policies whose difference to it is a reported kind (each made by
    its registry factory at ``seed``)."""
    # imported here as well: a worker process running this function (pickled by value from
    # ``python -m``'s __main__) has not imported the modules that register the policies
    import baselines  # noqa: F401
    import ripplecp_policy.learned  # noqa: F401

    return [entry(k).make(seed=seed) for k in (REFERENCE, *keys)]


def one_study(fam: str, seed: int, args: Args) -> pd.DataFrame:
    """One default-sized study of ``fam`` at ``seed``: per (kind, budget) the study's
    difference and interval, and the same fitted policies' difference on a fresh sample of
    each held-out repository (its sum and task count, to be pooled over seeds)."""
    import pandas as pd
    from sklearn.base import clone

    from oracle.simulator import simulate_label_set
    from ripplecp_policy.evaluation import evaluator_for
    from ripplecp_policy.policy import fold_settings
    from ripplecp_policy.splits import leave_one_repo_out
    from ripplecp_policy.verdicts import paired_contrast

    ls = simulate_label_set(fam, design="full", repetitions=2, seed=seed)
    fresh = fresh_samples(fam, seed, args.fresh_draws)
    evs = [evaluator_for(f) for f in fresh]
    ev = evaluator_for(ls)
    fresh_by_repo = [f.tasks.groupby("repo")["task_id"].apply(list).to_dict() for f in fresh]
    study, truth = [], []
    for fold in leave_one_repo_out(ls):
        train = ls.subset(fold.train_tasks)
        for proto in kinds(args.kinds, seed):
            for label, setting in fold_settings(args.budgets, train):
                pol = clone(proto).fit(train, setting)
                study.append(ev.evaluate(pol, list(fold.test_tasks), setting).assign(budget=label))
                # the fresh sample runs under the fold's setting (a relative budget resolved
                # on the study's training tasks), the one the policy was fitted for
                for ev_fresh, by_repo in zip(evs, fresh_by_repo, strict=True):
                    truth.append(ev_fresh.evaluate(pol, by_repo[fold.held_out], setting).assign(budget=label))
    res, tru = pd.concat(study, ignore_index=True), pd.concat(truth, ignore_index=True)
    rows = []
    for budget, g in res.groupby("budget", sort=False):
        ref = g[g["policy"] == REFERENCE]
        t = tru[tru["budget"] == budget]
        t_ref = t[t["policy"] == REFERENCE].set_index("task_id")["total_failure_cost"]
        for policy, pg in g.groupby("policy", sort=False):
            if policy == REFERENCE:
                continue
            c = paired_contrast(pg, ref, n_resamples=args.n_resamples, seed=seed)
            tp = t[t["policy"] == policy].set_index("task_id")["total_failure_cost"]
            d = (tp - t_ref.reindex(tp.index)).to_numpy(float)
            rows.append(dict(family=fam, seed=seed, budget=budget, kind=f"{policy} - {REFERENCE}",
                             diff=c["diff"] if c else math.nan, low=c["low"] if c else math.nan,
                             high=c["high"] if c else math.nan, se=c["se"] if c else math.nan,
                             fresh_sum=float(d.sum()),
                             fresh_n=int(d.size)))
    return pd.DataFrame(rows)


def fresh_samples(fam: str, seed: int, draws: int) -> list[LabelSet]:
    """``draws`` fresh samples for the study of ``fam`` at ``seed``: each the study's own
    size (repositories, task indices) at its own seed, so its tasks come from the same
    population as the study's and share none of them."""
    from oracle.simulator import simulate_label_set

    return [simulate_label_set(fam, design="full", repetitions=2, seed=seed + FRESH_SEED_OFFSET * (k + 1))
            for k in range(draws)]


def coverage_table(intervals: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(per-interval frame with the truth and ``covered``, coverage per kind, coverage per
    kind x family). The truth of a (family, budget, kind) is its fresh difference pooled
    over every seed."""
    key = ["family", "budget", "kind"]
    pooled = intervals.groupby(key, sort=False)[["fresh_sum", "fresh_n"]].sum()
    truth = (pooled["fresh_sum"] / pooled["fresh_n"]).rename("truth")
    iv = intervals.join(truth, on=key)
    iv["covered"] = (iv["low"] <= iv["truth"] + 1e-9) & (iv["truth"] - 1e-9 <= iv["high"])
    iv["width"] = iv["high"] - iv["low"]
    per_kind = iv.groupby("kind", sort=False).agg(
        intervals=("covered", "size"), covered=("covered", "sum"), coverage=("covered", "mean"),
        mean_width=("width", "mean"))
    per_kind["target"] = TARGET
    per_kind["meets_target"] = per_kind["coverage"] >= TARGET
    # a coverage below the target by less than its own noise is not a miss: with 160
    # intervals the binomial SE is ~0.02, so 0.925 cannot tell 0.93 from 0.95
    ci = [_coverage_ci(int(k), int(n)) for k, n in zip(per_kind["covered"], per_kind["intervals"], strict=True)]
    per_kind["ci_low"], per_kind["ci_high"] = [c[0] for c in ci], [c[1] for c in ci]
    per_kind["judged"] = [
        "yes" if ok else "no" if hi < TARGET else "within noise"
        for ok, hi in zip(per_kind["meets_target"], per_kind["ci_high"], strict=True)]
    per_family = iv.groupby(["kind", "family"], sort=False).agg(
        intervals=("covered", "size"), coverage=("covered", "mean"),
        truth=("truth", "mean"), mean_diff=("diff", "mean"), mean_width=("width", "mean"))
    if "se" in iv:  # how wide the interval says the study is, against how it varies
        cells = iv.groupby(["kind", "family", "budget"], sort=False).agg(
            sd=("diff", "std"), ms=("se", lambda x: float((x ** 2).mean())))
        ratio = (cells["ms"] ** 0.5 / cells["sd"]).where(cells["sd"] > 0)
        per_family["se_ratio_min"] = ratio.groupby(level=["kind", "family"], sort=False).min()
    return iv, per_kind.join(per_family.groupby("kind").size().rename("families")), per_family


def _coverage_ci(covered: int, n: int) -> tuple[float, float]:
    """The exact (Clopper-Pearson) 95 % interval of a coverage of ``covered`` of ``n``."""
    from scipy.stats import binomtest

    ci = binomtest(covered, n).proportion_ci(0.95, method="exact")
    return float(ci.low), float(ci.high)


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments.coverage``: check every argument, then measure."""
    return run(measure, Args, argv, prog=PROG)


def measure(args: Args) -> int:
    """The measurement (the module docstring) for checked arguments."""
    import pandas as pd

    args = sized(args)
    t0 = time.perf_counter()
    jobs = [(fam, s) for fam in args.families for s in args.seeds]
    n = min(args.jobs, len(jobs))
    if n > 1:
        from joblib import Parallel, delayed

        it: Any = Parallel(n_jobs=n, return_as="generator")(
            delayed(one_study)(fam, s, args) for fam, s in jobs)
    else:
        it = (one_study(fam, s, args) for fam, s in jobs)
    frames = list(progress(it, total=len(jobs), desc="studies (family x seed)"))
    iv, per_kind, per_family = coverage_table(pd.concat(frames, ignore_index=True))
    print(f"\n== coverage of the verdicts' 95% interval (cluster-robust t over repositories, CR3, "
          f"t(k-1)): {len(args.seeds)} seeds x "
          f"{len(args.families)} families x {len(args.budgets)} budgets; truth = the same fitted "
          f"policies on {args.fresh_draws} fresh sample(s) of the study's size per seed, "
          f"pooled over seeds; target >= {TARGET} ==")
    show = per_kind.copy()
    show["coverage"] = show["coverage"].map(lambda x: f"{x:.3f}")
    show["mean_width"] = show["mean_width"].map(lambda x: f"{x:.1f}")
    show["ci95"] = [f"[{lo:.3f}, {hi:.3f}]" for lo, hi in zip(show["ci_low"], show["ci_high"], strict=True)]
    show["meets_target"] = show["judged"]
    show = show.drop(columns=["covered", "ci_low", "ci_high", "judged"])
    print("  " + show.to_string().replace("\n", "\n  "))
    print("\n  per family:")
    pf = per_family.copy()
    for c, fmt in (("truth", "{:+.1f}"), ("mean_diff", "{:+.1f}"), ("mean_width", "{:.1f}"),
                   ("se_ratio_min", "{:.2f}")):
        if c not in pf:
            continue
        pf[c] = pf[c].map(fmt.format)
    pf["coverage"] = pf["coverage"].map(lambda x: f"{x:.3f}")
    print("  " + pf.to_string().replace("\n", "\n  "))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        iv.to_csv(out / "intervals.csv", index=False)
        per_kind.to_csv(out / "coverage.csv")
        per_family.to_csv(out / "coverage_by_family.csv")
        print(f"\noutputs in {out}/")
    below = per_kind.index[per_kind["judged"] == "no"].tolist()
    near = per_kind.index[per_kind["judged"] == "within noise"].tolist()
    said = ("every kind meets the target" if not below and not near else "; ".join(x for x in (
        below and "below the target: " + ", ".join(below),
        near and "below the target within the check's own noise (its 95 % interval reaches "
                 f"{TARGET}; more seeds would tell): " + ", ".join(near)) if x) + "; the rest meet it")
    print(f"\n{said}; took {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
