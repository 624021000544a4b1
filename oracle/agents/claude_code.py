"""Claude Code's ``stream-json`` output, one line at a time, as harness reports.

:class:`ClaudeLineParser` is a thin adapter over the readers' streaming parser
(:class:`features.readers.claude_code.ClaudeStreamParser`, the one mapping of this format, the
same as reading the file): every event the parser makes final becomes an event report, and a
safe boundary (every tool that returned) is followed by a boundary report. ``Bash`` events
carry ``extra["source"] = "command"`` and ``extra["payload_digest"]`` (SHA-256 of the output)
for the harness's replay check. :func:`tool_result_ids` names the results a line carries (the
live adapter waits for them to be in the session file).
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

from features.readers.claude_code import ClaudeStreamParser
from features.schema import Event
from oracle.agents.protocol import AgentReport

__all__ = ["ClaudeLineParser", "tool_result_ids"]


def tool_result_ids(obj: dict) -> list[str]:
    """The ``tool_use_id`` of every tool result a stream-json line carries."""
    if obj.get("type") != "user":
        return []
    content = (obj.get("message") or {}).get("content")
    if not isinstance(content, list):
        return []
    return [str(b.get("tool_use_id")) for b in content
            if isinstance(b, dict) and b.get("type") == "tool_result"]


class ClaudeLineParser:
    """``claude -p --output-format stream-json --verbose`` lines to reports (per run)."""

    def __init__(self) -> None:
        self._parser = ClaudeStreamParser(source="claude -p --output-format stream-json")

    @property
    def session_id(self) -> str | None:
        """The session id (``claude --resume`` takes it), once a line named it."""
        return self._parser.session_id

    def __call__(self, obj: dict, arrival: float) -> list[AgentReport]:
        return self._reports(self._parser.feed(obj, arrival))

    def close(self) -> list[AgentReport]:
        """End of the stream: reports of the calls still open (incomplete)."""
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
