"""The OpenHands V1 reader (``features.readers.openhands_v1``): event lists and conversation
directories of the software-agent-sdk, told apart from V0.

Counts are those of the hand-made conversation in ``tests/data/readers/openhands`` (26
events: system prompt, task, ten model responses of which one holds two parallel editor
calls, a tool call the agent could not execute, a condensation, a second user message):
``jq -r '.[].kind' v1_events.json | sort | uniq -c``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from features.readers import (
    TrajectoryFormatError,
    UnknownEventWarning,
    detect_format,
    read_trajectory,
)
from features.schema import BoundaryKind, EventKind, Trajectory

DATA = Path(__file__).resolve().parents[2] / "data" / "readers" / "openhands"
LIST = DATA / "v1_events.json"
CONV = DATA / "conversation-a1b2c3"


def test_detected_apart_from_v0(fixture_path: Callable[[str], Path]) -> None:
    assert detect_format(LIST) == "openhands-v1"
    assert detect_format(CONV) == "openhands-v1"
    assert detect_format(CONV / "events") == "openhands-v1"
    assert detect_format(fixture_path("openhands/basic.json")) == "openhands"


def test_event_list(kinds: Callable[..., list]) -> None:
    t = read_trajectory(LIST)
    assert (t.task_id, t.repo, t.source_format) == ("v1_events", "unknown", "openhands-v1")
    counts = {k: len(kinds(t, k)) for k in EventKind}
    # 10 agent responses + the condenser's: 11 model calls; system, task, think, finish,
    # second user message: 5 messages; view, unexecuted call, condensation, C-c: 4 other
    assert counts == {EventKind.MODEL_CALL: 11, EventKind.MESSAGE: 5, EventKind.COMMAND: 2,
                      EventKind.TEST: 2, EventKind.FILE_CHANGE: 2, EventKind.OTHER: 4}
    assert len(t.events) == 26 == t.meta["n_events_in_log"]
    # no base state: model calls are known, their tokens are not
    assert all(e.input_tokens is None and e.duration is None
               for e in kinds(t, EventKind.MODEL_CALL))
    ls, commit = kinds(t, EventKind.COMMAND)
    assert (ls.command, ls.argv, ls.exit_code, ls.extra["cwd"]) == (
        "cd /workspace/calc && ls", ["cd", "/workspace/calc", "&&", "ls"], 0, "/workspace/calc")
    assert ls.text == "Let me look at the repository first." and ls.extra["output"] == (
        "calc.py\ntest_calc.py")
    assert ls.elapsed == pytest.approx(0.338665)  # 18:33:22.801322 - 22.462657
    assert commit.boundary_kind == BoundaryKind.COMMIT
    first, second = kinds(t, EventKind.TEST)
    assert (first.exit_code, first.tests_passed, first.tests_failed) == (1, 1, 1)
    assert (second.exit_code, second.tests_passed, second.tests_failed) == (0, 2, 0)
    # two parallel calls of one response: one model call before both, each where its
    # result arrived (the new file's first)
    notes, calc = kinds(t, EventKind.FILE_CHANGE)
    assert notes.paths_written == ["/workspace/calc/NOTES.md"] and notes.bytes_written == 12
    assert calc.paths_written == ["/workspace/calc/calc.py"] and calc.bytes_written == 12
    before = t.events[notes.index - 1]
    assert before.kind == EventKind.MODEL_CALL and before.extra["response_id"] == "chatcmpl-r4"
    view = t.events[before.index - 1]
    assert view.paths_read == ["/workspace/calc/calc.py"] and view.kind == EventKind.OTHER
    # an unexecutable call answered by the agent's error
    (bad,) = [e for e in t.events if e.extra.get("not_executed")]
    assert bad.is_error and bad.safe_boundary and bad.extra["output"].startswith(
        "Error validating args")
    # keys sent to a running process are not a command line
    (keys,) = [e for e in t.events if "input" in e.extra]
    assert keys.kind == EventKind.OTHER and keys.command is None and keys.is_error
    assert [e.text for e in kinds(t, EventKind.MESSAGE)][2:] == [
        "Also stop the watcher you started.", "Nothing runs; the task is done.",
        "Fixed calc.add; both tests pass."]
    # the second user message opens step 2
    assert [e.index for e in t.events if e.step == 2][0] == 19
    assert len(t.boundaries("tool_call")) == 11 and len(t.boundaries("turn")) == 2
    assert sum(e.is_error for e in t.events) == 2


def test_directory_with_base_state(kinds: Callable[..., list]) -> None:
    t = read_trajectory(CONV)
    listed = read_trajectory(LIST)
    assert [(e.kind, e.command, e.paths_written, e.step) for e in t.events] == [
        (e.kind, e.command, e.paths_written, e.step) for e in listed.events]
    assert t.task_id == "a1b2c3d4e5f64789a0b1c2d3e4f5a6b7"  # base_state.json id
    calls = kinds(t, EventKind.MODEL_CALL)
    # token_usages matched by response_id: agent r1..r10 (prompt 4000 + 900k, cache read
    # 3500 + 880k but 0 for k=0, completion 60 + 7k) and the condenser's c1 (2100/0/180)
    assert sum(e.input_tokens for e in calls) == 40000 + 900 * 45 + 2100
    assert sum(e.cached_tokens for e in calls) == 9 * 3500 + 880 * 45
    assert sum(e.output_tokens for e in calls) == 600 + 7 * 45 + 180
    assert [e.duration for e in calls if e.extra["response_id"] != "chatcmpl-c1"] == [
        pytest.approx(1.5 + 0.25 * k) for k in range(10)]
    assert t.meta["token_usages_without_event"] == 1  # c0: no event names it
    assert "secret_registry" not in t.meta["base_state"]
    assert t.meta["base_state"]["execution_status"] == "finished"
    assert read_trajectory(CONV / "events") == t  # its folder of events: the same


def test_early_sdk_stats_under_service_to_metrics(tmp_path: Path) -> None:
    """Early V1 conversations keep their token stats under ``stats.service_to_metrics`` (the
    SDK renamed it ``usage_to_metrics`` later); they were read as no tokens at all (issue
    31). The hand-made conversation with only that key renamed reads the same tokens:
    11 model calls, 82,600 prompt, 71,100 cached, 1,095 completion tokens (as above)."""
    conv = tmp_path / "early"
    shutil.copytree(CONV, conv)
    state = json.loads((conv / "base_state.json").read_text())
    state["stats"] = {"service_to_metrics": state["stats"].pop("usage_to_metrics")}
    (conv / "base_state.json").write_text(json.dumps(state))
    t = read_trajectory(conv)
    calls = [e for e in t.events if e.kind is EventKind.MODEL_CALL]
    assert len(calls) == 11
    assert sum(e.input_tokens for e in calls) == 40000 + 900 * 45 + 2100
    assert sum(e.cached_tokens for e in calls) == 9 * 3500 + 880 * 45
    assert sum(e.output_tokens for e in calls) == 600 + 7 * 45 + 180
    assert t.meta["token_usages_without_event"] == 1
    assert [e.input_tokens for e in calls] == [
        e.input_tokens for e in read_trajectory(CONV).events if e.kind is EventKind.MODEL_CALL]


def test_directory_order_is_the_file_name_index(tmp_path: Path) -> None:
    events = json.loads(LIST.read_text())[:4]
    d = tmp_path / "conv" / "events"
    d.mkdir(parents=True)
    for idx, e in zip((99998, 99999, 100000, 100001), events, strict=True):
        (d / f"event-{idx:05d}-{e['id']}.json").write_text(json.dumps(e))
    assert sorted(p.name for p in d.iterdir())[0].startswith("event-100000")  # text order
    with pytest.warns(UserWarning, match=r"99998 event file\(s\) missing"):
        t = read_trajectory(tmp_path / "conv")
    # the observation (4th) is merged into its action (3rd)
    assert [e.extra["id"] for e in t.events if "id" in e.extra] == [e["id"] for e in events[:3]]
    assert t.events[-1].extra["observation"]["id"] == events[3]["id"]


def test_bad_directories(tmp_path: Path) -> None:
    conv = tmp_path / "c"
    shutil.copytree(CONV, conv)
    ev = conv / "events"
    first = sorted(ev.glob("event-00000-*"))[0]
    shutil.copy(first, ev / "event-00000-ffffffff-0000-0000-0000-000000000000.json")
    with pytest.raises(TrajectoryFormatError, match=r"two event files with index 0"):
        read_trajectory(conv)
    (ev / "event-00000-ffffffff-0000-0000-0000-000000000000.json").unlink()
    wrong = ev / "event-00001-aaaaaaaa-0000-0000-0000-000000000000.json"
    sorted(ev.glob("event-00001-*"))[0].rename(wrong)
    with pytest.raises(TrajectoryFormatError, match=r"event-00001-aaaaaaaa.*: field id: event id"):
        read_trajectory(conv)
    wrong.unlink()
    (ev / "notes.txt").write_text("not an event")
    with pytest.warns(UserWarning, match=r"1 file\(s\) that are not events ignored: notes.txt"):
        t = read_trajectory(conv)
    assert len(t.events) == 25  # event 1 (the task message) is missing
    (conv / "base_state.json").write_text('{"stats": {"usage_to_metrics": {"agent": 3}}}')
    with pytest.raises(TrajectoryFormatError,
                       match=r"base_state\.json: field stats\.usage_to_metrics\.agent: expected"):
        read_trajectory(conv)


def test_malformed_v1_named_as_v1(write_file: Callable[..., Path]) -> None:
    evs = json.loads(LIST.read_text())
    evs[3]["id"] = 3
    p = write_file("v1.json", json.dumps(evs))
    with pytest.raises(TrajectoryFormatError, match=r"v1\.json: field \[3\]\.id: expected string"):
        read_trajectory(p)
    evs = json.loads(LIST.read_text())
    evs[2]["action"] = "ls"
    q = write_file("v1b.json", json.dumps(evs))
    with pytest.raises(TrajectoryFormatError, match=r"field \[2\]\.action: expected object or null"):
        read_trajectory(q)
    with pytest.raises(TrajectoryFormatError,
                       match=r"read as openhands but it looks like openhands-v1 \(field \[0\]: an "
                             r"OpenHands V1 event"):
        read_trajectory(LIST, "openhands")


def test_unknown_kinds_kept(write_file: Callable[..., Path]) -> None:
    evs = json.loads(LIST.read_text())[:2]
    evs.append({"id": "x-1", "timestamp": "2026-03-11T18:34:00", "source": "environment",
                "kind": "HologramEvent", "beam": 3})
    evs.append({"id": "x-2", "timestamp": "2026-03-11T18:34:01", "source": "agent",
                "kind": "ActionEvent", "thought": [], "tool_name": "teleport", "tool_call_id": "c",
                "tool_call": {}, "llm_response_id": "r", "action": {"kind": "TeleportAction"}})
    p = write_file("u.json", json.dumps(evs))
    with pytest.warns(UnknownEventWarning) as rec:
        t = read_trajectory(p)
    assert ["HologramEvent" in str(rec[0].message), "TeleportAction" in str(rec[1].message)] == [
        True, True]
    assert t.events[2].extra["beam"] == 3 and t.events[-1].kind == EventKind.OTHER


def test_v0_chat_action_is_a_message(write_file: Callable[..., Path], recwarn: pytest.WarningsRecorder
                                     ) -> None:
    p = write_file("chat.json", json.dumps([
        {"id": 0, "timestamp": "2025-01-01T00:00:00", "source": "user", "action": "chat",
         "args": {"content": "hello"}},
        {"id": 1, "timestamp": "2025-01-01T00:00:01", "source": "agent", "action": "chat",
         "args": {"content": "hi, what should I do?"}}]))
    t: Trajectory = read_trajectory(p)
    assert [e.kind for e in t.events] == [EventKind.MESSAGE, EventKind.MESSAGE]
    assert t.events[1].text == "hi, what should I do?"
    assert not [w for w in recwarn if issubclass(w.category, UnknownEventWarning)]


@pytest.mark.parametrize("text, message", [
    ('{"id": "x", "id": "y"}', r"event-00003-[^:]*: line 1: field id: duplicate key"),
    ('{"kind": "MessageEvent", ', r"event-00003-[^:]*: line 1 column \d+: invalid JSON"),
    ("", r"event-00003-[^:]*: empty file"),
])
def test_a_clean_directory_names_the_bad_file_in_index_order(tmp_path: Path, text: str,
                                                             message: str) -> None:
    """A clean directory is loaded in one go; a bad file sends it file by file, so the first
    bad file in index order is named, with the words of a single file's read."""
    conv = tmp_path / "c"
    shutil.copytree(CONV, conv)
    sorted((conv / "events").glob("event-00003-*"))[0].write_text(text)
    last = sorted((conv / "events").glob("event-000*"))[-1]
    last.write_text('{"a": 1, "a": 2}')  # a later bad file is not the one named
    with pytest.raises(TrajectoryFormatError, match=message):
        read_trajectory(conv)


def test_a_clean_directory_read_in_one_go_is_read_as_file_by_file(tmp_path: Path) -> None:
    """The one-go load (names matched all at once, ids compared as one list) and the file by
    file read agree; hidden files are skipped by both, and a name that only matches when
    taken alone (a trailing newline, which ``$`` accepts) sends the directory file by file."""
    from features.readers import openhands_v1 as v1

    conv = tmp_path / "c"
    shutil.copytree(CONV, conv)
    ev = conv / "events"
    (ev / ".eventlog.lock").write_text("")  # the SDK's hidden marker
    loaded = v1._load_clean(ev)
    assert loaded is not None
    assert loaded == v1._read_events(ev)
    assert loaded[0] == [str(p) for p in sorted(ev.glob("event-*"))]
    t = read_trajectory(conv)
    last = sorted(ev.glob("event-*"))[-1]
    last.rename(ev / (last.name + "\n"))
    assert v1._load_clean(ev) is None
    assert read_trajectory(conv).events == t.events
