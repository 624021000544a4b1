"""Reader for Cline task folders (``<globalStorage>/tasks/<task id>/``; Roo Code, a fork,
keeps the same files): ``ui_messages.json`` (what the extension showed, one message per
entry, each with its time ``ts`` in epoch milliseconds) beside
``api_conversation_history.json`` (the messages sent to the model). The reader takes the
folder or its ``ui_messages.json``; the UI messages carry the times, the token counts, the
commands and the edits (``ClineMessage`` in ``src/shared/ExtensionMessage.ts`` of
cline/cline), so they make the events; the conversation file, when present, only adds its
message count to ``meta``.

Mapping (``type`` ``say`` or ``ask``; the kind is in ``say`` or ``ask``):

* ``task`` (the first message), ``user_feedback`` → ``message`` (``role`` user, a prompt: a
  new step when the agent acted since the last one); ``text``, ``reasoning``,
  ``completion_result``, ``followup``, ``plan_mode_respond`` → ``message`` (assistant).
* ``api_req_started`` → ``model_call`` at ``ts`` (``start``); its text is the request's
  ``ClineApiReqInfo`` JSON: ``input_tokens`` = ``tokensIn`` + ``cacheWrites`` +
  ``cacheReads`` (Cline keeps the three apart; the prompt is their sum, as the Claude Code
  readers count it), ``cached_tokens`` = ``cacheReads``, ``output_tokens`` = ``tokensOut``,
  ``extra["cost_usd"]``; a ``cancelReason`` or ``streamingFailedMessage`` marks it
  ``is_error``. No end time (the log does not say when the response finished).
* ``command`` (``ask`` when it needed approval, ``say`` when auto-approved) → ``command`` or
  ``test``, with the ``command_output`` messages after it (their text joined in
  ``extra["output"]``; ``end`` the last one's ``ts``), released when the next other
  message arrives; a safe boundary. Exit code: only where the output states it (``[Command
  completed with exit code N]``, newer Cline); else None.
* ``tool`` → its ``ClineSayTool`` JSON: ``editedExistingFile``, ``newFileCreated`` (and
  Roo Code's ``appliedDiff``, ``insertContent``, ``searchAndReplace``) → ``file_change``
  (``paths_written``); ``fileDeleted`` → ``file_change`` with ``extra["paths_deleted"]``;
  ``readFile`` → ``other`` with ``paths_read``; the rest → ``other``. A safe boundary each.
* ``error``, ``diff_error``, ``clineignore_error``, ``api_req_failed``,
  ``mistake_limit_reached`` → ``other`` with ``is_error``; everything else (checkpoints,
  browser and MCP actions, …) → ``other`` (an ask or say Cline does not define is warned).
* ``partial: true`` messages (the task stopped while one streamed) are kept, marked
  ``extra["partial"]``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from features.readers.common import (
    Loc,
    TrajectoryFormatError,
    apply_test_counts,
    classify_command,
    get,
    load_json,
    mark_tool_return,
    new_step_on_user_input,
    plain_event,
    seal,
    to_float,
    to_int,
    warn_unknown,
)
from features.schema import Event, EventKind, Trajectory
from features.shell import split_command

FORMAT = "cline-task"
UI_FILE = "ui_messages.json"
API_FILE = "api_conversation_history.json"

SAYS = frozenset({
    "task", "error", "api_req_started", "api_req_finished", "text", "reasoning",
    "completion_result", "plan_completion_result", "user_feedback", "user_feedback_diff",
    "command", "command_output", "tool", "shell_integration_warning",
    "shell_integration_warning_with_suggestion", "browser_action_launch", "browser_action",
    "browser_action_result", "mcp_server_request_started", "mcp_server_response",
    "mcp_notification", "use_mcp_server", "diff_error", "deleted_api_reqs",
    "clineignore_error", "command_permission_denied", "checkpoint_created",
    "load_mcp_documentation", "info", "task_progress", "hook_status", "hook_output_stream",
    "subagent", "use_subagents", "subagent_usage", "conditional_rules_applied", "compaction",
    "api_req_retried", "hook", "new_task", "condense", "rooignore_error", "codebase_search_result",
    "subtask_result", "checkpoint_saved", "user_edit_todos", "too_many_tools_warning",
})
ASKS = frozenset({
    "followup", "plan_mode_respond", "act_mode_respond", "command", "command_output",
    "completion_result", "tool", "api_req_failed", "resume_task", "resume_completed_task",
    "mistake_limit_reached", "browser_action_launch", "use_mcp_server", "new_task",
    "condense", "summarize_task", "report_bug", "use_subagents", "auto_approval_max_req_reached",
})
_PROMPTS = frozenset({"task", "user_feedback"})
_ASSISTANT = frozenset({"text", "reasoning", "completion_result", "followup",
                        "plan_mode_respond", "act_mode_respond", "plan_completion_result"})
_ERRORS = frozenset({"error", "diff_error", "clineignore_error", "rooignore_error",
                     "api_req_failed", "mistake_limit_reached", "command_permission_denied"})
_EDIT_TOOLS = frozenset({"editedExistingFile", "newFileCreated", "appliedDiff",
                         "insertContent", "searchAndReplace"})
_EXIT = re.compile(r"\[Command completed with exit code (-?\d+)\]")


def looks_like(doc: Any) -> bool:
    """Whether a parsed JSON document is a Cline ``ui_messages.json``: a list of messages
    with an integer ``ts`` and a ``type`` of ``say`` or ``ask``."""
    if not isinstance(doc, list) or not doc or not isinstance(doc[0], dict):
        return False
    first = doc[0]
    return (first.get("type") in ("say", "ask") and type(first.get("ts")) in (int, float)
            and isinstance(first.get(first["type"]), str))


def looks_like_dir(path: Path) -> bool:
    """Whether a directory is a Cline task folder (it holds ``ui_messages.json``)."""
    return (path / UI_FILE).is_file()


def _info(text: Any, loc: Loc) -> dict[str, Any]:
    """The JSON object a message's text carries (``api_req_started``, ``tool``)."""
    if not isinstance(text, str):
        raise (loc / "text").error("expected a JSON object in a string")
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise (loc / "text").error(f"not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise (loc / "text").error("expected a JSON object in a string")
    return obj


def read_cline_task(path: str | Path, *, task_id: str | None = None,
                    repo: str | None = None) -> Trajectory:
    """Read a Cline (or Roo Code) task folder, or its ``ui_messages.json``, into a
    :class:`Trajectory` (see the module docstring)."""
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    ui = path / UI_FILE if path.is_dir() else path
    doc = load_json(ui)
    if not isinstance(doc, list):
        raise TrajectoryFormatError(f"{ui}: expected a list of UI messages, got "
                                    f"{type(doc).__name__}")
    meta: dict[str, Any] = {"task_folder": str(folder)}
    api = folder / API_FILE
    if api.is_file():
        conv = load_json(api)
        if not isinstance(conv, list):
            raise TrajectoryFormatError(f"{api}: expected a list of messages")
        meta["api_messages"] = len(conv)
        meta["api_assistant_messages"] = sum(
            1 for m in conv if isinstance(m, dict) and m.get("role") == "assistant")
    state = {"step": 1, "agent_acted": False}
    events: list[Event] = []
    cmd: Event | None = None
    outputs: list[str] = []
    cost = 0.0

    def close_cmd() -> None:
        nonlocal cmd
        if cmd is not None:
            out = "\n".join(outputs)
            cmd.extra["output"] = out
            if (m := _EXIT.search(out)) is not None:
                cmd.exit_code = int(m.group(1))
            apply_test_counts(cmd, out)
            mark_tool_return(cmd)
            events.append(cmd)
            cmd = None

    root = Loc(ui)
    for i, m in enumerate(doc):
        # plain type checks first; the checked reads (and the message's Loc) only when one
        # fails, so a bad field raises the same error at the same point
        typ = m.get("type") if type(m) is dict else None
        what = m.get(typ) if typ == "say" or typ == "ask" else None
        ts_ms = m.get("ts") if what.__class__ is str else None
        text = m.get("text")
        if ts_ms.__class__ is not int or (text is not None and text.__class__ is not str):
            loc = root / i
            if not isinstance(m, dict):
                raise loc.error("expected object")
            typ = get(m, "type", str, loc, required=True)
            if typ not in ("say", "ask"):
                raise (loc / "type").error(f"expected 'say' or 'ask', got {typ!r}")
            what = get(m, typ, str, loc, required=True)
            ts_ms = to_float(m.get("ts"), loc / "ts")
            text = get(m, "text", str, loc)
        ts = None if ts_ms is None else ts_ms / 1000.0
        if what == "command_output" and cmd is not None:
            if text:
                outputs.append(text)
            cmd.end = ts
            continue
        close_cmd()
        extra: dict[str, Any] = {"ui_index": i, "ui_type": typ, typ: what}
        if m.get("partial"):
            extra["partial"] = True
        step = state["step"]
        if what == "command":
            argv = split_command(text) if text else None
            cmd = plain_event(classify_command(text, argv), step, extra, start=ts)
            cmd.command, cmd.argv = text, argv
            outputs = []
            state["agent_acted"] = True
            continue
        if what == "api_req_started":
            loc = root / i
            info = _info(text, loc)
            il = loc / "text"
            t_in = to_int(info.get("tokensIn"), il / "tokensIn")
            writes = to_int(info.get("cacheWrites"), il / "cacheWrites")
            reads = to_int(info.get("cacheReads"), il / "cacheReads")
            ev = plain_event(EventKind.MODEL_CALL, step, extra, start=ts,
                             output_tokens=to_int(info.get("tokensOut"), il / "tokensOut"))
            if t_in is not None or writes is not None or reads is not None:
                ev.input_tokens = (t_in or 0) + (writes or 0) + (reads or 0)
            ev.cached_tokens = reads
            c = to_float(info.get("cost"), il / "cost")
            if c is not None:
                extra["cost_usd"] = c
                cost += c
            for k in ("cacheWrites", "cancelReason", "streamingFailedMessage"):
                if info.get(k) is not None:
                    extra[k] = info[k]
            ev.is_error = bool(info.get("cancelReason") or info.get("streamingFailedMessage"))
            state["agent_acted"] = True
            events.append(ev)
            continue
        if what == "tool":
            info = _info(text, root / i)
            tool = info.get("tool")
            extra["tool"] = tool
            extra["info"] = info
            p = info.get("path")
            ev = plain_event(EventKind.OTHER, step, extra, start=ts)
            if tool in _EDIT_TOOLS:
                ev.kind = EventKind.FILE_CHANGE
                ev.paths_written = [p] if isinstance(p, str) and p else []
            elif tool == "fileDeleted":
                ev.kind = EventKind.FILE_CHANGE
                if isinstance(p, str) and p:
                    extra["paths_deleted"] = [p]
            elif tool == "readFile" and isinstance(p, str) and p:
                ev.paths_read = [p]
            mark_tool_return(ev)
            state["agent_acted"] = True
            events.append(ev)
            continue
        if what in _PROMPTS:
            new_step_on_user_input(state)
            extra.update(role="user", prompt=True)
            events.append(plain_event(EventKind.MESSAGE, state["step"], extra, start=ts,
                                      text=text))
            continue
        if what in _ASSISTANT:
            extra["role"] = "assistant"
            events.append(plain_event(EventKind.MESSAGE, step, extra, start=ts, text=text))
            continue
        if what not in (SAYS if typ == "say" else ASKS):
            warn_unknown(ui, f"message {i}", f"{typ} {what!r}")
        ev = plain_event(EventKind.OTHER, step, extra, start=ts, text=text)
        ev.is_error = what in _ERRORS
        if m.get("lastCheckpointHash"):
            extra["checkpoint"] = m["lastCheckpointHash"]
        events.append(ev)
    close_cmd()
    meta["cost_usd"] = cost
    for i, e in enumerate(events):
        e.index = i
        e.turn_end = i + 1 == len(events) or events[i + 1].step != e.step
    tid = task_id or folder.name
    return seal(tid, repo or "unknown", FORMAT, events, meta, path=ui)
