"""Train the learned placement policies under leave-one-repository-out, tuned, tracked, exported.

    python -m experiments.train_policies [--families F ...] [--labels DIR] [--quick]
        [--mlruns DIR] [--device cpu|cuda] [--budgets count:2]

For every learned policy kind and every held-out repository: Optuna tunes on validation
repositories inside the training fold, the policy is refitted on the fold (its threshold
again set on validation repositories), the separation audit is checked, and the held-out
repository is touched once: its tasks are replayed and priced with the measured recovery
tables beside the first-boundary rule at the same budget. Per-fold metrics, trials
(nested runs), feature importances and the fitted-Q convergence go to MLflow. The verdict
lines say plainly whether each learned policy beats first-boundary (paper, Appendix D)
and whether Q-Ripple beats local advantage ranking (Appendix E); the policy kind with the
lowest held-out cost is refitted on every repository, exported as an MLflow pyfunc model
and registered under its name (family, kind, budget).
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd

from baselines import FirstBoundary
from experiments.study import LabelStudyArgs, check_families, family_of, read_label_set, sized
from labelsets.definitions import STRATA
from labelsets.tables import LabelSet
from ripplecp_cli import opt, parse, progress, run
from ripplecp_policy.budget import check_budget_specs
from ripplecp_policy.evaluation import Evaluator
from ripplecp_policy.export import (
    default_checkpoint_cost,
    log_policy_model,
    policy_example,
    training_feature_ranges,
)
from ripplecp_policy.learned import DEVICES, LEARNED, check_device
from ripplecp_policy.policy import PlacementPolicy, Setting, fold_settings
from ripplecp_policy.registry import entry
from ripplecp_policy.splits import SplitAudit, leave_one_repo_out
from ripplecp_policy.tracking import (
    TrackedRun,
    check_experiment_name,
    model_name,
    policy_params,
    study_run,
)
from ripplecp_policy.tuning import tune
from ripplecp_policy.verdicts import compare

PROG = "python -m experiments.train_policies"
#: the registered learned policy kinds
KINDS = tuple(e.key for e in LEARNED)
#: the family trained on by default
FAMILIES = ("long-horizon",)


@dataclass(frozen=True)
class Args(LabelStudyArgs):
    """Train the learned placement policies under leave-one-repository-out, tuned, tracked,
    exported (one study per family)."""

    #: --quick: 3 trials, small ensembles, 2 simulated tasks per repository, 1 repetition
    QUICK: ClassVar[Mapping[str, Any]] = dict(n_trials=3, tasks_per_repo=2, repetitions=1)

    families: tuple[str, ...] = opt(FAMILIES, metavar="F")
    """simulated workload families, one study each; with --labels, the set's families to
    train on, one study each (left at the default: the whole set, one study)"""
    tasks_per_repo: int | None = opt(4, min=1)
    """simulated tasks per repository"""
    budgets: tuple[str, ...] = opt(("count:2",), check=check_budget_specs, metavar="SPEC")
    """the one budget every policy is fitted and evaluated at: count:N (N >= 1), seconds:S
    or seconds:Kx (K x the training folds' mean creation s), bytes:B or bytes:Kx"""
    experiment: str = opt("train_policies", check=check_experiment_name)
    """MLflow experiment name"""
    repetitions: int = opt(2, min=1)
    """simulated repetitions per recovery cell"""
    device: str = opt("cpu", choices=DEVICES, check=check_device)
    """xgboost device (cuda: only where xgboost finds a GPU)"""
    n_trials: int = opt(10, min=1)
    """Optuna trials per fold (validation repositories inside the training fold)"""
    kinds: tuple[str, ...] = opt(("xgboost", "ridge", "fqi-extratrees"), choices=KINDS,
                                 metavar="KIND")
    """learned policy kinds to train"""
    export: bool = True
    """refit the best kind on every repository, export it as an MLflow pyfunc model and
    register it (needs MLflow)"""
    out: str | None = opt(None, metavar="PATH")
    """optional directory for the per-fold CSV and verdict text"""

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(self.budgets) != 1:
            raise ValueError(f"argument --budgets: one budget per study, got {len(self.budgets)} "
                             f"({' '.join(self.budgets)})")


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
        data = read_label_set(args.labels)
        if family is None:
            return data
        check_families([family], sorted(str(f) for f in data.tasks["family"].unique()))
        return family_of(data, family)
    from oracle.simulator import simulate_label_set

    with progress(desc=f"simulate {family or args.families[0]}", total=1) as bar:
        data = simulate_label_set(family or args.families[0], n_repos=args.repos,
                                  tasks_per_repo=args.tasks_per_repo, design="full",
                                  repetitions=args.repetitions, seed=args.seed)
        bar.update()
    return data


def _finite(d: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in d.items() if isinstance(v, int | float) and math.isfinite(float(v))}


def fit_tuned(kind: str, args: Args, train: LabelSet, setting: Setting, *, run: TrackedRun | None = None,
              tag: str = "") -> tuple[PlacementPolicy, SplitAudit, Any]:
    """Tune on validation repos inside ``train`` (each trial a child run of ``run``), then
    refit on ``train``."""
    policy = make_policy(kind, args)

    def on_trial(number: int, params: dict[str, Any], value: float, vals: list[float]) -> None:
        if run is None:
            return
        with run.child(f"{tag}trial-{number}", tags={"ripplecp.kind": "trial"}) as trial:
            trial.log({"objective": value, **{f"split_{i}": v for i, v in enumerate(vals)}}, params=params)

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
    verdicts and run ids. MLflow: a parent run, a child per kind, beneath it a child per
    fold, beneath that a child per tuning trial; the exported model in a child of its own,
    named and registered after what it is (family, kind, budget)."""
    t_start = time.perf_counter()
    data = load_data(args, family) if data is None else data
    folds = leave_one_repo_out(data)
    kinds = list(args.kinds)
    name = family or ("labels" if args.labels else args.families[0])
    (label, whole), = fold_settings(args.budgets, data)  # the export's budget: every repository
    per_fold: list[dict[str, Any]] = []
    evals: list[pd.DataFrame] = []
    names: dict[str, str] = {}
    ev_all = Evaluator(data)
    first = FirstBoundary()
    refs: dict[str, pd.DataFrame] = {}  # held-out repository -> first-boundary's rows
    params = {**{k: ",".join(v) if isinstance(v, tuple) else v for k, v in asdict(args).items() if v is not None},
              "family": name, "label_set_hash": data.content_hash(), "n_tasks": len(data.tasks),
              "n_repos": len(data.repos), "budget": label}
    with study_run(args.experiment, args.mlruns, name=f"train_policies-{name}", params=params,
                   tags={"ripplecp.study": "train_policies", "ripplecp.families": name},
                   enabled=args.mlflow) as parent:
        bar = progress(desc=f"folds {name} (kind x held-out repo)", total=len(kinds) * len(folds))
        for kind in kinds:
            with parent.child(kind, tags={"ripplecp.kind": "policy", "ripplecp.policy": kind}) as kind_run:
                for fold in folds:
                    train, test = data.subset(fold.train_tasks), data.subset(fold.test_tasks)
                    (_, setting), = fold_settings(args.budgets, train)  # relative: training tasks only
                    with kind_run.child(f"{kind}-fold{fold.index}-{fold.held_out}",
                                        tags={"ripplecp.kind": "fold", "ripplecp.policy": kind,
                                              "ripplecp.held_out": fold.held_out}) as fold_run:
                        t0 = time.perf_counter()
                        policy, audit, res = fit_tuned(kind, args, train, setting, run=fold_run)
                        audit.check([fold.held_out])  # raises LeakageError naming the stage
                        fit_s = time.perf_counter() - t0
                        # the held-out repository is touched here, once
                        ev = ev_all.evaluate(policy, list(fold.test_tasks), setting)
                        names[kind] = str(ev["policy"].iloc[0])
                        evals.append(ev)
                        if fold.held_out not in refs:
                            refs[fold.held_out] = ev_all.evaluate(first, list(fold.test_tasks), setting)
                            evals.append(refs[fold.held_out])
                        ref = refs[fold.held_out]
                        m = fold_metrics(policy, test, setting)
                        m.update(
                            heldout_cost_s=float(ev["objective_s"].mean()),
                            first_boundary_cost_s=float(ref["objective_s"].mean()),
                            heldout_minus_first_s=float(ev["objective_s"].mean() - ref["objective_s"].mean()),
                            n_checkpoints=float(ev["n_checkpoints"].mean()),
                            fit_s=fit_s, tuning_best=res.best_value,
                        )
                        history = ({"fqi_max_abs_delta": list(policy.convergence_["max_abs_delta"])}
                                   if hasattr(policy, "convergence_") else {})  # iterative fits converge
                        fold_run.log(_finite(m), history=history,
                                     params={**policy_params(policy),  # parameters + fitted values
                                             "held_out": fold.held_out, "kind": kind,
                                             "tuning_objective": res.objective,
                                             **{f"best_{k}": v for k, v in res.best_params.items()}})
                        fold_run.log_dict(audit.to_dict(), "split_audit.json")
                        if hasattr(policy, "feature_importances"):
                            imp = policy.feature_importances().sort_values(ascending=False)
                            fold_run.log_dict({k: float(v) for k, v in imp.items()}, "feature_importances.json")
                        _log_fold_model(fold_run, policy)
                        per_fold.append({"kind": kind, "fold": fold.index, "held_out": fold.held_out, **m})
                        bar.update()
        bar.close()
        results = pd.concat(evals, ignore_index=True)
        table = pd.DataFrame(per_fold)
        lines = verdict_lines(results, "xgboost" if "xgboost" in kinds else None, names)
        summary = results.groupby("policy")["objective_s"].mean().sort_values()
        parent.log_text(table.to_csv(index=False), "per_fold.csv")
        parent.log_text(results.to_csv(index=False), "heldout_placements.csv")
        parent.log_text("\n".join(lines) + "\n", "verdicts.txt")
        parent.log({f"heldout_cost_{k}": float(summary[n]) for k, n in names.items()})
        model_uri = None
        best_kind = min(names, key=lambda k: float(summary[names[k]])) if names else None
        if args.export and parent.on and best_kind is not None:
            bar = progress(desc=f"export {best_kind} (refit on every repository)", total=1)
            final, audit, _ = fit_tuned(best_kind, args, data, whole)
            bar.update()
            bar.close()
            model = model_name(name, best_kind, label)
            with parent.child(f"export-{best_kind}", tags={"ripplecp.kind": "export",
                                                           "ripplecp.policy": best_kind}) as ex, ex.active():
                info = log_policy_model(final, whole.budget, policy_example(final, data, whole), name=model,
                                        registered_model_name=model,
                                        default_checkpoint_cost=default_checkpoint_cost(data, whole.budget),
                                        seed=args.seed, params=policy_params(final),
                                        ranges=training_feature_ranges(data, whole), data=data,
                                        tags={"ripplecp.family": name, "ripplecp.policy": final.name,
                                              "ripplecp.budget": label})
            model_uri = info.model_uri
            parent.log(params={"exported_kind": best_kind, "exported_policy": final.name,
                               "exported_model": model})
        train_s = time.perf_counter() - t_start
        parent.log({"study_seconds": train_s})
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        table.to_csv(out / "per_fold.csv", index=False)
        (out / "verdicts.txt").write_text("\n".join(lines) + "\n")
    return {"per_fold": table, "results": results, "verdicts": lines, "run_id": parent.run_id,
            "model_uri": model_uri, "best_kind": best_kind, "seconds": train_s,
            "summary": summary}


def _log_fold_model(run: TrackedRun, policy: PlacementPolicy) -> None:
    """The fold's fitted policy as a joblib artifact (the exported pyfunc is the final one)."""
    import copy

    import joblib

    if not run.on:
        return
    pol = copy.deepcopy(policy)
    if "feature_fn" in pol.get_params():
        pol.set_params(feature_fn=None)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "policy.joblib"
        joblib.dump(pol, path)
        run.log_artifact(path)


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments.train_policies``: check every argument, then train."""
    return run(train, Args, argv, prog=PROG)


def train(args: Args) -> int:
    """One study per family (:func:`studies`), each reported as it ends."""
    args = sized(args)
    data = {family: load_data(args, family) for family in studies(args)}  # all checked first
    for family, ls in data.items():
        sub = args
        if args.out and len(data) > 1:
            sub = replace(args, out=str(Path(args.out) / str(family)))
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
