"""Generic command-line agent adapter and the Codex CLI configuration (fake_codex replay)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from features.readers.codex_exec import read_codex_exec
from features.schema import Event, EventKind
from oracle.agent import AgentReport, RestorePoint, TaskSpec, VirtualClock, WallClock
from oracle.cli_agent import (
    CODEX_CONFIG,
    CodexLineParser,
    CommandLineAgent,
    codex_agent,
    substitute,
)

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / ".." / "shared" / "fixtures" / "trajectories" / "codex_exec_jsonl"
FAKE_CODEX = Path(__file__).resolve().parent / "bin" / "fake_codex"
STREAM = "tielec_issue-119_00_planning_execute.jsonl"


def _fixture(name: str = STREAM) -> Path:
    if not FIXTURES.exists():
        pytest.skip(f"shared fixtures folder absent (user clone): {FIXTURES}")
    return FIXTURES / name


def _task(**params: object) -> TaskSpec:
    return TaskSpec("t1", "r", "fam", None, None, dict(params))


def test_substitute_is_per_argument_and_never_reexpands() -> None:
    vals = {"workspace": "/w s", "prompt": "x; rm -rf / {workspace} $(id)"}
    out = substitute(["--cd", "{workspace}", "{prompt}", "{unknown}", "a{workspace}b"], vals)
    assert out == ["--cd", "/w s", "x; rm -rf / {workspace} $(id)", "{unknown}", "a/w sb"]


def test_task_text_reaches_program_as_one_argument(tmp_path: Path) -> None:
    """No shell: hostile prompt text arrives verbatim as a single argv element."""
    ws = tmp_path / "ws"
    ws.mkdir()
    prog = ("import json,sys; print(json.dumps({'type':'argv','argv':sys.argv[1:]}))")
    seen: list[dict] = []

    def parse(obj: dict, t: float) -> list[AgentReport]:
        seen.append(obj)
        return []

    agent = CommandLineAgent([sys.executable, "-c", prog, "{prompt}", "{seed}"],
                             [sys.executable, "-c", prog], parse)
    prompt = "fix it'; touch PWNED; echo \"$HOME\" `id`"
    run = agent.start(_task(prompt=prompt), ws, 42, WallClock())
    list(run.reports())
    assert run.wait() == 0
    assert seen[0]["argv"] == [prompt, "42"]
    assert not (ws / "PWNED").exists()


def test_codex_parser_matches_the_whole_file_reader() -> None:
    """Per-line mapping agrees with features.readers.codex_exec on kinds and boundaries."""
    path = _fixture()
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


def _codex_env(tmp_path: Path, stream: Path, delay: float = 0.02) -> dict[str, str]:
    return {"FAKE_CODEX_STREAM": str(stream), "FAKE_CODEX_DELAY": str(delay),
            "FAKE_CODEX_PIDFILE": str(tmp_path / "pid")}


def test_fake_codex_stream_arrives_live_and_counts_boundaries(tmp_path: Path) -> None:
    stream = _fixture()
    lines = [json.loads(x) for x in stream.read_text().splitlines() if x.strip()]
    n_tool = sum(1 for o in lines if o["type"] == "item.completed"
                 and o["item"].get("type") in ("command_execution", "file_change"))
    agent = codex_agent(str(FAKE_CODEX), env=_codex_env(tmp_path, stream), base_codex_home=tmp_path / "none")
    ws = tmp_path / "ws"
    ws.mkdir()
    clock = WallClock()
    t0 = clock.now()
    run = agent.start(_task(prompt="plan the issue"), ws, 0, clock)
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


def test_kill_mid_stream_leaves_process_group_dead(tmp_path: Path) -> None:
    stream = _fixture()
    agent = codex_agent(str(FAKE_CODEX), env=_codex_env(tmp_path, stream, delay=0.05),
                        base_codex_home=tmp_path / "none")
    ws = tmp_path / "ws"
    ws.mkdir()
    run = agent.start(_task(prompt="p"), ws, 0, WallClock())
    n = 0
    for r in run.reports():
        if r.kind == "boundary":
            n += 1
            if n == 2:
                run.kill()
                break
    rc = run.wait()
    assert rc == -9
    pid = int((tmp_path / "pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)
    assert list(run.reports()) == []  # stream is over after the kill


def test_codex_resume_restores_rollout_and_session(tmp_path: Path) -> None:
    stream = _fixture()
    env = _codex_env(tmp_path, stream, delay=0.0)
    agent = codex_agent(str(FAKE_CODEX), env=env, base_codex_home=tmp_path / "none")
    ws = tmp_path / "ws"
    ws.mkdir()
    run = agent.start(_task(prompt="p"), ws, 0, WallClock())
    snap = None
    for r in run.reports():
        if r.kind == "boundary" and r.boundary == 3:
            snap = run.preserved()
    run.wait()
    assert snap is not None
    transcript, facts = snap
    ws2 = tmp_path / "ws2"
    ws2.mkdir()
    run2 = agent.resume(_task(prompt="p", resume_prompt="continue"),
                        RestorePoint(3, ws2, transcript, facts), ws2, 1, WallClock())
    bounds = [r.boundary for r in run2.reports() if r.kind == "boundary"]
    assert run2.wait() == 0, run2.stderr_text()
    assert bounds[0] == 4  # numbered from the pristine start
    assert "resume" in run2.argv and facts["codex.session_id"] in run2.argv
    # without the rollout the (fake) resume fails, as codex would
    facts_bad = dict(facts, **{"codex.rollout": {}})
    ws3 = tmp_path / "ws3"
    ws3.mkdir()
    run3 = agent.resume(_task(prompt="p"), RestorePoint(3, ws3, transcript, facts_bad), ws3, 1, WallClock())
    assert list(run3.reports()) == []
    assert run3.wait() == 2


def test_codex_config_templates_are_argv_lists() -> None:
    assert CODEX_CONFIG["start_argv"][:3] == ["codex", "exec", "--json"]
    assert "{workspace}" in CODEX_CONFIG["start_argv"] and "resume" in CODEX_CONFIG["resume_argv"]
    a = codex_agent("/opt/codex", model="gpt-x")
    assert a.start_argv[0] == "/opt/codex" and "--model" in a.start_argv


def test_adapter_uses_the_given_clock(tmp_path: Path) -> None:
    clock = VirtualClock(100.0)
    prog = "import json; print(json.dumps({'type':'x'}))"

    def parse(obj: dict, t: float) -> list[AgentReport]:
        from features.schema import Event

        return [AgentReport("event", event=Event(index=7, kind="other"))]

    agent = CommandLineAgent([sys.executable, "-c", prog], [sys.executable, "-c", prog], parse)
    ws = tmp_path / "ws"
    ws.mkdir()
    run = agent.start(_task(), ws, 0, clock)
    (rep,) = list(run.reports())
    run.wait()
    assert rep.event is not None and rep.event.end == 100.0 and rep.event.index == 0
    assert rep.event.extra["arrival"] == 100.0 and clock.now() == 100.0


def test_non_json_stdout_lines_are_counted_and_warned_never_silently_dropped(tmp_path: Path) -> None:
    prog = ("import json; print('Loading model...'); print(json.dumps({'type':'x'})); "
            "print('[1, 2]'); print('{broken')")

    def parse(obj: dict, t: float) -> list[AgentReport]:
        return [AgentReport("event", event=Event(index=0, kind="other"))]

    agent = CommandLineAgent([sys.executable, "-c", prog], [sys.executable, "-c", prog], parse)
    ws = tmp_path / "ws"
    ws.mkdir()
    run = agent.start(_task(), ws, 0, WallClock())
    with pytest.warns(UserWarning, match=r"stdout line 1 is not a JSON object.*Loading model") as rec:
        reps = list(run.reports())
    assert run.wait() == 0 and len(reps) == 1
    assert len([w for w in rec if "not a JSON object" in str(w.message)]) == 1  # first one only
    assert run.usage["non_json_lines"] == 3 and run.usage["lines"] == 4


def test_codex_nominal_run_through_the_harness(tmp_path: Path) -> None:
    """The harness checkpoints a (replayed) Codex run at every tool-call boundary."""
    from oracle.checkpoint import CheckpointStore
    from oracle.harness import HarnessConfig, run_nominal

    stream = _fixture()
    agent = codex_agent(str(FAKE_CODEX), env=_codex_env(tmp_path, stream, delay=0.0),
                        base_codex_home=tmp_path / "none")
    store = CheckpointStore(tmp_path / "store")
    res = run_nominal(agent, _task(prompt="p"), store=store, work_dir=tmp_path / "nom", seed=0,
                      config=HarnessConfig(granularity="tool_call", require_obs_determinism=False))
    traj = read_codex_exec(stream)
    assert res.n_boundaries == len(traj.boundaries("tool_call")) and res.warnings == []
    assert res.boundary_events == res.trajectory.boundaries("tool_call")
    last = store.restore(res.checkpoints[-1]["checkpoint_id"], tmp_path / "restored")
    assert last.facts["codex.session_id"] == traj.meta["thread_id"] and last.facts["codex.rollout"]
    assert [o["source"] for o in res.observations] == ["command"] * sum(
        1 for e in traj.events if e.command is not None)
