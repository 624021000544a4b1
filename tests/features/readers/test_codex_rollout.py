"""The Codex session-rollout reader (``features.readers.codex_rollout``)."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from features.readers import TimeOrderWarning, UnknownEventWarning, read_trajectory
from features.schema import BoundaryKind, EventKind, Trajectory

ROLLOUT_FILE = "codex_rollout/agentcmd_rollout-2025-09-24T19-22-20-01997e76.jsonl"


def test_codex_rollout_counts(read_fixture: Callable[[str], Trajectory], kinds: Callable[..., list], tokens: Callable[..., tuple]) -> None:
    t = read_fixture(ROLLOUT_FILE)
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
    assert tokens(t) == (7494343, 7290112, 99678)
    total = t.meta["total_token_usage"]
    assert tokens(t) == (total["input_tokens"], total["cached_input_tokens"],
                      total["output_tokens"])
    # ISO timestamp on every line: every event has a start or an end
    assert all(e.start is not None or e.end is not None for e in t.events)
    assert t.task_id == "01997e76-d124-7592-9cac-2ec05abbca08"
    assert t.repo == "spectorasoftware/spectora-labs-monorepo-v2"


def test_codex_rollout_apply_patch_paths(read_fixture: Callable[[str], Trajectory], kinds: Callable[..., list]) -> None:
    t = read_fixture(ROLLOUT_FILE)
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


def test_rollout_argv_apply_patch_and_custom_tool(write_jsonl: Callable[..., Path], kinds: Callable[..., list]) -> None:
    ts = "2025-09-25T01:22:20.083Z"
    patch = "*** Begin Patch\n*** Add File: /w/a.txt\n+hello\n*** End Patch\n"
    ok = json.dumps({"output": "Success.", "metadata": {"exit_code": 0,
                                                       "duration_seconds": 0.1}})
    p = write_jsonl("r.jsonl", [
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


RECORDED = Path(__file__).resolve().parents[2] / "data" / "recordings" / "codex-0.171.0"
HANDMADE = Path(__file__).resolve().parents[2] / "data" / "readers" / "codex"

# Codex CLI 0.171.0's rollouts (tests/data/recordings/README.md), per run: lines (wc -l);
# shell calls (exec_command function_calls) and apply_patch custom calls; their outputs;
# model calls = token_usage_record lines (one per response; the README's count per run,
# the resumed file holding the killed run's 2 as well); tokens = the records' usage
# summed; the last token_count total (grep token_count F | tail -1)
ROLLOUT_RECORDED = {
    "task": (34, 3, 1, 4, 4, (4614, 319), (4614, 319), 1),
    # the sleep's call has no output; its response's count was never written as a
    # token_count, but its token_usage_record was (1028 / 54)
    "killed": (16, 2, 0, 1, 2, (910 + 1028, 56 + 54), (910, 56), 1),
    "resumed": (33, 2, 1, 2, 4, (910 + 1028 + 1740 + 1865, 56 + 54 + 64 + 48), (4515, 168), 2),
    # the fork's file does not copy the parent's history (forked_from_id)
    "forked": (22, 2, 0, 2, 2, (2527 + 2760, 106 + 45), (9802, 319), 1),
}


@pytest.mark.parametrize("run", sorted(ROLLOUT_RECORDED))
def test_codex_rollout_recordings(run: str, kinds: Callable[..., list], tokens: Callable[..., tuple]) -> None:
    n_lines, n_shell, n_patch, n_out, n_calls, toks, total, turns = ROLLOUT_RECORDED[run]
    path = RECORDED / f"{run}.rollout.jsonl"
    assert len(path.read_text().splitlines()) == n_lines
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownEventWarning)  # world_state, records: known
        t = read_trajectory(path)
    shell = [e for e in t.events if e.extra.get("name") == "exec_command"]
    assert len(shell) == n_shell and all(e.kind == EventKind.COMMAND for e in shell)
    # every shell call that returned says "Process exited with code 0" in plain text
    done = [e for e in shell if not e.extra.get("incomplete")]
    assert all(e.exit_code == 0 and not e.is_error for e in done)
    assert all(e.duration is not None and e.duration < 1e-3 for e in done)  # the item's own
    fcs = kinds(t, EventKind.FILE_CHANGE)
    assert len(fcs) == n_patch and all(e.exit_code == 0 and e.paths_written for e in fcs)
    assert len(t.boundaries("tool_call")) == n_out
    calls = kinds(t, EventKind.MODEL_CALL)
    assert len(calls) == n_calls
    assert (tokens(t)[0], tokens(t)[2]) == toks
    tt = t.meta["total_token_usage"]
    assert (tt["input_tokens"], tt["output_tokens"]) == total
    assert len({e.step for e in t.events}) == turns == t.meta["n_user_turns"]
    # the cwd-relative reads and writes the provenance graph needs
    assert all(e.extra["cwd"].startswith("/tmp/ripplecp-recordings/codex/ws") for e in shell)


def test_codex_rollout_killed_and_resumed_calls() -> None:
    killed = read_trajectory(RECORDED / "killed.rollout.jsonl")
    cut = killed.events[-1]
    assert cut.command == "touch started && sleep 30" and cut.extra["incomplete"]
    assert not cut.safe_boundary and cut.turn_end
    t = read_trajectory(RECORDED / "resumed.rollout.jsonl")
    (sleep,) = [e for e in t.events if e.command == "touch started && sleep 30"]
    # released where the resumed turn started (task_started, line 18), before its work
    assert sleep.extra["abandoned"] and sleep.extra["incomplete"]
    assert t.events[sleep.index + 1].extra["line"] == 18 and sleep.step == 1
    assert t.task_id == killed.task_id  # the thread id stays on resume
    fork = read_trajectory(RECORDED / "forked.rollout.jsonl")
    assert fork.meta["forked_from_id"] == t.task_id != fork.task_id


def test_codex_rollout_usage_base_for_the_exec_stream() -> None:
    """The resumed exec stream's first turn is charged its own tokens once the rollout's
    running total before the resume is taken off (what a harness does)."""
    base = read_trajectory(RECORDED / "killed.rollout.jsonl").meta["total_token_usage"]
    t = read_trajectory(RECORDED / "resumed.exec.jsonl", usage_base=base)
    (mc,) = [e for e in t.events if e.kind == EventKind.MODEL_CALL]
    assert (mc.input_tokens, mc.output_tokens) == (1740 + 1865, 64 + 48)


def test_rollout_shell_command_and_older_shell_forms(kinds: Callable[..., list]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownEventWarning)
        t = read_trajectory(HANDMADE / "shell-command.rollout.jsonl")
    by_name = {}
    for e in t.events:
        if e.kind in (EventKind.COMMAND, EventKind.TEST, EventKind.FILE_CHANGE):
            by_name.setdefault(e.extra.get("name") or e.extra["payload_type"], []).append(e)
    pytest_, sleep, commit = by_name["shell_command"]
    # plain text "Exit code: 1 / Wall time: 2.5 seconds / Output:" parsed from the header
    assert pytest_.kind == EventKind.TEST and (pytest_.exit_code, pytest_.duration) == (1, 2.5)
    assert (pytest_.tests_passed, pytest_.tests_failed) == (2, 1)
    assert pytest_.extra["output"].startswith("..F") and not pytest_.is_error
    assert commit.boundary_kind == BoundaryKind.COMMIT and commit.exit_code == 0
    assert sleep.extra["incomplete"] and sleep.extra["aborted"] and not sleep.safe_boundary
    (cexec,) = by_name["container.exec"]
    assert cexec.argv == ["bash", "-lc", "cat src/a.py"] and cexec.extra["cwd"] == "/repo/src"
    (local,) = by_name["local_shell_call"]
    assert local.argv == ["ls", "-a"] and local.exit_code == 0 and local.duration == 0.01
    (patch,) = by_name["apply_patch"]  # a function_call with `input`, a bare Success reply
    assert patch.kind == EventKind.FILE_CHANGE and patch.paths_written == ["docs/notes.md"]
    (denied,) = by_name["shell"]
    assert denied.is_error and denied.exit_code is None  # "failed in sandbox ..."
    # the repeated token_count (same running total, after the next turn_context) is no call
    calls = kinds(t, EventKind.MODEL_CALL)
    assert [c.input_tokens for c in calls] == [1000, 1200, 1300, 900]
    assert sum(c.input_tokens for c in calls) == t.meta["total_token_usage"]["input_tokens"]
    assert sum(1 for e in t.events if e.extra.get("duplicate")) == 1
    # ghost snapshot and compaction are kept as other, the compaction's history only counted
    (ghost,) = [e for e in t.events if e.extra.get("payload_type") == "ghost_snapshot"]
    assert ghost.kind == EventKind.OTHER
    (comp,) = [e for e in t.events if e.extra["line_type"] == "compacted"]
    assert comp.extra["payload"]["replacement_history"] == 1
    # two prompts (each with its user_message mirror); injected context opens no step
    assert [e.step for e in t.events if e.text == "Now commit."] == [2, 2]
    assert t.meta["n_user_turns"] == 2 and t.meta["n_turns_aborted"] == 1
    assert t.repo == "acme/widgets"


def test_rollout_unified_exec_polls_and_subagent_thread(kinds: Callable[..., list]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownEventWarning)
        t = read_trajectory(HANDMADE / "unified-exec.rollout.jsonl")
    cmds = kinds(t, EventKind.COMMAND)
    build, curl, server = cmds
    # "Process running with session ID 17": pending; released by the write_stdin poll that
    # says "Process exited with code 0", with every chunk of output
    assert build.command == "make build" and build.exit_code == 0 and build.extra["polls"] == 2
    assert build.extra["output"] == "cc -c a.c\ncc -c b.c\nok\n" and build.safe_boundary
    polls = [e for e in t.events if e.extra.get("name") == "write_stdin"]
    assert len(polls) == 2 and all(p.kind == EventKind.OTHER and not p.safe_boundary
                                   and p.exit_code is None for p in polls)
    assert build.index == polls[1].index + 1 and build.duration is None
    assert build.end - build.start == pytest.approx(8.0)  # call line 7, exit seen line 15
    assert curl.is_error and curl.extra["output"] == "aborted"
    # still running when the file ends: released last, incomplete
    assert server.extra["incomplete"] and server.extra["running"] and server == t.events[-1]
    # token_usage_record lines are the model calls, once per response id
    assert [c.input_tokens for c in kinds(t, EventKind.MODEL_CALL)] == [800, 900, 950, 1000]
    assert t.meta["thread_token_usage"]["input_tokens"] == 3650
    # CLI >= 0.148: the prompt only as a user item; the environment context is not one
    assert t.meta["n_user_turns"] == 1
    assert t.meta["parent_thread_id"] == "T1" and t.meta["subagent"]["thread_spawn"]["depth"] == 1


def test_rollout_code_mode_cells(kinds: Callable[..., list]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownEventWarning)
        t = read_trajectory(HANDMADE / "code-mode.rollout.jsonl")
    cells = [e for e in t.events if e.extra.get("name") == "exec"]
    ok, failed = cells
    # "Script running with cell ID 3": pending until the wait poll sees "Script completed"
    assert ok.safe_boundary and not ok.is_error and ok.extra["polls"] == 1
    assert ok.extra["output"] == "src/a.py\n" and "tools.exec_command" in ok.extra["code"]
    assert failed.is_error and failed.safe_boundary
    # the command and patch the cell ran, from the CLI's own items: events, not boundaries
    (grep,) = kinds(t, EventKind.COMMAND)
    (edit,) = kinds(t, EventKind.FILE_CHANGE)
    assert grep.argv == ["/bin/bash", "-lc", "grep -rl foo src"] and grep.exit_code == 0
    assert grep.duration == pytest.approx(0.04) and grep.extra["nested_in"] == "exec"
    assert edit.paths_written == ["/repo/src/a.py"] and not edit.safe_boundary
    assert grep.index < edit.index < ok.index


def test_rollout_code_mode_0144_reads_the_calls_from_the_cells(kinds: Callable[..., list]
                                                                 ) -> None:
    """Codex 0.144 code mode logs no item per nested call: the calls are read from each
    cell's code, their results from what the cell printed (issue 31). The hand-made log:
    cell c1 runs one pytest (printed: exit 1, 3 passed 1 failed); cell c2 yields, is
    polled once by wait and completes: git status (exit 0), an apply_patch of src/a.py, a
    pytest (exit 0, 4 passed); cell c3 runs `wc -l src/${f}` in a loop (not a literal) and
    fails. By hand: 4 nested commands (2 tests), 1 file change, exit codes 1, 0, 0, None."""
    t = read_trajectory(HANDMADE / "code-mode-0.144.rollout.jsonl")
    nested = [e for e in t.events if e.extra.get("nested_in") == "exec"]
    assert [e.kind for e in nested] == [EventKind.TEST, EventKind.COMMAND,
                                        EventKind.FILE_CHANGE, EventKind.TEST,
                                        EventKind.COMMAND]
    first, status, patch, pytest_run, loop = nested
    assert first.command == "pytest -q tests/test_a.py" and first.exit_code == 1
    assert (first.tests_passed, first.tests_failed) == (3, 1)
    assert first.extra["cwd"] == "/repo"
    assert status.command == "git status --short" and status.exit_code == 0
    assert status.extra["output"] == " M src/a.py\n"
    assert patch.paths_written == ["src/a.py"] and not patch.is_error
    assert pytest_run.exit_code == 0 and (pytest_run.tests_passed, pytest_run.tests_failed) == (
        4, 0)
    # a command built at run time is counted, never guessed: no command text, no exit code
    assert loop.command is None and loop.exit_code is None
    assert "wc -l src/${f}" in loop.extra["source"]
    assert loop.extra["cell_failed"] is True
    # each cell's calls sit just before the cell, which stays the safe boundary
    cells = [e for e in t.events if e.extra.get("name") == "exec"]
    assert [c.is_error for c in cells] == [False, False, True]
    assert all(c.safe_boundary for c in cells) and not any(e.safe_boundary for e in nested)
    assert nested[0].index == cells[0].index - 1 and nested[3].index == cells[1].index - 1
    assert nested[4].index == cells[2].index - 1
    assert len(kinds(t, EventKind.MODEL_CALL)) == 2


def test_rollout_exit_codes_after_a_command_line_and_in_a_later_exec_command_end() -> None:
    """Codex 0.115.0-alpha.27 starts each exec_command output with ``Command: …`` before
    the ``Chunk ID / Wall time / Process exited with code N`` header; and a command still
    running at its yield, never polled to its end, has its exit code only in a later
    ``exec_command_end`` (issue 31). The hand-made log: ls (exit 2), pytest (exit 0, 5
    passed), make build (running; exec_command_end: exit 0 after 9 s), git diff (exit 0)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", TimeOrderWarning)  # the file's times never decrease
        t = read_trajectory(HANDMADE / "command-line-header.rollout.jsonl")
    runs = [e for e in t.events if e.kind in (EventKind.COMMAND, EventKind.TEST)]
    assert [e.command for e in runs] == ["ls missing", "pytest -q", "make build",
                                         "git diff --stat"]
    assert [e.exit_code for e in runs] == [2, 0, 0, 0]
    ls, pytest_run, build, diff = runs
    assert ls.extra["output_header"]["command"] == "/bin/bash -lc 'ls missing'"
    assert (pytest_run.tests_passed, pytest_run.tests_failed) == (5, 0)
    # the running command is released where its end became known, before git diff
    assert build.index < diff.index and build.duration == 9.0
    assert build.end == datetime(2025, 8, 1, 12, 0, 20, tzinfo=UTC).timestamp()
    assert build.safe_boundary and "incomplete" not in build.extra
    assert "time_flags" not in t.meta


def test_code_cells_reads_literal_calls_only() -> None:
    from features.readers.code_cells import UNRESOLVED, nested_calls

    code = ('// tools.exec_command({cmd: "in a comment"})\n'
            'const a = await tools.exec_command({"cmd": "ls -la", yield_time_ms: 500});\n'
            "const s = 'tools.exec_command(\"in a string\")';\n"
            "await tools.apply_patch('*** Begin Patch\\n*** Add File: x.py\\n+1\\n*** End Patch');\n"
            "await tools.exec_command({cmd});\n"
            "await tools.exec_command(build(cmd), {x: 1});\n"
            "await tools.shell_command({command: `echo \\`hi\\``});\n")
    calls = nested_calls(code)
    assert [c.tool for c in calls] == ["exec_command", "apply_patch", "exec_command",
                                       "exec_command", "shell_command"]
    assert calls[0].argument == {"cmd": "ls -la", "yield_time_ms": 500}
    assert calls[1].argument == "*** Begin Patch\n*** Add File: x.py\n+1\n*** End Patch"
    assert calls[2].argument == {"cmd": UNRESOLVED}
    assert calls[3].argument is None and calls[3].source.startswith("tools.exec_command(build")
    assert calls[4].argument == {"command": "echo `hi`"}


def test_rollout_output_header_parsing() -> None:
    from features.readers.codex_rollout import parse_output_header

    assert parse_output_header("Exit code: 2\nWall time: 0.3 seconds\nOutput:\nboom\n") == {
        "exit": "2", "wall": "0.3", "body": "boom\n"}
    h = parse_output_header("Chunk ID: 1\nWall time: 1.0 seconds\nProcess running with "
                            "session ID 9\nOriginal token count: 0\nOutput:\n")
    assert h == {"wall": "1.0", "session": "9", "body": ""}
    assert parse_output_header("Process exited with code 0") == {"pexit": "0", "body": ""}
    assert parse_output_header("hello\nOutput:\n") is None
    assert parse_output_header("Success. Updated the following files:\nM a") is None
