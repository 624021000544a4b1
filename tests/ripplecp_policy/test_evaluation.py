"""Matched-budget evaluation: the runner and its caches, verdicts."""

from __future__ import annotations

import pandas as pd
import pytest

from ripplecp_policy.evaluation import (
    Evaluator,
    MismatchedBudgetError,
    compare,
    interquartile_mean,
    probability_of_improvement,
    run_episode,
)
from ripplecp_policy.policy import BoundaryObservation, Budget, PlacementPolicy
from ripplecp_policy.pricing import optimal_placement

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
