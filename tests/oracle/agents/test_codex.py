"""Codex CLI on the command-line adapter, replayed by ``fake_codex`` from a real log."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from features.readers.codex_exec import read_codex_exec
from features.schema import EventKind
from oracle.agents.codex import CODEX_CONFIG, CodexLineParser, codex_agent
from oracle.processes import FAIL_STOP_ENV, processes_with_env
from oracle.protocol import AgentReport, RestorePoint, WallClock

FAKE_CODEX = Path(__file__).resolve().parent / "bin" / "fake_codex"


def _codex_env(tmp_path: Path, stream: Path, delay: float = 0.02) -> dict[str, str]:
    return {"FAKE_CODEX_STREAM": str(stream), "FAKE_CODEX_DELAY": str(delay),
            "FAKE_CODEX_PIDFILE": str(tmp_path / "pid")}


def test_codex_parser_matches_the_whole_file_reader(codex_stream) -> None:
    """Per-line mapping agrees with features.readers.codex_exec on kinds and boundaries."""
    path = codex_stream
    traj = read_codex_exec(path)
    parser = CodexLineParser()
    reps: list[AgentReport] = []
    for i, ln in enumerate(x for x in path.read_text().splitlines() if x.strip()):
        reps.extend(parser(json.loads(ln), float(i)))
    events = [r.event for r in reps if r.kind == "event"]
    assert [e.kind for e in events] == [e.kind for e in traj.events]
    assert sum(r.kind == "boundary" for r in reps) == len(traj.boundaries("tool_call"))
    assert parser.thread_id == traj.meta["thread_id"]
    # turn.completed -> model_call with the usage delta and turn_end
    mc = [e for e in events if e.kind == EventKind.MODEL_CALL]
    assert mc and mc[-1].turn_end and mc[-1].input_tokens == traj.events[-1].input_tokens


def test_codex_parser_reports_are_the_readers_events_on_recordings() -> None:
    """On Codex 0.171.0's recorded stdout the adapter's events are the reader's (times from
    the arrival stamps), each safe boundary followed by one boundary report."""
    rec = Path(__file__).resolve().parents[2] / "data" / "recordings" / "codex-0.171.0"
    for run in ("task", "killed", "resumed", "forked"):
        path = rec / f"{run}.exec.jsonl"
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        times = [float(i) for i in range(len(lines))]
        traj = read_codex_exec(path, arrival_times=times)
        parser = CodexLineParser()
        reps = [r for obj, t in zip(lines, times, strict=True) for r in parser(obj, t)]
        reps += parser.close()
        events = [r.event for r in reps if r.kind == "event"]
        for ev in events:  # the adapter's own keys come on top of the reader's event
            if ev.command is not None:
                assert ev.extra.pop("source") == "command" and ev.extra.pop("payload_digest")
        assert events == traj.events, run
        kinds_after = [reps[i - 1].event.safe_boundary for i, r in enumerate(reps)
                       if r.kind == "boundary"]
        assert len(kinds_after) == len(traj.boundaries("tool_call")) and all(kinds_after)
        assert parser.thread_id == traj.meta["thread_id"]


def test_fake_codex_stream_arrives_live_and_counts_boundaries(tmp_path: Path, task_spec, codex_stream) -> None:
    stream = codex_stream
    lines = [json.loads(x) for x in stream.read_text().splitlines() if x.strip()]
    n_tool = sum(1 for o in lines if o["type"] == "item.completed"
                 and o["item"].get("type") in ("command_execution", "file_change"))
    agent = codex_agent(str(FAKE_CODEX), env=_codex_env(tmp_path, stream), base_codex_home=tmp_path / "none")
    ws = tmp_path / "ws"
    ws.mkdir()
    clock = WallClock()
    t0 = clock.now()
    run = agent.start(task_spec(prompt="plan the issue"), ws, 0, clock)
    arrivals, bounds, events = [], [], []
    for r in run.reports():
        if r.kind == "event":
            events.append(r.event)
            arrivals.append(r.event.end)
        elif r.kind == "boundary":
            bounds.append(r.boundary)
    assert run.wait() == 0
    assert bounds == list(range(1, n_tool + 1))
    # live: arrival stamps strictly spread over the replay (0.02 s per line), not one burst
    assert all(b >= a for a, b in zip(arrivals, arrivals[1:], strict=False))
    assert arrivals[-1] - arrivals[0] >= 0.02 * (len(lines) - 5)
    assert arrivals[0] >= t0
    assert [e.index for e in events] == list(range(len(events)))
    # preserved state after the last boundary carries the session id and the rollout file
    _, facts = run.preserved()
    assert facts["codex.session_id"] == lines[0]["thread_id"]
    assert any(k.endswith(f"{lines[0]['thread_id']}.jsonl") for k in facts["codex.rollout"])


def _group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_kill_mid_stream_leaves_no_process_of_the_run(tmp_path: Path, task_spec, codex_stream) -> None:
    stream = codex_stream
    agent = codex_agent(str(FAKE_CODEX), env=_codex_env(tmp_path, stream, delay=0.05),
                        base_codex_home=tmp_path / "none")
    ws = tmp_path / "ws"
    ws.mkdir()
    run = agent.start(task_spec(prompt="p"), ws, 0, WallClock())
    n = 0
    for r in run.reports():
        if r.kind == "boundary":
            n += 1
            if n == 2:
                run.kill()
                break
    rc = run.wait()
    assert rc == -9
    assert (tmp_path / "pid").exists()  # the program ran (its pid is its namespace's: 1)
    # the group is gone once the host's init reaped the namespace's PID 1 (dead already)
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline and _group_exists(run.pid):
        time.sleep(0.01)
    with pytest.raises(ProcessLookupError):
        os.killpg(run.pid, 0)
    # nothing carrying the run's fail-stop token is left (the program, anything it started)
    assert processes_with_env(FAIL_STOP_ENV, run.proc.fail_stop_token) == []
    assert list(run.reports()) == []  # stream is over after the kill


def test_codex_resume_restores_rollout_and_session(tmp_path: Path, task_spec, codex_stream) -> None:
    stream = codex_stream
    env = _codex_env(tmp_path, stream, delay=0.0)
    agent = codex_agent(str(FAKE_CODEX), env=env, base_codex_home=tmp_path / "none")
    ws = tmp_path / "ws"
    ws.mkdir()
    run = agent.start(task_spec(prompt="p"), ws, 0, WallClock())
    snap = None
    for r in run.reports():
        if r.kind == "boundary" and r.boundary == 3:
            snap = run.preserved()
    run.wait()
    assert snap is not None
    transcript, facts = snap
    ws2 = tmp_path / "ws2"
    ws2.mkdir()
    run2 = agent.resume(task_spec(prompt="p", resume_prompt="continue"),
                        RestorePoint(3, ws2, transcript, facts), ws2, 1, WallClock())
    bounds = [r.boundary for r in run2.reports() if r.kind == "boundary"]
    assert run2.wait() == 0, run2.stderr_text()
    assert bounds[0] == 4  # numbered from the pristine start
    assert "resume" in run2.argv and facts["codex.session_id"] in run2.argv
    # without the rollout the (fake) resume fails, as codex would
    facts_bad = dict(facts, **{"codex.rollout": {}})
    ws3 = tmp_path / "ws3"
    ws3.mkdir()
    run3 = agent.resume(task_spec(prompt="p"), RestorePoint(3, ws3, transcript, facts_bad), ws3, 1, WallClock())
    assert list(run3.reports()) == []
    assert run3.wait() == 2


def test_codex_config_templates_are_argv_lists() -> None:
    assert CODEX_CONFIG["start_argv"][:3] == ["codex", "exec", "--json"]
    assert "{workspace}" in CODEX_CONFIG["start_argv"] and "resume" in CODEX_CONFIG["resume_argv"]
    a = codex_agent("/opt/codex", model="gpt-x")
    assert a.start_argv[0] == "/opt/codex" and "--model" in a.start_argv


def test_codex_nominal_run_through_the_harness(tmp_path: Path, task_spec, codex_stream) -> None:
    """The harness checkpoints a (replayed) Codex run at every tool-call boundary."""
    from oracle.harness.branch import HarnessConfig, run_nominal
    from oracle.store.checkpoint import CheckpointStore

    stream = codex_stream
    agent = codex_agent(str(FAKE_CODEX), env=_codex_env(tmp_path, stream, delay=0.0),
                        base_codex_home=tmp_path / "none")
    store = CheckpointStore(tmp_path / "store")
    res = run_nominal(agent, task_spec(prompt="p"), store=store, work_dir=tmp_path / "nom", seed=0,
                      config=HarnessConfig(granularity="tool_call", require_obs_determinism=False))
    traj = read_codex_exec(stream)
    assert res.n_boundaries == len(traj.boundaries("tool_call")) and res.warnings == []
    assert res.boundary_events == res.trajectory.boundaries("tool_call")
    last = store.restore(res.checkpoints[-1]["checkpoint_id"], tmp_path / "restored")
    assert last.facts["codex.session_id"] == traj.meta["thread_id"] and last.facts["codex.rollout"]
    assert [o["source"] for o in res.observations] == ["command"] * sum(
        1 for e in traj.events if e.command is not None)
