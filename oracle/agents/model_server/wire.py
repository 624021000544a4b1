"""What every wire protocol shares: the reply, SSE framing, token counts, ids, edit fallbacks.

A protocol (:class:`WireProtocol`) does two things: read a request body into the normalized
:class:`~oracle.agents.model_server.conversation.Conversation`, and render a brain's
:class:`~oracle.agents.model_server.conversation.Step` as that protocol's response (SSE when the
request asked to stream, one JSON body otherwise).
"""

from __future__ import annotations

import hashlib
import json
import math
import posixpath
import shlex
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from oracle.agents.model_server.conversation import Conversation, Edit, Step

__all__ = [
    "BadRequest",
    "Reply",
    "WireProtocol",
    "call_id",
    "count_tokens",
    "edit_command",
    "field",
    "json_reply",
    "loads_arguments",
    "resolve_path",
    "sse",
    "text_of",
]


class BadRequest(ValueError):
    """The request cannot be read; the message names the field (answered with HTTP 400)."""


@dataclass(frozen=True)
class Reply:
    """An HTTP response body, with the token usage it reports (None where unknown)."""

    body: bytes
    content_type: str = "application/json"
    status: int = 200
    input_tokens: int | None = None
    output_tokens: int | None = None


def count_tokens(text: str) -> int:
    """A deterministic token count: one token per four characters, rounded up.

    The server reports usage so runtimes that track it see plausible numbers; no tokenizer
    is involved, and the same text always counts the same.
    """
    return math.ceil(len(text) / 4)


def call_id(conversation: Conversation, index: int, prefix: str) -> str:
    """A tool-call id that is the same for the same transcript and distinct across steps."""
    h = hashlib.sha256(f"{conversation.digest()}:{index}".encode()).hexdigest()[:24]
    return f"{prefix}{h}"


def sse(events: Iterable[tuple[str | None, Mapping[str, Any]]]) -> bytes:
    """Server-sent events: ``event: NAME`` (when named) and one ``data:`` JSON line each."""
    out = []
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        out.append(f"{head}data: {json.dumps(data, ensure_ascii=False)}\n\n")
    return "".join(out).encode("utf-8")


def json_reply(obj: Mapping[str, Any], *, status: int = 200, input_tokens: int | None = None,
               output_tokens: int | None = None) -> Reply:
    """One JSON body."""
    return Reply(json.dumps(obj, ensure_ascii=False).encode("utf-8"), "application/json",
                 status, input_tokens, output_tokens)


def text_of(content: Any, sep: str = "") -> str:
    """The text of a message content: a string, or the ``text`` of each part of a list
    (parts without text — images, tool calls, thinking — are skipped)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return sep.join(str(p["text"]) for p in content
                        if isinstance(p, Mapping) and isinstance(p.get("text"), str))
    return ""


def resolve_path(path: str, cwd: str | None) -> str:
    """``path`` made absolute against the runtime's stated cwd (as is when there is none)."""
    if posixpath.isabs(path) or not cwd:
        return path
    return posixpath.normpath(posixpath.join(cwd, path))


_REPLACE = ("import pathlib,sys; p=pathlib.Path(sys.argv[1]); t=p.read_text(); o=sys.argv[2]; "
            "sys.exit(f'{p}: text to replace not found') if o not in t else "
            "p.write_text(t.replace(o, sys.argv[3], 1))")


def edit_command(edit: Edit) -> str:
    """An edit as a shell command, for runtimes that offer only a shell tool."""
    return shlex.join(["python3", "-c", _REPLACE, edit.path, edit.old, edit.new])


class WireProtocol(ABC):
    """One model API: the paths it serves, how to read a request, how to render a step."""

    #: short name recorded in the audit log
    name: str = ""
    #: request paths (without query) this protocol answers
    paths: tuple[str, ...] = ()

    @abstractmethod
    def read(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> Conversation:
        """The normalized conversation of a request body; :class:`BadRequest` if unreadable."""

    @abstractmethod
    def render(self, step: Step, conversation: Conversation, body: Mapping[str, Any]) -> Reply:
        """The protocol's response carrying ``step`` (streamed when ``body`` asks to)."""

    def matches(self, path: str) -> bool:
        """Whether this protocol answers ``path`` (without query): one of :attr:`paths`."""
        return path in self.paths

    def read_at(self, path: str, body: Mapping[str, Any],
                headers: Mapping[str, str]) -> Conversation:
        """:meth:`read` for a request to ``path``, for protocols whose path carries part of
        the request (Gemini: the model)."""
        return self.read(body, headers)

    def render_at(self, path: str, step: Step, conversation: Conversation,
                  body: Mapping[str, Any]) -> Reply:
        """:meth:`render` for a request to ``path`` (Gemini: streamed or not by path)."""
        return self.render(step, conversation, body)


def field(body: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    """``body[key]`` checked to be of ``kind``; :class:`BadRequest` naming ``where.key``."""
    if key not in body:
        raise BadRequest(f"{where}: missing field {key!r}")
    value = body[key]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise BadRequest(f"{where}.{key}: expected {names}, got {type(value).__name__}")
    return value


def loads_arguments(raw: Any, where: str) -> dict[str, Any]:
    """Tool-call arguments as a dict: a JSON string is parsed; bad JSON is kept as ``_raw``."""
    if isinstance(raw, Mapping):
        return dict(raw)
    if not isinstance(raw, str):
        raise BadRequest(f"{where}: expected tool arguments as a JSON string or object")
    try:
        value = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError:
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_raw": raw}
