"""Append-only JSONL audit log: one fsync'd, checksummed record per finished branch.

The audit log is what makes a study resumable with no lost and no duplicated branch: a
branch counts as done exactly when its record is in the log, and a record is acknowledged
(``append`` returns) only after ``flush`` + ``os.fsync``. Each line is::

    {"key": "<unique branch key>", "record": {...}, "sha256": "<sha256 of canonical JSON of record>"}

Reading tolerates exactly one kind of damage, the one a crash can cause: a torn *last*
line (no trailing newline, or bad JSON / checksum on the last line). That write was never
acknowledged, so it is dropped with a warning and truncated from the file, and appends
continue cleanly. Damage anywhere else is corruption and raises :class:`AuditCorruptError`
naming the file and line. Concurrent writers (several processes) are serialised with an
exclusive ``flock``; each re-reads what the others appended before writing.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import stat
import warnings
from pathlib import Path
from typing import Any

__all__ = ["AuditCorruptError", "AuditDuplicateKeyError", "AuditLog", "canonical_json",
           "record_checksum"]


class AuditCorruptError(ValueError):
    """A record other than a torn last line is unreadable; the message names file and line."""


class AuditDuplicateKeyError(ValueError):
    """A record with this key is already in the audit log."""


def canonical_json(obj: Any) -> bytes:
    """Canonical JSON bytes (sorted keys, compact, UTF-8, no NaN) that checksums are taken of."""
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


_canonical = canonical_json


def record_checksum(record: dict) -> str:
    """sha256 (hex) of the canonical JSON (sorted keys, compact, UTF-8) of ``record``."""
    return hashlib.sha256(_canonical(record)).hexdigest()


class AuditLog:
    """Append-only, fsync'd JSONL log of finished branches, keyed by a unique branch key."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._records: list[dict[str, Any]] = []
        self._keys: set[str] = set()
        self._offset = 0
        self._line_no = 0
        self._ino: int | None = None

    # ------------------------------------------------------------------ plumbing
    def _open(self) -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK, 0o644)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # a FIFO would read as an empty study, not an error
            os.close(fd)
            raise AuditCorruptError(f"{self.path}: not a regular file: an audit log is one")
        if self._ino is not None and (st.st_ino != self._ino or st.st_size < self._offset):
            # The file was replaced or shrank behind our back: start over from disk.
            self._records, self._keys = [], set()
            self._offset = self._line_no = 0
        self._ino = st.st_ino
        return fd

    def _parse(self, raw: bytes) -> tuple[dict | None, str]:
        try:
            obj = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            return None, f"bad JSON ({exc})"
        if not isinstance(obj, dict) or set(obj) != {"key", "record", "sha256"}:
            return None, "not an audit record (need exactly key, record, sha256)"
        rec = obj["record"]
        if not isinstance(rec, dict):
            return None, "record is not an object"
        if record_checksum(rec) != obj["sha256"]:
            return None, "checksum mismatch"
        if rec.get("key") != obj["key"] or not isinstance(obj["key"], str):
            return None, "key does not match record['key']"
        return rec, ""

    def _refresh_locked(self, fd: int) -> None:
        size = os.fstat(fd).st_size
        if size == self._offset:
            return
        data = os.pread(fd, size - self._offset, self._offset)
        lines = data.split(b"\n")
        tail = lines.pop()  # b"" when the data ends with a newline
        consumed = 0
        for i, raw in enumerate(lines):
            line_no = self._line_no + i + 1
            rec, why = self._parse(raw)
            if rec is None:
                if i == len(lines) - 1 and not tail:
                    self._truncate_torn(fd, self._offset + consumed, line_no, why)
                    self._offset += consumed
                    self._line_no = line_no - 1
                    return
                raise AuditCorruptError(f"{self.path}:{line_no}: corrupt audit record: {why}")
            if rec["key"] in self._keys:
                raise AuditCorruptError(
                    f"{self.path}:{line_no}: duplicate key {rec['key']!r} in audit log"
                )
            self._keys.add(rec["key"])
            self._records.append(rec)
            consumed += len(raw) + 1
        self._offset += consumed
        self._line_no += len(lines)
        if tail:
            self._truncate_torn(fd, self._offset, self._line_no + 1, "no trailing newline")

    def _truncate_torn(self, fd: int, at: int, line_no: int, why: str) -> None:
        warnings.warn(
            f"{self.path}:{line_no}: dropping torn last line of the audit log ({why}); "
            "it was never acknowledged",
            stacklevel=4,
        )
        os.ftruncate(fd, at)
        os.fsync(fd)

    def _sync(self) -> int:
        """Open, lock and refresh; returns the locked descriptor (caller unlocks/closes)."""
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._refresh_locked(fd)
        except BaseException:
            os.close(fd)
            raise
        return fd

    # ------------------------------------------------------------------ API
    def append(self, record: dict) -> None:
        """Durably append ``record`` (needs a unique string ``record["key"]``).

        Returns only after the line is written, flushed and fsync'd. Raises
        :class:`AuditDuplicateKeyError` if the key is already present (also when another
        process appended it), ``ValueError``/``TypeError`` for a bad record.
        """
        if not isinstance(record, dict):
            raise TypeError(f"audit record must be a dict, got {type(record).__name__}")
        key = record.get("key")
        if not isinstance(key, str) or not key:
            raise ValueError(f"audit record needs a non-empty string 'key', got {key!r}")
        try:
            line = {"key": key, "record": record, "sha256": record_checksum(record)}
            data = _canonical(line) + b"\n"
        except (TypeError, ValueError) as exc:
            raise TypeError(f"audit record {key!r} is not JSON-serialisable: {exc}") from exc
        fd = self._sync()
        try:
            if key in self._keys:
                raise AuditDuplicateKeyError(f"{self.path}: key {key!r} is already recorded")
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
            # Round-trip through JSON so the cached copy equals what a reader will see.
            self._records.append(json.loads(data)["record"])
            self._keys.add(key)
            self._offset += len(data)
            self._line_no += 1
        finally:
            os.close(fd)  # closing releases the flock

    def records(self) -> list[dict]:
        """All acknowledged records, in append order (see module docstring for damage)."""
        if not self.path.exists():
            return []
        os.close(self._sync())
        return [dict(r) for r in self._records]

    def keys(self) -> set[str]:
        """The set of keys recorded so far."""
        if not self.path.exists():
            return set()
        os.close(self._sync())
        return set(self._keys)

    def __len__(self) -> int:
        return len(self.keys())

    def __contains__(self, key: object) -> bool:
        return key in self.keys()
