"""The OpenHands V0 event-list reader (``features.readers.openhands``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from features.readers import UnknownEventWarning, detect_format, read_trajectory
from features.schema import BoundaryKind, EventKind, Trajectory

OH_BASIC = "openhands/basic.json"
OH_WRONG = "openhands/wrong_initial_state.json"


def test_openhands_basic(read_fixture: Callable[[str], Trajectory], kinds: Callable[..., list], tokens: Callable[..., tuple]) -> None:
    t = read_fixture(OH_BASIC)
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
    assert tokens(t) == (8132, 3482, 1312)
    assert len(t.boundaries("tool_call")) == 1 and {e.step for e in t.events} == {1}
    assert sum(e.is_error for e in t.events) == 0


def test_openhands_wrong_initial_state(read_fixture: Callable[[str], Trajectory], kinds: Callable[..., list], tokens: Callable[..., tuple]) -> None:
    t = read_fixture(OH_WRONG)
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
    assert tokens(t) == (14828, 10879, 358)
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


def test_a_system_prompt_is_not_the_agent_acting(tmp_path: Path) -> None:
    """Newer V0 logs open with the system prompt as an agent ``system`` action: the task
    that follows is still step 1 (as V1's SystemPromptEvent), not step 2."""
    evs = [
        {"id": 0, "timestamp": "2025-01-01T00:00:00", "source": "agent", "action": "system",
         "args": {"content": "You are OpenHands agent."}},
        {"id": 1, "timestamp": "2025-01-01T00:00:01", "source": "user", "action": "message",
         "args": {"content": "fix it"}},
        {"id": 2, "timestamp": "2025-01-01T00:00:02", "source": "agent", "action": "run",
         "args": {"command": "ls"}},
        {"id": 3, "timestamp": "2025-01-01T00:00:03", "source": "agent", "observation": "run",
         "cause": 2, "content": "a.py", "extras": {"metadata": {"exit_code": 0}}},
        {"id": 4, "timestamp": "2025-01-01T00:00:04", "source": "user", "action": "message",
         "args": {"content": "and now?"}},
    ]
    p = tmp_path / "oh.json"
    p.write_text(json.dumps(evs), encoding="utf-8")
    t = read_trajectory(p)
    assert [e.step for e in t.events] == [1, 1, 1, 2]
    assert t.events[0].kind == EventKind.MESSAGE and t.events[0].text == "You are OpenHands agent."


def test_openhands_eval_record_with_history(tmp_path: Path, fixture_path: Callable[[str], Path], read_fixture: Callable[[str], Trajectory]) -> None:
    evs = json.loads(fixture_path(OH_WRONG).read_text(encoding="utf-8"))
    rec = {"instance_id": "django__django-11099", "instance": {"repo": "django/django"},
           "history": evs, "test_result": {"git_patch": ""}}
    p = tmp_path / "rec.json"
    p.write_text(json.dumps(rec), encoding="utf-8")
    assert detect_format(p) == "openhands"
    t = read_trajectory(p)
    assert (t.task_id, t.repo) == ("django__django-11099", "django/django")
    assert t.events == read_fixture(OH_WRONG).events
    assert t.meta["test_result"] == {"git_patch": ""}


@pytest.mark.parametrize("usage, expected", [
    # LiteLLM before ~1.6x (OpenHands 0.2x): prompt_tokens holds the cache writes and reads
    ({"prompt_tokens": 3601, "completion_tokens": 1142, "cache_creation_input_tokens": 160,
      "cache_read_input_tokens": 3435}, (3601, 3435, 1142)),
    # later LiteLLM with Anthropic (a public OpenHands session, 2025): prompt_tokens leaves
    # the cache writes out (4 = fresh input only; 6559 = 6 fresh + 6553 read)
    ({"prompt_tokens": 4, "completion_tokens": 115, "cache_creation_input_tokens": 6553,
      "cache_read_input_tokens": 0}, (6557, 0, 115)),
    ({"prompt_tokens": 6559, "completion_tokens": 109, "cache_creation_input_tokens": 210,
      "cache_read_input_tokens": 6553}, (6769, 6553, 109)),
    # no cache fields: prompt_tokens as it is
    ({"prompt_tokens": 50, "completion_tokens": 5}, (50, None, 5)),
])
def test_openhands_input_tokens_count_cache_writes_once(
        tmp_path: Path, usage: dict, expected: tuple) -> None:
    evs = [
        {"id": 0, "timestamp": "2025-01-01T00:00:00", "source": "user", "action": "message",
         "args": {"content": "go"}},
        {"id": 1, "timestamp": "2025-01-01T00:00:01", "source": "agent", "action": "run",
         "args": {"command": "ls"}, "tool_call_metadata": {
             "function_name": "execute_bash", "tool_call_id": "t1", "total_calls_in_response": 1,
             "model_response": {"id": "r1", "usage": usage}}},
    ]
    p = tmp_path / "oh.json"
    p.write_text(json.dumps(evs), encoding="utf-8")
    calls = [e for e in read_trajectory(p).events if e.kind == EventKind.MODEL_CALL]
    assert [(e.input_tokens, e.cached_tokens, e.output_tokens) for e in calls] == [expected]
