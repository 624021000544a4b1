"""The paper's definitions, one test each (labelsets.definitions)."""

from __future__ import annotations

import numpy as np
import pytest

from labelsets import definitions as labels


def test_charged_cp_adds_the_checkpoint_creation_time() -> None:
    assert labels.charged_cp(12.0, 1.5) == 13.5
    assert np.array_equal(labels.charged_cp(np.array([1.0, 2.0]), np.array([0.5, 0.25])),
                          np.array([1.5, 2.25]))


def test_advantage_is_j_skip_minus_charged_j_cp() -> None:
    assert labels.advantage(30.0, labels.charged_cp(12.0, 1.5)) == pytest.approx(16.5)
    assert labels.advantage(5.0, 8.0) == -3.0  # a checkpoint that costs more than it saves


def test_failure_cost_is_creation_before_plus_restore_latency_plus_recovery() -> None:
    assert labels.failure_cost(2.0 + 3.0, 1.0, 12.0) == 18.0
    assert labels.failure_cost(0.0, 0.0, 30.0) == 30.0  # no checkpoint: recovery from pristine


def test_stratum_is_what_skip_falls_back_to() -> None:
    assert labels.stratum(0) == labels.FIRST == "first"
    assert labels.stratum(3) == labels.ADDITIONAL == "additional"
    arr = labels.stratum(np.array([0, 1, 0, 4]))
    assert arr.dtype == object and list(arr) == ["first", "additional", "first", "additional"]
    assert labels.STRATA == ("first", "additional") and labels.POOLED == "pooled"


def test_designs_and_third_rule_are_named_once() -> None:
    assert labels.DESIGNS == ("pilot", "tool_call", "full", "sparse")
    assert "sign" in labels.THIRD_RULE and "exactly one more pair" in labels.THIRD_RULE


def test_sign_unstable_compares_the_first_two_repetitions() -> None:
    assert labels.sign_unstable([1.5, -1.5])
    assert not labels.sign_unstable([1.0, 2.0, -9.0])  # only the first two count
    assert labels.sign_unstable([0.0, 1.0])  # zero differs from nonzero: rerun
    assert not labels.sign_unstable([0.0, 0.0])
    assert not labels.sign_unstable([3.0])  # one repetition is never unstable


def test_pilot_cells_one_early_and_one_late_cell() -> None:
    assert labels.pilot_cells(1) == []
    assert labels.pilot_cells(2) == [(1, 0, 2)]
    assert labels.pilot_cells(3) == [(1, 0, 2), (2, 1, 3)]
    assert labels.pilot_cells(5) == [(1, 0, 2), (4, 3, 5)]
    for t, c, f in labels.pilot_cells(7):
        assert c < t < f


def test_cell_ids() -> None:
    assert labels.cell_id("django-1", 2, 1, 3) == "django-1:t2:c1:f3"
    assert labels.table_cell_id("django-1", 0, 3) == "django-1:r0:f3"
    assert labels.cell_id("a", np.int64(1), 0, 2) == "a:t1:c0:f2"  # numpy ints print plainly


def test_pair_seed_is_keyed_by_study_seed_cell_and_repetition() -> None:
    s = labels.pair_seed(7, "a:t1:c0:f2", 1)
    assert s == labels.pair_seed(7, "a:t1:c0:f2", 1)  # deterministic
    others = {labels.pair_seed(8, "a:t1:c0:f2", 1), labels.pair_seed(7, "a:t1:c0:f2", 2),
              labels.pair_seed(7, "a:t2:c1:f3", 1)}
    assert s not in others and len(others) == 3
    assert 0 <= s < 2**63
    assert labels.nominal_seed(7, "a") == labels.pair_seed(7, "nominal/a", 0)


def test_branch_order_is_drawn_from_the_pair_seed() -> None:
    seeds = [labels.pair_seed(0, f"t{i}:t1:c0:f2", 1) for i in range(200)]
    order = [labels.cp_first(s) for s in seeds]
    assert order == [labels.cp_first(s) for s in seeds]
    assert 60 < sum(order) < 140  # both orders occur, about half each
    assert labels.branch_order(True) == labels.CP_FIRST == "cp_first"
    assert labels.branch_order(False) == labels.SKIP_FIRST == "skip_first"
    assert list(labels.branch_order(np.array([True, False]))) == ["cp_first", "skip_first"]


def test_pair_seeds_equal_pair_seed_element_for_element() -> None:
    rng = np.random.default_rng(3)
    for study_seed in (0, 1, 7, 2**31, 2**32 + 5, 2**40 + 3, 2**63 - 1):
        cells = [f"task-{i}:r{rng.integers(9)}:f{rng.integers(1, 9)}" for i in range(200)]
        reps = rng.integers(0, 5, len(cells))
        got = labels.pair_seeds(study_seed, cells, reps)
        assert got.dtype == np.int64
        assert got.tolist() == [labels.pair_seed(study_seed, c, int(k)) for c, k in zip(cells, reps, strict=True)]
    with pytest.raises(ValueError, match="study seed must be >= 0"):
        labels.pair_seeds(-1, ["a"], [1])
