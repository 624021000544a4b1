"""Typed field access: where a value sits in a log (:class:`Loc`), and reading a field with
its type checked (:func:`get`) or converted from the text some logs write (:func:`to_int`,
:func:`to_float`, :func:`parse_iso`); a wrong value raises naming the file and the field."""

from __future__ import annotations

import math
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from features.readers.errors import TrajectoryFormatError
from features.schema import INT64_MAX, INT64_MIN

_TYPE_NAMES = {str: "string", int: "integer", float: "number", dict: "object", list: "array",
               bool: "boolean"}


def _type_name(t: type | tuple[type, ...]) -> str:
    ts = t if isinstance(t, tuple) else (t,)
    return " or ".join(_TYPE_NAMES.get(x, x.__name__) for x in ts if x is not type(None)) + (
        " or null" if type(None) in ts else ""
    )


class Loc:
    """Where a value sits in a log: file plus line (JSONL) or field path (JSON).

    ``loc / key`` is cheap (readers make one per field they read): the field path is
    spelled out only when an error needs it."""

    __slots__ = ("path", "line", "_field", "_parent", "_key")

    def __init__(self, path: Path | str, line: int | None = None, field: str = "",
                 _parent: Loc | None = None, _key: str | int | None = None) -> None:
        self.path, self.line, self._field, self._parent, self._key = (
            path, line, field, _parent, _key)

    def __truediv__(self, key: str | int) -> Loc:
        loc = _new_loc(Loc)  # no __init__ call: readers make several per line
        loc.path, loc.line, loc._field, loc._parent, loc._key = (
            self.path, self.line, None, self, key)
        return loc

    @property
    def field(self) -> str:
        """The field path: ``messages[3].role``."""
        if self._field is None:
            base, key = self._parent.field, self._key  # type: ignore[union-attr]
            self._field = (f"{base}[{key}]" if isinstance(key, int)
                           else f"{base}.{key}" if base else str(key))
        return self._field

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line is not None else ""
        if self.field:
            where = f"{where}: field {self.field}" if where else f"field {self.field}"
        return f"{self.path}: {where}" if where else str(self.path)

    def error(self, msg: str) -> TrajectoryFormatError:
        return TrajectoryFormatError(f"{self}: {msg}")


_new_loc = object.__new__
_INT64 = (INT64_MIN, INT64_MAX)  # a tuple: the hot paths read it as one local
_MISSING = object()
_NONE = type(None)


def _checked_int(v: int, loc: Loc) -> int:
    if not _INT64[0] <= v <= _INT64[1]:
        raise loc.error(f"integer {v:.3g} is beyond the 64-bit range a table column holds")
    return v


def _checked_float(v: float, loc: Loc) -> float:
    if not math.isfinite(v):
        raise loc.error(f"expected a finite number, got {v}")
    return v


def get(obj: dict[str, Any], key: str, typ: type | tuple[type, ...], loc: Loc, *at: str | int,
        required: bool = False, default: Any = None) -> Any:
    """``obj[key]`` checked against ``typ``; a wrong type raises naming the field path.

    The one typed read of a field: ``obj`` sits at ``loc / at...`` (the keys from the
    record's location to ``obj``, spelled out only for an error), the field at
    ``loc / at... / key``. ``int`` fields reject booleans and integers beyond 64 bits;
    ``float`` fields accept ints and reject non-finite values. Missing keys give
    ``default`` unless ``required``. A value of the wanted type that needs no conversion
    (most fields) is returned at once: no location is built, no further call made.
    """
    v = obj.get(key, _MISSING) if obj.__class__ is dict else obj[key] if key in obj else _MISSING
    tv = v.__class__
    if tv is typ or (typ.__class__ is tuple and tv in typ):
        if tv is str or tv is dict or tv is list or tv is bool or tv is _NONE:
            return v  # of a wanted type, nothing else to check
        if tv is int:  # within 64 bits, where no float is wanted (get makes one of it then)
            if _INT64[0] <= v <= _INT64[1] and (tv is typ or float not in typ):
                return v
        elif tv is float and v - v == 0.0:  # finite
            return v
    elif v is _MISSING and not required:  # an optional field left out (many are)
        return default
    return _checked_get(v, key, typ, loc, at, required, default)


def need(obj: dict[str, Any], key: str, typ: type | tuple[type, ...], loc: Loc) -> Any:
    """``get(obj, key, typ, loc, required=True)``: a required field of the record at ``loc``
    itself (a line's type, its object), in a call that costs less (no path, no keywords:
    about a quarter less than :func:`get`'s on Python 3.11; readers make one per line)."""
    v = obj.get(key, _MISSING) if obj.__class__ is dict else obj[key] if key in obj else _MISSING
    tv = v.__class__
    if tv is typ and (tv is str or tv is dict or tv is list):
        return v
    return get(obj, key, typ, loc, required=True)


def _checked_get(v: Any, key: str, typ: type | tuple[type, ...], loc: Loc,
                 at: tuple[str | int, ...], required: bool, default: Any) -> Any:
    """:func:`get` past its fast path: a missing field, a number, a boolean, null, a wrong type."""
    if v is _MISSING:
        if required:
            raise _at(loc, at, key).error("missing required field")
        return default
    ts = typ if isinstance(typ, tuple) else (typ,)
    if isinstance(v, bool):
        if bool not in ts:
            raise _at(loc, at, key).error(f"expected {_type_name(typ)}, got boolean")
        return v
    if float in ts and isinstance(v, int | float):
        return to_float(v, _at(loc, at, key))
    if not isinstance(v, ts):
        raise _at(loc, at, key).error(f"expected {_type_name(typ)}, got {_json_type(v)}")
    if isinstance(v, int):
        return _checked_int(v, _at(loc, at, key))
    return v


def _at(loc: Loc, at: tuple[str | int, ...], key: str | int) -> Loc:
    return _under(loc, at) / key


def _under(loc: Loc, at: tuple[str | int, ...]) -> Loc:
    """``loc / at[0] / at[1] ...``: where a value sits, spelled out for an error."""
    for k in at:
        loc = loc / k
    return loc


#: a :class:`Shape` field read as :func:`int_field` reads it (an integer, or one written as
#: text; null or missing is None)
INT_TEXT: Any = "int-text"


class Shape:
    """The typed fields of one kind of record, read in one call, as :func:`get` reads each.

    ``Shape(("command", str), ("exit_code", INT_TEXT), ("id", (str, int)), ...)`` declares
    them once, per record kind (as a msgspec Struct would); ``shape.read(obj, loc, *at)``
    returns their values in that order: what ``get(obj, key, type, loc, *at)`` returns for
    each (``required=True`` for the keys named in ``required``; :data:`INT_TEXT`: what
    :func:`int_field` returns). A field of an object read by the shape itself is named by
    its path, ``("message", "id")`` after ``("message", dict)``: read from that object as
    ``get(message, "id", ...)`` reads it (None when the object is null or missing). A
    record whose every field has its type (the usual one) is checked by generated code,
    without a call per field; any other is read field by field by :func:`get`, so a bad
    field raises the same words at the same field, first bad field first.
    """

    __slots__ = ("fields", "read")

    def __init__(self, *fields: tuple[str | tuple[str, ...], Any],
                 required: tuple[str | tuple[str, ...], ...] = ()) -> None:
        self.fields = fields
        env: dict[str, Any] = {"get": get, "int_field": int_field, "LO": _INT64[0],
                               "HI": _INT64[1]}
        fast, slow = [], []
        seen: dict[tuple[str, ...], tuple[str, str, Any]] = {}  # path -> variable, keys, type
        for i, (key, typ) in enumerate(fields):
            path = key if isinstance(key, tuple) else (key,)
            v, req = f"v{i}", key in required
            env[f"K{i}"], env[f"T{i}"] = path[-1], typ
            keys = f"K{i}"
            if len(path) == 1:
                src, under, fetch, slow_fetch = "obj", "", f"obj.get(K{i})", ""
            else:  # a field of an object this shape read before (a dict, or null)
                src, parent_keys, parent_type = seen[path[:-1]]
                if parent_type not in (dict, (dict, _NONE)):
                    raise TypeError(f"{key}: a field of an object read as dict or null")
                under, keys = f", {parent_keys}", f"{parent_keys}, K{i}"
                fetch = f"{src}.get(K{i}) if {src} is not None else None"
                slow_fetch = f" if {src} is not None else None"
            seen[path] = (v, keys, typ)
            check = _shape_check(i, typ, req, src, env)
            fast += [f"    {v} = {fetch}\n",
                     f"    if not ({check if src == 'obj' else f'{src} is None or {check}'}):\n"
                     f"        return slow(obj, loc, at)\n"]
            slow.append(f"    {v} = int_field({src}.get(K{i}), loc, *at{under}, K{i})" if
                        typ is INT_TEXT else
                        f"    {v} = get({src}, K{i}, T{i}, loc, *at{under}, required={req})")
            slow[-1] += f"{slow_fetch}\n"
        values = "".join(f"v{i}, " for i in range(len(fields)))
        # the usual record: each value read by .get (None when missing: get()'s default),
        # checked by plain tests, returned as it is; the first that fails sends the record
        # to get() field by field
        exec("def slow(obj, loc, at):\n" + "".join(slow) + f"    return ({values})\n",
             env)  # noqa: S102 - the readers of this shape, generated once
        exec("def read(obj, loc, *at):\n" + "".join(fast) + f"    return ({values})\n",
             env)  # noqa: S102
        self.read = env["read"]


def _shape_check(i: int, typ: Any, required: bool, src: str, env: dict[str, Any]) -> str:
    """The plain test that field ``i`` of a :class:`Shape` (its value ``v{i}``, read from
    the object ``src`` by ``.get``: None when missing) is what :func:`get` returns as it is
    (or, for :data:`INT_TEXT`, :func:`int_field`); anything else fails it and is read by
    those."""
    v = f"v{i}"
    if typ is INT_TEXT:  # null and missing are both None
        return f"({v} is None or ({v}.__class__ is int and LO <= {v} <= HI))"
    alts = []
    ts = typ if isinstance(typ, tuple) else (typ,)
    for t in ts:
        if t is int:
            if float in ts:
                continue  # get() makes a float of an int where a float is allowed
            alts.append(f"({v}.__class__ is int and LO <= {v} <= HI)")
        elif t is float:
            alts.append(f"({v}.__class__ is float and {v} - {v} == 0.0)")  # finite
        elif t is not _NONE:
            env[f"C{i}_{t.__name__}"] = t
            alts.append(f"{v}.__class__ is C{i}_{t.__name__}")
    # None: a null the type allows, or a key left out (default None) unless required
    if _NONE in ts:
        alts.append(f"({v} is None and K{i} in {src})" if required else f"{v} is None")
    elif not required:
        alts.append(f"({v} is None and K{i} not in {src})")
    return "(" + " or ".join(alts) + ")"


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    return _TYPE_NAMES.get(type(v), type(v).__name__)


def to_int(v: Any, loc: Loc) -> int | None:
    """An int from an int or an integral string (some logs store numbers as text); beyond
    64 bits is refused (no table column could hold it)."""
    if v is None:
        return None
    if v.__class__ is int and _INT64[0] <= v <= _INT64[1]:
        return v
    if isinstance(v, bool):
        raise loc.error("expected integer, got boolean")
    if isinstance(v, int):
        return _checked_int(v, loc)
    if isinstance(v, float) and v.is_integer():
        return _checked_int(int(v), loc)
    if isinstance(v, str) and re.fullmatch(r"-?\d+", v.strip()):
        return _checked_int(int(v), loc)
    raise loc.error(f"expected integer, got {_json_type(v)} {v!r:.40}")


def int_field(v: Any, loc: Loc, *keys: str | int) -> int | None:
    """``to_int(v, loc / keys...)``: a plain int within 64 bits, or None, is returned as it
    is; only another value pays for the field's :class:`Loc` and the checked conversion
    (readers read several integer fields per event; errors stay word for word the same)."""
    if v is None or (type(v) is int and _INT64[0] <= v <= _INT64[1]):
        return v
    for k in keys:
        loc = loc / k
    return to_int(v, loc)


def float_field(v: Any, loc: Loc, *keys: str | int) -> float | None:
    """``to_float(v, loc / keys...)``, as :func:`int_field` is for integers: a finite float,
    or None, is returned as it is; only another value pays for the field's :class:`Loc`."""
    if v is None or (v.__class__ is float and v - v == 0.0):  # finite
        return v
    for k in keys:
        loc = loc / k
    return to_float(v, loc)


def to_float(v: Any, loc: Loc) -> float | None:
    """A finite float from a number or a numeric string (SWE-agent 0.x stores times as
    text); NaN, infinities and numbers beyond a float's range are refused."""
    if v is None:
        return None
    if v.__class__ is float and v - v == 0.0:  # finite
        return v
    if isinstance(v, bool):
        raise loc.error("expected number, got boolean")
    if isinstance(v, int | float):
        try:
            return _checked_float(float(v), loc)
        except OverflowError:
            raise loc.error(f"number {v:.3g} is beyond a float's range") from None
    if isinstance(v, str):
        try:
            f = float(v)
        except ValueError:
            pass
        else:
            return _checked_float(f, loc)
    raise loc.error(f"expected number, got {_json_type(v)} {v!r:.40}")


def to_duration(v: Any, loc: Loc) -> float | None:
    """A duration in seconds: :func:`to_float`, and never negative (a measured duration
    cannot be; a negative one would make every elapsed-time feature wrong)."""
    d = to_float(v, loc)
    if d is not None and d < 0:
        raise loc.error(f"negative duration {d:g} s")
    return d


def message_text(content: Any, loc: Loc, *at: str | int) -> str:
    """The text of a chat message's ``content`` (sitting at ``loc / at...``): a string, or a
    list of parts (strings or objects whose ``text`` is a string, e.g. ``{"type": "text",
    "text": ...}``) joined by newlines; parts without text (images) are skipped, None is ''.
    Anything else raises."""
    if content.__class__ is str:
        return content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _under(loc, at).error(f"expected string or array, got {_json_type(content)}")
    parts = []
    for j, c in enumerate(content):
        if isinstance(c, str):
            parts.append(c)
        elif isinstance(c, dict):
            t = c.get("text")
            if isinstance(t, str):
                parts.append(t)
            elif t is not None:
                raise (_under(loc, at) / j / "text").error(
                    f"expected string, got {_json_type(t)}")
        else:
            raise (_under(loc, at) / j).error(f"expected object or string, got {_json_type(c)}")
    return "\n".join(parts)


def iso_field(obj: dict[str, Any], key: str, loc: Loc) -> float | None:
    """:func:`parse_iso` of ``obj[key]``, None when the key is missing; the field's
    :class:`Loc` is made only for an error, which then names it (readers read a timestamp
    per event)."""
    ts = obj.get(key, _MISSING)
    return None if ts is _MISSING else parse_iso(ts, loc, key)


_FROM_ISO = datetime.fromisoformat
# a naive time taken as UTC: its distance from the naive epoch is exactly what
# dt.replace(tzinfo=UTC).timestamp() computes (the same timedelta, the same division), at a
# fifth of the cost (replace() alone is ~1 us; OpenHands writes naive times on every event)
_NAIVE_EPOCH = datetime(1970, 1, 1)


def parse_iso(ts: Any, loc: Loc, *at: str | int) -> float:
    """Epoch seconds from an ISO-8601 timestamp (sitting at ``loc / at...``, spelled out
    only for an error); naive times are taken as UTC."""
    if ts.__class__ is str:  # the usual text parses as is ("Z" included, Python >= 3.11)
        try:
            dt = _FROM_ISO(ts)
        except ValueError:
            pass  # spaces around it, or not a timestamp: the path below decides
        else:
            return dt.timestamp() if dt.tzinfo is not None else (
                dt - _NAIVE_EPOCH).total_seconds()
    if not isinstance(ts, str):
        raise _under(loc, at).error(f"expected ISO-8601 timestamp string, got {_json_type(ts)}")
    s = ts.strip()
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(s)
    except ValueError as exc:
        raise _under(loc, at).error(f"invalid ISO-8601 timestamp {ts!r}") from exc
    return dt.timestamp() if dt.tzinfo is not None else (dt - _NAIVE_EPOCH).total_seconds()



def without(d: dict[str, Any], *keys: str) -> dict[str, Any]:
    """A copy of ``d`` without ``keys`` (order kept): the log's own fields an event keeps."""
    out = dict(d)
    for k in keys:
        out.pop(k, None)
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

