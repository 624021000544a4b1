"""The scripted agent: a real program behind the protocol that re-derives lost work."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from oracle.agents.scripted import ScriptedAgent, make_scripted_tasks, scripted_parse_line
from oracle.protocol import AgentRun, RestorePoint, WallClock


def test_scripted_agent_start_resume_rederives(tmp_path: Path) -> None:
    """A resumed run numbers boundaries from the pristine start and re-derives lost work."""
    (task,) = make_scripted_tasks(1, 3, tmp_path / "t", n_steps=3, n_files=3, time_scale=0.1)
    agent = ScriptedAgent("turn")
    ws = tmp_path / "ws"
    shutil.copytree(task.workspace_template, ws)
    run = agent.start(task, ws, 1, WallClock())
    assert isinstance(run, AgentRun)
    snaps = {}
    for r in run.reports():
        if r.kind == "boundary":
            snaps[r.boundary] = (run.preserved(), sorted(p.name for p in ws.iterdir()))
    assert run.wait() == 0 and agent.verify(task, ws)
    assert list(snaps) == [1, 2, 3]
    (transcript, facts), _ = snaps[1]
    assert "magic" in facts
    # resume at boundary 1 on a copy of the state there (the solution file not yet written)
    ws2 = tmp_path / "ws2"
    shutil.copytree(task.workspace_template, ws2)
    run2 = agent.resume(task, RestorePoint(1, ws2, transcript, facts), ws2, 2, WallClock())
    reps = list(run2.reports())
    assert run2.wait() == 0 and agent.verify(task, ws2)
    assert [r.boundary for r in reps if r.kind == "boundary"] == [2, 3]
    phases = [r.event.extra.get("phase") for r in reps if r.kind == "event"]
    assert "probe" not in phases and phases.count("orient") == 1  # fact preserved: no search
    # from pristine with no preserved facts the search is redone
    ws3 = tmp_path / "ws3"
    shutil.copytree(task.workspace_template, ws3)
    run3 = agent.resume(task, RestorePoint(0, ws3, [], {}), ws3, 2, WallClock())
    phases3 = [r.event.extra.get("phase") for r in run3.reports() if r.kind == "event"]
    assert run3.wait() == 0 and "probe" in phases3


def test_scripted_protocol_keeps_unknown_line_types_with_a_warning() -> None:
    assert scripted_parse_line({"type": "fact", "key": "k", "value": 1}, 0.0) == []
    assert scripted_parse_line({"type": "step_done", "step": 1}, 0.0) == []
    with pytest.warns(UserWarning, match="unknown line type 'progress'"):
        (rep,) = scripted_parse_line({"type": "progress", "pct": 50}, 3.0)
    assert rep.kind == "event" and rep.event is not None
    assert rep.event.kind == "other" and rep.event.end == 3.0
    assert rep.event.extra["unknown_line"] == {"type": "progress", "pct": 50}
