"""Optuna tuning on validation repositories inside the training fold only.

:func:`tune` never sees the held-out repository: it is given the training fold's label
set, splits it by repository (leave-one-repository-out, or ``GroupKFold`` over at most
``max_inner_splits`` groups) and scores each trial on the validation repositories. Every
repository it used is recorded in the result's audit under the stage ``"tuning"``.

Objectives (lower is better):

- advantage regressors: validation RMSE of measured advantage (cheap: the feature table
  does not depend on the hyperparameters, so it is built once);
- advantage classifiers: validation Brier score of P(A_CP > 0);
- fitted-Q: the mean measured cost (``evaluation.placement_objective``) of the fitted
  policy's placements on the validation tasks at the study's budget.

Trials are reported through ``on_trial`` (the study logs them as nested MLflow runs
directly; the Optuna MLflow callback is deprecated and not used).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import optuna
import pandas as pd
from sklearn.base import clone

from oracle.tables import LabelSet
from ripplecp_policy.datasets import advantage_table, replays
from ripplecp_policy.learned.advantage import AdvantageClassifierPolicy, _ScoredPolicy
from ripplecp_policy.learned.fqi import FittedQPolicy
from ripplecp_policy.policy import PlacementPolicy, Setting, as_setting
from ripplecp_policy.splits import SplitAudit, inner_splits

TrialCallback = Callable[[int, dict[str, Any], float, list[float]], None]


def search_space(policy: PlacementPolicy) -> Callable[[optuna.Trial], dict[str, Any]]:
    """The hyperparameters tuned for ``policy`` (small spaces: the data are small)."""
    model = getattr(policy, "model", None) or getattr(policy, "regressor", None)
    if isinstance(policy, FittedQPolicy):
        if model == "xgboost":
            return lambda t: {
                "n_estimators": t.suggest_int("n_estimators", 20, 150, step=10),
                "max_depth": t.suggest_int("max_depth", 2, 6),
                "learning_rate": t.suggest_float("learning_rate", 0.03, 0.3, log=True),
            }
        return lambda t: {
            "n_estimators": t.suggest_int("n_estimators", 20, 100, step=10),
            "min_samples_leaf": t.suggest_int("min_samples_leaf", 1, 10),
        }
    if model in ("ridge",):
        return lambda t: {"alpha": t.suggest_float("alpha", 1e-3, 1e3, log=True)}
    if model in ("logistic",):
        return lambda t: {"C": t.suggest_float("C", 1e-3, 1e2, log=True)}
    if model == "xgboost":
        return lambda t: {
            "n_estimators": t.suggest_int("n_estimators", 50, 300, step=25),
            "max_depth": t.suggest_int("max_depth", 2, 5),
            "learning_rate": t.suggest_float("learning_rate", 0.01, 0.3, log=True),
        }
    raise ValueError(f"no search space for {type(policy).__name__} with model {model!r}")


@dataclass
class TuningResult:
    """Best parameters, every trial, and the repositories tuning saw."""

    best_params: dict[str, Any]
    best_value: float
    trials: pd.DataFrame
    objective: str
    audit: SplitAudit = field(default_factory=SplitAudit)


def _advantage_objective(
    policy: _ScoredPolicy, data: LabelSet, splits: list[tuple[list[str], list[str]]], setting: Setting
) -> tuple[str, Callable[[dict[str, Any]], list[float]]]:
    table = advantage_table(data, replays(data, setting, policy.feature_fn), verified_only=policy.verified_only)
    task_repo = dict(zip(data.tasks["task_id"], data.tasks["repo"], strict=True))
    classifier = isinstance(policy, AdvantageClassifierPolicy)

    def run(params: dict[str, Any]) -> list[float]:
        est = clone(policy).set_params(**params)
        vals = []
        for tr, va in splits:
            sub = table.subset_repos({task_repo[t] for t in tr})
            val = table.subset_repos({task_repo[t] for t in va})
            if sub.frame.empty or val.frame.empty:
                continue
            _, scorer = est._fit_scorer(sub.X, est._target(sub))
            pred = scorer(val.X)
            target = est._target(val)
            vals.append(float(np.sqrt(np.mean((pred - target) ** 2))) if not classifier
                        else float(np.mean((pred - target) ** 2)))
        return vals

    return ("brier" if classifier else "rmse"), run


def _fqi_objective(
    policy: FittedQPolicy, data: LabelSet, splits: list[tuple[list[str], list[str]]], setting: Setting
) -> tuple[str, Callable[[dict[str, Any]], list[float]]]:
    tasks = replays(data, setting, policy.feature_fn)

    def run(params: dict[str, Any]) -> list[float]:
        vals = []
        for tr, va in splits:
            est = clone(policy).set_params(**params).fit(data.subset(tr), setting)
            b = setting.budget or est.budget_
            costs = []
            for t in va:
                est.reset(t, 0)
                c = tasks[t].expected_cost(tasks[t].replay(est.decide, b))
                if not math.isnan(c):
                    costs.append(c)
            if costs:
                vals.append(float(np.mean(costs)))
        return vals

    return "validation_cost_s", run


def tune(
    policy: PlacementPolicy,
    data: LabelSet,
    setting: Setting | None = None,
    *,
    n_trials: int = 10,
    seed: int = 0,
    max_inner_splits: int = 3,
    on_trial: TrialCallback | None = None,
) -> TuningResult:
    """Tune ``policy``'s hyperparameters on validation repositories of ``data`` (TPE, seeded).

    ``data`` must be the training fold only. Returns the best parameters; the caller sets
    them (``policy.set_params(**result.best_params)``) and refits on the whole fold.
    """
    setting = as_setting(setting)
    task_repo = dict(zip(data.tasks["task_id"], data.tasks["repo"], strict=True))
    splits = list(inner_splits(set(task_repo.values()), task_repo, max_splits=max_inner_splits))
    audit = SplitAudit()
    if not splits:
        return TuningResult({}, math.nan, pd.DataFrame(), "none (one training repository)", audit)
    for tr, va in splits:
        audit.record("tuning", {task_repo[t] for t in tr + va})
    if isinstance(policy, FittedQPolicy):
        objective, run = _fqi_objective(policy, data, splits, setting)
    elif isinstance(policy, _ScoredPolicy):
        objective, run = _advantage_objective(policy, data, splits, setting)
    else:
        raise TypeError(f"cannot tune {type(policy).__name__}")
    space = search_space(policy)
    rows = []

    def objective_fn(trial: optuna.Trial) -> float:
        params = space(trial)
        vals = run(params)
        value = float(np.mean(vals)) if vals else math.inf
        rows.append({"trial": trial.number, **params, "value": value, "n_splits": len(vals)})
        if on_trial is not None:
            on_trial(trial.number, params, value, vals)
        return value

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed))
    study.optimize(objective_fn, n_trials=n_trials)
    return TuningResult(dict(study.best_params), float(study.best_value), pd.DataFrame(rows), objective, audit)
