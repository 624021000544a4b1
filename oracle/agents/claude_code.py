"""Claude Code's ``stream-json`` output, one line at a time, as harness reports.

A thin mapping for the live adapter (:mod:`oracle.agents.runtime`) until the readers'
streaming parser for this format is merged (it then replaces :class:`ClaudeStreamParser`):

* ``system`` (``init``): the session id, kept as ``self.session_id``; no event.
* ``assistant``: one line per content block of a message (same ``message.id``). The first
  line of a message is a ``model_call`` event with that message's usage (a snapshot taken at
  its first block, as Claude Code streams it); a ``text`` block is a ``message`` event; a
  ``tool_use`` block is remembered until its result.
* ``user`` with ``tool_result`` blocks: one event per result — a ``Bash`` call is a command
  (kind from the command vocabulary, exit status from the ``Exit code N`` line of a failed
  call, output digest as its observation), ``Edit``/``MultiEdit``/``Write`` a file change,
  anything else ``other`` — each (unless it failed to run) a safe boundary followed by a
  boundary report.
* ``result``: an ``other`` event ending the turn, carrying the run's authoritative usage,
  cost and duration.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from features.readers.common import apply_test_counts, classify_command, mark_tool_return
from features.schema import Event, EventKind
from features.shell import split_command
from oracle.agents.protocol import AgentReport

__all__ = ["ClaudeStreamParser", "tool_result_ids"]

_EXIT = re.compile(r"^Exit code (-?\d+)")
_EDITS = ("Edit", "MultiEdit", "Write", "NotebookEdit")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def tool_result_ids(obj: dict) -> list[str]:
    """The ``tool_use_id`` of every tool result a stream-json line carries."""
    if obj.get("type") != "user":
        return []
    content = (obj.get("message") or {}).get("content")
    if not isinstance(content, list):
        return []
    return [str(b.get("tool_use_id")) for b in content
            if isinstance(b, dict) and b.get("type") == "tool_result"]


class ClaudeStreamParser:
    """Map ``claude -p --output-format stream-json --verbose`` lines to reports (per run)."""

    def __init__(self) -> None:
        self.session_id: str | None = None
        self.calls: dict[str, tuple[str, dict, float]] = {}
        self.messages: set[str] = set()

    def __call__(self, obj: dict, arrival: float) -> list[AgentReport]:
        t = obj.get("type")
        if t == "system":
            self.session_id = obj.get("session_id") or self.session_id
            return []
        if t == "assistant":
            return self._assistant(obj, arrival)
        if t == "user":
            return self._results(obj, arrival)
        if t == "result":
            usage = obj.get("usage") or {}
            ev = Event(index=0, kind=EventKind.OTHER, end=arrival, turn_end=True,
                       is_error=bool(obj.get("is_error")), text=obj.get("result"),
                       extra={"event_type": "result", "usage_total": usage,
                              "total_cost_usd": obj.get("total_cost_usd"),
                              "duration_ms": obj.get("duration_ms"),
                              "num_turns": obj.get("num_turns")})
            return [AgentReport("event", event=ev)]
        return []

    def _assistant(self, obj: dict, arrival: float) -> list[AgentReport]:
        msg = obj.get("message") or {}
        out: list[AgentReport] = []
        mid = str(msg.get("id"))
        if mid not in self.messages:
            self.messages.add(mid)
            usage = msg.get("usage") or {}
            out.append(AgentReport("event", event=Event(
                index=0, kind=EventKind.MODEL_CALL, end=arrival,
                input_tokens=int(usage.get("input_tokens") or 0),
                cached_tokens=int(usage.get("cache_read_input_tokens") or 0),
                output_tokens=int(usage.get("output_tokens") or 0),
                extra={"event_type": "assistant", "message_id": mid})))
        for block in msg.get("content") or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and block.get("text"):
                out.append(AgentReport("event", event=Event(
                    index=0, kind=EventKind.MESSAGE, end=arrival, text=block["text"],
                    extra={"event_type": "assistant", "message_id": mid})))
            elif block.get("type") == "tool_use":
                self.calls[str(block.get("id"))] = (str(block.get("name")),
                                                    dict(block.get("input") or {}), arrival)
        return out

    def _results(self, obj: dict, arrival: float) -> list[AgentReport]:
        content = (obj.get("message") or {}).get("content")
        out: list[AgentReport] = []
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            cid = str(block.get("tool_use_id"))
            name, args, started = self.calls.pop(cid, ("?", {}, None))
            text = _text(block.get("content"))
            is_error = bool(block.get("is_error"))
            extra = {"event_type": "tool_result", "tool": name, "tool_use_id": cid}
            if name == "Bash":
                cmd = args.get("command") if isinstance(args.get("command"), str) else None
                m = _EXIT.match(text) if is_error else None
                ev = Event(index=0, kind=classify_command(cmd, split_command(cmd) if cmd else None),
                           command=cmd, argv=split_command(cmd) if cmd else None,
                           exit_code=int(m.group(1)) if m else (None if is_error else 0),
                           extra={**extra, "output": text, "source": "command",
                                  "payload_digest": hashlib.sha256(text.encode()).hexdigest()})
                apply_test_counts(ev, text)
            elif name in _EDITS:
                path = args.get("file_path")
                ev = Event(index=0, kind=EventKind.FILE_CHANGE, is_error=is_error,
                           paths_written=[] if is_error or not path else [str(path)], extra=extra)
            else:
                path = args.get("file_path")
                ev = Event(index=0, kind=EventKind.OTHER, is_error=is_error,
                           paths_read=[str(path)] if name == "Read" and path else [], extra=extra)
            ev.start, ev.end = started, arrival
            out.append(AgentReport("event", event=ev))
            if not ev.is_error:  # as for Codex: a tool that returned is a safe boundary
                mark_tool_return(ev)
                out.append(AgentReport("boundary", boundary=None))
        return out
