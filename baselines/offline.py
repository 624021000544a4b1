"""Offline limits that see the measured recovery table: unattainable by any online policy.

``CausalAdvantage`` is the online-reachable reference beside them: it decides boundary by
boundary in order, seeing the *true* current advantage of each checkpoint
(:func:`ripplecp_policy.pricing.current_advantage`, the advantage regressors' target) but
nothing of the boundaries still to come, and checkpoints when it exceeds a threshold per
checkpoint already taken, tuned on the training repositories. It is what a perfect
advantage predictor with the first-exceedance rule reaches: the gap from it to the
cross-fitted limit is the price of not seeing the future, which no learning of the current
advantage can close; the gap from a learned policy to it is what better prediction could.

``OraclePolicy`` ranks candidates by measured advantage (Appendix F's oracle): greedily,
it adds the candidate whose measured advantage given the checkpoints already chosen —
the drop in expected placement cost J(c-, f) - J(t, f) - C(t) over the failures it
serves — is largest, while positive and within budget. ``ClairvoyantOptimum`` is the
exact dynamic program (:func:`ripplecp_policy.pricing.optimal_placement`): the limit
every policy's regret is measured against. Both read the task's cost arrays the runner
hands them, priced under the evaluated failure model.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from baselines.grid import quantile_grid
from ripplecp_policy.evaluation import evaluator_for
from ripplecp_policy.policy import (
    BoundaryObservation,
    Budget,
    PlacementPolicy,
    Role,
    Setting,
    as_setting,
)
from ripplecp_policy.pricing import (
    TaskCosts,
    current_advantage,
    fits,
    optimal_placement,
    placement_objective,
)

if TYPE_CHECKING:
    from labelsets.tables import LabelSet


class _Offline(PlacementPolicy):
    role = Role.OFFLINE
    uses_features = False

    def decide(self, obs: BoundaryObservation) -> bool:
        raise TypeError(f"{self.name} is offline: the runner calls place(costs, budget)")

    def place(self, costs: TaskCosts, budget: Budget) -> list[int]:
        raise NotImplementedError


class OraclePolicy(_Offline):
    """Greedy by measured marginal advantage (unattainable: it reads the recovery table)."""

    def place(self, costs: TaskCosts, budget: Budget) -> list[int]:
        tc = costs
        charge = tc.charges(budget)
        chosen: list[int] = []
        spent = 0.0
        current = placement_objective(tc, chosen)
        while True:
            best_gain, best_t = 0.0, None
            for t in range(1, tc.n_boundaries + 1):
                if t in chosen or not fits(spent, charge[t], budget.amount):
                    continue
                v = placement_objective(tc, [*chosen, t])
                gain = current - v if not math.isnan(v) else -math.inf
                if gain > best_gain + 1e-12:
                    best_gain, best_t = gain, t
            if best_t is None:
                return sorted(chosen)
            chosen.append(best_t)
            spent += charge[best_t]
            current -= best_gain

    @property
    def name(self) -> str:
        return "oracle"


class ClairvoyantOptimum(_Offline):
    """The exact optimum over the recovery table under the budget (dynamic program)."""

    def place(self, costs: TaskCosts, budget: Budget) -> list[int]:
        return optimal_placement(costs, budget)[0]

    @property
    def name(self) -> str:
        return "optimum"


class CausalAdvantage(_Offline):
    """The online-reachable reference (module docstring): checkpoint at boundary b when the
    true current advantage exceeds ``thresholds_[checkpoints taken so far]`` (the last entry
    serves every later checkpoint) and the checkpoint fits the budget. ``fit`` tunes the
    thresholds on the training tasks by coordinate descent over a grid (quantiles of the
    training advantages, 0 and +-inf), lowest mean training objective, ``n_passes`` passes;
    one threshold per checkpoint of a count budget, one for seconds and bytes budgets.
    Unfitted, or fitted without a budget: checkpoint whenever the advantage is positive."""

    def __init__(self, n_thresholds: int = 13, n_passes: int = 2) -> None:
        self.n_thresholds = n_thresholds
        self.n_passes = n_passes

    def fit(self, data: LabelSet, setting: Setting | None = None) -> CausalAdvantage:
        setting = as_setting(setting)
        budget = setting.budget
        ev = evaluator_for(data)
        tcs = [ev.costs(t, setting.hazard) for t in data.task_ids]
        tcs = [tc for tc in tcs if tc.is_full() and tc.n_boundaries > 0]
        thresholds = [0.0]
        if budget is not None and tcs:
            mats = [_advantages(tc) for tc in tcs]  # once per task: the grid search reads them
            advs = np.concatenate([m[np.tril_indices_from(m, -1)] for m in mats])
            grid = sorted({-math.inf, 0.0, math.inf, *quantile_grid(advs, self.n_thresholds)})
            slots = max(1, min(int(budget.amount), 3)) if budget.kind == "count" else 1
            thresholds = [0.0] * slots

            def score(th: list[float]) -> float:
                return float(np.nanmean([placement_objective(tc, _walk(tc, budget, th, m))
                                         for tc, m in zip(tcs, mats, strict=True)]))

            best = score(thresholds)
            for _ in range(self.n_passes):
                for i in range(slots):
                    for v in grid:
                        trial = [*thresholds[:i], v, *thresholds[i + 1:]]
                        s = score(trial)
                        if s < best - 1e-9:
                            best, thresholds = s, trial
        self.thresholds_ = tuple(float(x) for x in thresholds)
        return super().fit(data, setting)

    def place(self, costs: TaskCosts, budget: Budget) -> list[int]:
        return _walk(costs, budget, list(getattr(self, "thresholds_", (0.0,))))

    @property
    def name(self) -> str:
        return "causal-advantage"


def _advantages(tc: TaskCosts) -> np.ndarray:
    """A[b, c]: the true current advantage at boundary b with last checkpoint c < b."""
    a = np.full((tc.n_boundaries + 1, tc.n_boundaries + 1), np.nan)
    for b in range(1, tc.n_boundaries + 1):
        for c in range(b):
            a[b, c] = current_advantage(tc, b, c)
    return a


def _walk(tc: TaskCosts, budget: Budget, thresholds: list[float],
          advantages: np.ndarray | None = None) -> list[int]:
    """Boundaries 1..B in order: take b when its true current advantage given the
    checkpoints taken so far exceeds the threshold of their count and it fits the budget
    (``advantages``: :func:`_advantages` of ``tc``, when already computed)."""
    charge = tc.charges(budget)
    taken: list[int] = []
    spent = 0.0
    for b in range(1, tc.n_boundaries + 1):
        if not fits(spent, charge[b], budget.amount):
            continue
        last = taken[-1] if taken else 0
        a = advantages[b, last] if advantages is not None else current_advantage(tc, b, last)
        if a > thresholds[min(len(taken), len(thresholds) - 1)]:  # NaN (unmeasured): never
            taken.append(b)
            spent += charge[b]
    return taken
