"""Time-based placement: the Young/Daly interval, and the interval tuned on training tasks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from baselines import TimeBased
from ripplecp_policy.evaluation import Evaluator
from ripplecp_policy.policy import Budget, Setting


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
