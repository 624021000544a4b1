"""The mini-SWE-agent reader (``features.readers.mini_swe_agent``), v1 and v1.1."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from features.readers import detect_format, read_trajectory
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
