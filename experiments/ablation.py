"""The ripple question (paper, Appendices C and I): which feature families carry the value?

    python -m experiments.ablation                       # every simulated family
    python -m experiments.ablation --quick               # CI-sized
    python -m experiments.ablation --labels path/to/label_set

Every learned policy (ripplecp_policy.learned.default_learned_policies) is fitted with all
feature families, with each family removed, and with each family alone (the families are
the prefixes of :data:`features.row.FAMILIES`; a learned policy always keeps its placement
state), through :class:`ripplecp_policy.datasets.FeatureSubset`; beside them the
position-only rule (``fixed-positions``: no features at all). Everything runs as in
``python -m experiments.matched_budget``: leave-one-repository-out, each fit on the
training repositories at the budget it is evaluated at, priced exactly on the held-out
tasks. The table gives, per family and budget, each variant's mean difference to
first-boundary (TotalFailureCost, s; negative favours the variant); ablation.csv adds the
two-stage bootstrap interval of every cell and the change against the same policy with all
features. The study is logged to MLflow (ripplecp_policy.tracking.study_run: a parent run
with the table as an artifact, a child run per (family, policy, budget) with a metric per
feature variant).
"""

from __future__ import annotations

import dataclasses
import sys
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from experiments.study import REFERENCE, LabelStudyArgs, load_label_sets, sized, splittable
from ripplecp_cli import opt, progress, run
from ripplecp_policy.tracking import check_experiment_name, metric_key, study_run

if TYPE_CHECKING:  # type names only: these load where they are used, so --help stays fast
    import pandas as pd

    from labelsets.tables import LabelSet
    from ripplecp_policy.datasets import FeatureSubset
    from ripplecp_policy.policy import PlacementPolicy

PROG = "python -m experiments.ablation"
POSITION_ONLY = "fixed-positions"
ALL = "all"


@dataclass(frozen=True)
class Args(LabelStudyArgs):
    """Every learned policy with each feature family removed and each family alone, plus the
    position-only rule, at matched budgets (paper, Appendices C and I)."""

    #: --quick: one family, 3 repositories of 2 tasks, one budget, small models, 500 resamples
    QUICK: ClassVar[Mapping[str, Any]] = dict(
        families=("long-horizon",), budgets=("count:1",), repos=3, tasks_per_repo=2, n_resamples=500)

    experiment: str = opt("ablation", check=check_experiment_name)
    """MLflow experiment name"""
    n_resamples: int = opt(2_000, min=100)
    """bootstrap resamples per interval"""
    out: str = opt("out/ablation", metavar="PATH")
    """where ablation.csv and ablation.txt go"""
    jobs: int = opt(2, min=1)
    """worker processes for the folds (results do not depend on it)"""


def variants() -> list[tuple[str, FeatureSubset | None]]:
    """(label, feature function): all families, each removed, each alone."""
    from features.row import FAMILIES as FEATURE_FAMILIES
    from ripplecp_policy.datasets import FeatureSubset

    out: list[tuple[str, FeatureSubset | None]] = [(ALL, FeatureSubset(FEATURE_FAMILIES))]
    out += [(f"without {f}", FeatureSubset(tuple(g for g in FEATURE_FAMILIES if g != f)))
            for f in FEATURE_FAMILIES]
    out += [(f"only {f}", FeatureSubset((f,))) for f in FEATURE_FAMILIES]
    return out


def run_fold(fam: str, ls: LabelSet, fold: Any, budgets: tuple[str, ...], args: Args) -> pd.DataFrame:
    """One fold: every (policy, feature variant) and the two rules fitted on the training
    repositories at each budget, evaluated on the held-out repository."""
    import pandas as pd
    from sklearn.base import clone

    from baselines import FirstBoundary, FixedPositions
    from ripplecp_policy.evaluation import evaluator_for
    from ripplecp_policy.learned import default_learned_policies
    from ripplecp_policy.policy import fold_settings

    ev = evaluator_for(ls)
    train = ls.subset(fold.train_tasks)
    protos: list[tuple[str, str, PlacementPolicy]] = [
        (REFERENCE, "-", FirstBoundary()), (POSITION_ONLY, "no features", FixedPositions())]
    for pol in default_learned_policies(seed=args.seed, quick=args.quick):
        protos += [(pol.name, label, clone(pol).set_params(feature_fn=fn)) for label, fn in variants()]
    rows = []
    for budget, setting in fold_settings(budgets, train):  # relative budgets: training tasks only
        for name, label, proto in protos:
            pol = clone(proto).fit(train, setting)
            df = ev.evaluate(pol, list(fold.test_tasks), setting, seeds=(args.seed,))
            df["policy"], df["features"], df["family"], df["fold"] = name, label, fam, fold.held_out
            df["budget"] = budget
            rows.append(df)
    return pd.concat(rows, ignore_index=True)


def cells(res: pd.DataFrame, n_resamples: int) -> pd.DataFrame:
    """Per (family, budget, policy, features): mean difference to first-boundary with its
    two-stage interval, and the change against the same policy with all features."""
    import pandas as pd

    from ripplecp_policy.verdicts import paired_contrast

    out = []
    for (fam, budget), g in res.groupby(["family", "budget"], sort=False):
        ref = g[g["policy"] == REFERENCE]
        for (policy, feats), pg in g.groupby(["policy", "features"], sort=False):
            if policy == REFERENCE:
                continue
            c = paired_contrast(pg, ref, n_resamples=n_resamples)
            out.append(dict(family=fam, budget=budget, policy=policy, features=feats,
                            tfc=pg["total_failure_cost"].mean(), diff=c["diff"] if c else float("nan"),
                            low=c["low"] if c else float("nan"), high=c["high"] if c else float("nan"),
                            n_tasks=len(pg)))
    df = pd.DataFrame(out)
    full = df[df["features"] == ALL].set_index(["family", "budget", "policy"])["diff"]
    df["vs_all"] = df["diff"] - pd.Series(list(zip(df["family"], df["budget"], df["policy"], strict=True))
                                          ).map(full.to_dict()).to_numpy()
    return df


def table(df: pd.DataFrame) -> str:
    """One table: rows (policy, features), one column per (family, budget) with the mean
    difference to first-boundary in seconds."""
    df = df.assign(cell=df["family"] + " " + df["budget"])
    wide = df.pivot_table(index=["policy", "features"], columns="cell", values="diff", sort=False)
    return wide.to_string(float_format=lambda x: f"{x:+.1f}")


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments.ablation``: check every argument, then run the ablation."""
    return run(study, Args, argv, prog=PROG)


def study(args: Args) -> int:
    """The ablation (the module docstring) for checked arguments."""
    import pandas as pd

    from ripplecp_policy.splits import leave_one_repo_out

    args = sized(args)
    t0 = time.perf_counter()
    warnings.filterwarnings("ignore", category=FutureWarning)
    data = splittable(load_label_sets(args))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = [(fam, fold) for fam, ls in data.items() for fold in leave_one_repo_out(ls)]
    n = min(args.jobs, len(jobs))
    if n > 1:
        from joblib import Parallel, delayed

        it: Any = Parallel(n_jobs=n, return_as="generator")(
            delayed(run_fold)(fam, data[fam], fold, args.budgets, args) for fam, fold in jobs)
    else:
        it = (run_fold(fam, data[fam], fold, args.budgets, args) for fam, fold in jobs)
    with study_run(args.experiment, args.mlruns, name=f"ablation {time.strftime('%Y-%m-%d %H:%M:%S')}",
                   tags={"ripplecp.study": "ablation", "ripplecp.families": ",".join(data)},
                   params=dataclasses.asdict(args), enabled=args.mlflow) as parent:
        res = pd.concat(list(progress(it, total=len(jobs), desc="folds (family x held-out repo)")),
                        ignore_index=True)
        df = cells(res, args.n_resamples)
        text = (f"== ablation: difference to {REFERENCE} (TotalFailureCost, s; negative favours the "
                f"variant), held-out repositories, {', '.join(data)} ==\n" + table(df))
        print(text)
        df.to_csv(out / "ablation.csv", index=False)
        (out / "ablation.txt").write_text(text + "\n")
        log_cells(parent, df)
        parent.log({"study_seconds": time.perf_counter() - t0})
        for p in ("ablation.csv", "ablation.txt"):
            parent.log_artifact(out / p)
    if parent.on:
        print(f"MLflow: run {parent.run_id} in experiment {args.experiment!r}, a child run per "
              "(family, policy, budget) with one metric per feature variant")
    print(f"outputs in {out}/ ; took {time.perf_counter() - t0:.1f} s")
    return 0


def log_cells(parent: Any, df: pd.DataFrame) -> None:
    """A child run per (family, policy, budget): per feature variant its difference to
    first-boundary (``diff/<variant>``) and its change against all features
    (``vs_all/<variant>``)."""
    for (fam, budget, policy), g in df.groupby(["family", "budget", "policy"], sort=False):
        tags = {"ripplecp.kind": "policy-budget", "ripplecp.family": fam, "ripplecp.policy": policy,
                "ripplecp.budget": budget}
        with parent.child(f"{fam}/{policy}/{budget}", tags=tags) as kid:
            kid.log({**{metric_key(f"diff/{r.features}"): r.diff for r in g.itertuples()},
                     **{metric_key(f"vs_all/{r.features}"): r.vs_all for r in g.itertuples()}})


if __name__ == "__main__":
    sys.exit(main())
