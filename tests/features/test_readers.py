"""Tests of the agent-log readers against the real fixtures in ``<repo>/../shared/fixtures``.

Every expected count below was checked BY HAND against the fixture files with jq/grep
one-liners that do not use the readers; the command used is in the comment next to it.
"""

from __future__ import annotations

import functools
import json
import shlex
import shutil
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from features.readers import (
    FORMATS,
    TrajectoryFormatError,
    UnknownEventWarning,
    detect_format,
    is_git_commit,
    is_test_command,
    parse_test_counts,
    read_trajectory,
)
from features.readers.common import parse_apply_patch
from features.schema import (
    BoundaryKind,
    EventKind,
    Trajectory,
    from_frame,
    read_parquet,
    to_frame,
    write_parquet,
)
from features.shell import split_command

FIXTURES = Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures"
TRAJ = FIXTURES / "trajectories"

CODEX_EXEC = "codex_exec_jsonl"
ROLLOUT_FILE = "codex_rollout/agentcmd_rollout-2025-09-24T19-22-20-01997e76.jsonl"
MINI_FILE = "mini_swe_agent/django__django-16255.traj.json"
SWE_V1 = "swe_agent/demo_function_calling_replace_marshmallow-1867.traj"
SWE_0X = "swe_agent/testdata_gpt4_swe-agent__test-repo-i1.traj"
OH_BASIC = "openhands/basic.json"
OH_WRONG = "openhands/wrong_initial_state.json"

ALL_FIXTURES = {
    f"{CODEX_EXEC}/agentcmd_stream-output-1.jsonl": "codex-exec",
    f"{CODEX_EXEC}/agentcmd_stream-output-2.jsonl": "codex-exec",
    f"{CODEX_EXEC}/agentcmd_stream-output-3.jsonl": "codex-exec",
    f"{CODEX_EXEC}/tielec_issue-119_00_planning_execute.jsonl": "codex-exec",
    f"{CODEX_EXEC}/tielec_issue-119_03_test_scenario_execute.jsonl": "codex-exec",
    ROLLOUT_FILE: "codex-rollout",
    MINI_FILE: "mini-swe-agent",
    SWE_V1: "swe-agent",
    SWE_0X: "swe-agent",
    OH_BASIC: "openhands",
    OH_WRONG: "openhands",
}


def fx(rel: str) -> Path:
    """Path of a fixture, skipping the test when the shared folder is absent."""
    if not TRAJ.is_dir():
        pytest.skip(f"shared fixtures folder absent (user clone): {TRAJ}")
    p = TRAJ / rel
    if not p.exists():
        pytest.skip(f"fixture missing: {p}")
    return p


@functools.cache
def _read_cached(rel: str) -> Trajectory:
    return read_trajectory(TRAJ / rel)


def read(rel: str) -> Trajectory:
    fx(rel)
    return _read_cached(rel)


def kinds(t: Trajectory, kind: EventKind) -> list:
    return [e for e in t.events if e.kind == kind]


def tok(t: Trajectory) -> tuple[int, int, int]:
    return (
        sum(e.input_tokens or 0 for e in t.events),
        sum(e.cached_tokens or 0 for e in t.events),
        sum(e.output_tokens or 0 for e in t.events),
    )


# ---------------------------------------------------------------------------------------
# codex exec --json
# ---------------------------------------------------------------------------------------

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
def test_codex_exec_fixture_counts(name: str) -> None:
    exp = CODEX_EXEC_EXPECTED[name]
    t = read(f"{CODEX_EXEC}/{name}")
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
    assert tok(t) == exp["tokens"]
    final = t.events[-1].extra["usage_total"]
    assert tok(t) == (final["input_tokens"], final["cached_input_tokens"],
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


def test_codex_exec_details() -> None:
    t = read(f"{CODEX_EXEC}/agentcmd_stream-output-3.jsonl")
    (fc,) = kinds(t, EventKind.FILE_CHANGE)
    assert fc.paths_written == ["/private/tmp/codex-research-test/hello.txt"]
    assert fc.boundary_kind == BoundaryKind.TOOL_RETURN
    t2 = read(f"{CODEX_EXEC}/agentcmd_stream-output-2.jsonl")
    (cmd,) = kinds(t2, EventKind.COMMAND)
    assert cmd.command == "bash -lc ls" and cmd.argv == ["bash", "-lc", "ls"]
    assert cmd.extra["lifecycle"] == ["started", "completed"]
    assert "test.js" in cmd.extra["output"]
    t3 = read(f"{CODEX_EXEC}/tielec_issue-119_00_planning_execute.jsonl")
    (err,) = [e for e in t3.events if e.is_error]
    # grep -n '"type":"error"' F -> line 7
    assert err.kind == EventKind.OTHER and err.text == "Re-connecting... 1/5"
    assert err.extra["line"] == 7
    assert err.index == 2  # after item_0 and item_1, kept in stream order
    t4 = read(f"{CODEX_EXEC}/tielec_issue-119_03_test_scenario_execute.jsonl")
    (todo,) = kinds(t4, EventKind.OTHER)
    # todo_list: started, updated x2, completed (grep -c '"id":"item_0"' F == 4)
    assert todo.extra["lifecycle"] == ["started", "updated", "updated", "completed"]
    # placed where it completed (grep -n "\"id\":\"item_0\"" F -> lines 3, 28, 34, 36 of 37;
    # after the agent_message): a prefix never
    # holds its final state early; the first line is kept
    assert todo.index == len(t4.events) - 2 == 16 and not todo.safe_boundary
    assert (todo.extra["line"], todo.extra["last_line"]) == (3, 36)


def _write(tmp: Path, name: str, lines: list) -> Path:
    p = tmp / name
    p.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return p


def test_codex_exec_running_total_deltas_multi_turn(tmp_path: Path) -> None:
    p = _write(tmp_path, "two_turns.jsonl", [
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
    assert tok(t) == (250, 40, 12)
    assert [e.step for e in t.events] == [1, 1, 2, 2]
    assert [e.turn_end for e in t.events] == [False, True, False, True]
    (commit,) = kinds(t, EventKind.COMMAND)
    assert commit.boundary_kind == BoundaryKind.COMMIT
    assert t.boundaries("turn") == [commit.index]


def test_codex_exec_usage_count_not_reported_is_missing_not_zero(tmp_path: Path) -> None:
    p = _write(tmp_path, "no_cached.jsonl", [
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


def test_codex_exec_early_item_type_spelling(tmp_path: Path) -> None:
    p = _write(tmp_path, "early.jsonl", [
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


def test_codex_exec_item_without_exit_code(tmp_path: Path) -> None:
    # the real stream cut after its first item.started (head -n 3 of the fixture):
    # exit_code is null there, the item never completes
    src = fx(f"{CODEX_EXEC}/tielec_issue-119_00_planning_execute.jsonl")
    p = tmp_path / "cut.jsonl"
    p.write_text("".join(src.read_text(encoding="utf-8").splitlines(True)[:3]),
                 encoding="utf-8")
    t = read_trajectory(p)
    (cmd,) = kinds(t, EventKind.COMMAND)
    assert cmd.exit_code is None and not cmd.safe_boundary
    assert cmd.extra["incomplete"] is True and cmd.extra["status"] == "in_progress"
    assert t.meta["exit_status"] == "incomplete"
    # stream-output-2's item.started has no exit_code key at all
    t2 = read(f"{CODEX_EXEC}/agentcmd_stream-output-2.jsonl")
    assert kinds(t2, EventKind.COMMAND)[0].exit_code == 0


def test_codex_exec_arrival_times(tmp_path: Path) -> None:
    src = fx(f"{CODEX_EXEC}/agentcmd_stream-output-2.jsonl")
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
    wrapped = _write(tmp_path, "stamped.jsonl",
                     [{"arrival": a, "line": x} for a, x in zip(times, lines, strict=True)])
    tw = read_trajectory(wrapped, task_id=t.task_id)
    assert tw.events == t.events
    assert detect_format(wrapped) == "codex-exec"
    with pytest.raises(ValueError, match="arrival_times has 3 entries"):
        read_trajectory(src, arrival_times=times[:3])
    with pytest.raises(ValueError, match="do not also pass"):
        read_trajectory(wrapped, arrival_times=times)
    with pytest.raises(ValueError, match="codex-exec format only"):
        read_trajectory(fx(OH_BASIC), arrival_times=[0.0])


# ---------------------------------------------------------------------------------------
# Codex rollout
# ---------------------------------------------------------------------------------------


def test_codex_rollout_counts() -> None:
    t = read(ROLLOUT_FILE)
    assert t.source_format == "codex-rollout"
    # jq -c 'select(.payload.type=="function_call" and .payload.name=="shell")' F | wc -l -> 120
    shell = [e for e in t.events if e.extra.get("name") == "shell"]
    assert len(shell) == 120
    # ... | .arguments|fromjson|.command|join(" ") | grep -c '^bash -lc apply_patch' -> 29
    fcs = kinds(t, EventKind.FILE_CHANGE)
    assert len(fcs) == 29
    # 91 other shell calls: one is `pnpm --filter @repo/spectora-labs test` (line 658)
    assert len(kinds(t, EventKind.COMMAND)) == 90
    (test,) = kinds(t, EventKind.TEST)
    assert test.argv == ["bash", "-lc", "pnpm --filter @repo/spectora-labs test"]
    assert test.extra["line"] == 658 and test.exit_code == 0 and test.duration == 2.8
    assert (test.tests_passed, test.tests_failed) == (245, 0)  # "Tests  245 passed (245)"
    # update_plan calls: 3 (jq ... .payload.name=="update_plan")
    assert sum(1 for e in t.events if e.extra.get("name") == "update_plan") == 3
    # outputs: 123 function_call_output lines; every call got one -> 123 tool returns
    assert len(t.boundaries("tool_call")) == 123
    bk = [e.boundary_kind for e in t.events if e.safe_boundary]
    assert bk.count(BoundaryKind.TEST) == 1
    # the only `git commit` (line 786) exited 1: not a commit boundary
    assert bk.count(BoundaryKind.COMMIT) == 0
    # errors: outputs that are not the JSON envelope:
    #   jq -r '...function_call_output|.payload.output' F | grep -c -E
    #   '^(failed in sandbox|patch rejected)' -> 4 (2 sandbox denials, 2 rejected patches)
    errs = [e for e in t.events if e.is_error]
    assert len(errs) == 4
    assert sum(e.kind == EventKind.FILE_CHANGE for e in errs) == 2
    assert all(e.exit_code is None for e in errs)
    # exit codes from metadata: 108 x 0, 3 x 1, 5 x 2 (jq ... .metadata.exit_code|sort|uniq -c)
    codes = [e.exit_code for e in t.events if e.exit_code is not None]
    assert (codes.count(0), codes.count(1), codes.count(2), len(codes)) == (108, 3, 5, 116)
    # sum of duration_seconds over the 116 envelopes: 25.6 (jq -s ... add)
    assert sum(e.duration or 0 for e in t.events) == pytest.approx(25.6)
    # turns: 13 user_message events (jq ... select(.payload.type=="user_message") | wc -l)
    assert len({e.step for e in t.events}) == 13 == t.meta["n_user_turns"]
    # jq -c 'select(.payload.type=="turn_aborted")' F | wc -l -> 4
    assert t.meta["n_turns_aborted"] == 4
    assert sum(e.turn_end for e in t.events) == 13
    # per-call tokens: 132 token_count events; sum of last_token_usage == final total
    #   jq -s '[...token_count|.payload.info.last_token_usage]|map(.input_tokens)|add'
    assert len(kinds(t, EventKind.MODEL_CALL)) == 132
    assert tok(t) == (7494343, 7290112, 99678)
    total = t.meta["total_token_usage"]
    assert tok(t) == (total["input_tokens"], total["cached_input_tokens"],
                      total["output_tokens"])
    # ISO timestamp on every line: every event has a start or an end
    assert all(e.start is not None or e.end is not None for e in t.events)
    assert t.task_id == "01997e76-d124-7592-9cac-2ec05abbca08"
    assert t.repo == "spectorasoftware/spectora-labs-monorepo-v2"


def test_codex_rollout_apply_patch_paths() -> None:
    t = read(ROLLOUT_FILE)
    fcs = kinds(t, EventKind.FILE_CHANGE)
    # 27 outputs start with {"output":"Success. Updated the following files (applied),
    # 2 say "patch rejected by user" (grep on the 29 apply_patch call ids)
    applied = [e for e in fcs if e.paths_written]
    assert len(applied) == 27
    # one `*** ... File:` header per patch (grep -c -E '^\*\*\* (Add|Update|Delete) File' -> 29)
    assert all(len(e.extra["patch"]["paths"]) == 1 for e in fcs)
    # first patch (line 152) updates getTeamsWithStats.ts, as written (relative)
    first = fcs[0]
    assert first.extra["line"] == 152
    assert first.paths_written == [
        "apps/spectora-labs/src/domain/teams/services/getTeamsWithStats.ts"]
    assert first.bytes_written and first.bytes_written > 0
    assert first.argv[:2] == ["bash", "-lc"] and first.argv[2].startswith("apply_patch <<")
    # workdir of the call, or the session cwd when the call names none
    assert first.extra["cwd"] == "/Users/jnarowski/Dev/spectora/src/spectora-labs-monorepo-v2"
    rejected = [e for e in fcs if e.is_error]
    assert [e.extra["line"] for e in rejected] == [171, 264]
    assert all(e.paths_written == [] and e.bytes_written is None for e in rejected)
    assert rejected[0].extra["patch"]["ops"][0]["op"] == "add"


def test_apply_patch_headers() -> None:
    patch = (
        "*** Begin Patch\n*** Add File: /abs/new.py\n+print('hé')\n+x = 1\n"
        "*** Update File: src/a.py\n*** Move to: src/b.py\n@@\n-old\n+new\n"
        "*** Delete File: gone.txt\n*** End Patch\n"
    )
    parsed = parse_apply_patch(patch)
    assert parsed is not None
    assert parsed["paths"] == ["/abs/new.py", "src/a.py", "src/b.py", "gone.txt"]
    assert [o["op"] for o in parsed["ops"]] == ["add", "update", "move", "delete"]
    assert parsed["written"] == ["/abs/new.py", "src/b.py"]
    assert parsed["deleted"] == ["src/a.py", "gone.txt"]
    assert parsed["added_bytes"] == len("print('hé')\n".encode()) + len("x = 1\n") + len("new\n")
    assert parse_apply_patch("echo hi") is None


# ---------------------------------------------------------------------------------------
# mini-SWE-agent
# ---------------------------------------------------------------------------------------


def test_mini_swe_agent_v1_counts() -> None:
    t = read(MINI_FILE)
    assert t.source_format == "mini-swe-agent"
    # jq '[.messages[]|select(.role=="assistant")]|length' F -> 17; each holds one ```bash
    # block (jq -r '...assistant...|.content' F | grep -c '```bash' -> 17)
    assert len(kinds(t, EventKind.MODEL_CALL)) == 17
    cmds = [e for e in t.events if e.kind in (EventKind.COMMAND, EventKind.TEST)]
    assert len(cmds) == 17
    # the one test run: `python3 tests/runtests.py sitemaps_tests` -> "Ran 60 tests ... OK"
    (test,) = kinds(t, EventKind.TEST)
    assert test.command == "python3 tests/runtests.py sitemaps_tests"
    assert (test.tests_passed, test.tests_failed) == (60, 0)
    # 16 observations carry <returncode>0</returncode>; the submission's (a bare diff) none
    assert [c.exit_code for c in cmds].count(0) == 16
    assert cmds[-1].exit_code is None and cmds[-1].command.startswith(
        "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")
    # heredoc writes stay commands (the provenance graph parses them), as published
    assert sum(c.command.startswith("cat <<'EOF' >") for c in cmds) == 3
    assert kinds(t, EventKind.FILE_CHANGE) == []
    assert cmds[0].extra["output"].startswith("django/contrib/sitemaps:\n__init__.py")
    assert sum(e.is_error for e in t.events) == 0
    # system + task messages, then model_call/command pairs: 36 messages in F -> 2 + 17*2
    assert len(t.events) == 2 + 17 * 2
    # tokens: jq '[...assistant|.extra.response.usage]|map(.prompt_tokens)|add' etc.
    assert tok(t) == (61068, 33662, 2317)
    # one user turn: one step; every command is a tool return
    assert {e.step for e in t.events} == {1}
    assert len(t.boundaries("tool_call")) == 17
    assert t.boundaries("turn") == [t.events[-1].index]
    assert t.events[-1].turn_end
    # created time (unix s) on each model call, nothing else timed
    assert all(e.start is not None for e in kinds(t, EventKind.MODEL_CALL))
    assert kinds(t, EventKind.MODEL_CALL)[0].start == 1763509960.0
    assert all(e.start is None and e.end is None for e in cmds)
    assert t.meta["exit_status"] == "Submitted" and t.meta["submission_present"]
    assert t.meta["model_stats"]["api_calls"] == 17
    assert t.meta["verdict"]["resolved"] is True  # .report.json sibling
    assert t.task_id == "django__django-16255" and t.repo == "django/django"


def test_mini_swe_agent_v11(tmp_path: Path) -> None:
    doc = {
        "trajectory_format": "mini-swe-agent-1.1",
        "instance_id": "sympy__sympy-24443",
        "info": {"exit_status": "Submitted", "submission": "", "mini_version": "2.0.0",
                 "model_stats": {"instance_cost": 0.01, "api_calls": 2}},
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "fix it"},
            {"role": "assistant", "content": "run tests",
             "extra": {"actions": [{"command": "pytest -q", "tool_call_id": "c1"},
                                   {"command": "ls", "tool_call_id": "c2"}],
                       "response": {"usage": {"prompt_tokens": 50, "completion_tokens": 7,
                                              "prompt_tokens_details": {"cached_tokens": 20}}},
                       "cost": 0.01, "timestamp": 1700000010.5}},
            {"role": "tool", "tool_call_id": "c2", "content": "a\nb",
             "extra": {"raw_output": "a\nb", "returncode": 0, "timestamp": 1700000011.0}},
            {"role": "tool", "tool_call_id": "c1", "content": "1 failed, 3 passed in 0.2s",
             "extra": {"raw_output": "==== 1 failed, 3 passed in 0.2s ====", "returncode": 1,
                       "timestamp": 1700000012.0}},
            {"role": "exit", "content": "", "extra": {"exit_status": "Submitted"}},
        ],
    }
    p = tmp_path / "x.traj.json"
    p.write_text(json.dumps(doc), encoding="utf-8")
    assert detect_format(p) == "mini-swe-agent"
    t = read_trajectory(p)
    (mc,) = kinds(t, EventKind.MODEL_CALL)
    assert (mc.input_tokens, mc.cached_tokens, mc.output_tokens, mc.end) == (
        50, 20, 7, 1700000010.5)
    (test,) = kinds(t, EventKind.TEST)
    (ls,) = kinds(t, EventKind.COMMAND)
    assert (test.exit_code, test.tests_passed, test.tests_failed, test.end) == (
        1, 3, 1, 1700000012.0)
    assert (ls.exit_code, ls.end) == (0, 1700000011.0)  # matched by tool_call_id
    # each command sits where its observation arrived: ls answered first
    assert [e.command for e in t.events if e.command] == ["ls", "pytest -q"]
    assert kinds(t, EventKind.OTHER)[0].extra["role"] == "exit"
    assert t.repo == "sympy/sympy" and not t.meta["submission_present"]
    assert "verdict" not in t.meta


# ---------------------------------------------------------------------------------------
# SWE-agent
# ---------------------------------------------------------------------------------------


def test_swe_agent_v1_counts() -> None:
    t = read(SWE_V1)
    # jq '.trajectory|length' F -> 11; action heads: create 1, insert 1, edit 2, python 2,
    # ls 1, find_file 1, open 1, rm 1, submit 1
    steps = [e for e in t.events if "trajectory_index" in e.extra]
    assert len(steps) == 11
    assert len(kinds(t, EventKind.FILE_CHANGE)) == 4  # create, insert, edit, edit
    assert len(kinds(t, EventKind.COMMAND)) == 7
    # history before the first assistant: system + issue (jq '.history|map(.role)|index(
    # "assistant")' -> 2)
    assert len(kinds(t, EventKind.MESSAGE)) == 2
    # the first edit (trajectory[6]) was refused: "Your proposed edit has introduced new
    # syntax error(s)"
    errs = [e for e in t.events if e.is_error]
    assert [e.extra["trajectory_index"] for e in errs] == [6]
    assert errs[0].paths_written == []
    written = [p for e in kinds(t, EventKind.FILE_CHANGE) for p in e.paths_written]
    assert written == ["/testbed/reproduce.py", "/testbed/reproduce.py",
                       "/testbed/src/marshmallow/fields.py"]
    # execution_time per step: sum 3.99912708899501 (jq '[.trajectory[].execution_time]|add')
    assert sum(e.duration for e in steps) == pytest.approx(3.99912708899501)
    assert len(t.boundaries("tool_call")) == 11
    assert {e.step for e in t.events} == {1} and t.events[-1].turn_end
    assert t.meta["format_version"] == "v1" and t.meta["api_calls"] == 11
    assert t.meta["submission_present"] and t.meta["exit_status"] == "submitted"
    assert t.task_id == "marshmallow-code__marshmallow-1867"
    assert t.repo == "marshmallow-code/marshmallow"
    assert tok(t) == (0, 0, 0)  # no per-step tokens in SWE-agent logs


def test_swe_agent_0x_counts() -> None:
    t = read(SWE_0X)
    steps = [e for e in t.events if "trajectory_index" in e.extra]
    # jq '.trajectory|length' F -> 5: find_file, open, edit, python, submit
    assert len(steps) == 5
    (edit,) = kinds(t, EventKind.FILE_CHANGE)
    assert edit.paths_written == ["/klieret__swe-agent-test-repo/tests/missing_colon.py"]
    assert edit.bytes_written == len("def division(a: float, b: float) -> float:\n")
    assert edit.extra["cwd"] == "/klieret__swe-agent-test-repo"  # parsed from the state
    assert edit.extra["output"].startswith("[File: /klieret__swe-agent-test-repo/tests/")
    assert len(kinds(t, EventKind.COMMAND)) == 4
    assert all(e.duration is None for e in t.events)  # 0.x: no execution_time
    # history before the first assistant: system, demo, issue
    msgs = kinds(t, EventKind.MESSAGE)
    assert len(msgs) == 3 and msgs[1].extra["is_demo"] is True
    assert sum(e.is_error for e in t.events) == 0
    assert len(t.boundaries("tool_call")) == 5 and len(t.boundaries("turn")) == 1
    # model_stats: tokens_sent 52861, tokens_received 326, api_calls 5 (jq .info.model_stats)
    assert (t.meta["tokens_sent"], t.meta["tokens_received"], t.meta["api_calls"]) == (
        52861, 326, 5)
    assert t.meta["format_version"] == "0.x"
    assert t.task_id == "testdata_gpt4_swe-agent__test-repo-i1" and t.repo == "unknown"


# ---------------------------------------------------------------------------------------
# OpenHands
# ---------------------------------------------------------------------------------------


def test_openhands_basic() -> None:
    t = read(OH_BASIC)
    # jq -c '[.[]|(.action // ("obs:"+.observation))]' F -> message, edit, obs:edit, finish
    (edit,) = kinds(t, EventKind.FILE_CHANGE)
    assert edit.paths_written == ["/workspace/game_2048.py"]
    assert edit.extra["observation"]["cause"] == 3 and edit.extra["id"] == 3
    assert edit.bytes_written == 3409  # len(extras.new_content.encode()), created file
    assert edit.safe_boundary and edit.end > edit.start
    assert edit.elapsed == pytest.approx(0.036897, abs=1e-6)  # 22:45:13.801384 - .764487
    assert len(kinds(t, EventKind.MESSAGE)) == 2  # user message, finish
    # two distinct model responses: jq '...model_response|{id,usage}|unique_by(.id)'
    assert len(kinds(t, EventKind.MODEL_CALL)) == 2
    assert tok(t) == (8132, 3482, 1312)
    assert len(t.boundaries("tool_call")) == 1 and {e.step for e in t.events} == {1}
    assert sum(e.is_error for e in t.events) == 0


def test_openhands_wrong_initial_state() -> None:
    t = read(OH_WRONG)
    # message, read, obs:read, run, obs:run, read, obs:read, finish
    reads = [e for e in t.events if e.paths_read]
    assert [e.paths_read for e in reads] == [["/workspace"], ["/workspace"]]
    (run,) = kinds(t, EventKind.COMMAND)
    assert run.command == "mv /workspace/game_2048.py /workspace/2048.py"
    assert run.argv == ["mv", "/workspace/game_2048.py", "/workspace/2048.py"]
    assert run.exit_code == 0 and run.extra["cwd"] == "/workspace"
    assert run.extra["output"] == "" and run.extra["observation"]["cause"] == 5
    assert len(t.boundaries("tool_call")) == 3  # three observations with a cause
    assert len(kinds(t, EventKind.MODEL_CALL)) == 4
    assert tok(t) == (14828, 10879, 358)
    assert all(e.start is not None for e in t.events if e.kind != EventKind.MODEL_CALL)
    assert t.events[-1].kind == EventKind.MESSAGE and t.events[-1].turn_end


def test_openhands_multi_turn_and_unknown(tmp_path: Path) -> None:
    evs = [
        {"id": 0, "timestamp": "2025-01-01T00:00:00", "source": "user", "action": "message",
         "args": {"content": "one"}},
        {"id": 1, "timestamp": "2025-01-01T00:00:01", "source": "agent", "action": "run",
         "args": {"command": "python -m pytest -q"}},
        {"id": 2, "timestamp": "2025-01-01T00:00:03", "source": "agent", "observation": "run",
         "cause": 1, "content": "2 passed in 0.1s",
         "extras": {"metadata": {"exit_code": 0}}},
        {"id": 3, "timestamp": "2025-01-01T00:00:04", "source": "user", "action": "message",
         "args": {"content": "two"}},
        {"id": 4, "timestamp": "2025-01-01T00:00:05", "source": "agent",
         "action": "teleport", "args": {}},
        {"id": 5, "timestamp": "2025-01-01T00:00:06", "source": "agent",
         "observation": "error", "content": "boom"},
    ]
    p = tmp_path / "oh.json"
    p.write_text(json.dumps(evs), encoding="utf-8")
    with pytest.warns(UnknownEventWarning, match="teleport"):
        t = read_trajectory(p)
    assert [e.step for e in t.events] == [1, 1, 2, 2, 2]
    test = t.events[1]
    assert test.kind == EventKind.TEST and test.boundary_kind == BoundaryKind.TEST
    assert (test.tests_passed, test.tests_failed, test.elapsed) == (2, 0, 2.0)
    assert t.events[3].kind == EventKind.OTHER and t.events[3].extra["action"] == "teleport"
    assert t.events[4].is_error and t.events[4].text == "boom"
    assert [e.turn_end for e in t.events] == [False, True, False, False, True]


# ---------------------------------------------------------------------------------------
# Unknown types, detection, round trips
# ---------------------------------------------------------------------------------------


def test_unknown_types_kept_as_other(tmp_path: Path) -> None:
    p = _write(tmp_path, "unk.jsonl", [
        {"type": "thread.started", "thread_id": "t"},
        {"type": "turn.started"},
        {"type": "item.completed", "item": {"id": "item_0", "type": "hologram", "x": 1}},
        {"type": "session.teleported", "where": "mars"},
        {"type": "turn.completed", "usage": {"input_tokens": 1, "cached_input_tokens": 0,
                                             "output_tokens": 1}},
    ])
    with pytest.warns(UnknownEventWarning) as rec:
        t = read_trajectory(p)
    assert len(rec) == 2 and "line 3" in str(rec[0].message) and "line 4" in str(
        rec[1].message)
    other = kinds(t, EventKind.OTHER)
    assert [e.extra.get("item_type") or e.extra.get("event_type") for e in other] == [
        "hologram", "session.teleported"]
    assert other[0].extra["x"] == 1 and other[1].extra["where"] == "mars"

    src = fx(ROLLOUT_FILE)
    lines = src.read_text(encoding="utf-8").splitlines(True)[:12]
    lines.insert(6, json.dumps({"timestamp": "2025-09-25T01:22:24.800Z", "type": "event_msg",
                                "payload": {"type": "quantum_event", "spin": "up"}}) + "\n")
    q = tmp_path / "rollout.jsonl"
    q.write_text("".join(lines), encoding="utf-8")
    with pytest.warns(UnknownEventWarning, match="line 7"):
        t2 = read_trajectory(q)
    (qe,) = [e for e in t2.events if e.extra.get("payload_type") == "quantum_event"]
    assert qe.kind == EventKind.OTHER and qe.extra["spin"] == "up"


@pytest.mark.parametrize("rel", sorted(ALL_FIXTURES))
def test_detect_format_by_content(rel: str, tmp_path: Path) -> None:
    p = fx(rel)
    assert detect_format(p) == ALL_FIXTURES[rel]
    # a misleading name does not fool detection
    q = tmp_path / "renamed.txt"
    shutil.copyfile(p, q)
    assert detect_format(q) == ALL_FIXTURES[rel]
    assert ALL_FIXTURES[rel] in FORMATS


@pytest.mark.parametrize("rel", sorted(ALL_FIXTURES))
def test_frame_and_parquet_round_trip(rel: str, tmp_path: Path) -> None:
    t = read(rel)
    assert t.events, rel
    (back,) = from_frame(to_frame(t))
    assert back == t
    out = tmp_path / "t.parquet"
    write_parquet([t], out)
    (back2,) = read_parquet(out)
    assert back2 == t


def test_overrides_and_format_argument() -> None:
    p = fx(OH_BASIC)
    t = read_trajectory(p, "openhands", task_id="T1", repo="acme/widgets")
    assert (t.task_id, t.repo) == ("T1", "acme/widgets")
    with pytest.raises(ValueError, match="unknown format 'nope'"):
        read_trajectory(p, "nope")
    # forcing the wrong reader is a format error naming the file
    with pytest.raises(TrajectoryFormatError, match="basic.json"):
        read_trajectory(p, "mini-swe-agent")


# ---------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------


def _bad(tmp_path: Path, name: str, data: bytes | str) -> Path:
    p = tmp_path / name
    if isinstance(data, str):
        data = data.encode("utf-8")
    p.write_bytes(data)
    return p


def test_bad_empty_and_binary(tmp_path: Path) -> None:
    for name, data, pat in [
        ("empty.jsonl", b"", "empty file"),
        ("blank.json", b"\n  \n", "empty file"),
        ("garbage.bin", bytes(range(256)) * 4, "binary data"),
        ("latin1.jsonl", '{"type": "turn.started", "x": "caf\xe9"}\n'.encode("latin-1"),
         "line 1: not UTF-8"),
    ]:
        p = _bad(tmp_path, name, data)
        with pytest.raises(TrajectoryFormatError, match=pat) as ei:
            read_trajectory(p)
        assert str(p) in str(ei.value)


def test_bad_unknown_format(tmp_path: Path) -> None:
    p = _bad(tmp_path, "what.json", json.dumps({"hello": "world"}))
    with pytest.raises(TrajectoryFormatError, match=r"what\.json: unknown trajectory format"):
        read_trajectory(p)
    q = _bad(tmp_path, "what.jsonl", '{"a": 1}\n{"b": 2}\n')
    with pytest.raises(TrajectoryFormatError, match=r"what\.jsonl: line 1: unknown"):
        read_trajectory(q)
    r = _bad(tmp_path, "list.json", "[1, 2, 3]")
    with pytest.raises(TrajectoryFormatError, match="unknown trajectory format"):
        read_trajectory(r)


def test_bad_jsonl_lines(tmp_path: Path) -> None:
    src = fx(f"{CODEX_EXEC}/agentcmd_stream-output-2.jsonl")
    lines = src.read_text(encoding="utf-8").splitlines(True)
    # truncated line in the middle
    mid = lines[:3] + [lines[3][:40] + "\n"] + lines[4:]
    p = _bad(tmp_path, "mid.jsonl", "".join(mid))
    with pytest.raises(TrajectoryFormatError, match=r"mid\.jsonl: line 4: not valid JSON"):
        read_trajectory(p)
    # non-JSON text line
    p2 = _bad(tmp_path, "text.jsonl", "".join(lines[:2] + ["Reading prompt from stdin\n"]
                                              + lines[2:]))
    with pytest.raises(TrajectoryFormatError, match=r"text\.jsonl: line 3"):
        read_trajectory(p2)
    # a JSON array where an object belongs
    p3 = _bad(tmp_path, "arr.jsonl", "".join(lines[:2] + ["[1, 2]\n"]))
    with pytest.raises(TrajectoryFormatError, match=r"arr\.jsonl: line 3: expected a JSON object"):
        read_trajectory(p3)


def test_torn_last_line_is_an_error_unless_allowed(tmp_path: Path) -> None:
    src = fx(f"{CODEX_EXEC}/tielec_issue-119_00_planning_execute.jsonl")
    lines = src.read_text(encoding="utf-8").splitlines(True)
    torn = "".join(lines[:-1]) + lines[-1][:30]  # cut mid-write, no newline
    p = _bad(tmp_path, "torn.jsonl", torn)
    n = len(lines)
    with pytest.raises(TrajectoryFormatError, match=rf"line {n}: .*stream cut mid-write"):
        read_trajectory(p)
    with pytest.warns(UserWarning, match="torn last line"):
        t = read_trajectory(p, allow_truncated_tail=True)
    assert t.meta["truncated_tail"]["line"] == n
    assert kinds(t, EventKind.MODEL_CALL) == []  # the turn.completed line was the torn one
    assert len(kinds(t, EventKind.COMMAND)) == 9


def test_bad_field_types(tmp_path: Path) -> None:
    # codex-exec: usage must be an object
    p = _write(tmp_path, "usage.jsonl", [
        {"type": "thread.started", "thread_id": "t"}, {"type": "turn.started"},
        {"type": "turn.completed", "usage": "lots"}])
    with pytest.raises(TrajectoryFormatError, match=r"usage\.jsonl: line 3: field usage: "
                                                    r"expected object, got string"):
        read_trajectory(p)
    p = _write(tmp_path, "exit.jsonl", [
        {"type": "thread.started", "thread_id": "t"}, {"type": "turn.started"},
        {"type": "item.completed", "item": {"id": "i", "type": "command_execution",
                                            "command": "ls", "exit_code": "zero"}}])
    with pytest.raises(TrajectoryFormatError, match=r"line 3: field item.exit_code"):
        read_trajectory(p)
    # rollout: bad timestamp
    r = _write(tmp_path, "roll.jsonl", [
        {"timestamp": "2025-09-25T01:22:20.083Z", "type": "session_meta", "payload": {}},
        {"timestamp": "yesterday", "type": "event_msg", "payload": {"type": "user_message"}}])
    with pytest.raises(TrajectoryFormatError, match=r"roll\.jsonl: line 2: field timestamp"):
        read_trajectory(r)
    # mini-swe-agent: role must be a string (field path named)
    doc = json.loads(fx(MINI_FILE).read_text(encoding="utf-8"))
    doc["messages"][3]["role"] = 7
    m = _bad(tmp_path, "m.traj.json", json.dumps(doc))
    with pytest.raises(TrajectoryFormatError, match=r"field messages\[3\]\.role: expected "
                                                    r"string, got integer"):
        read_trajectory(m)
    # SWE-agent: action must be a string; 0.x state must hold JSON
    doc = json.loads(fx(SWE_0X).read_text(encoding="utf-8"))
    doc["trajectory"][2]["action"] = ["edit"]
    s = _bad(tmp_path, "s.traj", json.dumps(doc))
    with pytest.raises(TrajectoryFormatError, match=r"s\.traj: field trajectory\[2\]\.action"):
        read_trajectory(s)
    doc = json.loads(fx(SWE_0X).read_text(encoding="utf-8"))
    doc["trajectory"][1]["state"] = "{not json"
    s2 = _bad(tmp_path, "s2.traj", json.dumps(doc))
    with pytest.raises(TrajectoryFormatError, match=r"field trajectory\[1\]\.state"):
        read_trajectory(s2)
    # OpenHands: bad timestamp, named by list position
    evs = json.loads(fx(OH_WRONG).read_text(encoding="utf-8"))
    evs[2]["timestamp"] = 12
    o = _bad(tmp_path, "o.json", json.dumps(evs))
    with pytest.raises(TrajectoryFormatError, match=r"o\.json: field \[2\]\.timestamp"):
        read_trajectory(o)
    # broken pretty-printed JSON: the error names the real line
    text = fx(OH_BASIC).read_text(encoding="utf-8")
    broken = json.dumps(json.loads(text), indent=1).splitlines()
    broken[5] = broken[5] + " ,,"
    b = _bad(tmp_path, "b.json", "\n".join(broken))
    with pytest.raises(TrajectoryFormatError, match=r"b\.json: line 6 column"):
        read_trajectory(b)


# ---------------------------------------------------------------------------------------
# Shared helpers
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("cmd,expected", [
    ("pytest -x tests/", True),
    ("python -m pytest -q", True),
    ("python3 -m unittest discover", True),
    ("./python -m test test_os", True),
    ("tox -e py311", True),
    ("cd repo && npm test", True),
    (["bash", "-lc", "pnpm --filter @repo/web test"], True),
    ("bash -lc 'go test ./...'", True),
    ("cargo test --release", True),
    ("python3 tests/runtests.py sitemaps_tests", True),
    ("timeout 300 python manage.py test app", True),
    ("FOO=1 uv run pytest", True),
    ("npx vitest run", True),
    ("yarn run test:unit", True),
    ("make test", True),
    ("python -W ignore -m pytest", True),
    ("make -C build test", True),
    ("npm exec jest", True),
    ("yarn jest --ci", True),
    ("yarn add -D jest", False),
    ("python -c 'import pytest'", False),
    ("pnpm install --filter test", False),
    ("python3 reproduce_issue.py", False),
    ("pnpm --filter @repo/web lint", False),
    ("sed -n '1,20p' tests/test_x.py", False),
    ("echo pytest", False),
    ("cat <<'EOF' > t.sh\npytest\nEOF", False),
    ("npm install", False),
    ("git commit -m 'run pytest later'", False),
    (None, False),
])
def test_is_test_command(cmd: object, expected: bool) -> None:
    assert is_test_command(cmd) is expected


def test_is_git_commit() -> None:
    assert is_git_commit("git commit -m x")
    assert is_git_commit(["bash", "-lc", "git add -A && git -C repo commit -am 'x'"])
    assert not is_git_commit("git log --grep commit")
    assert not is_git_commit("echo git commit")


@pytest.mark.parametrize("out,expected", [
    ("===== 3 passed, 1 failed, 2 errors in 0.50s =====", (3, 3)),
    ("5 passed in 0.12s", (5, 0)),
    ("Ran 60 tests in 0.733s\n\nOK", (60, 0)),
    ("Ran 5 tests in 1.0s\n\nFAILED (failures=1, errors=1)", (3, 2)),
    ("Ran 4 tests in 1.0s\n\nOK (skipped=1)", (3, 0)),
    ("Tests:       1 failed, 5 passed, 6 total", (5, 1)),
    ("\x1b[2m      Tests \x1b[22m 1 failed | 244 passed (245)", (244, 1)),
    ("test result: ok. 7 passed; 0 failed; 0 ignored\ntest result: FAILED. 1 passed; 2 failed",
     (8, 2)),
    ("  12 passing (30ms)\n  1 failing", (12, 1)),
    ("nothing to see", (None, None)),
])
def test_parse_test_counts(out: str, expected: tuple) -> None:
    assert parse_test_counts(out) == expected


# ---------------------------------------------------------------------------------------
# Variants the fixtures do not show
# ---------------------------------------------------------------------------------------


def test_codex_exec_turn_failed(tmp_path: Path) -> None:
    p = _write(tmp_path, "failed.jsonl", [
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


def test_rollout_argv_apply_patch_and_custom_tool(tmp_path: Path) -> None:
    ts = "2025-09-25T01:22:20.083Z"
    patch = "*** Begin Patch\n*** Add File: /w/a.txt\n+hello\n*** End Patch\n"
    ok = json.dumps({"output": "Success.", "metadata": {"exit_code": 0,
                                                       "duration_seconds": 0.1}})
    p = _write(tmp_path, "r.jsonl", [
        {"timestamp": ts, "type": "session_meta", "payload": {"id": "s1"}},
        {"timestamp": ts, "type": "event_msg", "payload": {"type": "user_message",
                                                            "message": "go"}},
        {"timestamp": ts, "type": "response_item", "payload": {
            "type": "function_call", "name": "shell", "call_id": "c1",
            "arguments": json.dumps({"command": ["apply_patch", patch]})}},
        {"timestamp": "2025-09-25T01:22:21.083Z", "type": "response_item", "payload": {
            "type": "function_call_output", "call_id": "c1", "output": ok}},
        {"timestamp": ts, "type": "response_item", "payload": {
            "type": "custom_tool_call", "name": "apply_patch", "call_id": "c2",
            "input": patch.replace("Add File: /w/a.txt", "Update File: b.txt")}},
        {"timestamp": ts, "type": "response_item", "payload": {
            "type": "custom_tool_call_output", "call_id": "c2", "output": ok}},
        {"timestamp": ts, "type": "event_msg", "payload": {"type": "user_message",
                                                            "message": "again"}},
        {"timestamp": ts, "type": "event_msg", "payload": {"type": "error",
                                                            "message": "boom"}},
    ])
    t = read_trajectory(p)
    fcs = kinds(t, EventKind.FILE_CHANGE)
    assert [e.paths_written for e in fcs] == [["/w/a.txt"], ["b.txt"]]
    assert fcs[0].bytes_written == len("hello\n")
    assert fcs[0].end - fcs[0].start == pytest.approx(1.0) and fcs[0].duration == 0.1
    assert [e.step for e in t.events] == [1, 1, 1, 2, 2]
    assert t.events[-1].is_error and t.task_id == "s1"


def test_mini_swe_agent_v1_format_error_feedback(tmp_path: Path) -> None:
    doc = {
        "trajectory_format": "mini-swe-agent-1", "instance_id": "x",
        "info": {"exit_status": "LimitsExceeded", "submission": "", "mini_version": "1.0"},
        "messages": [
            {"role": "system", "content": "s"}, {"role": "user", "content": "task"},
            {"role": "assistant", "content": "no action here"},
            {"role": "user", "content": "Please always provide EXACTLY ONE action"},
            {"role": "assistant", "content": "THOUGHT: ok\n\n```bash\nls -la\n```"},
            {"role": "user", "content": "<returncode>2</returncode>\n<output>\nerr\n</output>"},
        ],
    }
    p = tmp_path / "x.traj.json"
    p.write_text(json.dumps(doc), encoding="utf-8")
    t = read_trajectory(p)
    fb = [e for e in t.events if e.is_error]
    assert len(fb) == 1 and fb[0].extra["format_error_feedback"]
    (cmd,) = kinds(t, EventKind.COMMAND)
    assert (cmd.command, cmd.argv, cmd.exit_code) == ("ls -la", ["ls", "-la"], 2)
    assert {e.step for e in t.events} == {1} and t.repo == "unknown"


def test_openhands_eval_record_with_history(tmp_path: Path) -> None:
    evs = json.loads(fx(OH_WRONG).read_text(encoding="utf-8"))
    rec = {"instance_id": "django__django-11099", "instance": {"repo": "django/django"},
           "history": evs, "test_result": {"git_patch": ""}}
    p = tmp_path / "rec.json"
    p.write_text(json.dumps(rec), encoding="utf-8")
    assert detect_format(p) == "openhands"
    t = read_trajectory(p)
    assert (t.task_id, t.repo) == ("django__django-11099", "django/django")
    assert t.events == read(OH_WRONG).events
    assert t.meta["test_result"] == {"git_patch": ""}


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=list("ab -'\"\t\n;|&$#é()\\"), max_size=16))
def test_split_command_matches_shlex(s: str) -> None:
    # the fast path of split_command must agree with shlex.split everywhere
    try:
        ref = shlex.split(s)
    except ValueError:
        ref = None
    assert split_command(s) == ref


def test_codex_exec_file_change_kinds(tmp_path: Path) -> None:
    p = _write(tmp_path, "fc.jsonl", [
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
