"""OpenAI chat completions (``POST /v1/chat/completions``), as litellm / mini-swe-agent send it.

Request: ``messages`` with ``system``/``user``/``assistant`` (``tool_calls``) and ``tool``
(``tool_call_id``) roles; the tools are functions (mini-swe-agent offers one, ``bash
{command}``, and returns ``{"returncode": N, "output": ...}`` as the tool message).

Response: one ``chat.completion`` body, or ``chat.completion.chunk`` SSE ending in
``data: [DONE]`` when the request streams. Every action becomes a call to the offered shell
function (an edit as a ``python3 -c`` replacement). A finished step is a plain message —
except where the prompt names a submission command (mini-swe-agent's ``echo
COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``), which is then issued, since that is how the runtime
is told the task is done.
"""

from __future__ import annotations

import hashlib
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
    edit_command,
    field,
    json_reply,
    loads_arguments,
    sse,
    text_of,
)

__all__ = ["ChatProtocol"]

_SUBMIT = re.compile(r"echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")
_XML_EXIT = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")



def _result(m: Mapping[str, Any], where: str) -> ToolResult:
    text = text_of(m.get("content", ""))
    exit_code: int | None = None
    try:
        obj = json.loads(text)
    except ValueError:
        obj = None
    if isinstance(obj, Mapping) and "returncode" in obj:
        rc = obj.get("returncode")
        exit_code = rc if isinstance(rc, int) else None
        text = str(obj.get("output", ""))
    elif found := _XML_EXIT.search(text):
        exit_code = int(found.group(1))
    return ToolResult(str(field(m, "tool_call_id", str, where)), text, exit_code,
                      None if exit_code is None else exit_code != 0)


def _call(c: Mapping[str, Any], where: str) -> ToolCall:
    fn = field(c, "function", Mapping, where)
    name = field(fn, "name", str, f"{where}.function")
    args = loads_arguments(fn.get("arguments", "{}"), f"{where}.function.arguments")
    kind = tool_kind(name)
    command = args.get("command") if kind == "shell" else None
    return ToolCall(str(c.get("id", "")), name, args, kind,
                    command if isinstance(command, str) else None)


class ChatProtocol(WireProtocol):
    """OpenAI chat completions, non-streaming or streaming (litellm, mini-swe-agent)."""

    name = "openai-chat"
    paths = ("/v1/chat/completions", "/chat/completions")

    def read(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> Conversation:
        msgs: list[Message] = []
        for i, m in enumerate(field(body, "messages", list, "request")):
            where = f"messages[{i}]"
            if not isinstance(m, Mapping):
                raise BadRequest(f"{where}: expected an object")
            role = field(m, "role", str, where)
            if role == "tool":
                result = _result(m, where)
                if msgs and msgs[-1].role == "tool":
                    last = msgs.pop()
                    msgs.append(Message("tool", last.text, results=last.results + (result,)))
                else:
                    msgs.append(Message("tool", results=(result,)))
            elif role == "assistant":
                calls = tuple(_call(c, f"{where}.tool_calls[{j}]")
                              for j, c in enumerate(m.get("tool_calls") or []))
                msgs.append(Message("assistant", text_of(m.get("content")), calls))
            elif role in ("system", "developer", "user"):
                msgs.append(Message("system" if role == "developer" else role,  # type: ignore[arg-type]
                                    text_of(m.get("content"))))
            else:
                raise BadRequest(f"{where}.role: unknown role {role!r}")
        head = "\n".join(m.text for m in msgs[:2])
        conv_id = headers.get("x-conversation-id") or \
            "chat-" + hashlib.sha256(head.encode("utf-8")).hexdigest()[:16]
        tools = tuple(str((t.get("function") or {}).get("name", t.get("type")))
                      for t in body.get("tools") or [] if isinstance(t, Mapping))
        return Conversation(self.name, tuple(msgs), str(body.get("model", "")), conv_id, tools)

    def render(self, step: Step, conversation: Conversation, body: Mapping[str, Any]) -> Reply:
        shell = next((t for t in conversation.tools if tool_kind(t) == "shell"), "bash")
        actions: list[Any] = list(step.calls)
        prompt = "\n".join(m.text for m in conversation.messages if m.role in ("system", "user"))
        submit = _SUBMIT.search(prompt)
        if step.finished and submit:
            actions = [Shell(submit.group(0))]
        calls = []
        for i, action in enumerate(actions):
            if isinstance(action, Edit):
                action = Shell(edit_command(action))
            if isinstance(action, Shell):
                name, args = shell, {"command": action.command}
            elif isinstance(action, Call):
                name, args = action.name, dict(action.arguments)
            else:  # pragma: no cover
                raise TypeError(f"unknown action {action!r}")
            calls.append({"id": call_id(conversation, i, "call_"), "type": "function",
                          "function": {"name": name,
                                       "arguments": json.dumps(args, ensure_ascii=False)}})
        message: dict[str, Any] = {"role": "assistant", "content": step.text or None}
        if calls:
            message["tool_calls"] = calls
        finish = "tool_calls" if calls else "stop"
        out_tokens = count_tokens(json.dumps(message, ensure_ascii=False))
        in_tokens = count_tokens(json.dumps(body.get("messages", []), ensure_ascii=False))
        usage = {"prompt_tokens": in_tokens, "completion_tokens": out_tokens,
                 "total_tokens": in_tokens + out_tokens}
        cid = call_id(conversation, -1, "chatcmpl-")
        model = conversation.model
        if not body.get("stream"):
            return json_reply({"id": cid, "object": "chat.completion", "created": 0,
                               "model": model, "usage": usage,
                               "choices": [{"index": 0, "message": message,
                                            "finish_reason": finish}]},
                              input_tokens=in_tokens, output_tokens=out_tokens)
        chunk = {"id": cid, "object": "chat.completion.chunk", "created": 0, "model": model}
        delta: dict[str, Any] = {"role": "assistant", "content": step.text or ""}
        if calls:
            delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(calls)]
        events = [(None, {**chunk, "choices": [{"index": 0, "delta": delta,
                                                "finish_reason": None}]}),
                  (None, {**chunk, "choices": [{"index": 0, "delta": {},
                                                "finish_reason": finish}], "usage": usage})]
        return Reply(sse(events) + b"data: [DONE]\n\n", "text/event-stream", 200,
                     in_tokens, out_tokens)
