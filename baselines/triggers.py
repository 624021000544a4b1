"""Event-triggered placement: state change over a threshold, or verified progress.

Both read only the online, prefix-causal features of :mod:`features.online` at the
boundary (computed with the checkpoints taken so far), so "since the last checkpoint"
counters reset when the runner marks a checkpoint.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from baselines.grid import quantile_grid, tune_fitted
from ripplecp_policy.evaluation import evaluator_for
from ripplecp_policy.policy import BoundaryObservation, PlacementPolicy, Setting, as_setting

if TYPE_CHECKING:
    from labelsets.tables import LabelSet

_MEASURES = {
    "bytes": "state__bytes_modified_since_cp",
    "files": "state__files_touched_since_cp",
}


def _finite(x: float | None) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


class StateChange(PlacementPolicy):
    """Checkpoint when the bytes (or files) changed since the last checkpoint reach a threshold.

    ``measure``: "bytes", "files", or "auto" (bytes when the training logs record bytes
    modified, else files). ``threshold=None`` tunes it on the training tasks under the
    evaluation budget from quantiles of the measure (the paper's "validation threshold").
    A boundary where the measure is unknown (NaN) never triggers.
    """

    def __init__(self, measure: str = "auto", threshold: float | None = None) -> None:
        self.measure = measure
        self.threshold = threshold

    def fit(self, data: LabelSet, setting: Setting | None = None) -> StateChange:
        setting = as_setting(setting)
        if self.measure not in ("auto", *_MEASURES):
            raise ValueError(f"StateChange: measure must be auto, bytes or files, got {self.measure!r}")
        ev = evaluator_for(data)
        values: dict[str, list[float]] = {k: [] for k in _MEASURES}
        for t in data.task_ids:
            for b in range(1, ev.costs(t).n_boundaries + 1):
                f = ev.features_at(t, b, (), setting.features)
                for k, col in _MEASURES.items():
                    values[k].append(float(f.get(col, math.nan)))
        if self.measure == "auto":
            known = sum(_finite(v) for v in values["bytes"])
            self.measure_ = "bytes" if known >= max(1, len(values["bytes"]) // 2) else "files"
        else:
            self.measure_ = self.measure
        self.feature_ = _MEASURES[self.measure_]
        if self.threshold is not None:
            self.threshold_ = float(self.threshold)
        else:
            grid = quantile_grid(values[self.measure_])
            grid = sorted(set(grid), reverse=True) or [0.0]  # highest threshold first
            if setting.budget is None:
                self.threshold_ = grid[len(grid) // 2]
            else:
                self.threshold_, self.tuning_scores_ = tune_fitted(self, "threshold_", grid, data, setting)
        return super().fit(data, setting)

    def decide(self, obs: BoundaryObservation) -> bool:
        v = obs.features.get(self.feature_, math.nan)
        return bool(_finite(v) and v > 0 and v >= self.threshold_)

    @property
    def name(self) -> str:
        return "state-change"


#: progress signals a boundary can carry since the last checkpoint
PROGRESS_SIGNALS = {
    "verifier_pass": "progress__verifier_passes_since_cp",
    "newly_passing": "progress__newly_passing_since_cp",
    "commit": "progress__commits_since_cp",
    "validated": "progress__validated_artifacts_since_cp",
}


class Progress(PlacementPolicy):
    """Checkpoint after verified progress: a passing verifier, newly passing tests, a commit
    or a newly validated artifact since the last checkpoint (``signals`` selects which)."""

    def __init__(self, signals: tuple[str, ...] = tuple(PROGRESS_SIGNALS)) -> None:
        self.signals = signals

    def fit(self, data: LabelSet, setting: Setting | None = None) -> Progress:
        bad = [s for s in self.signals if s not in PROGRESS_SIGNALS]
        if bad:
            raise ValueError(f"Progress: unknown signals {bad}; choose from {sorted(PROGRESS_SIGNALS)}")
        self.features_ = [PROGRESS_SIGNALS[s] for s in self.signals]
        return super().fit(data, setting)

    def decide(self, obs: BoundaryObservation) -> bool:
        names = getattr(self, "features_", [PROGRESS_SIGNALS[s] for s in self.signals])
        for n in names:
            v = obs.features.get(n, math.nan)
            if _finite(v) and v > 0:
                return True
        return False

    @property
    def name(self) -> str:
        return "progress"
