"""Readers for Claude Code logs: the headless ``stream-json`` output
(``claude -p --output-format stream-json --verbose``) and the session file the CLI keeps
(``<config>/projects/<cwd slug>/<session id>.jsonl``). One streaming parser each
(:class:`ClaudeStreamParser`, :class:`ClaudeSessionParser`; see :mod:`features.readers.stream`)
and a file reader each (:func:`read_claude_stream`, :func:`read_claude_session`).

Both formats carry the same messages (Anthropic Messages API content blocks), mapped alike:

* One ``assistant`` line per content block; the blocks of one model response share
  ``message.id``. Each response is one ``model_call`` event (once per ``message.id``, never
  once per line: the lines repeat the response's usage). Tokens: ``input_tokens`` = the
  prompt's tokens (``input_tokens`` + ``cache_creation_input_tokens`` +
  ``cache_read_input_tokens``, as Codex counts cached tokens inside its input),
  ``cached_tokens`` = ``cache_read_input_tokens``. ``output_tokens``: in a session file, the
  response's last line's (whatever its ``stop_reason``: many CLI versions leave it null on
  every line); a response whose only line is the usage snapshot taken at its first block
  (``stop_reason`` null, output 1) leaves it None, the snapshot kept in ``extra["usage"]``.
  In ``stream-json`` (events released as they come) only a line whose ``stop_reason`` is
  set counts it.
  Synthetic responses (``model: "<synthetic>"``, e.g. "No response requested.") are no model
  call. ``text`` and ``thinking`` blocks → ``message`` events.
* A ``tool_use`` block and its ``tool_result`` (in a later ``user`` line, matched by id) are
  one event, released where the result arrived: ``Bash`` → ``command``/``test`` (exit code
  from an error result's ``Exit code N``; a result that is not an error is exit 0 unless it
  carries a ``returnCodeInterpretation``, ran in the background or was interrupted), ``Edit``,
  ``MultiEdit``, ``Write``, ``NotebookEdit`` → ``file_change`` (``paths_written`` = the file,
  ``bytes_written`` = the new text; nothing written when the result is an error), ``Read``,
  ``Grep``, ``Glob`` → ``other`` with ``paths_read`` (the file or the searched path),
  ``Task``/``Agent`` (a subagent; its summary from the result in ``extra["result"]``),
  ``TodoWrite`` and every other tool → ``other``. Every tool result is a safe boundary; a
  ``tool_use`` that never gets a result is released at the end of the stream (or when its
  branch is abandoned, below) marked ``extra["incomplete"]``. The result's text is
  ``extra["output"]``; the structured result (``toolUseResult``) is kept in ``extra["result"]``
  without the file contents it repeats.
* Logical steps: a user prompt (a ``user`` line with text, not a tool result, not
  ``isMeta``/``isCompactSummary``, not an interruption notice, not a subagent's) opens a new
  step when the agent acted since the previous one.
* A subagent's lines are kept as events marked ``extra["subagent"]`` (its ``agentId``, or
  the ``parent_tool_use_id`` of the ``Task`` call in stream-json).
* An anonymised log whose publisher put one placeholder (``[REDACTED]``, ``<placeholder>``
  ...) in place of message ids, tool ids or keys is **refused**, in one line naming the line
  and saying why: two keys under one placeholder are a duplicate key (the strict parse
  refuses every log with one, and says the key looks like a placeholder), and a placeholder
  message or tool id used again for another response or call would pair results with the
  wrong calls and count one model call for many. A partial read would give counts that
  look right and are not; the original log reads. A real id repeated (a line written twice)
  is read as before.

**stream-json** (:class:`ClaudeStreamParser`): ``system``/``init`` → ``meta["init"]``
(session id, cwd, model, tools, ``claude_code_version``); other ``system`` lines → ``other``.
``result`` → an ``other`` event ending the turn (``turn_end``): cost, duration, turns and
usage in ``extra`` and in ``meta["result"]``; only it is authoritative for output tokens
(``meta["usage"]``; ``totals["output_tokens"]`` is None when only some calls carry a final
usage, their sum in ``totals["output_tokens_partial"]``); a stream may end without one
(``meta["exit_status"]`` is then ``incomplete``). Assistant lines have no timestamps: with ``arrival_s`` every event time is an
arrival time, else tool results carry their line's ``timestamp`` as ``end``. Nothing is held.

**Session file** (:class:`ClaudeSessionParser`): lines form a tree through
``uuid``/``parentUuid`` (a ``compact_boundary`` restarts the chain with ``parentUuid`` null
and ``logicalParentUuid`` pointing back); bookkeeping lines (``queue-operation``,
``permission-mode``, ``mode``, ``last-prompt``, ``ai-title``, ``custom-title``, ``summary``,
``file-history-snapshot``) have no ``uuid`` and only feed ``meta``; ``progress`` lines are
dead-end leaves, counted in ``meta["n_progress"]``. ``attachment`` and ``system`` lines →
``other``. Times: each line's ``timestamp``; ``arrival_s`` is ignored.

*The trajectory* is the live chain: the ancestors of the file's last conversation line,
plus the tool results hung off them (parallel tool calls hang each ``tool_result`` off its
own ``tool_use`` line, so walking back from the last line alone misses them). Dead branches
(a killed run's unanswered call, a rewound conversation) are **kept** as events: what they
did may have changed the workspace (the killed ``touch started && sleep 30`` did create
``started``), so the provenance graph must see them. Which events lie off the live chain is
known only once the stream ends, and released events never change, so the verdict is in
``meta["dead_branch"]`` (``events``: their indices, ``n_events``, ``n_records``); a pending
``tool_use`` on a branch is released, incomplete and ``extra["abandoned"]``, as soon as a
later line forks off an earlier point. A killed-then-resumed session appended to the same
file keeps its id; ``meta["versions"]`` lists the CLI versions seen, in order. Subagents:
inline ``isSidechain`` lines (older versions) are read as they come; the newer separate files
(``<session id>/subagents/agent-<id>.jsonl`` or ``agent-<id>.jsonl`` beside the session) are
read, when ``read_claude_session`` finds them, right before the ``Task`` result that names
their ``agentId``. A compaction runs as an agent too (``agent-acompact-<id>.jsonl``, same
places, its own model call over the whole context): its file is read right before the
session's ``compact_boundary`` that follows its start (or at the end of the session), its
events marked ``extra["subagent"]``; a file whose ``sessionId`` is another session's is left
alone. A step's last event is only known at the next prompt, so the event before
each prompt is held one event (see :mod:`features.readers.stream`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from features.readers.errors import warn_unknown
from features.readers.events import (
    classify_command,
    mark_tool_return,
    new_step_on_user_input,
    utf8_len,
)
from features.readers.fields import INT_TEXT, Loc, Shape, get, need, parse_iso
from features.readers.files import strip_compression
from features.readers.stream import StreamParser, read_with
from features.readers.strict_json import jsonl_records, looks_like_placeholder
from features.readers.testcounts import parse_test_counts
from features.schema import BoundaryKind, Event, EventKind, Trajectory
from features.shell import split_command

STREAM_FORMAT = "claude-code-stream"
SESSION_FORMAT = "claude-code-session"

STREAM_TYPES = {"system", "assistant", "user", "result", "stream_event"}
SESSION_TYPES = {"user", "assistant", "system", "attachment", "progress"}
BOOKKEEPING = {"queue-operation", "permission-mode", "mode", "last-prompt", "ai-title",
               "custom-title", "summary", "file-history-snapshot", "tag", "agent-name"}
BLOCK_TYPES = {"text", "thinking", "redacted_thinking", "tool_use", "tool_result",
               "server_tool_use", "web_search_tool_result", "image", "document"}
FILE_TOOLS = {"Edit", "MultiEdit", "Write", "NotebookEdit"}
READ_TOOLS = {"Read", "Grep", "Glob"}
SUBAGENT_TOOLS = {"Task", "Agent"}
# structured-result keys that repeat file contents or output already kept elsewhere
_BULKY = {"originalFile", "file", "content", "stdout", "stderr", "structuredPatch",
          "oldString", "newString", "edits", "filenames"}
_EXIT = re.compile(r"^(?:Error: )?Exit code (-?\d+)")
_AGENT_ID = re.compile(r"\bagentId: (\w+)")
_MODEL_CALL, _MESSAGE, _OTHER = EventKind.MODEL_CALL, EventKind.MESSAGE, EventKind.OTHER
_FILE_CHANGE, _COMMAND, _TEST = EventKind.FILE_CHANGE, EventKind.COMMAND, EventKind.TEST
_CONVERSATION = frozenset(("user", "assistant", "system", "attachment"))  # moves the live leaf
_NO_TIME = object()
_NUMBER = (int, float)
_FROM_ISO = datetime.fromisoformat
_TOOL_RETURN, _TEST_RETURN = BoundaryKind.TOOL_RETURN, BoundaryKind.TEST


def looks_like_stream(first: dict[str, Any]) -> bool:
    """Whether a first JSONL object is a Claude Code ``stream-json`` line."""
    return first.get("type") in STREAM_TYPES and "session_id" in first


def looks_like_session(first: dict[str, Any]) -> bool:
    """Whether a first JSONL object is a Claude Code session-file line."""
    t = first.get("type")
    if not isinstance(t, str) or "payload" in first or "session_id" in first:
        return False
    return t in BOOKKEEPING or (t in SESSION_TYPES and ("sessionId" in first
                                                        or "parentUuid" in first))


def _text_of(content: Any) -> str | None:
    """The text of a message or tool-result content (a string or a list of blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b["text"] for b in content if isinstance(b, dict)
                 and isinstance(b.get("text"), str)]
        return "\n".join(parts) if parts else None
    return None


_PLACEHOLDER_HINT = ("ids replaced by a placeholder? responses and tool calls under one id "
                     "cannot be told apart (a result could not be paired with its call), so "
                     "the log is not read; read the original log")


class _ClaudeParser(StreamParser):
    """What both Claude Code formats share: content blocks, tools, model calls, steps."""

    FINAL_USAGE_WAIT = False  # hold a response's model call until its final usage arrives
    TURN_END: bool | None = None  # the turn_end of an event released now (None: held)

    def __init__(self, *, source: str | Path = "<stream>", task_id: str | None = None,
                 repo: str | None = None) -> None:
        super().__init__(source=source, task_id=task_id, repo=repo)
        self._pending: dict[str, Event] = {}  # tool_use id -> its event, awaiting the result
        self._calls_seen: set[str] = set()  # message ids with a model_call
        self._open_call: tuple[str, Event] | None = None  # a response awaiting final usage
        self._state = {"step": 1, "agent_acted": False}
        self._foreign_uuid = False  # a content block set an event's extra["uuid"]
        # message and tool_use ids -> their first line: one met again on another line is
        # refused when it reads as a placeholder ([REDACTED] ...; see _PLACEHOLDER_HINT)
        self._mids: dict[str, int] = {}
        self._last_mid: str | None = None  # the response whose lines are coming
        self._tool_ids: dict[str, int] = {}
        self.meta.update(n_model_calls=0, n_tool_calls=0, n_prompts=0)

    # -- assistant lines ----------------------------------------------------------------
    def _assistant(self, obj: dict[str, Any], loc: Loc, ts: float | None,
                   extra: dict[str, Any]) -> None:
        msg, mid = _MESSAGE_ID.read(obj, loc)
        if mid is not None and mid != self._last_mid:
            # every id's first line is kept (a dict entry: cheap); only an id met again on
            # another line is asked whether it is a placeholder (a real one never is met so)
            first = self._mids.setdefault(mid, loc.line)
            if first != loc.line and looks_like_placeholder(mid):
                raise loc.error(f"message id {mid!r} of an earlier response (line {first}) "
                                    f"again after other lines: {_PLACEHOLDER_HINT}")
            self._last_mid = mid
        synthetic = msg.get("model") == "<synthetic>"
        if self._open_call is not None:
            self._close_call(mid)
        if mid is not None and not synthetic and mid not in self._calls_seen:
            self._calls_seen.add(mid)
            self.meta["n_model_calls"] += 1
            self._model_call(mid, msg, loc, ts, extra)
        elif self._open_call is not None and self._open_call[0] == mid:
            if self._update_call(self._open_call[1], msg, loc):  # its final usage: release
                self._close_call(None)
        content = msg.get("content")
        if isinstance(content, list):
            blocks = content
        elif isinstance(content, str):
            blocks = [{"type": "text", "text": content}]
        else:
            raise (loc / "message" / "content").error("expected array or string")
        state = self._state
        state["agent_acted"] = True
        step = state["step"]
        turn_end = self.TURN_END
        emit = self.emit
        api_error = obj.get("isApiErrorMessage")
        last = len(blocks) - 1
        for j, b in enumerate(blocks):
            if not isinstance(b, dict):
                raise _block_loc(loc, j).error("expected object")
            btype = get(b, "type", str, loc, "message", "content", j, required=True)
            # the line's last block takes ``extra`` itself (nothing reads it after; its own
            # keys never clash with the line's), the others a copy: the same keys, in order
            if btype == "tool_use":
                ev, tid = _tool_event(b, loc, j, step, ts, extra if j == last else extra.copy(),
                                      mid)
                first = self._tool_ids.setdefault(tid, loc.line)  # as message ids above
                if first != loc.line and looks_like_placeholder(tid):
                    raise loc.error(f"tool_use id {tid!r} of an earlier call (line {first}) used "
                                    f"again: {_PLACEHOLDER_HINT}")
                self._pending[tid] = ev
                self.meta["n_tool_calls"] += 1
            elif btype == "text" or btype == "thinking" or btype == "redacted_thinking":
                text = b.get("text") if btype == "text" else b.get("thinking")
                bextra = extra if j == last else extra.copy()
                bextra["message_id"] = mid
                bextra["block"] = btype
                if synthetic:
                    bextra["synthetic"] = True
                if api_error:
                    bextra["api_error"] = True
                bextra["role"] = "assistant"
                emit(Event(index=0, kind=_MESSAGE, step=step, start=ts,
                           is_error=bool(api_error),
                           text=text if isinstance(text, str) else None, extra=bextra),
                     turn_end)
            else:
                if btype not in BLOCK_TYPES:
                    warn_unknown(self.source, str(loc / "message" / "content" / j),
                                 f"content block type {btype!r}")
                if "uuid" in b:
                    self._foreign_uuid = True
                emit(Event(index=0, kind=_OTHER, step=step, start=ts,
                           extra={**extra, "message_id": mid, "block": btype,
                                  **{k: v for k, v in b.items() if k != "type"}}),
                     turn_end)

    def _model_call(self, mid: str, msg: dict[str, Any], loc: Loc, ts: float | None,
                    extra: dict[str, Any]) -> None:
        usage, inp, cached, out, final = _usage(msg, loc)
        mextra = {**extra, "message_id": mid, "model": msg.get("model")}
        if usage:
            mextra["usage"] = usage
            mextra["usage_final"] = final
        ev = Event(index=0, kind=_MODEL_CALL, step=self._state["step"], end=ts,
                   input_tokens=inp, cached_tokens=cached, output_tokens=out, extra=mextra)
        if final or not self.FINAL_USAGE_WAIT:
            self.emit(ev, self.TURN_END)
        else:
            self._open_call = (mid, ev)

    @staticmethod
    def _update_call(ev: Event, msg: dict[str, Any], loc: Loc) -> bool:
        """Set a held model call's tokens from a later line of its response (``loc``: the
        line's): the last line's usage counts, its output tokens too whatever its
        ``stop_reason`` (many CLI versions leave it null on every line); True when the
        usage is final."""
        usage, inp, cached, out, final = _usage(msg, loc, later=True)
        if usage:
            if inp is not None:
                ev.input_tokens = inp
            ev.cached_tokens = cached
            ev.output_tokens = out
            ev.extra["usage"] = usage
            ev.extra["usage_final"] = final
        return final

    def _close_call(self, mid: str | None) -> None:
        """Release a held model call once a line of another response (or none) arrives."""
        if self._open_call is not None and self._open_call[0] != mid:
            ev = self._open_call[1]
            self._open_call = None
            self.emit(ev, self.TURN_END)

    # -- user lines -------------------------------------------------------------------
    def _user(self, obj: dict[str, Any], loc: Loc, ts: float | None, extra: dict[str, Any],
              subagent: bool, split: tuple[Any, list[Any], list[Any], int | None] | None = None
              ) -> None:
        """A user line; ``split``: its content split by :func:`_split_content` when the
        caller already walked it (the message then is an object)."""
        self._last_mid = None
        if split is None:
            msg = need(obj, "message", dict, loc)
            split = _split_content(msg.get("content"))
        content, results, texts, bad = split
        if results is not None:
            if bad is not None:
                raise _block_loc(loc, bad).error("expected object")
            if results:
                self._result_blocks(obj, ts, extra, results)
            if not texts:
                return
        elif isinstance(content, str):
            texts = [{"type": "text", "text": content}]
        elif content is None:
            return
        else:
            raise (loc / "message" / "content").error("expected array or string")
        text = _text_of(texts)
        prompt = (not subagent and not obj.get("isMeta") and not obj.get("isCompactSummary")
                  and not obj.get("isVisibleInTranscriptOnly") and text is not None
                  and not text.startswith("[Request interrupted"))
        if prompt:
            new_step_on_user_input(self._state)
            self.meta["n_prompts"] += 1
        for k in ("isMeta", "isCompactSummary"):
            if obj.get(k):
                extra[k] = True
        extra["role"] = "user"  # the line's last use of its extra: the event takes it
        extra["prompt"] = prompt
        self.emit(Event(index=0, kind=_MESSAGE, step=self._state["step"], start=ts, text=text,
                        extra=extra), self.TURN_END)

    def _result_blocks(self, obj: dict[str, Any], ts: float | None, extra: dict[str, Any],
                       results: list[dict[str, Any]]) -> None:
        """The ``tool_result`` blocks of a user line (the line's structured result goes with
        a lone one)."""
        self._last_mid = None
        result = obj.get("toolUseResult", obj.get("tool_use_result")) if len(
            results) == 1 else None
        for b in results:
            self._tool_result(b, ts, extra, result)

    def _tool_result(self, b: dict[str, Any], ts: float | None, extra: dict[str, Any],
                     result: Any) -> None:
        """A ``tool_result`` block merged into its call (with the line's structured
        ``result``), which is released; a result whose call this log does not hold is an
        event of its own."""
        tid = b.get("tool_use_id")
        ev = self._pending.pop(tid, None) if isinstance(tid, str) else None
        if ev is None:
            self.emit(Event(index=0, kind=EventKind.OTHER, step=self._state["step"], end=ts,
                            text=_text_of(b.get("content")),
                            extra={**extra, "orphan_result": True, "tool_use_id": tid}),
                      self.TURN_END)
            return
        x = ev.extra
        tool = x.get("tool")
        if tool in SUBAGENT_TOOLS:
            self._before_subagent_result(ev, b, result)
        content = b.get("content")
        text = content if type(content) is str else _text_of(content)
        err = bool(b.get("is_error"))
        ev.end = ts
        x["output"] = text
        x["result_line"] = extra["line"]
        if "uuid" in extra:
            x["result_uuid"] = extra["uuid"]
        res = result if isinstance(result, dict) else None
        if res is not None:
            x["result"] = {k: v for k, v in res.items() if k not in _BULKY}
            ms = res.get("durationMs", res.get("totalDurationMs"))
            if isinstance(ms, _NUMBER) and not isinstance(ms, bool):
                ev.duration = ms / 1000.0
        elif isinstance(result, str):
            x["result"] = result
        kind = ev.kind
        if tool == "Bash":
            if err and (m := _EXIT.match(text or "")) is not None:
                ev.exit_code = int(m.group(1))  # ran, exited non-zero: not an error
            elif err or (res is not None and res.get("interrupted")):
                ev.is_error = True
            elif res is not None and (res.get("returnCodeInterpretation")
                                      or res.get("backgroundTaskId")):
                x["background" if res.get("backgroundTaskId") else
                  "return_code_interpretation"] = (res.get("backgroundTaskId")
                                                   or res.get("returnCodeInterpretation"))
            else:
                ev.exit_code = 0
            if kind is _TEST:  # apply_test_counts; nothing to count for another command
                ev.tests_passed, ev.tests_failed = parse_test_counts(text)
        else:
            ev.is_error = err
            if err and kind is _FILE_CHANGE:
                x["paths_not_written"] = ev.paths_written
                ev.paths_written = []
                ev.bytes_written = None
        # a safe boundary (mark_tool_return): only a command's kind needs its commit check
        if kind is _COMMAND:
            mark_tool_return(ev)
        else:
            ev.safe_boundary = True
            ev.boundary_kind = _TEST_RETURN if kind is _TEST else _TOOL_RETURN
        ev.step = self._state["step"]
        self.emit(ev, self.TURN_END)

    def _before_subagent_result(self, ev: Event, block: dict[str, Any], result: Any) -> None:
        """Hook run before a subagent call's (``Task``/``Agent``) result is applied (the
        session parser loads the subagent's own file)."""

    def _release_pending(self, ids: list[str], **marks: Any) -> None:
        for tid in ids:
            ev = self._pending.pop(tid)
            ev.extra["incomplete"] = True
            ev.extra.update(marks)
            ev.step = self._state["step"]
            self.emit(ev, self.TURN_END)

    def on_end(self) -> None:
        self._close_call(None)
        self._release_pending(list(self._pending))


class ClaudeStreamParser(_ClaudeParser):
    """Streaming parser of Claude Code's ``stream-json`` output (see the module docstring)."""

    FORMAT = STREAM_FORMAT
    ARRIVAL_TIMES = True
    TURN_END = False  # only a result ends a turn, and says so on its own line

    def finish(self) -> Trajectory:
        """The trajectory; a sum of output tokens over some model calls only (the others
        carry a first-block snapshot) is not the run's: ``totals["output_tokens"]`` is then
        None and the known part is kept as ``totals["output_tokens_partial"]`` (the
        ``result`` line's ``meta["usage"]`` is the authoritative total)."""
        traj = super().finish()
        calls = [e for e in traj.events if e.kind is EventKind.MODEL_CALL]
        known = [e.output_tokens for e in calls if e.output_tokens is not None]
        if known and len(known) < len(calls):
            totals = traj.meta["totals"]
            totals["output_tokens"] = None
            totals["output_tokens_partial"] = {"sum": sum(known), "model_calls": len(calls),
                                               "with_output_tokens": len(known)}
        return traj

    def __init__(self, *, source: str | Path = "<stream>", task_id: str | None = None,
                 repo: str | None = None) -> None:
        super().__init__(source=source, task_id=task_id, repo=repo)
        self._results: list[dict[str, Any]] = []
        self.meta["n_stream_events"] = 0

    @property
    def session_id(self) -> str | None:
        """The session id (``claude --resume`` takes it), once a line named it."""
        return self.meta.get("session_id")

    def on_record(self, obj: dict[str, Any], lineno: int, arrival: float | None) -> None:
        loc = self._line_loc  # the parser's one Loc, its line moved (see line_loc)
        loc.line = lineno
        t = need(obj, "type", str, loc)
        meta = self.meta
        if t == "stream_event":  # partial-message deltas: the full lines follow
            meta["n_stream_events"] += 1
            return
        if "session_id" not in meta:  # the first line that names it wins
            sid = obj.get("session_id")
            if isinstance(sid, str):
                meta["session_id"] = sid
        if arrival is not None:
            ts = arrival
        else:
            raw = obj.get("timestamp")
            ts = parse_iso(raw, loc / "timestamp") if raw is not None else None
        extra: dict[str, Any] = {"line": lineno, "line_type": t}
        u = obj.get("uuid")
        if u is not None:
            extra["uuid"] = u
        sub = obj.get("parent_tool_use_id")
        if sub is not None:
            extra["parent_tool_use_id"] = sub
            extra["subagent"] = sub
        if t == "assistant":
            self._assistant(obj, loc, ts, extra)
        elif t == "user":
            msg = obj.get("message")
            split = _split_content(msg.get("content")) if type(msg) is dict else None
            if split is not None and split[1] and not split[2] and split[3] is None:
                self._result_blocks(obj, ts, extra, split[1])  # what _user does with results only
            else:
                self._user(obj, loc, ts, extra, sub is not None, split)
        elif t == "result":
            self._result(obj, loc, ts, extra)
        elif t == "system" and obj.get("subtype") == "init" and "init" not in self.meta:
            self.meta["init"] = {k: v for k, v in obj.items() if k != "type"}
            if isinstance(obj.get("cwd"), str):  # known from here on: a live follower's root
                self.meta["cwd"] = obj["cwd"]
        else:
            if t not in STREAM_TYPES:
                warn_unknown(self.source, f"line {lineno}", f"line type {t!r}")
            self.emit(Event(index=0, kind=EventKind.OTHER, step=self._state["step"], end=ts,
                            extra={**extra, **{k: v for k, v in obj.items() if k != "type"}}),
                      False)

    def _result(self, obj: dict[str, Any], loc: Loc, ts: float | None,
                extra: dict[str, Any]) -> None:
        self._close_call(None)
        # a call the turn left unanswered never gets its result now
        self._release_pending(list(self._pending))
        dur = get(obj, "duration_ms", (int, float, type(None)), loc)
        sub = get(obj, "subtype", str, loc)
        err = bool(get(obj, "is_error", (bool, type(None)), loc)) or sub not in (None, "success")
        summary = {k: v for k, v in obj.items() if k not in ("type", "result")}
        self._results.append(summary)
        text = obj.get("result")
        self.emit(Event(index=0, kind=EventKind.OTHER, step=self._state["step"], end=ts,
                        duration=None if dur is None else dur / 1000.0, is_error=err,
                        text=text if isinstance(text, str) else None,
                        extra={**extra, **summary}), True)
        self._state["step"] += 1
        self._state["agent_acted"] = False

    def on_end(self) -> None:
        super().on_end()
        res = self._results
        last = res[-1] if res else None
        init = self.meta.get("init") or {}
        self.meta.update(
            result=last, n_results=len(res),
            usage=last.get("usage") if last else None,
            cost_usd=sum(r.get("total_cost_usd") or 0 for r in res) if res else None,
            exit_status="incomplete" if last is None else (
                "completed" if last.get("subtype") == "success" and not last.get("is_error")
                else "failed"),
            version=init.get("claude_code_version"), cwd=init.get("cwd"),
        )

    def task_default(self) -> str:
        return self.meta.get("session_id") or super().task_default()


class ClaudeSessionParser(_ClaudeParser):
    """Streaming parser of a Claude Code session file (see the module docstring).

    ``subagent_file(agent_id)``: the path of a subagent's own file, or None; consulted when a
    ``Task`` result names an ``agentId`` whose lines this file does not hold. By default the
    files beside ``source`` when it is a session file on disk (:func:`subagent_files`);
    ``False``: none.
    """

    FORMAT = SESSION_FORMAT
    FINAL_USAGE_WAIT = True

    def __init__(self, *, source: str | Path = "<stream>", task_id: str | None = None,
                 repo: str | None = None,
                 subagent_file: Callable[[str], Path | None] | None | bool = None,
                 compaction_files: Callable[[], list[Path]] | None | bool = None) -> None:
        super().__init__(source=source, task_id=task_id, repo=repo)
        on_disk = self.source.is_file()
        if subagent_file is None and on_disk:
            subagent_file = subagent_files(self.source)
        self._subagent_file = subagent_file if callable(subagent_file) else None
        if compaction_files is None and on_disk:
            session = self.source
            compaction_files = lambda: compaction_agent_files(session)  # noqa: E731
        self._compaction_files = compaction_files if callable(compaction_files) else None
        # compaction agent files not read yet: (first time, agent id, path, records)
        self._compactions: list[tuple[float, str, Path, list[Any]]] | None = None
        self._side_agent: str | None = None  # the agent of a compaction file being fed
        self._parent: dict[str, str | None] = {}  # uuid -> parent (logical parent at a compaction)
        self._spine_child: dict[str, str] = {}  # uuid -> first child that is not a tool result
        self._sidechain: set[str] = set()
        self._tool_results: dict[str, str] = {}  # tool-result line uuid -> its parent
        self._last: str | None = None  # last main-chain conversation line
        self._agents: set[str] = set()
        self._versions: list[str] = []
        self._version: str | None = None  # the last of _versions
        self._ids_missing = True  # meta lacks session_id or cwd
        self._time_raw: Any = _NO_TIME  # the last timestamp string parsed, and its time
        self._time: float | None = None
        self.meta.update(n_progress=0, bookkeeping={})

    def on_record(self, obj: dict[str, Any], lineno: int, arrival: float | None = None,
                  file: str | None = None) -> None:
        """One line of the session file, or (``file``) of a subagent's own file; ``arrival``
        is ignored (every line has its own time)."""
        if file:
            loc = Loc(Path(file), lineno)
        else:  # the parser's one Loc, its line moved (see line_loc)
            loc = self._line_loc
            loc.line = lineno
        t = need(obj, "type", str, loc)
        meta = self.meta
        if t == "progress":
            meta["n_progress"] += 1
            return
        uuid = obj.get("uuid")
        if not isinstance(uuid, str):
            self._bookkeeping(t, obj, loc)
            return
        if self._ids_missing:  # the first line that names them wins
            if "session_id" not in meta:
                sid = obj.get("sessionId")
                if isinstance(sid, str):
                    meta["session_id"] = sid
            if "cwd" not in meta:
                cwd = obj.get("cwd")
                if isinstance(cwd, str):
                    meta["cwd"] = cwd
            self._ids_missing = "session_id" not in meta or "cwd" not in meta
        v = obj.get("version")
        if v != self._version and isinstance(v, str):  # _version: the last one listed
            self._versions.append(v)
            self._version = v
        parent = obj.get("parentUuid")
        if parent is None:
            parent = obj.get("logicalParentUuid")
        side = obj.get("isSidechain") or self._side_agent
        if side:
            agent = obj.get("agentId") or self._side_agent
            self._sidechain.add(uuid)
            if isinstance(agent, str):
                self._agents.add(agent)
        split = None
        if t == "user":  # its content walked once: the tool-result check and the reading
            msg = obj.get("message")
            if type(msg) is dict:
                split = _split_content(msg.get("content"))
        results_only = split is not None and split[1] and not split[2] and split[3] is None
        if isinstance(parent, str):
            self._parent[uuid] = parent
            if results_only:
                self._tool_results[uuid] = parent
            else:
                first = self._spine_child.setdefault(parent, uuid)
                if first != uuid:
                    self._abandon(first)
        else:
            self._parent[uuid] = None
        if not side and t in _CONVERSATION:
            self._last = uuid
        raw = obj.get("timestamp", _NO_TIME)
        if raw is _NO_TIME:
            ts = None
        elif raw == self._time_raw:  # the lines of one response share a time: parsed once
            ts = self._time
        else:  # parse_iso's usual case here, the field's Loc (and parse_iso) only for the rest
            dt = None
            if raw.__class__ is str:
                try:
                    dt = _FROM_ISO(raw)
                except ValueError:
                    pass
            ts = dt.timestamp() if dt is not None and dt.tzinfo is not None else parse_iso(
                raw, loc / "timestamp")
            self._time_raw, self._time = raw, ts
        extra: dict[str, Any] = {"line": lineno, "line_type": t, "uuid": uuid}
        if file:
            extra["file"] = file
        if side:
            extra["subagent"] = agent if isinstance(agent, str) else "sidechain"
        if t == "assistant":
            self._assistant(obj, loc, ts, extra)
        elif t == "user":
            if self._open_call is not None:
                self._close_call(None)
            if results_only:  # what _user does with a line of tool results only
                self._result_blocks(obj, ts, extra, split[1])  # type: ignore[index]
            else:
                self._user(obj, loc, ts, extra, bool(side), split)
        else:
            if self._open_call is not None:
                self._close_call(None)
            if (t == "system" and not side and not file
                    and obj.get("subtype") == "compact_boundary"):
                self._read_compactions(ts)  # the compaction's own call, before its boundary
            if t not in SESSION_TYPES:
                warn_unknown(self.source, f"line {lineno}", f"line type {t!r}")
            sub = obj.get("subtype")
            err = sub == "api_error" or obj.get("level") == "error"
            content = obj.get("content")
            self.emit(Event(index=0, kind=EventKind.OTHER, step=self._state["step"], start=ts,
                            is_error=err, text=content if isinstance(content, str) else None,
                            extra={**extra, **{k: v for k, v in obj.items() if k not in (
                                "type", "uuid", "parentUuid", "content", "sessionId",
                                "timestamp")}}), None)

    def _read_compactions(self, until: float | None) -> None:
        """Feed the compaction agent files of this session (see
        :func:`compaction_agent_files`) that began by ``until`` (None: all that are left),
        oldest first; a file of another session (its ``sessionId``) is left alone."""
        if self._compaction_files is None:
            return
        if self._compactions is None:
            self._compactions = []
            for path in self._compaction_files():
                records = list(jsonl_records(path))
                first = next((o for _, o in records if isinstance(o, dict)), {})
                sid = first.get("sessionId")
                mine = self.meta.get("session_id")
                if mine is not None and sid != mine:
                    continue
                ts = first.get("timestamp")
                at = parse_iso(ts, Loc(path, records[0][0], "timestamp")) if isinstance(
                    ts, str) else float("-inf")
                agent = path.name.removeprefix("agent-").split(".jsonl")[0]
                self._compactions.append((at, agent, path, records))
            self._compactions.sort(key=lambda c: c[0])
        while self._compactions and (until is None or self._compactions[0][0] <= until):
            _, agent, path, records = self._compactions.pop(0)
            self._agents.add(agent)
            self._side_agent = agent
            try:
                for lineno, obj in records:
                    self.on_record(obj, lineno, None, str(path))
            finally:
                self._side_agent = None

    def on_end(self) -> None:
        self._read_compactions(None)  # compactions no boundary of this file followed
        super().on_end()

    def _bookkeeping(self, t: str, obj: dict[str, Any], loc: Loc) -> None:
        book = self.meta["bookkeeping"]
        book[t] = book.get(t, 0) + 1
        if t not in BOOKKEEPING and book[t] == 1:
            warn_unknown(self.source, f"line {loc.line}", f"record type {t!r} without uuid")
        if t == "last-prompt" and isinstance(obj.get("leafUuid"), str):
            self.meta["leaf_uuid"] = obj["leafUuid"]
        elif t == "summary" and isinstance(obj.get("summary"), str):
            self.meta.setdefault("summaries", []).append(obj["summary"])
        elif t in ("ai-title", "custom-title"):
            title = obj.get("title", obj.get("aiTitle", obj.get("customTitle")))
            if isinstance(title, str):
                self.meta["title"] = title
        elif t in ("mode", "permission-mode"):
            self.meta[t.replace("-", "_")] = obj.get("mode", obj.get("permissionMode"))
        if isinstance(obj.get("sessionId"), str):
            self.meta.setdefault("session_id", obj["sessionId"])

    def _abandon(self, root: str) -> None:
        """A later line forked off an earlier point: the calls pending under ``root``'s
        branch will never get a result."""
        dead = [tid for tid, ev in self._pending.items()
                if self._descends(ev.extra.get("uuid"), root)]
        if dead:
            self._release_pending(dead, abandoned=True)

    def _descends(self, uuid: str | None, root: str) -> bool:
        seen = 0
        while uuid is not None and seen < 1_000_000:
            if uuid == root:
                return True
            uuid = self._parent.get(uuid)
            seen += 1
        return False

    def _before_subagent_result(self, ev: Event, block: dict[str, Any], result: Any) -> None:
        if self._subagent_file is None:
            return
        agent = result.get("agentId") if isinstance(result, dict) else None
        if not isinstance(agent, str):  # older CLIs name it in the result text only
            m = _AGENT_ID.search(_text_of(block.get("content")) or "")
            agent = m.group(1) if m else None
        if not isinstance(agent, str) or agent in self._agents:
            return
        path = self._subagent_file(agent)
        if path is None or not path.is_file():
            return
        self._agents.add(agent)
        for lineno, obj in jsonl_records(path):
            self.on_record(obj, lineno, None, str(path))

    def on_final(self) -> None:
        parent, side = self._parent, self._sidechain
        live: set[str] = set()
        add, up = live.add, parent.get
        u = self._last
        while u is not None and u not in live:
            add(u)
            u = up(u)
        live |= {r for r, p in self._tool_results.items() if p in live}
        n_dead_records = len(parent.keys() - live - side)  # every record has a uuid
        # an event's uuid is its line's (every line's uuid is a key of ``parent``), unless a
        # content block brought its own: with no dead record, no dead event then
        dead = [e.index for e in self.events if (u := e.extra.get("uuid")) is not None
                and u not in live and u not in side] if (
            n_dead_records or self._foreign_uuid) else []
        self.meta.update(
            versions=self._versions, version=self._versions[-1] if self._versions else None,
            dead_branch={"n_records": n_dead_records, "n_events": len(dead), "events": dead},
            live_leaf=self._last, subagents=sorted(self._agents),
            n_user_turns=self.meta["n_prompts"],
        )

    def task_default(self) -> str:
        return self.meta.get("session_id") or super().task_default()


def _split_content(content: Any) -> tuple[Any, list[Any] | None, list[Any], int | None]:
    """A user message's content, its ``tool_result`` blocks and its other blocks (None and
    [] when it is not a list), and the index of the first block that is not an object (None: all are). One walk
    serves the session's tool-result check and the line's reading; raises nothing (the
    reader raises where the line's other checks have run).
    """
    if type(content) is list and len(content) == 1 and type(content[0]) is dict:
        # the usual line, one block: what the walk below gives, without the walk
        if content[0].get("type") == "tool_result":
            return content, content, [], None
        return content, [], content, None
    if isinstance(content, list):
        results: list[Any] = []
        texts: list[Any] = []
        for j, b in enumerate(content):
            if not isinstance(b, dict):
                return content, results, texts, j
            if b.get("type") == "tool_result":
                results.append(b)
            else:
                texts.append(b)
        return content, results, texts, None
    return content, None, [], None


def _block_loc(loc: Loc, j: int) -> Loc:
    """Where content block ``j`` of a line (``loc``) sits: built only for an error."""
    return loc / "message" / "content" / j


# a tool_use block's name and input, read at once
_TOOL_USE = Shape(("name", str), ("input", (dict, type(None))), required=("name",))
# a response's message and its id; its usage (null or an object) and the usage's counts
_MESSAGE_ID = Shape(("message", dict), (("message", "id"), str), required=("message",))
_PROMPT_USAGE = Shape(("usage", (dict, type(None))),
                      *((("usage", k), INT_TEXT) for k in (
                          "input_tokens", "cache_creation_input_tokens",
                          "cache_read_input_tokens")))
_FINAL_USAGE = Shape(*_PROMPT_USAGE.fields, (("usage", "output_tokens"), INT_TEXT))


def _usage(msg: dict[str, Any], loc: Loc, later: bool = False
           ) -> tuple[dict[str, Any] | None, int | None, int | None, int | None, bool]:
    """A response's usage (None when it has none), its prompt, cached and output tokens (see
    the module docstring), and whether it is final (``stop_reason`` set). The output tokens
    of a response's first line count only when it is final (else they are the first block's
    snapshot); ``later``: a later line of the response, whose output tokens count whatever
    its ``stop_reason``. ``loc``: the line's."""
    final = msg.get("stop_reason") is not None
    if final or later:  # its output tokens count too
        usage, i, w, r, out = _FINAL_USAGE.read(msg, loc, "message")
    else:
        usage, i, w, r = _PROMPT_USAGE.read(msg, loc, "message")
        out = None
    if not usage:
        return None, None, None, None, final
    return usage, None if i is None else i + (w or 0) + (r or 0), r, out, final


def _tool_event(b: dict[str, Any], loc: Loc, j: int, step: int, ts: float | None,
                bextra: dict[str, Any], mid: str | None) -> tuple[Event, str]:
    """The event of a ``tool_use`` block (block ``j`` of the line ``loc``, of the response
    ``mid``) before its result, and the block's id. ``bextra``: the line's extra, which the
    event keeps (the block's keys are added to it)."""
    name, inp = _TOOL_USE.read(b, loc, "message", "content", j)
    inp = inp or {}
    tid = b.get("id")
    bextra["message_id"] = mid
    bextra["block"] = "tool_use"
    bextra["tool"] = name
    bextra["tool_use_id"] = tid
    bextra["input"] = inp
    if name == "Bash":
        cmd = get(inp, "command", str, loc, "message", "content", j, "input")
        if cmd is not None:
            argv = split_command(cmd)
            ev = Event(index=0, kind=classify_command(cmd, argv), step=step, start=ts,
                       command=cmd, argv=argv, extra=bextra)
        else:
            ev = Event(index=0, kind=_COMMAND, step=step, start=ts, extra=bextra)
    elif name in FILE_TOOLS:
        key = "notebook_path" if name == "NotebookEdit" else "file_path"
        p = get(inp, key, str, loc, "message", "content", j, "input")
        if name == "Write":
            n = utf8_len(get(inp, "content", str, loc, "message", "content", j, "input"))
        elif name == "Edit":
            n = utf8_len(get(inp, "new_string", str, loc, "message", "content", j, "input"))
        elif name == "NotebookEdit":
            n = utf8_len(get(inp, "new_source", str, loc, "message", "content", j, "input"))
        else:
            edits = get(inp, "edits", list, _block_loc(loc, j) / "input", default=[])
            n = sum(utf8_len(e.get("new_string")) or 0 for e in edits if isinstance(e, dict))
        ev = Event(index=0, kind=_FILE_CHANGE, step=step, start=ts,
                   paths_written=[p] if p else [], bytes_written=n, extra=bextra)
    elif name in READ_TOOLS:
        p = inp.get("file_path") if name == "Read" else inp.get("path")
        ev = Event(index=0, kind=_OTHER, step=step, start=ts,
                   paths_read=[p] if isinstance(p, str) and p else [], extra=bextra)
    else:
        ev = Event(index=0, kind=_OTHER, step=step, start=ts, extra=bextra)
    tid = get(b, "id", str, loc, "message", "content", j, required=True)
    return ev, tid


def read_claude_stream(path: str | Path, *, task_id: str | None = None, repo: str | None = None,
                       arrival_times: Sequence[float] | None = None,
                       allow_truncated_tail: bool = False) -> Trajectory:
    """Read a Claude Code ``stream-json`` file into a :class:`Trajectory` (see module doc)."""
    return read_with(ClaudeStreamParser(source=path, task_id=task_id, repo=repo), path,
                     allow_truncated_tail=allow_truncated_tail, arrival_times=arrival_times)


def subagent_files(session: Path) -> Callable[[str], Path | None]:
    """Where a session's subagents keep their own files: ``<session id>/subagents/agent-<id>
    .jsonl`` (newer CLIs) or ``agent-<id>.jsonl`` beside the session file (older); a
    compressed session (``.jsonl.gz``/``.zst``) keeps its uncompressed name's folder, and a
    subagent file may itself be compressed."""
    base = Path(strip_compression(session.name)).stem

    def find(agent_id: str) -> Path | None:
        for folder in (session.parent / base / "subagents", session.parent):
            for suffix in ("", ".gz", ".zst", ".zstd"):
                cand = folder / f"agent-{agent_id}.jsonl{suffix}"
                if cand.is_file() and cand != session:
                    return cand
        return None

    return find


def compaction_agent_files(session: Path) -> list[Path]:
    """The files of the compaction agents beside a session: ``agent-acompact-<id>.jsonl``
    in ``<session id>/subagents/`` (newer CLIs) or beside the session file (older), a
    compressed one too (each file's ``sessionId`` says whose it is)."""
    base = Path(strip_compression(session.name)).stem
    found = []
    for folder in (session.parent / base / "subagents", session.parent):
        if folder.is_dir():
            found += sorted(p for p in folder.glob("agent-acompact-*.jsonl*")
                            if p.is_file() and p != session
                            and strip_compression(p.name).endswith(".jsonl"))
    return found


def read_claude_session(path: str | Path, *, task_id: str | None = None, repo: str | None = None,
                        allow_truncated_tail: bool = False) -> Trajectory:
    """Read a Claude Code session file into a :class:`Trajectory` (see module doc); subagent
    files next to it are read where their ``Task`` result arrives."""
    path = Path(path)
    parser = ClaudeSessionParser(source=path, task_id=task_id, repo=repo)
    return read_with(parser, path, allow_truncated_tail=allow_truncated_tail)
