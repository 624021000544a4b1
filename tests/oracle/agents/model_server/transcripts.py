"""Transcripts for the brain tests: what a runtime sends back after running a brain's commands."""

from __future__ import annotations

from oracle.agents.model_server import Conversation, Message, ToolCall
from oracle.agents.model_server.conversation import ToolResult

#: (command, output) of a shell call; output None: the call has no result (it was killed)
Done = list[tuple[str, str | None]]


def conversation(prompt: str, done: Done, *extra_prompts: str,
                 polls: tuple[tuple[int, str, int | None], ...] = ()) -> Conversation:
    """The prompt, then each (command, output) as a shell call and its result, then ``polls``
    (Codex ``write_stdin`` calls: session id, output, exit code) and further prompts."""
    msgs = [Message("system", "you are a coding agent"), Message("user", prompt)]
    for i, (cmd, out) in enumerate(done):
        cid = f"call_{i}"
        msgs.append(Message("assistant", tool_calls=(ToolCall(cid, "exec_command", {"cmd": cmd},
                                                              "shell", cmd),)))
        if out is not None:
            msgs.append(Message("tool", results=(ToolResult(cid, out, 0),)))
    for j, (sid, out, code) in enumerate(polls):
        cid = f"poll_{j}"
        msgs.append(Message("assistant", tool_calls=(ToolCall(cid, "write_stdin",
                                                              {"session_id": sid, "chars": ""}),)))
        msgs.append(Message("tool", results=(ToolResult(cid, out, code),)))
    msgs += [Message("user", p) for p in extra_prompts]
    return Conversation("openai-responses", tuple(msgs), "loopback")
