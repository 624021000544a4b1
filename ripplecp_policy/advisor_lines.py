"""The advisor's line bounds: the longest log line it follows, and the splitter that holds
at most that much of a line (a longer one is dropped and counted, never held whole).

One home for both readers of live lines: the server's transcript tail
(:class:`ripplecp_policy.advisor.TranscriptTail`) and the ``advise -- COMMAND`` wrapper,
which reads its command's output before anything heavy is imported (the standard library
only here).
"""

from __future__ import annotations

__all__ = ["MAX_BODY", "MAX_LINE_BYTES", "LineSplitter"]

#: the longest log line (its newline included) the advisor follows; a longer one is skipped
MAX_LINE_BYTES = 8 * 2**20
#: the most one request to the advisor server may carry
MAX_BODY = 32 * 2**20


class LineSplitter:
    """Complete lines out of chunks of bytes, each at most ``max_line`` bytes (newline
    included): a longer line is dropped (counted in ``dropped``) as soon as it passes the
    bound, its rest skipped up to its newline; a partial last line is kept for the next
    chunk. Memory: at most ``max_line`` bytes held whatever the input."""

    def __init__(self, max_line: int = MAX_LINE_BYTES) -> None:
        self.max_line = max_line
        self.dropped = 0  # over-long lines dropped
        self._partial = bytearray()
        self._skipping = False  # inside an over-long line

    def split(self, chunk: bytes) -> list[bytes | None]:
        """The lines ``chunk`` completes, in order; None where a line was dropped."""
        out: list[bytes | None] = []
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                if not self._skipping:
                    self._partial += chunk[start:]
                    if len(self._partial) > self.max_line:
                        self._drop(out)
                return out
            if self._skipping:
                self._skipping = False
            elif len(self._partial) + nl + 1 - start > self.max_line:
                self._drop(out)
                self._skipping = False
            else:
                out.append(bytes(self._partial + chunk[start:nl + 1]) if self._partial
                           else chunk[start:nl + 1])
            self._partial.clear()
            start = nl + 1

    def end(self) -> bytes | None:
        """At the end of the input: the last line if it had no newline (else None)."""
        line = bytes(self._partial) if self._partial and not self._skipping else None
        self._partial.clear()
        self._skipping = False
        return line

    def _drop(self, out: list[bytes | None]) -> None:
        self._partial.clear()
        self._skipping = True
        self.dropped += 1
        out.append(None)
