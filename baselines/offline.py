"""Offline limits that see the measured recovery table: unattainable by any online policy.

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

from ripplecp_policy.policy import BoundaryObservation, Budget, PlacementPolicy, Role
from ripplecp_policy.pricing import TaskCosts, fits, optimal_placement, placement_objective


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
