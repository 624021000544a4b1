"""The ``codex exec --json`` reader (``features.readers.codex_exec``) on the real fixtures and on
variants they do not show.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from features.readers import UnknownEventWarning, detect_format, read_trajectory
from features.schema import BoundaryKind, EventKind, Trajectory

CODEX_EXEC = "codex_exec_jsonl"
OH_BASIC = "openhands/basic.json"

# Hand counts, per file (F):
#   turns:      grep -c '"type":"turn.started"' F
#   commands:   jq -c 'select(.type=="item.completed" and .item.type=="command_execution")' F | wc -l
#   files:      jq -c 'select(.type=="item.completed" and .item.type=="file_change")' F | wc -l
#   errors:     jq -c 'select(.type=="error")' F | wc -l
#   items:      jq -r 'select(.type|startswith("item.")) | .item.id' F | sort -u | wc -l
#   tokens:     jq -c 'select(.type=="turn.completed")|.usage' F   (one turn each)
#   boundaries: completed commands + file changes (the tool items)
CODEX_EXEC_EXPECTED = {
    "agentcmd_stream-output-1.jsonl": dict(
        turns=1, commands=0, files=0, errors=0, items=2, tokens=(2946, 0, 7), boundaries=0),
    "agentcmd_stream-output-2.jsonl": dict(
        turns=1, commands=1, files=0, errors=0, items=3, tokens=(6040, 4992, 129),
        boundaries=1),
    "agentcmd_stream-output-3.jsonl": dict(
        turns=1, commands=0, files=1, errors=0, items=3, tokens=(6008, 4096, 51), boundaries=1),
    "tielec_issue-119_00_planning_execute.jsonl": dict(
        turns=1, commands=9, files=1, errors=1, items=11, tokens=(139608, 121600, 5794),
        boundaries=10),
    "tielec_issue-119_03_test_scenario_execute.jsonl": dict(
        turns=1, commands=14, files=1, errors=0, items=17, tokens=(355470, 319232, 8817),
        boundaries=15),
}



@pytest.mark.parametrize("name", sorted(CODEX_EXEC_EXPECTED))
def test_codex_exec_fixture_counts(name: str, read_fixture: Callable[[str], Trajectory], kinds: Callable[..., list], tokens: Callable[..., tuple]) -> None:
    exp = CODEX_EXEC_EXPECTED[name]
    t = read_fixture(f"{CODEX_EXEC}/{name}")
    assert t.source_format == "codex-exec"
    cmds = kinds(t, EventKind.COMMAND) + kinds(t, EventKind.TEST)
    assert len(cmds) == exp["commands"]
    assert len(kinds(t, EventKind.FILE_CHANGE)) == exp["files"]
    assert sum(e.is_error for e in t.events) == exp["errors"]
    assert t.meta["n_turns"] == exp["turns"]
    assert len({e.step for e in t.events}) == exp["turns"]
    # one event per item, one model_call per turn, one per error line
    assert len(t.events) == exp["items"] + exp["turns"] + exp["errors"]
    assert len(kinds(t, EventKind.MODEL_CALL)) == exp["turns"]
    # per-turn deltas sum to the final running total
    assert tokens(t) == exp["tokens"]
    final = t.events[-1].extra["usage_total"]
    assert tokens(t) == (final["input_tokens"], final["cached_input_tokens"],
                      final["output_tokens"])
    assert len(t.boundaries("tool_call")) == exp["boundaries"]
    assert len(t.boundaries("turn")) == (1 if exp["boundaries"] else 0)
    assert sum(e.turn_end for e in t.events) == exp["turns"]
    assert t.events[-1].turn_end
    # no timestamps in this format: nothing timed
    assert all(e.start is None and e.end is None and e.duration is None for e in t.events)
    assert all(e.exit_code == 0 for e in cmds)  # all completed commands exited 0 (jq)
    assert t.task_id == t.meta["thread_id"]
    assert t.repo == "unknown" and t.meta["exit_status"] == "completed"


def test_codex_exec_details(read_fixture: Callable[[str], Trajectory], kinds: Callable[..., list]) -> None:
    t = read_fixture(f"{CODEX_EXEC}/agentcmd_stream-output-3.jsonl")
    (fc,) = kinds(t, EventKind.FILE_CHANGE)
    assert fc.paths_written == ["/private/tmp/codex-research-test/hello.txt"]
    assert fc.boundary_kind == BoundaryKind.TOOL_RETURN
    t2 = read_fixture(f"{CODEX_EXEC}/agentcmd_stream-output-2.jsonl")
    (cmd,) = kinds(t2, EventKind.COMMAND)
    assert cmd.command == "bash -lc ls" and cmd.argv == ["bash", "-lc", "ls"]
    assert cmd.extra["lifecycle"] == ["started", "completed"]
    assert "test.js" in cmd.extra["output"]
    t3 = read_fixture(f"{CODEX_EXEC}/tielec_issue-119_00_planning_execute.jsonl")
    (err,) = [e for e in t3.events if e.is_error]
    # grep -n '"type":"error"' F -> line 7
    assert err.kind == EventKind.OTHER and err.text == "Re-connecting... 1/5"
    assert err.extra["line"] == 7
    assert err.index == 2  # after item_0 and item_1, kept in stream order
    t4 = read_fixture(f"{CODEX_EXEC}/tielec_issue-119_03_test_scenario_execute.jsonl")
    (todo,) = kinds(t4, EventKind.OTHER)
    # todo_list: started, updated x2, completed (grep -c '"id":"item_0"' F == 4)
    assert todo.extra["lifecycle"] == ["started", "updated", "updated", "completed"]
    # placed where it completed (grep -n "\"id\":\"item_0\"" F -> lines 3, 28, 34, 36 of 37;
    # after the agent_message): a prefix never
    # holds its final state early; the first line is kept
    assert todo.index == len(t4.events) - 2 == 16 and not todo.safe_boundary
    assert (todo.extra["line"], todo.extra["last_line"]) == (3, 36)


def test_codex_exec_running_total_deltas_multi_turn(write_jsonl: Callable[..., Path], kinds: Callable[..., list], tokens: Callable[..., tuple]) -> None:
    p = write_jsonl("two_turns.jsonl", [
        {"type": "thread.started", "thread_id": "t-1"},
        {"type": "turn.started"},
        {"type": "item.completed", "item": {"id": "item_0", "type": "agent_message",
                                            "text": "a"}},
        {"type": "turn.completed", "usage": {"input_tokens": 100, "cached_input_tokens": 10,
                                             "output_tokens": 5}},
        {"type": "turn.started"},
        {"type": "item.started", "item": {"id": "item_1", "type": "command_execution",
                                          "command": "git commit -m 'x'",
                                          "aggregated_output": "", "status": "in_progress"}},
        {"type": "item.completed", "item": {"id": "item_1", "type": "command_execution",
                                            "command": "git commit -m 'x'",
                                            "aggregated_output": "", "exit_code": 0,
                                            "status": "completed"}},
        {"type": "turn.completed", "usage": {"input_tokens": 250, "cached_input_tokens": 40,
                                             "output_tokens": 12}},
    ])
    t = read_trajectory(p)
    mcs = kinds(t, EventKind.MODEL_CALL)
    assert [(e.input_tokens, e.cached_tokens, e.output_tokens) for e in mcs] == [
        (100, 10, 5), (150, 30, 7)]
    assert tokens(t) == (250, 40, 12)
    assert [e.step for e in t.events] == [1, 1, 2, 2]
    assert [e.turn_end for e in t.events] == [False, True, False, True]
    (commit,) = kinds(t, EventKind.COMMAND)
    assert commit.boundary_kind == BoundaryKind.COMMIT
    assert t.boundaries("turn") == [commit.index]


def test_codex_exec_usage_count_not_reported_is_missing_not_zero(write_jsonl: Callable[..., Path], kinds: Callable[..., list]) -> None:
    p = write_jsonl("no_cached.jsonl", [
        {"type": "thread.started", "thread_id": "t-nc"},
        {"type": "turn.started"},
        {"type": "turn.completed", "usage": {"input_tokens": 100, "output_tokens": 5}},
        {"type": "turn.started"},
        {"type": "turn.completed", "usage": {"input_tokens": 130, "cached_input_tokens": 20,
                                             "output_tokens": 9}},
        {"type": "turn.started"},
        {"type": "turn.completed", "usage": {"input_tokens": 150, "cached_input_tokens": 25,
                                             "output_tokens": None}},
    ])
    mcs = kinds(read_trajectory(p), EventKind.MODEL_CALL)
    assert [(e.input_tokens, e.cached_tokens, e.output_tokens) for e in mcs] == [
        (100, None, 5), (30, 20, 4), (20, 5, None)]


def test_codex_exec_early_item_type_spelling(write_jsonl: Callable[..., Path], kinds: Callable[..., list]) -> None:
    p = write_jsonl("early.jsonl", [
        {"type": "thread.started", "thread_id": "t-early"},
        {"type": "turn.started"},
        {"type": "item.completed", "item": {"id": "item_0", "item_type": "reasoning",
                                            "text": "think"}},
        {"type": "item.completed", "item": {"id": "item_1", "item_type": "assistant_message",
                                            "text": "done"}},
        {"type": "turn.completed", "usage": {"input_tokens": 3, "cached_input_tokens": 0,
                                             "output_tokens": 1}},
    ])
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownEventWarning)
        t = read_trajectory(p)
    msgs = kinds(t, EventKind.MESSAGE)
    assert [m.text for m in msgs] == ["think", "done"]
    assert msgs[1].extra["item_type"] == "assistant_message"
    assert t.meta["item_type_spelling"] == ["item_type"]


def test_codex_exec_item_without_exit_code(tmp_path: Path, fixture_path: Callable[[str], Path], read_fixture: Callable[[str], Trajectory], kinds: Callable[..., list]) -> None:
    # the real stream cut after its first item.started (head -n 3 of the fixture):
    # exit_code is null there, the item never completes
    src = fixture_path(f"{CODEX_EXEC}/tielec_issue-119_00_planning_execute.jsonl")
    p = tmp_path / "cut.jsonl"
    p.write_text("".join(src.read_text(encoding="utf-8").splitlines(True)[:3]),
                 encoding="utf-8")
    t = read_trajectory(p)
    (cmd,) = kinds(t, EventKind.COMMAND)
    assert cmd.exit_code is None and not cmd.safe_boundary
    assert cmd.extra["incomplete"] is True and cmd.extra["status"] == "in_progress"
    assert t.meta["exit_status"] == "incomplete"
    # stream-output-2's item.started has no exit_code key at all
    t2 = read_fixture(f"{CODEX_EXEC}/agentcmd_stream-output-2.jsonl")
    assert kinds(t2, EventKind.COMMAND)[0].exit_code == 0


def test_codex_exec_arrival_times(fixture_path: Callable[[str], Path], write_jsonl: Callable[..., Path], kinds: Callable[..., list]) -> None:
    src = fixture_path(f"{CODEX_EXEC}/agentcmd_stream-output-2.jsonl")
    lines = [json.loads(x) for x in src.read_text(encoding="utf-8").splitlines() if x.strip()]
    assert len(lines) == 7  # wc -l F
    times = [1000.0 + 1.5 * i for i in range(7)]
    t = read_trajectory(src, arrival_times=times)
    (cmd,) = kinds(t, EventKind.COMMAND)
    # item.started is line 4, item.completed line 5
    assert (cmd.start, cmd.end, cmd.duration) == (times[3], times[4], None)
    assert cmd.elapsed == pytest.approx(1.5)
    (mc,) = kinds(t, EventKind.MODEL_CALL)
    assert mc.end == times[6] and mc.start is None
    assert t.meta["turns"][0]["start"] == times[1] and t.meta["turns"][0]["end"] == times[6]
    # the same stream in the harness's stamped form gives the same trajectory
    wrapped = write_jsonl("stamped.jsonl",
                     [{"arrival": a, "line": x} for a, x in zip(times, lines, strict=True)])
    tw = read_trajectory(wrapped, task_id=t.task_id)
    assert tw.events == t.events
    assert detect_format(wrapped) == "codex-exec"
    with pytest.raises(ValueError, match="arrival_times has 3 entries"):
        read_trajectory(src, arrival_times=times[:3])
    with pytest.raises(ValueError, match="do not also pass"):
        read_trajectory(wrapped, arrival_times=times)
    with pytest.raises(ValueError, match=r"applies to the codex-exec, .* formats only"):
        read_trajectory(fixture_path(OH_BASIC), arrival_times=[0.0])


def test_codex_exec_turn_failed(write_jsonl: Callable[..., Path]) -> None:
    p = write_jsonl("failed.jsonl", [
        {"type": "thread.started", "thread_id": "t"},
        {"type": "turn.started"},
        {"type": "item.completed", "item": {"id": "item_0", "type": "reasoning", "text": "r"}},
        {"type": "turn.failed", "error": {"message": "stream disconnected"}},
    ])
    t = read_trajectory(p)
    assert [e.kind for e in t.events] == [EventKind.MESSAGE, EventKind.OTHER]
    assert t.events[1].is_error and t.events[1].text == "stream disconnected"
    assert t.events[1].turn_end and t.meta["turns"][0]["failed"] is True
    assert t.meta["exit_status"] == "failed"


def test_codex_exec_file_change_kinds(write_jsonl: Callable[..., Path], kinds: Callable[..., list]) -> None:
    p = write_jsonl("fc.jsonl", [
        {"type": "thread.started", "thread_id": "t"},
        {"type": "turn.started"},
        {"type": "item.completed", "item": {"id": "item_0", "type": "file_change", "changes": [
            {"path": "/r/a.py", "kind": "update"}, {"path": "/r/old.py", "kind": "delete"},
            {"path": "/r/new.py", "kind": "add"}], "status": "completed"}},
        {"type": "item.completed", "item": {"id": "item_1", "type": "file_change", "changes": [
            {"path": "/r/b.py", "kind": "add"}], "status": "failed"}},
    ])
    t = read_trajectory(p)
    ok, failed = kinds(t, EventKind.FILE_CHANGE)
    assert ok.paths_written == ["/r/a.py", "/r/new.py"]
    assert ok.extra["paths_deleted"] == ["/r/old.py"]
    assert failed.is_error and failed.paths_written == [] and failed.safe_boundary
    assert t.meta["exit_status"] == "incomplete"  # no turn.completed


RECORDED = Path(__file__).resolve().parents[2] / "data" / "recordings" / "codex-0.171.0"
# Codex CLI 0.171.0's own stdout (tests/data/recordings/README.md): per run, lines (wc -l),
# completed commands / file changes / agent messages (jq on item.completed), the last
# turn.completed usage (input, output) and the per-turn tokens once the thread's history
# before the run is taken off (usage_base: the rollout's last token_count total before it:
# killed 910/56, resumed 4515/168; grep token_count F | tail -1)
EXEC_RECORDED = {
    "task": (13, 3, 1, 2, (4614, 319), None, (4614, 319)),
    "killed": (5, 1, 0, 0, None, None, None),
    "resumed": (6, 0, 1, 1, (4515, 168), (910, 56), (1740 + 1865, 64 + 48)),
    "forked": (8, 2, 0, 1, (9802, 319), (4515, 168), (2527 + 2760, 106 + 45)),
}


@pytest.mark.parametrize("run", sorted(EXEC_RECORDED))
def test_codex_exec_recordings(run: str, kinds: Callable[..., list], tokens: Callable[..., tuple]) -> None:
    n_lines, n_cmd, n_fc, n_msg, total, base, turn = EXEC_RECORDED[run]
    path = RECORDED / f"{run}.exec.jsonl"
    assert len(path.read_text().splitlines()) == n_lines
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownEventWarning)
        t = read_trajectory(path)
    done = [e for e in kinds(t, EventKind.COMMAND) if not e.extra.get("incomplete")]
    assert len(done) == n_cmd and all(e.exit_code == 0 for e in done)
    assert len(kinds(t, EventKind.FILE_CHANGE)) == n_fc
    assert len(kinds(t, EventKind.MESSAGE)) == n_msg
    assert len(t.boundaries("tool_call")) == n_cmd + n_fc
    if total is None:  # killed mid-`sleep`: no turn.completed, the sleep never completed
        assert t.meta["exit_status"] == "incomplete" and not kinds(t, EventKind.MODEL_CALL)
        cut = t.events[-1]
        assert cut.extra["incomplete"] and cut.command.endswith("'touch started && sleep 30'")
        assert not cut.safe_boundary and cut.exit_code is None and not cut.turn_end
        return
    (mc,) = kinds(t, EventKind.MODEL_CALL)
    assert (mc.input_tokens, mc.output_tokens) == total  # the thread's running total ...
    if base is not None:  # ... which after a resume or fork counts the history too
        tb = read_trajectory(path, usage_base={"input_tokens": base[0], "cached_input_tokens": 0,
                                               "output_tokens": base[1]})
        (mcb,) = kinds(tb, EventKind.MODEL_CALL)
        assert (mcb.input_tokens, mcb.output_tokens) == turn
        assert tb.meta["usage_total"]["input_tokens"] == total[0]
    assert t.meta["exit_status"] == "completed" and t.events[-1].turn_end
    assert t.task_id == t.meta["thread_id"]


def test_codex_exec_resume_keeps_the_thread_and_the_fork_is_new() -> None:
    ids = {r: read_trajectory(RECORDED / f"{r}.exec.jsonl").task_id for r in EXEC_RECORDED}
    assert ids["killed"] == ids["resumed"] != ids["forked"]
    with pytest.raises(ValueError, match="usage_base applies to the codex-exec format only"):
        read_trajectory(RECORDED / "task.rollout.jsonl", usage_base={})


def test_codex_exec_lines_between_turns_open_the_next_step(write_jsonl: Callable[..., Path]) -> None:
    p = write_jsonl("between.jsonl", [
        {"type": "thread.started", "thread_id": "t"},
        {"type": "turn.started"},
        {"type": "turn.completed", "usage": {"input_tokens": 1, "output_tokens": 1}},
        {"type": "error", "message": "Re-connecting... 1/5"},
        {"type": "turn.started"},
        {"type": "item.started", "item": {"id": "i", "type": "command_execution",
                                          "command": "sleep 9", "status": "in_progress"}},
        {"type": "item.completed", "item": {"id": "j", "type": "agent_message", "text": "x"}},
    ])
    t = read_trajectory(p)
    assert [(e.kind, e.step, e.turn_end) for e in t.events] == [
        (EventKind.MODEL_CALL, 1, True), (EventKind.OTHER, 2, False),
        (EventKind.MESSAGE, 2, False), (EventKind.COMMAND, 2, False)]
    # the item that never completed comes last, where the stream ended
    assert t.events[-1].extra["incomplete"] and t.events[-1].extra["line"] == 6
