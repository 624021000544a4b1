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
features. The study is logged to MLflow (one run, a metric per cell, the table as an
artifact).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from sklearn.base import clone

from baselines import FirstBoundary, FixedPositions
from features.row import FAMILIES as FEATURE_FAMILIES
from labelsets.tables import LabelSet
from oracle.simulator.workloads import family_names
from ripplecp_cli import CommandLineError, choice_error, existing_dir, opt, progress, run
from ripplecp_policy.datasets import FeatureSubset
from ripplecp_policy.evaluation import evaluator_for
from ripplecp_policy.learned import default_learned_policies
from ripplecp_policy.policy import PlacementPolicy, check_budget_specs, fold_settings
from ripplecp_policy.splits import leave_one_repo_out
from ripplecp_policy.tracking import check_experiment_name
from ripplecp_policy.verdicts import paired_contrast

PROG = "python -m experiments.ablation"
FAMILIES = ("swe-pilot", "dependency-resolution", "multi-stage-build", "long-horizon")
REFERENCE = "first-boundary"
POSITION_ONLY = "fixed-positions"
ALL = "all"


@dataclass(frozen=True)
class Args:
    """Every learned policy with each feature family removed and each family alone, plus the
    position-only rule, at matched budgets (paper, Appendices C and I)."""

    labels: str | None = opt(None, check=existing_dir, metavar="DIR")
    """an existing label-set directory instead of the simulator"""
    families: tuple[str, ...] = opt(FAMILIES, metavar="F")
    """workload families to simulate; with --labels, the set's families (default: all)"""
    budgets: tuple[str, ...] = opt(("count:1", "count:2"), check=check_budget_specs, metavar="SPEC")
    """budgets: count:N, seconds:S or seconds:Kx, bytes:B or bytes:Kx"""
    seed: int = opt(0, min=0)
    """one seed for the simulator and the policies"""
    quick: bool = False
    """CI-sized: one family, 3 repositories of 2 tasks, one budget, small models, 500
    resamples (options given explicitly win)"""
    repos: int | None = opt(None, min=2)
    """simulated repositories per family, one fold each (default: the family's own; --quick: 3)"""
    tasks_per_repo: int | None = opt(None, min=1)
    """simulated tasks per repository (default: the family's own)"""
    n_resamples: int = opt(2_000, min=100)
    """bootstrap resamples per interval"""
    out: str = opt("out/ablation", metavar="PATH")
    """where ablation.csv and ablation.txt go"""
    mlruns: str | None = opt(None, metavar="DIR")
    """MLflow store root (default: $RIPPLECP_MLRUNS or ./mlruns)"""
    mlflow: bool = True
    """log the study to MLflow"""
    experiment: str = opt("ablation", check=check_experiment_name)
    """MLflow experiment name"""
    jobs: int = opt(2, min=1)
    """worker processes for the folds (results do not depend on it)"""

    def __post_init__(self) -> None:
        if self.labels is None:
            known = family_names()
            for fam in self.families:
                if fam not in known:
                    raise choice_error(fam, known, "--families")


QUICK = dict(families=("long-horizon",), budgets=("count:1",), repos=3, tasks_per_repo=2,
             n_resamples=500)


def sized(args: Args) -> Args:
    """``args`` with --quick's sizes for every option left at its default."""
    if not args.quick:
        return args
    default = Args()
    return dataclasses.replace(args, **{
        k: v for k, v in QUICK.items()
        if getattr(args, k) == getattr(default, k) and not (k == "families" and args.labels)})


def variants() -> list[tuple[str, FeatureSubset | None]]:
    """(label, feature function): all families, each removed, each alone."""
    out: list[tuple[str, FeatureSubset | None]] = [(ALL, FeatureSubset(FEATURE_FAMILIES))]
    out += [(f"without {f}", FeatureSubset(tuple(g for g in FEATURE_FAMILIES if g != f)))
            for f in FEATURE_FAMILIES]
    out += [(f"only {f}", FeatureSubset((f,))) for f in FEATURE_FAMILIES]
    return out


def load(args: Args) -> dict[str, LabelSet]:
    """One label set per family: simulated, or the tasks of --labels grouped by family."""
    if args.labels:
        try:
            full = LabelSet.load(args.labels)
        except (ValueError, OSError) as exc:
            raise CommandLineError(f"argument --labels: {exc}") from None
        present = sorted(str(f) for f in full.tasks["family"].unique())
        fams = present if args.families == FAMILIES else list(args.families)
        for fam in fams:
            if fam not in present:
                raise choice_error(fam, present, "--families")
        out = {f: full.subset(full.tasks.loc[full.tasks["family"] == f, "task_id"]) for f in fams}
    else:
        from oracle.simulator import simulate_label_set

        out = {f: simulate_label_set(f, n_repos=args.repos, tasks_per_repo=args.tasks_per_repo,
                                     design="full", repetitions=2, seed=args.seed)
               for f in args.families}
    for fam, ls in list(out.items()):
        if ls.tasks["repo"].nunique() < 2:
            print(f"note: {fam}: fewer than 2 repositories, no leave-one-repository-out; skipped")
            del out[fam]
    if not out:
        raise ValueError("no family has >= 2 repositories")
    return out


def run_fold(fam: str, ls: LabelSet, fold: Any, budgets: tuple[str, ...], args: Args) -> pd.DataFrame:
    """One fold: every (policy, feature variant) and the two rules fitted on the training
    repositories at each budget, evaluated on the held-out repository."""
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
    args = sized(args)
    t0 = time.perf_counter()
    warnings.filterwarnings("ignore", category=FutureWarning)
    data = load(args)
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
    res = pd.concat(list(progress(it, total=len(jobs), desc="folds (family x held-out repo)")),
                    ignore_index=True)
    df = cells(res, args.n_resamples)
    text = (f"== ablation: difference to {REFERENCE} (TotalFailureCost, s; negative favours the "
            f"variant), held-out repositories, {', '.join(data)} ==\n" + table(df))
    print(text)
    df.to_csv(out / "ablation.csv", index=False)
    (out / "ablation.txt").write_text(text + "\n")
    if args.mlflow:
        log_mlflow(args, df, out, time.perf_counter() - t0)
    print(f"outputs in {out}/ ; took {time.perf_counter() - t0:.1f} s")
    return 0


def log_mlflow(args: Args, df: pd.DataFrame, out: Path, elapsed: float) -> None:
    """One run in ``--experiment``: the arguments, a metric per cell, the table."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    from ripplecp_policy.tracking import ensure_experiment, tracking_uri

    exp_id = ensure_experiment(args.experiment, args.mlruns)
    client = MlflowClient(tracking_uri=tracking_uri(args.mlruns))
    run_ = client.create_run(exp_id, run_name=f"ablation {time.strftime('%Y-%m-%d %H:%M:%S')}",
                             tags={"ripplecp.kind": "study", "ripplecp.study": "ablation"})
    rid = run_.info.run_id
    client.log_batch(rid, params=[Param(k, json.dumps(v) if not isinstance(v, str) else v)
                                  for k, v in dataclasses.asdict(args).items()])
    ts = int(time.time() * 1000)
    import re

    metrics = [Metric(re.sub(r"[^A-Za-z0-9_\-./ ]", "_", f"{r.family}/{r.budget}/{r.policy}/{r.features}/diff"),
                      float(r.diff), ts, 0) for r in df.itertuples() if pd.notna(r.diff)]
    metrics.append(Metric("study_seconds", elapsed, ts, 0))
    for i in range(0, len(metrics), 900):
        client.log_batch(rid, metrics=metrics[i : i + 900])
    for p in ("ablation.csv", "ablation.txt"):
        client.log_artifact(rid, str(out / p))
    client.set_terminated(rid)
    print(f"MLflow: run {rid} in experiment {args.experiment!r} ({tracking_uri(args.mlruns)})")


if __name__ == "__main__":
    sys.exit(main())
