"""Optuna tuning on validation repositories inside the training fold only.

:func:`tune` never sees the held-out repository: it is given the training fold's label
set, splits it by repository (leave-one-repository-out, or ``GroupKFold`` over at most
``max_inner_splits`` groups) and scores each trial on the validation repositories. Every
repository it used is recorded in the result's audit under the stage ``"tuning"``.

The search space is the policy's registry entry's (:mod:`ripplecp_policy.registry`), or one
passed in; the objective is the policy's own ``tuning_objective`` (lower is better):

- advantage regressors: validation RMSE of measured advantage (cheap: the feature table
  does not depend on the hyperparameters, so it is built once);
- advantage classifiers: validation Brier score of P(A_CP > 0);
- fitted-Q: the mean measured cost (``pricing.placement_objective``) of the fitted
  policy's placements on the validation tasks at the setting's budget.

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

from labelsets.tables import LabelSet
from ripplecp_policy.policy import PlacementPolicy, Setting, as_setting
from ripplecp_policy.registry import SearchSpace, entry_for
from ripplecp_policy.splits import SplitAudit, inner_splits

TrialCallback = Callable[[int, dict[str, Any], float, list[float]], None]


@dataclass
class TuningResult:
    """Best parameters, every trial, and the repositories tuning saw."""

    best_params: dict[str, Any]
    best_value: float
    trials: pd.DataFrame
    objective: str
    audit: SplitAudit = field(default_factory=SplitAudit)


def tune(
    policy: PlacementPolicy,
    data: LabelSet,
    setting: Setting | None = None,
    *,
    space: SearchSpace | None = None,
    n_trials: int = 10,
    seed: int = 0,
    max_inner_splits: int = 3,
    on_trial: TrialCallback | None = None,
) -> TuningResult:
    """Tune ``policy``'s hyperparameters on validation repositories of ``data`` (TPE, seeded).

    ``data`` must be the training fold only; ``setting`` is the one the policy will be
    fitted and evaluated under. ``space`` defaults to the policy's registered search space.
    Returns the best parameters; the caller sets them
    (``policy.set_params(**result.best_params)``) and refits on the whole fold.
    """
    setting = as_setting(setting)
    task_repo = dict(zip(data.tasks["task_id"], data.tasks["repo"], strict=True))
    splits = list(inner_splits(set(task_repo.values()), task_repo, max_splits=max_inner_splits))
    audit = SplitAudit()
    if not splits:
        return TuningResult({}, math.nan, pd.DataFrame(), "none (one training repository)", audit)
    for tr, va in splits:
        audit.record("tuning", {task_repo[t] for t in tr + va})
    objective_of = getattr(policy, "tuning_objective", None)
    if objective_of is None:
        raise TypeError(f"cannot tune {type(policy).__name__}: it defines no tuning_objective")
    if space is None:
        space = entry_for(policy).space
        if space is None:
            raise ValueError(f"{policy.name} is registered without a search space; pass space=")
    objective, run = objective_of(data, splits, setting)
    rows = []

    def objective_fn(trial: optuna.Trial) -> float:
        params = space(trial)
        vals = run(params)
        value = float(np.mean(vals)) if vals else math.inf
        rows.append({"trial": trial.number, **params, "value": value, "n_splits": len(vals)})
        if on_trial is not None:
            on_trial(trial.number, params, value, vals)
        return value

    # ERROR: a trial that raises reaches the caller as its own (one-line) error; at WARNING,
    # Optuna first logs it with its whole traceback (hundreds of lines from train_policies)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed))
    study.optimize(objective_fn, n_trials=n_trials)
    return TuningResult(dict(study.best_params), float(study.best_value), pd.DataFrame(rows), objective, audit)
