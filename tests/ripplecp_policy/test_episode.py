"""The one episode runner: the budget check, the observation builder, the prefix walk."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from baselines import EveryBoundary
from oracle.store.checkpoint import CheckpointStore
from ripplecp_policy.advisor import Advisor, AdvisorModel
from ripplecp_policy.datasets import TaskReplay
from ripplecp_policy.episode import Episode, LiveFeatures, observation, prefix_features
from ripplecp_policy.evaluation import Evaluator
from ripplecp_policy.policy import Budget, Setting


@pytest.fixture(scope="module")
def label_set(make_label_set):
    return make_label_set(n_repos=2, tasks_per_repo=1, n_steps=(4, 5), seed=21)


def test_offer_takes_what_fits_and_records_the_rest():
    ep = Episode("t", "r", Budget("seconds", 5.0))
    assert ep.offer(1, 2.0) and ep.offer(2, 3.0)  # exactly the cap fits
    assert not ep.offer(3, 0.5)
    assert ep.taken == [1, 2] and ep.refused == [3] and ep.requested == [1, 2, 3]
    assert ep.spent == 5.0
    setting = Setting(Budget("seconds", 5.0), hazard="duration")
    pl = ep.placement("p", setting, budget_matched=True, seed=4, n_boundaries=3)
    assert (pl.checkpoints, pl.refused, pl.spend, pl.seed, pl.budget) == ([1, 2], [3], 5.0, 4, ep.cap)
    assert pl.setting is setting


def test_observation_states_the_placement_and_whether_it_fits():
    cap = Budget("count", 2)
    obs = observation("t", "r", 4, event_index=9, features={"x": 1.0}, cap=cap, spent=1.0,
                      history=[2], elapsed_s=12.5, charge=1.0)
    assert (obs.remaining, obs.n_checkpoints, obs.last_checkpoint, obs.history) == (1.0, 1, 2, [2])
    assert obs.affordable and obs.budget is cap and obs.checkpoint_cost == 1.0
    full = observation("t", "r", 5, event_index=10, features={}, cap=cap, spent=2.0,
                       history=[2, 4], elapsed_s=math.nan, charge=1.0)
    assert not full.affordable and full.remaining == 0.0


def test_walk_asks_at_every_boundary_and_refuses_over_budget(label_set):
    tc = Evaluator(label_set).costs(label_set.task_ids[0])
    asked = []

    def always(obs):
        asked.append((obs.boundary, obs.affordable))
        return True

    ep = Episode("t", "r", Budget("count", 2))
    ep.walk(always, tc, tc.charges(Budget("count", 2)), lambda b, h: {})
    n = tc.n_boundaries
    assert [b for b, _ in asked] == list(range(1, n + 1))
    assert [a for _, a in asked] == [True, True] + [False] * (n - 2)
    assert ep.taken == [1, 2] and ep.refused == list(range(3, n + 1))
    with pytest.raises(TypeError, match="expected a bool"):
        Episode("t", "r", Budget("count", 1)).walk(lambda o: 1, tc, tc.charges(Budget("count", 1)),
                                                   lambda b, h: {}, "weird")


def test_prefix_rows_equal_the_live_walk(label_set):
    t = label_set.task_ids[1]
    traj = label_set.trajectories[t]
    ev = Evaluator(label_set)
    bounds = ev.costs(t).event_index[1:]
    history = [1, 3]
    rows = prefix_features(traj, bounds, history)
    assert rows[0] is None and rows[1] is None and rows[3] is None
    live = LiveFeatures(traj, bounds)
    for b in range(1, len(bounds) + 1):
        got = live(b, [h for h in history if h < b])
        if rows[b] is not None:
            assert got.keys() == rows[b].keys()
            np.testing.assert_array_equal(np.array(list(got.values())), np.array(list(rows[b].values())))
    assert rows[4]["context__checkpoints"] == 2


def test_live_walk_marks_only_the_current_boundary(label_set):
    t = label_set.task_ids[0]
    live = LiveFeatures(label_set.trajectories[t], Evaluator(label_set).costs(t).event_index[1:])
    live(1, [])
    live(2, [])
    with pytest.raises(ValueError, match="not taken at the walk's boundary"):
        live(3, [1])


def test_training_replay_is_the_same_episode(label_set):
    """A training replay shows the policy what an evaluation episode shows it."""
    t = label_set.task_ids[0]
    budget = Budget("count", 2)
    trace = []
    taken = TaskReplay(label_set, t).replay(lambda o: o.boundary % 2 == 0, budget, trace=trace)
    ev = Evaluator(label_set)
    tc = ev.costs(t)
    ep = Episode(t, label_set.repo_of(t), budget)
    seen = []

    def even(obs):
        seen.append(obs)
        return obs.boundary % 2 == 0

    ep.walk(even, tc, tc.charges(budget), lambda b, h: ev.features_at(t, b, h))
    assert taken == ep.taken
    for a, b in zip(trace, seen, strict=True):
        assert (a.boundary, a.remaining, a.history, a.affordable, a.elapsed_s) == \
            (b.boundary, b.remaining, b.history, b.affordable, b.elapsed_s)
        assert a.features == pytest.approx(b.features, nan_ok=True)


def test_the_episode_owns_its_ledger_settle_cancel_replay_resume():
    """Every change of spend goes through the episode: a checkpoint taken on an estimate is
    settled at its measured charge, a failed one cancelled (no charge left behind), one
    decided by an earlier call replayed, a spend from elsewhere resumed."""
    ep = Episode("t", "r", Budget("seconds", 10.0), prior=2.0)
    assert ep.offer(1, 2.0)
    ep.settle(3.5)  # measured: 3.5 s
    assert (ep.spent, ep.charges, ep.taken) == (3.5, [3.5], [1])
    assert ep.offer(2, 3.5)
    ep.cancel()  # the checkpoint failed: nothing taken, nothing charged
    assert (ep.spent, ep.charges, ep.taken, ep.failed) == (3.5, [3.5], [1], [2])
    assert ep.requested == [1, 2]
    ep.replay(3, 1.5)
    assert (ep.spent, ep.charges, ep.taken) == (5.0, [3.5, 1.5], [1, 3])
    with pytest.raises(ValueError, match="no checkpoint"):
        Episode("t", "r", Budget("count", 1)).cancel()
    fresh = Episode("t", "r", Budget("count", 3))
    fresh.resume(2.0)
    assert fresh.spent == 2.0 and fresh.offer(1, 1.0) and not fresh.offer(2, 1.0)


def test_a_failed_advisor_checkpoint_leaves_no_charge(tmp_path):
    """The advisor's checkpoint fails (its workspace is gone): the boundary is SKIP and the
    episode holds no charge for it, so the estimate of the next charge is not skewed."""
    lines = (Path(__file__).resolve().parents[1] / "data" / "recordings" / "codex-0.171.0"
             / "task.exec.jsonl").read_bytes().splitlines()
    model = AdvisorModel(EveryBoundary(), {"budget_kind": "seconds", "budget_amount": 100.0,
                                           "default_checkpoint_cost": 7.0}, "every")
    adv = Advisor(model, Budget("seconds", 100.0), store=CheckpointStore(tmp_path / "s"),
                  workspace=tmp_path / "gone")
    adv.feed(lines[0])
    made = []
    for line in lines[1:]:
        made += adv.feed(line)
        if made:
            break
    assert made[0].decision == "SKIP" and "error: checkpoint" in made[0].reason
    assert adv.episode.charges == [] and adv.episode.spent == 0.0 and adv.episode.taken == []
