"""The agent protocol: clocks, reports, and the task-count contract."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from oracle.protocol import AgentReport, Clock, VirtualClock, WallClock, make_tasks


def test_virtual_clock_advances_instantly_and_rejects_negative_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_real_sleep(seconds: float) -> None:
        raise AssertionError(f"VirtualClock slept for real ({seconds} s)")

    monkeypatch.setattr(time, "sleep", no_real_sleep)  # instant: it must never really sleep
    c = VirtualClock()
    assert c.kind == "virtual" and c.now() == 0.0
    c.sleep(3600.0)
    c.advance(0.5)
    assert c.now() == 3600.5
    with pytest.raises(ValueError):
        c.advance(-1)
    assert isinstance(c, Clock) and isinstance(WallClock(), Clock)


def test_wall_clock_measures_real_time() -> None:
    c = WallClock()
    t0 = c.now()
    c.sleep(0.02)
    assert c.kind == "wall" and c.now() - t0 >= 0.02


def test_agent_report_validation() -> None:
    with pytest.raises(ValueError):
        AgentReport("event")
    with pytest.raises(ValueError):
        AgentReport("boundary", boundary=0)
    with pytest.raises(ValueError):
        AgentReport("effect")
    with pytest.raises(ValueError):
        AgentReport("nonsense")
    assert AgentReport("boundary").boundary is None  # adapters number it


class _FewTasks:
    name = "few"

    def make_tasks(self, n: int, seed: int, root: Path) -> list:
        return [object()] * min(n, 2)


def test_a_task_count_the_agent_cannot_meet_is_an_error(tmp_path: Path) -> None:
    assert len(make_tasks(_FewTasks(), 2, 0, tmp_path)) == 2
    with pytest.raises(ValueError, match=r"agent 'few' made 2 tasks, 5 were asked for"):
        make_tasks(_FewTasks(), 5, 0, tmp_path)
    with pytest.raises(ValueError, match="cannot generate tasks"):
        make_tasks(object(), 1, 0, tmp_path)
    with pytest.raises(ValueError, match=">= 1"):
        make_tasks(_FewTasks(), 0, 0, tmp_path)


def test_front_door_names_resolve_and_import_stays_light() -> None:
    """Every public name of ``oracle`` resolves to its defining module, and ``import oracle``
    (the scripted child runs under ``python -S``) loads no third-party package."""
    import subprocess
    import sys

    import oracle

    for name in oracle.__all__:
        assert getattr(oracle, name) is not None, name
    code = ("import sys, oracle, oracle.simulator.workloads; "
            "heavy = {'pandas', 'numpy', 'pyarrow', 'networkx'} & set(sys.modules); "
            "print(sorted(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
