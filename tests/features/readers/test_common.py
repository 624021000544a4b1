"""The readers' shared pieces (``features.readers``: errors, files, strict_json, fields,
testcounts, events; ``features.patches``): bad input named by file and line or field, unknown
types kept, test summaries, apply_patch bodies.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from features.patches import parse_apply_patch
from features.readers import TrajectoryFormatError, UnknownEventWarning, read_trajectory
from features.readers.fields import (
    _MISSING,
    INT_TEXT,
    Loc,
    Shape,
    _checked_get,
    get,
    int_field,
    need,
    parse_iso,
)
from features.readers.testcounts import parse_test_counts
from features.schema import EventKind

CODEX_EXEC = "codex_exec_jsonl"
ROLLOUT_FILE = "codex_rollout/agentcmd_rollout-2025-09-24T19-22-20-01997e76.jsonl"
MINI_FILE = "mini_swe_agent/django__django-16255.traj.json"
SWE_0X = "swe_agent/testdata_gpt4_swe-agent__test-repo-i1.traj"
OH_BASIC = "openhands/basic.json"
OH_WRONG = "openhands/wrong_initial_state.json"


def test_apply_patch_headers() -> None:
    patch = (
        "*** Begin Patch\n*** Add File: /abs/new.py\n+print('hé')\n+x = 1\n"
        "*** Update File: src/a.py\n*** Move to: src/b.py\n@@\n-old\n+new\n"
        "*** Delete File: gone.txt\n*** End Patch\n"
    )
    parsed = parse_apply_patch(patch)
    assert parsed is not None
    assert parsed["paths"] == ["/abs/new.py", "src/a.py", "src/b.py", "gone.txt"]
    assert [o["op"] for o in parsed["ops"]] == ["add", "update", "move", "delete"]
    assert parsed["written"] == ["/abs/new.py", "src/b.py"]
    assert parsed["deleted"] == ["src/a.py", "gone.txt"]
    assert parsed["added_bytes"] == len("print('hé')\n".encode()) + len("x = 1\n") + len("new\n")
    assert parse_apply_patch("echo hi") is None


@pytest.mark.parametrize("out,expected", [
    ("===== 3 passed, 1 failed, 2 errors in 0.50s =====", (3, 3)),
    ("5 passed in 0.12s", (5, 0)),
    ("Ran 60 tests in 0.733s\n\nOK", (60, 0)),
    ("Ran 5 tests in 1.0s\n\nFAILED (failures=1, errors=1)", (3, 2)),
    ("Ran 4 tests in 1.0s\n\nOK (skipped=1)", (3, 0)),
    ("Tests:       1 failed, 5 passed, 6 total", (5, 1)),
    ("\x1b[2m      Tests \x1b[22m 1 failed | 244 passed (245)", (244, 1)),
    ("test result: ok. 7 passed; 0 failed; 0 ignored\ntest result: FAILED. 1 passed; 2 failed",
     (8, 2)),
    ("  12 passing (30ms)\n  1 failing", (12, 1)),
    ("nothing to see", (None, None)),
])
def test_parse_test_counts(out: str, expected: tuple) -> None:
    assert parse_test_counts(out) == expected


def test_unknown_types_kept_as_other(tmp_path: Path, fixture_path: Callable[[str], Path], write_jsonl: Callable[..., Path], kinds: Callable[..., list]) -> None:
    p = write_jsonl("unk.jsonl", [
        {"type": "thread.started", "thread_id": "t"},
        {"type": "turn.started"},
        {"type": "item.completed", "item": {"id": "item_0", "type": "hologram", "x": 1}},
        {"type": "session.teleported", "where": "mars"},
        {"type": "turn.completed", "usage": {"input_tokens": 1, "cached_input_tokens": 0,
                                             "output_tokens": 1}},
    ])
    with pytest.warns(UnknownEventWarning) as rec:
        t = read_trajectory(p)
    assert len(rec) == 2 and "line 3" in str(rec[0].message) and "line 4" in str(
        rec[1].message)
    other = kinds(t, EventKind.OTHER)
    assert [e.extra.get("item_type") or e.extra.get("event_type") for e in other] == [
        "hologram", "session.teleported"]
    assert other[0].extra["x"] == 1 and other[1].extra["where"] == "mars"

    src = fixture_path(ROLLOUT_FILE)
    lines = src.read_text(encoding="utf-8").splitlines(True)[:12]
    lines.insert(6, json.dumps({"timestamp": "2025-09-25T01:22:24.800Z", "type": "event_msg",
                                "payload": {"type": "quantum_event", "spin": "up"}}) + "\n")
    q = tmp_path / "rollout.jsonl"
    q.write_text("".join(lines), encoding="utf-8")
    with pytest.warns(UnknownEventWarning, match="line 7"):
        t2 = read_trajectory(q)
    (qe,) = [e for e in t2.events if e.extra.get("payload_type") == "quantum_event"]
    assert qe.kind == EventKind.OTHER and qe.extra["spin"] == "up"




def test_bad_empty_and_binary(write_file: Callable[..., Path]) -> None:
    for name, data, pat in [
        ("empty.jsonl", b"", "empty file"),
        ("blank.json", b"\n  \n", "empty file"),
        ("garbage.bin", bytes(range(256)) * 4, "binary data"),
        ("latin1.jsonl", '{"type": "turn.started", "x": "caf\xe9"}\n'.encode("latin-1"),
         "line 1: not UTF-8"),
    ]:
        p = write_file(name, data)
        with pytest.raises(TrajectoryFormatError, match=pat) as ei:
            read_trajectory(p)
        assert str(p) in str(ei.value)


def test_bad_jsonl_lines(fixture_path: Callable[[str], Path], write_file: Callable[..., Path]) -> None:
    src = fixture_path(f"{CODEX_EXEC}/agentcmd_stream-output-2.jsonl")
    lines = src.read_text(encoding="utf-8").splitlines(True)
    # truncated line in the middle
    mid = lines[:3] + [lines[3][:40] + "\n"] + lines[4:]
    p = write_file("mid.jsonl", "".join(mid))
    with pytest.raises(TrajectoryFormatError, match=r"mid\.jsonl: line 4: not valid JSON"):
        read_trajectory(p)
    # non-JSON text line
    p2 = write_file("text.jsonl", "".join(lines[:2] + ["Reading prompt from stdin\n"]
                                              + lines[2:]))
    with pytest.raises(TrajectoryFormatError, match=r"text\.jsonl: line 3"):
        read_trajectory(p2)
    # a JSON array where an object belongs
    p3 = write_file("arr.jsonl", "".join(lines[:2] + ["[1, 2]\n"]))
    with pytest.raises(TrajectoryFormatError, match=r"arr\.jsonl: line 3: expected a JSON object"):
        read_trajectory(p3)


def test_torn_last_line_is_an_error_unless_allowed(fixture_path: Callable[[str], Path], kinds: Callable[..., list], write_file: Callable[..., Path]) -> None:
    src = fixture_path(f"{CODEX_EXEC}/tielec_issue-119_00_planning_execute.jsonl")
    lines = src.read_text(encoding="utf-8").splitlines(True)
    torn = "".join(lines[:-1]) + lines[-1][:30]  # cut mid-write, no newline
    p = write_file("torn.jsonl", torn)
    n = len(lines)
    with pytest.raises(TrajectoryFormatError, match=rf"line {n}: .*stream cut mid-write"):
        read_trajectory(p)
    with pytest.warns(UserWarning, match="torn last line"):
        t = read_trajectory(p, allow_truncated_tail=True)
    assert t.meta["truncated_tail"]["line"] == n
    assert kinds(t, EventKind.MODEL_CALL) == []  # the turn.completed line was the torn one
    assert len(kinds(t, EventKind.COMMAND)) == 9


def test_bad_field_types(fixture_path: Callable[[str], Path], write_jsonl: Callable[..., Path], write_file: Callable[..., Path]) -> None:
    # codex-exec: usage must be an object
    p = write_jsonl("usage.jsonl", [
        {"type": "thread.started", "thread_id": "t"}, {"type": "turn.started"},
        {"type": "turn.completed", "usage": "lots"}])
    with pytest.raises(TrajectoryFormatError, match=r"usage\.jsonl: line 3: field usage: "
                                                    r"expected object, got string"):
        read_trajectory(p)
    p = write_jsonl("exit.jsonl", [
        {"type": "thread.started", "thread_id": "t"}, {"type": "turn.started"},
        {"type": "item.completed", "item": {"id": "i", "type": "command_execution",
                                            "command": "ls", "exit_code": "zero"}}])
    with pytest.raises(TrajectoryFormatError, match=r"line 3: field item.exit_code"):
        read_trajectory(p)
    # rollout: bad timestamp
    r = write_jsonl("roll.jsonl", [
        {"timestamp": "2025-09-25T01:22:20.083Z", "type": "session_meta", "payload": {}},
        {"timestamp": "yesterday", "type": "event_msg", "payload": {"type": "user_message"}}])
    with pytest.raises(TrajectoryFormatError, match=r"roll\.jsonl: line 2: field timestamp"):
        read_trajectory(r)
    # mini-swe-agent: role must be a string (field path named)
    doc = json.loads(fixture_path(MINI_FILE).read_text(encoding="utf-8"))
    doc["messages"][3]["role"] = 7
    m = write_file("m.traj.json", json.dumps(doc))
    with pytest.raises(TrajectoryFormatError, match=r"field messages\[3\]\.role: expected "
                                                    r"string, got integer"):
        read_trajectory(m)
    # SWE-agent: action must be a string; 0.x state must hold JSON
    doc = json.loads(fixture_path(SWE_0X).read_text(encoding="utf-8"))
    doc["trajectory"][2]["action"] = ["edit"]
    s = write_file("s.traj", json.dumps(doc))
    with pytest.raises(TrajectoryFormatError, match=r"s\.traj: field trajectory\[2\]\.action"):
        read_trajectory(s)
    doc = json.loads(fixture_path(SWE_0X).read_text(encoding="utf-8"))
    doc["trajectory"][1]["state"] = "{not json"
    s2 = write_file("s2.traj", json.dumps(doc))
    with pytest.raises(TrajectoryFormatError, match=r"field trajectory\[1\]\.state"):
        read_trajectory(s2)
    # OpenHands: bad timestamp, named by list position
    evs = json.loads(fixture_path(OH_WRONG).read_text(encoding="utf-8"))
    evs[2]["timestamp"] = 12
    o = write_file("o.json", json.dumps(evs))
    with pytest.raises(TrajectoryFormatError, match=r"o\.json: field \[2\]\.timestamp"):
        read_trajectory(o)
    # broken pretty-printed JSON: the error names the real line
    text = fixture_path(OH_BASIC).read_text(encoding="utf-8")
    broken = json.dumps(json.loads(text), indent=1).splitlines()
    broken[5] = broken[5] + " ,,"
    b = write_file("b.json", "\n".join(broken))
    with pytest.raises(TrajectoryFormatError, match=r"b\.json: line 6 column"):
        read_trajectory(b)


@settings(max_examples=300, deadline=None)
@given(st.datetimes(), st.sampled_from(["", "Z", "+00:00", "+05:30", "-08:00"]))
def test_parse_iso_is_the_timestamp_of_the_time_taken_as_utc(dt: datetime, zone: str) -> None:
    """Naive times are UTC: the same float as ``replace(tzinfo=UTC).timestamp()``, to the
    last bit (the reader computes it by a cheaper road)."""
    text = dt.isoformat() + zone
    want = datetime.fromisoformat(text)
    if want.tzinfo is None:
        want = want.replace(tzinfo=UTC)
    assert parse_iso(text, Loc("x.jsonl", 1)) == want.timestamp()
    assert parse_iso(f" {text} ", Loc("x.jsonl", 1)) == want.timestamp()  # the slow road


_OUTPUT_PIECES = ["=== 3 passed in 0.5s ===", "3 passed, 1 failed in 2.1s", "  ", "", "===",
                  "x in 5s", "12 passed", " in 1.0s", "\t", "== 1 error in 0.1s", "for i in r",
                  "===== 2 failed, 3 passed in 10.22s =====", "1 passed\nin 3s", "\n\n", "=",
                  "1 passed in\n\n2s", "4 passed in 1.5ss", "5 xfailed in 1s"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_OUTPUT_PIECES), max_size=8), st.booleans(), st.booleans())
def test_pytest_summaries_are_found_as_the_multiline_pattern_finds_them(
        pieces: list[str], lead: bool, tail: bool) -> None:
    """The summaries are found by scanning for newlines (a literal the regex engine skips
    to), not by trying "^" at every position: the same summaries, in the same order."""
    from features.readers.testcounts import _PYTEST_SUMMARY, _pytest_summaries

    text = ("\n" if lead else "") + "\n".join(pieces) + ("\n" if tail else "")
    assert [m.group("body") for m in _pytest_summaries(text)] == [
        m.group("body") for m in _PYTEST_SUMMARY.finditer(text)]


_SHAPE_TYPES = [str, int, float, dict, list, bool, (str, int), (dict, type(None)), (int, float),
                (str, type(None)), INT_TEXT]
_SHAPE_VALUES = [None, "x", "", "12", 0, 7, -3, 2**63, -(2**63) - 1, 2**63 - 1, True, False,
                 1.5, 3.0, float("inf"), float("nan"), 2.5e308, {}, {"a": 1}, [], [1]]


def _read_one(obj: dict, key: str, typ: object, loc: Loc, required: bool) -> object:
    """What get() (int_field for INT_TEXT) returns or raises for one field."""
    try:
        if typ is INT_TEXT:
            return ("ok", int_field(obj.get(key), loc, "rec", key))
        return ("ok", get(obj, key, typ, loc, "rec", required=required))
    except Exception as exc:  # noqa: BLE001 - the error is the result compared
        return ("err", type(exc).__name__, str(exc))


@pytest.mark.parametrize("typ", _SHAPE_TYPES, ids=str)
@pytest.mark.parametrize("required", [False, True])
def test_shape_reads_every_field_as_get_does(typ: object, required: bool) -> None:
    """A Shape's one-call read gives, for every value (missing, null, each JSON type, out of
    range), what get() or int_field gives field by field: the value, or the same error."""
    shape = Shape(("a", typ), ("b", str), required=("a",) if required else ())
    loc = Loc("log.jsonl", 3)
    for v in [*_SHAPE_VALUES, "missing"]:
        obj = {"b": "ok"} if v == "missing" else {"a": v, "b": "ok"}
        want = _read_one(obj, "a", typ, loc, required)
        try:
            got: object = ("ok", shape.read(obj, loc, "rec")[0])
        except Exception as exc:  # noqa: BLE001
            got = ("err", type(exc).__name__, str(exc))
        assert got == want and type(got[1]) is type(want[1]), (v, got, want)


def _outcome(f: Callable[[], object]) -> tuple:
    """What a read gives: its value and the value's type, or its error's type and words."""
    try:
        v = f()
    except Exception as exc:  # noqa: BLE001 - the error is the result compared
        return ("err", type(exc).__name__, str(exc))
    return ("ok", v, type(v))


@pytest.mark.parametrize("typ", [t for t in _SHAPE_TYPES if t is not INT_TEXT], ids=str)
@pytest.mark.parametrize("required", [False, True])
def test_get_fast_path_returns_what_the_checked_read_does(typ: object, required: bool) -> None:
    """get()'s fast path (a value of the wanted type returned at once) gives what its full
    checked read gives: the same value of the same type, or the same error."""
    loc = Loc("log.json", None, "doc")
    for v in [*_SHAPE_VALUES, _MISSING]:
        obj = {} if v is _MISSING else {"k": v}
        fast = _outcome(lambda o=obj: get(o, "k", typ, loc, "rec", 2, required=required,
                                          default=5))
        full = _outcome(lambda o=obj: _checked_get(o.get("k", _MISSING), "k", typ, loc,
                                                   ("rec", 2), required, 5))
        assert fast == full, (v, fast, full)


@pytest.mark.parametrize("typ", _SHAPE_TYPES, ids=str)
@pytest.mark.parametrize("required", [False, True])
def test_shape_reads_a_field_of_an_object_it_read_as_get_does(typ: object,
                                                              required: bool) -> None:
    """A Shape's field of an object it read (``("m", "a")`` after ``("m", ...)``) gives what
    get() gives reading that object's field, None when the object is null or missing; the
    fields before and after it are read in order (first bad field first)."""
    shape = Shape(("m", (dict, type(None))), (("m", "a"), typ), ("b", str),
                  required=(("m", "a"),) if required else ())
    loc = Loc("log.jsonl", 3)

    def sequential(obj: dict) -> tuple:
        m = get(obj, "m", (dict, type(None)), loc, "rec")
        if m is None:
            a = None
        elif typ is INT_TEXT:
            a = int_field(m.get("a"), loc, "rec", "m", "a")
        else:
            a = get(m, "a", typ, loc, "rec", "m", required=required)
        return m, a, get(obj, "b", str, loc, "rec")

    def outcome(f: Callable[[], tuple]) -> tuple:
        try:
            return ("ok", f(), tuple(type(x) for x in f()))
        except Exception as exc:  # noqa: BLE001 - the error is the result compared
            return ("err", type(exc).__name__, str(exc))

    for v in [*_SHAPE_VALUES, "missing"]:
        m = {} if v == "missing" else {"a": v}
        for obj in ({"m": m, "b": "ok"}, {"m": m, "b": 5}, {"m": None, "b": "ok"}, {"b": "ok"},
                    {"m": [m], "b": "ok"}):
            want = outcome(lambda o=obj: sequential(o))
            got = outcome(lambda o=obj: shape.read(o, loc, "rec"))
            assert got == want, (obj, got, want)


@pytest.mark.parametrize("typ", [t for t in _SHAPE_TYPES if t is not INT_TEXT], ids=str)
def test_need_is_get_of_a_required_field(typ: object) -> None:
    """need() gives what get(..., required=True) gives: the value, or the same error."""
    loc = Loc("log.jsonl", 7)
    for v in [*_SHAPE_VALUES, _MISSING]:
        obj = {} if v is _MISSING else {"k": v}
        assert _outcome(lambda o=obj: need(o, "k", typ, loc)) == _outcome(
            lambda o=obj: get(o, "k", typ, loc, required=True)), v
