"""The Anthropic Messages API (``POST /v1/messages``), as Claude Code speaks it.

Request: ``system`` (text or text blocks) and ``messages``; an assistant message holds
``text`` and ``tool_use`` blocks, the next user message the ``tool_result`` blocks (a failed
Bash command comes back with ``is_error`` and an ``Exit code N`` first line). Claude Code may
also send ``role: system`` messages mid-conversation; they are read as system text.

Response (streamed): ``message_start``; per content block ``content_block_start``, one
``content_block_delta`` (``text_delta`` / ``input_json_delta``) and ``content_block_stop``;
``message_delta`` with the stop reason (``tool_use`` or ``end_turn``) and ``message_stop``.
Several tool calls in one step are parallel ``tool_use`` blocks of one message. Claude Code's
``Edit`` refuses a file it has not ``Read`` in this session, so an edit of a file the
transcript never read, wrote or edited is rendered as ``Read`` then ``Edit`` in one message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from oracle.agents.model_server.conversation import (
    Call,
    Conversation,
    Edit,
    Message,
    Shell,
    Step,
    ToolCall,
    ToolResult,
    tool_kind,
)
from oracle.agents.model_server.wire import (
    BadRequest,
    Reply,
    WireProtocol,
    call_id,
    count_tokens,
    field,
    json_reply,
    resolve_path,
    sse,
    text_of,
)

__all__ = ["MessagesProtocol"]

_EXIT = re.compile(r"^Exit code (-?\d+)\s*(?:\n|$)")
_CWD = re.compile(r"[Ww]orking directory: (\S+)")



def _call(block: Mapping[str, Any], where: str) -> ToolCall:
    name = field(block, "name", str, where)
    args = block.get("input") or {}
    if not isinstance(args, Mapping):
        raise BadRequest(f"{where}.input: expected an object")
    kind = tool_kind(name)
    command = args.get("command") if kind == "shell" else None
    path = args.get("file_path") if kind in ("edit", "write", "read") else None
    return ToolCall(str(field(block, "id", str, where)), name, dict(args), kind,
                    command if isinstance(command, str) else None,
                    path if isinstance(path, str) else None)


def _result(block: Mapping[str, Any], where: str) -> ToolResult:
    text = text_of(block.get("content", ""))
    is_error = bool(block.get("is_error", False))
    m = _EXIT.match(text) if is_error else None
    exit_code = int(m.group(1)) if m else None
    if m:
        text = text[m.end():]
    return ToolResult(str(field(block, "tool_use_id", str, where)), text, exit_code, is_error)


class MessagesProtocol(WireProtocol):
    """Anthropic Messages API with SSE (Claude Code)."""

    name = "anthropic-messages"
    paths = ("/v1/messages",)

    def read(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> Conversation:
        msgs: list[Message] = []
        system = text_of(body.get("system", ""), "\n")
        if system:
            msgs.append(Message("system", system))
        for i, m in enumerate(field(body, "messages", list, "request")):
            where = f"messages[{i}]"
            if not isinstance(m, Mapping):
                raise BadRequest(f"{where}: expected an object")
            role = field(m, "role", str, where)
            content = m.get("content", "")
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            if not isinstance(blocks, list):
                raise BadRequest(f"{where}.content: expected text or a list of blocks")
            texts, calls, results = [], [], []
            for j, b in enumerate(blocks):
                bw = f"{where}.content[{j}]"
                if not isinstance(b, Mapping):
                    raise BadRequest(f"{bw}: expected an object")
                kind = b.get("type")
                if kind == "text":
                    texts.append(str(b.get("text", "")))
                elif kind == "tool_use":
                    calls.append(_call(b, bw))
                elif kind == "tool_result":
                    results.append(_result(b, bw))
            text = "".join(texts)
            if role == "assistant":
                msgs.append(Message("assistant", text, tuple(calls)))
            elif role == "user" and results:
                msgs.append(Message("tool", text, results=tuple(results)))
            elif role in ("user", "system"):
                msgs.append(Message(role, text))  # type: ignore[arg-type]
            else:
                raise BadRequest(f"{where}.role: unknown role {role!r}")
        found = _CWD.search(system)
        conv_id = headers.get("x-claude-code-session-id")
        meta = body.get("metadata")
        if not conv_id and isinstance(meta, Mapping) and isinstance(meta.get("user_id"), str):
            try:
                conv_id = json.loads(meta["user_id"]).get("session_id")
            except (ValueError, AttributeError):
                conv_id = None
        tools = tuple(str(t.get("name")) for t in body.get("tools") or [] if isinstance(t, Mapping))
        return Conversation(self.name, tuple(msgs), str(body.get("model", "")),
                            str(conv_id) if conv_id else None, tools,
                            found.group(1) if found else None)

    def render(self, step: Step, conversation: Conversation, body: Mapping[str, Any]) -> Reply:
        blocks: list[dict[str, Any]] = []
        if step.text or step.finished:
            blocks.append({"type": "text", "text": step.text})
        touched = {resolve_path(c.path, conversation.cwd) for c in conversation.tool_calls()
                   if c.path and c.kind in ("read", "edit", "write")}
        n = 0
        for action in step.calls:
            for name, args in self._uses(action, conversation, touched):
                blocks.append({"type": "tool_use", "id": call_id(conversation, n, "toolu_"),
                               "name": name, "input": args})
                n += 1
        stop = "end_turn" if step.finished else "tool_use"
        out_tokens = sum(count_tokens(json.dumps(b, ensure_ascii=False)) for b in blocks)
        in_tokens = count_tokens(json.dumps(body.get("messages", []), ensure_ascii=False))
        mid = call_id(conversation, -1, "msg_")
        usage = {"input_tokens": in_tokens, "output_tokens": out_tokens,
                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        if not body.get("stream"):
            return json_reply({"id": mid, "type": "message", "role": "assistant",
                               "model": conversation.model, "content": blocks,
                               "stop_reason": stop, "stop_sequence": None, "usage": usage},
                              input_tokens=in_tokens, output_tokens=out_tokens)
        start = {"id": mid, "type": "message", "role": "assistant", "model": conversation.model,
                 "content": [], "stop_reason": None, "stop_sequence": None,
                 "usage": {**usage, "output_tokens": 1}}
        events: list[tuple[str, dict[str, Any]]] = [
            ("message_start", {"type": "message_start", "message": start})]
        for i, b in enumerate(blocks):
            if b["type"] == "text":
                first = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": b["text"]}
            else:
                first = {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}
                delta = {"type": "input_json_delta",
                         "partial_json": json.dumps(b["input"], ensure_ascii=False)}
            events += [("content_block_start", {"type": "content_block_start", "index": i,
                                                "content_block": first}),
                       ("content_block_delta", {"type": "content_block_delta", "index": i,
                                                "delta": delta}),
                       ("content_block_stop", {"type": "content_block_stop", "index": i})]
        events += [("message_delta", {"type": "message_delta",
                                      "delta": {"stop_reason": stop, "stop_sequence": None},
                                      "usage": {"output_tokens": out_tokens}}),
                   ("message_stop", {"type": "message_stop"})]
        return Reply(sse(events), "text/event-stream", 200, in_tokens, out_tokens)

    @staticmethod
    def _uses(action: Any, conversation: Conversation,
              touched: set[str]) -> list[tuple[str, dict[str, Any]]]:
        if isinstance(action, Shell):
            args: dict[str, Any] = {"command": action.command}
            if action.timeout_s is not None:
                args["timeout"] = int(action.timeout_s * 1000)
            return [("Bash", args)]
        if isinstance(action, Edit):
            path = resolve_path(action.path, conversation.cwd)
            edit = ("Edit", {"file_path": path, "old_string": action.old,
                             "new_string": action.new})
            if path in touched:
                return [edit]
            touched.add(path)
            return [("Read", {"file_path": path}), edit]
        if isinstance(action, Call):
            return [(action.name, dict(action.arguments))]
        raise TypeError(f"unknown action {action!r}")  # pragma: no cover
