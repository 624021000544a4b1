"""Reader for Codex session rollout files (``~/.codex/sessions/.../rollout-*.jsonl``), CLI
0.40 to 0.171: the streaming parser :class:`CodexRolloutParser` (see
:mod:`features.readers.stream`) and :func:`read_codex_rollout`, which feeds it a whole file.

Every line is ``{timestamp: ISO-8601, type, payload}`` (newer CLIs add ``ordinal`` and
``metadata``, kept in ``extra["line_extra"]``). Mapping:

* ``session_meta`` → ``meta["session"]`` (task id = session id; repo from the git remote);
  ``meta["forked_from_id"]`` for a fork (whose file does not copy the parent's history),
  ``meta["parent_thread_id"]`` for a subagent thread (``source`` names its parent).
* ``response_item`` tool calls: a call and its output (paired by ``call_id``) are one event,
  released at the output's line. Shell calls — ``shell``, ``container.exec``, ``local_shell``
  (and ``local_shell_call`` items) with an argv, ``shell_command`` with a command string,
  unified exec's ``exec_command`` (``cmd``) — are ``command`` (``test`` for test commands);
  ``command`` is the string as logged (``shlex.join(argv)`` for an argv; ``bash -lc '…'`` kept,
  the provenance graph unwraps it). An ``apply_patch`` (a ``custom_tool_call``, a
  ``function_call`` with ``input``, argv ``["apply_patch", patch]`` or a ``bash -lc
  "apply_patch <<'PATCH' …"`` heredoc) is a ``file_change`` whose ``paths_written`` come from
  the patch headers, kept as written (deleted files and move sources in
  ``extra["paths_deleted"]``), ``bytes_written`` the size of the added lines; paths are only
  written when the patch applied (exit code 0, or a ``Success.`` reply), else they stay in
  ``extra["patch"]``. Other calls (``update_plan`` …) are ``other``.
* Outputs: the JSON envelope ``{"output", "metadata": {"exit_code", "duration_seconds"}}``
  (older CLIs), or plain text with a header — ``Exit code: N`` / ``Process exited with code
  N``, ``Wall time: S seconds``, ``Output:`` — (``shell_command``, ``exec_command``, newer
  ``apply_patch``); only the header is parsed. An output that is neither (``failed in sandbox
  …``, ``patch rejected by user``, ``aborted``) is an error (``is_error``) with the exit code
  left None. Duration: the envelope's, else the CLI's own item (``item_completed`` /
  ``exec_command_end``), else the header's wall time.
* Unified exec: ``exec_command`` whose output says ``Process running with session ID N``
  stays pending; ``write_stdin`` calls on session N are their own ``other`` events, and the
  command is released (exit code, end) at the poll whose output says the process exited,
  or at the ``exec_command_end`` that names its call (exit code, duration, full output) when
  no poll saw it end. A header may begin with the command line (``Command: …``, 0.115), kept
  as ``extra["output_header"]["command"]``.
  Code mode: an ``exec`` cell (``custom_tool_call``, JavaScript) is an ``other`` event
  released when it completes (``Script completed``; ``Script failed``/``terminated`` is an
  error), at once or at the ``wait`` poll on its ``cell_id`` that sees it end; the commands
  and patches the cell ran (``item_completed`` items no call of the file owns) are
  ``command``/``file_change`` events marked ``extra["nested_in"] = "exec"``, not boundaries.
  A CLI that logs no such items (0.144) leaves the calls in the cell's code: they are read
  from it (``tools.exec_command``/``shell_command``/``apply_patch`` with literal arguments,
  :mod:`.code_cells`) and released just before the cell, ``extra["source"]`` holding the
  call's text; a command built at run time keeps no command text. Exit codes and outputs
  come from the result headers the script printed (``Chunk ID: … Process exited with code
  N … Output:``), matched in order only when there is one per command, else left None; a
  patch wrote its files when its cell completed (a failed cell's: ``extra
  ["attempted_paths"]``).
* ``extra["cwd"]`` is the call's ``workdir``, else the session's latest ``cwd``. ``message``
  → ``message`` (role in ``extra``), ``reasoning`` → ``message`` with the summary text;
  ``ghost_snapshot``, ``compaction``, ``web_search_call`` … → ``other``.
* Tokens: ``token_usage_record`` lines (CLI ≥ 0.171: one per model response, with its
  ``response_id``) are the ``model_call`` events, once per response id; where a file has none,
  each ``event_msg`` ``token_count`` is one, with ``info.last_token_usage`` (the CLI 0.57–0.72
  repeat of a count — the same running total written again — is kept as ``other``,
  ``extra["duplicate"]``; a ``token_count`` after a usage record is ``other``,
  ``extra["superseded"]``). ``meta["total_token_usage"]`` is the last ``token_count``'s
  running total, as the file states it (a count not written before a kill is missing from
  it; the usage records are not).
* ``event_msg`` ``user_message`` / ``agent_message`` / ``agent_reasoning`` and the newer
  ``item_completed`` mirror response items for the UI: ``message``/``other`` events marked
  ``extra["mirror"]``; ``turn_aborted`` and the rest → ``other``; ``error``/``stream_error``
  → ``other`` with ``is_error``. ``turn_context``, ``world_state``, ``compacted`` → ``other``.
* Pending calls: a call still without output when its turn is aborted (``turn_aborted``) or
  when a new turn starts (``task_started``: a killed run resumed in the same file, whose
  interrupted call never gets its output written) is released there, ``extra["incomplete"]``
  (``extra["aborted"]`` / ``extra["abandoned"]``); what is still pending at the end of the
  file is released last, incomplete (a running unified-exec process: ``extra["running"]``).

Position: a call's event sits at its output's line, so a prefix of the trajectory never
holds a result before it arrived.

Logical step: a user prompt (a user ``message`` item that is not injected context such as
``<environment_context>``, or a ``user_message``) opens a new step when the agent has acted
since the previous prompt, so the step is the user turn. Its last event is known only at the
next prompt: the parser holds one event (see :mod:`features.readers.stream`).
``meta["n_user_turns"]`` counts the ``user_message`` events, or (CLI ≥ 0.148, which writes
none) the user prompt items.

Times: ``start`` is the line's timestamp (epoch seconds); a call's ``end`` is its output
line's timestamp and ``duration`` the logged one. Rollout timestamps are write times, so a
call and its output often share one; ``duration`` is the measured one.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

from features.patches import parse_apply_patch
from features.readers.code_cells import nested_calls
from features.readers.errors import warn_unknown
from features.readers.events import (
    apply_test_counts,
    classify_command,
    mark_tool_return,
    new_step_on_user_input,
)
from features.readers.fields import (
    INT_TEXT,
    Loc,
    Shape,
    float_field,
    get,
    int_field,
    need,
    parse_iso,
    repo_from_url,
)
from features.readers.stream import StreamParser, read_with
from features.readers.strict_json import load_embedded_json, loads_lenient
from features.schema import Event, EventKind, Trajectory
from features.shell import split_command

FORMAT = "codex-rollout"

LINE_TYPES = {"session_meta", "turn_context", "response_item", "event_msg", "compacted",
              "world_state", "token_usage_record"}
RESPONSE_TYPES = {"message", "reasoning", "function_call", "function_call_output",
                  "custom_tool_call", "custom_tool_call_output", "local_shell_call",
                  "web_search_call", "other", "ghost_snapshot", "compaction",
                  "compaction_summary", "image_generation_call", "tool_search_call",
                  "tool_search_output"}
EVENT_MSG_TYPES = {"token_count", "agent_reasoning", "agent_message", "user_message",
                   "turn_aborted", "error", "stream_error", "task_started", "task_complete",
                   "exec_command_begin", "exec_command_end", "patch_apply_begin",
                   "patch_apply_end", "agent_reasoning_raw_content", "entered_review_mode",
                   "exited_review_mode", "plan_update", "turn_diff", "background_event",
                   "mcp_tool_call_begin", "mcp_tool_call_end", "web_search_begin",
                   "web_search_end", "agent_reasoning_section_break", "get_history_entry_response",
                   "shutdown_complete", "conversation_path", "item_completed", "item_started",
                   "thread_settings_applied", "context_compacted", "thread_rolled_back",
                   "undo_started", "undo_completed", "warning", "view_image_tool_call",
                   "turn_started", "turn_complete", "exec_command_output_delta"}
SHELL_TOOLS = {"shell", "container.exec", "local_shell", "shell_command", "exec_command"}
_ARGUMENT_TOOLS = frozenset(SHELL_TOOLS | {"write_stdin", "wait", "apply_patch"})
_CALL_TYPES = frozenset({"function_call", "custom_tool_call", "local_shell_call"})
_OUTPUT_TYPES = frozenset({"function_call_output", "custom_tool_call_output"})
_TOKEN_KEYS = ("input_tokens", "cached_input_tokens", "output_tokens")
_UNREAD: Any = object()
_MIRRORS = {"user_message", "agent_message", "agent_reasoning", "agent_reasoning_raw_content"}
_AGENT_ACTS = {"function_call", "custom_tool_call", "local_shell_call", "reasoning",
               "token_count", "agent_message", "agent_reasoning", "web_search_call"}
# user-role items the CLI injects: context, not a prompt
_CONTEXT = ("<environment_context>", "<user_instructions>", "<turn_aborted>",
            "<user_shell_command>", "<subagent_notification>", "<skill>", "<INSTRUCTIONS>",
            "# AGENTS.md instructions")
_HEADER = re.compile(r"(?:Exit code: (?P<exit>-?\d+)|Process exited with code (?P<pexit>-?\d+)"
                     r"|Command: (?P<command>.*)"
                     r"|Process running with session ID (?P<session>\S+)"
                     r"|Wall time:? (?P<wall>[\d.]+) seconds|Script running with cell ID "
                     r"(?P<cell>\S+)|Script (?P<script>completed|failed|terminated)"
                     r"|Chunk ID: .*|Original token count: .*|Total output lines: .*)$")


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


def parse_output_header(text: str) -> dict[str, Any] | None:
    """The header of a plain-text tool output (``Exit code: 0``, ``Wall time: 0.1 seconds``,
    ``Process running with session ID 7``, ``Script completed`` …, up to ``Output:``) and
    the body after it; None when the text has no such header. Only the header is scanned."""
    out: dict[str, Any] = {}
    pos = 0
    for _ in range(8):
        nl = text.find("\n", pos)
        line = text[pos:] if nl < 0 else text[pos:nl]
        if line == "Output:":
            if len(out) - ("command" in out) < 1:  # a command line alone is no header
                return None
            out["body"] = "" if nl < 0 else text[nl + 1:]
            return out
        m = _HEADER.match(line)
        if m is None:
            break
        for k in ("exit", "pexit", "session", "wall", "cell", "script", "command"):
            if m.group(k) is not None:
                out[k] = m.group(k)
        pos = len(text) if nl < 0 else nl + 1
        if nl < 0:
            break
    if out and ("exit" in out or "pexit" in out or "session" in out or "script" in out):
        out["body"] = text[pos:] if pos < len(text) else ""
        return out
    return None


def _output_text(out: Any) -> str | None:
    """A tool output as text: a string, or the text items of a content-item list."""
    if isinstance(out, str):
        return out
    if isinstance(out, list):
        parts = [c["text"] for c in out if isinstance(c, dict) and isinstance(c.get("text"), str)]
        return "".join(parts) if parts else None
    if isinstance(out, dict) and isinstance(out.get("content"), str):
        return out["content"]
    return None


class CodexRolloutParser(StreamParser):
    """Streaming parser of a Codex session rollout (see the module docstring)."""

    FORMAT = FORMAT

    def __init__(self, *, source: str | Path = "<stream>", task_id: str | None = None,
                 repo: str | None = None) -> None:
        super().__init__(source=source, task_id=task_id, repo=repo)
        self._calls: dict[str, Event] = {}  # call_id -> call awaiting its output
        self._call_ids: set[str] = set()  # every call id seen (mirrors vs nested calls)
        self._sessions: dict[str, Event] = {}  # unified-exec session id -> running command
        self._cells: dict[str, Event] = {}  # code-mode cell id -> running exec cell
        self._state = {"step": 1, "agent_acted": False}
        self._cwd: str | None = None
        self._records = False  # token_usage_record lines seen: they are the model calls
        self._responses: set[str] = set()
        self._last_total: Any = None
        self._n_user_messages = 0
        self._n_prompt_items = 0
        self._ts_text: Any = None  # the last timestamp text parsed, and its epoch seconds
        self._ts = 0.0
        self._joined: dict[tuple[str, ...], str] = {}  # see _join
        # a command's verdicts: (command, argv, patch, kind) per string / per argv
        self._commands: dict[str, tuple[Any, ...]] = {}
        self._argvs: dict[tuple[str, ...], tuple[Any, ...]] = {}
        self._n_nested = 0  # nested calls the CLI logged itself (item_completed mirrors)
        self._cell_mirrors: dict[str, int] = {}  # exec cell call id -> _n_nested at its call

    def on_record(self, obj: dict[str, Any], lineno: int, arrival: float | None) -> None:
        loc = self._line_loc  # the parser's one Loc, its line moved (see line_loc)
        loc.line = lineno
        ltype = need(obj, "type", str, loc)
        raw = obj.get("timestamp")
        if raw.__class__ is str and raw == self._ts_text:  # lines of one write share a stamp
            ts = self._ts
        else:
            ts = parse_iso(raw, loc, "timestamp")
            self._ts_text, self._ts = raw, ts
        if ltype == "response_item" or ltype == "event_msg":  # the payload's type read with it
            payload, ptype = _TYPED_PAYLOAD.read(obj, loc)
            if payload is None:  # null or missing: read as an empty payload, its type missing
                payload = {}
                ptype = get(payload, "type", str, loc, "payload", required=True)
        else:
            payload = get(obj, "payload", (dict, type(None)), loc) or {}
        extra: dict[str, Any] = {"line": lineno, "line_type": ltype}
        if len(obj) > 3:
            rest = {k: v for k, v in obj.items() if k not in ("type", "timestamp", "payload")}
            if rest:
                extra["line_extra"] = rest
        if ltype == "response_item":
            self._response_item(payload, ptype, loc, ts, extra)
        elif ltype == "event_msg":
            self._event_msg(payload, ptype, loc, ts, extra)
        elif ltype == "session_meta":
            self._session_meta(payload)
        elif ltype == "token_usage_record":
            self._usage_record(payload, loc, ts, extra)
        else:
            if ltype == "turn_context" and isinstance(payload.get("cwd"), str):
                self._cwd = payload["cwd"]
            elif ltype not in LINE_TYPES:
                warn_unknown(self.source, f"line {lineno}", f"line type {ltype!r}")
            if ltype == "compacted" and isinstance(payload.get("replacement_history"), list):
                payload = {**payload, "replacement_history": len(payload["replacement_history"])}
            extra["payload"] = payload
            self.emit(Event(index=0, kind=EventKind.OTHER, step=self._state["step"], start=ts,
                            extra=extra))

    # -- line types ---------------------------------------------------------------------
    def _session_meta(self, payload: dict[str, Any]) -> None:
        meta = self.meta
        if "session" in meta:
            meta["n_session_meta"] = meta.get("n_session_meta", 1) + 1
            return
        meta["session"] = payload
        if isinstance(payload.get("cwd"), str):
            self._cwd = payload["cwd"]
        for k in ("forked_from_id", "cli_version"):
            if payload.get(k) is not None:
                meta[k] = payload[k]
        src = payload.get("source")
        if isinstance(src, dict) and "subagent" in src:
            meta["subagent"] = src["subagent"]
            parent = _find_key(src, "parent_thread_id")
            if parent is not None:
                meta["parent_thread_id"] = parent

    def _usage_record(self, payload: dict[str, Any], loc: Loc, ts: float,
                      extra: dict[str, Any]) -> None:
        self._records = True
        rid = payload.get("response_id")
        usage = get(payload, "usage", dict, loc, "payload", required=True)
        if isinstance(rid, str) and rid in self._responses:
            self.emit(Event(index=0, kind=EventKind.OTHER, step=self._state["step"], start=ts,
                            extra={**extra, "duplicate": True, "payload": payload}))
            return
        if isinstance(rid, str):
            self._responses.add(rid)
        self._state["agent_acted"] = True
        if isinstance(payload.get("thread_token_usage"), dict):
            self.meta["thread_token_usage"] = payload["thread_token_usage"]
        tokens = _TOKENS.read(usage, loc, "payload", "usage")
        for k, v in payload.items():
            extra[k] = v
        self.emit(Event(
            index=0, kind=EventKind.MODEL_CALL, step=self._state["step"], end=ts,
            input_tokens=tokens[0], cached_tokens=tokens[1], output_tokens=tokens[2],
            extra=extra))

    def _response_item(self, payload: dict[str, Any], ptype: str, loc: Loc, ts: float,
                       extra: dict[str, Any]) -> None:
        extra["payload_type"] = ptype
        text: Any = _UNREAD
        if ptype == "message" and payload.get("role") == "user":
            text = _content_text(payload.get("content"), loc, "content")
            if not (text or "").lstrip().startswith(_CONTEXT):
                self._prompt()
                self._n_prompt_items += 1
        elif ptype in _AGENT_ACTS:
            self._state["agent_acted"] = True
        step = self._state["step"]
        if ptype in _CALL_TYPES:
            ev = self._call_event(payload, ptype, loc, step, ts, extra)
            if ev.argv is not None or ev.command is not None:
                args = ev.extra.get("arguments")
                wd = args.get("workdir") if isinstance(args, dict) else None
                ev.extra["cwd"] = wd if isinstance(wd, str) else self._cwd
            cid = payload.get("call_id") or payload.get("id")
            if isinstance(cid, str):
                self._calls[cid] = ev
                self._call_ids.add(cid)
            else:
                ev.extra["incomplete"] = True  # an output could never find it
                self.emit(ev)
        elif ptype in _OUTPUT_TYPES:
            cid = get(payload, "call_id", str, loc, "payload", required=True)
            ev = self._calls.pop(cid, None)
            if ev is None:
                self.emit(Event(index=0, kind=EventKind.OTHER, step=step, start=ts,
                                extra={**extra, "orphan_output": True, **payload}))
                return
            self._output(ev, payload, loc, ts)
        elif ptype == "message" or ptype == "reasoning":
            if ptype == "message":
                if text is _UNREAD:
                    text = _content_text(payload.get("content"), loc, "content")
            else:
                summ = payload.get("summary")
                text = _content_text(summ, loc, "summary") if summ else None
            extra.update(payload)  # every key but "type" (extra holds no "type"
            del extra["type"]  # of its own, and payload always has one), in order
            self.emit(Event(index=0, kind=EventKind.MESSAGE, step=step, start=ts, text=text,
                            extra=extra))
        else:
            if ptype not in RESPONSE_TYPES:
                warn_unknown(self.source, f"line {extra['line']}",
                             f"response_item type {ptype!r}")
            extra.update(payload)  # every key but "type" (extra holds no "type"
            del extra["type"]  # of its own, and payload always has one), in order
            self.emit(Event(index=0, kind=EventKind.OTHER, step=step, start=ts, extra=extra))

    def _event_msg(self, payload: dict[str, Any], ptype: str, loc: Loc, ts: float,
                   extra: dict[str, Any]) -> None:
        extra["payload_type"] = ptype
        if ptype == "user_message":
            self._prompt()
            self._n_user_messages += 1
        elif ptype == "task_started":
            self._release_calls(abandoned=True)  # a new turn: the last one's calls are over
        elif ptype in _AGENT_ACTS:
            self._state["agent_acted"] = True
        step = self._state["step"]
        if ptype == "token_count":
            self._token_count(payload, loc, ts, extra)
            return
        if ptype == "item_completed" or ptype == "exec_command_end":
            if self._item(payload, ts, extra, ptype):
                return
        if ptype in _MIRRORS:
            text = payload.get("message", payload.get("text"))
            extra["mirror"] = True
            extra.update(payload)  # every key but "type" (extra holds no "type"
            del extra["type"]  # of its own, and payload always has one), in order
            self.emit(Event(index=0, kind=EventKind.MESSAGE, step=step, start=ts,
                            text=text if isinstance(text, str) else None, extra=extra))
            return
        if ptype not in EVENT_MSG_TYPES:
            warn_unknown(self.source, f"line {extra['line']}", f"event_msg type {ptype!r}")
        elif ptype == "item_completed":
            extra["mirror"] = True
        msg = payload.get("message")
        extra.update(payload)  # every key but "type" (extra holds no "type"
        del extra["type"]  # of its own, and payload always has one), in order
        self.emit(Event(index=0, kind=EventKind.OTHER, step=step, start=ts,
                        is_error=ptype in ("error", "stream_error"),
                        text=msg if isinstance(msg, str) else None, extra=extra))
        if ptype == "turn_aborted":
            self._release_calls(aborted=True)

    def _token_count(self, payload: dict[str, Any], loc: Loc, ts: float,
                     extra: dict[str, Any]) -> None:
        step = self._state["step"]
        info = get(payload, "info", (dict, type(None)), loc, "payload")
        if info is None:
            self.emit(Event(index=0, kind=EventKind.OTHER, step=step, start=ts,
                            extra={**extra, **payload}))
            return
        total = info.get("total_token_usage")
        self.meta["total_token_usage"] = total
        if self._records or (total is not None and total == self._last_total):
            mark = "superseded" if self._records else "duplicate"
            self.emit(Event(index=0, kind=EventKind.OTHER, step=step, start=ts,
                            extra={**extra, mark: True, **payload}))
            self._last_total = total
            return
        self._last_total = total
        last, *tokens = _LAST_TOKENS.read(info, loc, "payload", "info")
        extra["last_token_usage"] = last
        extra.update(info)  # its last_token_usage is `last`, already in place
        if len(payload) > 2:  # else its keys are "type" and "info" alone
            for k, v in payload.items():
                if k != "type" and k != "info":
                    extra[k] = v
        self.emit(Event(index=0, kind=EventKind.MODEL_CALL, step=step, end=ts,
                        input_tokens=tokens[0], cached_tokens=tokens[1],
                        output_tokens=tokens[2], extra=extra))

    def _item(self, payload: dict[str, Any], ts: float, extra: dict[str, Any],
              ptype: str) -> bool:
        """The CLI's own record of a command or patch: folded into the call it mirrors, or
        (a call no line of this file made: code mode's nested calls) its own event.
        True when it made an event itself."""
        item = payload.get("item") if ptype == "item_completed" else payload
        if not isinstance(item, dict):
            return False
        iid = item.get("id", item.get("call_id"))
        itype = item.get("type")
        dur = _duration(item.get("duration"))
        call = self._calls.get(iid) if isinstance(iid, str) else None
        if call is None and ptype == "exec_command_end" and isinstance(iid, str):
            self._session_ended(iid, item, dur, ts)
            return False
        if call is not None:
            if dur is not None:
                call.extra["item_duration"] = dur
            code = item.get("exit_code")
            if isinstance(code, int) and not isinstance(code, bool):
                call.extra["item_exit_code"] = code
            return False
        if ptype != "item_completed" or itype not in ("CommandExecution", "FileChange") \
                or not isinstance(iid, str) or iid in self._call_ids:
            return False
        self._n_nested += 1
        ev = Event(index=0, kind=EventKind.COMMAND, step=self._state["step"], end=ts,
                   duration=dur, extra={**extra, "nested_in": "exec", "item": item})
        if itype == "CommandExecution":
            cmd = item.get("command")
            argv = [str(x) for x in cmd] if isinstance(cmd, list) else (
                split_command(cmd) if isinstance(cmd, str) else None)
            ev.argv = argv
            ev.command = cmd if isinstance(cmd, str) else (shlex.join(argv) if argv else None)
            ev.kind = classify_command(ev.command, argv)
            code = item.get("exit_code")
            ev.exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
            out = item.get("aggregated_output")
            ev.extra["output"] = out
            cwd = item.get("cwd")
            ev.extra["cwd"] = cwd.removeprefix("file://") if isinstance(cwd, str) else self._cwd
            apply_test_counts(ev, out if isinstance(out, str) else None)
        else:
            ev.kind = EventKind.FILE_CHANGE
            changes = item.get("changes") if isinstance(item.get("changes"), dict) else {}
            ok = item.get("status") == "completed"
            ev.is_error = not ok
            written = [p for p, c in changes.items()
                       if not (isinstance(c, dict) and c.get("type") == "delete")]
            deleted = [p for p, c in changes.items()
                       if isinstance(c, dict) and c.get("type") == "delete"]
            ev.paths_written = written if ok else []
            if ok and deleted:
                ev.extra["paths_deleted"] = deleted
        self.emit(ev)
        return True

    # -- calls and outputs -----------------------------------------------------------------
    def _call_event(self, payload: dict[str, Any], ptype: str, loc: Loc, step: int,
                    ts: float, extra: dict[str, Any]) -> Event:
        """The event of a tool call (``extra``, the line's, becomes its ``extra``)."""
        name = payload.get("name")
        extra.update(payload)  # every key but "type" (extra holds no "type"
        del extra["type"]  # of its own, and payload always has one), in order
        ev = Event(index=0, kind=EventKind.OTHER, step=step, start=ts, extra=extra)
        argv: list[str] | None = None
        patch: str | None = None
        if ptype == "function_call" and name in _ARGUMENT_TOOLS:
            raw = get(payload, "arguments", str, loc, "payload", required=True)
            aloc = Loc(self.source, loc.line, "payload.arguments")  # one object, same wording
            try:
                args = load_embedded_json(raw, aloc)
            except json.JSONDecodeError as exc:
                raise aloc.error(f"not valid JSON ({exc.msg})") from exc
            if not isinstance(args, dict):
                raise aloc.error("expected a JSON object")
            extra["arguments"] = args
            if name == "write_stdin" or name == "wait":
                return ev  # a poll: its own `other` event, tied to its target by id
            if name == "apply_patch":
                patch = args.get("input") if isinstance(args.get("input"), str) else None
            else:
                cmd = args.get("command", args.get("cmd"))
                # the command string, patch and kind are functions of the command alone:
                # worked out once per distinct command (agents rerun the same ones)
                if isinstance(cmd, str):
                    known = self._commands.get(cmd)
                    if known is None:
                        argv = split_command(cmd)
                        known = self._commands[cmd] = (
                            cmd, None if argv is None else tuple(argv),
                            _patch_from_argv(argv) if argv else None,
                            classify_command(cmd, argv))
                elif isinstance(cmd, list) and _all_str(cmd):
                    key = tuple(cmd)
                    known = self._argvs.get(key)
                    if known is None:
                        joined = self._join(cmd)
                        known = self._argvs[key] = (
                            joined, key, _patch_from_argv(cmd) if cmd else None,
                            classify_command(joined, cmd))
                else:
                    raise (aloc / "command").error("expected array of strings or string")
                ev.command, words, patch, ev.kind = known
                ev.argv = None if words is None else list(words)  # a list of its own
        elif ptype == "local_shell_call":
            action = payload.get("action") or {}
            cmd = action.get("command") if isinstance(action, dict) else None
            if isinstance(cmd, list) and _all_str(cmd):
                ev.argv, ev.command = list(cmd), self._join(cmd)
                patch = _patch_from_argv(ev.argv)
                ev.kind = classify_command(ev.command, ev.argv)
        elif ptype == "custom_tool_call" and name == "apply_patch":
            patch = get(payload, "input", str, loc, "payload")
        elif ptype == "custom_tool_call" and name == "exec":
            extra["code"] = payload.get("input")
            cid = payload.get("call_id")
            if isinstance(cid, str):
                self._cell_mirrors[cid] = self._n_nested
        if patch is not None:
            parsed = parse_apply_patch(patch)
            if parsed is not None:
                ev.kind = EventKind.FILE_CHANGE
                extra["patch"] = parsed
        return ev

    def _join(self, argv: list[str]) -> str:
        """``shlex.join(argv)``, remembered per argv."""
        key = tuple(argv)
        joined = self._joined.get(key)
        if joined is None:
            joined = self._joined[key] = shlex.join(argv)
        return joined

    def _output(self, ev: Event, payload: dict[str, Any], loc: Loc, ts: float) -> None:
        out = payload.get("output")
        ev.end = ts
        ev.step = self._state["step"]  # placed where it returned
        ev.extra["output_line"] = loc.line
        if len(payload) > 3 or "output" not in payload:
            for k, v in payload.items():
                if k not in ("type", "output", "call_id"):
                    ev.extra[f"output_{k}"] = v
        name = ev.extra.get("name")
        envelope = None
        text = out if type(out) is str else _output_text(out)
        if isinstance(out, str) and out.startswith("{"):
            try:
                envelope = loads_lenient(out)
            except json.JSONDecodeError:
                envelope = None
        header = parse_output_header(text) if text is not None and envelope is None else None
        if isinstance(envelope, dict) and isinstance(envelope.get("metadata"), dict):
            md = envelope["metadata"]
            ev.exit_code = int_field(md.get("exit_code"), loc, "payload", "output", "metadata",
                                     "exit_code")
            ev.duration = float_field(md.get("duration_seconds"), loc, "payload", "output",
                                      "metadata", "duration_seconds")
            text = envelope.get("output")
            ev.extra["output"] = text
            ev.extra["output_metadata"] = md
        elif header is not None:
            text = header.pop("body")
            ev.extra["output"] = text
            ev.extra["output_header"] = header
            code = header.get("exit", header.get("pexit"))
            if code is not None:
                ev.exit_code = int(code)
            if "script" in header:
                ev.is_error = header["script"] != "completed"
        else:
            ev.extra["output"] = out if text is None else text
            ok_patch = ev.kind == EventKind.FILE_CHANGE and (text or "").startswith("Success.")
            # a bare string is the tool's own failure/rejection message for exec calls
            if ev.kind in (EventKind.COMMAND, EventKind.TEST, EventKind.FILE_CHANGE) \
                    and not ok_patch:
                ev.is_error = True
            if ok_patch:
                ev.extra["applied"] = True
        if ev.duration is None:
            wall = (header or {}).get("wall")
            dur = ev.extra.get("item_duration")
            ev.duration = dur if dur is not None else (
                float(wall) if wall is not None and "session" not in header
                and "cell" not in header else None)
        if ev.exit_code is None and not ev.is_error \
                and isinstance(ev.extra.get("item_exit_code"), int):
            ev.exit_code = ev.extra["item_exit_code"]
        if header is not None and "session" in header and name == "exec_command":
            ev.extra["session_id"] = header["session"]
            ev.extra["running"] = True
            self._sessions[header["session"]] = ev  # released when a poll sees it exit
            return
        if header is not None and "cell" in header and name == "exec":
            ev.extra["cell_id"] = header["cell"]
            self._cells[header["cell"]] = ev
            return
        if name in ("write_stdin", "wait"):
            ev.exit_code = None  # the process's or cell's, not the poll's: set on its target
            ev.is_error = False
            self.emit(ev)
            self._poll(ev, header, ts)
            return
        if name == "exec":
            self._cell_calls(ev, ts)
        self._applied(ev, text)
        self.emit(ev)

    def _applied(self, ev: Event, text: str | None) -> None:
        """A call's output is in: fill what follows from it and mark the tool's return."""
        if ev.kind == EventKind.FILE_CHANGE:
            patch = ev.extra.get("patch") or {}
            applied = (ev.exit_code == 0 or ev.extra.get("applied")) and not ev.is_error
            ev.paths_written = list(patch.get("written", [])) if applied else []
            if applied and patch.get("deleted"):
                ev.extra["paths_deleted"] = list(patch["deleted"])
            ev.bytes_written = patch.get("added_bytes") if applied else None
        if ev.kind is EventKind.TEST:
            apply_test_counts(ev, text if isinstance(text, str) else None)
        mark_tool_return(ev)

    def _poll(self, poll: Event, header: dict[str, Any] | None, ts: float) -> None:
        """A ``write_stdin``/``wait`` poll returned: release the command or cell it saw end."""
        args = poll.extra.get("arguments") if isinstance(poll.extra.get("arguments"), dict) \
            else {}
        if poll.extra.get("name") == "write_stdin":
            key = str(args.get("session_id"))
            target = self._sessions.get(key)
            done = header is not None and ("exit" in header or "pexit" in header)
            pool = self._sessions
        else:
            key = str(args.get("cell_id"))
            target = self._cells.get(key)
            done = header is not None and "script" in header
            pool = self._cells
        if target is None:
            poll.extra["target_unknown"] = True
            return
        body = poll.extra.get("output")
        if isinstance(body, str) and body:
            prev = target.extra.get("output") or ""
            target.extra["output"] = prev + body
        target.extra["polls"] = target.extra.get("polls", 0) + 1
        if not done:
            return
        del pool[key]
        assert header is not None
        target.end = ts
        target.extra["running"] = False
        target.extra["output_line"] = poll.extra["output_line"]
        code = header.get("exit", header.get("pexit"))
        if code is not None:
            target.exit_code = int(code)
        if "script" in header:
            target.is_error = header["script"] != "completed"
        if target.extra.get("item_duration") is not None:
            target.duration = target.extra["item_duration"]
        else:
            target.duration = None  # the first chunk's wall time was only the yield
        target.step = self._state["step"]
        if pool is self._cells:
            self._cell_calls(target, ts)
        self._applied(target, target.extra.get("output"))
        self.emit(target)

    def _session_ended(self, call_id: str, item: dict[str, Any], dur: float | None,
                       ts: float) -> None:
        """An ``exec_command_end`` for a command still running after its output (a
        unified-exec session no poll saw end): its exit code, duration and full output, and
        the command released here, where its end became known."""
        key = next((k for k, ev in self._sessions.items()
                    if ev.extra.get("call_id") == call_id), None)
        if key is None:
            return
        ev = self._sessions.pop(key)
        code = item.get("exit_code")
        if isinstance(code, int) and not isinstance(code, bool):
            ev.exit_code = code
        out = item.get("aggregated_output")
        if isinstance(out, str):
            ev.extra["output"] = out
        ev.duration = dur
        ev.end = ts
        ev.extra["running"] = False
        ev.extra["ended_by"] = "exec_command_end"
        ev.step = self._state["step"]
        self._applied(ev, ev.extra.get("output"))
        self.emit(ev)

    def _cell_calls(self, cell: Event, ts: float) -> None:
        """A code-mode cell ended: when the CLI logged none of its nested calls itself (0.144
        logs only the cell), an event for each call its code makes (:mod:`.code_cells`),
        released just before the cell. A command's exit code and output come from the
        unified-exec results the script printed, matched in order only when there are as
        many as there are commands; a patch wrote its files when the cell completed."""
        cid = cell.extra.get("call_id")
        code = cell.extra.get("code")
        before = self._cell_mirrors.pop(cid, None) if isinstance(cid, str) else None
        if before is None or before != self._n_nested or not isinstance(code, str):
            return
        calls = nested_calls(code)
        if not calls:
            return
        out = cell.extra.get("output")
        results = _exec_results(out) if isinstance(out, str) else []
        n_exec = sum(c.tool != "apply_patch" for c in calls)
        if len(results) != n_exec:
            results = []
        failed = cell.is_error
        step = self._state["step"]
        for call in calls:
            extra: dict[str, Any] = {"line": cell.extra.get("output_line"), "nested_in": "exec",
                                     "cell_call_id": cid, "source": call.source}
            if failed:
                extra["cell_failed"] = True
            ev = Event(index=0, kind=EventKind.COMMAND, step=step, end=ts, extra=extra)
            arg = call.argument
            if call.tool == "apply_patch":
                patch = arg if isinstance(arg, str) else (
                    arg.get("input") if isinstance(arg, dict) else None)
                parsed = parse_apply_patch(patch) if isinstance(patch, str) else None
                ev.kind = EventKind.FILE_CHANGE
                if parsed is not None:
                    extra["patch"] = parsed
                    if failed:  # it may or may not have run before the script failed
                        extra["attempted_paths"] = list(parsed["written"])
                    else:
                        ev.paths_written = list(parsed["written"])
                        ev.bytes_written = parsed["added_bytes"]
                        if parsed["deleted"]:
                            extra["paths_deleted"] = list(parsed["deleted"])
            else:
                key = "command" if call.tool == "shell_command" else "cmd"
                cmd = arg if isinstance(arg, str) else (
                    arg.get(key) if isinstance(arg, dict) else None)
                if isinstance(cmd, str):
                    ev.command = cmd
                    ev.argv = split_command(cmd)
                    ev.kind = classify_command(cmd, ev.argv)
                wd = arg.get("workdir") if isinstance(arg, dict) else None
                extra["cwd"] = wd if isinstance(wd, str) else self._cwd
                if results:
                    res = results.pop(0)
                    code_text = res.get("exit", res.get("pexit"))
                    ev.exit_code = int(code_text) if code_text is not None else None
                    extra["output"] = res["body"]
                    apply_test_counts(ev, res["body"])
            self.emit(ev)

    def _prompt(self) -> None:
        new_step_on_user_input(self._state)

    def _release_calls(self, **marks: Any) -> None:
        for ev in self._calls.values():
            ev.extra["incomplete"] = True
            ev.extra.update(marks)
            ev.step = self._state["step"]
            self.emit(ev)
        self._calls.clear()

    def on_end(self) -> None:
        self._release_calls()
        for pool in (self._sessions, self._cells):
            for ev in pool.values():
                ev.extra["incomplete"] = True
                ev.step = self._state["step"]
                self.emit(ev)
            pool.clear()

    def on_final(self) -> None:
        self.meta["n_user_turns"] = self._n_user_messages or self._n_prompt_items
        self.meta["n_turns_aborted"] = [
            e.extra.get("payload_type") for e in self.events].count("turn_aborted")

    def task_default(self) -> str:
        sid = (self.meta.get("session") or {}).get("id")
        return sid if isinstance(sid, str) else super().task_default()

    def repo_default(self) -> str | None:
        git = (self.meta.get("session") or {}).get("git")
        return repo_from_url(git.get("repository_url")) if isinstance(git, dict) else None


_RESULT_START = re.compile(r"^(?:Chunk ID: |Exit code: )", re.M)


def _exec_results(text: str) -> list[dict[str, Any]]:
    """The command results a code-mode cell printed, in order: each section of its output
    that begins with a unified-exec or shell result header (``Chunk ID: …`` / ``Exit code:
    …``), parsed by :func:`parse_output_header` (its ``body`` up to the next section)."""
    starts = [m.start() for m in _RESULT_START.finditer(text)]
    out: list[dict[str, Any]] = []
    if not starts:
        return out
    for a, b in zip(starts, [*starts[1:], len(text)], strict=True):
        header = parse_output_header(text[a:b])
        if header is not None:
            out.append(header)
    return out


def _find_key(obj: Any, key: str) -> Any:
    """The first value under ``key`` anywhere in a small nested dict (a session source)."""
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        for v in obj.values():
            found = _find_key(v, key)
            if found is not None:
                return found
    return None


def _duration(d: Any) -> float | None:
    """Seconds from the CLI's ``{"secs", "nanos"}`` duration (or a number)."""
    if isinstance(d, dict) and isinstance(d.get("secs"), int | float):
        return float(d["secs"]) + float(d.get("nanos") or 0) / 1e9
    if isinstance(d, int | float) and not isinstance(d, bool):
        return float(d)
    return None


# the input, cached and output counts of a usage object; a token_count's last usage and its
_TOKENS = Shape(*((k, INT_TEXT) for k in _TOKEN_KEYS))
# a response_item's or event_msg's payload (null or an object) and its type
_TYPED_PAYLOAD = Shape(("payload", (dict, type(None))), (("payload", "type"), str),
                       required=(("payload", "type"),))
_LAST_TOKENS = Shape(("last_token_usage", dict),
                     *((("last_token_usage", k), INT_TEXT) for k in _TOKEN_KEYS),
                     required=("last_token_usage",))


def _content_text(content: Any, loc: Loc, field: str) -> str | None:
    """The text of a message's ``content`` (or a reasoning ``summary``): a string, or the
    text parts of a list joined by newlines; errors name ``payload.<field>`` of the line."""
    if content is None:
        return None
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise (loc / "payload" / field).error("expected array or string")
    parts = []
    for j, c in enumerate(content):
        if isinstance(c, dict) and isinstance(c.get("text"), str):
            parts.append(c["text"])
        elif not isinstance(c, dict):
            raise (loc / "payload" / field / j).error("expected object")
    return "\n".join(parts) if parts else None


def _all_str(xs: list[Any]) -> bool:
    for x in xs:
        if not isinstance(x, str):
            return False
    return True


def read_codex_rollout(
    path: str | Path,
    *,
    task_id: str | None = None,
    repo: str | None = None,
    allow_truncated_tail: bool = False,
) -> Trajectory:
    """Read a Codex session rollout file into a :class:`Trajectory` (see module doc)."""
    parser = CodexRolloutParser(source=path, task_id=task_id, repo=repo)
    return read_with(parser, path, allow_truncated_tail=allow_truncated_tail)
