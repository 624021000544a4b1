"""The rules that read no features: none, every, first, fixed-k, fixed positions, random."""

from __future__ import annotations

import numpy as np
import pytest

from baselines import (
    EveryBoundary,
    FirstBoundary,
    FixedK,
    FixedPositions,
    NoCheckpoint,
    RandomPolicy,
)
from baselines.grid import training_objective
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


def test_fixed_k_tunes_k_on_cost_under_the_budget(label_set):
    """k is the grid value with the lowest training objective under the budget (as the
    other tuned baselines), not the one whose spend is closest to it."""
    b_max = int(label_set.checkpoints.groupby("task_id").size().max())
    for amount in (1, 2, 3):
        setting = Setting(Budget("count", amount))
        fk = FixedK().fit(label_set, setting)
        scores = {k: training_objective(FixedK(k=k).fit(label_set, setting), label_set, setting)
                  for k in range(1, b_max + 1)}
        assert scores[fk.k_] == pytest.approx(min(scores.values()))
        assert fk.tuning_scores_ == pytest.approx(scores)


def test_fixed_k_at_one_checkpoint_never_wastes_it_on_the_last_boundary(make_label_set):
    """On 4-boundary tasks at 1 checkpoint, k=4 checkpoints the last boundary, which no
    failure follows (it equals no-checkpoint); an earlier boundary is cheaper, so FixedK
    must not pick it."""
    ls = make_label_set(n_repos=2, tasks_per_repo=3, n_steps=(4, 4), seed=3)
    setting = Setting(Budget("count", 1))
    fk = FixedK().fit(ls, setting)
    last = training_objective(FixedK(k=4).fit(ls, setting), ls, setting)
    none = training_objective(NoCheckpoint().fit(ls, setting), ls, setting)
    assert last == pytest.approx(none)
    assert fk.k_ < 4 and fk.tuning_scores_[fk.k_] < last


def test_fixed_positions_takes_the_cheapest_index_at_one_checkpoint(label_set):
    """At 1 checkpoint the greedy choice is exhaustive: the single index whose checkpoint
    costs least on the training tasks (when it beats none), the same index in every task."""
    setting = Setting(Budget("count", 1))
    fp = FixedPositions().fit(label_set, setting)
    b_max = int(label_set.checkpoints.groupby("task_id").size().max())
    scores = {p: training_objective(FixedPositions(positions=(p,)).fit(label_set, setting), label_set, setting)
              for p in range(1, b_max + 1)}
    best = min(scores, key=lambda p: (scores[p], p))
    assert fp.positions_ == (best,)
    assert fp.tuning_scores_[(best,)] == pytest.approx(scores[best])
    ev = Evaluator(label_set)
    for t in label_set.task_ids:
        n = ev.costs(t).n_boundaries
        assert ev.run(fp, t, setting).checkpoints == ([best] if best <= n else [])


def test_fixed_positions_adds_indices_while_they_lower_the_training_cost(label_set):
    setting = Setting(Budget("count", 3))
    fp = FixedPositions().fit(label_set, setting)
    assert 1 <= len(fp.positions_) <= 3 and list(fp.positions_) == sorted(set(fp.positions_))
    chosen = fp.positions_
    for k in range(1, len(chosen) + 1):  # each greedy round lowered the objective
        assert any(set(c) <= set(chosen) and len(c) == k for c in fp.tuning_scores_)
    obj = training_objective(fp, label_set, setting)
    for p in range(1, 7):  # no single further index lowers it
        if p not in chosen:
            more = FixedPositions(positions=(*chosen, p)).fit(label_set, setting)
            assert training_objective(more, label_set, setting) >= obj - 1e-9
    assert not FixedPositions.uses_features


def test_fixed_positions_given_and_default_indices(label_set):
    ev = Evaluator(label_set)
    t = label_set.task_ids[0]
    fp = FixedPositions(positions=(3, 1)).fit(label_set, Setting(Budget("count", 5)))
    assert fp.positions_ == (1, 3)
    assert ev.run(fp, t, Setting(Budget("count", 5))).checkpoints == [1, 3]
    assert FixedPositions().fit(label_set).positions_ == (1,)  # no budget to tune against
    with pytest.raises(ValueError, match="indices must be >= 1"):
        FixedPositions(positions=(0, 2)).fit(label_set)


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
