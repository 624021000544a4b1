"""The mini-SWE-agent reader (``features.readers.mini_swe_agent``), v1 and v1.1."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from features.readers import UnknownEventWarning, detect_format, read_trajectory
from features.schema import EventKind, Trajectory

MINI_FILE = "mini_swe_agent/django__django-16255.traj.json"


def test_mini_swe_agent_v1_counts(read_fixture: Callable[[str], Trajectory], kinds: Callable[..., list], tokens: Callable[..., tuple]) -> None:
    t = read_fixture(MINI_FILE)
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
    assert tokens(t) == (61068, 33662, 2317)
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


def test_mini_swe_agent_v11(tmp_path: Path, kinds: Callable[..., list]) -> None:
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


def test_mini_swe_agent_v1_format_error_feedback(tmp_path: Path, kinds: Callable[..., list]) -> None:
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


DATA = Path(__file__).resolve().parents[2] / "data" / "readers" / "mini-swe-agent"


def test_mini_swe_agent_2x_tool_calls(kinds: Callable[..., list], tokens: Callable[..., tuple]
                                      ) -> None:
    """mini 2.4 with a tool-calling model: tool messages by tool_call_id, a billed response
    that failed to parse, and the Submitted exit message answering the submit command."""
    t = read_trajectory(DATA / "toolcall_v11.traj.json")
    assert (t.task_id, t.repo, t.meta["mini_version"]) == ("acme__calc-7", "acme/calc", "2.4.6")
    # 5 responses (one a FormatError's), 5 commands, system + task + format-error feedback
    assert len(kinds(t, EventKind.MODEL_CALL)) == 5 and len(t.events) == 13
    cmds = [e for e in t.events if e.kind in (EventKind.COMMAND, EventKind.TEST)]
    assert [c.command for c in cmds] == [
        "python -m pytest -q", "ls", "sed -i 's/a - b/a + b/' calc.py", "python -m pytest -q",
        "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff"]  # results' order
    assert [c.exit_code for c in cmds] == [1, 0, 0, 0, None]
    assert [(c.tests_passed, c.tests_failed) for c in kinds(t, EventKind.TEST)] == [(1, 1), (2, 0)]
    submit = cmds[-1]
    assert submit.safe_boundary and "incomplete" not in submit.extra
    assert submit.extra["output"].startswith("diff --git a/calc.py")
    assert submit.extra["exit_message"]["exit_status"] == "Submitted"
    assert kinds(t, EventKind.OTHER) == []  # the exit message is the submit's result
    (fb,) = [e for e in t.events if e.is_error]
    assert fb.extra["format_error_feedback"] and fb.step == 1  # not a new user turn
    billed = t.events[fb.index - 1]
    assert billed.kind == EventKind.MODEL_CALL and billed.input_tokens == 3700
    # prompt 3000 + 700k, cached 2800 + 690k (0 for k=0), completion 40 + k, k = 0..4
    assert tokens(t) == (15000 + 7000, 4 * 2800 + 690 * 10, 200 + 10)
    assert {e.step for e in t.events} == {1} and len(t.boundaries("tool_call")) == 5


def test_mini_swe_agent_responses_api(kinds: Callable[..., list], tokens: Callable[..., tuple]
                                      ) -> None:
    t = read_trajectory(DATA / "response_api_v11.traj.json")
    calls = kinds(t, EventKind.MODEL_CALL)
    assert [c.text for c in calls] == ["Look around first.", "Fix and test.", "Done."]
    assert tokens(t) == (7500, 2280 + 2760, 273)  # input/cached/output_tokens of 3 responses
    cmds = [e for e in t.events if e.kind in (EventKind.COMMAND, EventKind.TEST)]
    assert [(c.command, c.exit_code) for c in cmds] == [
        ("ls", 0), ("sed -i 's/a - b/a + b/' calc.py", 0), ("python -m pytest -q", 0),
        ("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff", None)]
    assert [c.end for c in cmds[:3]] == [1773254002.2, 1773254006.1, 1773254007.0]
    assert all(c.safe_boundary for c in cmds) and len(t.events) == 9


def test_mini_swe_agent_later_minor_version(recwarn: pytest.WarningsRecorder,
                                            kinds: Callable[..., list]) -> None:
    t = read_trajectory(DATA / "minor_v12.traj.json")
    assert not [w for w in recwarn if issubclass(w.category, UnknownEventWarning)]
    (cmd,) = kinds(t, EventKind.COMMAND)
    assert (cmd.command, cmd.exit_code, cmd.end) == ("ls -la", 0, 1773254001.3)  # 1.1 layout
    (ex,) = kinds(t, EventKind.OTHER)  # LimitsExceeded answers no command
    assert ex.extra["exit_status"] == "LimitsExceeded"


def test_mini_swe_agent_unknown_major_version(tmp_path: Path) -> None:
    doc = json.loads((DATA / "minor_v12.traj.json").read_text())
    doc["trajectory_format"] = "mini-swe-agent-2"
    p = tmp_path / "x.traj.json"
    p.write_text(json.dumps(doc))
    with pytest.warns(UnknownEventWarning, match="mini-swe-agent version 'mini-swe-agent-2'"):
        t = read_trajectory(p)
    assert [e.command for e in t.events if e.command] == ["ls -la"]


def test_mini_swe_agent_unanswered_command_marked(tmp_path: Path) -> None:
    doc = json.loads((DATA / "toolcall_v11.traj.json").read_text())
    doc["messages"] = doc["messages"][:-1]  # killed before the exit message was written
    p = tmp_path / "x.traj.json"
    p.write_text(json.dumps(doc))
    t = read_trajectory(p)
    assert [e.command for e in t.events if e.extra.get("incomplete")] == [
        "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff"]
