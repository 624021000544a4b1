"""Strict JSON and JSONL: what the stdlib parser would return, refusing what a reader must not
take (duplicate keys, NaN/Infinity, nesting deeper than the limit, lone surrogate escapes),
with errors naming file, line and field; parsed by msgspec wherever that surely agrees (the
fast paths: one document, a directory of small documents, a JSONL file in bulk)."""

from __future__ import annotations

import json
import os
import re
import stat
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import Any

import msgspec

from features.readers.errors import TrajectoryFormatError
from features.readers.fields import Loc
from features.readers.files import (
    UNPARSED,
    ReadLimits,
    current_limits,
    log_read,
    log_text,
    read_log_bytes,
    read_text,
)
from features.readers.memory import check_memory, expect_memory


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
    msg = _REFUSALS[kind]
    if kind == "duplicate" and (m := _TOKEN.match(text, off)) is not None:
        key = json.loads(m.group())
        if isinstance(key, str) and looks_like_placeholder(key):
            msg = (f"duplicate key {key!r} {msg.removeprefix('duplicate key ')}; the key looks "
                   "like a placeholder a publisher put in place of real keys (and ids): the "
                   "values under it cannot be told apart, so the log is not read; read the "
                   "original log")
    return off, field, msg


_PLACEHOLDER_WORDS = ("REDACT", "PLACEHOLDER", "ANONYMI", "MASKED", "CENSOR", "SCRUBBED")
_PLACEHOLDER_SHAPE = re.compile(r"[\[<{(*#_-]+\w*[\]>})*#_-]+|\W+")


def looks_like_placeholder(key: str) -> bool:
    """Whether a key (or id) reads as a stand-in for a hidden value (``[REDACTED]``,
    ``<placeholder>``, ``***``) rather than a field name or a path."""
    upper = key.upper()
    return any(w in upper for w in _PLACEHOLDER_WORDS) or bool(
        _PLACEHOLDER_SHAPE.fullmatch(key))


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
    doc = _fast_decode(text, current_limits().max_depth)
    if doc is not _SLOW:
        return doc
    try:
        doc = _STRICT.decode(text)
    except RecursionError:
        raise _Refused("depth") from None
    if (type(doc) is dict or type(doc) is list) and _too_deep(doc, current_limits().max_depth):
        raise _Refused("depth")
    if check_surrogates and "\\u" in text and _lone_surrogate(text) is not None:
        raise _Refused("surrogate")
    return doc


def _refused_error(path: Path, text: str, exc: _Refused, line: int | None) -> TrajectoryFormatError:
    offset = _lone_surrogate(text) if exc.kind == "surrogate" else -1
    off, field, msg = _refusal(text, exc.kind, current_limits(), offset if offset is not None else -1)
    if line is None:
        line = text.count("\n", 0, off) + 1
    return Loc(path, line, field).error(msg)


def load_json(path: Path, text: str | None = None) -> Any:
    """Parse a whole-file JSON document strictly; errors name the file, line and field.

    Refused besides invalid JSON: duplicate keys, NaN/Infinity, nesting deeper than
    :attr:`ReadLimits.max_depth`, lone surrogate escapes (see the module docstring).
    """
    entry = None
    if text is None:
        text = read_text(path)
        entry = log_read(path)  # None: a file of a directory log, or no reading() block
        if entry is not None and entry.doc is not UNPARSED:
            return entry.doc
    expect_memory(len(text))  # one parse, all at once: what it may need is checked first
    try:
        doc = _strict_decode(text)
    except json.JSONDecodeError as exc:
        raise TrajectoryFormatError(
            f"{path}: line {exc.lineno} column {exc.colno}: invalid JSON ({exc.msg})"
        ) from exc
    except _Refused as exc:
        raise _refused_error(path, text, exc, None) from None
    if entry is not None:
        entry.doc = doc
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
        expect_memory(total)
        docs = list(map(_FAST.decode, raws))
    except (OSError, msgspec.DecodeError, RecursionError):
        return None
    colons = 0
    max_depth = current_limits().max_depth
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
        _, field, msg = _refusal(text, exc.kind, current_limits(), offset if offset is not None
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
        if not i & 4095:
            check_memory(f"line {i + 1}")
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
    max_depth = current_limits().max_depth
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
    # all in C, no Python frame per line: docs.pop() hands out the lines last to first
    # (reversed, so in order) until it reaches the end mark put under them
    docs.reverse()
    docs.insert(0, _END)
    return zip(count(1), iter(docs.pop, _END))


_END = object()  # the end mark of _drained (no parsed line is this object)


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
        check_memory(f"line {len(docs)}")
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
    expect_memory(len(text))
    docs = _line_objects(lines)
    if docs is None or "\\u003" in text and ("\\u003a" in text or "\\u003A" in text):
        return None
    # its colons, opening brackets and newlines alone, in one pass over its UTF-8 (encoded
    # 16 MiB at a time: the copy stays small; every line encoded for msgspec already)
    marks = b"".join(text[k:k + _CHUNK].encode().translate(None, _NOT_LINE_MARKS)
                     for k in range(0, len(text), _CHUNK))
    return docs if _marks_agree(docs, marks, max_depth) else None

