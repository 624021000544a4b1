"""Shared pieces of the log readers: errors, warnings, JSON/JSONL loading, typed field access,
event kinds of commands, test-summary parsing, boundary marking and trajectory finishing.

What a command is (a test, a commit) is decided by the shell parser (``features.shell``) over
the one command vocabulary (``features.commands``), never here.

Conventions every reader follows (documented once here):

* ``is_error`` means the action did not execute normally: an error event, a tool failure,
  a sandbox denial, a rejected patch, an edit the tool refused. A command that ran and
  returned a non-zero status is *not* an error; its ``exit_code`` says so.
* A safe boundary (paper, Appendix A) is marked on the event after which a tool has
  returned: ``"test"`` for a test command, ``"commit"`` for a successful ``git commit``,
  else ``"tool_return"``. ``turn_end`` marks the last event of each logical step.
* Uniform ``extra`` keys for tool calls, wherever the log has them: ``extra["output"]``
  (the tool's output text as logged), ``extra["cwd"]`` (the working directory the
  command ran in) and ``extra["paths_deleted"]`` (files a file change deleted or moved
  away; ``paths_written`` holds only files that exist afterwards). Everything else keeps the log's own key names.
* Position: an event sits where what it did became known (a command where its result
  arrived), so ``Trajectory.cut(i)`` never holds a result that arrived after event i.
* Torn last line of a JSONL stream: an error by default, like any other bad line (a
  reader never silently guesses). Pass ``allow_truncated_tail=True`` to accept a stream
  that was cut mid-write: the torn line is then skipped with a warning and
  ``meta["truncated_tail"]`` records it.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from features.schema import BoundaryKind, Event, EventKind, Trajectory
from features.shell import is_git_commit, is_test_command


class TrajectoryFormatError(ValueError):
    """A log that cannot be read as the expected format; the message names file and line/field."""


class UnknownEventWarning(UserWarning):
    """An event or item type the reader does not know; it is kept as an ``other`` event."""


def warn_unknown(path: Path, where: str, what: str) -> None:
    """Emit an :class:`UnknownEventWarning` naming the file and location."""
    warnings.warn(
        f"{path}: {where}: unknown {what}; kept as kind 'other'",
        UnknownEventWarning,
        stacklevel=3,
    )


# ---------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------


def read_text(path: Path) -> str:
    """Read a log as UTF-8 text; empty, binary or undecodable files raise a format error."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TrajectoryFormatError(f"{path}: cannot read file: {exc}") from exc
    if not raw.strip():
        raise TrajectoryFormatError(f"{path}: empty file")
    if b"\x00" in raw:
        raise TrajectoryFormatError(f"{path}: binary data (NUL byte at offset {raw.index(0)})")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise TrajectoryFormatError(
            f"{path}: line {line}: not UTF-8 text (byte offset {exc.start})"
        ) from exc


def load_json(path: Path, text: str | None = None) -> Any:
    """Parse a whole-file JSON document; errors name the file, line and column."""
    if text is None:
        text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise TrajectoryFormatError(
            f"{path}: line {exc.lineno} column {exc.colno}: invalid JSON ({exc.msg})"
        ) from exc


@dataclass
class JsonlLine:
    lineno: int
    obj: dict[str, Any]
    arrival: float | None = None


def iter_jsonl(
    path: Path,
    text: str | None = None,
    *,
    allow_truncated_tail: bool = False,
    meta: dict[str, Any] | None = None,
) -> Iterator[JsonlLine]:
    """Yield each non-blank line as a JSON object with its 1-based line number.

    A line that is not JSON, or not a JSON object, raises :class:`TrajectoryFormatError`
    naming the line. The last line is treated the same unless ``allow_truncated_tail``.
    """
    if text is None:
        text = read_text(path)
    lines = text.splitlines()
    last = max((i for i, s in enumerate(lines) if s.strip()), default=-1)
    for i, s in enumerate(lines):
        if not s.strip():
            continue
        try:
            obj = json.loads(s)
        except json.JSONDecodeError as exc:
            if i == last and allow_truncated_tail:
                warnings.warn(
                    f"{path}: line {i + 1}: torn last line skipped (stream cut mid-write?)",
                    UserWarning,
                    stacklevel=2,
                )
                if meta is not None:
                    meta["truncated_tail"] = {"line": i + 1, "text": s}
                return
            hint = " (last line: stream cut mid-write?)" if i == last else ""
            raise TrajectoryFormatError(
                f"{path}: line {i + 1}: not valid JSON ({exc.msg}){hint}"
            ) from exc
        if not isinstance(obj, dict):
            raise TrajectoryFormatError(
                f"{path}: line {i + 1}: expected a JSON object, got {type(obj).__name__}"
            )
        yield JsonlLine(i + 1, obj)


# ---------------------------------------------------------------------------------------
# Typed field access
# ---------------------------------------------------------------------------------------

_TYPE_NAMES = {str: "string", int: "integer", float: "number", dict: "object", list: "array",
               bool: "boolean"}


def _type_name(t: type | tuple[type, ...]) -> str:
    ts = t if isinstance(t, tuple) else (t,)
    return " or ".join(_TYPE_NAMES.get(x, x.__name__) for x in ts if x is not type(None)) + (
        " or null" if type(None) in ts else ""
    )


class Loc:
    """Where a value sits in a log: file plus line (JSONL) or field path (JSON)."""

    __slots__ = ("path", "line", "field")

    def __init__(self, path: Path, line: int | None = None, field: str = "") -> None:
        self.path, self.line, self.field = path, line, field

    def __truediv__(self, key: str | int) -> Loc:
        sub = f"[{key}]" if isinstance(key, int) else (f".{key}" if self.field else key)
        return Loc(self.path, self.line, self.field + sub)

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line is not None else ""
        if self.field:
            where = f"{where}: field {self.field}" if where else f"field {self.field}"
        return f"{self.path}: {where}" if where else str(self.path)

    def error(self, msg: str) -> TrajectoryFormatError:
        return TrajectoryFormatError(f"{self}: {msg}")


def get(obj: dict[str, Any], key: str, typ: type | tuple[type, ...], loc: Loc,
        *, required: bool = False, default: Any = None) -> Any:
    """``obj[key]`` checked against ``typ``; a wrong type raises naming the field path.

    ``int`` fields reject booleans; ``float`` fields accept ints. Missing keys give
    ``default`` unless ``required``.
    """
    if key not in obj:
        if required:
            raise (loc / key).error("missing required field")
        return default
    v = obj[key]
    ts = typ if isinstance(typ, tuple) else (typ,)
    if float in ts and isinstance(v, int) and not isinstance(v, bool):
        return float(v)
    if isinstance(v, bool) and bool not in ts:
        raise (loc / key).error(f"expected {_type_name(typ)}, got boolean")
    if not isinstance(v, ts):
        raise (loc / key).error(f"expected {_type_name(typ)}, got {_json_type(v)}")
    return v


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    return _TYPE_NAMES.get(type(v), type(v).__name__)


def to_int(v: Any, loc: Loc) -> int | None:
    """An int from an int or an integral string (some logs store numbers as text)."""
    if v is None:
        return None
    if isinstance(v, bool):
        raise loc.error("expected integer, got boolean")
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and re.fullmatch(r"-?\d+", v.strip()):
        return int(v)
    raise loc.error(f"expected integer, got {_json_type(v)} {v!r:.40}")


def to_float(v: Any, loc: Loc) -> float | None:
    """A float from a number or a numeric string (SWE-agent 0.x stores times as text)."""
    if v is None:
        return None
    if isinstance(v, bool):
        raise loc.error("expected number, got boolean")
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            pass
    raise loc.error(f"expected number, got {_json_type(v)} {v!r:.40}")


def parse_iso(ts: Any, loc: Loc) -> float:
    """Epoch seconds from an ISO-8601 timestamp; naive times are taken as UTC."""
    if not isinstance(ts, str):
        raise loc.error(f"expected ISO-8601 timestamp string, got {_json_type(ts)}")
    s = ts.strip()
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(s)
    except ValueError as exc:
        raise loc.error(f"invalid ISO-8601 timestamp {ts!r}") from exc
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


# ---------------------------------------------------------------------------------------
# Test summaries
# ---------------------------------------------------------------------------------------

_PYTEST_SUMMARY = re.compile(r"^=*\s*(?P<body>(?:\d+ \w+(?:, )?)+)\s+in\s+[\d.]+s", re.M)
_COUNT = re.compile(r"(\d+) (passed|failed|errors?|error|xpassed|xfailed|skipped|deselected)")
_UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in [\d.]+s", re.M)
_UNITTEST_RESULT = re.compile(r"^(OK|FAILED)\b(?: \((?P<detail>[^)]*)\))?", re.M)
_JEST = re.compile(r"^\s*Tests:?\s+(?P<body>.*(?:\d+ total|\(\d+\)))\s*$", re.M)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CARGO = re.compile(r"test result: \w+\. (\d+) passed; (\d+) failed")
_MOCHA_PASS = re.compile(r"^\s*(\d+) passing\b", re.M)
_MOCHA_FAIL = re.compile(r"^\s*(\d+) failing\b", re.M)


def parse_test_counts(output: str | None) -> tuple[int | None, int | None]:
    """(passed, failed) from a test runner's summary in ``output``, or (None, None).

    Recognises pytest (``== 3 passed, 1 failed in 0.5s ==``), unittest / Django
    (``Ran N tests`` + ``OK``/``FAILED (failures=a, errors=b)``), jest/vitest
    (``Tests: 1 failed, 5 passed, 6 total``; ``Tests  1 failed | 244 passed (245)``), cargo (``test result``) and mocha.
    The last summary in the output wins (pytest) or all are summed (cargo).
    Errors count as failures; skips are neither.
    """
    if not output:
        return None, None
    output = _ANSI.sub("", output)
    m = list(_PYTEST_SUMMARY.finditer(output))
    if m:
        counts: dict[str, int] = {}
        for n, word in _COUNT.findall(m[-1].group("body")):
            counts[word.rstrip("s") if word.startswith("error") else word] = int(n)
        if any(k in counts for k in ("passed", "failed", "error")):
            return counts.get("passed", 0), counts.get("failed", 0) + counts.get("error", 0)
    ran = list(_UNITTEST_RAN.finditer(output))
    if ran:
        total = int(ran[-1].group(1))
        res = [r for r in _UNITTEST_RESULT.finditer(output) if r.start() > ran[-1].start()]
        if res:
            detail = res[0].group("detail") or ""
            kv = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", detail)}
            failed = kv.get("failures", 0) + kv.get("errors", 0) + kv.get(
                "unexpected_successes", 0)
            skipped = kv.get("skipped", 0) + kv.get("expected_failures", 0)
            return max(total - failed - skipped, 0), failed
    j = list(_JEST.finditer(output))
    if j:
        body = j[-1].group("body")
        p = re.search(r"(\d+) passed", body)
        f = re.search(r"(\d+) failed", body)
        return (int(p.group(1)) if p else 0), (int(f.group(1)) if f else 0)
    c = _CARGO.findall(output)
    if c:
        return sum(int(a) for a, _ in c), sum(int(b) for _, b in c)
    mp, mf = _MOCHA_PASS.findall(output), _MOCHA_FAIL.findall(output)
    if mp or mf:
        return (int(mp[-1]) if mp else 0), (int(mf[-1]) if mf else 0)
    return None, None


# ---------------------------------------------------------------------------------------
# Events and trajectories
# ---------------------------------------------------------------------------------------


def classify_command(command: str | None, argv: list[str] | None) -> EventKind:
    """``test`` for a test command, else ``command``: the shell parser's verdict on the
    command string (else the argv), the same the provenance graph reaches."""
    if is_test_command(command if isinstance(command, str) and command else argv):
        return EventKind.TEST
    return EventKind.COMMAND


def mark_tool_return(e: Event) -> None:
    """Mark ``e`` as a safe boundary: a tool has returned after it.

    The kind is ``test`` for test events, ``commit`` for a ``git commit`` that did not
    fail (exit code 0 or unknown, and not an error), else ``tool_return``.
    """
    e.safe_boundary = True
    if e.kind == EventKind.TEST:
        e.boundary_kind = BoundaryKind.TEST
    elif (
        e.kind == EventKind.COMMAND
        and not e.is_error
        and e.exit_code in (0, None)
        and is_git_commit(e.command or e.argv)
    ):
        e.boundary_kind = BoundaryKind.COMMIT
    else:
        e.boundary_kind = BoundaryKind.TOOL_RETURN


def apply_test_counts(e: Event, output: str | None) -> None:
    """Fill tests_passed/failed on a test event from its visible output."""
    if e.kind == EventKind.TEST:
        p, f = parse_test_counts(output)
        e.tests_passed, e.tests_failed = p, f


def utf8_len(s: str | None) -> int | None:
    return None if s is None else len(s.encode("utf-8"))


_PATCH_HEADER = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+?)\s*$|^\*\*\* Move to: (.+?)\s*$",
                           re.M)


def parse_apply_patch(patch: str) -> dict[str, Any] | None:
    """Paths and added bytes of an ``apply_patch`` body (``*** Begin Patch`` format).

    Returns ``{"paths", "written", "deleted", "ops": [{"op", "path"}...], "added_bytes"}``
    or None when the text holds no patch. ``paths`` lists every header path in order;
    ``written`` the added/updated files and move destinations; ``deleted`` the deleted
    files and move sources. Paths are kept exactly as written in the headers.
    """
    if "*** Begin Patch" not in patch:
        return None
    ops: list[dict[str, str]] = []
    paths: list[str] = []
    for m in _PATCH_HEADER.finditer(patch):
        if m.group(1):
            op, p = m.group(1).lower(), m.group(2)
        else:
            op, p = "move", m.group(3)
        ops.append({"op": op, "path": p})
        if p not in paths:
            paths.append(p)
    written: list[str] = []
    deleted: list[str] = []
    for j, o in enumerate(ops):
        moved = j + 1 < len(ops) and ops[j + 1]["op"] == "move" and o["op"] == "update"
        if o["op"] == "delete" or moved:
            deleted.append(o["path"])
        elif o["path"] not in written:
            written.append(o["path"])
    added = 0
    in_patch = False
    for line in patch.splitlines():
        if line.startswith("*** Begin Patch"):
            in_patch = True
            continue
        if line.startswith("*** End Patch"):
            in_patch = False
            continue
        if in_patch and line.startswith("+"):
            added += len(line[1:].encode("utf-8")) + 1
    return {"paths": paths, "written": written, "deleted": deleted, "ops": ops,
            "added_bytes": added}


def new_step_on_user_input(state: dict[str, Any]) -> None:
    """Advance the logical step at a user input if the agent acted since the last one.

    ``state`` holds ``step`` (current, starts at 1) and ``agent_acted`` (bool).
    """
    if state["agent_acted"]:
        state["step"] += 1
        state["agent_acted"] = False


def finish(
    task_id: str,
    repo: str,
    source_format: str,
    events: list[Event],
    meta: dict[str, Any],
) -> Trajectory:
    """Number events, mark ``turn_end`` on each step's last event, add totals, validate."""
    for i, e in enumerate(events):
        e.index = i
        e.turn_end = False
    for i, e in enumerate(events):
        if i + 1 == len(events) or events[i + 1].step != e.step:
            e.turn_end = True
    meta.setdefault("totals", {}).update(totals(events))
    traj = Trajectory(task_id, repo, source_format, events, meta)
    traj.validate()
    return traj


def totals(events: Sequence[Event]) -> dict[str, Any]:
    """Counts and token sums over events (token sums are None when no event has tokens)."""
    out: dict[str, Any] = {"events": len(events)}
    for k in EventKind:
        out[f"n_{k.value}"] = sum(1 for e in events if e.kind == k)
    out["n_errors"] = sum(1 for e in events if e.is_error)
    out["n_safe_boundaries"] = sum(1 for e in events if e.safe_boundary)
    out["steps"] = len({e.step for e in events})
    for name in ("input_tokens", "cached_tokens", "output_tokens"):
        vals = [getattr(e, name) for e in events if getattr(e, name) is not None]
        out[name] = sum(vals) if vals else None
    return out


_GH = re.compile(r"(?:github\.com[:/])([\w.-]+)/([\w.-]+?)(?:\.git)?/?$")
_SWEBENCH_ID = re.compile(r"^([\w.-]+?)__([\w.-]+)-(\d+)$")


def repo_from_url(url: str | None) -> str | None:
    """``owner/name`` from a GitHub remote URL (https or ssh), else the URL itself."""
    if not url:
        return None
    m = _GH.search(url.strip())
    return f"{m.group(1)}/{m.group(2)}" if m else url


def repo_from_instance_id(iid: str | None) -> str | None:
    """``owner/name`` from a SWE-bench instance id (``django__django-16255``), else None."""
    if not iid:
        return None
    m = _SWEBENCH_ID.match(iid)
    return f"{m.group(1)}/{m.group(2)}" if m else None


def stem(path: Path) -> str:
    """File name without known log suffixes (``.traj.json``, ``.traj``, ``.jsonl``, ``.json``)."""
    name = path.name
    for suf in (".traj.json", ".traj", ".jsonl", ".json", ".txt", ".log"):
        if name.endswith(suf):
            return name[: -len(suf)]
    return path.stem
