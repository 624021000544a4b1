"""Process lifetimes: the fail-stop ends every descendant, a child dies with its parent, and
pool workers never outlive the process that made the pool."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from oracle import processes
from oracle.processes import (
    FAIL_STOP_ENV,
    alive,
    descendants,
    fail_stop_prefix,
    kill_tree,
    popen,
    processes_with_env,
)

REPO = Path(__file__).resolve().parents[2]


def _wait_for(cond: Callable[[], bool], timeout: float) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(0.02)


def _marked(marker: str) -> list[int]:
    return processes_with_env("RIPPLECP_TEST_MARK", marker)


def _env(marker: str) -> dict[str, str]:
    return {**os.environ, "RIPPLECP_TEST_MARK": marker, "PYTHONPATH": str(REPO)}


def test_kill_tree_ends_a_tool_in_a_session_of_its_own(tmp_path: Path) -> None:
    if not fail_stop_prefix():
        pytest.skip("unshare --pid is not available or not permitted here")
    marker = uuid.uuid4().hex
    proc = popen(["bash", "-c", "setsid sleep 61 & touch started; wait"], env=_env(marker),
                 cwd=tmp_path)
    _wait_for(lambda: (tmp_path / "started").exists() and len(_marked(marker)) >= 3, 10)
    assert proc.fail_stop_namespace  # type: ignore[attr-defined]
    kill_tree(proc)
    _wait_for(lambda: not _marked(marker), 5)


def test_without_a_namespace_the_token_sweep_ends_the_tree(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes, "fail_stop_prefix", lambda: ())
    marker = uuid.uuid4().hex
    proc = popen(["bash", "-c", "setsid sleep 62 & touch started; wait"], env=_env(marker),
                 cwd=tmp_path)
    _wait_for(lambda: (tmp_path / "started").exists() and len(_marked(marker)) >= 2, 10)
    assert not proc.fail_stop_namespace  # type: ignore[attr-defined]
    assert set(_marked(marker)) == set(processes_with_env(FAIL_STOP_ENV, proc.fail_stop_token))
    kill_tree(proc)
    assert not _marked(marker)


def test_a_child_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    """SIGKILL of the parent ends the child's whole tree (parent-death signal + namespace)."""
    marker = uuid.uuid4().hex
    script = textwrap.dedent(f"""
        import sys, time
        from oracle.processes import popen
        popen(["bash", "-c", "setsid sleep 63 & wait"], env=None, cwd={str(tmp_path)!r})
        print("started", flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], env=_env(marker), cwd=REPO,
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert parent.stdout is not None and parent.stdout.readline().strip() == "started"
    _wait_for(lambda: len(_marked(marker)) >= 3, 10)  # parent, bash (+ unshare), sleep
    parent.kill()
    parent.wait()
    _wait_for(lambda: not _marked(marker), 5)


def test_pool_workers_and_forkserver_die_with_the_pool_owner(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    script = textwrap.dedent("""
        import time
        from oracle.harness.executors import local_executor
        ex = local_executor(2)
        futs = [ex.submit(time.sleep, 60) for _ in range(4)]
        time.sleep(0.2)
        print("submitted", flush=True)
        time.sleep(60)
    """)
    owner = subprocess.Popen([sys.executable, "-c", script], env=_env(marker), cwd=REPO,
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert owner.stdout is not None and owner.stdout.readline().strip() == "submitted"
    # owner, resource tracker, forkserver, two workers
    _wait_for(lambda: len(_marked(marker)) >= 5, 60)
    owner.kill()
    owner.wait()
    _wait_for(lambda: not _marked(marker), 10)


def test_descendants_and_alive() -> None:
    p = subprocess.Popen(["bash", "-c", "sleep 30 & wait"])
    try:
        _wait_for(lambda: len(descendants(p.pid)) == 1, 5)
        assert alive(p.pid) and alive(descendants(p.pid)[0])
    finally:
        for pid in descendants(p.pid):
            os.kill(pid, signal.SIGKILL)
        p.kill()
        p.wait()
    assert not alive(p.pid)


def test_a_guarded_worker_starts_nothing_once_its_study_runner_is_gone(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    monkeypatch.setattr(processes, "_study_parent", gone.pid)
    with pytest.raises(processes.StudyParentGone, match="is gone"):
        popen(["true"], env=None, cwd=tmp_path)
