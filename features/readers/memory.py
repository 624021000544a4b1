"""The memory a read may take: a budget per read, and checks that refuse a log past it in one
line, before the process runs out (a read that ran out of memory printed an empty error, or
died).

A read's objects cost far more than its bytes: 14 MB per MiB of a usual log, and up to ~40
for one of tiny records (``{"type": "x"}`` lines, lists of empty objects), so ``max_bytes``
alone does not bound memory. The budget of a read is :data:`MEMORY_MULTIPLE` times
``ReadLimits.max_bytes`` (``ReadLimits.max_memory`` when set), and never more than what the
process's own limits leave (``RLIMIT_AS``, ``RLIMIT_DATA``, the cgroup's ``memory.max``),
less a margin. The readers check it where memory grows: each piece of a JSONL file parsed,
every few thousand records turned into events, each chunk decompressed; before one large
allocation (a whole JSON document parsed at once) they check what it will need at worst
(:data:`DECODE_FACTOR` bytes per byte of its text). Memory is read from
``/proc/self/statm`` (resident and virtual size; on a system without it, nothing is
checked beyond the pre-checks).
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from features.readers.errors import TrajectoryFormatError

#: a read may add this many times ``ReadLimits.max_bytes`` to the process's memory
MEMORY_MULTIPLE = 16
#: the most memory a JSON text's objects take, per byte of text (``[{}, {}, ...]``: a 64-byte
#: dict per 3 bytes), for the check made before a whole document is parsed at once
DECODE_FACTOR = 24
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_CGROUP = Path("/sys/fs/cgroup")
_MIB = 2**20


def process_memory() -> tuple[int, int] | None:
    """(virtual size, resident size) of this process in bytes, None where unknown."""
    try:
        with open("/proc/self/statm", "rb") as f:
            fields = f.read().split()
        return int(fields[0]) * _PAGE, int(fields[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def _cgroup_left() -> int | None:
    """Bytes the process's cgroup may still take (``memory.max`` less ``memory.current``),
    None without a limit."""
    try:
        limit = (_CGROUP / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return int(limit) - int((_CGROUP / "memory.current").read_text())
    except (OSError, ValueError):
        return None


def _rlimit_left(which: int, used: int) -> int | None:
    try:
        soft, _hard = resource.getrlimit(which)
    except (OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY else soft - used


class MemoryBudget:
    """The memory one read may add to the process, and the checks against it."""

    __slots__ = ("path", "budget", "why", "base_rss", "vm_cap", "cgroup")

    def __init__(self, path: Path, max_bytes: int, max_memory: int | None) -> None:
        self.path = path
        budget = max_memory if max_memory is not None else MEMORY_MULTIPLE * max_bytes
        why = (f"--max-memory-mb {budget // _MIB}" if max_memory is not None
               else f"{MEMORY_MULTIPLE} x --max-mb")
        mem = process_memory()
        vm, rss = mem if mem is not None else (0, 0)
        self.base_rss = rss
        self.vm_cap: int | None = None  # the virtual size a check refuses past
        self.cgroup = False
        lefts = [(n, what) for n, what in (
            (_rlimit_left(resource.RLIMIT_AS, vm), "the address-space limit (ulimit -v)"),
            (_rlimit_left(resource.RLIMIT_DATA, vm), "the data-size limit (ulimit -d)"),
            (_cgroup_left(), "the cgroup's memory.max")) if n is not None]
        for left, what in lefts:
            usable = left - max(left // 8, 32 * _MIB)  # a margin for what a check misses
            if what.startswith("the cgroup"):
                self.cgroup = True
            elif mem is not None:
                cap = vm + usable
                self.vm_cap = cap if self.vm_cap is None else min(self.vm_cap, cap)
            if usable < budget:
                budget, why = max(usable, 0), f"what {what} leaves"
        self.budget = budget
        self.why = why

    def error(self, where: str, need: str = "") -> TrajectoryFormatError:
        at = f" {where}:" if where else ""
        fix = ("give the process more memory, or lower --max-mb" if self.why.startswith("what")
               else "raise it with --max-memory-mb or ReadLimits(max_memory=...)")
        return TrajectoryFormatError(
            f"{self.path}:{at} reading it takes more memory than a read may use "
            f"({self.budget // _MIB} MiB: {self.why}){need}; refused ({fix})")

    def check(self, where: str = "") -> None:
        """Refuse when the read has grown past its budget (or near a process limit)."""
        mem = process_memory()
        if mem is None:
            return
        vm, rss = mem
        if rss - self.base_rss > self.budget or (
                self.vm_cap is not None and vm > self.vm_cap):
            raise self.error(where)
        if self.cgroup and (left := _cgroup_left()) is not None and left < 32 * _MIB:
            raise self.error(where)

    def expect(self, nbytes: int, where: str = "") -> None:
        """Refuse before parsing ``nbytes`` of JSON text at once when its objects could take
        more than is left of the budget (:data:`DECODE_FACTOR` per byte, at worst)."""
        need = DECODE_FACTOR * nbytes
        mem = process_memory()
        grown, vm = ((mem[1] - self.base_rss, mem[0]) if mem is not None else (0, 0))
        if grown + need > self.budget or (self.vm_cap is not None and vm + need > self.vm_cap):
            raise self.error(where, f"; its {nbytes / _MIB:.0f} MiB of JSON text may need up "
                             f"to {need // _MIB} MiB at once")


_BUDGET: ContextVar[MemoryBudget | None] = ContextVar("ripplecp_read_memory", default=None)


@contextmanager
def bounded_memory(path: Path, max_bytes: int, max_memory: int | None) -> Iterator[MemoryBudget]:
    """The block reads ``path`` within a memory budget (see the module docstring)."""
    token = _BUDGET.set(budget := MemoryBudget(path, max_bytes, max_memory))
    try:
        yield budget
    finally:
        _BUDGET.reset(token)


def check_memory(where: str = "") -> None:
    """:meth:`MemoryBudget.check` of the read in progress (nothing outside a read)."""
    budget = _BUDGET.get()
    if budget is not None:
        budget.check(where)


def expect_memory(nbytes: int, where: str = "") -> None:
    """:meth:`MemoryBudget.expect` of the read in progress (nothing outside a read)."""
    budget = _BUDGET.get()
    if budget is not None:
        budget.expect(nbytes, where)
