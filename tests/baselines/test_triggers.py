"""Event-triggered placement: state change over a threshold, verified progress."""

from __future__ import annotations

import math

import pytest

from baselines import Progress, StateChange
from ripplecp_policy.evaluation import Evaluator
from ripplecp_policy.policy import Budget, Setting


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
