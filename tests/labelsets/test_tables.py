"""Label-set tables: schema checks, atomic save/load, hash, and the recovery-table API."""

import pandas as pd
import pytest

from labelsets.tables import LabelSet, LabelSetError, RecoveryTable, conform, labels_from_recovery


def test_pair_label_is_skip_minus_cp_net_of_creation(tiny_label_set):
    ls = tiny_label_set()
    (lab,) = ls.labels.to_dict("records")
    assert lab["j_cp"] == 12.0 + 1.5 and lab["j_skip"] == 30.0
    assert lab["advantage"] == pytest.approx(30.0 - 13.5)
    assert lab["stratum"] == "first" and lab["branch_order"] == "skip_first"
    assert lab["protected_work_s"] == 40.0


def test_recovery_table_costs_and_placement(tiny_label_set):
    rt = tiny_label_set().recovery_table("a")
    assert rt.is_full()
    assert rt.cost(0, 3) == 30.0
    assert rt.cost(1, 2) == pytest.approx((10.0 + 12.0) / 2)  # mean over the table and the cp branch
    # creation of 1 and 2 + restore latency of 2 (0.1, every branch here) + J(2, 3)
    assert rt.placement_cost([1, 2], 3) == pytest.approx(1.5 + 1.5 + 0.1 + 10.0)
    # a checkpoint at 2 does not exist before failure 2: restore the pristine start
    assert rt.placement_cost([2], 2) == pytest.approx(0.1 + rt.cost(0, 2))
    with pytest.raises(ValueError):
        rt.cost(2, 2)


def test_quarantined_branches_are_kept_but_not_averaged(tiny_label_set, recovery_row):
    ls = tiny_label_set([recovery_row(0, 1, cost=999.0, rep=1, q=True)])
    assert (ls.recovery["quarantined"]).sum() == 1
    assert ls.recovery_table("a").cost(0, 1) == 10.0


def test_save_load_round_trip_and_hash(tmp_path, tiny_label_set):
    ls = tiny_label_set()
    ls.save(tmp_path / "ls")
    back = LabelSet.load(tmp_path / "ls")
    assert back.content_hash() == ls.content_hash()
    pd.testing.assert_frame_equal(back.labels, ls.labels)
    assert back.trajectories == ls.trajectories


def test_edited_table_is_detected(tmp_path, tiny_label_set):
    ls = tiny_label_set()
    ls.save(tmp_path / "ls")
    ls.recovery.loc[0, "cost_s"] = 1.0
    from labelsets.tables import write_table

    write_table(ls.recovery, "recovery", tmp_path / "ls" / "recovery.parquet")
    with pytest.raises(LabelSetError, match="field .hash. does not match"):
        LabelSet.load(tmp_path / "ls")


def test_schema_errors_name_table_and_column(tiny_label_set):
    ls = tiny_label_set()
    bad = ls.recovery.drop(columns=["cost_s"])
    with pytest.raises(LabelSetError, match="cost_s"):
        conform(bad, "recovery")
    bad = ls.recovery.assign(failure="late")
    with pytest.raises(LabelSetError, match="'failure'"):
        conform(bad, "recovery")


def test_unpaired_branch_is_an_error(tiny_label_set, recovery_row):
    ls = tiny_label_set()
    rec = pd.concat([ls.recovery, pd.DataFrame([recovery_row(0, 3, "cp", "lonely", "l/0")])])
    with pytest.raises(LabelSetError, match="lonely"):
        labels_from_recovery(ls.tasks, ls.checkpoints, rec)


def test_column_lists_are_the_schemas(tiny_label_set):
    from labelsets.tables import (
        CHECKPOINT_COLUMNS,
        LABEL_COLUMNS,
        RECOVERY_COLUMNS,
        SCHEMAS,
        TASK_COLUMNS,
    )

    assert TASK_COLUMNS == tuple(SCHEMAS["tasks"].names)
    assert CHECKPOINT_COLUMNS == tuple(SCHEMAS["checkpoints"].names)
    assert RECOVERY_COLUMNS == tuple(SCHEMAS["recovery"].names)
    assert LABEL_COLUMNS == tuple(SCHEMAS["labels"].names)
    assert list(tiny_label_set().labels.columns) == list(LABEL_COLUMNS)


def test_placement_price_is_creation_before_plus_restore_latency_plus_recovery(recovery_row):
    """The one price of a placement at a failure, by hand (restore latency included)."""
    cps = pd.DataFrame([dict(task_id="a", boundary=b, event_index=b, step=b, nominal_t_s=30.0 * b,
                             creation_s=c, size_bytes=100, restore_latency_s=rl)
                        for b, c, rl in ((1, 2.0, 0.7), (2, 3.0, 0.9), (3, 4.0, 1.1))])
    J = {(0, 1): 10.0, (0, 2): 20.0, (1, 2): 8.0, (0, 3): 30.0, (1, 3): 15.0, (2, 3): 12.0}
    rl = {0: 0.25, 1: 1.0, 2: 1.5}  # measured by the branches
    rows = [recovery_row(r, f, cost=j) | {"restore_latency_s": rl[r]} for (r, f), j in J.items()]
    rows.append(recovery_row(2, 3, cost=14.0, rep=1) | {"restore_latency_s": 2.5})  # mean J 13, RL 2
    rows.append(recovery_row(1, 3, cost=15.0, rep=1) | {"restore_latency_s": None})  # RL unknown
    rt = RecoveryTable("a", pd.DataFrame(rows), cps)
    assert rt.placement_cost([], 3) == pytest.approx(0.25 + 30.0)
    assert rt.placement_cost([1], 2) == pytest.approx(2.0 + 1.0 + 8.0)
    assert rt.placement_cost([1, 2], 3) == pytest.approx(2.0 + 3.0 + 2.0 + 13.0)
    assert rt.placement_cost([1, 3], 3) == pytest.approx(2.0 + 1.0 + 15.0)  # 3 is not before f=3
    assert rt.restore_latency(1, 3) == 1.0  # the unknown measurement does not count
    # no branch measured a latency: the checkpoint's own record, 0 for the pristine start
    bare = pd.DataFrame([recovery_row(r, f, cost=j) | {"restore_latency_s": None}
                         for (r, f), j in J.items()])
    rt = RecoveryTable("a", bare, cps)
    assert rt.placement_cost([2], 3) == pytest.approx(3.0 + 0.9 + 12.0)
    assert rt.placement_cost([], 2) == pytest.approx(20.0)


def test_labels_from_table_are_the_simulators_table_labels():
    """One definition: pairs derived from a full table equal the simulator's own full-design
    labels (c- in {0, t-1}, every f > t, paired by repetition), column for column."""
    from labelsets.tables import labels_from_table
    from oracle.simulator import simulate_label_set

    ls = simulate_label_set("multi-stage-build", n_repos=1, tasks_per_repo=2, design="full", seed=4)

    def sim_cells(b):
        return [(t, c, f) for f in range(2, b + 1) for t in range(1, f) for c in sorted({0, t - 1})]

    got = labels_from_table(ls.tasks, ls.checkpoints, ls.recovery, sim_cells)
    keys = ["task_id", "candidate", "fallback", "failure", "repetition"]
    want = ls.labels.sort_values(keys, kind="stable").reset_index(drop=True)
    assert len(got) == len(want) > 0
    pd.testing.assert_frame_equal(got, want)


def test_labels_from_table_default_to_the_pilot_cells(tiny_label_set):
    from labelsets.tables import labels_from_table

    ls = tiny_label_set()
    lab = labels_from_table(ls.tasks, ls.checkpoints, ls.recovery)
    # B = 2: the pilot's early cell (1, 0, 2) only, from the table rows (J = 10 s per segment)
    assert list(lab["cell_id"]) == ["a:t1:c0:f2"]
    row = lab.iloc[0]
    assert row["j_cp"] == pytest.approx(10.0 + 1.5) and row["j_skip"] == pytest.approx(20.0)
    assert row["advantage"] == pytest.approx(20.0 - 11.5) and row["stratum"] == "first"
    assert row["branch_order"] == "skip_first" and row["protected_work_s"] == 40.0
