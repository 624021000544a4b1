"""Studies of real runtimes end to end, small enough for CI: ``python -m oracle plan --agent
codex|claude-code --brain repair`` then ``python -m oracle run``: nominal runs,
branches killed mid-tool and mid-model-call, resumed from the captured sessions, verified,
quarantined with a reason where they diverge, and a label set the experiments read.

The runtimes are installed into .runtimes/ when they can be (else the tests skip, saying why).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from labelsets.tables import LabelSet
from oracle.agents.runtimes import get_runtime
from oracle.store.audit import AuditLog

REPO = Path(__file__).resolve().parents[2]
#: two small repair tasks in two repositories whose mutants the bounded search repairs
FAST = ["--task-opt", "n_repos=2", "--task-opt",
        'families={"numeric": ["fractions"], "utilities": ["glob"]}',
        "--task-opt", "passing_sample=3", "--task-opt", "failing_sample=1",
        "--task-opt", "top_lines=3", "--task-opt", "max_edits=6"]
#: two tiny ones (four boundaries each: reproduce, two traced tests, the edit list)
TINY = ["--task-opt", "n_repos=2", "--task-opt",
        'families={"numeric": ["colorsys"], "utilities": ["fnmatch"]}',
        "--task-opt", "passing_sample=1", "--task-opt", "failing_sample=1",
        "--task-opt", "top_lines=1", "--task-opt", "max_edits=2"]

pytestmark = pytest.mark.slow


def _py(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _study(runtime, tmp_path: Path, agent: str, tasks: int, design: str, *extra: str,
           run: tuple[str, ...] = ("--jobs", "2")) -> tuple[LabelSet, list[dict]]:
    runtime(agent)
    plan = tmp_path / "plan.json"
    p = _py("oracle", "plan", "--agent", agent, "--brain", "repair", "--tasks", str(tasks),
            "--design", design, "--seed", "0", "--out", str(plan), *extra)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "nominal runs 1/" in p.stderr  # progress, one plain line per nominal run off a tty
    r = _py("oracle", "run", str(plan), *run)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "quarantined=" in r.stderr
    records = AuditLog(tmp_path / "plan.study" / "audit.jsonl").records()
    return LabelSet.load(tmp_path / "plan.study" / "labelset"), records


def _check_branches(ls: LabelSet, records: list[dict], agent: str, verified: bool = True) -> None:
    spec = get_runtime(agent).spec
    prov = ls.provenance["runtime"]
    assert prov["runtime"] == agent and prov["version"] == prov["pinned_version"] == spec.version
    assert prov["brain"] == "repair"
    branches = [r for r in records if r["kind"] == "branch"]
    assert len(branches) == len(ls.recovery)
    assert all(b["drive_struck"] and b["strike"] in ("tool", "model") for b in branches)
    assert all(b["quarantine_reason"] for b in branches if b["quarantined"])
    if verified:  # the task was repaired, so every recovery that kept to the nominal run is
        assert all(b["verified"] or b["quarantined"] for b in branches)


def test_codex_pilot_study(runtime, tmp_path: Path) -> None:
    ls, records = _study(runtime, tmp_path, "codex", 2, "pilot", *FAST)
    assert len(ls.tasks) == 2 and ls.tasks["verified"].all() and ls.tasks["repo"].nunique() == 2
    assert (ls.tasks["granularity"] == "tool_call").all()
    _check_branches(ls, records, "codex")
    strikes = {r["strike"] for r in records if r["kind"] == "branch"}
    assert strikes == {"tool", "model"}  # killed mid-tool and mid-model-call
    assert len(ls.labels) >= 8 and set(ls.labels["stratum"]) == {"first", "additional"}
    assert not ls.recovery["quarantined"].any()  # a deterministic model: nothing diverges
    out = _py("experiments.pilot_analysis", "--labels", str(tmp_path / "plan.study" / "labelset"),
              "--out", str(tmp_path / "pilot"), "--no-mlflow")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Label budget" in out.stdout


def test_claude_code_pilot_study_quarantines_divergent_pairs(runtime, tmp_path: Path) -> None:
    """A sampling model (``seeds=run``): a branch restarted from the pristine state makes other
    seeded choices than the nominal run did, so its pair is quarantined, with the reason."""
    one = ["--task-opt", "n_repos=1", "--task-opt", 'families={"numeric": ["fractions"]}',
           *FAST[4:]]
    ls, records = _study(runtime, tmp_path, "claude-code", 1, "pilot", *one,
                         "--agent-opt", "seeds=run")
    _check_branches(ls, records, "claude-code")
    assert ls.tasks["verified"].all()
    rec = ls.recovery
    q = rec[rec["quarantined"]]
    assert len(q) and (q["restore_point"] == 0).all()  # only the fresh starts diverge
    assert q["quarantine_reason"].str.contains("observation divergence in recovery").all()
    assert not rec[rec["restore_point"] > 0]["quarantined"].any()
    summary = json.loads(_py("oracle", "audit", str(tmp_path / "plan.study"), "--json").stdout)
    assert summary["quarantined_pairs"] and all(p["reasons"] for p in summary["quarantined_pairs"])


def test_codex_full_design_prices_every_placement(runtime, tmp_path: Path) -> None:
    ls, records = _study(runtime, tmp_path, "codex", 2, "full", *TINY, "--repetitions", "1",
                         run=("--jobs", "2"))
    _check_branches(ls, records, "codex", verified=False)  # too small a search to repair
    assert not ls.tasks["verified"].any() and (ls.tasks["n_boundaries"] == 4).all()
    assert not ls.recovery["quarantined"].any()
    for tid in ls.task_ids:
        assert ls.recovery_table(tid).is_full()
    out = _py("experiments.matched_budget", "--labels", str(tmp_path / "plan.study" / "labelset"),
              "--out", str(tmp_path / "mb"), "--no-mlflow", "--quick")
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert (tmp_path / "mb" / "summary.csv").exists()


def test_claude_code_full_design_prices_every_placement(runtime, tmp_path: Path) -> None:
    """One tiny task, every restore point r < every failure f (f = 1..n), two repetitions."""
    one = ["--task-opt", "n_repos=1", "--task-opt", 'families={"numeric": ["colorsys"]}',
           *TINY[4:]]
    ls, records = _study(runtime, tmp_path, "claude-code", 1, "full", *one, "--repetitions", "2")
    _check_branches(ls, records, "claude-code", verified=False)  # too small a search to repair
    (tid,) = ls.task_ids
    assert not ls.recovery["quarantined"].any()
    table = ls.recovery_table(tid)
    n = int(ls.tasks["n_boundaries"].iloc[0])
    assert n == 4 and table.is_full() and table.failures == list(range(1, n + 1))
    assert all(table.repetitions(r, f) == 2 for f in table.failures for r in range(f))
    assert len(ls.recovery) == 2 * sum(range(1, n + 1))
    assert ls.trajectories[tid].events  # the set loaded whole, trajectories included

