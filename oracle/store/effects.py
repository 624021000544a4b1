"""Append-only effect log and the fork barrier (durable fork points).

Every side effect a branch emits (a message sent, a file pushed, an API call) is appended
to a JSONL effect log before it is applied, and fsync'd. A consumer (the external world, a
sink) applies effects in order and marks them drained. A checkpoint is a *durable* fork
point only once the log is drained up to the point it covers
(``../shared/paper/002_*.txt``: forking at a logical boundary while effects are still in
flight leaves orphaned side effects); :meth:`EffectLog.barrier` enforces that and raises
:class:`ForkBarrierError` otherwise. Records carry the emitting branch's id, so the effects
of an aborted branch stay attributable (:meth:`EffectLog.effects_of`).

File format, one JSON object per line, each with a ``sha256`` over the canonical JSON of
the other fields::

    {"type": "effect", "seq": 0, "branch_id": "b1", "effect": {...}, "sha256": "..."}
    {"type": "drained", "upto": 0, "branch_id": "b1", "sha256": "..."}

Sequence numbers are per log file (0, 1, 2, ...), so several branches (or processes) may
share one file: appends take an exclusive ``flock`` and re-read whatever other writers
appended first. A torn last line (a write that never returned) is dropped with a warning
and truncated; a corrupt line anywhere else raises :class:`EffectLogCorruptError`.
"""

from __future__ import annotations

import fcntl
import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from oracle.store.audit import canonical_json, record_checksum

__all__ = ["EffectLog", "EffectLogCorruptError", "ForkBarrierError"]


class ForkBarrierError(RuntimeError):
    """A checkpoint was requested while effects it must cover are not yet drained."""


class EffectLogCorruptError(ValueError):
    """An effect log line (other than a torn last one) is unreadable; names file and line."""


# one canonical form and checksum for every append-only log of the oracle
_canonical = canonical_json
_checksum = record_checksum


class EffectLog:
    """Append-only, fsync'd JSONL log of one branch's side effects (see module docstring)."""

    def __init__(self, path: Path, branch_id: str) -> None:
        if not isinstance(branch_id, str) or not branch_id:
            raise ValueError(f"EffectLog {path}: branch_id must be a non-empty string")
        self.path = Path(path)
        self.branch_id = branch_id
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._records: list[dict[str, Any]] = []  # effect records, in seq order
        self._appended = -1
        self._drained = -1
        self._offset = 0  # bytes of the file already parsed
        self._line_no = 0  # lines already parsed
        # Open (creating) for appending; the same descriptor carries the flock.
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        with self._locked():
            self._refresh_locked()

    # ------------------------------------------------------------------ plumbing
    def close(self) -> None:
        """Close the underlying descriptor (the log stays on disk)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> EffectLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass

    def _locked(self) -> _Flock:
        if self._fd < 0:
            raise ValueError(f"EffectLog {self.path} is closed")
        return _Flock(self._fd)

    def _refresh_locked(self) -> None:
        """Parse lines appended since the last refresh (caller holds the lock)."""
        size = os.fstat(self._fd).st_size
        if size == self._offset:
            return
        if size < self._offset:
            raise EffectLogCorruptError(
                f"{self.path}: file shrank from {self._offset} to {size} bytes under us"
            )
        data = os.pread(self._fd, size - self._offset, self._offset)
        lines = data.split(b"\n")
        tail = lines.pop()  # b"" when data ends with a newline
        consumed = 0
        for i, raw in enumerate(lines):
            line_no = self._line_no + i + 1
            rec = self._parse(raw, line_no)
            if rec is None:
                if i == len(lines) - 1 and not tail:
                    # Bad JSON/checksum on the very last (complete) line: torn write.
                    self._drop_torn(self._offset + consumed, line_no)
                    self._offset += consumed
                    self._line_no = line_no - 1
                    return
                raise EffectLogCorruptError(
                    f"{self.path}:{line_no}: corrupt effect log record (bad JSON or checksum)"
                )
            self._apply(rec, line_no)
            consumed += len(raw) + 1
        self._offset += consumed
        self._line_no += len(lines)
        if tail:
            self._drop_torn(self._offset, self._line_no + 1)

    def _drop_torn(self, at: int, line_no: int) -> None:
        warnings.warn(
            f"{self.path}:{line_no}: dropping torn last line of the effect log "
            "(a write that never completed)",
            stacklevel=3,
        )
        os.ftruncate(self._fd, at)
        os.fsync(self._fd)

    def _parse(self, raw: bytes, line_no: int) -> dict[str, Any] | None:
        try:
            obj = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(obj, dict) or "sha256" not in obj:
            return None
        fields = {k: v for k, v in obj.items() if k != "sha256"}
        if _checksum(fields) != obj["sha256"]:
            return None
        return fields

    def _apply(self, rec: dict[str, Any], line_no: int) -> None:
        kind = rec.get("type")
        if kind == "effect":
            if rec.get("seq") != self._appended + 1:
                raise EffectLogCorruptError(
                    f"{self.path}:{line_no}: effect seq {rec.get('seq')!r}, "
                    f"expected {self._appended + 1}"
                )
            self._appended += 1
            self._records.append(rec)
        elif kind == "drained":
            upto = rec.get("upto")
            if not isinstance(upto, int) or upto > self._appended:
                raise EffectLogCorruptError(
                    f"{self.path}:{line_no}: drained mark {upto!r} beyond appended "
                    f"{self._appended}"
                )
            self._drained = max(self._drained, upto)
        else:
            raise EffectLogCorruptError(f"{self.path}:{line_no}: unknown record type {kind!r}")

    def _write_locked(self, fields: dict[str, Any]) -> None:
        line = dict(fields)
        line["sha256"] = _checksum(fields)
        data = _canonical(line) + b"\n"
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        os.fsync(self._fd)
        self._offset += len(data)
        self._line_no += 1

    # ------------------------------------------------------------------ API
    def append(self, effect: dict) -> int:
        """Durably record ``effect`` (a JSON-serialisable dict); return its sequence number."""
        if not isinstance(effect, dict):
            raise TypeError(f"EffectLog {self.path}: effect must be a dict, got {type(effect)}")
        try:
            _canonical(effect)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"EffectLog {self.path}: effect is not JSON-serialisable: {exc}") from exc
        with self._locked():
            self._refresh_locked()
            fields = {
                "type": "effect",
                "seq": self._appended + 1,
                "branch_id": self.branch_id,
                "effect": effect,
            }
            self._write_locked(fields)
            self._apply(fields, self._line_no)
            return self._appended

    def mark_drained(self, seq: int) -> None:
        """Record that the consumer has applied every effect with sequence number <= ``seq``."""
        if not isinstance(seq, int) or seq < -1:
            raise ValueError(f"EffectLog {self.path}: bad drain seq {seq!r}")
        with self._locked():
            self._refresh_locked()
            if seq > self._appended:
                raise ValueError(
                    f"EffectLog {self.path}: cannot mark seq {seq} drained, only "
                    f"{self._appended} appended"
                )
            if seq <= self._drained:
                return
            fields = {"type": "drained", "upto": seq, "branch_id": self.branch_id}
            self._write_locked(fields)
            self._drained = seq

    def _refresh(self) -> None:
        with self._locked():
            self._refresh_locked()

    @property
    def appended_upto(self) -> int:
        """Highest sequence number appended so far (-1 when empty)."""
        self._refresh()
        return self._appended

    @property
    def drained_upto(self) -> int:
        """Highest sequence number the consumer has applied (-1 when none)."""
        self._refresh()
        return self._drained

    def barrier(self, upto: int | None = None) -> None:
        """Raise :class:`ForkBarrierError` unless effects ``<= upto`` are all drained.

        ``upto`` defaults to everything appended so far. This is the check a checkpoint
        must pass to be a durable fork point.
        """
        if upto is not None and (not isinstance(upto, int) or upto < -1):
            raise ValueError(f"EffectLog {self.path}: bad barrier seq {upto!r}")
        self._refresh()
        target = self._appended if upto is None else upto
        if target > self._appended:
            raise ValueError(
                f"EffectLog {self.path}: barrier at seq {target} but only "
                f"{self._appended} appended"
            )
        if self._drained < target:
            pending = target - self._drained
            raise ForkBarrierError(
                f"fork barrier: effect log {self.path} drained up to {self._drained}, "
                f"checkpoint needs {target} ({pending} effect(s) pending, seq "
                f"{self._drained + 1}..{target}); drain the log before checkpointing"
            )

    def pending(self) -> list[dict]:
        """Effect records appended but not yet drained, in order."""
        self._refresh()
        return [dict(r) for r in self._records[self._drained + 1 :]]

    def drain(self, sink: Callable[[dict], None] | None = None) -> int:
        """Apply pending effects in order through ``sink`` and mark each drained.

        ``sink`` receives the full record ``{"type", "seq", "branch_id", "effect"}`` (the
        seq doubles as an idempotency key). Each effect is marked drained right after the
        sink returns, so a crash mid-drain re-applies at most the one in flight. With no
        sink the effects are simply acknowledged. Returns the new ``drained_upto``.
        """
        for rec in self.pending():
            if sink is not None:
                sink(rec)
            self.mark_drained(rec["seq"])
        return self.drained_upto

    def effects_of(self, branch_id: str) -> list[dict]:
        """Every effect record emitted by ``branch_id``, in order, each with ``drained``."""
        self._refresh()
        out = []
        for rec in self._records:
            if rec["branch_id"] == branch_id:
                item = dict(rec)
                item["drained"] = rec["seq"] <= self._drained
                out.append(item)
        return out


class _Flock:
    """Exclusive ``flock`` on an open descriptor, as a context manager."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __enter__(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
