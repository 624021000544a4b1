"""Fixtures shared by the policy-package tests: the toy workload with pairs and its first fold."""

from __future__ import annotations

import pytest

from ripplecp_policy.splits import leave_one_repo_out


@pytest.fixture(scope="module")
def toy_data(toy_label_set):
    """A toy full-design label set with CP/SKIP pairs: 3 repositories, 2 tasks each."""
    return toy_label_set(n_repos=3, tasks_per_repo=2, seed=1)


@pytest.fixture(scope="module")
def toy_fold(toy_data):
    """The first leave-one-repository-out fold of ``toy_data``: (fold, train, test)."""
    f = leave_one_repo_out(toy_data)[0]
    return f, toy_data.subset(f.train_tasks), toy_data.subset(f.test_tasks)
