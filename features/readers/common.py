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

import errno
import gzip
import io
import json
import math
import os
import re
import stat
import warnings
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import msgspec
import zstandard

from features.gc_pause import gc_paused
from features.schema import BoundaryKind, Event, EventKind, Trajectory
from features.shell import clear_cache as clear_shell_cache
from features.shell import is_git_commit, is_test_command


class TrajectoryFormatError(ValueError):
    """A log that cannot be read as the expected format; the message names file and line/field."""


class UnknownEventWarning(UserWarning):
    """An event or item type the reader does not know; it is kept as an ``other`` event."""


class EmptyTrajectoryWarning(UserWarning):
    """A log read without error that holds no events (``python -m features`` exits 3)."""


class TimeOrderWarning(UserWarning):
    """Times that run backwards; kept, and flagged (see :func:`finish`)."""


def warn_unknown(path: Path, where: str, what: str) -> None:
    """Emit an :class:`UnknownEventWarning` naming the file and location."""
    warnings.warn(
        f"{path}: {where}: unknown {what}; kept as kind 'other'",
        UnknownEventWarning,
        stacklevel=3,
    )


# ---------------------------------------------------------------------------------------
# Loading: regular files only, a size limit, transparent .gz / .zst, strict JSON
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadLimits:
    """Bounds on what one log may make a reader do, so bad input never exhausts memory.

    ``max_bytes``: the largest log read, counted after decompression (a directory log: its
    files together); ``max_depth``: the deepest nesting of JSON arrays and objects (deeper
    documents break comparison, copying and JSON writing long before the parser's own
    recursion limit). Set for a block with :func:`read_limits`, or per call with
    ``read_trajectory(limits=...)`` / ``python -m features --max-mb``.
    """

    max_bytes: int = 512 * 2**20
    max_depth: int = 128

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_depth"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"ReadLimits.{name} must be a positive integer, got {v!r}")


DEFAULT_LIMITS = ReadLimits()
_LIMITS: ContextVar[ReadLimits] = ContextVar("ripplecp_read_limits", default=DEFAULT_LIMITS)
# path -> [text, parsed document or _UNPARSED, bytes] while a reading() block is open
_ONCE: ContextVar[dict[str, list[Any]] | None] = ContextVar("ripplecp_read_once", default=None)
_READING: ContextVar[Path | None] = ContextVar("ripplecp_reading", default=None)
_UNPARSED = object()


def current_limits() -> ReadLimits:
    """The :class:`ReadLimits` in force (the defaults unless :func:`read_limits` set others)."""
    return _LIMITS.get()


@contextmanager
def read_limits(limits: ReadLimits) -> Iterator[ReadLimits]:
    """Apply ``limits`` to every read in the block (readers call :func:`read_text`)."""
    token = _LIMITS.set(limits)
    try:
        yield limits
    finally:
        _LIMITS.reset(token)


@contextmanager
def reading(path: Path) -> Iterator[None]:
    """The block reads the log ``path``: a file is read and parsed once (format detection
    and the reader share the text and the parsed document, which neither may change), and
    :func:`finish` names ``path`` in its warnings and errors.

    The cyclic garbage collector is paused meanwhile (:func:`features.gc_pause.gc_paused`:
    its state restored after, the survivors promoted to the oldest generation): a read
    allocates millions of containers that live to its end, so the collector's passes over
    them found nothing and cost up to a fifth of a read; what is left is reference-counted
    away as usual, and any cycles are collected by the next full collection."""
    token = _ONCE.set({})
    ptoken = _READING.set(path)
    try:
        with gc_paused():
            yield
    finally:
        _READING.reset(ptoken)
        _ONCE.reset(token)


_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_COMPRESSED_SUFFIXES = (".gz", ".zst", ".zstd")
_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
               (stat.S_ISSOCK, "a socket"))


def _mib(n: int) -> str:
    return f"{n / 2**20:g} MiB"


def _too_big(path: Path, limit: int, what: str) -> TrajectoryFormatError:
    return TrajectoryFormatError(
        f"{path}: {what} larger than the {_mib(limit)} limit (raise it with --max-mb or "
        "ReadLimits(max_bytes=...))")


def os_reason(exc: OSError) -> str:
    """A short reason for an OS error opening a log (a symlink loop is named as such)."""
    if exc.errno == errno.ELOOP:
        return "a symbolic link loop (too many levels of symbolic links)"
    if exc.errno == errno.ENOENT:
        return "no such file"
    return exc.strerror or str(exc)


def _read_capped(stream: Any, limit: int, path: Path, what: str) -> bytes:
    """Every byte of ``stream`` as long as there are at most ``limit`` of them."""
    parts: list[bytes] = []
    total = 0
    while True:
        chunk = stream.read(min(1 << 22, limit + 1 - total))
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)
        total += len(chunk)
        if total > limit:
            raise _too_big(path, limit, what)


def _unzstd(f: Any, limit: int, path: Path) -> bytes:
    """Every frame of a zstandard file, fed in small chunks so that no frame expands past
    the limit unseen, and a frame cut short is an error."""
    dctx = zstandard.ZstdDecompressor()
    parts: list[bytes] = []
    total = 0
    dobj = None
    while data := f.read(1 << 10):
        while data:
            if dobj is None:
                dobj = dctx.decompressobj()
            out = dobj.decompress(data)
            parts.append(out)
            total += len(out)
            if total > limit:
                raise _too_big(path, limit, "decompressed zstandard data")
            if dobj.eof:
                data, dobj = dobj.unused_data, None
            else:
                data = b""
    if dobj is not None:
        raise zstandard.ZstdError("the last frame is incomplete")
    return b"".join(parts)


def read_bytes(path: Path) -> bytes:
    """The bytes of a log, decompressed when it is gzip or zstandard (by content).

    Only regular files are read: a FIFO, a device, a socket or a directory is refused at
    once (the file is opened non-blocking and checked with ``fstat`` before any read), so
    nothing hangs or streams forever. More than :attr:`ReadLimits.max_bytes` (after
    decompression) is refused, so no compression bomb gets through. Plain ``os.read``
    calls on the descriptor (a whole small file in one call plus the one that sees its
    end): a conversation directory is thousands of small files.
    """
    limit = _LIMITS.get().max_bytes
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        reason = os_reason(exc)
        if exc.errno == errno.ENOENT and os.path.islink(path):
            reason = f"a dangling symbolic link (to {os.readlink(path)})"
        raise TrajectoryFormatError(f"{path}: cannot read file: {reason}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((name for test, name in _FILE_KINDS if test(st.st_mode)), "not a file")
            raise TrajectoryFormatError(f"{path}: not a regular file ({kind}); refused unread")
        if st.st_size > limit:
            raise _too_big(path, limit, f"file of {_mib(st.st_size)}")
        parts: list[bytes] = []
        total = 0
        want = st.st_size + 1  # the whole file and the end in the first call, if it holds still
        while chunk := os.read(fd, min(want, 1 << 30, limit + 1 - total)):
            parts.append(chunk)
            total += len(chunk)
            if total > limit:
                raise _too_big(path, limit, "file")
            want = 1 << 22
    finally:
        os.close(fd)
    data = parts[0] if len(parts) == 1 else b"".join(parts)
    head = data[:4]
    if head[:2] != _GZIP_MAGIC and head != _ZSTD_MAGIC:
        return data
    kind = "gzip" if head[:2] == _GZIP_MAGIC else "zstandard"
    try:
        if kind == "gzip":
            with gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb") as gz:
                return _read_capped(gz, limit, path, "decompressed gzip data")
        return _unzstd(io.BytesIO(data), limit, path)
    except (OSError, EOFError, zlib.error, zstandard.ZstdError) as exc:
        raise TrajectoryFormatError(f"{path}: corrupt or truncated {kind} data ({exc})") from exc


def _checked_bytes(path: Path) -> bytes:
    """The bytes of a log (see :func:`read_bytes`), refused when empty or binary."""
    raw = read_bytes(path)
    if not raw or raw.isspace():
        raise TrajectoryFormatError(f"{path}: empty file")
    nul = raw.find(0)
    if nul >= 0:
        raise TrajectoryFormatError(f"{path}: binary data (NUL byte at offset {nul})")
    return raw


def _entry(path: Path) -> list[Any] | None:
    """The read-once entry of ``path`` ([text or None, parsed document, bytes]), None when
    the path has none (outside a :func:`reading` block, or a file other than the log)."""
    once = _ONCE.get()
    return once.get(os.fspath(path)) if once is not None else None


def _remember(path: Path, text: str | None, raw: bytes) -> None:
    """Keep the log's bytes (and text) for the rest of its :func:`reading` block."""
    once = _ONCE.get()
    key = os.fspath(path)
    if once is not None and key == os.fspath(_READING.get() or ""):
        # the log itself: detection and the reader share the text, the parse and the bytes
        once[key] = [text, _UNPARSED, raw]


def read_log_bytes(path: Path) -> bytes:
    """The bytes of a log, refused as :func:`read_text` refuses them (empty, binary, too
    large) but not decoded: inside a read the bytes are parsed as they are (msgspec checks
    their UTF-8 as it decodes them), and whatever it refuses is decided on the text
    (:func:`read_text`, which words the error). Read once per :func:`reading` block."""
    entry = _entry(path)
    if entry is not None:
        return entry[2]
    raw = _checked_bytes(path)
    _remember(path, None, raw)
    return raw


def read_text(path: Path) -> str:
    """Read a log as UTF-8 text (see :func:`read_bytes`); empty, binary or undecodable files
    raise a format error."""
    entry = _entry(path)
    if entry is not None and entry[0] is not None:
        return entry[0]
    raw = entry[2] if entry is not None else _checked_bytes(path)
    text = decode_log(path, raw)
    if entry is not None:
        entry[0] = text
    else:
        _remember(path, text, raw)
    return text


def log_text(path: Path, raw: bytes) -> str:
    """The text of the log whose bytes :func:`read_log_bytes` gave: :func:`read_text`
    inside a read (decoded once, kept), else those bytes decoded (never read twice)."""
    return read_text(path) if _entry(path) is not None else decode_log(path, raw)


def decode_log(path: Path, raw: bytes) -> str:
    """The text of a log's bytes (a byte-order mark dropped); not UTF-8 raises a format
    error naming the line."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise TrajectoryFormatError(
            f"{path}: line {line}: not UTF-8 text (byte offset {exc.start})"
        ) from exc


class _Refused(Exception):
    """Raised inside the strict JSON parse; located afterwards by :func:`_locate`."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        raise _Refused("duplicate")
    return d


def _constant(name: str) -> Any:
    raise _Refused("constant")


_STRICT = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=_constant)
_SURROGATE_ESCAPE = re.compile(r"(\\+)u([dD][89a-fA-F][0-9a-fA-F]{2})")
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\],:]|[^\s"{}\[\],:]+')


def _too_deep(doc: Any, limit: int) -> bool:
    """Whether ``doc`` nests deeper than ``limit`` (a walk over its containers only)."""
    stack = [(doc, 1)]
    while stack:
        x, d = stack.pop()
        if d > limit:
            return True
        for v in (x.values() if type(x) is dict else x):
            if type(v) is dict or type(v) is list:
                stack.append((v, d + 1))
    return False


def _lone_surrogate(text: str) -> int | None:
    """Offset of the first ``\\uD8xx``-``\\uDFxx`` escape that is not half of a pair."""
    pending: int | None = None  # offset of a high surrogate awaiting its low half
    pending_end = -1
    for m in _SURROGATE_ESCAPE.finditer(text):
        if len(m.group(1)) % 2 == 0:  # an escaped backslash, then a literal 'u'
            continue
        start = m.end(1) - 1
        low = m.group(2)[1].lower() in "cdef"
        if pending is not None:
            if low and start == pending_end:
                pending = None
                continue
            return pending
        if low:
            return start
        pending, pending_end = start, m.end()
    return pending


def _field_path(frames: list[list[Any]]) -> str:
    out = ""
    for f in frames:
        if f[0] == "[":
            out += f"[{f[1]}]"
        elif f[2] is not None:
            out += f".{f[2]}" if out else str(f[2])
    return out


def _locate(text: str, kind: str, *, depth: int = 0, offset: int = -1) -> tuple[int, str]:
    """(offset, field path) of the first offence of ``kind`` in a JSON text: a duplicate
    key, a NaN/Infinity, nesting deeper than ``depth``, or the value holding ``offset``."""
    frames: list[list[Any]] = []  # ["{", keys, key, expecting_key] or ["[", index]
    for m in _TOKEN.finditer(text):
        tok = m.group()
        c = tok[0]
        top = frames[-1] if frames else None
        if kind == "offset" and m.end() > offset:
            return m.start(), _field_path(frames)
        if c in "{[":
            frames.append(["{", set(), None, True] if c == "{" else ["[", 0])
            if kind == "depth" and len(frames) > depth:
                return m.start(), _field_path(frames[:-1])
        elif c in "}]":
            if frames:
                frames.pop()
        elif c == ",":
            if top is not None and top[0] == "[":
                top[1] += 1
            elif top is not None:
                top[3] = True
        elif c == ":":
            if top is not None and top[0] == "{":
                top[3] = False
        elif top is not None and top[0] == "{" and top[3] and c == '"':
            key = json.loads(tok)
            if kind == "duplicate" and key in top[1]:
                top[2] = key
                return m.start(), _field_path(frames)
            top[1].add(key)
            top[2] = key
        elif kind == "constant" and tok in ("NaN", "Infinity", "-Infinity"):
            return m.start(), _field_path(frames)
    return max(offset, 0), _field_path(frames)


_REFUSALS = {
    "duplicate": "duplicate key (a JSON reader would keep only the last value and drop the "
                 "others)",
    "constant": "NaN or Infinity is not a JSON number",
}


def _refusal(text: str, kind: str, limits: ReadLimits, offset: int = -1) -> tuple[int, str, str]:
    """(offset, field path, message) for a strictness refusal of ``kind``."""
    if kind == "depth":
        off, field = _locate(text, "depth", depth=limits.max_depth)
        return off, field, f"JSON nested deeper than {limits.max_depth} levels"
    if kind == "surrogate":
        off, field = _locate(text, "offset", offset=offset)
        return offset, field, ("a lone UTF-16 surrogate escape (not a character: "
                               "no text column can hold it)")
    off, field = _locate(text, kind)
    return off, field, _REFUSALS[kind]


_FAST = msgspec.json.Decoder()
_COUNT_BRACKETS_BELOW = 1 << 16
_ENCODE = msgspec.json.Encoder().encode
_SLOW = object()


def _fast_decode(text: str, max_depth: int) -> Any:
    """The document msgspec parses from ``text`` when it is surely the one the strict stdlib
    parse returns, else ``_SLOW`` (the strict parse must run, for the document or for its
    exact error).

    msgspec refuses, like the strict parse, invalid JSON, NaN/Infinity and lone surrogate
    escapes, and keeps integers of any size as ints (orjson turns those beyond 64 bits
    into floats, hence msgspec). What it does not check is decided cheaply here:

    * duplicate keys: every key/value pair of the text is one structural colon, so the
      colons of the text are its pairs plus the colons inside its strings; re-encoding
      the document writes one colon per key kept plus the colons of the strings kept. The
      two counts are equal exactly when no pair was dropped (a duplicate drops a pair and
      perhaps strings), provided no colon in a string is written as an escape
      (``\\u003a``; then the strict parse decides);
    * depth: a document holds at most as many containers as the text has ``{`` and ``[``,
      so only a text with more of them than ``max_depth`` is walked (a text over 64 KiB is
      walked without counting: it nearly always has more, and counting costs as much).
    """
    try:
        doc = _FAST.decode(text)
    except (msgspec.DecodeError, RecursionError, UnicodeEncodeError):
        return _SLOW
    if type(doc) is not dict and type(doc) is not list:
        return doc
    colons = text.count(":")
    if colons > 1 and ("\\u003" in text and ("\\u003a" in text or "\\u003A" in text)
                   or _ENCODE(doc).count(b":") != colons):
        return _SLOW
    n = len(text)  # no more brackets than characters: a short text is never walked
    if n > max_depth and (n > _COUNT_BRACKETS_BELOW
                          or text.count("{") + text.count("[") > max_depth) and _too_deep(
                              doc, max_depth):
        return _SLOW
    return doc


def loads_lenient(text: str) -> Any:
    """``json.loads(text)``, by msgspec where the two agree (any valid JSON text: the same
    document), by the stdlib otherwise (NaN, Infinity and lone surrogates, which it
    accepts; its errors). For lenient reads of JSON held in a tool's output."""
    try:
        return _FAST.decode(text)
    except (msgspec.DecodeError, RecursionError, UnicodeEncodeError):
        return json.loads(text)


def _strict_decode(text: str, check_surrogates: bool = True) -> Any:
    """``json.loads`` that refuses duplicate keys, NaN/Infinity, nesting deeper than the
    limit and lone surrogates (raising ``_Refused``); JSONDecodeError as usual. A fast C
    parse answers when it surely agrees (see :func:`_fast_decode`); the stdlib parse with
    its checks runs otherwise."""
    doc = _fast_decode(text, _LIMITS.get().max_depth)
    if doc is not _SLOW:
        return doc
    try:
        doc = _STRICT.decode(text)
    except RecursionError:
        raise _Refused("depth") from None
    if (type(doc) is dict or type(doc) is list) and _too_deep(doc, _LIMITS.get().max_depth):
        raise _Refused("depth")
    if check_surrogates and "\\u" in text and _lone_surrogate(text) is not None:
        raise _Refused("surrogate")
    return doc


def _refused_error(path: Path, text: str, exc: _Refused, line: int | None) -> TrajectoryFormatError:
    offset = _lone_surrogate(text) if exc.kind == "surrogate" else -1
    off, field, msg = _refusal(text, exc.kind, _LIMITS.get(), offset if offset is not None else -1)
    if line is None:
        line = text.count("\n", 0, off) + 1
    return Loc(path, line, field).error(msg)


def load_json(path: Path, text: str | None = None) -> Any:
    """Parse a whole-file JSON document strictly; errors name the file, line and field.

    Refused besides invalid JSON: duplicate keys, NaN/Infinity, nesting deeper than
    :attr:`ReadLimits.max_depth`, lone surrogate escapes (see the module docstring).
    """
    once = _ONCE.get() if text is None else None
    entry = None
    if once is not None:
        text = read_text(path)
        entry = once.get(os.fspath(path))  # None: a file of a directory log, read once
        if entry is not None and entry[1] is not _UNPARSED:
            return entry[1]
    if text is None:
        text = read_text(path)
    try:
        doc = _strict_decode(text)
    except json.JSONDecodeError as exc:
        raise TrajectoryFormatError(
            f"{path}: line {exc.lineno} column {exc.colno}: invalid JSON ({exc.msg})"
        ) from exc
    except _Refused as exc:
        raise _refused_error(path, text, exc, None) from None
    if entry is not None:
        entry[1] = doc
    return doc


_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def load_json_files(paths: Sequence[str], limit: int) -> list[Any] | None:
    """The documents of many small JSON files (a conversation directory: thousands of
    event files), or None when one of them might not load as :func:`load_json` loads it:
    the caller then loads them one by one, for the exact first error.

    None for a file that is not a regular file, is empty, begins with anything but ``{``
    or ``[`` (a byte-order mark, blank space), or that msgspec refuses (msgspec decodes
    bytes as strict UTF-8 and refuses a NUL byte anywhere, so an undecodable or binary
    file is refused too), for files together larger than ``limit`` bytes, and for any
    doubt :func:`_fast_decode` would have (duplicate keys by colons, counted once for all
    files: no file's re-encoding holds more colons than its text, so the sums are equal
    exactly when every file's are; nesting). Lean by design: one descriptor, one
    ``fstat`` and one read per file, no ``Path`` objects, each byte scan made once."""
    raws: list[bytes] = []
    total = 0
    fopen, fstat, fread, fclose, isreg = os.open, os.fstat, os.read, os.close, stat.S_ISREG
    try:
        for p in paths:
            fd = fopen(p, _READ_FLAGS)
            try:
                st = fstat(fd)
                size = st.st_size
                total += size
                if not isreg(st.st_mode) or total > limit:
                    return None
                raw = fread(fd, size + 1)
                if len(raw) != size or not size:  # grew or shrank while read: the slow path
                    return None
            finally:
                fclose(fd)
            if raw[0] != 123 and raw[0] != 91:  # not "{" or "[": BOM, blank space ...
                return None
            raws.append(raw)
        docs = list(map(_FAST.decode, raws))
    except (OSError, msgspec.DecodeError, RecursionError):
        return None
    colons = 0
    max_depth = _LIMITS.get().max_depth
    deep: list[int] = []
    for j, raw in enumerate(raws):
        if b"\\u003" in raw:  # an escaped colon: the counts below could not tell
            return None
        marks = raw.translate(None, _NOT_MARKS)  # its colons and opening brackets only:
        colons += marks.count(b":")              # one pass over the text, not three
        if len(marks) - marks.count(b":") > max_depth:
            deep.append(j)
    if _ENCODE(docs).count(b":") != colons:
        return None
    for j in deep:
        if _too_deep(docs[j], max_depth):
            return None
    return docs


# every byte but ":", "{" and "[" (bytes.translate deletes them), and but those and "\n"
_NOT_MARKS = bytes(sorted(set(range(256)) - set(b":{[")))
_NOT_LINE_MARKS = bytes(sorted(set(range(256)) - set(b":{[\n")))
_CHUNK = 1 << 24
_PIECE = 1 << 18
_JSON_BLANK = frozenset(b" \t\r\n")


def load_embedded_json(text: str, loc: Loc) -> Any:
    """A JSON document held in a string field (tool-call arguments, a replay config), parsed
    as strictly as a file: duplicate keys, NaN/Infinity, nesting deeper than the limit and
    lone surrogates raise a :class:`TrajectoryFormatError` naming the field. Invalid JSON
    raises ``json.JSONDecodeError``, for the caller to word."""
    try:
        return _strict_decode(text)
    except _Refused as exc:
        offset = _lone_surrogate(text) if exc.kind == "surrogate" else -1
        _, field, msg = _refusal(text, exc.kind, _LIMITS.get(), offset if offset is not None
                                 else -1)
        raise loc.error(f"its JSON text holds {msg}" + (f" (at {field})" if field else "")
                        ) from None


@dataclass(slots=True)
class JsonlLine:
    lineno: int
    obj: dict[str, Any]
    arrival: float | None = None


def parse_json_line(line: str, path: Path, lineno: int, *, check_surrogates: bool = True
                    ) -> dict[str, Any]:
    """One JSONL line as a JSON object, parsed as strictly as :func:`load_json`; errors name
    the file, the line and the field. For streaming parsers that get lines one by one."""
    try:
        obj = _strict_decode(line, check_surrogates)
    except json.JSONDecodeError as exc:
        raise TrajectoryFormatError(f"{path}: line {lineno}: not valid JSON ({exc.msg})") from exc
    except _Refused as exc:
        raise _refused_error(path, line, exc, lineno) from None
    if type(obj) is not dict:
        raise TrajectoryFormatError(
            f"{path}: line {lineno}: expected a JSON object, got {type(obj).__name__}"
        )
    return obj


def iter_jsonl(
    path: Path,
    text: str | None = None,
    *,
    allow_truncated_tail: bool = False,
    meta: dict[str, Any] | None = None,
) -> Iterator[JsonlLine]:
    """Yield each non-blank line (lines end at ``"\\n"``) as a JSON object with its 1-based
    line number.

    A line that is not JSON, or not a JSON object, raises :class:`TrajectoryFormatError`
    naming the line; so does one :func:`load_json` would refuse. The last line is treated
    the same unless ``allow_truncated_tail``.
    """
    if text is None:
        text = read_text(path)
    check_surrogates = "\\u" in text and _lone_surrogate(text) is not None
    # lines end at "\n" only (as json counts them): str.splitlines would also break at
    # U+2028/U+2029, \x85, \x0c, ... which JSON strings may hold raw
    lines = text.split("\n")
    last = len(lines) - 1  # the last non-blank line (blank: empty or whitespace only)
    while last >= 0 and (not lines[last] or lines[last].isspace()):
        last -= 1
    for i, s in enumerate(lines):
        if not s or s.isspace():  # not s.strip(), which copies every line
            continue
        try:
            obj = parse_json_line(s, path, i + 1, check_surrogates=check_surrogates)
        except TrajectoryFormatError as exc:
            if not isinstance(exc.__cause__, json.JSONDecodeError):
                raise
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
                f"{path}: line {i + 1}: not valid JSON ({exc.__cause__.msg}){hint}"
            ) from exc.__cause__
        yield JsonlLine(i + 1, obj)


def jsonl_records(
    path: Path,
    text: str | None = None,
    *,
    allow_truncated_tail: bool = False,
    meta: dict[str, Any] | None = None,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of every non-blank line: what :func:`iter_jsonl` yields (the
    same objects, the same errors), parsed in one go when that surely agrees.

    A file read whole is parsed by msgspec line by line with no per-line Python checks;
    the checks :func:`_fast_decode` makes per line are made once for the whole text (every
    line a JSON object, structural colons against re-encoded ones, nesting only on lines
    with more brackets than the limit). A blank line, a line msgspec refuses or any doubt
    sends the whole file through :func:`iter_jsonl`, which decides and words the error."""
    max_depth = _LIMITS.get().max_depth
    docs = None
    if text is None:  # the bytes first: their text is decoded only when they are refused
        raw = read_log_bytes(path)
        docs = _bulk_jsonl_bytes(raw, max_depth)
        if docs is None:
            text = log_text(path, raw)
    if docs is None:
        docs = _bulk_jsonl(text, max_depth)
    if docs is not None:
        return _drained(docs)
    return ((ln.lineno, ln.obj) for ln in iter_jsonl(
        path, text, allow_truncated_tail=allow_truncated_tail, meta=meta))


def _drained(docs: list[dict[str, Any]]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of each of ``docs``, each let go of as it is handed out: a
    line a reader has folded into its events is freed before the next is read, so that
    the memory of a large log's lines is reused for its events (a 50 MB read faults in
    fewer fresh pages, and runs faster)."""
    docs.reverse()
    pop = docs.pop
    for i in range(1, len(docs) + 1):
        yield i, pop()


def _bulk_jsonl_bytes(raw: bytes, max_depth: int) -> list[dict[str, Any]] | None:
    """:func:`_bulk_jsonl` of the file's bytes, not decoded (msgspec refuses a line that is
    not valid UTF-8 as strictly as Python's codec, and the text then decides): the same
    lines (a newline, a colon or a bracket is one byte in UTF-8 and no byte of another
    character), the same documents, with the marks taken from the bytes as they are. None
    on any doubt, also where the text form might still agree (a byte-order mark, a
    trailing line of Unicode blank space): the caller then asks the text form.

    The file is taken a piece of whole lines at a time (about ``_PIECE`` bytes): each
    piece is split, decoded, re-encoded and scanned while it is still in the processor's
    cache, and no copy of the whole file (its lines, their re-encoding) is ever made. The
    checks are exact per piece: a piece's re-encoded colons never exceed its own, so the
    file's totals agree exactly when every piece's do."""
    docs: list[dict[str, Any]] = []
    n = len(raw)  # trailing JSON blank space left out: the blank lines that may end a file
    while n and raw[n - 1] in _JSON_BLANK:
        n -= 1
    start = 0
    while start < n:
        end = raw.find(b"\n", start + _PIECE, n)
        last = end < 0
        piece = raw[start:n] if last else raw[start:end]
        start = end + 1
        lines = piece.split(b"\n")
        part = _line_objects(lines) if last else _piece_objects(lines)
        if part is None or b"\\u003" in piece and (b"\\u003a" in piece or b"\\u003A" in piece):
            return None
        if not _marks_agree(part, piece.translate(None, _NOT_LINE_MARKS), max_depth):
            return None
        docs += part
        if last:
            break
    return docs


def _piece_objects(lines: list[str] | list[bytes]) -> list[dict[str, Any]] | None:
    """Every line as the JSON object msgspec parses, or None when one is not (a blank one
    included: only the file's last piece may end in blank lines)."""
    try:
        docs = list(map(_FAST.decode, lines))
    except (msgspec.DecodeError, RecursionError, UnicodeEncodeError):
        return None
    for d in docs:
        if type(d) is not dict:
            return None
    return docs


def _line_objects(lines: list[str] | list[bytes]) -> list[dict[str, Any]] | None:
    """Every line, bar trailing blank ones, as the JSON object msgspec parses (the list
    ``lines`` is cut to them), or None when one is not."""
    n = len(lines)
    while n and (not lines[n - 1] or lines[n - 1].isspace()):
        n -= 1
    del lines[n:]
    return _piece_objects(lines)


def _marks_agree(docs: list[dict[str, Any]], marks: bytes, max_depth: int) -> bool:
    """Whether a file's colons, opening brackets and newlines (``marks``, nothing else
    kept) say its lines' documents are those of the strict parse: as many colons as the
    re-encoded documents hold, and no line deeper than ``max_depth`` (a line's marks bound
    its brackets: only lines with more are counted, and walked when those are more)."""
    if _ENCODE(docs).count(b":") != marks.count(b":"):
        return False
    per_line = marks.split(b"\n")
    if max(map(len, per_line)) > max_depth:
        for m, d in zip(per_line, docs, strict=False):  # (trailing blank lines: no docs)
            if len(m) - m.count(b":") > max_depth and _too_deep(d, max_depth):
                return False
    return True


def _bulk_jsonl(text: str, max_depth: int) -> list[dict[str, Any]] | None:
    """Every line of ``text`` as a JSON object, or None when one line is blank (bar
    trailing ones), is not a JSON object msgspec parses, or might be refused by the strict
    parse (a duplicate key, nesting deeper than ``max_depth``): see :func:`_fast_decode`."""
    lines = text.split("\n")
    docs = _line_objects(lines)
    if docs is None or "\\u003" in text and ("\\u003a" in text or "\\u003A" in text):
        return None
    # its colons, opening brackets and newlines alone, in one pass over its UTF-8 (encoded
    # 16 MiB at a time: the copy stays small; every line encoded for msgspec already)
    marks = b"".join(text[k:k + _CHUNK].encode().translate(None, _NOT_LINE_MARKS)
                     for k in range(0, len(text), _CHUNK))
    return docs if _marks_agree(docs, marks, max_depth) else None


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
_INT64 = (-(2**63), 2**63 - 1)
_MISSING = object()


def _checked_int(v: int, loc: Loc) -> int:
    if not _INT64[0] <= v <= _INT64[1]:
        raise loc.error(f"integer {v:.3g} is beyond the 64-bit range a table column holds")
    return v


def _checked_float(v: float, loc: Loc) -> float:
    if not math.isfinite(v):
        raise loc.error(f"expected a finite number, got {v}")
    return v


def get(obj: dict[str, Any], key: str, typ: type | tuple[type, ...], loc: Loc,
        *, required: bool = False, default: Any = None) -> Any:
    """``obj[key]`` checked against ``typ``; a wrong type raises naming the field path.

    ``int`` fields reject booleans and integers beyond 64 bits; ``float`` fields accept
    ints and reject non-finite values. Missing keys give ``default`` unless ``required``.
    """
    v = obj.get(key, _MISSING) if type(obj) is dict else obj[key] if key in obj else _MISSING
    tv = type(v)
    if tv is str or tv is dict or tv is list:  # most fields: no number or boolean checks
        if tv is typ or (type(typ) is tuple and tv in typ):
            return v
    elif v is _MISSING:
        if required:
            raise (loc / key).error("missing required field")
        return default
    ts = typ if isinstance(typ, tuple) else (typ,)
    if isinstance(v, bool):
        if bool not in ts:
            raise (loc / key).error(f"expected {_type_name(typ)}, got boolean")
        return v
    if float in ts and isinstance(v, int | float):
        return to_float(v, loc / key)
    if not isinstance(v, ts):
        raise (loc / key).error(f"expected {_type_name(typ)}, got {_json_type(v)}")
    if isinstance(v, int):
        return _checked_int(v, loc / key)
    return v


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


def message_text(content: Any, loc: Loc) -> str:
    """The text of a chat message's ``content``: a string, or a list of parts (strings or
    objects whose ``text`` is a string, e.g. ``{"type": "text", "text": ...}``) joined by
    newlines; parts without text (images) are skipped, None is ''. Anything else raises."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if not isinstance(content, list):
        raise loc.error(f"expected string or array, got {_json_type(content)}")
    parts = []
    for j, c in enumerate(content):
        if isinstance(c, str):
            parts.append(c)
        elif isinstance(c, dict):
            t = c.get("text")
            if isinstance(t, str):
                parts.append(t)
            elif t is not None:
                raise (loc / j / "text").error(f"expected string, got {_json_type(t)}")
        else:
            raise (loc / j).error(f"expected object or string, got {_json_type(c)}")
    return "\n".join(parts)


def iso_field(obj: dict[str, Any], key: str, loc: Loc) -> float | None:
    """:func:`parse_iso` of ``obj[key]``, None when the key is missing; the field's
    :class:`Loc` is made only for an error, which then names it (readers read a timestamp
    per event)."""
    ts = obj.get(key, _MISSING)
    if ts is _MISSING:
        return None
    try:
        return parse_iso(ts, loc)
    except TrajectoryFormatError:
        pass  # worded again below, at the field, outside this handler (no chained context)
    return parse_iso(ts, loc / key)


_FROM_ISO = datetime.fromisoformat
# a naive time taken as UTC: its distance from the naive epoch is exactly what
# dt.replace(tzinfo=UTC).timestamp() computes (the same timedelta, the same division), at a
# fifth of the cost (replace() alone is ~1 us; OpenHands writes naive times on every event)
_NAIVE_EPOCH = datetime(1970, 1, 1)


def parse_iso(ts: Any, loc: Loc) -> float:
    """Epoch seconds from an ISO-8601 timestamp; naive times are taken as UTC."""
    if ts.__class__ is str:  # the usual text parses as is ("Z" included, Python >= 3.11)
        try:
            dt = _FROM_ISO(ts)
        except ValueError:
            pass  # spaces around it, or not a timestamp: the path below decides
        else:
            return dt.timestamp() if dt.tzinfo is not None else (
                dt - _NAIVE_EPOCH).total_seconds()
    if not isinstance(ts, str):
        raise loc.error(f"expected ISO-8601 timestamp string, got {_json_type(ts)}")
    s = ts.strip()
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(s)
    except ValueError as exc:
        raise loc.error(f"invalid ISO-8601 timestamp {ts!r}") from exc
    return dt.timestamp() if dt.tzinfo is not None else (dt - _NAIVE_EPOCH).total_seconds()


# ---------------------------------------------------------------------------------------
# Test summaries
# ---------------------------------------------------------------------------------------

_PYTEST_SUMMARY = re.compile(r"^=*\s*(?P<body>(?:\d+ \w+(?:, )?)+)\s+in\s+[\d.]+s", re.M)
# the same summary at the text's start, and after a newline: a first character the regex
# engine can scan for (a "^" in multiline mode is tried at every position). A summary
# ends in "s", never in a newline, so the newline it starts with was not the end of the
# summary before it, and the matches are those of _PYTEST_SUMMARY (see _pytest_summaries)
_SUMMARY_AT_START = re.compile(r"=*\s*(?P<body>(?:\d+ \w+(?:, )?)+)\s+in\s+[\d.]+s")
_SUMMARY_AFTER_NL = re.compile(r"\n=*\s*(?P<body>(?:\d+ \w+(?:, )?)+)\s+in\s+[\d.]+s")
_COUNT = re.compile(r"(\d+) (passed|failed|errors?|error|xpassed|xfailed|skipped|deselected)")
_UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in [\d.]+s", re.M)
_UNITTEST_RESULT = re.compile(r"^(OK|FAILED)\b(?: \((?P<detail>[^)]*)\))?", re.M)
_JEST = re.compile(r"^\s*Tests:?\s+(?P<body>.*(?:\d+ total|\(\d+\)))\s*$", re.M)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CARGO = re.compile(r"test result: \w+\. (\d+) passed; (\d+) failed")
_MOCHA_PASS = re.compile(r"^\s*(\d+) passing\b", re.M)
_MOCHA_FAIL = re.compile(r"^\s*(\d+) failing\b", re.M)


def _pytest_summaries(output: str) -> list[re.Match[str]]:
    """``list(_PYTEST_SUMMARY.finditer(output))``'s summaries (their ``body`` groups are
    the same text), found by scanning for newlines."""
    first = _SUMMARY_AT_START.match(output)
    found = [first] if first is not None else []
    found += _SUMMARY_AFTER_NL.finditer(output, first.end() if first is not None else 0)
    return found


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
    if "\x1b" in output:  # every ANSI sequence starts with ESC
        output = _ANSI.sub("", output)
    m = _pytest_summaries(output)
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


@lru_cache(maxsize=4096)
def _is_test_text(command: str) -> bool:
    return is_test_command(command)


@lru_cache(maxsize=4096)
def _is_commit_text(command: str) -> bool:
    return is_git_commit(command)


def clear_caches() -> None:
    """Forget every remembered verdict and split of a command (the shell parser's too), so
    that a benchmark reads each log cold, as a fresh process would."""
    _is_test_text.cache_clear()
    _is_commit_text.cache_clear()
    clear_shell_cache()


def classify_command(command: str | None, argv: list[str] | None) -> EventKind:
    """``test`` for a test command, else ``command``: the shell parser's verdict on the
    command string (else the argv), the same the provenance graph reaches. Verdicts on
    command strings are remembered (agents rerun the same tests, status and diff commands
    many times a session)."""
    if isinstance(command, str) and command:
        is_test = _is_test_text(command)
    else:
        is_test = is_test_command(argv)
    return EventKind.TEST if is_test else EventKind.COMMAND


def plain_event(kind: EventKind, step: int, extra: dict[str, Any], start: float | None = None,
                end: float | None = None, text: str | None = None,
                input_tokens: int | None = None, cached_tokens: int | None = None,
                output_tokens: int | None = None) -> Event:
    """``Event(index=0, kind=kind, step=step, ...)`` with every field given by position:
    binding keywords to the 23 fields by name costs a third of making an event (the Codex
    readers' tests check the field order)."""
    return Event(0, kind, step, start, end, None, input_tokens, cached_tokens, output_tokens,
                 None, None, None, [], [], None, None, None, False, None, False, False, text,
                 extra)


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
        and (_is_commit_text(e.command) if isinstance(e.command, str) and e.command
             else is_git_commit(e.argv))
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
    *,
    path: Path | None = None,
) -> Trajectory:
    """Number events, mark ``turn_end`` on each step's last event, then :func:`seal` (times
    that run backwards flagged, totals, validation, a warning for no events)."""
    n = len(events)
    for i, e in enumerate(events):
        e.index = i
        e.turn_end = i + 1 == n or events[i + 1].step != e.step
    return seal(task_id, repo, source_format, events, meta, path=path)


def seal(
    task_id: str,
    repo: str,
    source_format: str,
    events: list[Event],
    meta: dict[str, Any],
    *,
    path: Path | None = None,
    time_flagged: list[int] | None = None,
) -> Trajectory:
    """The trajectory of numbered events, as every reader ends: flag times that run
    backwards (see :func:`flag_times`; ``time_flagged``: the indices a streaming parser
    already flagged with :func:`time_flags` as it released them), add totals, validate (a
    value no table column can hold raises a :class:`TrajectoryFormatError` naming
    ``path``). No events at all is an :class:`EmptyTrajectoryWarning`."""
    if path is None:
        path = _READING.get()
    where = str(path) if path is not None else task_id
    if time_flagged is None:
        flag_times(events, meta, where)
    else:
        _warn_time_flags(time_flagged, meta, where)
    if not events:
        warnings.warn(f"{where}: the log holds no events", EmptyTrajectoryWarning, stacklevel=3)
    meta.setdefault("totals", {}).update(totals(events))
    traj = Trajectory(task_id, repo, source_format, events, meta)
    try:
        traj.validate()
    except ValueError as exc:
        raise TrajectoryFormatError(f"{path}: {exc}" if path is not None else str(exc)) from exc
    return traj


def time_flags(e: Event, latest: float | None) -> tuple[list[str], float | None]:
    """The time flags of one event given the latest end of the events before it, and the
    latest end including it (see :func:`flag_times`; for parsers that release events one
    by one)."""
    flags: list[str] = []
    if e.end is not None:
        if e.start is not None and e.end < e.start:
            flags.append("end_before_start")
        if latest is not None and e.end < latest:
            flags.append("end_before_previous")
        latest = e.end if latest is None or e.end > latest else latest
    return flags, latest


def flag_times(events: Sequence[Event], meta: dict[str, Any], where: str) -> None:
    """Keep and flag times that run backwards (clocks jump; refusing would lose real logs):
    an event that ends before it starts (``"end_before_start"``), or ends before an earlier
    event ended (``"end_before_previous"``; events sit where their result arrived, so ends
    only grow). Flags go to ``extra["time_flags"]``, the flagged indices to
    ``meta["time_flags"]``, with one :class:`TimeOrderWarning`. Starts are not compared
    across events: a model call's start may come from the provider's clock."""
    latest: float | None = None
    flagged: list[int] = []
    for e in events:
        flags, latest = time_flags(e, latest)
        if flags:
            e.extra["time_flags"] = flags
            flagged.append(e.index)
    _warn_time_flags(flagged, meta, where)


def _warn_time_flags(flagged: list[int], meta: dict[str, Any], where: str) -> None:
    if flagged:
        meta["time_flags"] = flagged
        warnings.warn(f"{where}: times run backwards at {len(flagged)} event(s) (first: event "
                      f"{flagged[0]}); kept and flagged in extra['time_flags']",
                      TimeOrderWarning, stacklevel=5)


def totals(events: Sequence[Event]) -> dict[str, Any]:
    """Counts and token sums over events (token sums are None when no event has tokens)."""
    kinds = dict.fromkeys(EventKind, 0)
    errors = boundaries = 0
    steps: set[int] = set()
    t_in: int | None = None
    t_cached: int | None = None
    t_out: int | None = None
    for e in events:
        kinds[e.kind] += 1
        errors += e.is_error
        boundaries += e.safe_boundary
        steps.add(e.step)
        if (v := e.input_tokens) is not None:
            t_in = v if t_in is None else t_in + v
        if (v := e.cached_tokens) is not None:
            t_cached = v if t_cached is None else t_cached + v
        if (v := e.output_tokens) is not None:
            t_out = v if t_out is None else t_out + v
    tokens = (t_in, t_cached, t_out)
    out: dict[str, Any] = {"events": len(events)}
    out.update({f"n_{k.value}": n for k, n in kinds.items()})
    out["n_errors"] = errors
    out["n_safe_boundaries"] = boundaries
    out["steps"] = len(steps)
    out.update(zip(("input_tokens", "cached_tokens", "output_tokens"), tokens, strict=True))
    return out


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


def stem(path: Path) -> str:
    """File name without a compression suffix (``.gz``, ``.zst``) and known log suffixes
    (``.traj.json``, ``.traj``, ``.jsonl``, ``.json``)."""
    name = strip_compression(path.name)
    for suf in (".traj.json", ".traj", ".jsonl", ".json", ".txt", ".log"):
        if name.endswith(suf):
            return name[: -len(suf)]
    return Path(name).stem


def strip_compression(name: str) -> str:
    """``name`` without a trailing ``.gz`` / ``.zst`` / ``.zstd``."""
    for suf in _COMPRESSED_SUFFIXES:
        if name.endswith(suf) and len(name) > len(suf):
            return name[: -len(suf)]
    return name
