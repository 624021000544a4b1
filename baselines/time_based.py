"""Time-based placement: a fixed wall-clock interval between checkpoints.

``mode="young_daly"``: the classical first-order optimum interval sqrt(2 · C · MTBF)
(Young 1974, Daly 2006), from the estimated checkpoint cost C (mean measured creation
seconds of the training tasks' checkpoints) and the mean time between failures. The
evaluation injects one failure per run, so the estimated MTBF is the mean nominal
duration of a training task (override with ``mtbf_s``). This is the elapsed-work rule the
paper says misprices agent checkpoints (Section 4); it is here to be measured.

``mode="tuned"``: the interval is chosen on the training tasks, under the evaluation
budget, from a grid of quantiles of the nominal boundary times (plus the Young/Daly
value) by the exact placement objective (Appendix F: "validation-tuned").
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from baselines.grid import quantile_grid, tune_fitted
from ripplecp_policy.policy import BoundaryObservation, PlacementPolicy, Setting, as_setting

if TYPE_CHECKING:
    from labelsets.tables import LabelSet


class TimeBased(PlacementPolicy):
    """Checkpoint once ``interval_`` nominal seconds have passed since the last checkpoint."""

    uses_features = False

    def __init__(
        self,
        mode: str = "young_daly",
        interval_s: float | None = None,
        checkpoint_s: float | None = None,
        mtbf_s: float | None = None,
    ) -> None:
        self.mode = mode
        self.interval_s = interval_s
        self.checkpoint_s = checkpoint_s
        self.mtbf_s = mtbf_s

    def fit(self, data: LabelSet, setting: Setting | None = None) -> TimeBased:
        setting = as_setting(setting)
        if self.mode not in ("young_daly", "tuned"):
            raise ValueError(f"TimeBased: mode must be 'young_daly' or 'tuned', got {self.mode!r}")
        c = self.checkpoint_s
        if c is None:
            c = float(data.checkpoints["creation_s"].mean()) if len(data.checkpoints) else 0.0
        m = self.mtbf_s
        if m is None:
            m = float(data.tasks["nominal_s"].mean()) if len(data.tasks) else math.inf
        self.checkpoint_s_ = float(c)
        self.mtbf_s_ = float(m)
        self.young_daly_s_ = math.sqrt(2.0 * max(c, 0.0) * max(m, 0.0))
        if self.interval_s is not None:
            self.interval_ = float(self.interval_s)
        elif self.mode == "young_daly" or setting.budget is None:
            self.interval_ = self.young_daly_s_
        else:
            times = data.checkpoints["nominal_t_s"].to_numpy(dtype=float)
            grid = [0.0, *quantile_grid(times), self.young_daly_s_]
            grid = sorted(set(grid), reverse=True)  # longest interval (fewest checkpoints) first
            self.interval_, self.tuning_scores_ = tune_fitted(self, "interval_", grid, data, setting)
        return super().fit(data, setting)

    def reset(self, task_id: str, seed: int = 0) -> None:
        super().reset(task_id, seed)
        self._t_at: dict[int, float] = {0: 0.0}

    def decide(self, obs: BoundaryObservation) -> bool:
        t = 0.0 if not np.isfinite(obs.elapsed_s) else float(obs.elapsed_s)
        self._t_at[obs.boundary] = t
        since = t - self._t_at.get(obs.last_checkpoint, 0.0)
        interval = getattr(self, "interval_", self.interval_s)
        if interval is None:
            raise RuntimeError("TimeBased: call fit() or pass interval_s")
        return since >= interval

    @property
    def name(self) -> str:
        return "time-young-daly" if self.mode == "young_daly" else "time-tuned"
