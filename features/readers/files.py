"""Reading a log's bytes: regular files only, within :class:`ReadLimits`, gzip and zstandard
opened by content, UTF-8 decoded; and the read-once cache of a :func:`reading` block, where
format detection and the reader share the log's bytes, text and parsed document."""

from __future__ import annotations

import errno
import gzip
import io
import os
import stat
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zstandard

from features.gc_pause import gc_paused
from features.readers.errors import TrajectoryFormatError
from features.readers.memory import bounded_memory, check_memory


@dataclass(frozen=True)
class ReadLimits:
    """Bounds on what one log may make a reader do, so bad input never exhausts memory.

    ``max_bytes``: the largest log read, counted after decompression (a directory log: its
    files together); ``max_depth``: the deepest nesting of JSON arrays and objects (deeper
    documents break comparison, copying and JSON writing long before the parser's own
    recursion limit); ``max_memory``: the most memory a read may add to the process (None:
    :data:`~features.readers.memory.MEMORY_MULTIPLE` times ``max_bytes``; either way no
    more than the process's own memory limits leave, see :mod:`features.readers.memory`).
    Set for a block with :func:`read_limits`, or per call with
    ``read_trajectory(limits=...)`` / ``python -m features --max-mb --max-memory-mb``.
    """

    max_bytes: int = 512 * 2**20
    max_depth: int = 128
    max_memory: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_depth", "max_memory"):
            v = getattr(self, name)
            if v is None and name == "max_memory":
                continue
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"ReadLimits.{name} must be a positive integer, got {v!r}")


DEFAULT_LIMITS = ReadLimits()
_LIMITS: ContextVar[ReadLimits] = ContextVar("ripplecp_read_limits", default=DEFAULT_LIMITS)
UNPARSED: Any = object()  # LogRead.doc before the strict parse ran


@dataclass(slots=True)
class LogRead:
    """What a :func:`reading` block keeps of its log: the bytes as read (checked: not
    empty, not binary), their text once decoded, and the parsed document once
    :func:`~features.readers.strict_json.load_json` parsed it (``UNPARSED`` until then).
    Format detection and the reader share it; neither may change it."""

    raw: bytes
    text: str | None = None
    doc: Any = UNPARSED


# path -> what is kept of the log while a reading() block is open
_ONCE: ContextVar[dict[str, LogRead] | None] = ContextVar("ripplecp_read_once", default=None)
_READING: ContextVar[Path | None] = ContextVar("ripplecp_reading", default=None)


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
    :func:`finish` names ``path`` in its warnings and errors. The read's memory is bounded
    (:func:`~features.readers.memory.bounded_memory`).

    The cyclic garbage collector is paused meanwhile (:func:`features.gc_pause.gc_paused`:
    its state restored after, the survivors promoted to the oldest generation): a read
    allocates millions of containers that live to its end, so the collector's passes over
    them found nothing and cost up to a fifth of a read; what is left is reference-counted
    away as usual, and any cycles are collected by the next full collection."""
    token = _ONCE.set({})
    ptoken = _READING.set(path)
    limits = _LIMITS.get()
    try:
        with gc_paused(), bounded_memory(path, limits.max_bytes, limits.max_memory):
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
        check_memory()


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
            checked = total >> 22
            total += len(out)
            if total > limit:
                raise _too_big(path, limit, "decompressed zstandard data")
            if total >> 22 != checked:  # every 4 MiB out
                check_memory()
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


def log_read(path: Path) -> LogRead | None:
    """What the open :func:`reading` block keeps of ``path``, None when it keeps nothing
    (outside a block, a file other than the log, or the log not read yet)."""
    once = _ONCE.get()
    return once.get(os.fspath(path)) if once is not None else None


def reading_path() -> Path | None:
    """The log the open :func:`reading` block reads (None outside one)."""
    return _READING.get()


def _remember(path: Path, text: str | None, raw: bytes) -> None:
    """Keep the log's bytes (and text) for the rest of its :func:`reading` block."""
    once = _ONCE.get()
    key = os.fspath(path)
    if once is not None and key == os.fspath(_READING.get() or ""):
        # the log itself: detection and the reader share the text, the parse and the bytes
        once[key] = LogRead(raw, text)


def read_log_bytes(path: Path) -> bytes:
    """The bytes of a log, refused as :func:`read_text` refuses them (empty, binary, too
    large) but not decoded: inside a read the bytes are parsed as they are (msgspec checks
    their UTF-8 as it decodes them), and whatever it refuses is decided on the text
    (:func:`read_text`, which words the error). Read once per :func:`reading` block."""
    entry = log_read(path)
    if entry is not None:
        return entry.raw
    raw = _checked_bytes(path)
    _remember(path, None, raw)
    return raw


def read_text(path: Path) -> str:
    """Read a log as UTF-8 text (see :func:`read_bytes`); empty, binary or undecodable files
    raise a format error."""
    entry = log_read(path)
    if entry is not None and entry.text is not None:
        return entry.text
    raw = entry.raw if entry is not None else _checked_bytes(path)
    text = decode_log(path, raw)
    if entry is not None:
        entry.text = text
    else:
        _remember(path, text, raw)
    return text


def log_text(path: Path, raw: bytes) -> str:
    """The text of the log whose bytes :func:`read_log_bytes` gave: :func:`read_text`
    inside a read (decoded once, kept), else those bytes decoded (never read twice)."""
    return read_text(path) if log_read(path) is not None else decode_log(path, raw)


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
