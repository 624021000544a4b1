"""Training tables and replays: targets from pairs (or full tables), features at the fallback,
replays that are the evaluation's episodes."""

import numpy as np
import pytest

from labelsets.tables import LabelSet, empty
from ripplecp_policy.datasets import (
    POLICY_FEATURES,
    advantage_table,
    replays,
    run_policy,
    table_labels,
)
from ripplecp_policy.learned import AdvantageRegressorPolicy
from ripplecp_policy.policy import Budget, Setting


def _without_pairs(ls: LabelSet) -> LabelSet:
    return LabelSet(ls.tasks, ls.checkpoints, ls.recovery, empty("labels"), ls.trajectories,
                    ls.provenance)


def test_full_table_without_pairs_yields_table_derived_targets(make_label_set):
    ls = _without_pairs(make_label_set(seed=3))
    table = advantage_table(ls)
    assert set(table.frame["target_source"]) == {"recovery_table"}
    row = table.frame.iloc[len(table.frame) // 2]
    rt = ls.recovery_table(row["task_id"])
    t, c = int(row["candidate"]), int(row["fallback"])
    expected = np.mean([rt.cost(c, f) - rt.cost(t, f) - rt.creation_s(t) for f in rt.failures if f > t])
    assert row["advantage"] == pytest.approx(expected)
    assert row["stratum"] == ("first" if c == 0 else "additional")
    # one row per (task, candidate, fallback) with a failure after the candidate
    n_expected = len(table_labels(ls))
    assert len(table.frame) == n_expected > 0


def test_pairs_take_precedence_when_present():
    from oracle.simulator import simulate_label_set

    ls = simulate_label_set("swe-pilot", tasks_per_repo=1, design="pilot", seed=0)
    assert len(ls.labels) > 0
    table = advantage_table(ls)
    assert set(table.frame["target_source"]) == {"pairs"}
    cell = table.frame.iloc[0]
    pairs = ls.labels[(ls.labels["task_id"] == cell["task_id"])
                      & (ls.labels["candidate"] == cell["candidate"])
                      & (ls.labels["fallback"] == cell["fallback"])]
    assert cell["advantage"] == pytest.approx(pairs["advantage"].mean())


def test_no_pairs_and_no_full_table_is_a_clear_error(make_label_set):
    ls = _without_pairs(make_label_set(seed=3))
    partial = ls.recovery[ls.recovery["restore_point"] != 0].reset_index(drop=True)
    ls = LabelSet(ls.tasks, ls.checkpoints, partial, ls.labels, ls.trajectories, ls.provenance)
    with pytest.raises(ValueError, match="no full recovery table"):
        advantage_table(ls)


def test_advantage_table_uses_fallback_as_placement(toy_data) -> None:
    table = advantage_table(toy_data)
    ok = ~toy_data.labels["quarantined"].astype(bool)
    cells = toy_data.labels[ok].groupby(["task_id", "candidate", "fallback"])["advantage"].mean()
    assert len(table.frame) == len(cells)
    got = table.frame.set_index(["task_id", "candidate", "fallback"])["advantage"]
    np.testing.assert_allclose(got.loc[cells.index].to_numpy(), cells.to_numpy())
    # the placement so far (fallback) is visible to the features: first vs additional differ
    first = table.frame[table.frame["stratum"] == "first"]
    add = table.frame[table.frame["stratum"] == "additional"]
    assert (first["context__has_checkpoint"] == 0).all() and (add["context__has_checkpoint"] == 1).all()
    assert (add["policy__has_cp"] == 1).all() and set(POLICY_FEATURES) <= set(table.feature_names)
    # the toy's two regimes: first checkpoints pay, additional ones barely do
    assert first["advantage"].mean() > 5 * abs(add["advantage"].mean())


def test_advantage_table_excludes_quarantined_pairs(toy_data) -> None:
    labels = toy_data.labels.copy()
    labels.loc[labels.index[:5], "quarantined"] = True
    labels.loc[labels.index[:5], "advantage"] = 1e6
    bad = type(toy_data)(toy_data.tasks, toy_data.checkpoints, toy_data.recovery, labels, toy_data.trajectories, {})
    assert advantage_table(bad).y.max() < 1e6


def test_training_replay_matches_the_evaluation_runner(toy_fold) -> None:
    """Policies are trained on exactly the features the matched-budget runner shows them."""
    from ripplecp_policy.evaluation import Evaluator

    _, train, test = toy_fold
    pol = AdvantageRegressorPolicy(model="ridge", threshold=0.0).fit(train, Setting(Budget("count", 2)))
    ev = Evaluator(test)
    for task in replays(test).values():
        ours = run_policy(pol, task, Budget("count", 2))
        theirs = ev.run(pol, task.task_id, Setting(Budget("count", 2))).checkpoints
        assert ours == theirs
        assert task.expected_cost(ours) == pytest.approx(
            ev.score(ev.run(pol, task.task_id, Setting(Budget("count", 2))))["objective_s"])


def test_feature_subset_shows_a_policy_only_some_feature_families(make_label_set):
    """The ablation's instrument: a learned policy fitted with FeatureSubset sees only
    those families (plus its placement state), and a clone shares the subset."""
    from sklearn.base import clone

    from ripplecp_policy.datasets import FeatureSubset
    from ripplecp_policy.learned.advantage import AdvantageRegressorPolicy
    from ripplecp_policy.policy import Budget, Setting

    ls = make_label_set(n_repos=3, tasks_per_repo=2, seed=1)
    only = FeatureSubset(("cost", "ripple"))
    pol = AdvantageRegressorPolicy(model="ridge", feature_fn=only).fit(ls, Setting(Budget("count", 1)))
    fams = {n.split("__", 1)[0] for n in pol.feature_names_}
    assert fams <= {"cost", "ripple", "policy"} and {"cost", "ripple"} <= fams
    assert clone(pol).feature_fn is only
    frame = only(ls.trajectories[ls.task_ids[0]], granularity="turn", checkpoints=())
    assert "boundary" in frame.columns and not any(c.startswith("state__") for c in frame.columns)
    with pytest.raises(ValueError, match="subset of"):
        FeatureSubset(("costs",))


def test_advantage_targets_weight_failures_by_the_hazard(make_label_set):
    """Under --hazard duration the regressor's targets are the hazard-weighted mean over the
    failures after the candidate, not the uniform one; uniform targets are unchanged."""
    from ripplecp_policy.datasets import advantage_table, replays
    from ripplecp_policy.learned.advantage import AdvantageRegressorPolicy
    from ripplecp_policy.policy import Budget, Setting

    ls = make_label_set(n_repos=3, tasks_per_repo=2, seed=3)
    dur = Setting(Budget("count", 1), "duration")
    uni_t = advantage_table(ls, replays(ls, Setting(Budget("count", 1))))
    dur_t = advantage_table(ls, replays(ls, dur), hazard="duration")
    tid = ls.task_ids[0]
    tc = replays(ls, dur)[tid].costs
    rt = ls.recovery_table(tid)
    row = dur_t.frame[(dur_t.frame["task_id"] == tid) & (dur_t.frame["candidate"] == 1)
                      & (dur_t.frame["fallback"] == 0)].iloc[0]
    fs = [f for f in rt.failures if f > 1]
    w = np.array([tc.weights[list(tc.failures).index(f)] for f in fs])
    adv = np.array([rt.advantage(1, 0, f) for f in fs])
    assert row["advantage"] == pytest.approx(float(np.dot(w, adv) / w.sum()))
    assert not np.allclose(uni_t.y, dur_t.y)
    # the policy fits on the weighted targets under a duration setting
    a = AdvantageRegressorPolicy(model="ridge").fit(ls, dur)
    b = AdvantageRegressorPolicy(model="ridge").fit(ls, Setting(Budget("count", 1)))
    assert not np.allclose(a.model_.named_steps["model"].coef_, b.model_.named_steps["model"].coef_)
