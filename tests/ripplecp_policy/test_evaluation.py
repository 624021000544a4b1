"""Matched-budget evaluation: the runner and its caches."""

from __future__ import annotations

import pytest

from ripplecp_policy.evaluation import Evaluator, run_episode
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
