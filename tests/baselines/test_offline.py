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


def test_causal_advantage_sees_the_present_not_the_future(label_set):
    """The online-reachable reference: its choice at boundary b does not move when every
    later boundary's row of the table (recoveries from it, its creation cost) changes; it is
    never better than the optimum; its thresholds are tuned on the data it is fitted on."""
    import dataclasses

    import numpy as np

    from baselines import CausalAdvantage
    from ripplecp_policy.pricing import current_advantage

    ev = Evaluator(label_set)
    for budget in (Budget("count", 1), Budget("count", 2), Budget("seconds", 9.0)):
        pol = CausalAdvantage().fit(label_set, Setting(budget))
        slots = int(budget.amount) if budget.kind == "count" else 1
        assert len(pol.thresholds_) == slots
        for t in label_set.task_ids:
            tc = ev.costs(t)
            placed = pol.place(tc, budget)
            assert placement_objective(tc, placed) >= optimal_placement(tc, budget)[1] - 1e-9
            for b in range(1, tc.n_boundaries):
                J, C = tc.J.copy(), tc.creation_s.copy()
                J[b + 1:] = J[b + 1:] * 3.0 + 50.0  # the future rows change ...
                C[b + 1:] = C[b + 1:] * 0.1
                future = dataclasses.replace(tc, J=J, creation_s=C)
                before = [x for x in pol.place(future, budget) if x <= b]
                assert before == [x for x in placed if x <= b]  # ... the past decisions do not
    tc = ev.costs(label_set.task_ids[0])
    a = current_advantage(tc, 2, 1)
    m = (tc.failures > 2) & (tc.weights > 0)
    want = np.average(tc.J[1, m] - tc.J[2, m] - tc.creation_s[2], weights=tc.weights[m])
    assert a == pytest.approx(want)
    with pytest.raises(ValueError, match="last < boundary"):
        current_advantage(tc, 1, 1)
