"""Rule baselines that read no features: none, every, first, fixed-k, fixed positions, random.

First-boundary is the paper's bar (Section 6, Appendix D): spend the budget on the
earliest safe boundaries. Every-boundary is an upper-overhead reference and is run
*without* a matched budget (its role: an unmatched reference); it is shown, never judged.
Fixed positions is the position-only rule: the boundary indices whose checkpoints cost
least on the training tasks, the same indices in every task.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from baselines.grid import training_objective, tune_fitted
from ripplecp_policy.policy import (
    BoundaryObservation,
    PlacementPolicy,
    Role,
    Setting,
    as_setting,
)

if TYPE_CHECKING:
    from labelsets.tables import LabelSet


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


class FixedPositions(PlacementPolicy):
    """Checkpoint at fixed boundary indices chosen on the training tasks; reads no features.

    The position-only rule a learned policy must beat where a family's value sits at the
    same boundaries in every task. ``positions=None`` chooses the indices in ``fit`` by
    their cost: greedy forward selection over boundary indices 1..B (B the most boundaries
    of a training task) — start with none and add, one at a time, the index whose addition
    gives the lowest mean placement objective on the training tasks under the budget
    (:func:`baselines.grid.tune_fitted`; ties: the earlier index), while that lowers it.
    The runner refuses what the budget does not buy, so an index past a task's budget or
    its last boundary is simply not taken there. Without a budget to tune against it takes
    ``default_positions``.
    """

    uses_features = False

    def __init__(self, positions: tuple[int, ...] | None = None,
                 default_positions: tuple[int, ...] = (1,)) -> None:
        self.positions = positions
        self.default_positions = default_positions

    def fit(self, data: LabelSet, setting: Setting | None = None) -> FixedPositions:
        setting = as_setting(setting)
        if self.positions is not None:
            self.positions_ = _positions(self.positions)
        elif setting.budget is None or len(data.checkpoints) == 0:
            self.positions_ = _positions(self.default_positions)
        else:
            b_max = int(data.checkpoints.groupby("task_id").size().max())
            chosen: tuple[int, ...] = ()
            self.positions_ = chosen
            best = training_objective(self, data, setting)
            self.tuning_scores_ = {chosen: best}
            while len(chosen) < b_max:
                grid = [tuple(sorted((*chosen, p))) for p in range(1, b_max + 1) if p not in chosen]
                cand, scores = tune_fitted(self, "positions_", grid, data, setting)
                self.tuning_scores_.update(scores)
                if not scores[cand] < best - 1e-9:
                    break
                chosen, best = cand, scores[cand]
            self.positions_ = chosen
        return super().fit(data, setting)

    def decide(self, obs: BoundaryObservation) -> bool:
        return obs.boundary in getattr(self, "positions_", ())

    @property
    def name(self) -> str:
        return "fixed-positions"


def _positions(values: tuple[int, ...]) -> tuple[int, ...]:
    out = tuple(sorted({int(p) for p in values}))
    if any(p < 1 for p in out):
        raise ValueError(f"FixedPositions: boundary indices must be >= 1, got {values}")
    return out


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
