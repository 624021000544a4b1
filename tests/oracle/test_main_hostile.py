"""Issue 32 item 10: ``python -m oracle`` given FIFOs, deep nesting, bad options, Ctrl-C.

Every case is a real file, FIFO or process; each must end promptly with one line and the
documented exit status (2 for bad input, 130 for an interrupt)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oracle.__main__ import main

REPO = Path(__file__).resolve().parents[2]


def _oracle(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "oracle", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_a_plan_that_is_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "plan.json")
    res = _oracle("run", str(tmp_path / "plan.json"), timeout=30)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "not a regular file" in res.stderr


def test_an_audit_log_that_is_a_fifo_is_refused_not_read_as_empty(tmp_path: Path) -> None:
    study = tmp_path / "s.study"
    study.mkdir()
    os.mkfifo(study / "audit.jsonl")
    res = _oracle("audit", str(study), timeout=30)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stdout + res.stderr
    assert "audit.jsonl" in res.stderr and "nominal runs" not in res.stdout


def test_a_deeply_nested_plan_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "plan.json").write_text("[" * 100_000 + "]" * 100_000)
    assert main(["run", str(tmp_path / "plan.json")]) == 2
    assert "nested too deeply" in capsys.readouterr().err


@pytest.mark.parametrize("opt, needle", [
    ("n_files={bad", "not valid JSON"),
    ("n_files=abc", "--task-opt"),
    ("bogus=3", "--task-opt"),
])
def test_a_bad_task_opt_exits_2_naming_it(tmp_path: Path, opt: str, needle: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--agent", "scripted", "--tasks", "1", "--seed", "1", "--out",
                 str(tmp_path / "p.json"), "--task-opt", opt]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err
    assert not (tmp_path / "p.study").exists() or not list((tmp_path / "p.study").rglob("*.json"))


@pytest.mark.slow
def test_ctrl_c_ends_oracle_run_within_seconds(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) during branches:
    ``oracle run`` exits 130 within a few seconds, leaving no process of its group."""
    plan = tmp_path / "p.json"
    res = _oracle("plan", "--agent", "scripted", "--tasks", "2", "--design", "pilot", "--seed",
                  "3", "--out", str(plan), "--task-opt", "time_scale=1.5", "--task-opt",
                  "n_steps=3", "--task-opt", "n_files=2", "--no-progress", timeout=300)
    assert res.returncode == 0, res.stderr
    proc = subprocess.Popen([sys.executable, "-m", "oracle", "run", str(plan), "--jobs", "2",
                             "--no-progress"], start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    deadline = time.monotonic() + 120
    branches = tmp_path / "p.study" / "branches"
    while time.monotonic() < deadline and not (branches.exists() and any(branches.iterdir())):
        time.sleep(0.1)
    time.sleep(1.0)  # branches are running
    os.killpg(proc.pid, signal.SIGINT)
    t = time.monotonic()
    _, err = proc.communicate(timeout=120)
    took = time.monotonic() - t
    assert proc.returncode == 130, err[-2000:]
    assert took < 6, f"took {took:.1f} s to end after Ctrl-C"
    left = ""
    for _ in range(50):  # workers, the forkserver and branches follow within moments
        left = subprocess.run(["ps", "-o", "pid=,args=", "-g", str(proc.pid)],
                              capture_output=True, text=True).stdout.strip()
        if not left:
            break
        time.sleep(0.1)
    assert left == "", f"left running after Ctrl-C:\n{left}"
