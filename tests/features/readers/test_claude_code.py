"""The Claude Code readers (``features.readers.claude_code``): the recorded runs of Claude Code
2.1.197 (``tests/data/recordings``, counts checked by hand in its README) and hand-made small
files for what the recordings do not show (``tests/data/readers/claude-code``).

Hand counts on the recordings (F = the file):
  lines:       wc -l F
  tool calls:  grep -o '"type":"tool_use"' F | wc -l ; results: grep -o '"type":"tool_result"'
  responses:   grep -o '"id":"msg_[0-9a-f]*"' F | sort -u | wc -l   (one model call each)
  tokens:      jq 'select(.type=="result")|.usage' F (stream); the per-response usage of the
               session file, once per message id
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from features.readers import (
    TrajectoryFormatError,
    UnknownEventWarning,
    detect_format,
    read_trajectory,
)
from features.readers.claude_code import ClaudeStreamParser
from features.schema import BoundaryKind, EventKind, Trajectory

RECORDINGS = Path(__file__).resolve().parents[2] / "data" / "recordings" / "claude-code-2.1.197"
HANDMADE = Path(__file__).resolve().parents[2] / "data" / "readers" / "claude-code"
WS = "/tmp/ripplecp-recordings/claude-code/ws"


def _read(name: str) -> Trajectory:
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownEventWarning)  # nothing in them is unknown
        return read_trajectory(RECORDINGS / name)


def _tools(t: Trajectory) -> list[str]:
    return [e.extra["tool"] for e in t.events if "tool" in e.extra]


# (lines, tool calls, tool results, model calls, tokens in, tokens out or None)
STREAM = {
    "task": (14, ["Bash", "Read", "Edit", "Bash", "Bash"], 5, 4, 7472, 207),
    "killed": (4, ["Bash", "Bash"], 1, 2, None, None),
    "resumed": (7, ["Read", "Edit"], 2, 2, 3817, 104),
    "forked": (7, ["Bash", "Bash"], 2, 2, 4232, 71),
}


@pytest.mark.parametrize("run", sorted(STREAM))
def test_stream_json_recordings(run: str, kinds: Callable[..., list]) -> None:
    n_lines, tools, n_results, n_calls, tin, tout = STREAM[run]
    path = RECORDINGS / f"{run}.stream.jsonl"
    assert len(path.read_text().splitlines()) == n_lines
    assert detect_format(path) == "claude-code-stream"
    t = _read(f"{run}.stream.jsonl")
    assert _tools(t) == tools
    done = [e for e in t.events if "tool" in e.extra and not e.extra.get("incomplete")]
    assert len(done) == n_results == len(t.boundaries("tool_call"))
    calls = kinds(t, EventKind.MODEL_CALL)
    assert len(calls) == n_calls == t.meta["n_model_calls"]
    # usage on assistant lines is a snapshot (output 1): no per-call output tokens
    assert all(c.output_tokens is None and c.extra["usage"]["output_tokens"] == 1 for c in calls)
    if tin is None:  # killed: no result line
        assert t.meta["exit_status"] == "incomplete" and t.meta["usage"] is None
        (cut,) = [e for e in t.events if e.extra.get("incomplete")]
        assert cut.command == "touch started && sleep 30" and not cut.safe_boundary
        assert not any(e.turn_end for e in t.events)  # the cut turn stays open
    else:
        # the per-call input tokens add up to the result's (authoritative) total
        assert sum(c.input_tokens for c in calls) == tin == t.meta["usage"]["input_tokens"]
        assert t.meta["usage"]["output_tokens"] == tout
        res = t.events[-1]
        assert res.extra["line_type"] == "result" and res.turn_end and not res.is_error
        assert t.meta["exit_status"] == "completed"
    assert t.task_id == t.meta["init"]["session_id"]
    assert t.meta["init"]["claude_code_version"] == "2.1.197"
    assert {e.step for e in t.events} == {1}


def test_stream_json_task_details(kinds: Callable[..., list]) -> None:
    t = _read("task.stream.jsonl")
    bash = kinds(t, EventKind.COMMAND)
    assert [e.command for e in bash] == ["printf 'hello\\n' > hello.txt", "wc -c hello.txt", "ls"]
    assert [e.exit_code for e in bash] == [0, 0, 0]
    assert bash[1].extra["output"] == "12 hello.txt"
    (edit,) = kinds(t, EventKind.FILE_CHANGE)
    assert edit.paths_written == [f"{WS}/hello.txt"] and edit.bytes_written == len("hello world")
    (read,) = [e for e in t.events if e.extra.get("tool") == "Read"]
    assert read.kind == EventKind.OTHER and read.paths_read == [f"{WS}/hello.txt"]
    # the two parallel calls of one response land where their results arrived (lines 11, 12)
    assert [(e.extra["line"], e.extra["result_line"]) for e in bash[1:]] == [(9, 11), (10, 12)]
    # no timestamps on assistant lines, so calls have an end (the result's) but no start
    assert all(e.start is None and e.end is not None for e in bash)
    res = t.events[-1]
    assert res.extra["num_turns"] == 6 and res.duration == pytest.approx(1.041)
    assert t.meta["cost_usd"] == pytest.approx(0.042535)


def test_stream_json_arrival_times_time_every_event() -> None:
    path = RECORDINGS / "task.stream.jsonl"
    times = [10.0 * i for i in range(14)]
    t = read_trajectory(path, arrival_times=times)
    (ls,) = [e for e in t.events if e.command == "ls"]
    assert (ls.start, ls.end) == (times[9], times[11])  # tool_use line 10, its result line 12
    assert all(e.end is None or e.end in times for e in t.events)  # one clock: arrivals


# (lines, tool calls, tool results, model calls, tokens in, tokens out, steps, dead events)
SESSION = {
    "task": (18, ["Bash", "Read", "Edit", "Bash", "Bash"], 5, 4, 7472, 207, 1, 0),
    # the killed run's two responses: 1660 + 1745 in, 33 + 32 out
    "killed": (8, ["Bash", "Bash"], 1, 2, 3405, 65, 1, 0),
    # the killed file's 8 lines + the resume; the sleep call (line 8) is a dead branch:
    # its response and its unanswered call
    "resumed": (20, ["Bash", "Bash", "Read", "Edit"], 3, 4, 3405 + 1811 + 2006, 65 + 92 + 12,
                2, 2),
    # the history copied without the dead branch, then the fork's two parallel calls
    "forked": (23, ["Bash", "Read", "Edit", "Bash", "Bash"], 5, 5,
               1660 + 1811 + 2006 + 2049 + 2183, 33 + 92 + 12 + 62 + 9, 3, 0),
}


@pytest.mark.parametrize("run", sorted(SESSION))
def test_session_file_recordings(run: str, kinds: Callable[..., list], tokens: Callable[..., tuple]) -> None:
    n_lines, tools, n_results, n_calls, tin, tout, steps, n_dead = SESSION[run]
    path = RECORDINGS / f"{run}.session.jsonl"
    assert len(path.read_text().splitlines()) == n_lines
    assert detect_format(path) == "claude-code-session"
    t = _read(f"{run}.session.jsonl")
    assert _tools(t) == tools
    done = [e for e in t.events if "tool" in e.extra and not e.extra.get("incomplete")]
    assert len(done) == n_results == len(t.boundaries("tool_call"))
    calls = kinds(t, EventKind.MODEL_CALL)
    # once per message id, not once per line (task: 7 assistant lines, 4 responses)
    assert len(calls) == n_calls
    assert all(c.extra["usage_final"] for c in calls)
    assert tokens(t)[0] == tin and tokens(t)[2] == tout
    assert len({e.step for e in t.events}) == steps == t.meta["n_user_turns"]
    assert t.meta["dead_branch"]["n_events"] == n_dead
    assert t.meta["versions"] == ["2.1.197"]
    assert t.task_id == t.meta["session_id"]
    assert sum(e.turn_end for e in t.events) == steps and t.events[-1].turn_end


def test_session_file_task_counts_usage_once_per_response(tokens: Callable[..., tuple]) -> None:
    path = RECORDINGS / "task.session.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    per_line = sum(x["message"]["usage"]["output_tokens"] for x in lines
                   if x["type"] == "assistant")
    t = _read("task.session.jsonl")
    assert tokens(t)[2] == 207 and per_line == 45 * 2 + 91 * 2 + 56 * 2 + 15  # summing lines: 399
    # the same 207 the stream's result states
    assert _read("task.stream.jsonl").meta["usage"]["output_tokens"] == 207


def test_session_file_resumed_keeps_the_dead_branch() -> None:
    t = _read("resumed.session.jsonl")
    dead = [t.events[i] for i in t.meta["dead_branch"]["events"]]
    assert [e.kind for e in dead] == [EventKind.MODEL_CALL, EventKind.COMMAND]
    sleep = dead[1]
    assert sleep.command == "touch started && sleep 30" and sleep.extra["line"] == 8
    assert sleep.extra["incomplete"] and sleep.extra["abandoned"] and not sleep.safe_boundary
    # released where the resume forked off (line 11), before the resumed work
    nxt = t.events[sleep.index + 1]
    assert nxt.extra["line"] == 11 and nxt.text == "Continue from where you left off."
    assert t.meta["dead_branch"]["n_records"] == 1
    # the synthetic "No response requested." is a message, not a model call
    (syn,) = [e for e in t.events if e.extra.get("synthetic")]
    assert syn.kind == EventKind.MESSAGE and syn.text == "No response requested."
    # the resume prompt opens step 2; the isMeta "Continue ..." line does not
    assert [e.step for e in t.events if e.extra.get("prompt")] == [1, 2]
    assert t.task_id == "73b4f725-9ef2-46cc-a15e-1ea62a977796"  # kept on resume


def test_session_file_forked_is_a_new_session() -> None:
    t = _read("forked.session.jsonl")
    assert t.task_id == "c7bc95d9-7e27-4cbd-8a0c-610115ce7c0d" != _read(
        "resumed.session.jsonl").task_id
    assert t.meta["mode"] == "normal" and t.meta["leaf_uuid"] == t.meta["live_leaf"]


def test_session_subagents_inline_compaction_and_tool_variants(kinds: Callable[..., list]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownEventWarning)
        t = read_trajectory(HANDMADE / "sidechain.session.jsonl")
    assert detect_format(HANDMADE / "sidechain.session.jsonl") == "claude-code-session"
    # the inline sidechain's lines are events marked as subagent a1's
    sub = [e for e in t.events if e.extra.get("subagent") == "a1"]
    assert [e.kind for e in sub] == [EventKind.MESSAGE, EventKind.MODEL_CALL, EventKind.OTHER,
                                    EventKind.MODEL_CALL, EventKind.MESSAGE]
    grep = sub[2]
    assert grep.paths_read == ["src"] and grep.duration == pytest.approx(0.012)
    assert not any(e.extra.get("prompt") for e in sub)  # its prompt opens no step
    (task,) = [e for e in t.events if e.extra.get("tool") == "Task"]
    assert task.index > grep.index and task.duration == 4.0
    assert task.extra["result"]["agentId"] == "a1" and "content" not in task.extra["result"]
    # a response whose first line is a usage snapshot (stop_reason null, output 3): its model
    # call waits for the final usage on its last line (output 120)
    first = kinds(t, EventKind.MODEL_CALL)[0]
    assert (first.input_tokens, first.cached_tokens, first.output_tokens) == (
        12 + 500 + 9000, 9000, 120)
    # a failing test: ran, exit 1, not an error, counts parsed
    (test,) = kinds(t, EventKind.TEST)
    assert (test.exit_code, test.is_error, test.tests_passed, test.tests_failed) == (1, False, 2, 1)
    assert test.boundary_kind == BoundaryKind.TEST
    # compaction: the boundary is an event, the chain continues through logicalParentUuid
    (compact,) = [e for e in t.events if e.extra.get("subtype") == "compact_boundary"]
    assert compact.extra["compactMetadata"]["preTokens"] == 9600
    assert t.meta["dead_branch"]["n_events"] == 0
    summary = t.events[compact.index + 1]
    assert summary.extra.get("isCompactSummary") and not summary.extra["prompt"]
    assert t.meta["n_user_turns"] == 2 and t.meta["versions"] == ["1.0.80", "1.0.81"]
    by_tool = {e.extra["tool"]: e for e in t.events if "tool" in e.extra}
    me = by_tool["MultiEdit"]
    assert me.kind == EventKind.FILE_CHANGE and me.bytes_written == len("yy") + len("bbb")
    w = by_tool["Write"]  # refused: nothing written
    assert w.is_error and w.paths_written == [] and w.bytes_written is None
    assert by_tool["TodoWrite"].kind == EventKind.OTHER and by_tool["TodoWrite"].safe_boundary
    assert by_tool["mcp__linear__get_issue"].kind == EventKind.OTHER  # unknown tools kept
    assert by_tool["mcp__linear__get_issue"].extra["output"] == "ENG-1: parser bug"
    bg = [e for e in kinds(t, EventKind.COMMAND) if e.command == "npm run dev"][0]
    assert bg.exit_code is None and bg.extra["background"] == "bash_1"
    grep_q = [e for e in kinds(t, EventKind.COMMAND) if e.command.startswith("grep")][0]
    assert grep_q.exit_code is None  # "No matches found": an interpreted non-zero exit
    assert t.meta["n_progress"] == 1 and t.meta["bookkeeping"] == {"summary": 1,
                                                                   "last-prompt": 1}
    assert t.meta["summaries"] == ["Fix the failing parser test"]


def test_session_output_tokens_from_a_message_last_record_whatever_its_stop_reason() -> None:
    """A response's usage comes from its last record even when ``stop_reason`` is null
    there (v1.0.x, 2.0.28, 2.1.39 ... leave it null on every record); a lone first-block
    snapshot is still no output count (issue 31). By hand: msg_1's last record says 230,
    msg_2 has only its snapshot (None), msg_3 ends final with 75: 305 in all."""
    t = read_trajectory(HANDMADE / "null-stop-reason.session.jsonl")
    calls = [e for e in t.events if e.kind is EventKind.MODEL_CALL]
    assert [c.extra["message_id"] for c in calls] == ["msg_1", "msg_2", "msg_3"]
    assert [c.output_tokens for c in calls] == [230, None, 75]
    assert [c.input_tokens for c in calls] == [4210, 4510, 4610]
    assert [c.extra["usage_final"] for c in calls] == [False, False, True]


def test_session_reads_its_compaction_agent_files() -> None:
    """A compaction runs as an agent of its own, logged in ``agent-acompact-<id>.jsonl``
    beside the session (here in ``<session>/subagents/``): its model call (170,012 input
    tokens here) belongs to the session and was not read (issue 31). It is read right
    before the session's compact_boundary; another session's compaction file in the same
    folder (its sessionId differs) is not. By hand: 4 model calls, 2,175 output tokens."""
    t = read_trajectory(HANDMADE / "compacted.session.jsonl")
    calls = [e for e in t.events if e.kind is EventKind.MODEL_CALL]
    assert [c.extra["message_id"] for c in calls] == ["msg_1", "msg_2", "msg_c", "msg_3"]
    comp = calls[2]
    assert comp.input_tokens == 12 + 170000 and comp.output_tokens == 2100
    assert comp.extra["subagent"] == "acompact-5f1e"
    assert sum(c.output_tokens for c in calls) == 40 + 20 + 2100 + 15
    boundary = next(e for e in t.events if e.extra.get("subtype") == "compact_boundary")
    assert comp.index < boundary.index
    assert all(e.step == 1 for e in t.events if e.extra.get("subagent"))  # no prompt of its own
    assert t.meta["subagents"] == ["acompact-5f1e"]
    assert t.meta["n_prompts"] == 2  # "Refactor the parser.", "Go on."


def _placeholder_stream(ids: str | None, cache_key: str | None) -> str:
    """A two-response stream-json log; ``ids``: one placeholder for every message and tool
    id; ``cache_key``: one placeholder for both cache-token keys (as some publishers do)."""
    def usage(out: int) -> str:
        keys = [cache_key or "cache_creation_input_tokens", cache_key or "cache_read_input_tokens"]
        return (f'{{"input_tokens": 9, "{keys[0]}": 100, "{keys[1]}": 2000, '
                f'"output_tokens": {out}}}')

    def msg(mid: str, block: str, out: int) -> str:
        return ('{"type": "assistant", "session_id": "s-1", "message": {"id": "' + (ids or mid)
                + '", "role": "assistant", "model": "m", "content": [' + block
                + '], "stop_reason": "tool_use", "usage": ' + usage(out) + "}}")

    def tool(tid: str, cmd: str) -> str:
        return ('{"type": "tool_use", "id": "' + (ids or tid) + '", "name": "Bash", '
                '"input": {"command": "' + cmd + '"}}')

    def result(tid: str) -> str:
        return ('{"type": "user", "session_id": "s-1", "message": {"role": "user", "content": '
                '[{"type": "tool_result", "tool_use_id": "' + (ids or tid) + '", '
                '"content": "ok", "is_error": false}]}}')

    return "\n".join([
        '{"type": "system", "subtype": "init", "session_id": "s-1", "cwd": "/w"}',
        msg("msg_1", tool("toolu_1", "ls"), 12), result("toolu_1"),
        msg("msg_2", tool("toolu_2", "pwd"), 7), result("toolu_2"),
        '{"type": "result", "subtype": "success", "session_id": "s-1", "is_error": false}',
    ]) + "\n"


def test_stream_json_with_placeholder_ids_and_keys_is_refused_with_a_hint(
        tmp_path: Path) -> None:
    """A publisher replaced message ids, tool ids and the cache-token keys by one
    placeholder. Decision (issue 31): refused, in one line naming the file and the line,
    saying why — the values under one key and the calls under one id cannot be told apart,
    so a read would pair results with the wrong calls and count one model call for many."""
    ok = tmp_path / "ok.jsonl"
    ok.write_text(_placeholder_stream(None, None))
    t = read_trajectory(ok)
    assert len([e for e in t.events if e.kind is EventKind.MODEL_CALL]) == 2
    assert [e.command for e in t.events if e.kind is EventKind.COMMAND] == ["ls", "pwd"]

    keys = tmp_path / "keys.jsonl"
    keys.write_text(_placeholder_stream("[REDACTED]", "[REDACTED]"))
    with pytest.raises(TrajectoryFormatError) as err:
        read_trajectory(keys)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{keys}: line 2: ")
    assert "duplicate key '[REDACTED]'" in msg and "placeholder" in msg

    ids = tmp_path / "ids.jsonl"
    ids.write_text(_placeholder_stream("[REDACTED]", None))
    with pytest.raises(TrajectoryFormatError) as err:
        read_trajectory(ids)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{ids}: line 4: ")
    assert "'[REDACTED]'" in msg and "placeholder" in msg and "line 2" in msg


def test_session_subagent_in_its_own_file() -> None:
    t = read_trajectory(HANDMADE / "newer.jsonl")
    sub = [e for e in t.events if e.extra.get("subagent") == "b2c3"]
    # the subagent's file is read where the Agent result arrives, before it
    assert [e.kind for e in sub] == [EventKind.MESSAGE, EventKind.MODEL_CALL, EventKind.COMMAND,
                                    EventKind.MODEL_CALL, EventKind.MESSAGE]
    assert all(e.extra["file"].endswith("newer/subagents/agent-b2c3.jsonl") for e in sub)
    (agent,) = [e for e in t.events if e.extra.get("tool") == "Agent"]
    assert agent.index == sub[-1].index + 1 and agent.duration == 2.5
    assert t.meta["subagents"] == ["b2c3"] and {e.step for e in t.events} == {1}
    assert len(t.boundaries("tool_call")) == 2  # the subagent's wc and the Agent call


def test_session_rewound_branch_is_kept_and_listed() -> None:
    t = read_trajectory(HANDMADE / "rewound.session.jsonl")
    dead = [t.events[i] for i in t.meta["dead_branch"]["events"]]
    assert [e.extra.get("tool") for e in dead] == [None, "Edit", None, "Bash"]
    assert dead[1].paths_written == ["/work/app/hello.txt"]  # it did write: kept for the graph
    assert dead[3].extra["abandoned"] and dead[3].command == "cat hello.txt"
    live = [e for e in t.events if e.index not in t.meta["dead_branch"]["events"]]
    assert [e.command for e in live if e.command] == ["printf 'hi\\n' > hello.txt",
                                                      "printf 'bye\\n' >> hello.txt"]
    assert t.meta["dead_branch"]["n_records"] == 3


def _stream_line(**kw: object) -> str:
    return json.dumps({"session_id": "s", **kw})


def test_stream_json_subagent_two_turns_and_errors() -> None:
    p = ClaudeStreamParser(source="live")
    lines = [
        _stream_line(type="system", subtype="init", cwd="/w", model="m", tools=["Task"],
                     claude_code_version="2.1.0"),
        _stream_line(type="assistant", parent_tool_use_id=None, message={
            "id": "m1", "model": "m", "content": [{"type": "tool_use", "id": "tu1",
                                                   "name": "Task", "input": {"prompt": "p"}}],
            "stop_reason": None, "usage": {"input_tokens": 5, "output_tokens": 1,
                                           "cache_read_input_tokens": 100}}),
        _stream_line(type="assistant", parent_tool_use_id="tu1", message={
            "id": "m2", "model": "m", "content": [{"type": "tool_use", "id": "tu2",
                                                   "name": "Bash",
                                                   "input": {"command": "false"}}],
            "stop_reason": None, "usage": {"input_tokens": 7, "output_tokens": 1}}),
        _stream_line(type="user", parent_tool_use_id="tu1", message={"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "tu2", "content": "Exit code 1",
             "is_error": True}]}),
        _stream_line(type="user", parent_tool_use_id=None, message={"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "tu1", "content": "done"}]}),
        _stream_line(type="assistant", message={
            "id": "m3", "model": "m", "content": [{"type": "tool_use", "id": "tu3",
                                                   "name": "Glob",
                                                   "input": {"pattern": "**/*.py",
                                                             "path": "/w/src"}}],
            "stop_reason": None, "usage": {"input_tokens": 2, "output_tokens": 1}}),
        _stream_line(type="user", message={"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "tu3", "content": "/w/src/a.py"}]},
            tool_use_result={"filenames": ["/w/src/a.py"], "durationMs": 3, "numFiles": 1}),
        _stream_line(type="result", subtype="success", is_error=False, duration_ms=900,
                     num_turns=2, total_cost_usd=0.01, usage={"input_tokens": 12,
                                                             "output_tokens": 30}),
        _stream_line(type="user", message={"role": "user", "content": "and again"}),
        _stream_line(type="system", subtype="compact_boundary",
                     compact_metadata={"trigger": "manual"}),
        _stream_line(type="result", subtype="error_max_turns", is_error=True,
                     duration_ms=10, num_turns=1, usage={"input_tokens": 1, "output_tokens": 0}),
    ]
    handed = [e for ln in lines for e in p.feed(ln)]
    t = p.finish()
    assert handed == t.events
    (bash,) = [e for e in t.events if e.command == "false"]
    assert bash.extra["subagent"] == "tu1" and bash.exit_code == 1 and not bash.is_error
    task = [e for e in t.events if e.extra.get("tool") == "Task"][0]
    assert "subagent" not in task.extra and task.index > bash.index
    ends = [e for e in t.events if e.turn_end]
    assert [e.extra["line_type"] for e in ends] == ["result", "result"]
    assert [e.step for e in ends] == [1, 2] and ends[1].is_error
    assert t.meta["exit_status"] == "failed" and t.meta["n_results"] == 2
    assert t.meta["cost_usd"] == pytest.approx(0.01) and t.meta["n_prompts"] == 1
    first = [e for e in t.events if e.kind == EventKind.MODEL_CALL][0]
    assert (first.input_tokens, first.cached_tokens, first.output_tokens) == (105, 100, None)
    (glob,) = [e for e in t.events if e.extra.get("tool") == "Glob"]
    assert glob.kind == EventKind.OTHER and glob.paths_read == ["/w/src"]
    assert glob.duration == 0.003 and "filenames" not in glob.extra["result"]


def _session_line(n: int, message: dict, **over: object) -> dict:
    return {"type": "assistant", "uuid": f"u{n}", "parentUuid": f"u{n - 1}" if n > 1 else None,
            "sessionId": "s", "timestamp": f"2025-01-01T00:00:0{n}Z", "message": message,
            **over}


def _bash(n: int, tid: str, command: object, usage: dict | None = None) -> dict:
    msg = {"id": f"m{n}", "model": "m", "stop_reason": "tool_use",
           "content": [{"type": "tool_use", "id": tid, "name": "Bash",
                        "input": {"command": command}}]}
    if usage is not None:
        msg["usage"] = usage
    return _session_line(n, msg)


def _write(tmp_path: Path, lines: list[dict]) -> Path:
    p = tmp_path / "s.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return p


def test_values_off_the_fast_path_get_the_checked_verdict(tmp_path: Path) -> None:
    """The reader reads fields with a plain type check first; a value that fails it (a count
    as text, a count beyond 64 bits, a wrong type) gets what the checked read gives: the same
    value or the same error, naming the field."""
    usage = {"input_tokens": "12", "cache_creation_input_tokens": 1.0,
             "cache_read_input_tokens": None, "output_tokens": "7"}
    t = read_trajectory(_write(tmp_path, [_bash(1, "t1", "ls", usage)]))
    call = next(e for e in t.events if e.kind == EventKind.MODEL_CALL)
    assert (call.input_tokens, call.cached_tokens, call.output_tokens) == (13, None, 7)
    bad = [
        (_bash(1, "t1", "ls", {"input_tokens": 2**70}),
         "line 1: field message.usage.input_tokens: integer 1.18e+21 is beyond the 64-bit"),
        (_bash(1, "t1", "ls", {"input_tokens": 1, "output_tokens": -(2**64)}),
         "line 1: field message.usage.output_tokens: integer -1.84e+19 is beyond"),
        (_bash(1, 5, "ls"), "line 1: field message.content[0].id: expected string, got integer"),
        (_bash(1, "t1", ["ls"]),
         "line 1: field message.content[0].input.command: expected string, got array"),
        (_session_line(1, {"id": None, "content": []}),
         "line 1: field message.id: expected string, got null"),
        (_session_line(1, {"id": "m", "content": [{"type": "text"}]}, timestamp=5),
         "line 1: field timestamp: expected ISO-8601 timestamp string, got integer"),
    ]
    for line, words in bad:
        with pytest.raises(ValueError, match=re.escape(words)):
            read_trajectory(_write(tmp_path, [line]), format="claude-code-session")


def test_a_rerun_command_gets_its_own_argv(tmp_path: Path) -> None:
    """Split commands are remembered per parser; every event still holds its own list."""
    t = read_trajectory(_write(tmp_path, [_bash(1, "t1", "git status"),
                                          _bash(2, "t2", "git status")]))
    a, b = (e for e in t.events if e.extra.get("tool") == "Bash")
    assert a.argv == b.argv == ["git", "status"] and a.argv is not b.argv


def test_stream_json_output_total_is_never_a_partial_sum() -> None:
    # CLI 2.0.x: most assistant lines carry the first-block snapshot (output 1, no stop
    # reason), a few the final usage; summing the few is not the run's output
    def assistant(mid: str, final: bool, out: int) -> str:
        return _stream_line(type="assistant", message={
            "id": mid, "model": "m", "content": [{"type": "text", "text": "t"}],
            "stop_reason": "end_turn" if final else None,
            "usage": {"input_tokens": 3, "output_tokens": out}})

    lines = [assistant("m1", False, 1), assistant("m2", True, 40), assistant("m3", False, 1),
             _stream_line(type="result", subtype="success", is_error=False, duration_ms=9,
                          num_turns=1, usage={"input_tokens": 9, "output_tokens": 300})]
    p = ClaudeStreamParser(source="live")
    for ln in lines:
        p.feed(ln)
    t = p.finish()
    calls = [e for e in t.events if e.kind == EventKind.MODEL_CALL]
    assert [c.output_tokens for c in calls] == [None, 40, None]
    totals = t.meta["totals"]
    assert totals["output_tokens"] is None  # 40 would be a partial sum shown as the total
    assert totals["output_tokens_partial"] == {"sum": 40, "model_calls": 3,
                                               "with_output_tokens": 1}
    assert t.meta["usage"]["output_tokens"] == 300  # the result line: authoritative
    # every call final: the sum is the total, no partial record
    p = ClaudeStreamParser(source="live")
    for ln in [assistant("m1", True, 5), assistant("m2", True, 7)]:
        p.feed(ln)
    totals = p.finish().meta["totals"]
    assert totals["output_tokens"] == 12 and "output_tokens_partial" not in totals
