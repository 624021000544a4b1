"""The real repair study command end to end on one task, and its resume on re-run."""

import json
import subprocess
import sys
from pathlib import Path

from labelsets.tables import LabelSet

ROOT = Path(__file__).resolve().parents[2]


def _collect(out: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "experiments.collect_labels", "--agent", "repair", "--tasks", "1",
           "--repos", "1", "--design", "pilot", "--repetitions", "1", "--seed", "0",
           "--out", str(out), "--jobs", "2", "--no-progress"]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_collect_labels_repair_one_task_and_resume(tmp_path):
    out = tmp_path / "study"
    p = _collect(out)
    assert p.returncode == 0, p.stderr[-3000:]
    ls = LabelSet.load(out / "labelset")
    assert list(ls.tasks["repo"]) == ["stdlib/text"]
    (traj,) = ls.trajectories.values()
    assert traj.source_format and all(e.end is not None for e in traj.events if e.kind == "test")
    assert set(ls.labels["stratum"]) == {"first", "additional"}
    assert (ls.recovery["cost_s"] > 0).all() and ls.recovery["role"].isin(["cp", "skip"]).all()
    assert (ls.checkpoints["size_bytes"] > 0).all() and (ls.checkpoints["creation_s"] > 0).all()
    n_records = len((out / "study" / "audit.jsonl").read_text().splitlines())

    again = _collect(out)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "already frozen: resuming" in again.stdout
    assert len((out / "study" / "audit.jsonl").read_text().splitlines()) == n_records
    assert LabelSet.load(out / "labelset").content_hash() == ls.content_hash()

    other = subprocess.run(
        [sys.executable, "-m", "experiments.collect_labels", "--tasks", "2", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert other.returncode == 2 and "other arguments" in other.stderr
    assert other.stderr.count("\n") == 1 and "argument --out: " in other.stderr
    assert json.loads((out / "request.json").read_text())["tasks"] == 1


def test_collect_labels_sparse_design_with_adaptive_round(tmp_path):
    """The collection path of a sparse design (simulated agent under the real harness):
    the branch budget, then the adaptive round, a sparse label set, and a resume that adds
    nothing."""
    from labelsets.recovery_model import is_sparse

    out = tmp_path / "sparse"
    cmd = [sys.executable, "-m", "experiments.collect_labels", "--agent", "sim:long-horizon",
           "--tasks", "2", "--repos", "2", "--design", "sparse", "--branches", "5",
           "--repetitions", "1", "--adaptive-branches", "2", "--seed", "0", "--out", str(out),
           "--executor", "inline", "--no-progress"]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    ls = LabelSet.load(out / "labelset")
    assert is_sparse(ls) and len(ls.recovery) == 7 and ls.recovery["role"].eq("table").all()
    assert len(ls.provenance["sparse"]["adaptive"]) == 2
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert LabelSet.load(out / "labelset").content_hash() == ls.content_hash()
