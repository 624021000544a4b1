"""The canonical schema: invariants, boundaries, and a lossless DataFrame/Parquet round trip."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from features.schema import (
    Event,
    EventKind,
    Trajectory,
    from_frame,
    read_parquet,
    to_frame,
    write_parquet,
)


def _traj() -> Trajectory:
    return Trajectory(
        "t1", "org/repo", "test",
        [
            Event(0, EventKind.MODEL_CALL, step=1, input_tokens=10, cached_tokens=2, output_tokens=3),
            Event(1, "command", step=1, command="ls", argv=["ls"], exit_code=0, duration=0.5,
                  paths_read=["."], safe_boundary=True, boundary_kind="tool_return"),
            Event(2, "file_change", step=1, paths_written=["a.py"], bytes_written=12,
                  safe_boundary=True, boundary_kind="tool_return", turn_end=True),
            Event(3, "test", step=2, command="pytest", tests_passed=3, tests_failed=1, exit_code=1,
                  safe_boundary=True, boundary_kind="test", start=1.0, end=2.5),
            Event(4, "message", step=2, text="done", turn_end=True, extra={"raw": {"k": [1, None]}}),
        ],
        {"verified": True, "exit_status": "submitted"},
    )


def test_boundaries_turn_and_tool_call():
    t = _traj()
    assert t.boundaries("tool_call") == [1, 2, 3]
    assert t.boundaries("turn") == [2, 3]
    with pytest.raises(ValueError, match="granularity"):
        t.boundaries("minute")


def test_elapsed_is_never_invented():
    t = _traj()
    assert t.events[1].elapsed == 0.5
    assert t.events[3].elapsed == 1.5
    assert t.events[0].elapsed is None


def test_boundary_kind_requires_safe_flag():
    with pytest.raises(ValueError, match="safe_boundary"):
        Event(0, "command", boundary_kind="test")


def test_validate_names_the_bad_event():
    t = _traj()
    t.events[2].index = 7
    with pytest.raises(ValueError, match="position 2"):
        t.validate()


class _Text(str):
    pass


@pytest.mark.parametrize("field, value, message", [
    ("start", math.nan, "field start is nan"),
    ("end", math.inf, "field end is inf"),
    ("duration", -1.0, "field duration is negative"),
    ("duration", True, "field duration is bool, not a number"),
    ("input_tokens", 2**63, "field input_tokens is 9.22e\\+18, beyond"),
    ("exit_code", 1.0, "field exit_code is float, not an integer"),
    ("tests_passed", False, "field tests_passed is bool"),
    ("command", "x\ud800", "field command holds a lone surrogate"),
    ("text", b"x", "field text is bytes, not text"),
    ("argv", ["ls", "\udfff"], "field argv holds a lone surrogate"),
    ("argv", ("ls",), "field argv is tuple, not a list"),
    ("paths_read", ["a", 3], "field paths_read is int, not text"),
    ("paths_written", "", "field paths_written is str, not a list"),
])
def test_validate_names_a_value_no_column_holds(field, value, message):
    t = _traj()
    setattr(t.events[3], field, value)
    with pytest.raises(ValueError, match=rf"t1: event 3 {message}"):
        t.validate()


@pytest.mark.parametrize("field, value", [
    ("command", "\u00e9cho h\u00e9"), ("text", _Text("a str subclass")), ("argv", ["\u00e9", _Text("x")]),
    ("paths_read", []), ("argv", None), ("start", 2**70), ("duration", 0),
])
def test_validate_passes_what_a_column_holds(field, value):
    t = _traj()
    setattr(t.events[3], field, value)
    t.validate()


def test_frame_and_parquet_round_trip(tmp_path):
    t = _traj()
    assert from_frame(to_frame(t)) == [t]
    write_parquet([t], tmp_path / "t.parquet")
    assert read_parquet(tmp_path / "t.parquet") == [t]
    assert not (tmp_path / "t.parquet.tmp").exists()


def test_read_parquet_refuses_foreign_table(tmp_path):
    import pandas as pd

    pd.DataFrame({"a": [1]}).to_parquet(tmp_path / "x.parquet")
    with pytest.raises(ValueError, match="x.parquet"):
        read_parquet(tmp_path / "x.parquet")


_opt_int = st.one_of(st.none(), st.integers(0, 2**40))
_opt_float = st.one_of(st.none(), st.floats(0, 1e6, allow_nan=False))
_paths = st.lists(st.text(min_size=1, max_size=8), max_size=3)


@st.composite
def _events(draw):
    n = draw(st.integers(1, 6))
    out, step = [], 1
    for i in range(n):
        step += draw(st.integers(0, 1))
        safe = draw(st.booleans())
        out.append(Event(
            i, draw(st.sampled_from(list(EventKind))), step=step, start=draw(_opt_float),
            duration=draw(_opt_float), input_tokens=draw(_opt_int), output_tokens=draw(_opt_int),
            command=draw(st.one_of(st.none(), st.text(max_size=20))),
            argv=draw(st.one_of(st.none(), st.lists(st.text(max_size=5), max_size=3))),
            exit_code=draw(st.one_of(st.none(), st.integers(-9, 255))), paths_read=draw(_paths),
            paths_written=draw(_paths), safe_boundary=safe,
            boundary_kind=draw(st.sampled_from(["tool_return", "commit", "test"])) if safe else None,
            is_error=draw(st.booleans()), text=draw(st.one_of(st.none(), st.text(max_size=10))),
            extra=draw(st.dictionaries(st.text(max_size=4), st.one_of(st.integers(), st.text(max_size=4)), max_size=2)),
        ))
    return out


@settings(max_examples=40, deadline=None)
@given(events=_events())
def test_round_trip_property(events):
    t = Trajectory("task", "repo", "gen", events, {"n": len(events)})
    t.validate()
    back = from_frame(to_frame(t))[0]
    assert back == t
    for e in back.events:
        for name in ("start", "duration"):
            v = getattr(e, name)
            assert v is None or math.isfinite(v)


def test_from_frame_names_the_bad_column_or_row():
    t = _traj()
    df = to_frame(t)
    bad_kind = df.copy()
    bad_kind.loc[1, "kind"] = "bogus"
    with pytest.raises(ValueError, match="column kind has unknown event kind 'bogus'"):
        from_frame(bad_kind)
    bad_extra = df.copy()
    bad_extra.loc[0, "extra"] = "{not json"
    with pytest.raises(ValueError, match="row 0: column extra is not JSON"):
        from_frame(bad_extra)
    bad_step = df.copy()
    bad_step["step"] = bad_step["step"].astype(object)
    bad_step.loc[0, "step"] = "seven"
    with pytest.raises(ValueError, match="trajectory frame"):
        from_frame(bad_step)
    unsafe = df.copy()
    unsafe.loc[0, "safe_boundary"] = False
    unsafe.loc[0, "boundary_kind"] = "commit"
    with pytest.raises(ValueError, match="row 0: event 0: boundary_kind set but safe_boundary is False"):
        from_frame(unsafe)


def test_several_trajectories_keep_first_appearance_order(tmp_path):
    a, b = _traj(), _traj()
    b.task_id, b.meta = "other", {"k": [1, 2]}
    write_parquet([b, a], tmp_path / "ab.parquet")
    assert read_parquet(tmp_path / "ab.parquet") == [b, a]
    assert from_frame(to_frame([a, b])) == [a, b]


_ODD_VALUES = [None, 0, -1, 2**63 - 1, 2**63, -(2**63) - 1, True, 1.5, -0.5, math.nan, math.inf,
               "x", "é", "\ud800", [], ["a"], ["a", "é"], ["a", 1], ["\ud800"], ("a",), {}]
_CHECKED_FIELDS = ["index", "step", "start", "end", "duration", "input_tokens", "cached_tokens",
                   "output_tokens", "command", "argv", "exit_code", "paths_read",
                   "paths_written", "bytes_written", "tests_passed", "tests_failed", "text"]


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(_CHECKED_FIELDS), st.sampled_from(_ODD_VALUES),
                       max_size=4))
def test_validation_fast_path_passes_only_what_fits(values: dict) -> None:
    """The validation's fast path (_surely_fits) never passes a value the full check refuses,
    and passes a plain event of ASCII text (the full check decides the rest)."""
    from features.schema import _check_values, _surely_fits

    e = Event(0, EventKind.COMMAND, command="ls", argv=["ls", "-l"], text="ok", exit_code=0)
    assert _surely_fits(e)
    for name, v in values.items():
        setattr(e, name, v)
    if _surely_fits(e):
        _check_values(e, "event")  # raises if the fast path passed what does not fit
