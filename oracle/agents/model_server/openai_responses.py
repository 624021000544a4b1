"""The OpenAI Responses API (``POST /v1/responses``), as Codex CLI speaks it.

Request: ``input`` is the whole history — ``message`` items (the system prompt arrives as a
``developer`` message), ``function_call`` / ``custom_tool_call`` items the model made earlier,
and their ``function_call_output`` / ``custom_tool_call_output``. Codex wraps a command's
output in an envelope (``Process exited with code N`` / ``Exit code: N`` … ``Output:``); the
exit status is read off it and the envelope dropped from the normalized output.

Response (streamed): ``response.created``, one ``response.output_item.done`` per output item,
then ``response.completed`` with the usage — the events Codex needs (without
``response.completed`` it fails the turn). A shell call is a ``function_call`` to the shell
tool the request offers (``exec_command {cmd}`` in Codex ≥ 0.100, ``shell_command`` /
``shell`` before); an edit is a ``custom_tool_call`` to ``apply_patch`` carrying a patch.
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
    edit_command,
    field,
    json_reply,
    loads_arguments,
    sse,
    text_of,
)

__all__ = ["ResponsesProtocol", "apply_patch_text"]

_EXIT = re.compile(r"^(?:Process exited with code|Exit code:)\s*(-?\d+)\s*$", re.M)
_CWD = re.compile(r"<cwd>(.*?)</cwd>", re.S)
_CALLS = ("function_call", "custom_tool_call")
_OUTPUTS = ("function_call_output", "custom_tool_call_output")


def apply_patch_text(edit: Edit) -> str:
    """Codex's patch format for replacing whole lines ``edit.old`` by ``edit.new``."""
    minus = "".join(f"-{line}\n" for line in edit.old.splitlines())
    plus = "".join(f"+{line}\n" for line in edit.new.splitlines())
    return f"*** Begin Patch\n*** Update File: {edit.path}\n@@\n{minus}{plus}*** End Patch\n"



def _result(item: Mapping[str, Any], where: str) -> ToolResult:
    raw = item.get("output", "")
    text = text_of(raw) if not isinstance(raw, Mapping) else text_of(raw.get("content", ""))
    m = _EXIT.search(text)
    exit_code = int(m.group(1)) if m else None
    if m and "\nOutput:\n" in f"\n{text}":
        text = f"\n{text}".split("\nOutput:\n", 1)[1]
    return ToolResult(str(field(item, "call_id", str, where)), text, exit_code,
                      None if exit_code is None else exit_code != 0)


def _call(item: Mapping[str, Any], where: str) -> ToolCall:
    name = field(item, "name", str, where)
    if item["type"] == "custom_tool_call":
        args = {"input": item.get("input", "")}
    else:
        args = loads_arguments(item.get("arguments", "{}"), f"{where}.arguments")
    kind = tool_kind(name)
    command = args.get("cmd", args.get("command")) if kind == "shell" else None
    if isinstance(command, list):
        command = command[-1] if command[:2] in (["bash", "-lc"], ["bash", "-c"]) else \
            " ".join(map(str, command))
    path = None
    if kind == "edit":
        m = re.search(r"^\*\*\* (?:Update|Add|Delete) File: (.+)$", args.get("input", ""), re.M)
        path = m.group(1).strip() if m else None
    return ToolCall(str(field(item, "call_id", str, where)), name, args, kind,
                    command if isinstance(command, str) else None, path)


class ResponsesProtocol(WireProtocol):
    """OpenAI Responses API with SSE (Codex CLI)."""

    name = "openai-responses"
    paths = ("/v1/responses", "/responses")

    def read(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> Conversation:
        items = field(body, "input", (list, str), "request")
        if isinstance(items, str):
            items = [{"type": "message", "role": "user", "content": items}]
        msgs: list[Message] = []
        if isinstance(body.get("instructions"), str) and body["instructions"]:
            msgs.append(Message("system", body["instructions"]))

        def merge(role: str, text: str = "", call: ToolCall | None = None,
                  result: ToolResult | None = None) -> None:
            if msgs and msgs[-1].role == role and role in ("assistant", "tool"):
                last = msgs.pop()
                text = last.text + text
                calls = last.tool_calls + ((call,) if call else ())
                results = last.results + ((result,) if result else ())
            else:
                calls, results = ((call,) if call else ()), ((result,) if result else ())
            msgs.append(Message(role, text, calls, results))  # type: ignore[arg-type]

        for i, item in enumerate(items):
            where = f"input[{i}]"
            if not isinstance(item, Mapping):
                raise BadRequest(f"{where}: expected an object")
            kind = item.get("type", "message")
            if kind == "message":
                role = field(item, "role", str, where)
                role = {"developer": "system"}.get(role, role)
                if role not in ("system", "user", "assistant"):
                    raise BadRequest(f"{where}.role: unknown role {role!r}")
                text = text_of(item.get("content", ""))
                if role == "assistant":
                    merge(role, text)
                else:
                    msgs.append(Message(role, text))
            elif kind in _CALLS:
                merge("assistant", call=_call(item, where))
            elif kind in _OUTPUTS:
                merge("tool", result=_result(item, where))
            # reasoning and other items carry nothing a brain reads
        cwd = None
        for m in msgs:
            found = _CWD.search(m.text)
            if found and m.role in ("system", "user"):
                cwd = found.group(1).strip()
        conv_id = body.get("prompt_cache_key") or headers.get("session-id") or \
            headers.get("thread-id") or headers.get("session_id")
        tools = tuple(str(t.get("name") or t.get("type")) for t in body.get("tools") or []
                      if isinstance(t, Mapping))
        return Conversation(self.name, tuple(msgs), str(body.get("model", "")),
                            str(conv_id) if conv_id else None, tools, cwd)

    def render(self, step: Step, conversation: Conversation, body: Mapping[str, Any]) -> Reply:
        items: list[dict[str, Any]] = []
        if step.text or step.finished:
            items.append({"type": "message", "role": "assistant", "status": "completed",
                          "id": call_id(conversation, -1, "msg_"),
                          "content": [{"type": "output_text", "text": step.text,
                                       "annotations": []}]})
        for i, action in enumerate(step.calls):
            cid = call_id(conversation, i, "call_")
            items.append(self._item(action, cid, conversation))
        out_tokens = sum(count_tokens(json.dumps(it, ensure_ascii=False)) for it in items)
        in_tokens = count_tokens(json.dumps(body.get("input", ""), ensure_ascii=False))
        rid = call_id(conversation, -2, "resp_")
        usage = {"input_tokens": in_tokens, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": out_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": in_tokens + out_tokens}
        response = {"id": rid, "object": "response", "status": "completed",
                    "model": conversation.model, "output": items, "usage": usage}
        if not body.get("stream"):
            return json_reply(response, input_tokens=in_tokens, output_tokens=out_tokens)
        created = {"id": rid, "object": "response", "status": "in_progress",
                   "model": conversation.model, "output": []}
        events: list[tuple[str, dict[str, Any]]] = [
            ("response.created", {"type": "response.created", "response": created})]
        for n, item in enumerate(items):
            events.append(("response.output_item.done",
                           {"type": "response.output_item.done", "output_index": n,
                            "item": item}))
        events.append(("response.completed", {"type": "response.completed",
                                              "response": response}))
        return Reply(sse(events), "text/event-stream", 200, in_tokens, out_tokens)

    @staticmethod
    def _item(action: Any, cid: str, conversation: Conversation) -> dict[str, Any]:
        tools = conversation.tools
        if isinstance(action, Edit) and "apply_patch" in tools:
            return {"type": "custom_tool_call", "call_id": cid, "name": "apply_patch",
                    "id": "ctc_" + cid, "status": "completed", "input": apply_patch_text(action)}
        if isinstance(action, Edit):
            action = Shell(edit_command(action))
        if isinstance(action, Shell):
            ms = None if action.timeout_s is None else int(action.timeout_s * 1000)
            if "exec_command" in tools or not tools:
                name, args = "exec_command", {"cmd": action.command, "yield_time_ms": ms}
            elif "shell_command" in tools:
                name, args = "shell_command", {"command": action.command, "timeout_ms": ms}
            else:
                name, args = "shell", {"command": ["bash", "-lc", action.command],
                                       "timeout_ms": ms}
            args = {k: v for k, v in args.items() if v is not None}
        elif isinstance(action, Call):
            name, args = action.name, dict(action.arguments)
        else:  # pragma: no cover - Step's type admits only the three actions
            raise TypeError(f"unknown action {action!r}")
        return {"type": "function_call", "call_id": cid, "name": name, "id": "fc_" + cid,
                "status": "completed", "arguments": json.dumps(args, ensure_ascii=False)}
