"""Fixtures shared by the baseline tests: two small synthetic label sets."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def label_set(make_label_set):
    """Three repositories, two tasks each, 4-6 boundaries."""
    return make_label_set(n_repos=3, tasks_per_repo=2, n_steps=(4, 6), seed=5)


@pytest.fixture(scope="module")
def small(make_label_set):
    """Two repositories, two tasks each, 3-5 boundaries (for the conformance suite)."""
    return make_label_set(n_repos=2, tasks_per_repo=2, n_steps=(3, 5), seed=8)
