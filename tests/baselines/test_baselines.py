"""Every baseline passes the conformance suite and does what its name says."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.base import clone

from baselines import (
    ClairvoyantOptimum,
    EveryBoundary,
    FailureRisk,
    FirstBoundary,
    FixedK,
    NoCheckpoint,
    OraclePolicy,
    Progress,
    RandomPolicy,
    StateChange,
    TimeBased,
    all_baselines,
)
from baselines.failure_risk import near_term_error, risk_feature_names
from features.schema import Event, EventKind
from ripplecp_policy.conformance import check_policy
from ripplecp_policy.evaluation import Evaluator
from ripplecp_policy.policy import Budget, Role, Setting
from ripplecp_policy.pricing import optimal_placement, placement_objective


@pytest.fixture(scope="module")
def label_set(make_label_set):
    return make_label_set(n_repos=3, tasks_per_repo=2, n_steps=(4, 6), seed=5)


@pytest.fixture(scope="module")
def small(make_label_set):
    return make_label_set(n_repos=2, tasks_per_repo=2, n_steps=(3, 5), seed=8)


@pytest.mark.parametrize("proto", all_baselines(0), ids=lambda p: p.name)
def test_every_baseline_passes_conformance(proto, small):
    """Every registered baseline (all_baselines reads the registry) passes the suite."""
    settings = [Setting(Budget("count", 2)),
                Setting(Budget("seconds", 2.0 * float(small.checkpoints["creation_s"].mean())))]
    check_policy(lambda: clone(proto), small, settings=settings, max_tasks=3)


def test_all_baselines_names_are_unique_and_complete():
    names = [p.name for p in all_baselines(0)]
    assert len(set(names)) == len(names)
    for want in ("no-checkpoint", "every-boundary", "fixed-k", "time-young-daly", "time-tuned",
                 "first-boundary", "state-change", "progress", "failure-risk", "random",
                 "oracle", "optimum"):
        assert want in names


def test_simple_rules(label_set):
    ev = Evaluator(label_set)
    t = label_set.task_ids[0]
    n = ev.costs(t).n_boundaries
    assert ev.run(NoCheckpoint().fit(label_set), t, Setting(Budget("count", 3))).checkpoints == []
    assert ev.run(FirstBoundary().fit(label_set), t, Setting(Budget("count", 3))).checkpoints == [1, 2, 3]
    every = ev.run(EveryBoundary().fit(label_set), t, Setting(Budget("count", 1)))
    assert every.checkpoints == list(range(1, n + 1)) and not every.budget_matched
    assert EveryBoundary.role is Role.REFERENCE
    fk = FixedK(k=2).fit(label_set)
    assert ev.run(fk, t, Setting(Budget("count", 10))).checkpoints == list(range(2, n + 1, 2))


def test_fixed_k_tunes_k_to_the_budget(label_set):
    counts = label_set.checkpoints.groupby("task_id").size().to_numpy()
    for amount in (1, 2, 3):
        fk = FixedK().fit(label_set, Setting(Budget("count", amount)))
        gaps = {k: abs(np.mean(counts // k) - amount) for k in range(1, counts.max() + 1)}
        assert gaps[fk.k_] == pytest.approx(min(gaps.values()))


def test_young_daly_interval(label_set):
    tb = TimeBased().fit(label_set)
    c = label_set.checkpoints["creation_s"].mean()
    m = label_set.tasks["nominal_s"].mean()
    assert tb.interval_ == pytest.approx(math.sqrt(2 * c * m))
    tuned = TimeBased(mode="tuned").fit(label_set, Setting(Budget("count", 2)))
    assert tuned.interval_ in tuned.tuning_scores_
    assert tuned.tuning_scores_[tuned.interval_] == pytest.approx(min(tuned.tuning_scores_.values()))


def test_time_based_measures_from_the_last_checkpoint(label_set):
    ev = Evaluator(label_set)
    t = label_set.task_ids[1]
    tc = ev.costs(t)
    interval = float(np.median(np.diff(tc.nominal_t)))
    pl = ev.run(TimeBased(interval_s=interval).fit(label_set), t, Setting(Budget("count", 99)))
    last = 0.0
    for b in range(1, tc.n_boundaries + 1):
        taken = b in pl.checkpoints
        assert taken == (tc.nominal_t[b] - last >= interval)
        if taken:
            last = tc.nominal_t[b]


def test_random_is_uniform_over_candidates(label_set):
    ev = Evaluator(label_set)
    t = label_set.task_ids[0]
    n = ev.costs(t).n_boundaries
    pol = RandomPolicy(horizon=n).fit(label_set)
    hits = np.zeros(n + 1)
    for s in range(400):
        pl = ev.run(pol, t, Setting(Budget("count", 2)), seed=s)
        assert len(pl.checkpoints) == 2  # selection sampling with the right horizon fills the budget
        hits[pl.checkpoints] += 1
    freq = hits[1:] / 400
    assert np.allclose(freq, 2 / n, atol=0.1), freq


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


def test_state_change_reads_bytes_since_last_checkpoint(label_set):
    sc = StateChange(threshold=50_000).fit(label_set)
    assert sc.measure_ == "bytes" and sc.feature_ == "state__bytes_modified_since_cp"
    ev = Evaluator(label_set)
    for t in label_set.task_ids[:3]:
        pl = ev.run(sc, t, Setting(Budget("count", 99)))
        for b in range(1, ev.costs(t).n_boundaries + 1):
            hist = [x for x in pl.checkpoints if x < b]
            v = ev.features_at(t, b, hist)["state__bytes_modified_since_cp"]
            assert (b in pl.checkpoints) == (v >= 50_000)
    tuned = StateChange().fit(label_set, Setting(Budget("count", 1)))
    assert tuned.tuning_scores_[tuned.threshold_] == pytest.approx(min(tuned.tuning_scores_.values()))


def test_progress_fires_after_progress_events(label_set):
    pr = Progress(signals=("newly_passing",)).fit(label_set)
    ev = Evaluator(label_set)
    for t in label_set.task_ids[:3]:
        pl = ev.run(pr, t, Setting(Budget("count", 99)))
        for b in range(1, ev.costs(t).n_boundaries + 1):
            hist = [x for x in pl.checkpoints if x < b]
            v = ev.features_at(t, b, hist)["progress__newly_passing_since_cp"]
            assert (b in pl.checkpoints) == (not math.isnan(v) and v > 0)
    with pytest.raises(ValueError, match="unknown signals"):
        Progress(signals=("vibes",)).fit(label_set)


def test_failure_risk_target_and_features(label_set):
    ev = [Event(index=i, kind=EventKind.COMMAND, exit_code=1 if i == 4 else 0) for i in range(8)]
    assert near_term_error(ev, 1, 3)  # event 4 is within (1, 4]
    assert not near_term_error(ev, 0, 3)  # (0, 3] has no error
    assert not near_term_error(ev, 4, 3)  # the error at the boundary itself is the past
    names = risk_feature_names(["ripple__x", "cost__errors_total", "cost__errors_since_cp",
                                "context__has_checkpoint", "context__step"])
    assert names == ["cost__errors_total", "context__step"]
    fr = FailureRisk().fit(label_set, Setting(Budget("count", 2)))
    assert all(not n.startswith("ripple__") for n in fr.feature_names_)
    assert fr.model_ is not None and 0 < fr.base_rate_ < 1
    assert fr.tuning_scores_[fr.threshold_] == pytest.approx(min(fr.tuning_scores_.values()))
