"""Every registered baseline passes the conformance suite, under its report name."""

from __future__ import annotations

import pytest
from sklearn.base import clone

from baselines import all_baselines
from ripplecp_policy.conformance import check_policy
from ripplecp_policy.policy import Budget, Setting


@pytest.mark.parametrize("proto", all_baselines(0), ids=lambda p: p.name)
def test_every_baseline_passes_conformance(proto, small):
    """Every registered baseline (all_baselines reads the registry) passes the suite."""
    settings = [Setting(Budget("count", 2)),
                Setting(Budget("seconds", 2.0 * float(small.checkpoints["creation_s"].mean())))]
    check_policy(lambda: clone(proto), small, settings=settings, max_tasks=3)


def test_all_baselines_names_are_unique_and_complete():
    names = [p.name for p in all_baselines(0)]
    assert len(set(names)) == len(names)
    for want in ("no-checkpoint", "every-boundary", "fixed-k", "fixed-positions", "time-young-daly", "time-tuned",
                 "first-boundary", "state-change", "progress", "failure-risk", "random",
                 "oracle", "optimum"):
        assert want in names
