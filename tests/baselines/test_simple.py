"""The rules that read no features: none, every, first, fixed-k, random."""

from __future__ import annotations

import numpy as np
import pytest

from baselines import EveryBoundary, FirstBoundary, FixedK, NoCheckpoint, RandomPolicy
from ripplecp_policy.evaluation import Evaluator
from ripplecp_policy.policy import Budget, Role, Setting


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
