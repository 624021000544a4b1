"""Gemini CLI ``--output-format stream-json``: a hand-made stream mirroring the schema of
``packages/core/src/output/types.ts`` (counted with grep, see each test), refusals naming file
and line. (No recording: the loopback model server does not speak Gemini's API.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from features.readers import TrajectoryFormatError, detect_format, read_trajectory
from features.schema import EventKind

LOG = Path(__file__).resolve().parents[2] / "data" / "readers" / "gemini-cli" / "fix-test.stream.jsonl"


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
