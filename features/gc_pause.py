"""Pausing Python's cyclic garbage collector around batch work.

Reading a trajectory table or walking a long trajectory allocates hundreds of thousands of
small, long-lived, acyclic objects (events, lists, graph records). Each allocation burst
triggers collection passes over the growing heap that find nothing to free and, measured,
cost as much as the work itself. Reference counting still frees everything as usual.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Disable the cyclic collector inside the block; restore its previous state after,
    also on error (a caller that had it disabled keeps it disabled)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
