"""Failure-risk placement: checkpoint the states where a failure looks likely.

The paper's failure-risk baseline (Appendix F) "predicts near-term failure using
non-ripple features and preserves the highest-risk states", to separate *failure is
likely* from *state is valuable*. The evaluation's injected failures are uniform over
segments and carry no signal a log could show, so the target is made explicit here:

    y(b) = 1 iff an error event (``is_error`` or a non-zero exit code) occurs among the
    ``horizon`` events of the nominal trajectory that follow boundary b.

That is a label about the *nominal run's* near-term trouble (a failing command, a crashed
tool), the observable stand-in for "a failure is likely soon". The classifier is a
standardized logistic regression (class-balanced) on the non-ripple online features that
do not depend on the placement (``ripple__*`` and every "since the last checkpoint"
quantity excluded), so training features — computed without checkpoints — match what
the runner shows at evaluation. The policy checkpoints when the predicted risk reaches a
threshold tuned on the training tasks under the evaluation budget (highest-risk first).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

from baselines.grid import quantile_grid, tune_fitted
from ripplecp_policy.evaluation import evaluator_for
from ripplecp_policy.policy import BoundaryObservation, PlacementPolicy, Setting, as_setting

if TYPE_CHECKING:
    from features.schema import Event
    from labelsets.tables import LabelSet

_PLACEMENT_DEPENDENT = {"context__has_checkpoint", "context__checkpoints"}


def risk_feature_names(names: list[str]) -> list[str]:
    """Non-ripple features that do not depend on where checkpoints were taken."""
    return [
        n for n in names
        if not n.startswith("ripple__") and "since_cp" not in n and n not in _PLACEMENT_DEPENDENT
    ]


def is_error_event(e: Event) -> bool:
    """An observable error: the event says so, or a command exited non-zero."""
    return bool(e.is_error) or (e.exit_code is not None and e.exit_code != 0)


def near_term_error(events: list[Event], event_index: int, horizon: int) -> bool:
    """True when an error event has index in (event_index, event_index + horizon]."""
    return any(
        is_error_event(e) for e in events if event_index < e.index <= event_index + horizon
    )


class FailureRisk(PlacementPolicy):
    """Checkpoint where the predicted near-term error risk reaches ``threshold_``."""

    def __init__(
        self,
        horizon: int = 5,
        threshold: float | None = None,
        C: float = 1.0,
        random_state: int = 0,
    ) -> None:
        self.horizon = horizon
        self.threshold = threshold
        self.C = C
        self.random_state = random_state

    def fit(self, data: LabelSet, setting: Setting | None = None) -> FailureRisk:
        setting = as_setting(setting)
        if int(self.horizon) < 1:
            raise ValueError(f"FailureRisk: horizon must be >= 1, got {self.horizon}")
        ev = evaluator_for(data)
        rows, y, names = [], [], None
        for t in data.task_ids:
            tc = ev.costs(t)
            events = data.trajectories[t].events
            for b in range(1, tc.n_boundaries + 1):
                f = ev.features_at(t, b, (), setting.features)
                if names is None:
                    names = risk_feature_names(sorted(f))
                rows.append([f.get(n, math.nan) for n in names])
                y.append(near_term_error(events, int(tc.event_index[b]), int(self.horizon)))
        self.feature_names_ = names or []
        X = np.asarray(rows, dtype=float).reshape(len(rows), len(self.feature_names_))
        yv = np.asarray(y, dtype=int)
        self.base_rate_ = float(yv.mean()) if yv.size else 0.0
        if yv.size and 0 < yv.sum() < yv.size and X.shape[1]:
            pipe = Pipeline(
                [
                    ("impute", SimpleImputer(strategy="median", keep_empty_features=True)),
                    ("scale", StandardScaler()),
                    ("model", LogisticRegression(
                        C=self.C, class_weight="balanced", max_iter=2000,
                        random_state=self.random_state,
                    )),
                ]
            ).fit(X, yv)
            imp, sc, lr = pipe.named_steps["impute"], pipe.named_steps["scale"], pipe.named_steps["model"]
            self.model_ = pipe
            self.fill_ = np.asarray(imp.statistics_, dtype=float)
            self.mean_ = np.asarray(sc.mean_, dtype=float)
            self.scale_ = np.asarray(sc.scale_, dtype=float)
            self.coef_ = np.asarray(lr.coef_[0], dtype=float)
            self.intercept_ = float(lr.intercept_[0])
            risks = self._risk_matrix(X)
        else:  # one class only: a constant risk
            self.model_ = None
            risks = np.full(len(X), self.base_rate_)
        if self.threshold is not None:
            self.threshold_ = float(self.threshold)
        elif setting.budget is None:
            self.threshold_ = 0.5
        else:
            grid = sorted(set(quantile_grid(risks)) | {float(np.max(risks, initial=1.0)) + 1e-9}, reverse=True)
            self.threshold_, self.tuning_scores_ = tune_fitted(self, "threshold_", grid, data, setting)
        return super().fit(data, setting)

    def _risk_matrix(self, X: np.ndarray) -> np.ndarray:
        X = np.where(np.isnan(X), self.fill_[None, :], X)
        z = (X - self.mean_) / self.scale_
        return 1.0 / (1.0 + np.exp(-(z @ self.coef_ + self.intercept_)))

    def risk(self, obs: BoundaryObservation) -> float:
        """Predicted probability of an error within ``horizon`` events after this boundary."""
        if self.model_ is None:
            return self.base_rate_
        x = np.array([[obs.features.get(n, math.nan) for n in self.feature_names_]], dtype=float)
        return float(self._risk_matrix(x)[0])

    def decide(self, obs: BoundaryObservation) -> bool:
        return self.risk(obs) >= self.threshold_

    @property
    def name(self) -> str:
        return "failure-risk"
