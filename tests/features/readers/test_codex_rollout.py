"""The Codex session-rollout reader (``features.readers.codex_rollout``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from features.readers import read_trajectory
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
