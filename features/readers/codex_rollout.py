"""Reader for Codex session rollout files (``~/.codex/sessions/.../rollout-*.jsonl``).

Every line is ``{timestamp: ISO-8601, type: session_meta|turn_context|response_item|
event_msg|compacted, payload}``. Mapping:

* ``session_meta`` → ``meta["session"]`` (task id = session id; repo from the git remote).
* ``response_item``: ``function_call`` + its ``function_call_output`` (paired by
  ``call_id``) → one event at the call's position. ``shell`` calls are ``command``
  (``test`` for test commands) with ``argv`` as logged (``bash -lc '…'`` kept; the
  provenance graph unwraps it) and ``command`` = ``shlex.join(argv)``; an ``apply_patch``
  call (argv ``["apply_patch", patch]`` or a ``bash -lc "apply_patch <<'PATCH' …"``
  heredoc, or a ``custom_tool_call`` named ``apply_patch``) is a ``file_change`` whose
  ``paths_written`` come from the patch headers (``*** Add File:``, ``*** Update File:``,
  ``*** Move to:``), kept as written (deleted files and move sources go to
  ``extra["paths_deleted"]``), and ``bytes_written`` is the size of the added lines. Paths are only ``paths_written`` when the call succeeded
  (exit code 0); otherwise they stay in ``extra["patch"]``. Exit code and
  ``duration_seconds`` come from the output's metadata; an output that is not the JSON
  envelope (``failed in sandbox …``, ``patch rejected by user``) is an error
  (``is_error``) with the exit code left None. Other function calls (``update_plan`` …)
  are ``other``. ``extra["cwd"]`` is the call's ``workdir``, else the session's latest
  ``cwd``. ``message`` → ``message`` (role in ``extra``), ``reasoning`` →
  ``message`` with the summary text.
* ``event_msg``: ``token_count`` → ``model_call`` with the per-call
  ``info.last_token_usage`` (``extra["total_token_usage"]`` keeps the running total);
  ``user_message`` / ``agent_message`` / ``agent_reasoning`` mirror response items for the
  UI and are kept as ``message`` events marked ``extra["mirror"] = True``;
  ``turn_aborted`` and others → ``other``; ``error``/``stream_error`` → ``other`` with
  ``is_error``.
* ``turn_context`` → ``other`` (the per-request settings).

Position: a call's event sits at its output's line, so a prefix of the trajectory never
holds a result before it arrived (a call with no output stays at its own line, marked
``extra["incomplete"]``).

Logical step: a user input (a user ``message`` item or ``user_message``) opens a new step
when the agent has acted since the previous user input, so the step is the user turn.

Times: ``start`` is the line's timestamp (epoch seconds); a call's ``end`` is its output
line's timestamp and ``duration`` the logged ``duration_seconds``. Rollout timestamps are
write times, so a call and its output often share one; ``duration`` is the measured one.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from features.readers.common import (
    Loc,
    apply_test_counts,
    classify_command,
    finish,
    get,
    iter_jsonl,
    mark_tool_return,
    new_step_on_user_input,
    parse_apply_patch,
    parse_iso,
    repo_from_url,
    stem,
    to_float,
    to_int,
    warn_unknown,
)
from features.schema import Event, EventKind, Trajectory
from features.shell import split_command

FORMAT = "codex-rollout"

LINE_TYPES = {"session_meta", "turn_context", "response_item", "event_msg", "compacted"}
RESPONSE_TYPES = {"message", "reasoning", "function_call", "function_call_output",
                  "custom_tool_call", "custom_tool_call_output", "local_shell_call",
                  "web_search_call", "other"}
EVENT_MSG_TYPES = {"token_count", "agent_reasoning", "agent_message", "user_message",
                   "turn_aborted", "error", "stream_error", "task_started", "task_complete",
                   "exec_command_begin", "exec_command_end", "patch_apply_begin",
                   "patch_apply_end", "agent_reasoning_raw_content", "entered_review_mode",
                   "exited_review_mode", "plan_update", "turn_diff", "background_event",
                   "mcp_tool_call_begin", "mcp_tool_call_end", "web_search_begin",
                   "web_search_end", "agent_reasoning_section_break", "get_history_entry_response",
                   "shutdown_complete", "conversation_path", "item_completed"}
_MIRRORS = {"user_message", "agent_message", "agent_reasoning", "agent_reasoning_raw_content"}
_AGENT_ACTS = {"function_call", "custom_tool_call", "local_shell_call", "reasoning",
               "token_count", "agent_message", "agent_reasoning", "web_search_call"}


def looks_like(first: dict[str, Any]) -> bool:
    """Whether a first JSONL object is a rollout line."""
    return (
        first.get("type") in LINE_TYPES
        and "payload" in first
        and isinstance(first.get("timestamp"), str)
    )


def _patch_from_argv(argv: list[str]) -> str | None:
    if argv and argv[0] in ("apply_patch", "applypatch") and len(argv) >= 2:
        return argv[1]
    if len(argv) >= 3 and argv[-1].lstrip().startswith(("apply_patch", "applypatch")):
        return argv[-1]
    return None


def read_codex_rollout(
    path: str | Path,
    *,
    task_id: str | None = None,
    repo: str | None = None,
    allow_truncated_tail: bool = False,
) -> Trajectory:
    """Read a Codex session rollout file into a :class:`Trajectory` (see module doc)."""
    path = Path(path)
    meta: dict[str, Any] = {}
    events: list[Event] = []
    calls: dict[str, Event] = {}
    state = {"step": 1, "agent_acted": False}
    n_user_turns = 0
    cwd: str | None = None

    for ln in iter_jsonl(path, allow_truncated_tail=allow_truncated_tail, meta=meta):
        loc = Loc(path, ln.lineno)
        obj = ln.obj
        ltype = get(obj, "type", str, loc, required=True)
        ts = parse_iso(obj.get("timestamp"), loc / "timestamp")
        payload = get(obj, "payload", (dict, type(None)), loc, default=None) or {}
        ploc = loc / "payload"
        base_extra = {"line": ln.lineno, "line_type": ltype}
        rest = {k: v for k, v in obj.items() if k not in ("type", "timestamp", "payload")}
        if rest:
            base_extra["line_extra"] = rest

        if ltype == "session_meta":
            meta["session"] = payload
            if isinstance(payload.get("cwd"), str):
                cwd = payload["cwd"]
            continue
        if ltype == "turn_context":
            if isinstance(payload.get("cwd"), str):
                cwd = payload["cwd"]
            events.append(Event(index=0, kind=EventKind.OTHER, step=state["step"], start=ts,
                                extra={**base_extra, "payload": payload}))
            continue
        if ltype not in ("response_item", "event_msg"):
            if ltype not in LINE_TYPES:
                warn_unknown(path, f"line {ln.lineno}", f"line type {ltype!r}")
            events.append(Event(index=0, kind=EventKind.OTHER, step=state["step"], start=ts,
                                extra={**base_extra, "payload": payload}))
            continue

        ptype = get(payload, "type", str, ploc, required=True)
        extra = {**base_extra, "payload_type": ptype}
        is_user_input = (ltype == "response_item" and ptype == "message"
                         and payload.get("role") == "user") or (
            ltype == "event_msg" and ptype == "user_message")
        if is_user_input:
            new_step_on_user_input(state)
            if ltype == "event_msg":
                n_user_turns += 1
        elif ptype in _AGENT_ACTS:
            state["agent_acted"] = True
        step = state["step"]

        if ltype == "response_item":
            if ptype in ("function_call", "custom_tool_call", "local_shell_call"):
                ev = _call_event(payload, ptype, ploc, step, ts, extra)
                if ev.argv is not None:
                    args = ev.extra.get("arguments")
                    wd = args.get("workdir") if isinstance(args, dict) else None
                    ev.extra["cwd"] = wd if isinstance(wd, str) else cwd
                events.append(ev)
                cid = payload.get("call_id") or payload.get("id")
                if isinstance(cid, str):
                    calls[cid] = ev
            elif ptype in ("function_call_output", "custom_tool_call_output"):
                cid = get(payload, "call_id", str, ploc, required=True)
                ev = calls.pop(cid, None)
                if ev is not None:
                    ev.step = step  # placed where it returned (see _position)
                if ev is None:
                    events.append(Event(index=0, kind=EventKind.OTHER, step=step, start=ts,
                                        extra={**extra, "orphan_output": True, **payload}))
                    continue
                _apply_output(ev, payload, ploc, ts, ln.lineno)
            elif ptype == "message":
                text = _content_text(payload.get("content"), ploc / "content")
                events.append(Event(
                    index=0, kind=EventKind.MESSAGE, step=step, start=ts, text=text,
                    extra={**extra, **{k: v for k, v in payload.items() if k != "type"}}))
            elif ptype == "reasoning":
                summ = payload.get("summary")
                text = _content_text(summ, ploc / "summary") if summ else None
                events.append(Event(
                    index=0, kind=EventKind.MESSAGE, step=step, start=ts, text=text,
                    extra={**extra, **{k: v for k, v in payload.items() if k != "type"}}))
            else:
                if ptype not in RESPONSE_TYPES:
                    warn_unknown(path, f"line {ln.lineno}", f"response_item type {ptype!r}")
                events.append(Event(
                    index=0, kind=EventKind.OTHER, step=step, start=ts,
                    extra={**extra, **{k: v for k, v in payload.items() if k != "type"}}))
            continue

        # event_msg
        if ptype == "token_count":
            info = get(payload, "info", (dict, type(None)), ploc)
            if info is None:
                events.append(Event(index=0, kind=EventKind.OTHER, step=step, start=ts,
                                    extra={**extra, **payload}))
                continue
            iloc = ploc / "info"
            last = get(info, "last_token_usage", dict, iloc, required=True)
            lloc = iloc / "last_token_usage"
            events.append(Event(
                index=0, kind=EventKind.MODEL_CALL, step=step, end=ts,
                input_tokens=to_int(last.get("input_tokens"), lloc / "input_tokens"),
                cached_tokens=to_int(last.get("cached_input_tokens"), lloc / "cached_input_tokens"),
                output_tokens=to_int(last.get("output_tokens"), lloc / "output_tokens"),
                extra={**extra, "last_token_usage": last,
                       **{k: v for k, v in info.items() if k != "last_token_usage"},
                       **{k: v for k, v in payload.items() if k not in ("type", "info")}},
            ))
            meta["total_token_usage"] = info.get("total_token_usage")
        elif ptype in _MIRRORS:
            text = payload.get("message", payload.get("text"))
            events.append(Event(
                index=0, kind=EventKind.MESSAGE, step=step, start=ts,
                text=text if isinstance(text, str) else None,
                extra={**extra, "mirror": True,
                       **{k: v for k, v in payload.items() if k not in ("type",)}}))
        else:
            if ptype not in EVENT_MSG_TYPES:
                warn_unknown(path, f"line {ln.lineno}", f"event_msg type {ptype!r}")
            msg = payload.get("message")
            events.append(Event(
                index=0, kind=EventKind.OTHER, step=step, start=ts,
                is_error=ptype in ("error", "stream_error"),
                text=msg if isinstance(msg, str) else None,
                extra={**extra, **{k: v for k, v in payload.items() if k != "type"}}))

    for ev in calls.values():
        ev.extra["incomplete"] = True
    events.sort(key=_position)
    session = meta.get("session") or {}
    git = session.get("git") if isinstance(session.get("git"), dict) else {}
    remote = git.get("repository_url") if git else None
    meta["n_user_turns"] = n_user_turns
    meta["n_turns_aborted"] = sum(
        1 for e in events if e.extra.get("payload_type") == "turn_aborted")
    tid = task_id or (session.get("id") if isinstance(session.get("id"), str) else None) \
        or stem(path)
    rep = repo or repo_from_url(remote) or "unknown"
    return finish(tid, rep, FORMAT, events, meta)


def _position(ev: Event) -> int:
    """A call sits where its output arrived (a prefix never holds a result early)."""
    return ev.extra.get("output_line", ev.extra["line"])


def _content_text(content: Any, loc: Loc) -> str | None:
    if content is None:
        return None
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise loc.error("expected array or string")
    parts = []
    for j, c in enumerate(content):
        if isinstance(c, dict) and isinstance(c.get("text"), str):
            parts.append(c["text"])
        elif not isinstance(c, dict):
            raise (loc / j).error("expected object")
    return "\n".join(parts) if parts else None


def _call_event(payload: dict[str, Any], ptype: str, loc: Loc, step: int, ts: float,
                extra: dict[str, Any]) -> Event:
    name = payload.get("name")
    ev = Event(index=0, kind=EventKind.OTHER, step=step, start=ts,
               extra={**extra, **{k: v for k, v in payload.items() if k != "type"}})
    argv: list[str] | None = None
    patch: str | None = None
    if ptype == "function_call" and name in ("shell", "container.exec", "exec_command",
                                             "local_shell"):
        raw = get(payload, "arguments", str, loc, required=True)
        try:
            args = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise (loc / "arguments").error(f"not valid JSON ({exc.msg})") from exc
        if not isinstance(args, dict):
            raise (loc / "arguments").error("expected a JSON object")
        cmd = args.get("command", args.get("cmd"))
        if isinstance(cmd, str):
            argv = split_command(cmd)
            ev.command = cmd
        elif isinstance(cmd, list) and all(isinstance(x, str) for x in cmd):
            argv = list(cmd)
            ev.command = None
        else:
            raise (loc / "arguments" / "command").error("expected array of strings or string")
        ev.extra["arguments"] = args
        if ev.command is None:
            ev.command = shlex.join(argv)
        ev.argv = argv
        patch = _patch_from_argv(argv) if argv is not None else None
        ev.kind = classify_command(ev.command, argv)
    elif ptype == "local_shell_call":
        action = payload.get("action") or {}
        cmd = action.get("command") if isinstance(action, dict) else None
        if isinstance(cmd, list) and all(isinstance(x, str) for x in cmd):
            ev.argv, ev.command = list(cmd), shlex.join(cmd)
            patch = _patch_from_argv(ev.argv)
            ev.kind = classify_command(ev.command, ev.argv)
    elif ptype == "custom_tool_call" and name == "apply_patch":
        patch = get(payload, "input", str, loc)
    if patch is not None:
        parsed = parse_apply_patch(patch)
        if parsed is not None:
            ev.kind = EventKind.FILE_CHANGE
            ev.extra["patch"] = parsed
    return ev


def _apply_output(ev: Event, payload: dict[str, Any], loc: Loc, ts: float, lineno: int) -> None:
    out = payload.get("output")
    ev.end = ts
    ev.extra["output_line"] = lineno
    envelope = None
    if isinstance(out, str):
        try:
            envelope = json.loads(out)
        except json.JSONDecodeError:
            envelope = None
    if isinstance(envelope, dict) and isinstance(envelope.get("metadata"), dict):
        md = envelope["metadata"]
        ev.exit_code = to_int(md.get("exit_code"), loc / "output" / "metadata" / "exit_code")
        ev.duration = to_float(md.get("duration_seconds"),
                               loc / "output" / "metadata" / "duration_seconds")
        text = envelope.get("output")
        ev.extra["output"] = text
        ev.extra["output_metadata"] = md
    else:
        text = out if isinstance(out, str) else None
        ev.extra["output"] = out
        # a bare string is the tool's own failure/rejection message for exec calls
        if ev.kind in (EventKind.COMMAND, EventKind.TEST, EventKind.FILE_CHANGE):
            ev.is_error = True
    for k, v in payload.items():
        if k not in ("type", "output", "call_id"):
            ev.extra[f"output_{k}"] = v
    if ev.kind == EventKind.FILE_CHANGE:
        patch = ev.extra.get("patch") or {}
        applied = ev.exit_code == 0 and not ev.is_error
        ev.paths_written = list(patch.get("written", [])) if applied else []
        if applied and patch.get("deleted"):
            ev.extra["paths_deleted"] = list(patch["deleted"])
        ev.bytes_written = patch.get("added_bytes") if applied else None
    apply_test_counts(ev, text if isinstance(text, str) else None)
    mark_tool_return(ev)
