"""The SWE-agent reader (``features.readers.swe_agent``), v1 and 0.x."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from features.readers import TrajectoryFormatError, read_trajectory
from features.schema import EventKind, Trajectory

SWE_V1 = "swe_agent/demo_function_calling_replace_marshmallow-1867.traj"
SWE_0X = "swe_agent/testdata_gpt4_swe-agent__test-repo-i1.traj"


def test_swe_agent_v1_counts(read_fixture: Callable[[str], Trajectory], kinds: Callable[..., list], tokens: Callable[..., tuple]) -> None:
    t = read_fixture(SWE_V1)
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
    assert tokens(t) == (0, 0, 0)  # no per-step tokens in SWE-agent logs


def test_swe_agent_0x_counts(read_fixture: Callable[[str], Trajectory], kinds: Callable[..., list]) -> None:
    t = read_fixture(SWE_0X)
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


SWE_1X = Path(__file__).resolve().parents[2] / "data" / "readers" / "swe-agent" / "toolcalls_1x.traj"


def test_swe_agent_1x_tool_calls(kinds: Callable[..., list]) -> None:
    """SWE-agent 1.1 with function calling: tool_calls on the history's actions, query per
    step, replay_config a JSON string holding the instance id."""
    t = read_trajectory(SWE_1X)
    assert (t.task_id, t.repo) == ("acme__calc-12", "acme/calc")  # from replay_config
    assert t.meta["format_version"] == "v1" and t.meta["api_calls"] == 7
    steps = [e for e in t.events if "trajectory_index" in e.extra]
    assert len(steps) == 7 and len(kinds(t, EventKind.MESSAGE)) == 2
    assert [e.extra["tool_calls"][0]["function"]["name"] for e in steps] == [
        "str_replace_editor", "str_replace_editor", "bash", "str_replace_editor", "bash", "bash",
        "submit"]
    create, replace = kinds(t, EventKind.FILE_CHANGE)
    text = "from calc import add\nprint('add(2, 3) =', add(2, 3))\n"
    assert (create.paths_written, create.bytes_written) == (["/testbed/reproduce.py"], len(text))
    assert (replace.paths_written, replace.bytes_written) == (["/testbed/calc.py"], 12)
    heredoc = steps[4]
    assert heredoc.kind == EventKind.COMMAND and heredoc.argv is None  # unsplittable words
    (test,) = kinds(t, EventKind.TEST)
    assert (test.tests_passed, test.tests_failed, test.duration) == (2, 0, 1.42)
    assert sum(e.duration for e in steps) == pytest.approx(0.21 + 0.18 + 0.35 + 0.2 + 0.05
                                                          + 1.42 + 0.4)
    assert steps[0].extra["query"][0]["role"] == "system"  # the step's own messages, kept
    assert len(t.boundaries("tool_call")) == 7


def test_swe_agent_tool_call_arguments_when_words_do_not_split(tmp_path: Path,
                                                               kinds: Callable[..., list]) -> None:
    doc = json.loads(SWE_1X.read_text())
    # an action text shlex cannot split (unbalanced quote); the tool call still names the file
    doc["trajectory"][1]["action"] = doc["history"][4]["action"] = (
        "str_replace_editor create /testbed/reproduce.py --file_text 'print(\"it's\")")
    p = tmp_path / "x.traj"
    p.write_text(json.dumps(doc))
    create, _ = kinds(read_trajectory(p), EventKind.FILE_CHANGE)
    assert create.paths_written == ["/testbed/reproduce.py"] and create.argv is None
    assert create.bytes_written == len("from calc import add\nprint('add(2, 3) =', add(2, 3))\n")


def test_swe_agent_replay_config_not_json(tmp_path: Path) -> None:
    doc = json.loads(SWE_1X.read_text())
    doc["replay_config"] = '{"env": '
    p = tmp_path / "x.traj"
    p.write_text(json.dumps(doc))
    with pytest.raises(TrajectoryFormatError, match=r"x\.traj: field replay_config: a string "
                                                    r"that is not JSON"):
        read_trajectory(p)
