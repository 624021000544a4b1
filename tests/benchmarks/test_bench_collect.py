"""benchmarks/bench_collect.py: a collection stopped early ships a verified label set of its
finished tasks, resumes in interleaved order under the same plan, and reports its timings."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from labelsets.tables import LabelSet
from oracle.harness.plan import Plan

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "bench_collect.py"


def _bench():
    if "bench_collect" not in sys.modules:  # dataclasses look their module up by name
        spec = importlib.util.spec_from_file_location("bench_collect", SCRIPT)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["bench_collect"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["bench_collect"]


def _bench_run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real (simulated-agent) collection, then its last task's records dropped: stopped early."""
    out = tmp_path_factory.mktemp("bench") / "study"
    p = subprocess.run([sys.executable, "-m", "experiments.collect_labels", "--agent",
                        "sim:long-horizon", "--tasks", "3", "--repos", "3", "--design", "full",
                        "--out", str(out), "--executor", "inline", "--no-progress"],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    audit = out / "study" / "audit.jsonl"
    lines = audit.read_text().splitlines()
    last = Plan.load(out / "plan.json").task_ids[-1]
    keep = [ln for ln in lines if not (json.loads(ln)["record"].get("kind") == "branch"
                                       and json.loads(ln)["record"]["task_id"] == last)]
    assert len(keep) < len(lines)
    audit.write_text("\n".join(keep[:-1]) + "\n")  # and one more branch of another task
    return out


def test_a_stopped_collection_ships_its_finished_tasks_verified(stopped: Path, tmp_path: Path) -> None:
    bench = _bench()
    path = bench.completed_label_set(stopped, tmp_path / "ls")
    ls = LabelSet.load(path)  # verified by its hash
    plan = Plan.load(stopped / "plan.json")
    assert len(ls.tasks) == 1 and set(ls.task_ids) < set(plan.task_ids)
    assert ls.provenance["planned_tasks"] == 3 and ls.provenance["completed_tasks"] == 1
    assert ls.provenance["stopped_early"] is True
    assert ls.recovery_table(ls.task_ids[0]).is_full()


def test_interleaved_keeps_the_plan_and_turns_over_the_families(stopped: Path) -> None:
    bench = _bench()
    plan = Plan.load(stopped / "plan.json")
    fams = ["a", "a", "b"]
    plan = replace(plan, tasks=[replace(t, family=f) for t, f in zip(plan.tasks, fams, strict=True)])
    q = bench.interleaved(plan)
    assert q.hash == plan.hash and sorted(map(str, q.cells)) == sorted(map(str, plan.cells))
    order = list(dict.fromkeys(c["task_id"] for c in q.cells))
    ids = plan.task_ids
    assert order == [ids[0], ids[2], ids[1]]


def test_the_script_resumes_and_reports(stopped: Path) -> None:
    before = len((stopped / "study" / "audit.jsonl").read_text().splitlines())
    p = _bench_run("--agent", "sim:long-horizon", "--tasks", "3", "--repos", "3", "--jobs", "1",
                   "--out", str(stopped))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "tasks in turn over the families" in p.stdout
    assert len((stopped / "study" / "audit.jsonl").read_text().splitlines()) > before
    assert LabelSet.load(stopped / "labelset").task_ids == Plan.load(stopped / "plan.json").task_ids
    for must in ("harness overhead", "collection wall time", "load average"):
        assert must in p.stdout
    runs = json.loads((stopped / "bench_collect.json").read_text())
    assert len(runs) == 1 and runs[0]["exit_status"] == 0
    again = _bench_run("--report-only", "--completed-only", "--out", str(stopped))
    assert again.returncode == 0 and "3 of 3 planned tasks" in again.stdout, again.stderr


def test_a_sparse_collection_runs_and_reports(tmp_path: Path) -> None:
    """The collection path of a sparse re-collection (issue 29, item 5) small: the budget in
    branches, one repetition per cell, a sparse label set, the same report."""
    from labelsets.recovery_model import is_sparse

    out = tmp_path / "sparse"
    p = _bench_run("--agent", "sim:long-horizon", "--tasks", "3", "--repos", "3", "--jobs", "1",
                   "--design", "sparse", "--branches", "8", "--out", str(out))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "collection wall time" in p.stdout and "--design sparse --branches 8" in p.stdout
    ls = LabelSet.load(out / "labelset")
    assert is_sparse(ls) and len(ls.recovery) == 8
    bad = _bench_run("--design", "sparse", "--out", str(tmp_path / "x"))
    assert bad.returncode == 2 and "needed by --design sparse" in bad.stderr


def test_the_command_names_the_families_and_a_shipped_name_is_a_folder_name() -> None:
    """The shipped set's reproduction keeps its four families; the next set names five and
    ships beside it (``--ship-as``), never over it or outside the package."""
    b = _bench()
    cmd = b.collect_command(b.Args())
    i = cmd.index("--families")
    assert cmd[i + 1:i + 5] == ["repair", "depres", "cbuild", "migrate"] and "bisect" not in cmd
    five = b.collect_command(b.Args(families=("repair", "depres", "cbuild", "migrate", "bisect")))
    assert five[five.index("--families") + 5] == "bisect"
    assert "--families" not in b.collect_command(b.Args(agent="sim:long-horizon"))
    b.check_args(b.Args(ship_as="llm-free-sparse"))
    for bad in ("../llm-free", "a/b", ""):
        with pytest.raises(ValueError, match="argument --ship-as"):
            b.check_args(b.Args(ship_as=bad))
