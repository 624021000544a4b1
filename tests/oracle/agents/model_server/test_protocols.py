"""Each wire protocol: requests shaped as the runtimes send them read into one conversation,
and steps rendered as the runtimes accept them (streamed and not)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from oracle.agents.model_server import Call, Edit, Shell, Step
from oracle.agents.model_server.anthropic_messages import MessagesProtocol
from oracle.agents.model_server.openai_chat import ChatProtocol
from oracle.agents.model_server.openai_responses import ResponsesProtocol, apply_patch_text
from oracle.agents.model_server.wire import BadRequest, count_tokens, edit_command, resolve_path


def _sse(body: bytes) -> list[tuple[str | None, dict]]:
    events, name = [], None
    for line in body.decode().splitlines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: ") and line != "data: [DONE]":
            events.append((name, json.loads(line[6:])))
            name = None
    return events


# ----------------------------------------------------------------------------- Responses

CODEX_TOOLS = [{"type": "function", "name": "exec_command"}, {"type": "function",
               "name": "write_stdin"}, {"type": "custom", "name": "apply_patch"}]


def _codex_body(extra_items: list[dict] | None = None, **kw) -> dict:
    items = [
        {"type": "message", "role": "developer", "content": [
            {"type": "input_text", "text": "You are a coding agent."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text":
            "<environment_context>\n  <cwd>/work/ws</cwd>\n</environment_context>"}]},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "make hello.txt"}]},
        *(extra_items or []),
    ]
    return {"model": "loopback", "stream": True, "input": items, "tools": CODEX_TOOLS,
            "prompt_cache_key": "thread-1", **kw}


def test_responses_reads_codex_history_with_exit_codes() -> None:
    body = _codex_body([
        {"type": "reasoning", "summary": []},
        {"type": "function_call", "call_id": "c1", "name": "exec_command",
         "arguments": json.dumps({"cmd": "false"})},
        {"type": "function_call", "call_id": "c2", "name": "exec_command",
         "arguments": json.dumps({"cmd": "ls"})},
        {"type": "function_call_output", "call_id": "c1", "output":
            "Chunk ID: ab\nWall time: 0.1 seconds\nProcess exited with code 1\n"
            "Original token count: 0\nOutput:\nboom\n"},
        {"type": "function_call_output", "call_id": "c2", "output": "aborted"},
        {"type": "custom_tool_call", "call_id": "c3", "name": "apply_patch",
         "input": "*** Begin Patch\n*** Update File: a.txt\n@@\n-a\n+b\n*** End Patch\n"},
        {"type": "custom_tool_call_output", "call_id": "c3",
         "output": "Exit code: 0\nWall time: 0 seconds\nOutput:\nSuccess.\n"},
    ])
    conv = ResponsesProtocol().read(body, {})
    assert conv.id == "thread-1" and conv.cwd == "/work/ws" and conv.model == "loopback"
    assert [m.role for m in conv.messages] == ["system", "user", "user", "assistant", "tool",
                                               "assistant", "tool"]
    assert conv.assistant_turns == 2  # two parallel calls are one turn
    calls = conv.tool_calls()
    assert [(c.kind, c.command, c.path) for c in calls] == [
        ("shell", "false", None), ("shell", "ls", None), ("edit", None, "a.txt")]
    res = conv.results()
    assert (res["c1"].exit_code, res["c1"].output, res["c1"].is_error) == (1, "boom\n", True)
    assert (res["c2"].exit_code, res["c2"].output) == (None, "aborted")
    assert (res["c3"].exit_code, res["c3"].output) == (0, "Success.\n")
    assert [t for _, t in conv.prompts()][-1] == "make hello.txt"


def test_responses_renders_codex_items_in_sse() -> None:
    proto = ResponsesProtocol()
    conv = proto.read(_codex_body(), {})
    step = Step((Shell("echo hi", timeout_s=2), Edit("a.txt", "a", "b"),
                 Call("view_image", {"path": "x.png"})), "working")
    reply = proto.render(step, conv, _codex_body())
    assert reply.content_type == "text/event-stream" and reply.status == 200
    events = _sse(reply.body)
    assert [n for n, _ in events] == ["response.created"] + ["response.output_item.done"] * 4 \
        + ["response.completed"]
    items = [d["item"] for n, d in events if n == "response.output_item.done"]
    assert items[0]["type"] == "message" and items[0]["content"][0]["text"] == "working"
    assert items[1]["name"] == "exec_command"
    assert json.loads(items[1]["arguments"]) == {"cmd": "echo hi", "yield_time_ms": 2000}
    assert items[2] == {**items[2], "type": "custom_tool_call", "name": "apply_patch",
                        "input": apply_patch_text(Edit("a.txt", "a", "b"))}
    assert (items[3]["name"], json.loads(items[3]["arguments"])) == ("view_image",
                                                                     {"path": "x.png"})
    done = events[-1][1]["response"]
    assert done["usage"]["output_tokens"] == reply.output_tokens > 0
    # the ids are a function of the transcript: the same request, the same answer bytes
    assert proto.render(step, conv, _codex_body()).body == reply.body


def test_responses_finish_is_a_message_and_non_streaming_is_json() -> None:
    proto = ResponsesProtocol()
    body = _codex_body(stream=False)
    reply = proto.render(Step((), "done"), proto.read(body, {}), body)
    obj = json.loads(reply.body)
    assert obj["status"] == "completed" and reply.content_type == "application/json"
    assert [i["type"] for i in obj["output"]] == ["message"]
    assert obj["output"][0]["content"][0]["text"] == "done"


def test_responses_older_shell_tools_and_missing_apply_patch() -> None:
    proto = ResponsesProtocol()
    body = _codex_body(tools=[{"type": "function", "name": "shell_command"}])
    conv = proto.read(body, {})
    reply = proto.render(Step((Edit("a.txt", "x", "y"),)), conv, body)
    item = _sse(reply.body)[1][1]["item"]
    assert item["name"] == "shell_command"
    assert json.loads(item["arguments"])["command"] == edit_command(Edit("a.txt", "x", "y"))
    body = _codex_body(tools=[{"type": "function", "name": "shell"}])
    item = _sse(proto.render(Step((Shell("ls"),)), proto.read(body, {}), body).body)[1][1]
    assert json.loads(item["item"]["arguments"]) == {"command": ["bash", "-lc", "ls"]}


@pytest.mark.parametrize("body, msg", [
    ({"model": "m"}, "request: missing field 'input'"),
    ({"input": [3]}, "input[0]: expected an object"),
    ({"input": [{"type": "message", "role": "robot", "content": "x"}]}, "input[0].role"),
    ({"input": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]},
     "input[0]: missing field 'name'"),
])
def test_responses_bad_requests_name_the_field(body: dict, msg: str) -> None:
    with pytest.raises(BadRequest, match=msg.replace("[", r"\[").replace("]", r"\]")):
        ResponsesProtocol().read(body, {})


# ----------------------------------------------------------------------------- Messages

SYSTEM = [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1"},
          {"type": "text", "text": "Here is useful information.\nPrimary working directory: "
                                   "/work/ws\nIs directory a git repo: No"}]


def _claude_body(messages: list[dict], **kw) -> dict:
    return {"model": "loopback", "stream": True, "system": SYSTEM, "max_tokens": 32000,
            "tools": [{"name": "Bash"}, {"name": "Read"}, {"name": "Edit"}],
            "metadata": {"user_id": json.dumps({"device_id": "d", "session_id": "sess-1"})},
            "messages": messages, **kw}


def test_messages_reads_claude_history() -> None:
    body = _claude_body([
        {"role": "user", "content": [{"type": "text", "text": "<system-reminder>x"},
                                     {"type": "text", "text": "make hello.txt"}]},
        {"role": "system", "content": "Available agent types: ..."},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm"},
            {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "false"}},
            {"type": "tool_use", "id": "t2", "name": "Read",
             "input": {"file_path": "/work/ws/a.txt"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "Exit code 1\nboom",
             "is_error": True},
            {"type": "tool_result", "tool_use_id": "t2",
             "content": [{"type": "text", "text": "1\ta"}]},
            {"type": "text", "text": "Continue from where you left off."}]},
    ])
    conv = MessagesProtocol().read(body, {})
    assert conv.id == "sess-1" and conv.cwd == "/work/ws"
    assert MessagesProtocol().read(body, {"x-claude-code-session-id": "hdr"}).id == "hdr"
    assert [m.role for m in conv.messages] == ["system", "user", "system", "assistant", "tool"]
    assert conv.messages[0].text.startswith("x-anthropic-billing-header")
    assert [(c.kind, c.command, c.path) for c in conv.tool_calls()] == [
        ("shell", "false", None), ("read", None, "/work/ws/a.txt")]
    res = conv.results()
    assert (res["t1"].exit_code, res["t1"].output, res["t1"].is_error) == (1, "boom", True)
    assert (res["t2"].exit_code, res["t2"].output, res["t2"].is_error) == (None, "1\ta", False)
    assert conv.messages[-1].text == "Continue from where you left off."


def test_messages_renders_parallel_tool_use_and_reads_before_edit() -> None:
    proto = MessagesProtocol()
    body = _claude_body([{"role": "user", "content": "go"}])
    conv = proto.read(body, {})
    step = Step((Shell("ls", timeout_s=5), Edit("a.txt", "a", "b"), Edit("a.txt", "b", "c")))
    events = _sse(proto.render(step, conv, body).body)
    names = [n for n, _ in events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    starts = [d["content_block"] for n, d in events if n == "content_block_start"]
    deltas = [d["delta"] for n, d in events if n == "content_block_delta"]
    assert [b["name"] for b in starts] == ["Bash", "Read", "Edit", "Edit"]  # one Read only
    inputs = [json.loads(d["partial_json"]) for d in deltas]
    assert inputs[0] == {"command": "ls", "timeout": 5000}
    assert inputs[1] == {"file_path": "/work/ws/a.txt"}
    assert inputs[2] == {"file_path": "/work/ws/a.txt", "old_string": "a", "new_string": "b"}
    assert len({b["id"] for b in starts}) == 4
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_messages_edit_of_a_file_already_read_needs_no_read() -> None:
    proto = MessagesProtocol()
    body = _claude_body([
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read",
                                           "input": {"file_path": "/work/ws/a.txt"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": "1\ta"}]}])
    reply = proto.render(Step((Edit("a.txt", "a", "b"),)), proto.read(body, {}), body)
    starts = [d["content_block"]["name"] for n, d in _sse(reply.body) if n == "content_block_start"]
    assert starts == ["Edit"]


def test_messages_finish_and_non_streaming() -> None:
    proto = MessagesProtocol()
    body = _claude_body([{"role": "user", "content": "go"}], stream=False)
    obj = json.loads(proto.render(Step((), "done"), proto.read(body, {}), body).body)
    assert obj["stop_reason"] == "end_turn" and obj["content"] == [{"type": "text",
                                                                     "text": "done"}]


def test_messages_bad_request_names_the_block() -> None:
    body = _claude_body([{"role": "assistant", "content": [{"type": "tool_use", "id": "t"}]}])
    with pytest.raises(BadRequest, match=r"messages\[0\]\.content\[0\]: missing field 'name'"):
        MessagesProtocol().read(body, {})


# ----------------------------------------------------------------------------- chat

MINI_PROMPT = ("Please solve this issue: make hello.txt\n... When done, issue exactly: "
               "`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`")
BASH_TOOL = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]


def _chat_body(extra: list[dict] | None = None, **kw) -> dict:
    return {"model": "loopback", "tools": BASH_TOOL, "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": MINI_PROMPT}, *(extra or [])], **kw}


def test_chat_reads_mini_swe_agent_history() -> None:
    body = _chat_body([
        {"role": "assistant", "content": "ok", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "bash", "arguments": json.dumps({"command": "false"})}}]},
        {"role": "tool", "tool_call_id": "c1",
         "content": json.dumps({"returncode": 1, "output": "boom"})},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c2", "type": "function",
             "function": {"name": "bash", "arguments": json.dumps({"command": "ls"})}}]},
        {"role": "tool", "tool_call_id": "c2",
         "content": "<returncode>0</returncode>\n<output>a</output>"}])
    conv = ChatProtocol().read(body, {})
    assert conv.id.startswith("chat-") and conv.tools == ("bash",)
    assert conv.id == ChatProtocol().read(_chat_body(), {}).id  # stable across steps
    res = conv.results()
    assert (res["c1"].exit_code, res["c1"].output) == (1, "boom")
    assert res["c2"].exit_code == 0
    assert [c.command for c in conv.tool_calls()] == ["false", "ls"]


def test_chat_renders_bash_calls_and_mini_submission() -> None:
    proto = ChatProtocol()
    conv = proto.read(_chat_body(), {})
    obj = json.loads(proto.render(Step((Shell("ls"),), "listing"), conv, _chat_body()).body)
    choice = obj["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == "listing"
    fn = choice["message"]["tool_calls"][0]["function"]
    assert fn["name"] == "bash" and json.loads(fn["arguments"]) == {"command": "ls"}
    done = json.loads(proto.render(Step((), "done"), conv, _chat_body()).body)["choices"][0]
    assert json.loads(done["message"]["tool_calls"][0]["function"]["arguments"]) == {
        "command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}
    plain = _chat_body()
    plain["messages"][1]["content"] = "just chat"
    reply = proto.render(Step((), "bye"), proto.read(plain, {}), plain)
    choice = json.loads(reply.body)["choices"][0]
    assert choice["finish_reason"] == "stop" and "tool_calls" not in choice["message"]


def test_chat_streams_chunks_when_asked() -> None:
    proto = ChatProtocol()
    body = _chat_body(stream=True)
    reply = proto.render(Step((Shell("ls"),)), proto.read(body, {}), body)
    assert reply.body.endswith(b"data: [DONE]\n\n")
    chunks = [d for _, d in _sse(reply.body)]
    assert chunks[0]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "bash"
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


# ----------------------------------------------------------------------------- shared


def test_edit_command_really_edits(tmp_path: Path) -> None:
    (tmp_path / "a b.txt").write_text("it's 'quoted' $HOME\nnext\n")
    cmd = edit_command(Edit("a b.txt", "it's 'quoted' $HOME", "done"))
    subprocess.run(["bash", "-c", cmd], cwd=tmp_path, check=True)
    assert (tmp_path / "a b.txt").read_text() == "done\nnext\n"
    bad = subprocess.run(["bash", "-c", edit_command(Edit("a b.txt", "absent", "x"))],
                         cwd=tmp_path, capture_output=True, text=True)
    assert bad.returncode == 1 and "text to replace not found" in bad.stderr


def test_apply_patch_text_replaces_lines() -> None:
    assert apply_patch_text(Edit("a.txt", "one\ntwo", "three")) == (
        "*** Begin Patch\n*** Update File: a.txt\n@@\n-one\n-two\n+three\n*** End Patch\n")


def test_small_helpers() -> None:
    assert count_tokens("") == 0 and count_tokens("abcde") == 2
    assert resolve_path("a/../b.txt", "/w") == "/w/b.txt"
    assert resolve_path("/abs", "/w") == "/abs" and resolve_path("rel", None) == "rel"


def test_digest_ignores_volatile_request_fields() -> None:
    a = ResponsesProtocol().read(_codex_body(), {})
    b = ResponsesProtocol().read({**_codex_body(prompt_cache_key="thread-2"),
                                  "client_metadata": {"turn": 9}}, {})
    assert a.id != b.id and a.digest() == b.digest()
    c = ResponsesProtocol().read(_codex_body([{"type": "message", "role": "user",
                                               "content": "more"}]), {})
    assert c.digest() != a.digest()
