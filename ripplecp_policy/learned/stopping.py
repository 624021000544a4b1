"""A budget-aware stopping learner: predict the value of checkpointing now rather than waiting.

The advantage regressors predict a checkpoint's *current* advantage and fire at the first
boundary where it exceeds a threshold: on a task with two decisive steps they spend a
one-checkpoint budget on the first, where the optimum keeps the later, costlier one. This
learner predicts instead, from the same online features plus the checkpoints the budget
still buys (``k``), the value of checkpointing now *given the budget left*:

    y(t, c, k) = [skip(k, t, c) - cp(k, t, c)] / P(failure after t)

the hindsight dynamic program's cost of waiting minus that of taking t, with last
checkpoint c and k checkpoints left (:func:`ripplecp_policy.pricing.stopping_values`),
conditioned on the failure not having struck yet (the scale of the advantage labels). It
checkpoints when the prediction exceeds a threshold chosen on validation repositories inside
the training data, as the regressors' is. One model serves every budget (``k`` is a
feature), so a study's budgets share a fit. Seconds and bytes budgets read ``k`` as the
checkpoints the remaining budget buys at the estimated charge (an approximation: the
targets count checkpoints).

Hindsight targets know where the decisive steps fall, so they overvalue waiting on average;
the validated threshold is where that is corrected. Whether it beats the first-exceedance
rule on held-out repositories is measured, not assumed (README).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from labelsets.tables import LabelSet
from ripplecp_policy.datasets import (
    POLICY_FEATURES,
    FeatureFn,
    TaskReplay,
    observation_vector,
    policy_features,
    replays,
)
from ripplecp_policy.learned.advantage import PackedTrees
from ripplecp_policy.policy import BoundaryObservation, Budget, PlacementPolicy, Setting, as_setting
from ripplecp_policy.pricing import stopping_values
from ripplecp_policy.splits import SplitAudit, inner_splits

#: the budget-state feature the stopping learner adds to the online features
K_FEATURE = "stop__k_left"
#: the most checkpoints ``k`` counts (beyond it waiting costs nothing the model could tell)
K_MAX = 8


def checkpoints_left(obs: BoundaryObservation) -> int:
    """How many more checkpoints the remaining budget buys: the remaining count, or the
    remaining seconds/bytes over the estimated charge (both known online), capped at K_MAX."""
    if obs.budget.kind == "count":
        k = math.floor(obs.remaining + 1e-9)
    elif obs.checkpoint_cost > 0:
        k = math.floor(obs.remaining / obs.checkpoint_cost + 1e-9)
    else:
        k = K_MAX
    return int(min(max(k, 0), K_MAX))


class StoppingPolicy(PlacementPolicy):
    """Checkpoint when the predicted value of checkpointing now over waiting, given the
    checkpoints the budget still buys, exceeds ``threshold_`` (module docstring)."""

    def __init__(
        self,
        threshold: float | None = None,
        device: str = "cpu",
        n_estimators: int = 200,
        max_depth: int = 3,
        learning_rate: float = 0.05,
        random_state: int = 0,
        feature_fn: FeatureFn | None = None,
        n_thresholds: int = 11,
        max_inner_splits: int | None = 5,
    ) -> None:
        self.threshold = threshold
        self.device = device
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.random_state = random_state
        self.feature_fn = feature_fn
        self.n_thresholds = n_thresholds
        self.max_inner_splits = max_inner_splits

    # -- the training table ---------------------------------------------------------------
    @staticmethod
    def stopping_table(tasks: dict[str, TaskReplay]) -> tuple[pd.DataFrame, list[str]]:
        """One row per (task, boundary t, last checkpoint c < t, checkpoints left k):
        features at t with c checkpointed, k, and the target (module docstring)."""
        rows: list[dict[str, Any]] = []
        names: list[str] | None = None
        for task in tasks.values():
            tc = task.costs
            if not tc.is_full() or tc.n_boundaries == 0:
                continue
            k_max = min(K_MAX, tc.n_boundaries)
            cp, skip = stopping_values(tc, k_max)
            surv = tc.survival()
            for t in range(1, tc.n_boundaries + 1):
                if surv[t] <= 0:
                    continue
                for c in range(t):
                    feats = task.features_at(t, (c,) if c > 0 else ())
                    if names is None:
                        names = [*feats, *POLICY_FEATURES, K_FEATURE]
                    base = {**feats, **policy_features(t, c)}
                    for k in range(1, k_max + 1):
                        y = (skip[k, t, c] - cp[k, t, c]) / surv[t]
                        if np.isfinite(y):
                            rows.append({**base, K_FEATURE: float(k), "target": float(y),
                                         "repo": task.repo, "task_id": task.task_id})
        if names is None:
            raise ValueError("stopping learner: no task with a full recovery table to learn from")
        frame = pd.DataFrame(rows)
        frame[names] = frame[names].astype(float)
        return frame, names

    def _fit_model(self, X: np.ndarray, y: np.ndarray) -> PackedTrees:
        from xgboost import XGBRegressor

        m = XGBRegressor(n_estimators=self.n_estimators, max_depth=self.max_depth,
                         learning_rate=self.learning_rate, tree_method="hist", device=self.device,
                         n_jobs=1, random_state=self.random_state)
        m.fit(X, y)
        return PackedTrees.from_xgboost(m)

    def _vector(self, obs: BoundaryObservation) -> np.ndarray:
        x = observation_vector(obs, self.feature_names_)
        x[-1] = float(checkpoints_left(obs))
        return x

    # -- fitting --------------------------------------------------------------------------
    def fit(self, data: LabelSet, setting: Setting | None = None) -> StoppingPolicy:
        """Fit the value model on ``data`` (training repositories only); the threshold on
        inner validation repositories at the setting's budget (0 without a budget)."""
        setting = as_setting(setting)
        tasks = replays(data, setting, self.feature_fn)
        frame, names = self.stopping_table(tasks)
        self.feature_names_ = names
        self.repos_ = sorted(set(frame["repo"]))
        self.audit_ = SplitAudit()
        X, y = frame[names].to_numpy(np.float64), frame["target"].to_numpy(np.float64)
        self.model_ = self._fit_model(X, y)
        self.audit_.record("model", self.repos_)
        if self.threshold is not None or setting.budget is None:
            self.threshold_ = float(self.threshold if self.threshold is not None else 0.0)
            self.validation_costs_ = pd.DataFrame()
        else:
            self._select_threshold(frame, tasks, setting.budget)
        return super().fit(data, setting)

    def _select_threshold(self, frame: pd.DataFrame, tasks: dict[str, TaskReplay], budget: Budget) -> None:
        """The threshold with the lowest mean measured cost on validation repositories, each
        scored by a model fitted on the other training repositories (ties: the largest)."""
        task_repo = {t: r.repo for t, r in tasks.items()}
        scored: list[tuple[TaskReplay, PackedTrees]] = []
        oof = []
        for tr, va in inner_splits(self.repos_, task_repo, max_splits=self.max_inner_splits):
            tr_repos = {task_repo[t] for t in tr}
            sub = frame[frame["repo"].isin(tr_repos)]
            if sub.empty:
                continue
            model = self._fit_model(sub[self.feature_names_].to_numpy(np.float64), sub["target"].to_numpy(np.float64))
            self.audit_.record("threshold_inner_model", tr_repos)
            self.audit_.record("threshold", tr_repos | {task_repo[t] for t in va})
            val = frame[frame["task_id"].isin(va)]
            if len(val):
                oof.append(model.predict(val[self.feature_names_].to_numpy(np.float64)))
            scored.extend((tasks[t], model) for t in va)
        if not scored:
            self.threshold_, self.validation_costs_ = 0.0, pd.DataFrame()
            return
        preds = np.concatenate(oof) if oof else np.zeros(1)
        cands = sorted({-math.inf, math.inf, 0.0, *map(float, np.quantile(preds, np.linspace(0, 1, self.n_thresholds)))})
        rows = []
        for theta in cands:
            costs = []
            for task, model in scored:
                def decide(o: BoundaryObservation, m: PackedTrees = model, th: float = theta) -> bool:
                    return bool(o.affordable and m.predict(self._vector(o)[None, :])[0] > th)

                c = task.expected_cost(task.replay(decide, budget))
                if not math.isnan(c):
                    costs.append(c)
            rows.append({"threshold": theta, "mean_cost": float(np.mean(costs)) if costs else math.nan})
        vc = pd.DataFrame(rows)
        self.validation_costs_ = vc
        best = vc["mean_cost"].min()
        tied = vc[np.isclose(vc["mean_cost"], best, rtol=0, atol=1e-9)]
        self.threshold_ = float(tied["threshold"].max()) if np.isfinite(best) else 0.0

    # -- inference ------------------------------------------------------------------------
    def score(self, obs: BoundaryObservation) -> float:
        """Predicted seconds saved by checkpointing now rather than waiting."""
        return float(self.model_.predict(self._vector(obs)[None, :])[0])

    def decide(self, obs: BoundaryObservation) -> bool:
        if not obs.affordable:
            return False
        return self.score(obs) > self.threshold_

    @property
    def name(self) -> str:
        return "StoppingPolicy[xgboost]"
