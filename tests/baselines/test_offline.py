"""The offline limits: the greedy oracle and the clairvoyant optimum."""

from __future__ import annotations

import pytest

from baselines import ClairvoyantOptimum, FirstBoundary, NoCheckpoint, OraclePolicy
from ripplecp_policy.evaluation import Evaluator
from ripplecp_policy.policy import Budget, Setting
from ripplecp_policy.pricing import optimal_placement, placement_objective


def test_offline_limits(label_set):
    ev = Evaluator(label_set)
    for t in label_set.task_ids:
        tc = ev.costs(t)
        for budget in (Budget("count", 1), Budget("count", 2), Budget("seconds", 9.0)):
            opt = ev.run(ClairvoyantOptimum(), t, Setting(budget))
            p, v = optimal_placement(tc, budget)
            assert opt.checkpoints == p
            ora = ev.run(OraclePolicy(), t, Setting(budget))
            assert placement_objective(tc, ora.checkpoints) >= v - 1e-9
            for online in (FirstBoundary(), NoCheckpoint()):
                pl = ev.run(online.fit(label_set), t, Setting(budget))
                assert placement_objective(tc, pl.checkpoints) >= v - 1e-9
    # with one checkpoint the greedy oracle is exact
    for t in label_set.task_ids:
        b1 = Budget("count", 1)
        assert placement_objective(ev.costs(t), ev.run(OraclePolicy(), t, Setting(b1)).checkpoints) == pytest.approx(
            optimal_placement(ev.costs(t), b1)[1])
