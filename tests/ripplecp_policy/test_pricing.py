"""Exact pricing: the one price of a placement, failure weights, the optimum, the budget check."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from labelsets.definitions import failure_cost
from labelsets.tables import RecoveryTable
from ripplecp_policy.policy import Budget
from ripplecp_policy.pricing import (
    BUDGET_RTOL,
    TaskCosts,
    brute_force_placement,
    fits,
    optimal_placement,
    placement_metrics,
    placement_objective,
    unlimited,
)

# ---------------------------------------------------------------------------------------
# Hand-made tables
# ---------------------------------------------------------------------------------------

HAND_J = {(0, 1): 10.0, (0, 2): 20.0, (1, 2): 8.0, (0, 3): 30.0, (1, 3): 15.0, (2, 3): 12.0}


def _frames(J: dict[tuple[int, int], float], creation: list[float], sizes: list[int],
            t_nom: list[float], rl: float = 1.0, task: str = "t") -> tuple[pd.DataFrame, pd.DataFrame]:
    b = len(creation)
    cps = pd.DataFrame(dict(task_id=task, boundary=np.arange(1, b + 1), event_index=np.arange(b),
                            step=np.arange(1, b + 1), nominal_t_s=t_nom, creation_s=creation,
                            size_bytes=sizes, restore_latency_s=rl))
    rows = []
    for (r, f), j in J.items():
        for rep, noise in enumerate((-1.0, 1.0)):  # two repetitions; the mean is j
            rows.append(dict(task_id=task, restore_point=r, failure=f, repetition=rep,
                             cost_s=j + noise, restore_latency_s=0.0 if r == 0 else rl,
                             tokens=int(j * 10), tool_calls=int(j), verified=rep == 0,
                             quarantined=False))
    # a quarantined branch with an absurd cost must be ignored
    rows.append(dict(task_id=task, restore_point=0, failure=1, repetition=9, cost_s=1e6,
                     restore_latency_s=0.0, tokens=0, tool_calls=0, verified=False, quarantined=True))
    return pd.DataFrame(rows), cps


def hand_costs(hazard="uniform") -> TaskCosts:
    rec, cps = _frames(HAND_J, [2.0, 3.0, 4.0], [100, 200, 300], [100.0, 150.0, 175.0])
    return TaskCosts.build("t", rec, cps, hazard, nominal_s=200.0)


def test_placement_metrics_match_hand_computation():
    tc = hand_costs()
    m = placement_metrics(tc, [1])
    # f=1: J(0,1)=10; f=2: C1 + J(1,2) + RL = 2+8+1 = 11; f=3: 2+15+1 = 18
    assert m["objective_s"] == pytest.approx((10 + 11 + 18) / 3)
    # nominal work up to the failure is nominal_t(f-1): 0, 100, 150
    assert m["total_failure_cost"] == pytest.approx((10 + 111 + 168) / 3)
    assert m["lost_work_s"] == pytest.approx((10 + 8 + 15) / 3)
    assert m["redo_avoided_s"] == pytest.approx((0 + 12 + 15) / 3)
    assert m["checkpoint_latency_s"] == pytest.approx(4 / 3)
    assert m["recovery_efficiency"] == pytest.approx(9 / (4 / 3))
    assert m["restore_latency_s"] == pytest.approx(2 / 3)
    assert m["bytes_written"] == pytest.approx(200 / 3)  # 100 bytes before f=2 and f=3
    assert m["completion"] == pytest.approx(0.5)  # one of two repetitions verified
    assert m["spend_seconds"] == 2.0 and m["spend_bytes"] == 100 and m["spend_count"] == 1
    two = placement_metrics(tc, [1, 2])
    # f=3 now restores from 2: C1 + C2 + J(2,3) + RL = 2 + 3 + 12 + 1 = 18
    assert two["objective_s"] == pytest.approx((10 + 11 + 18) / 3)
    none = placement_metrics(tc, [])
    assert none["objective_s"] == pytest.approx(20.0)
    assert math.isnan(none["recovery_efficiency"])


def test_objective_is_the_one_price_of_the_measured_table():
    """The objective averages labelsets.definitions.failure_cost over the failures, each term read
    from the measured table: creation of the checkpoints before f (RecoveryTable), the
    restore latency of the restore point used (its branches' mean) and J(last, f)."""
    rec, cps = _frames(HAND_J, [2.0, 3.0, 4.0], [100, 200, 300], [100.0, 150.0, 175.0])
    full_rec = rec.assign(branch_id="b", pair_id=None, role="table", capped=False, seed=0,
                          state_digest="s", obs_digest="o", quarantine_reason=None)
    rt = RecoveryTable("t", full_rec, cps)
    tc = TaskCosts.from_recovery_table(rt)
    ok = full_rec[~full_rec["quarantined"]]
    restore = ok.groupby(["restore_point", "failure"])["restore_latency_s"].mean()
    for p in ([], [1], [2], [1, 2], [1, 2, 3], [3]):
        prices = []
        for f in rt.failures:
            last = max((b for b in p if b < f), default=0)
            created = sum(rt.creation_s(b) for b in p if b < f)
            prices.append(failure_cost(created, float(restore[(last, f)]), rt.cost(last, f)))
        assert placement_objective(tc, p) == pytest.approx(np.mean(prices))
        # the recovery table prices every placement the same way (one price, two readers)
        assert placement_objective(tc, p) == pytest.approx(
            np.mean([rt.placement_cost(p, f) for f in rt.failures]))
    assert restore[(1, 2)] == 1.0  # the restore latency is a real term of the price here


def test_duration_hazard_weights_by_segment_length():
    tc = hand_costs("duration")
    assert tc.weights == pytest.approx(np.array([100, 50, 25]) / 175)
    m = placement_metrics(tc, [1])
    assert m["objective_s"] == pytest.approx((100 * 10 + 50 * 11 + 25 * 18) / 175)


def test_explicit_hazard_mapping_and_bad_hazard():
    rec, cps = _frames(HAND_J, [2.0, 3.0, 4.0], [100, 200, 300], [100.0, 150.0, 175.0])
    tc = TaskCosts.build("t", rec, cps, {3: 1.0})
    assert placement_objective(tc, [2]) == pytest.approx(3 + 12 + 1)
    with pytest.raises(ValueError, match="hazard"):
        TaskCosts.build("t", rec, cps, "gamma")


# ---------------------------------------------------------------------------------------
# The clairvoyant optimum against brute force
# ---------------------------------------------------------------------------------------


def random_costs(rng: np.random.Generator, b: int, hazard="uniform", holes: bool = False) -> TaskCosts:
    creation = rng.uniform(0.5, 10, size=b).round(2).tolist()
    sizes = rng.integers(1, 50, size=b).tolist()
    t_nom = np.cumsum(rng.uniform(1, 100, size=b)).tolist()
    J = {}
    for f in range(1, b + 1):
        for r in range(f):
            if holes and r > 0 and rng.random() < 0.2:
                continue
            J[(r, f)] = float(rng.uniform(0, 100))
    rec, cps = _frames(J, creation, sizes, t_nom, rl=float(rng.uniform(0, 3)))
    return TaskCosts.build("t", rec, cps, hazard)


@pytest.mark.parametrize("seed", range(30))
def test_dynamic_program_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    b = int(rng.integers(1, 8))
    tc = random_costs(rng, b, hazard="duration" if seed % 3 == 0 else "uniform", holes=seed % 5 == 4)
    budgets = [Budget("count", k) for k in range(0, 4)] + [
        Budget("seconds", float(rng.uniform(0, 25))), Budget("seconds", float(tc.creation_s.sum())),
        Budget("bytes", float(rng.integers(0, 120))),
    ]
    for budget in budgets:
        p, v = optimal_placement(tc, budget)
        bp, bv = brute_force_placement(tc, budget)
        assert v == pytest.approx(bv, abs=1e-9), (budget, p, bp)
        assert placement_objective(tc, p) == pytest.approx(v, abs=1e-9)
        assert tc.charges(budget)[p].sum() <= budget.amount + 1e-9


def test_optimum_is_monotone_in_budget():
    tc = random_costs(np.random.default_rng(7), 6)
    vals = [optimal_placement(tc, Budget("count", k))[1] for k in range(5)]
    assert all(a >= b - 1e-12 for a, b in zip(vals, vals[1:], strict=False))


# ---------------------------------------------------------------------------------------
# The one budget check
# ---------------------------------------------------------------------------------------


def test_fits_has_one_relative_tolerance():
    assert fits(1.0, 1.0, 2.0) and not fits(1.0, 1.0 + 1e-6, 2.0)
    # a sum of creation seconds that equals the cap up to rounding fits
    assert fits(0.1 + 0.2, 0.3, 0.6) and 0.1 + 0.2 + 0.3 > 0.6
    assert fits(0.0, 100.0 * (1 + 0.5 * BUDGET_RTOL), 100.0)
    assert not fits(0.0, 100.0 * (1 + 2 * BUDGET_RTOL), 100.0)
    assert fits(0.0, 0.0, 0.0) and not fits(0.0, 1e-8, 0.0)


def test_unlimited_cap_never_binds():
    tc = hand_costs()
    cap = unlimited(Budget("seconds", 1.0), tc)
    assert cap.kind == "seconds" and fits(0.0, float(tc.creation_s.sum()), cap.amount)
    assert optimal_placement(tc, cap)[1] <= optimal_placement(tc, Budget("seconds", 1.0))[1]


def test_a_cached_price_cannot_go_stale():
    """placement_metrics is memoised per task and placement: a reassigned attribute (a new
    failure model) empties the cache, the arrays cannot be written in place, and a caller
    mutating the returned dict does not change the next answer."""
    tc = hand_costs()
    first = placement_metrics(tc, [1])
    first["objective_s"] = -1.0  # the caller's copy only
    assert placement_metrics(tc, (1,))["objective_s"] == pytest.approx((10 + 11 + 18) / 3)
    assert placement_objective(tc, [1, 1]) == pytest.approx((10 + 11 + 18) / 3)
    with pytest.raises(ValueError, match="read-only"):
        tc.J[0, 0] = 0.0
    with pytest.raises(ValueError, match="read-only"):
        tc.charges(Budget("count", 1.0))[1] = 5.0
    tc.weights = np.array([1.0, 0.0, 0.0])  # only f=1 now: J(0, 1) = 10 whatever the placement
    assert placement_objective(tc, [1]) == pytest.approx(10.0)
    with pytest.raises(ValueError, match="must be in 1..3"):
        placement_metrics(tc, [4])
