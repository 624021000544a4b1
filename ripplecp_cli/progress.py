"""Progress of a long step: a tqdm bar on a terminal, plain lines anywhere else.

Every command shows its long steps (over ~2 s) through :func:`progress`. On a terminal it is
tqdm's bar; where the stream is not a terminal (a log file, CI, a pipe, a test's captured
stderr) carriage-return redraws would pile up in one unreadable line, so it writes one plain
line instead — at most every ``interval`` seconds while the step runs, and one when it ends::

    folds (family x held-out repo): 1/3 (12.0 s)
    folds (family x held-out repo): 3/3 done in 31.5 s
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Any, Generic, TextIO, TypeVar

__all__ = ["Progress", "progress"]

T = TypeVar("T")

#: seconds between two plain lines of one running step
PLAIN_INTERVAL_S = 10.0


class Progress(Generic[T]):
    """One step's progress: iterate it (or call :meth:`update`), then :meth:`close` (or use it
    as a context manager). Built by :func:`progress`, which picks bar or plain lines."""

    def __init__(self, iterable: Iterable[T] | None, *, desc: str, total: int | None,
                 unit: str, initial: int, leave: bool, enabled: bool, file: TextIO,
                 interval: float) -> None:
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)  # type: ignore[arg-type]
        self.iterable, self.desc, self.total, self.unit = iterable, desc, total, unit
        self.n, self.file, self.interval = initial, file, interval
        self.postfix: dict[str, Any] = {}
        self.enabled = enabled
        self.t0 = self.last = time.monotonic()
        self.closed = False
        self.bar: Any = None
        if enabled and _is_terminal(file):
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, leave=leave,
                            file=file, dynamic_ncols=True)

    def __iter__(self) -> Iterator[T]:
        if self.iterable is None:
            raise TypeError("this progress was made without an iterable; call update()")
        try:
            for item in self.iterable:
                yield item
                self.update()
        except BaseException:  # an error, or the loop left early
            self.close(failed=True)
            raise
        self.close()

    def __enter__(self) -> Progress[T]:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close(failed=exc is not None)

    def update(self, n: int = 1) -> None:
        """``n`` more units done."""
        self.n += n
        if self.bar is not None:
            self.bar.update(n)
        elif (self.enabled and time.monotonic() - self.last >= self.interval
              and (self.total is None or self.n < self.total)):  # the end has its own line
            self._line("")

    def set_total(self, total: int) -> None:
        """The step turned out to have ``total`` units (it grew, say)."""
        self.total = total
        if self.bar is not None:
            self.bar.total = total
            self.bar.refresh()

    def set_postfix(self, **values: Any) -> None:
        """Figures shown after the count (``quarantined=2``)."""
        self.postfix.update(values)
        if self.bar is not None:
            self.bar.set_postfix(values)

    def write(self, text: str) -> None:
        """A message line that does not break the bar."""
        if self.bar is not None:
            self.bar.write(text, file=self.file)
        else:
            print(text, file=self.file, flush=True)

    def close(self, failed: bool = False) -> None:
        """End the step (a plain stream gets its closing line: ``done in`` or, ``failed``,
        ``stopped after``); closing twice is harmless."""
        if self.closed:
            return
        self.closed = True
        if self.bar is not None:
            self.bar.close()
        elif self.enabled:
            self._line(" stopped after" if failed else " done in")

    def _line(self, word: str) -> None:
        self.last = time.monotonic()
        count = f"{self.n}/{self.total}" if self.total is not None else f"{self.n}"
        unit = "" if self.unit == "it" else f" {_plural(self.unit, self.n)}"
        extra = "".join(f", {k}={v}" for k, v in self.postfix.items())
        elapsed = self.last - self.t0
        timing = f"{word} {elapsed:.1f} s" if word else f" ({elapsed:.1f} s{extra})"
        print(f"{self.desc}: {count}{unit}{timing}{extra if word else ''}", file=self.file,
              flush=True)


def _plural(unit: str, n: int) -> str:
    if n == 1:
        return unit
    return unit + ("es" if unit.endswith(("s", "ch", "sh", "x")) else "s")


def _is_terminal(file: TextIO) -> bool:
    try:
        return bool(file.isatty())
    except (AttributeError, ValueError):
        return False


def progress(iterable: Iterable[T] | None = None, *, desc: str, total: int | None = None,
             unit: str = "it", initial: int = 0, leave: bool = True, enabled: bool = True,
             file: TextIO | None = None, interval: float = PLAIN_INTERVAL_S) -> Progress[T]:
    """The progress of one step on ``file`` (default stderr): a tqdm bar when it is a
    terminal, else plain lines (every ``interval`` s and one at the end). ``leave=False``
    clears the bar when the step ends; ``enabled=False`` shows nothing."""
    return Progress(iterable, desc=desc, total=total, unit=unit, initial=initial, leave=leave,
                    enabled=enabled, file=sys.stderr if file is None else file,
                    interval=interval)
