"""Real runtimes under the harness: Codex CLI and Claude Code driven by the repair brain, held
at each boundary, their session captured there and forked on resume, and killed mid-tool with
nothing left alive.

The stream rules are checked on the real recordings (tests/data/recordings); the runs need the
pinned runtimes, installed into .runtimes/ when they can be (else the tests skip, saying why).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from features.readers.claude_code import read_claude_stream
from features.schema import EventKind
from oracle.agents import get_agent
from oracle.agents.model_server import (
    BrainError,
    Conversation,
    Message,
    ModelRequest,
    Plan,
    ScriptedBrain,
    Step,
)
from oracle.agents.model_server.conversation import ToolCall, ToolResult
from oracle.agents.runtime import CLAUDE_RULES, CODEX_RULES, Gate, RuntimeAgent
from oracle.harness.branch import HarnessConfig, run_nominal
from oracle.processes import FAIL_STOP_ENV, alive, processes_with_env
from oracle.protocol import AgentReport, RestorePoint, WallClock
from oracle.store.checkpoint import CheckpointStore

REC = Path(__file__).resolve().parents[2] / "data" / "recordings"
RUNTIMES = ["codex", "claude-code", "mini-swe-agent"]
#: small, fast repair tasks (two stdlib modules whose mutants this search repairs)
FAST = {"n_repos": 2, "families": {"numeric": ("fractions",), "utilities": ("glob",)},
        "passing_sample": 3, "failing_sample": 1, "top_lines": 3, "max_edits": 6}


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _feed(rules, lines: list[dict]) -> tuple[list[AgentReport], int, list[str]]:
    parser = rules.parser()
    reports, started, results = [], 0, []
    for i, obj in enumerate(lines):
        started += rules.tool_started(obj)
        results += rules.tool_results(obj)
        reports += parser(obj, float(i))
    return reports, started, results


def test_codex_stream_rules_on_the_recordings() -> None:
    reports, started, results = _feed(CODEX_RULES, _lines(REC / "codex-0.171.0" / "task.exec.jsonl"))
    assert started == len(results) == 4  # 3 commands + 1 file change (README's counts)
    assert sum(r.kind == "boundary" for r in reports) == 4
    rollout = (REC / "codex-0.171.0" / "task.rollout.jsonl").read_text()
    assert CODEX_RULES.count([rollout]) == 4 and CODEX_RULES.saved([rollout], 0, results)
    assert not CODEX_RULES.saved([rollout], 1, results)
    killed = (REC / "codex-0.171.0" / "killed.rollout.jsonl").read_text()
    assert CODEX_RULES.count([killed]) == 1  # the sleep has no output


def test_claude_stream_rules_and_parser_on_the_recordings() -> None:
    lines = _lines(REC / "claude-code-2.1.197" / "task.stream.jsonl")
    reports, started, results = _feed(CLAUDE_RULES, lines)
    assert started == len(results) == 5  # Bash; Read + Edit; Bash + Bash
    events = [r.event for r in reports if r.kind == "event"]
    assert sum(r.kind == "boundary" for r in reports) == 5
    assert [e.kind for e in events if e.kind == EventKind.MODEL_CALL].__len__() == 4
    kinds = [e.extra.get("tool") for e in events if "tool" in e.extra]
    assert kinds == ["Bash", "Read", "Edit", "Bash", "Bash"]
    assert all(e.safe_boundary for e in events if "tool" in e.extra)
    bash = [e for e in events if e.extra.get("tool") == "Bash"]
    assert bash[0].command == "printf 'hello\\n' > hello.txt" and bash[0].exit_code == 0
    assert all(e.extra["source"] == "command" and len(e.extra["payload_digest"]) == 64 for e in bash)
    edit = next(e for e in events if e.kind == EventKind.FILE_CHANGE)
    assert edit.paths_written == ["/tmp/ripplecp-recordings/claude-code/ws/hello.txt"]
    assert events[-1].extra["line_type"] == "result" and events[-1].turn_end
    # the events are the readers' (the one mapping of stream-json), plus the replay keys
    traj = read_claude_stream(REC / "claude-code-2.1.197" / "task.stream.jsonl",
                              arrival_times=[float(i) for i in range(len(lines))])
    for ev in bash:
        ev.extra.pop("source"), ev.extra.pop("payload_digest")
    assert events == traj.events
    session = (REC / "claude-code-2.1.197" / "task.session.jsonl").read_text()
    assert CLAUDE_RULES.saved([session], 0, results) and CLAUDE_RULES.count([session]) == 5
    assert not CLAUDE_RULES.saved([session], 0, [*results, "toolu_not_there"])


def _request(n_results: int) -> ModelRequest:
    msgs = [Message("user", "go")]
    for i in range(n_results):
        msgs += [Message("assistant", tool_calls=(ToolCall(f"c{i}", "exec_command", {}, "shell",
                                                           "true"),)),
                 Message("tool", results=(ToolResult(f"c{i}", ""),))]
    return ModelRequest("openai-responses", "/v1/responses", {}, {}, b"",
                        Conversation("openai-responses", tuple(msgs)))


def test_the_gate_holds_a_request_until_the_harness_took_what_came_before() -> None:
    gate = Gate(ScriptedBrain(Plan.from_json([{"shell": "true"}, {"finish": "done"}])), 5.0)
    arrived: list[int] = []
    gate.on_request = arrived.append
    answers: list[Step] = []
    refused: list[BrainError] = []

    def ask(n: int) -> None:
        try:
            answers.append(gate.respond(_request(n)))  # type: ignore[arg-type]
        except BrainError as exc:
            refused.append(exc)

    ask_first = threading.Thread(target=ask, args=(0,))
    ask_first.start()
    _wait(lambda: arrived == [1], 2)
    time.sleep(0.1)
    assert answers == []  # held: the harness has not taken the request's own activity
    gate.ack_request(1)
    ask_first.join(2)
    assert len(answers) == 1
    second = threading.Thread(target=ask, args=(1,))
    second.start()
    time.sleep(0.1)
    assert arrived == [1] and len(answers) == 1  # its tool result is not taken yet
    gate.ack_results(1)
    _wait(lambda: arrived == [1, 2], 2)
    gate.close()  # the run was killed while the request was held: it is refused
    second.join(2)
    assert len(answers) == 1 and gate.timeouts == 0
    assert [str(e) for e in refused] == ["the run has ended"]


def _wait(cond: Callable[[], bool], timeout: float) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(0.02)


def test_a_runtime_agent_names_what_it_takes() -> None:
    assert get_agent("codex").name == "codex" and get_agent("claude-code").name == "claude-code"
    assert get_agent("mini-swe-agent").name == "mini-swe-agent"
    with pytest.raises(ValueError, match="unknown brain 'repiar'"):
        RuntimeAgent("codex", brain="repiar")
    with pytest.raises(ValueError, match="needs a plan"):
        RuntimeAgent("codex", brain="scripted")
    with pytest.raises(ValueError, match="tool-call boundaries only"):
        RuntimeAgent("codex", granularity="turn")
    with pytest.raises(ValueError, match="unknown runtime 'aider'; choose from codex, "
                                         "claude-code, mini-swe-agent"):
        RuntimeAgent("aider")
    with pytest.raises(ValueError, match="cannot generate tasks"):
        RuntimeAgent("codex", brain="proxy", url="http://127.0.0.1:9").make_tasks(1, 0, Path("x"))


# ----------------------------------------------------------------------------- real runs


@pytest.mark.slow
@pytest.mark.parametrize("name", RUNTIMES)
def test_a_nominal_run_is_checkpointed_exactly_and_a_fork_continues_it(
        name: str, runtime, tmp_path: Path) -> None:
    runtime(name)
    agent = RuntimeAgent(name)
    (task,) = [t for t in agent.make_tasks(2, 0, tmp_path / "tasks", **FAST)
               if t.task_id.startswith("glob")]
    store = CheckpointStore(tmp_path / "store")
    res = run_nominal(agent, task, store=store, work_dir=tmp_path / "nominal", seed=0,
                      config=HarnessConfig(granularity="tool_call"))
    assert res.verified and res.n_boundaries >= 5 and res.warnings == []
    assert res.boundary_events == res.trajectory.boundaries("tool_call")
    assert res.usage["gate_timeouts"] == 0 and res.usage["tokens"] > 0
    # the run's private home: the offline configuration, pointed at the run's own server
    run_dir = tmp_path / "nominal" / ".workspace.agent" / "run0"
    if name == "codex":
        cfg = tomllib.loads((run_dir / "home" / "config.toml").read_text())
        url = cfg["model_providers"][cfg["model_provider"]]["base_url"]
        assert url.startswith("http://127.0.0.1:") and set(cfg["features"].values()) == {False}
    elif name == "claude-code":
        settings = json.loads((run_dir / "home" / ".claude" / "settings.json").read_text())
        assert set(settings["permissions"]["deny"]) == {"WebFetch", "WebSearch"}
    else:  # no stream on stdout: its console text is kept, the trajectory was watched
        assert (run_dir / "stdout.log").stat().st_size > 0
        assert len(list((run_dir / "snapshots").glob("*.traj.json"))) >= res.n_boundaries
    sessions = [store.manifest(c["checkpoint_id"])["facts"]["runtime.session"]
                for c in res.checkpoints]
    assert all(s["complete"] and s["runtime"] == name for s in sessions)
    nominal_id = sessions[0]["resume_id"]
    # restore a middle boundary into a fresh workspace and fork the captured session
    mid = res.checkpoints[res.n_boundaries // 2]
    ws = tmp_path / "ws"
    info = store.restore(mid["checkpoint_id"], ws)
    run = agent.resume(task, RestorePoint(mid["boundary"], ws, info.transcript, info.facts), ws,
                       1, WallClock())
    boundaries = [r.boundary for r in run.reports() if r.kind == "boundary"]
    assert run.wait() == 0, run.stderr_text()
    assert boundaries == list(range(mid["boundary"] + 1, res.n_boundaries + 1))
    assert agent.verify(task, ws)
    fork_id = run.session_id
    if name == "mini-swe-agent":  # no session id: the resumed run writes its own trajectory
        assert fork_id == nominal_id == "trajectory.json"
        assert (ws.parent / f".{ws.name}.agent" / "run0" / "home" / "resume" / fork_id).exists()
    else:
        assert fork_id and fork_id != nominal_id  # its own thread/session, captured one untouched
    assert agent.describe()["version"] == runtime(name).spec.version


def _live_in(ws: Path) -> list[int]:
    """Live processes whose working directory is inside ``ws``."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cwd = os.readlink(d / "cwd")
            except OSError:
                continue
            if cwd.startswith(str(ws)) and alive(int(d.name)):
                found.append(int(d.name))
    return found


@pytest.mark.slow
def test_a_kill_mid_tool_ends_every_process_and_the_tool_never_finishes(runtime,
                                                                       tmp_path: Path) -> None:
    """The tool runs ``sleep 30; touch MARKER`` in a session of its own; after the kill nothing
    of the run is alive and MARKER never appears (both runtimes at once, one wait)."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps([{"shell": "touch started; sleep 30; touch MARKER",
                                 "timeout_s": 60}, {"finish": "done"}]))
    killed: dict[str, float] = {}
    errors: list[BaseException] = []

    def one(name: str) -> None:
        try:
            runtime(name)
            agent = RuntimeAgent(name, brain="scripted", plan=str(plan))
            ws = tmp_path / name
            ws.mkdir()
            from oracle.protocol import TaskSpec

            run = agent.start(TaskSpec("t", "r", "f", None, None, {"prompt": "sleep"}), ws, 0,
                              WallClock())
            for rep in run.reports():
                if rep.kind == "activity" and rep.activity == "tool":
                    _wait(lambda: (ws / "started").exists() and _live_in(ws), 30)
                    run.kill()  # what the harness does at a mid-tool strike
                    break
            assert run.wait() == -9
            killed[name] = time.monotonic()
            assert processes_with_env(FAIL_STOP_ENV, run.proc.fail_stop_token) == []
            assert _live_in(ws) == []
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(n,)) for n in RUNTIMES]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if errors:
        raise errors[0]
    if not killed:
        pytest.skip("no runtime could be installed here")
    time.sleep(max(0.0, 31 - (time.monotonic() - min(killed.values()))))
    for name in killed:
        assert (tmp_path / name / "started").exists()
        assert not (tmp_path / name / "MARKER").exists(), name
    shutil.rmtree(tmp_path, ignore_errors=True)
