"""Train the learned placement policies under leave-one-repository-out, tuned, tracked, exported.

    python -m experiments.train_policies [--families F ...] [--labels DIR] [--quick]
        [--mlruns DIR] [--device cpu|cuda] [--budget-kind count] [--budget-amount 2]

For every learned policy kind and every held-out repository: Optuna tunes on validation
repositories inside the training fold, the policy is refitted on the fold (its threshold
again set on validation repositories), the separation audit is checked, and the held-out
repository is touched once: its tasks are replayed and priced with the measured recovery
tables beside the first-boundary rule at the same budget. Per-fold metrics, trials
(nested runs), feature importances and the fitted-Q convergence go to MLflow. The verdict
lines say plainly whether each learned policy beats first-boundary (paper, Appendix D)
and whether Q-Ripple beats local advantage ranking (Appendix E); the policy kind with the
lowest held-out cost is refitted on every repository and exported as an MLflow pyfunc model.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import tempfile
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import mlflow
import pandas as pd

from baselines import FirstBoundary
from labelsets.definitions import STRATA
from labelsets.tables import LabelSet
from oracle.simulator.workloads import family_names
from ripplecp_cli import (
    CommandLineError,
    choice_error,
    existing_dir,
    opt,
    parse,
    positive,
    progress,
    run,
)
from ripplecp_policy.budget import BUDGET_KINDS
from ripplecp_policy.evaluation import Evaluator
from ripplecp_policy.export import (
    default_checkpoint_cost,
    log_policy_model,
    policy_example,
    training_feature_ranges,
)
from ripplecp_policy.learned import DEVICES, LEARNED, check_device
from ripplecp_policy.policy import (
    Budget,
    BudgetSpec,
    PlacementPolicy,
    Setting,
)
from ripplecp_policy.registry import entry
from ripplecp_policy.splits import SplitAudit, leave_one_repo_out
from ripplecp_policy.tracking import (
    check_experiment_name,
    ensure_experiment,
    policy_params,
    tracking_uri,
)
from ripplecp_policy.tuning import tune
from ripplecp_policy.verdicts import compare

PROG = "python -m experiments.train_policies"
#: the registered learned policy kinds
KINDS = tuple(e.key for e in LEARNED)
#: the family trained on by default
FAMILIES = ("long-horizon",)


@dataclass(frozen=True)
class Args:
    """Train the learned placement policies under leave-one-repository-out, tuned, tracked,
    exported (one study per family)."""

    families: tuple[str, ...] = opt(FAMILIES, metavar="F")
    """simulated workload families, one study each; with --labels, the set's families to
    train on, one study each (left at the default: the whole set, one study)"""
    labels: str | None = opt(None, check=existing_dir, metavar="DIR")
    """a saved label set directory to train on instead of simulating"""
    tasks_per_repo: int = opt(4, min=1)
    """simulated tasks per repository"""
    repetitions: int = opt(2, min=1)
    """simulated repetitions per recovery cell"""
    quick: bool = False
    """CI-sized run: 3 trials, small ensembles, 2 simulated tasks per repository, 1 repetition"""
    mlruns: str | None = opt(None, metavar="DIR")
    """MLflow root (default: $RIPPLECP_MLRUNS or ./mlruns)"""
    mlflow: bool = True
    """keep the runs in the MLflow store (off: they go to a temporary store deleted at the
    end, and no model is exported)"""
    experiment: str = opt("train_policies", check=check_experiment_name)
    """MLflow experiment name"""
    device: str = opt("cpu", choices=DEVICES, check=check_device)
    """xgboost device (cuda: only where xgboost finds a GPU)"""
    seed: int = opt(0, min=0)
    """one seed for the simulator, the tuning and the policies"""
    budget_kind: str = opt("count", choices=BUDGET_KINDS)
    """the budget every policy is fitted and evaluated at: its kind"""
    budget_amount: float = opt(2.0, check=positive)
    """the budget's amount: checkpoints (a positive integer), creation seconds or bytes"""
    n_trials: int = opt(10, min=1)
    """Optuna trials per fold (validation repositories inside the training fold)"""
    kinds: tuple[str, ...] = opt(("xgboost", "ridge", "fqi-extratrees"), choices=KINDS,
                                 metavar="KIND")
    """learned policy kinds to train"""
    export: bool = True
    """refit the best kind on every repository and export it as an MLflow pyfunc model"""
    out: str | None = opt(None, metavar="PATH")
    """optional directory for the per-fold CSV and verdict text"""

    def __post_init__(self) -> None:
        try:
            BudgetSpec(self.budget_kind, self.budget_amount)  # type: ignore[arg-type]
        except ValueError as exc:
            raise CommandLineError(f"argument --budget-amount: {exc}") from None
        if self.labels is None:  # simulated: registered names (a label set's are checked on loading)
            known = family_names()
            for fam in self.families:
                if fam not in known:
                    raise choice_error(fam, known, "--families")


def sized(args: Args) -> Args:
    """``args`` under --quick: at most 3 trials and 2 simulated tasks per repository, 1
    repetition."""
    if not args.quick:
        return args
    return dataclasses.replace(args, n_trials=min(args.n_trials, 3),
                               tasks_per_repo=min(args.tasks_per_repo, 2), repetitions=1)


def parse_args(argv: list[str] | None = None) -> Args:
    """The study's arguments from ``argv`` (checked; errors exit 2 in one line), sized."""
    return sized(parse(Args, argv, prog=PROG))


def studies(args: Args) -> list[str | None]:
    """The families to train on, one study each; None: the whole of --labels."""
    if args.labels and args.families == FAMILIES:
        return [None]
    return list(args.families)


def make_policy(kind: str, args: Args) -> PlacementPolicy:
    """An unfitted learned policy of the registered ``kind`` with the study's seed, device and size."""
    return entry(kind).make(seed=args.seed, quick=args.quick, device=args.device)


def load_data(args: Args, family: str | None = None) -> LabelSet:
    """The label set: loaded from ``--labels`` (``family``'s tasks of it, a family the set
    lacks being an error; None: all of it) or ``family`` simulated (full design: every
    placement priced)."""
    if args.labels:
        try:
            data = LabelSet.load(args.labels)
        except (ValueError, OSError) as exc:
            raise CommandLineError(f"argument --labels: {exc}") from None
        if family is None:
            return data
        present = sorted(str(f) for f in data.tasks["family"].unique())
        if family not in present:
            raise choice_error(family, present, "--families")
        return data.subset(data.tasks.loc[data.tasks["family"] == family, "task_id"])
    from oracle.simulator import simulate_label_set

    with progress(desc=f"simulate {family or args.families[0]}", total=1) as bar:
        data = simulate_label_set(family or args.families[0], tasks_per_repo=args.tasks_per_repo,
                                  design="full", repetitions=args.repetitions, seed=args.seed)
        bar.update()
    return data


def _finite(d: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in d.items() if isinstance(v, int | float) and math.isfinite(float(v))}


def fit_tuned(kind: str, args: Args, train: LabelSet, setting: Setting, *, log_trials: bool = True,
              tag: str = "") -> tuple[PlacementPolicy, SplitAudit, Any]:
    """Tune on validation repos inside ``train`` (trials as nested runs), then refit on ``train``."""
    policy = make_policy(kind, args)

    def on_trial(number: int, params: dict[str, Any], value: float, vals: list[float]) -> None:
        if not log_trials:
            return
        with mlflow.start_run(run_name=f"{tag}trial-{number}", nested=True):
            mlflow.log_params(params)
            mlflow.log_metrics(_finite({"objective": value, **{f"split_{i}": v for i, v in enumerate(vals)}}))

    res = tune(policy, train, setting, n_trials=args.n_trials, seed=args.seed, on_trial=on_trial)
    policy.set_params(**res.best_params)
    policy.fit(train, setting)
    audit = SplitAudit()
    audit.merge(res.audit)
    audit.merge(policy.audit_)
    return policy, audit, res


def fold_metrics(policy: PlacementPolicy, test: LabelSet, setting: Setting) -> dict[str, float]:
    """Held-out model quality, as the policy reports it (``heldout_metrics``): advantage error
    and within-stratum rank, or fitted-Q value error and convergence."""
    return policy.heldout_metrics(test, setting)


def verdict_lines(results: pd.DataFrame, reference_kind: str | None, names: dict[str, str]) -> list[str]:
    """The decision criterion in plain words (Appendices D and E)."""
    lines = []
    for v in compare(results, reference="first-boundary", metric="objective_s"):
        lines.append("VERDICT " + v.text())
        if v.status != "yes":
            lines.append(
                f"VERDICT {v.policy} does not beat the first-boundary rule at matched budget "
                f"{v.budget}: keep the simpler rule (checkpoint at the earliest safe boundaries) "
                "and report the negative result (paper, Appendix D)."
            )
        else:
            lines.append(f"VERDICT {v.policy} beats the first-boundary rule at matched budget {v.budget}.")
    fqi = [n for k, n in names.items() if k.startswith("fqi-")]
    if reference_kind in names and fqi:
        ref = names[reference_kind]
        sub = results[results["policy"].isin([ref, *fqi])]
        for v in compare(sub, reference=ref, metric="objective_s"):
            if v.status == "refused":
                lines.append("VERDICT (Q-Ripple vs local ranking) " + v.text())
                continue
            word = "gives" if v.status == "yes" else "does not give"
            lines.append(
                f"VERDICT {v.policy} {word} a held-out benefit over local advantage ranking ({ref}) "
                f"at {v.budget} (difference {v.diff:+.2f} s, interval [{v.low:+.2f}, {v.high:+.2f}])"
                + ("" if v.status == "yes" else "; keep the simpler model (paper, Appendix E).")
            )
    return lines


def run_study(args: Args, family: str | None = None, data: LabelSet | None = None) -> dict[str, Any]:
    """The leave-one-repository-out study of ``family`` (None: the whole of --labels, or the
    first of --families) on ``data`` (default: :func:`load_data`); returns per-fold metrics,
    verdicts and run ids."""
    t_start = time.perf_counter()
    budget = Budget(args.budget_kind, args.budget_amount)  # type: ignore[arg-type]
    setting = Setting(budget)  # given once to every fit and to the held-out evaluation
    data = load_data(args, family) if data is None else data
    folds = leave_one_repo_out(data)
    kinds = list(args.kinds)
    name = family or ("labels" if args.labels else args.families[0])
    mlflow.set_tracking_uri(tracking_uri(args.mlruns))
    exp_id = ensure_experiment(args.experiment, args.mlruns)
    mlflow.set_experiment(experiment_id=exp_id)  # nested runs inherit the active experiment
    per_fold: list[dict[str, Any]] = []
    evals: list[pd.DataFrame] = []
    names: dict[str, str] = {}
    ev_all = Evaluator(data)
    with mlflow.start_run(experiment_id=exp_id, run_name=f"train_policies-{name}") as parent:
        mlflow.log_params({**{k: ",".join(v) if isinstance(v, tuple) else v
                              for k, v in asdict(args).items() if v is not None},
                           "family": name,
                           "label_set_hash": data.content_hash(), "n_tasks": len(data.tasks),
                           "n_repos": len(data.repos), "budget": budget.label()})
        first = FirstBoundary()
        ref_eval = ev_all.evaluate(first, data.task_ids, setting)
        evals.append(ref_eval)
        bar = progress(desc=f"folds {name} (kind x held-out repo)", total=len(kinds) * len(folds))
        for kind in kinds:
            with mlflow.start_run(run_name=kind, nested=True):
                for fold in folds:
                    train, test = data.subset(fold.train_tasks), data.subset(fold.test_tasks)
                    with mlflow.start_run(run_name=f"{kind}-fold{fold.index}-{fold.held_out}", nested=True):
                        t0 = time.perf_counter()
                        policy, audit, res = fit_tuned(kind, args, train, setting)
                        audit.check([fold.held_out])  # raises LeakageError naming the stage
                        fit_s = time.perf_counter() - t0
                        # the held-out repository is touched here, once
                        ev = ev_all.evaluate(policy, list(fold.test_tasks), setting)
                        names[kind] = str(ev["policy"].iloc[0])
                        evals.append(ev)
                        ref = ref_eval.set_index("task_id").loc[list(fold.test_tasks)]
                        m = fold_metrics(policy, test, setting)
                        m.update(
                            heldout_cost_s=float(ev["objective_s"].mean()),
                            first_boundary_cost_s=float(ref["objective_s"].mean()),
                            heldout_minus_first_s=float(ev["objective_s"].mean() - ref["objective_s"].mean()),
                            n_checkpoints=float(ev["n_checkpoints"].mean()),
                            fit_s=fit_s, tuning_best=res.best_value,
                        )
                        mlflow.log_params({**policy_params(policy),  # parameters + fitted values
                                           "held_out": fold.held_out, "kind": kind,
                                           "tuning_objective": res.objective,
                                           **{f"best_{k}": v for k, v in res.best_params.items()}})
                        mlflow.log_metrics(_finite(m))
                        mlflow.log_dict(audit.to_dict(), "split_audit.json")
                        if hasattr(policy, "feature_importances"):
                            imp = policy.feature_importances().sort_values(ascending=False)
                            mlflow.log_dict({k: float(v) for k, v in imp.items()}, "feature_importances.json")
                        _log_fold_model(policy)
                        if hasattr(policy, "convergence_"):  # iterative fits log their convergence
                            for row in policy.convergence_.itertuples():
                                mlflow.log_metric("fqi_max_abs_delta", row.max_abs_delta, step=int(row.iteration))
                        per_fold.append({"kind": kind, "fold": fold.index, "held_out": fold.held_out, **m})
                        bar.update()
        bar.close()
        results = pd.concat(evals, ignore_index=True)
        table = pd.DataFrame(per_fold)
        lines = verdict_lines(results, "xgboost" if "xgboost" in kinds else None, names)
        summary = results.groupby("policy")["objective_s"].mean().sort_values()
        mlflow.log_text(table.to_csv(index=False), "per_fold.csv")
        mlflow.log_text(results.to_csv(index=False), "heldout_placements.csv")
        mlflow.log_text("\n".join(lines) + "\n", "verdicts.txt")
        mlflow.log_metrics({f"heldout_cost_{k}": float(summary[n]) for k, n in names.items()})
        model_uri = None
        best_kind = min(names, key=lambda k: float(summary[names[k]])) if names else None
        if args.export and args.mlflow and best_kind is not None:
            bar = progress(desc=f"export {best_kind} (refit on every repository)", total=1)
            final, audit, _ = fit_tuned(best_kind, args, data, setting, log_trials=False)
            bar.update()
            bar.close()
            info = log_policy_model(final, budget, policy_example(final, data, setting), name="policy",
                                    default_checkpoint_cost=default_checkpoint_cost(data, budget),
                                    seed=args.seed, params=policy_params(final),
                                    ranges=training_feature_ranges(data, setting), data=data)
            model_uri = info.model_uri
            mlflow.log_params({"exported_kind": best_kind, "exported_policy": final.name})
        train_s = time.perf_counter() - t_start
        mlflow.log_metric("study_seconds", train_s)
        run_id = parent.info.run_id
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        table.to_csv(out / "per_fold.csv", index=False)
        (out / "verdicts.txt").write_text("\n".join(lines) + "\n")
    return {"per_fold": table, "results": results, "verdicts": lines, "run_id": run_id,
            "model_uri": model_uri, "best_kind": best_kind, "seconds": train_s,
            "summary": summary}


def _log_fold_model(policy: PlacementPolicy) -> None:
    """The fold's fitted policy as a joblib artifact (the exported pyfunc is the final one)."""
    import copy
    import tempfile

    import joblib

    pol = copy.deepcopy(policy)
    if "feature_fn" in pol.get_params():
        pol.set_params(feature_fn=None)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "policy.joblib"
        joblib.dump(pol, path)
        mlflow.log_artifact(str(path))


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments.train_policies``: check every argument, then train."""
    return run(train, Args, argv, prog=PROG)


def train(args: Args) -> int:
    """One study per family (:func:`studies`), each reported as it ends; with --no-mlflow the
    runs go to a temporary store that is deleted at the end."""
    args = sized(args)
    keep = nullcontext(args.mlruns) if args.mlflow else tempfile.TemporaryDirectory(prefix="ripplecp-mlruns-")
    with keep as root:
        args = dataclasses.replace(args, mlruns=root)
        data = {family: load_data(args, family) for family in studies(args)}  # all checked first
        for family, ls in data.items():
            sub = args
            if args.out and len(data) > 1:
                sub = dataclasses.replace(args, out=str(Path(args.out) / str(family)))
            report(run_study(sub, family, ls), args)
    return 0


def report(out: dict[str, Any], args: Args) -> None:
    """Print a study's per-fold table, held-out means and verdicts."""
    pd.set_option("display.width", 200)
    cols = [c for c in ("kind", "held_out", "heldout_cost_s", "first_boundary_cost_s", "heldout_minus_first_s",
                        "n_checkpoints", "rmse", *(f"spearman_{s}" for s in STRATA), "threshold",
                        "value_mae_s", "value_bias_s", "fqi_iterations", "fqi_final_delta") if c in out["per_fold"]]
    print(out["per_fold"][cols].to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    print()
    print("held-out mean objective (s):", json.dumps({k: round(float(v), 2) for k, v in out["summary"].items()}))
    for line in out["verdicts"]:
        print(line)
    run_id = out["run_id"] if args.mlflow else "not kept (--no-mlflow)"
    print(f"run {run_id}; exported {out['best_kind']} -> {out['model_uri']}; {out['seconds']:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
