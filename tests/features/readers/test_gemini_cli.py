"""Gemini CLI ``--output-format stream-json``: real streams of Gemini CLI 0.61.0 recorded
against the loopback model server (``tests/data/recordings/gemini-cli-0.61.0``, counted
independently from the raw lines, the CLI's chat file and the server's audit log), a
hand-made stream mirroring the schema of ``packages/core/src/output/types.ts`` (counted with
grep, see each test), refusals naming file and line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from features.readers import TrajectoryFormatError, detect_format, read_trajectory
from features.schema import EventKind

LOG = Path(__file__).resolve().parents[2] / "data" / "readers" / "gemini-cli" / "fix-test.stream.jsonl"
RECORDED = Path(__file__).resolve().parents[2] / "data" / "recordings" / "gemini-cli-0.61.0"


def _raw(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _raw_counts(lines: list[dict]) -> dict:
    """Counted from the raw lines without the reader: a response is a run of assistant
    ``message`` and ``tool_use`` lines; commands are the ``run_shell_command`` uses."""
    responses, inside = 0, False
    for obj in lines:
        part = obj["type"] == "tool_use" or (obj["type"] == "message"
                                             and obj["role"] == "assistant")
        responses += part and not inside
        inside = part
    commands = [o["parameters"]["command"] for o in lines
                if o["type"] == "tool_use" and o["tool_name"] == "run_shell_command"]
    [result] = [o for o in lines if o["type"] == "result"]
    return {"responses": responses, "commands": commands,
            "tokens": (result["stats"]["input_tokens"], result["stats"]["output_tokens"])}


@pytest.mark.parametrize("run, n_calls, commands, exit_codes, true_exits, tokens", [
    # by hand: 4 responses (text + printf; replace; wc + ls in parallel; final text)
    ("task", 4, ["printf 'hello\\n' > hello.txt", "wc -c hello.txt", "ls"],
     [None, None, None], [None, None, None], (25153, 141)),
    # 3 responses (text + two parallel failing commands; write_file; final text); the
    # stream states only the silent command's code ("Command exited with code: 4"): for
    # "echo oops; exit 3" it shows "oops" with status success, the 3 is in the chat file only
    ("failing", 3, ["echo oops; exit 3", "exit 4"], [None, 4], [3, 4], (18784, 103)),
])
def test_recorded_stream_counts(run: str, n_calls: int, commands: list[str],
                                exit_codes: list, true_exits: list,
                                tokens: tuple[int, int]) -> None:
    path = RECORDED / f"{run}.stream.jsonl"
    raw = _raw(path)
    counted = _raw_counts(raw)
    assert counted == {"responses": n_calls, "commands": commands, "tokens": tokens}
    # the model requests the server answered for this run, and the tokens it reported
    audit = [json.loads(line)["record"] for line in
             (RECORDED / "model_server.audit.jsonl").read_text().splitlines()]
    mine = [r for r in audit if r["key"].startswith(f"{run}/")]
    assert len(mine) == n_calls
    assert (sum(r["input_tokens"] for r in mine), sum(r["output_tokens"] for r in mine)) == tokens
    # the exit codes the CLI sent the model ("Exit Code: N", only when not 0)
    sent = [json.loads(line) for line in (RECORDED / f"{run}.session.jsonl").read_text()
            .splitlines()]
    outputs = {c["args"]["command"]: c["result"][0]["functionResponse"]["response"]["output"]
               for rec in sent for c in rec.get("toolCalls", [])
               if c["name"] == "run_shell_command"}
    found = [re.search(r"Exit Code: (\d+)", outputs[c]) for c in commands]
    assert [int(m.group(1)) if m else None for m in found] == true_exits

    t = read_trajectory(path)
    assert detect_format(path) == "gemini-cli-stream"
    assert t.task_id == raw[0]["session_id"] and t.meta["model"] == "gemini-2.5-flash"
    kinds = [e.kind for e in t.events]
    assert kinds.count(EventKind.MODEL_CALL) == n_calls == t.meta["n_responses"]
    cmds = [e for e in t.events if e.kind is EventKind.COMMAND]
    assert [e.command for e in cmds] == commands
    assert [e.exit_code for e in cmds] == exit_codes
    tot = t.meta["totals"]
    assert (tot["input_tokens"], tot["output_tokens"]) == tokens and tot["cached_tokens"] == 0
    assert tot["n_file_change"] == 1 and tot["n_errors"] == 0
    assert t.meta["exit_status"] == "success" and t.events[-1].turn_end
    tools = [e for e in t.events if e.extra.get("tool_id")]
    assert len(tools) == sum(o["type"] == "tool_result" for o in raw) == len(commands) + 1


def test_hand_made_stream_counts() -> None:
    """``grep -c '"type":"tool_use"'`` 6 and ``'"type":"tool_result"'`` 6; 2 shell commands
    (one pytest: a test), 2 edits (one refused: status error), read_file + grep_search;
    6 responses (the assistant pieces and tool uses between two other lines); the result's
    stats: 9800 input (4096 cached), 550 output."""
    t = read_trajectory(LOG)
    assert detect_format(LOG) == "gemini-cli-stream" and t.task_id.startswith("5f0c2d1e")
    kinds = [e.kind for e in t.events]
    assert kinds.count(EventKind.MODEL_CALL) == 6 == t.meta["n_responses"]
    tools = [e for e in t.events if e.extra.get("tool_id")]
    assert len(tools) == 6 and all(e.safe_boundary for e in tools)
    test, cmd = [e for e in tools if e.extra["tool"] == "run_shell_command"]
    assert test.kind is EventKind.TEST and (test.tests_passed, test.tests_failed) == (1, 1)
    assert test.exit_code is None  # the display does not state it: never guessed as 0
    assert (cmd.command, cmd.exit_code) == ("test -f missing.txt", 1)
    assert test.end - test.start == pytest.approx(2.3)
    edit, refused = [e for e in tools if e.kind is EventKind.FILE_CHANGE]
    assert edit.paths_written == ["/ws/calc.py"] and edit.bytes_written == 5
    assert refused.is_error and refused.paths_written == []
    read = [e for e in tools if e.extra["tool"] == "read_file"][0]
    assert read.paths_read == ["calc.py"]
    first = [e for e in t.events if e.kind is EventKind.MODEL_CALL][0]
    assert first.text == "Let me run the tests first." and first.extra["tool_calls"] == 1
    tot = t.meta["totals"]
    assert (tot["input_tokens"], tot["cached_tokens"], tot["output_tokens"]) == (9800, 4096, 550)
    assert t.events[-1].turn_end and t.meta["exit_status"] == "success"
    assert tot["n_errors"] == 2  # the refused write and the loop warning


def test_bad_lines_are_refused_naming_file_and_line(tmp_path: Path) -> None:
    lines = LOG.read_text().splitlines()
    bad = tmp_path / "g.jsonl"
    bad.write_text("\n".join(lines[:3] + ['{"type":"tool_use","timestamp":"2025-11-02T09:00:02Z",'
                                          '"tool_id":"x"}']) + "\n")
    with pytest.raises(TrajectoryFormatError, match=r"g\.jsonl: line 4: field tool_name: missing"):
        read_trajectory(bad)
    bad.write_text("\n".join(lines[:2] + ['{"type":"message","timestamp":"noon",'
                                          '"role":"user","content":"x"}']) + "\n")
    with pytest.raises(TrajectoryFormatError, match=r"g\.jsonl: line 3: field timestamp"):
        read_trajectory(bad)


def test_a_cut_stream_keeps_what_it_has(tmp_path: Path) -> None:
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(LOG.read_text().splitlines()[:5]) + "\n")  # the pytest call pending
    t = read_trajectory(cut)
    assert t.meta["exit_status"] == "incomplete"
    assert t.events[-1].extra["incomplete"] and t.events[-1].end is None
