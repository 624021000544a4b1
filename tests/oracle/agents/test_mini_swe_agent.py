"""mini-swe-agent under the harness, without the runtime: its trajectory watched live (the file
rewritten after each step, tool processes seen in the process tree) and mapped to events by
the readers' mapping, the same as reading the finished file; the resume entry point's input
errors. The real runs are in test_runtime.py and test_runtime_studies.py."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from features.readers.mini_swe_agent import read_mini_swe_agent
from oracle.agents import mini_resume
from oracle.agents.mini_swe_agent import MiniLineParser, trajectory_results, watch_trajectory
from oracle.agents.runtime import MINI_RULES

TRAJ = Path(__file__).resolve().parents[2] / "data" / "readers" / "mini-swe-agent" / \
    "toolcall_v11.traj.json"


def _snapshots(tmp_path: Path, cuts: list[int]) -> list[dict]:
    """The file as mini-swe-agent would have rewritten it after each step (cut at ``cuts``),
    as the watch's lines (epoch = clock, so times stay as the file has them)."""
    doc = json.loads(TRAJ.read_text())
    lines = []
    for k, n in enumerate(cuts):
        part = {**doc, "messages": doc["messages"][:n]}
        snap = tmp_path / f"{k}.traj.json"
        snap.write_text(json.dumps(part, indent=2))
        ended = part["messages"][-1]["role"] == "exit"
        lines.append({"type": "trajectory", "path": str(snap), "messages": n,
                      "tool_results": [], "ended": ended, "epoch": 0.0, "clock": 0.0})
    return lines


def _key(ev) -> tuple:
    return (ev.kind, ev.command, ev.exit_code, ev.safe_boundary, ev.turn_end, ev.step,
            ev.input_tokens, ev.output_tokens, ev.end if ev.end else None)


def test_the_snapshots_give_the_events_of_the_finished_file(tmp_path: Path) -> None:
    parser = MiniLineParser()
    reports = [r for line in _snapshots(tmp_path, [5, 6, 8, 10, 12]) for r in parser(line, 0.0)]
    events = [r.event for r in reports if r.kind == "event"]
    whole = read_mini_swe_agent(TRAJ).events
    # untimed events (the prompts) take the snapshot's clock; the rest are the file's
    assert [_key(e) for e in events] == [_key(e) for e in whole]
    assert [e.index for e in events] == list(range(len(whole)))
    assert sum(r.kind == "boundary" for r in reports) == sum(e.safe_boundary for e in whole) > 0
    assert events[-1].turn_end  # the run ended there (an exit message)
    assert parser.session_id == "trajectory.json"


def test_a_snapshot_cut_mid_run_leaves_the_turn_open_and_a_resume_skips_the_history(
        tmp_path: Path) -> None:
    first, later = _snapshots(tmp_path, [5, 12])
    events = [r.event for r in MiniLineParser()(first, 0.0) if r.kind == "event"]
    assert not events[-1].turn_end  # the step goes on in the next rewrite
    resumed = MiniLineParser()
    assert resumed({"type": "restored", "path": first["path"]}, 0.0) == []
    new = [r.event for r in resumed(later, 0.0) if r.kind == "event"]
    assert [_key(e)[:4] for e in new] == [_key(e)[:4] for e in
                                          read_mini_swe_agent(TRAJ).events[len(events):]]


def test_the_watch_reports_tools_and_whole_rewrites_only(tmp_path: Path) -> None:
    """A tool seen in the process tree; a torn rewrite read again; a tool over before a poll
    saw it reported just before its step's results; the last rewrite read after the end."""
    doc = json.loads(TRAJ.read_text())
    path = tmp_path / "trajectory.json"
    state = {"answers": 0, "tools": [], "running": True}

    def write(n: int) -> str:
        return json.dumps({**doc, "messages": doc["messages"][:n]}, indent=2)

    def runtime() -> None:
        time.sleep(0.05)
        state["answers"] = 1
        state["tools"] = [4242]  # the first action runs
        time.sleep(0.05)
        state["tools"] = []
        path.write_text(write(5)[:40])  # torn: mid-rewrite
        time.sleep(0.05)
        path.write_text(write(5))
        time.sleep(0.05)
        state["answers"] = 2  # its tool ends before a poll sees it
        path.write_text(write(12))
        state["running"] = False

    t = threading.Thread(target=runtime)
    t.start()
    lines = list(watch_trajectory(path, tmp_path / "snaps", running=lambda: state["running"],
                                  tools=lambda: state["tools"], answers=lambda: state["answers"],
                                  clock=time.monotonic, poll_s=0.005))
    t.join()
    kinds = [(o["type"], o.get("seen"), o.get("messages")) for o in lines]
    assert kinds == [("tool.started", True, None), ("trajectory", None, 5),
                     ("tool.started", False, None), ("trajectory", None, 12)]
    assert sorted(lines[1]["tool_results"]) == ["toolu_0_0", "toolu_0_1"] and not lines[1]["ended"]
    assert lines[3]["ended"] and MINI_RULES.tool_results(lines[3]) == lines[3]["tool_results"]
    assert all(MINI_RULES.tool_started(o) for o in lines[::2])
    texts = [Path(o["path"]).read_text() for o in lines[1::2]]
    assert MINI_RULES.saved(texts[:1], 0, ["toolu_0_0"]) and MINI_RULES.count(texts[-1:]) == 4
    assert not MINI_RULES.saved([texts[0][:40]], 0, [])  # a torn file holds nothing
    assert trajectory_results("[]") is None


def test_the_resume_entry_point_refuses_what_is_not_a_trajectory(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"info": {}}')
    with pytest.raises(SystemExit, match=r"x\.json: not a mini-swe-agent trajectory"):
        mini_resume.load(str(bad))
    with pytest.raises(SystemExit, match="usage: python mini_resume.py TRAJECTORY"):
        mini_resume.main(["mini_resume.py", "-t", "task"])
    messages, stats = mini_resume.load(str(TRAJ))
    assert messages[0]["role"] == "system" and stats["api_calls"] == 5
