"""The budget-aware stopping learner: hindsight targets from the exact DP, validated threshold."""

from __future__ import annotations

import numpy as np
import pytest

from ripplecp_policy.datasets import replays
from ripplecp_policy.evaluation import Evaluator
from ripplecp_policy.learned import LEARNED, StoppingPolicy
from ripplecp_policy.learned.stopping import K_FEATURE, checkpoints_left
from ripplecp_policy.policy import BoundaryObservation, Budget, Setting
from ripplecp_policy.pricing import optimal_placement, placement_objective, stopping_values


def test_stopping_values_are_the_optimum_run_backwards(toy_data):
    ev = Evaluator(toy_data)
    for t in toy_data.task_ids:
        tc = ev.costs(t)
        cp, skip = stopping_values(tc, 3)
        H = np.minimum(cp, skip)
        for k in (1, 2, 3):
            assert H[k, 1, 0] == pytest.approx(optimal_placement(tc, Budget("count", k))[1])
        # following the hindsight sign from the start reproduces the optimal placement
        last, k, placed = 0, 1, []
        for b in range(1, tc.n_boundaries + 1):
            if k > 0 and cp[k, b, last] < skip[k, b, last] - 1e-12:
                placed.append(b)
                last, k = b, k - 1
        assert placement_objective(tc, placed) == pytest.approx(optimal_placement(tc, Budget("count", 1))[1])


def test_the_table_and_the_fit(toy_fold):
    _, train, test = toy_fold
    setting = Setting(Budget("count", 1))
    frame, names = StoppingPolicy.stopping_table(replays(train, setting))
    assert names[-1] == K_FEATURE and frame[K_FEATURE].min() == 1 and np.isfinite(frame["target"]).all()
    assert set(frame["repo"]) == set(train.tasks["repo"])
    pol = StoppingPolicy(n_estimators=30).fit(train, setting)
    assert not pol.validation_costs_.empty and np.isfinite(pol.validation_costs_["mean_cost"]).any()
    pol.audit_.check(set(test.tasks["repo"]))  # the held-out repository was never seen
    assert StoppingPolicy(n_estimators=30, threshold=5.0).fit(train, setting).threshold_ == 5.0
    ev = Evaluator(test)
    res = ev.evaluate(pol, test.task_ids, setting)
    assert (res["spend"] <= 1.0).all() and len(res) == len(test.task_ids)
    assert "stopping" in {e.key for e in LEARNED} and not next(e for e in LEARNED if e.key == "stopping").in_study


def test_checkpoints_left_is_what_the_budget_still_buys():
    def obs(kind, remaining, cost):
        return BoundaryObservation("t", "r", 1, 0, {}, Budget(kind, 3.0), remaining, 0, 0, 0.0, cost, True)

    assert checkpoints_left(obs("count", 2.0, 1.0)) == 2
    assert checkpoints_left(obs("seconds", 7.0, 3.0)) == 2
    assert checkpoints_left(obs("seconds", 7.0, 0.0)) == 8  # free checkpoints: capped
