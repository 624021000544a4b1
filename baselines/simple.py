"""Rule baselines that read no features: none, every, first, fixed-k, random.

First-boundary is the paper's bar (Section 6, Appendix D): spend the budget on the
earliest safe boundaries. Every-boundary is an upper-overhead reference and is run
*without* a matched budget (its role: an unmatched reference); it is shown, never judged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from baselines.grid import tune_fitted
from ripplecp_policy.policy import (
    BoundaryObservation,
    PlacementPolicy,
    Role,
    Setting,
    as_setting,
)

if TYPE_CHECKING:
    from oracle.tables import LabelSet


class NoCheckpoint(PlacementPolicy):
    """Never checkpoint: every failure restarts from the pristine start."""

    uses_features = False

    def decide(self, obs: BoundaryObservation) -> bool:
        return False

    @property
    def name(self) -> str:
        return "no-checkpoint"


class EveryBoundary(PlacementPolicy):
    """Checkpoint at every candidate: the upper-overhead reference, not budget-matched."""

    uses_features = False
    role = Role.REFERENCE

    def decide(self, obs: BoundaryObservation) -> bool:
        return True

    @property
    def name(self) -> str:
        return "every-boundary"


class FirstBoundary(PlacementPolicy):
    """Spend the budget on the earliest boundaries (the rule a learned policy must beat).

    It asks at every boundary; the runner refuses what does not fit, so under a count
    budget of k it takes boundaries 1..k.
    """

    uses_features = False

    def decide(self, obs: BoundaryObservation) -> bool:
        return True

    @property
    def name(self) -> str:
        return "first-boundary"


class FixedK(PlacementPolicy):
    """Checkpoint every k-th boundary (boundaries k, 2k, 3k, ...).

    ``k=None`` tunes k in ``fit`` like the other tuned baselines: the k in 1..B (B the most
    boundaries of a training task) with the lowest mean placement objective on the training
    tasks under the budget it will be evaluated at (:func:`baselines.grid.tune_fitted`; ties:
    the larger k, the fewer checkpoints). The runner refuses what the budget does not buy,
    so a small k under a small budget takes the earliest multiples of k.
    """

    uses_features = False

    def __init__(self, k: int | None = None, default_k: int = 2) -> None:
        self.k = k
        self.default_k = default_k

    def fit(self, data: LabelSet, setting: Setting | None = None) -> FixedK:
        setting = as_setting(setting)
        if self.k is not None:
            if int(self.k) < 1:
                raise ValueError(f"FixedK: k must be >= 1, got {self.k}")
            self.k_ = int(self.k)
        elif setting.budget is None or len(data.checkpoints) == 0:
            self.k_ = int(self.default_k)
        else:
            b_max = int(data.checkpoints.groupby("task_id").size().max())
            grid = list(range(b_max, 0, -1))  # fewest checkpoints first
            self.k_, self.tuning_scores_ = tune_fitted(self, "k_", grid, data, setting)
        return super().fit(data, setting)

    def decide(self, obs: BoundaryObservation) -> bool:
        k = getattr(self, "k_", self.k or self.default_k)
        return obs.boundary % int(k) == 0

    @property
    def name(self) -> str:
        return "fixed-k"


class RandomPolicy(PlacementPolicy):
    """Uniform random candidates at the same budget (evaluation averages >= 10 seeds).

    Online it cannot know how many candidates remain, so ``fit`` learns the typical
    horizon (median number of candidates of the training tasks). At boundary b it
    checkpoints with probability min(1, slots / remaining candidates), where slots is how
    many checkpoints of this cost the remaining budget buys — Knuth's selection sampling,
    uniform over k-subsets when the horizon is right. One draw per boundary, so the seed
    alone fixes the placement.
    """

    uses_features = False

    def __init__(self, horizon: int | None = None) -> None:
        self.horizon = horizon

    def fit(self, data: LabelSet, setting: Setting | None = None) -> RandomPolicy:
        if self.horizon is not None:
            self.horizon_ = int(self.horizon)
        else:
            counts = data.checkpoints.groupby("task_id").size()
            self.horizon_ = int(np.median(counts)) if len(counts) else 1
        return super().fit(data, setting)

    def decide(self, obs: BoundaryObservation) -> bool:
        u = float(self._rng.random())
        horizon = getattr(self, "horizon_", self.horizon or obs.boundary)
        left = max(int(horizon) - obs.boundary + 1, 1)
        if obs.checkpoint_cost <= 0:
            return u < 1.0 / left
        slots = np.floor(obs.remaining / obs.checkpoint_cost + 1e-9)
        return u < min(1.0, slots / left)

    @property
    def name(self) -> str:
        return "random"
