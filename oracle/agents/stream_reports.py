"""A runtime's JSON lines as harness reports, through the readers' streaming parser.

:class:`StreamReports` is the one adapter between a
:class:`~features.readers.stream.StreamParser` (the one mapping of a log format, the same as
reading the file) and the harness: every event the parser makes final becomes an event
report, and a safe boundary is followed by a boundary report. Command events carry
``extra["source"] = "command"`` and ``extra["payload_digest"]`` (SHA-256 of the output) for
the harness's replay check. The Codex and Claude Code line parsers are this adapter over
their format's parser.
"""

from __future__ import annotations

import hashlib

from msgspec.structs import replace

from features.readers.stream import StreamParser
from features.schema import Event
from oracle.protocol import AgentReport

__all__ = ["StreamReports"]


class StreamReports:
    """Lines of one run to reports (stateful per run) through ``parser``."""

    def __init__(self, parser: StreamParser) -> None:
        self._parser = parser

    def __call__(self, obj: dict, arrival: float) -> list[AgentReport]:
        return self._reports(self._parser.feed(obj, arrival))

    def close(self) -> list[AgentReport]:
        """End of the stream: reports of the items still open (incomplete)."""
        return self._reports(self._parser.flush())

    @staticmethod
    def _reports(events: list[Event]) -> list[AgentReport]:
        out: list[AgentReport] = []
        for ev in events:
            # a copy: the run renumbers and stamps its events, the parser's stay final
            extra = dict(ev.extra)
            if ev.command is not None:
                extra["source"] = "command"
                extra["payload_digest"] = hashlib.sha256(
                    str(extra.get("output")).encode()).hexdigest()
            ev = replace(ev, extra=extra)
            out.append(AgentReport("event", event=ev))
            if ev.safe_boundary:
                out.append(AgentReport("boundary", boundary=None))
        return out
