"""Cline / Roo Code task folders: a hand-made folder mirroring ``ClineMessage``
(``src/shared/ExtensionMessage.ts``), counted with a short script over the file (see the
test), and one-line refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from features.readers import TrajectoryFormatError, detect_format, read_trajectory
from features.schema import EventKind

TASK = Path(__file__).resolve().parents[2] / "data" / "readers" / "cline" / "1730000000000"


def test_hand_made_task_counts() -> None:
    """Counted over ui_messages.json: 7 ``api_req_started`` (tokensIn + cacheWrites +
    cacheReads = 59,900, cacheReads 49,340, tokensOut 590, cost 0.0731), 2 commands (one
    pytest), 3 tools (readFile, editedExistingFile, fileDeleted), 2 prompts (task,
    user_feedback)."""
    for path in (TASK, TASK / "ui_messages.json"):
        t = read_trajectory(path)
        assert detect_format(path) == "cline-task" and t.task_id == "1730000000000"
        kinds = [e.kind for e in t.events]
        assert kinds.count(EventKind.MODEL_CALL) == 7
        assert kinds.count(EventKind.COMMAND) == 1 and kinds.count(EventKind.TEST) == 1
        assert kinds.count(EventKind.FILE_CHANGE) == 2
        tot = t.meta["totals"]
        assert (tot["input_tokens"], tot["cached_tokens"], tot["output_tokens"]) == (
            59900, 49340, 590)
        assert t.meta["cost_usd"] == pytest.approx(0.0731)
        assert t.meta["api_messages"] == 13 and tot["steps"] == 2
    test = [e for e in t.events if e.kind is EventKind.TEST][0]
    assert (test.tests_passed, test.exit_code) == (2, None)
    assert test.end - test.start == 3.0  # the command at ts, its last output 3 s later
    rm = [e for e in t.events if e.kind is EventKind.COMMAND][0]
    assert (rm.command, rm.exit_code) == ("rm -f old.log", 0)
    deleted = [e for e in t.events if e.extra.get("paths_deleted")]
    assert deleted[0].extra["paths_deleted"] == ["notes.md"] and not deleted[0].paths_written
    cancelled = [e for e in t.events if e.extra.get("cancelReason")][0]
    assert cancelled.is_error and cancelled.output_tokens is None
    assert t.events[-1].extra["partial"]


def test_refusals_name_the_file_and_message(tmp_path: Path) -> None:
    task = tmp_path / "t1"
    shutil.copytree(TASK, task)
    ui = task / "ui_messages.json"
    msgs = json.loads(ui.read_text())
    msgs[1]["text"] = "{not json"
    ui.write_text(json.dumps(msgs))
    with pytest.raises(TrajectoryFormatError, match=r"ui_messages\.json: field \[1\]\.text: not JSON"):
        read_trajectory(task)
    msgs[1] = {"ts": 1, "type": "shout", "shout": "x"}
    ui.write_text(json.dumps(msgs))
    with pytest.raises(TrajectoryFormatError, match=r"field \[1\]\.type: expected 'say' or 'ask'"):
        read_trajectory(task)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TrajectoryFormatError, match="a directory that holds no known log"):
        read_trajectory(empty)
