"""The Gemini API protocol: requests shaped as Gemini CLI 0.61.0 sends them (copied from a
captured exchange: the session-context prompt, ``functionCall`` parts with ids and thought
signatures, ``functionResponse`` outputs), sent over real HTTP to a real server."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from oracle.agents.model_server import ModelServer, Plan, ScriptedBrain, Step
from oracle.agents.model_server.gemini import GeminiProtocol
from oracle.agents.model_server.wire import BadRequest, count_tokens

PLAN = Plan.from_json([
    {"shell": "printf 'hello\\n' > hello.txt", "text": "Creating the file."},
    {"edit": {"path": "hello.txt", "old": "hello", "new": "hello world"}},
    {"finish": "done"}])
CONTEXT = ("<session_context>\nThis is the Gemini CLI.\nMy operating system is: linux\n"
           "- **Workspace Directories:**\n  - /work/ws\n- **Directory Structure:**\n"
           "</session_context>")
TOOLS = [{"functionDeclarations": [{"name": n} for n in
                                   ("read_file", "replace", "write_file", "run_shell_command")]}]
FIRST_TURN = [
    {"role": "model", "parts": [
        {"text": "Creating the file."},
        {"functionCall": {"id": "run_1", "name": "run_shell_command",
                          "args": {"command": "printf 'hello\\n' > hello.txt"}},
         "thoughtSignature": "skip_thought_signature_validator"}]},
    {"role": "user", "parts": [{"functionResponse": {
        "id": "run_1", "name": "run_shell_command", "response": {
            "output": "<untrusted_context>\nOutput: (empty)\nProcess Group PGID: 52\n"
                      "</untrusted_context>"}}}]},
]


def _body(extra: list[dict] | None = None) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": CONTEXT},
                                                    {"text": "Create hello.txt."}]},
                         *(extra or [])],
            "systemInstruction": {"parts": [{"text": "You are Gemini CLI."}]},
            "tools": TOOLS, "generationConfig": {"temperature": 1}}


def _post(url: str, path: str, body: dict) -> tuple[int, str, bytes]:
    req = urllib.request.Request(url + path, json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          "x-goog-api-key": "x"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


def _events(body: bytes) -> list[dict]:
    return [json.loads(line[6:]) for line in body.decode().splitlines()
            if line.startswith("data: ")]


@pytest.fixture
def server():
    with ModelServer(ScriptedBrain(PLAN)) as s:
        yield s


def test_stream_answers_with_a_shell_call_and_usage(server: ModelServer) -> None:
    body = _body()
    status, ctype, raw = _post(server.url,
                               "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
                               body)
    assert status == 200 and ctype == "text/event-stream"
    [event] = _events(raw)
    cand = event["candidates"][0]
    assert cand["finishReason"] == "STOP" and cand["content"]["role"] == "model"
    assert cand["content"]["parts"] == [
        {"text": "Creating the file."},
        {"functionCall": {"name": "run_shell_command",
                          "args": {"command": "printf 'hello\\n' > hello.txt"}}}]
    usage = event["usageMetadata"]
    prompt = count_tokens(json.dumps([body["systemInstruction"], body["contents"]]))
    out = sum(count_tokens(json.dumps(p)) for p in cand["content"]["parts"])
    assert usage == {"promptTokenCount": prompt, "candidatesTokenCount": out,
                     "totalTokenCount": prompt + out}
    assert event["modelVersion"] == "gemini-2.5-flash"
    [rec] = server.exchanges
    assert (rec["protocol"], rec["model"], rec["decision"]) == ("gemini", "gemini-2.5-flash",
                                                                "turn0/step0")
    assert (rec["input_tokens"], rec["output_tokens"]) == (prompt, out)


def test_second_request_gets_the_edit_as_replace_with_an_absolute_path(
        server: ModelServer) -> None:
    status, _, raw = _post(server.url,
                           "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
                           _body(FIRST_TURN))
    assert status == 200
    [event] = _events(raw)
    assert event["candidates"][0]["content"]["parts"] == [{"functionCall": {
        "name": "replace", "args": {"file_path": "/work/ws/hello.txt", "old_string": "hello",
                                    "new_string": "hello world",
                                    "instruction": "Replace 'hello' by 'hello world'."}}}]
    assert server.exchanges[0]["step"] == 1


@pytest.mark.parametrize("version", ["v1beta", "v1"])
def test_generate_content_is_one_json_body(server: ModelServer, version: str) -> None:
    status, ctype, raw = _post(server.url, f"/{version}/models/m:generateContent", _body())
    assert status == 200 and ctype == "application/json"
    obj = json.loads(raw)
    assert obj["candidates"][0]["content"]["parts"][1]["functionCall"]["name"] == \
        "run_shell_command"
    assert obj["modelVersion"] == "m"


def test_unknown_method_and_bad_bodies_are_refused(server: ModelServer) -> None:
    status, _, _ = _post(server.url, "/v1beta/models/m:countTokens", _body())
    assert status == 404
    status, _, raw = _post(server.url, "/v1beta/models/m:streamGenerateContent", {"x": 1})
    assert status == 400 and "missing field 'contents'" in json.loads(raw)["error"]["message"]
    bad = {"contents": [{"role": "tool", "parts": []}]}
    status, _, raw = _post(server.url, "/v1beta/models/m:generateContent", bad)
    assert status == 400 and "contents[0].role" in json.loads(raw)["error"]["message"]
    bad = {"contents": [{"role": "model", "parts": [{"functionCall": {"args": {}}}]}]}
    status, _, raw = _post(server.url, "/v1beta/models/m:generateContent", bad)
    assert status == 400 and "contents[0].parts[0].functionCall" in \
        json.loads(raw)["error"]["message"]


def test_read_exit_codes_ids_and_thoughts() -> None:
    calls = [{"functionCall": {"name": "run_shell_command", "args": {"command": c}}}
             for c in ("ok", "fail", "kill", "quiet")]
    outs = ["Output: fine\nProcess Group PGID: 1",
            "Output: oops\nExit Code: 3\nProcess Group PGID: 2",
            "Output: (empty)\nSignal: 9",
            "Command exited with code: 4"]
    conv = GeminiProtocol().read(_body([
        {"role": "model", "parts": [{"text": "thinking", "thought": True}, {"text": "Go."},
                                    *calls]},
        {"role": "user", "parts": [
            *({"functionResponse": {"name": "run_shell_command", "response": {"output": o}}}
              for o in outs),
            {"functionResponse": {"name": "read_file",
                                  "response": {"error": "File not found."}}}]},
        {"role": "model", "parts": [{"text": "done"}]},
    ]), {})
    assert [m.role for m in conv.messages] == ["system", "user", "assistant", "tool",
                                               "assistant"]
    assert conv.cwd == "/work/ws" and conv.model == ""
    assert conv.tools == ("read_file", "replace", "write_file", "run_shell_command")
    asst = conv.messages[2]
    assert asst.text == "Go."  # the thought part is not the answer
    assert [c.kind for c in asst.tool_calls] == ["shell"] * 4
    assert [c.command for c in asst.tool_calls] == ["ok", "fail", "kill", "quiet"]
    results = conv.messages[3].results
    # no ids: results are matched to the calls by position (the fifth has no call)
    assert [r.call_id for r in results[:4]] == [c.id for c in asst.tool_calls]
    assert [(r.exit_code, r.is_error) for r in results] == [
        (0, False), (3, True), (None, None), (None, None), (None, True)]
    assert results[4].output == "File not found."
    assert conv.assistant_turns == 2


def test_read_at_takes_the_model_from_the_path() -> None:
    p = GeminiProtocol()
    assert p.matches("/v1beta/models/gemini-2.5-pro:streamGenerateContent")
    assert not p.matches("/v1beta/models/gemini-2.5-pro:countTokens")
    assert not p.matches("/v1/messages")
    conv = p.read_at("/v1beta/models/gemini-2.5-pro:generateContent", _body(), {})
    assert conv.model == "gemini-2.5-pro"
    with pytest.raises(BadRequest, match="systemInstruction"):
        p.read({"contents": [], "systemInstruction": 3}, {})
    reply = p.render_at("/v1beta/models/x:generateContent", Step(text="bye"), conv, _body())
    assert json.loads(reply.body)["candidates"][0]["content"]["parts"] == [{"text": "bye"}]
