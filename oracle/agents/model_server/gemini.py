"""The Gemini API's ``generateContent`` (``POST /v1beta/models/{model}:generateContent`` and
``:streamGenerateContent?alt=sse``), as Gemini CLI speaks it through ``@google/genai``.

Gemini CLI is pointed here with ``GEMINI_API_KEY`` (any value), ``GOOGLE_GEMINI_BASE_URL``
= the server's URL and ``security.auth.selectedType: gemini-api-key`` in its settings; a
pinned model (``-m``) keeps its router from sending classifier requests of its own.

Request: ``systemInstruction`` (``{parts: [{text}]}``) and ``contents``, each ``{role: user |
model, parts}``; a model turn holds ``text`` and ``functionCall {id?, name, args}`` parts
(``thought: true`` parts are thinking, skipped), the next user turn the ``functionResponse
{id?, name, response: {output | error}}`` parts, matched to the calls by ``id`` or else by
position. ``run_shell_command``'s output states ``Exit Code: N`` only when the command
failed, so a shell result with an ``Output:`` line and no ``Exit Code``/``Signal``/``Error``
line reads as exit 0. The working directory is the first of the prompt's ``Workspace
Directories``. The model comes from the path, the streaming choice from the method name.

Response: one ``GenerateContentResponse`` body, or (streaming) one SSE ``data:`` event
carrying it: a candidate ``{content: {role: model, parts}, finishReason: STOP}`` with a
``text`` part (when there is text) and a ``functionCall`` part per action — a shell command
is ``run_shell_command {command}``, an edit ``replace {file_path, old_string, new_string,
instruction}`` (the path made absolute against the cwd) — and ``usageMetadata`` (prompt =
``systemInstruction`` + ``contents``, candidates = the parts, one token per four characters).
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
    count_tokens,
    field,
    json_reply,
    resolve_path,
    sse,
)

__all__ = ["GeminiProtocol"]

_PATH = re.compile(r"^/(?:v1|v1beta|v1alpha)/models/([^/:]+):(streamGenerateContent|"
                   r"generateContent)$")
_EXIT = re.compile(r"^Exit Code: (-?\d+)\s*$", re.M)
_FAILED = re.compile(r"^(?:Signal|Error): ", re.M)
_CWD = re.compile(r"Workspace Directories:\**\s*\n\s*- (\S+)")


def _parts(content: Mapping[str, Any], where: str) -> list[Mapping[str, Any]]:
    parts = content.get("parts") or []
    if not isinstance(parts, list) or not all(isinstance(p, Mapping) for p in parts):
        raise BadRequest(f"{where}.parts: expected a list of objects")
    return parts


def _text(parts: list[Mapping[str, Any]]) -> str:
    return "".join(str(p["text"]) for p in parts
                   if isinstance(p.get("text"), str) and not p.get("thought"))


def _call(fc: Any, call_id: str, where: str) -> ToolCall:
    if not isinstance(fc, Mapping):
        raise BadRequest(f"{where}.functionCall: expected an object")
    name = field(fc, "name", str, f"{where}.functionCall")
    args = fc.get("args") or {}
    if not isinstance(args, Mapping):
        raise BadRequest(f"{where}.functionCall.args: expected an object")
    kind = tool_kind(name)
    command = args.get("command") if kind == "shell" else None
    path = args.get("file_path") if kind in ("edit", "write", "read") else None
    return ToolCall(call_id, name, dict(args), kind,
                    command if isinstance(command, str) else None,
                    path if isinstance(path, str) else None)


def _result(fr: Any, call_id: str, where: str) -> ToolResult:
    if not isinstance(fr, Mapping):
        raise BadRequest(f"{where}.functionResponse: expected an object")
    response = fr.get("response") or {}
    if not isinstance(response, Mapping):
        raise BadRequest(f"{where}.functionResponse.response: expected an object")
    error = response.get("error")
    out = response.get("output", error if error is not None else "")
    text = out if isinstance(out, str) else json.dumps(out, ensure_ascii=False)
    exit_code: int | None = None
    if m := _EXIT.search(text):
        exit_code = int(m.group(1))
    elif (tool_kind(str(fr.get("name", ""))) == "shell" and error is None
          and "Output:" in text and not _FAILED.search(text)):
        exit_code = 0  # the shell tool states an exit code only when it is not 0
    is_error = True if error is not None else (None if exit_code is None else exit_code != 0)
    return ToolResult(call_id, text, exit_code, is_error)


class GeminiProtocol(WireProtocol):
    """Gemini API ``generateContent`` / ``streamGenerateContent`` (Gemini CLI)."""

    name = "gemini"
    paths = ("/v1beta/models/{model}:generateContent",
             "/v1beta/models/{model}:streamGenerateContent")

    def matches(self, path: str) -> bool:
        return _PATH.match(path) is not None

    def read_at(self, path: str, body: Mapping[str, Any],
                headers: Mapping[str, str]) -> Conversation:
        conversation = self.read(body, headers)
        m = _PATH.match(path)
        return Conversation(conversation.protocol, conversation.messages,
                            m.group(1) if m else conversation.model, conversation.id,
                            conversation.tools, conversation.cwd)

    def render_at(self, path: str, step: Step, conversation: Conversation,
                  body: Mapping[str, Any]) -> Reply:
        m = _PATH.match(path)
        return self._render(step, conversation, body,
                            stream=bool(m) and m.group(2) == "streamGenerateContent")

    def read(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> Conversation:
        msgs: list[Message] = []
        system = body.get("systemInstruction")
        if isinstance(system, str):
            msgs.append(Message("system", system))
        elif isinstance(system, Mapping):
            msgs.append(Message("system", _text(_parts(system, "systemInstruction"))))
        elif system is not None:
            raise BadRequest("systemInstruction: expected text or an object with parts")
        last_calls: tuple[ToolCall, ...] = ()
        for i, c in enumerate(field(body, "contents", list, "request")):
            where = f"contents[{i}]"
            if not isinstance(c, Mapping):
                raise BadRequest(f"{where}: expected an object")
            role = c.get("role", "user")
            parts = _parts(c, where)
            if role == "model":
                calls = []
                for j, p in enumerate(parts):
                    if "functionCall" in p:
                        fc = p["functionCall"]
                        given = fc.get("id") if isinstance(fc, Mapping) else None
                        calls.append(_call(fc, str(given or f"call-{i}-{j}"),
                                           f"{where}.parts[{j}]"))
                last_calls = tuple(calls)
                msgs.append(Message("assistant", _text(parts), last_calls))
            elif role == "user":
                responses = [(j, p["functionResponse"]) for j, p in enumerate(parts)
                             if "functionResponse" in p]
                if not responses:
                    msgs.append(Message("user", _text(parts)))
                    continue
                results = []
                for k, (j, fr) in enumerate(responses):
                    given = fr.get("id") if isinstance(fr, Mapping) else None
                    cid = str(given) if given else (
                        last_calls[k].id if k < len(last_calls) else f"result-{i}-{j}")
                    results.append(_result(fr, cid, f"{where}.parts[{j}]"))
                msgs.append(Message("tool", _text(parts), results=tuple(results)))
            else:
                raise BadRequest(f"{where}.role: unknown role {role!r}")
        prompt = next((m.text for m in msgs if m.role == "user"), "")
        found = _CWD.search(prompt)
        head = "\n".join(m.text for m in msgs[:2])
        conv_id = "gemini-" + hashlib.sha256(head.encode("utf-8")).hexdigest()[:16]
        tools = tuple(str(d.get("name")) for t in body.get("tools") or [] if isinstance(t, Mapping)
                      for d in t.get("functionDeclarations") or [] if isinstance(d, Mapping))
        return Conversation(self.name, tuple(msgs), "", conv_id, tools,
                            found.group(1) if found else None)

    def render(self, step: Step, conversation: Conversation, body: Mapping[str, Any]) -> Reply:
        """The non-streamed body (``generateContent``); :meth:`render_at` picks by path."""
        return self._render(step, conversation, body, stream=False)

    def _render(self, step: Step, conversation: Conversation, body: Mapping[str, Any], *,
                stream: bool) -> Reply:
        parts: list[dict[str, Any]] = []
        if step.text or step.finished:
            parts.append({"text": step.text})
        for action in step.calls:
            name, args = self._use(action, conversation)
            parts.append({"functionCall": {"name": name, "args": args}})
        out_tokens = sum(count_tokens(json.dumps(p, ensure_ascii=False)) for p in parts)
        in_tokens = count_tokens(json.dumps([body.get("systemInstruction"),
                                             body.get("contents", [])], ensure_ascii=False))
        obj = {"candidates": [{"content": {"role": "model", "parts": parts},
                               "finishReason": "STOP", "index": 0}],
               "usageMetadata": {"promptTokenCount": in_tokens,
                                 "candidatesTokenCount": out_tokens,
                                 "totalTokenCount": in_tokens + out_tokens},
               "modelVersion": conversation.model}
        if not stream:
            return json_reply(obj, input_tokens=in_tokens, output_tokens=out_tokens)
        return Reply(sse([(None, obj)]), "text/event-stream", 200, in_tokens, out_tokens)

    @staticmethod
    def _use(action: Any, conversation: Conversation) -> tuple[str, dict[str, Any]]:
        if isinstance(action, Shell):
            return "run_shell_command", {"command": action.command}
        if isinstance(action, Edit):
            return "replace", {"file_path": resolve_path(action.path, conversation.cwd),
                               "old_string": action.old, "new_string": action.new,
                               "instruction": f"Replace {action.old!r} by {action.new!r}."}
        if isinstance(action, Call):
            return action.name, dict(action.arguments)
        raise TypeError(f"unknown action {action!r}")  # pragma: no cover
