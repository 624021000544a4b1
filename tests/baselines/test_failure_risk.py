"""Failure-risk placement: the near-term error target and the placement-free features."""

from __future__ import annotations

import pytest

from baselines import FailureRisk
from baselines.failure_risk import near_term_error, risk_feature_names
from features.schema import Event, EventKind
from ripplecp_policy.policy import Budget, Setting


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
