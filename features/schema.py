"""Canonical trajectory schema: every reader produces it, every other package consumes it.

An :class:`Event` is one observable thing an agent did (a model call, a command, a file
change, a test run, a message). Quantities a log does not record stay ``None``: a reader
never invents a duration or a token count. Fields a reader does not map go to ``extra``.

Safe boundaries (paper, Appendix A) are marked on the event after which the boundary
falls: after a tool returns (``tool_return``), after a commit (``commit``), after a test
or verifier (``test``). ``turn_end`` marks the last event of a logical step (turn): the
coarse candidates of the pilot. The fine candidates (Appendix G.5) are the tool-call
boundaries. :meth:`Trajectory.boundaries` returns either set.

Logical steps are numbered from 1, as in the paper ("after step 1").
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from features.files import write_atomic
from features.gc_pause import gc_paused

if TYPE_CHECKING:  # pandas and pyarrow are imported where a table is built or read
    import pandas as pd
    import pyarrow as pa

SCHEMA_VERSION = "1"


class EventKind(StrEnum):
    MODEL_CALL = "model_call"
    COMMAND = "command"
    FILE_CHANGE = "file_change"
    TEST = "test"
    MESSAGE = "message"
    OTHER = "other"


class BoundaryKind(StrEnum):
    TOOL_RETURN = "tool_return"
    COMMIT = "commit"
    TEST = "test"


Granularity = Literal["turn", "tool_call"]


class Event(msgspec.Struct):
    """One observable agent event. Times are seconds (epoch or relative to the run start).

    A msgspec Struct, not a dataclass: readers build one per event, by keyword, and a
    Struct's keyword construction runs in C (about a third of a slotted dataclass's time
    with 23 fields, measured in ``benchmarks/bench_readers.py``); fields, defaults, equality
    and ``__post_init__`` behave as the dataclass's did."""

    index: int
    kind: EventKind
    step: int = 1
    start: float | None = None
    end: float | None = None
    duration: float | None = None
    input_tokens: int | None = None
    cached_tokens: int | None = None
    output_tokens: int | None = None
    command: str | None = None
    argv: list[str] | None = None
    exit_code: int | None = None
    paths_read: list[str] = msgspec.field(default_factory=list)
    paths_written: list[str] = msgspec.field(default_factory=list)
    bytes_written: int | None = None
    tests_passed: int | None = None
    tests_failed: int | None = None
    safe_boundary: bool = False
    boundary_kind: BoundaryKind | None = None
    turn_end: bool = False
    is_error: bool = False
    text: str | None = None
    extra: dict[str, Any] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        if type(self.kind) is not EventKind:
            self.kind = EventKind(self.kind)
        if self.boundary_kind is not None and type(self.boundary_kind) is not BoundaryKind:
            self.boundary_kind = BoundaryKind(self.boundary_kind)
        if self.boundary_kind is not None and not self.safe_boundary:
            raise ValueError(f"event {self.index}: boundary_kind set but safe_boundary is False")

    @property
    def elapsed(self) -> float | None:
        """Duration if known, else end - start if both known, else None (never guessed)."""
        if self.duration is not None:
            return self.duration
        if self.start is not None and self.end is not None:
            return self.end - self.start
        return None


@dataclass
class Trajectory:
    """One agent run on one task: ordered events plus run-level metadata."""

    task_id: str
    repo: str
    source_format: str
    events: list[Event] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def boundaries(self, granularity: Granularity = "turn") -> list[int]:
        """Event indices after which a candidate boundary falls, in trajectory order.

        ``"turn"``: the last safe boundary of each logical step (the pilot's candidates);
        ``"tool_call"``: every safe boundary (Appendix G.5's finer re-cut).
        """
        if granularity == "tool_call":
            return [e.index for e in self.events if e.safe_boundary]
        if granularity != "turn":
            raise ValueError(f"granularity must be 'turn' or 'tool_call', got {granularity!r}")
        last_by_step: dict[int, int] = {}
        for e in self.events:
            if e.safe_boundary:
                last_by_step[e.step] = e.index
        return [last_by_step[s] for s in sorted(last_by_step)]

    def cut(self, event_index: int) -> Trajectory:
        """The prefix up to and including ``event_index``: what a runtime has seen there."""
        return Trajectory(
            self.task_id,
            self.repo,
            self.source_format,
            [e for e in self.events if e.index <= event_index],
            dict(self.meta),
        )

    def validate(self) -> None:
        """Check the invariants every reader must meet, and that every value fits its table
        column (so a validated trajectory always round-trips through Parquet): times
        finite, durations not negative, integers within 64 bits, text without lone
        surrogates. Raise ValueError naming the event and field."""
        for name in ("task_id", "repo", "source_format"):
            _check_text(getattr(self, name), f"{self.task_id!r}: field {name}")
        prev = None  # the step before
        for pos, e in enumerate(self.events):
            if e.index != pos:
                raise ValueError(f"{self.task_id}: event at position {pos} has index {e.index}")
            step = e.step
            if pos and step < prev:
                raise ValueError(f"{self.task_id}: event {pos} step {step} goes backwards")
            prev = step
            if not _surely_fits(e):
                _check_values(e, f"{self.task_id}: event {pos}")


#: the bounds of a signed 64-bit integer: what Arrow's int64 columns hold (the one home of
#: these bounds; readers and the checkpoint store check against them)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _surely_fits(e: Event) -> bool:
    """The fast path of :func:`_check_values`: True when every value certainly fits its
    column (plain types, finite, in range, ASCII text), False sends the event to the full
    check, which names what does not fit (or passes non-ASCII text that is valid). A list
    of words is checked by one join (a non-text item fails it: TypeError). Written out
    flat, field by field (every event of every read passes here)."""
    lo, hi = INT64_MIN, INT64_MAX
    v, w = e.index, e.step
    if not (v.__class__ is int and w.__class__ is int and lo <= v <= hi and lo <= w <= hi):
        return False
    v = e.start
    if v is not None and ((v.__class__ is not float and v.__class__ is not int) or v - v != 0):
        return False
    v = e.end
    if v is not None and ((v.__class__ is not float and v.__class__ is not int) or v - v != 0):
        return False
    v = e.duration
    if v is not None and ((v.__class__ is not float and v.__class__ is not int)
                          or v - v != 0 or v < 0):
        return False
    a, b, c, d, f, g, h = (e.input_tokens, e.cached_tokens, e.output_tokens, e.exit_code,
                           e.bytes_written, e.tests_passed, e.tests_failed)
    if not ((a is None or (a.__class__ is int and lo <= a <= hi))
            and (b is None or (b.__class__ is int and lo <= b <= hi))
            and (c is None or (c.__class__ is int and lo <= c <= hi))
            and (d is None or (d.__class__ is int and lo <= d <= hi))
            and (f is None or (f.__class__ is int and lo <= f <= hi))
            and (g is None or (g.__class__ is int and lo <= g <= hi))
            and (h is None or (h.__class__ is int and lo <= h <= hi))):
        return False
    v = e.command
    if v is not None and (v.__class__ is not str or not v.isascii()):
        return False
    v = e.text
    if v is not None and (v.__class__ is not str or not v.isascii()):
        return False
    # the lists: None or a list (usually empty but argv), their words ASCII text
    a, b, c = e.argv, e.paths_read, e.paths_written
    if not ((a is None or a.__class__ is list) and (b is None or b.__class__ is list)
            and (c is None or c.__class__ is list)):
        return False
    if a or b or c:
        try:
            return ("".join(a).isascii() if a else True) and (
                "".join(b).isascii() if b else True) and ("".join(c).isascii() if c else True)
        except TypeError:
            return False
    return True


def _check_text(v: object, where: str) -> None:
    if not isinstance(v, str):
        raise ValueError(f"{where} is {type(v).__name__}, not text")
    if not v.isascii():
        try:
            v.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"{where} holds a lone surrogate at character {exc.start} "
                             "(not UTF-8 text: no table column can hold it)") from None


def _check_values(e: Event, where: str) -> None:
    """Every field of ``e`` fits its :func:`parquet_schema` column."""
    for name in _FLOAT_FIELDS:
        v = getattr(e, name)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ValueError(f"{where} field {name} is {type(v).__name__}, not a number")
        if not math.isfinite(v):
            raise ValueError(f"{where} field {name} is {v}")
        if name == "duration" and v < 0:
            raise ValueError(f"{where} field duration is negative ({v:g} s)")
    for name in _INT_FIELDS:
        v = getattr(e, name)
        if v is None:
            continue
        if type(v) is not int:
            raise ValueError(f"{where} field {name} is {type(v).__name__}, not an integer")
        if not INT64_MIN <= v <= INT64_MAX:
            raise ValueError(f"{where} field {name} is {v:.3g}, beyond the 64-bit range")
    for name in ("command", "text"):
        v = getattr(e, name)
        if v is not None:
            _check_text(v, f"{where} field {name}")
    for name in ("argv", "paths_read", "paths_written"):
        vs = getattr(e, name)
        if vs is None:
            continue
        if not isinstance(vs, list):
            raise ValueError(f"{where} field {name} is {type(vs).__name__}, not a list")
        for v in vs:
            _check_text(v, f"{where} field {name}")


# ---------------------------------------------------------------------------------------
# DataFrame / Parquet round trip
# ---------------------------------------------------------------------------------------

_EVENT_FIELDS = list(Event.__struct_fields__)
_TRAJ_COLUMNS = ["task_id", "repo", "source_format", "traj_meta"]

#: the trajectory table's columns and their Arrow types (``list`` is a list of strings)
_COLUMNS = (
    ("task_id", "string"),
    ("repo", "string"),
    ("source_format", "string"),
    ("traj_meta", "string"),
    ("index", "int64"),
    ("kind", "string"),
    ("step", "int64"),
    ("start", "float64"),
    ("end", "float64"),
    ("duration", "float64"),
    ("input_tokens", "int64"),
    ("cached_tokens", "int64"),
    ("output_tokens", "int64"),
    ("command", "string"),
    ("argv", "list"),
    ("exit_code", "int64"),
    ("paths_read", "list"),
    ("paths_written", "list"),
    ("bytes_written", "int64"),
    ("tests_passed", "int64"),
    ("tests_failed", "int64"),
    ("safe_boundary", "bool"),
    ("boundary_kind", "string"),
    ("turn_end", "bool"),
    ("is_error", "bool"),
    ("text", "string"),
    ("extra", "string"),
)
COLUMN_NAMES = tuple(name for name, _ in _COLUMNS)


@cache
def parquet_schema() -> pa.Schema:
    """The trajectory table's Arrow schema (built on first use: ``import features.schema``
    stays free of pyarrow and pandas)."""
    import pyarrow as pa

    types = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64(),
             "bool": pa.bool_(), "list": pa.list_(pa.string())}
    return pa.schema(
        [(name, types[kind]) for name, kind in _COLUMNS],
        metadata={"ripplecp.schema": "trajectory", "ripplecp.schema_version": SCHEMA_VERSION},
    )


_INT_FIELDS = frozenset({
    "index", "step", "input_tokens", "cached_tokens", "output_tokens",
    "exit_code", "bytes_written", "tests_passed", "tests_failed",
})
_FLOAT_FIELDS = ("start", "end", "duration")
_BOOL_FIELDS = ("safe_boundary", "turn_end", "is_error")
_KINDS = {k.value: k for k in EventKind}
_BOUNDARY_KINDS = {k.value: k for k in BoundaryKind}


def _json_or_empty(obj: dict[str, Any]) -> str:
    return json.dumps(obj, sort_keys=True, default=str) if obj else "{}"


def _to_table(trajectories: Trajectory | Iterable[Trajectory]) -> pa.Table:
    """The events as an Arrow table with :func:`parquet_schema`, built column by column."""
    import pyarrow as pa

    if isinstance(trajectories, Trajectory):
        trajectories = [trajectories]
    cols: dict[str, list[Any]] = {name: [] for name in COLUMN_NAMES}
    for t in trajectories:
        ev = t.events
        n = len(ev)
        cols["task_id"] += [t.task_id] * n
        cols["repo"] += [t.repo] * n
        cols["source_format"] += [t.source_format] * n
        cols["traj_meta"] += [json.dumps(t.meta, sort_keys=True, default=str)] * n
        for name in _EVENT_FIELDS:
            if name in ("kind", "boundary_kind", "extra"):
                continue
            cols[name] += [getattr(e, name) for e in ev]
        cols["kind"] += [str(e.kind) for e in ev]
        cols["boundary_kind"] += [None if e.boundary_kind is None else str(e.boundary_kind) for e in ev]
        cols["extra"] += [_json_or_empty(e.extra) for e in ev]
    return pa.Table.from_pydict(cols, schema=parquet_schema())


def _from_table(table: pa.Table, where: str) -> list[Trajectory]:
    """Trajectories (first-appearance order) from a table with :func:`parquet_schema`'s
    columns; ``where`` names the source in errors."""
    missing = [c for c in COLUMN_NAMES if c not in table.column_names]
    if missing:
        raise ValueError(f"{where}: missing columns {missing}")
    cols = {name: table.column(name).to_pylist() for name in COLUMN_NAMES}
    for name in _FLOAT_FIELDS:  # NaN (e.g. from a pandas frame) is a missing value
        cols[name] = [None if v is None or v != v else v for v in cols[name]]
    for name in _BOOL_FIELDS:
        cols[name] = [bool(v) for v in cols[name]]  # missing -> False
    for name in ("paths_read", "paths_written"):
        cols[name] = [[] if v is None else v for v in cols[name]]
    try:
        cols["kind"] = [_KINDS[v] for v in cols["kind"]]
    except KeyError as exc:
        raise ValueError(f"{where}: column kind has unknown event kind {exc.args[0]!r}") from None
    try:
        cols["boundary_kind"] = [None if v is None else _BOUNDARY_KINDS[v] for v in cols["boundary_kind"]]
    except KeyError as exc:
        raise ValueError(f"{where}: column boundary_kind has unknown kind {exc.args[0]!r}") from None
    extras = cols["extra"]
    for i, v in enumerate(extras):
        try:
            extras[i] = json.loads(v) if v and v != "{}" else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: row {i}: column extra is not JSON ({exc})") from None
    for name in ("index", "step"):
        if None in cols[name]:
            raise ValueError(f"{where}: row {cols[name].index(None)}: column {name} is missing")
    out: dict[str, Trajectory] = {}
    task_ids, event_cols = cols["task_id"], [cols[name] for name in _EVENT_FIELDS]
    for i, values in enumerate(zip(*event_cols, strict=True)):
        tid = task_ids[i]
        traj = out.get(tid)
        if traj is None:
            traj = out[tid] = Trajectory(
                tid, cols["repo"][i], cols["source_format"][i], [], json.loads(cols["traj_meta"][i])
            )
        try:
            traj.events.append(Event(*values))
        except ValueError as exc:
            raise ValueError(f"{where}: row {i}: {exc}") from None
    return list(out.values())


def to_frame(trajectories: Trajectory | Iterable[Trajectory]) -> pd.DataFrame:
    """One row per event; list columns stay lists, ``extra`` and ``traj_meta`` are JSON."""
    return _to_table(trajectories).to_pandas(types_mapper=_nullable_types)


def _nullable_types(t: pa.DataType) -> Any:
    import pandas as pd
    import pyarrow as pa

    if pa.types.is_int64(t):
        return pd.Int64Dtype()
    if pa.types.is_boolean(t):
        return pd.BooleanDtype()
    return None


def from_frame(df: pd.DataFrame) -> list[Trajectory]:
    """Inverse of :func:`to_frame`; trajectories come back in first-appearance order."""
    import pyarrow as pa

    missing = [c for c in COLUMN_NAMES if c not in df.columns]
    if missing:
        raise ValueError(f"trajectory frame lacks columns {missing}")
    try:
        table = pa.Table.from_pandas(df[list(COLUMN_NAMES)], schema=parquet_schema(),
                                     preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise ValueError(f"trajectory frame: {exc}") from None
    with gc_paused():
        return _from_table(table, "trajectory frame")


def write_parquet(trajectories: Sequence[Trajectory] | Trajectory, path: str | Path) -> None:
    """Write atomically (:func:`features.files.write_atomic`): a crash never leaves half a table."""
    import pyarrow.parquet as pq

    with gc_paused():
        table = _to_table(trajectories)
    write_atomic(Path(path), lambda f: pq.write_table(table, f))


def read_parquet(path: str | Path) -> list[Trajectory]:
    """Read and schema-check a trajectory Parquet file written by :func:`write_parquet`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    table = pq.read_table(path)
    meta = table.schema.metadata or {}
    if meta.get(b"ripplecp.schema") != b"trajectory":
        raise ValueError(f"{path}: not a ripplecp trajectory table (schema metadata missing)")
    missing = [n for n in COLUMN_NAMES if n not in table.schema.names]
    if missing:
        raise ValueError(f"{path}: missing columns {missing}")
    if table.schema != parquet_schema():
        try:
            table = table.select(list(COLUMN_NAMES)).cast(parquet_schema())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise ValueError(f"{path}: columns do not match the trajectory schema ({exc})") from None
    with gc_paused():
        return _from_table(table, str(path))
