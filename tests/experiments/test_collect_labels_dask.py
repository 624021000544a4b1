"""``experiments.collect_labels --executor dask --scheduler ADDRESS`` against a real
``distributed.LocalCluster``: the command line's path to a cluster, and its resume."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from labelsets.tables import LabelSet

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_collect_labels_on_a_dask_scheduler_by_address(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    out = tmp_path / "study"
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        cmd = [sys.executable, "-m", "experiments.collect_labels", "--agent", "sim:long-horizon",
               "--tasks", "2", "--repos", "2", "--design", "full", "--out", str(out),
               "--executor", "dask", "--scheduler", cluster.scheduler_address, "--no-progress"]
        first = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
        assert first.returncode == 0, first.stderr[-2000:]
        n = len((out / "study" / "audit.jsonl").read_text().splitlines())
        again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
        assert again.returncode == 0 and "already frozen: resuming" in again.stdout, again.stderr
    assert len((out / "study" / "audit.jsonl").read_text().splitlines()) == n  # nothing redone
    ls = LabelSet.load(out / "labelset")
    assert len(ls.tasks) == 2 and all(ls.recovery_table(t).is_full() for t in ls.task_ids)
    assert (ls.recovery.groupby(["task_id", "restore_point", "failure"]).size() >= 2).all()
