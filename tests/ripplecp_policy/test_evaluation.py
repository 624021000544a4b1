"""Matched-budget evaluation: exact pricing, the clairvoyant optimum, the runner, verdicts."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from oracle.tables import RecoveryTable
from ripplecp_policy.evaluation import (
    Evaluator,
    MismatchedBudgetError,
    TaskCosts,
    brute_force_placement,
    compare,
    interquartile_mean,
    optimal_placement,
    placement_metrics,
    placement_objective,
    probability_of_improvement,
    run_episode,
)
from ripplecp_policy.policy import BoundaryObservation, Budget, PlacementPolicy

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


def test_objective_agrees_with_recovery_table_placement_cost():
    rec, cps = _frames(HAND_J, [2.0, 3.0, 4.0], [100, 200, 300], [100.0, 150.0, 175.0])
    full_rec = rec.assign(branch_id="b", pair_id=None, role="table", capped=False, seed=0,
                          state_digest="s", obs_digest="o", quarantine_reason=None)
    rt = RecoveryTable("t", full_rec, cps)
    tc = TaskCosts.from_recovery_table(rt)
    for p in ([], [1], [2], [1, 2], [1, 2, 3], [3]):
        want = np.mean([
            rt.placement_cost(p, f) + (1.0 if any(b < f for b in p) else 0.0) for f in rt.failures
        ])
        assert placement_objective(tc, p) == pytest.approx(want)


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
# The runner
# ---------------------------------------------------------------------------------------


class Always(PlacementPolicy):
    uses_features = False

    def decide(self, obs: BoundaryObservation) -> bool:
        return True


class Recorder(PlacementPolicy):
    """Checkpoints at even boundaries and records every observation it is shown."""

    def __init__(self) -> None:
        self.seen: list[BoundaryObservation] = []

    def decide(self, obs: BoundaryObservation) -> bool:
        self.seen.append(obs)
        return obs.boundary % 2 == 0


@pytest.fixture(scope="module")
def label_set(make_label_set):
    return make_label_set(n_repos=3, tasks_per_repo=2, seed=3)


def test_runner_refuses_checkpoints_over_budget(label_set):
    ev = Evaluator(label_set)
    t = label_set.task_ids[0]
    n = ev.costs(t).n_boundaries
    pl = ev.run(Always(), t, Budget("count", 2))
    assert pl.checkpoints == [1, 2]
    assert pl.refused == list(range(3, n + 1))
    assert pl.spend == 2
    tc = ev.costs(t)
    amount = float(tc.creation_s[1] + tc.creation_s[2]) + 1e-6
    pl = run_episode(Always(), label_set, t, Budget("seconds", amount), evaluator=ev)
    assert tc.creation_s[pl.checkpoints].sum() <= amount
    assert 1 in pl.checkpoints and 2 in pl.checkpoints


def test_runner_observations_are_prefix_only(label_set):
    ev = Evaluator(label_set)
    t = label_set.task_ids[1]
    rec = Recorder()
    pl = ev.run(rec, t, Budget("count", 5))
    tc = ev.costs(t)
    assert [o.boundary for o in rec.seen] == list(range(1, tc.n_boundaries + 1))
    for o in rec.seen:
        assert o.history == [b for b in pl.checkpoints if b < o.boundary]
        assert o.event_index == tc.event_index[o.boundary]
        # the extractor saw exactly the events up to the boundary
        assert o.features["context__events_seen"] == o.event_index + 1
        assert o.features["context__checkpoints"] == len(o.history)


def test_feature_cache_equals_incremental_walk(label_set):
    cached, plain = Evaluator(label_set), Evaluator(label_set, cache_features=False)
    for t in label_set.task_ids[:3]:
        a, b = Recorder(), Recorder()
        cached.run(a, t, Budget("count", 3))
        plain.run(b, t, Budget("count", 3))
        for x, y in zip(a.seen, b.seen, strict=True):
            assert x.features.keys() == y.features.keys()
            for k in x.features:
                assert x.features[k] == pytest.approx(y.features[k], nan_ok=True), k


def test_granularity_mismatch_is_an_error(label_set):
    with pytest.raises(ValueError, match="granularity|boundaries"):
        run_episode(Always(), label_set, label_set.task_ids[0], Budget("count", 1), granularity="tool_call")


class Offline(PlacementPolicy):
    offline = True

    def place(self, table, budget):
        return list(range(table.n_boundaries, 0, -1))  # asks for everything, latest first


def test_offline_placements_are_capped_in_trajectory_order(label_set):
    pl = run_episode(Offline(), label_set, label_set.task_ids[0], Budget("count", 2))
    assert pl.checkpoints == [1, 2]


def test_evaluate_reports_regret_against_optimum(label_set):
    ev = Evaluator(label_set)
    df = ev.evaluate(Always(), label_set.task_ids, Budget("count", 1))
    assert (df["regret_s"] >= -1e-9).all()
    for row in df.itertuples():
        _, opt = optimal_placement(ev.costs(row.task_id), Budget("count", 1))
        assert row.objective_s - opt == pytest.approx(row.regret_s)


# ---------------------------------------------------------------------------------------
# Verdicts
# ---------------------------------------------------------------------------------------


def _results(policy: str, costs: list[float], spend: float, amount: float = 2.0,
             matched: bool = True) -> pd.DataFrame:
    n = len(costs)
    return pd.DataFrame(dict(
        task_id=[f"t{i}" for i in range(n)], repo=[f"r{i % 3}" for i in range(n)], policy=policy,
        budget="2ckpt", budget_kind="count", budget_amount=amount, budget_matched=matched,
        total_failure_cost=costs, spend=spend,
    ))


def test_mismatched_spend_is_refused():
    ref = _results("first-boundary", [100, 110, 120, 130, 140, 150], spend=2.0)
    greedy = _results("greedy", [50, 60, 70, 80, 90, 100], spend=3.0)  # outspends the reference
    res = pd.concat([ref, greedy])
    (v,) = compare(res, n_resamples=500)
    assert v.status == "refused" and "spend" in v.reason
    assert "refused" in v.text()
    with pytest.raises(MismatchedBudgetError, match="greedy"):
        compare(res, strict=True, n_resamples=500)


def test_unmatched_reference_and_different_caps_are_refused():
    ref = _results("first-boundary", [100, 110, 120, 130], spend=2.0)
    every = _results("every-boundary", [90, 100, 110, 120], spend=4.0, amount=99.0, matched=False)
    other_cap = _results("other", [90, 100, 110, 120], spend=2.0, amount=3.0)
    verdicts = {v.policy: v for v in compare(pd.concat([ref, every, other_cap]), n_resamples=500)}
    assert verdicts["every-boundary"].status == "refused"
    assert "not budget-matched" in verdicts["every-boundary"].reason
    assert verdicts["other"].status == "refused" and "budgets differ" in verdicts["other"].reason


def test_matched_comparison_gives_a_verdict_with_interval():
    ref = _results("first-boundary", [100, 110, 120, 130, 140, 150], spend=2.0)
    better = _results("better", [90, 101, 108, 121, 133, 140], spend=2.0)
    worse = _results("worse", [101, 120, 119, 140, 139, 160], spend=1.98)
    verdicts = {v.policy: v for v in compare(pd.concat([ref, better, worse]), n_resamples=2000)}
    b = verdicts["better"]
    assert b.status == "yes" and b.high < 0 and b.low <= b.diff <= b.high
    assert b.diff == pytest.approx(-9.5)
    assert b.p_improvement == 1.0
    assert verdicts["worse"].status == "no"
    assert "beats first-boundary at matched budget 2ckpt: no" in verdicts["worse"].text()


def test_probability_of_improvement_counts_ties_as_half():
    a = pd.Series([1.0, 2.0, 3.0, 4.0], index=list("abcd"))
    b = pd.Series([2.0, 2.0, 1.0, 5.0], index=list("abcd"))
    assert probability_of_improvement(a, b) == pytest.approx((2 + 0.5) / 4)


def test_interquartile_mean_ignores_the_tails():
    assert interquartile_mean([0, 1, 2, 3, 4, 5, 6, 1000]) == pytest.approx(3.5)
