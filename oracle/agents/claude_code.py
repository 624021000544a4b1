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

from features.readers.claude_code import ClaudeStreamParser
from oracle.agents.stream_reports import StreamReports

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


class ClaudeLineParser(StreamReports):
    """``claude -p --output-format stream-json --verbose`` lines to reports (per run)."""

    def __init__(self) -> None:
        super().__init__(ClaudeStreamParser(source="claude -p --output-format stream-json"))

    @property
    def session_id(self) -> str | None:
        """The session id (``claude --resume`` takes it), once a line named it."""
        return self._parser.session_id
