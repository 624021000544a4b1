"""Training targets: paired labels when a study has them, table-derived advantage otherwise."""

import numpy as np
import pytest

from oracle.tables import LabelSet, empty
from ripplecp_policy.datasets import advantage_table, table_labels


def _without_pairs(ls: LabelSet) -> LabelSet:
    return LabelSet(ls.tasks, ls.checkpoints, ls.recovery, empty("labels"), ls.trajectories,
                    ls.provenance)


def test_full_table_without_pairs_yields_table_derived_targets(make_label_set):
    ls = _without_pairs(make_label_set(seed=3))
    table = advantage_table(ls)
    assert set(table.frame["target_source"]) == {"recovery_table"}
    row = table.frame.iloc[len(table.frame) // 2]
    rt = ls.recovery_table(row["task_id"])
    t, c = int(row["candidate"]), int(row["fallback"])
    expected = np.mean([rt.cost(c, f) - rt.cost(t, f) - rt.creation_s(t) for f in rt.failures if f > t])
    assert row["advantage"] == pytest.approx(expected)
    assert row["stratum"] == ("first" if c == 0 else "additional")
    # one row per (task, candidate, fallback) with a failure after the candidate
    n_expected = len(table_labels(ls))
    assert len(table.frame) == n_expected > 0


def test_pairs_take_precedence_when_present():
    from oracle.simulator import simulate_label_set

    ls = simulate_label_set("swe-pilot", tasks_per_repo=1, design="pilot", seed=0)
    assert len(ls.labels) > 0
    table = advantage_table(ls)
    assert set(table.frame["target_source"]) == {"pairs"}
    cell = table.frame.iloc[0]
    pairs = ls.labels[(ls.labels["task_id"] == cell["task_id"])
                      & (ls.labels["candidate"] == cell["candidate"])
                      & (ls.labels["fallback"] == cell["fallback"])]
    assert cell["advantage"] == pytest.approx(pairs["advantage"].mean())


def test_no_pairs_and_no_full_table_is_a_clear_error(make_label_set):
    ls = _without_pairs(make_label_set(seed=3))
    partial = ls.recovery[ls.recovery["restore_point"] != 0].reset_index(drop=True)
    ls = LabelSet(ls.tasks, ls.checkpoints, partial, ls.labels, ls.trajectories, ls.provenance)
    with pytest.raises(ValueError, match="no full recovery table"):
        advantage_table(ls)
