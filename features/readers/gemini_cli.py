"""Reader for Gemini CLI's headless ``--output-format stream-json`` (JSONL on stdout): the
streaming parser :class:`GeminiStreamParser` and :func:`read_gemini_stream`, which feeds it a
whole file. Schema: ``packages/core/src/output/types.ts`` of google-gemini/gemini-cli (since
0.10, October 2025); every line has ``type`` and an ISO ``timestamp``.

Mapping:

* ``init`` (``session_id``, ``model``) → ``meta``; the task id defaults to the session id.
* ``message`` with ``role: user`` → ``message`` (``extra["role"] = "user"``; a new step when
  the agent acted since the last prompt).
* The model's response of one turn of the CLI's loop — its ``message`` lines with ``role:
  assistant`` (``delta: true`` pieces, joined) and its ``tool_use`` lines — → one
  ``model_call`` (``text`` the joined pieces, ``end`` the time of its last line, ``start``
  None: the stream does not say when the request went out), released when the next line of
  another kind arrives. Requests the CLI repeated inside a turn (retries) are not visible.
  No per-call tokens: the stream has none.
* ``tool_use`` + its ``tool_result`` (by ``tool_id``) → one event, released where the result
  arrived, a safe boundary: ``run_shell_command`` → ``command``/``test`` (``command`` from
  ``parameters.command``, ``extra["cwd"]`` from ``dir_path``/``directory``); ``write_file``
  and ``replace`` → ``file_change`` (``paths_written``, ``bytes_written`` = the new text);
  ``read_file`` → ``other`` with ``paths_read``; every other tool → ``other``. ``start`` is
  the ``tool_use`` time, ``end`` the result's. ``status: error`` → ``is_error`` (the error in
  ``extra["error"]``). The result's ``output`` (what the CLI displays) is ``extra["output"]``.
  Exit codes: only where the display states one (``Command exited with code: N`` — the
  CLI's display when a failing command printed nothing — or ``Exit Code: N`` in debug
  mode); else None, even for a success (the stream does not say 0). A ``tool_use`` with no
  result is released at the end, ``extra["incomplete"]``.
* ``error`` (``severity``, ``message``) → ``other`` with ``is_error``.
* ``result`` → ``other`` ending the turn (``turn_end``), carrying the run's token counts
  from ``stats`` (``input_tokens`` = the prompt tokens, cached included; ``cached_tokens`` =
  ``cached``, absent before 0.21; ``output_tokens``): the stream gives them for the whole
  run only, so they sit on the line that gave them, not on a model call.
  ``stats`` and ``status`` go to ``meta`` too (``meta["exit_status"]``: the result's
  ``status``, or ``incomplete`` when the stream has none).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from features.readers.common import (
    Loc,
    apply_test_counts,
    classify_command,
    get,
    iso_field,
    mark_tool_return,
    new_step_on_user_input,
    plain_event,
    to_int,
    utf8_len,
    warn_unknown,
)
from features.readers.stream import StreamParser, read_with
from features.schema import Event, EventKind, Trajectory
from features.shell import split_command

FORMAT = "gemini-cli-stream"

TYPES = frozenset({"init", "message", "tool_use", "tool_result", "error", "result"})
SHELL_TOOLS = frozenset({"run_shell_command"})
WRITE_TOOLS = {"write_file": "content", "replace": "new_string"}
READ_TOOLS = frozenset({"read_file"})
_EXIT = re.compile(r"(?:^Command exited with code: |^Exit Code: )(-?\d+)\s*$", re.M)


def looks_like(first: dict[str, Any]) -> bool:
    """Whether a first JSONL object is a Gemini CLI stream-json line: an ``init`` with its
    session id and model (every stream starts with one), or another of its line types with
    its own keys (a stream cut at the top)."""
    t = first.get("type")
    if t not in TYPES or not isinstance(first.get("timestamp"), str) or "payload" in first:
        return False
    if t == "init":
        return "session_id" in first and "model" in first
    if t == "message":
        return first.get("role") in ("user", "assistant") and "content" in first
    if t in ("tool_use", "tool_result"):
        return "tool_id" in first
    if t == "result":
        return "status" in first and "subtype" not in first
    return "severity" in first


class GeminiStreamParser(StreamParser):
    """Streaming parser of Gemini CLI ``stream-json`` (see the module docstring)."""

    FORMAT = FORMAT

    def __init__(self, *, source: str | Path = "<stream>", task_id: str | None = None,
                 repo: str | None = None) -> None:
        super().__init__(source=source, task_id=task_id, repo=repo)
        self._state = {"step": 1, "agent_acted": False}
        self._response: Event | None = None
        self._text: list[str] = []
        self._tools: dict[str, Event] = {}
        self.meta.update(exit_status="incomplete", n_responses=0)

    def on_record(self, obj: dict[str, Any], lineno: int, arrival: float | None) -> None:
        loc = Loc(self.source, lineno)
        t = get(obj, "type", str, loc, required=True)
        ts = iso_field(obj, "timestamp", loc)
        if t == "message" and obj.get("role") == "assistant":
            self._assistant(obj, loc, ts)
            return
        if t == "tool_use":
            self._tool_use(obj, loc, ts)
            return
        self._close_response()
        if t == "tool_result":
            self._tool_result(obj, loc, ts)
        elif t == "message":
            self._user(obj, loc, ts)
        elif t == "init":
            self.meta["session_id"] = get(obj, "session_id", str, loc)
            self.meta["model"] = get(obj, "model", str, loc)
            self.meta.setdefault("init", obj)
        elif t == "error":
            msg = get(obj, "message", str, loc)
            extra = {"line": lineno, "event_type": t, "severity": get(obj, "severity", str, loc)}
            ev = plain_event(EventKind.OTHER, self._state["step"], extra, end=ts, text=msg)
            ev.is_error = True
            self.emit(ev, turn_end=False)
        elif t == "result":
            self._result(obj, loc, ts)
        else:
            warn_unknown(self.source, f"line {lineno}", f"event type {t!r}")
            extra = {"line": lineno, "event_type": t, **{k: v for k, v in obj.items()
                                                          if k != "type"}}
            self.emit(plain_event(EventKind.OTHER, self._state["step"], extra, end=ts),
                      turn_end=False)

    def _open_response(self, lineno: int) -> Event:
        ev = self._response
        if ev is None:
            ev = self._response = plain_event(EventKind.MODEL_CALL, self._state["step"],
                                              {"line": lineno, "tool_calls": 0})
            self._text = []
            self._state["agent_acted"] = True
            self.meta["n_responses"] += 1
        return ev

    def _assistant(self, obj: dict[str, Any], loc: Loc, ts: float | None) -> None:
        ev = self._open_response(loc.line or 0)
        content = get(obj, "content", str, loc, default="")
        self._text.append(content)
        ev.end = ts

    def _tool_use(self, obj: dict[str, Any], loc: Loc, ts: float | None) -> None:
        resp = self._open_response(loc.line or 0)
        resp.end = ts
        resp.extra["tool_calls"] += 1
        name = get(obj, "tool_name", str, loc, required=True)
        tid = get(obj, "tool_id", str, loc, required=True)
        params = get(obj, "parameters", dict, loc, default={}) or {}
        ploc = loc / "parameters"
        extra: dict[str, Any] = {"line": loc.line, "tool": name, "tool_id": tid,
                                 "parameters": params}
        ev = plain_event(EventKind.OTHER, self._state["step"], extra, start=ts)
        if name in SHELL_TOOLS:
            cmd = get(params, "command", str, ploc)
            if cmd is not None:
                ev.command, ev.argv = cmd, split_command(cmd)
                ev.kind = classify_command(cmd, ev.argv)
            else:
                ev.kind = EventKind.COMMAND
            cwd = params.get("dir_path", params.get("directory"))
            if isinstance(cwd, str):
                extra["cwd"] = cwd
        elif name in WRITE_TOOLS:
            ev.kind = EventKind.FILE_CHANGE
            p = get(params, "file_path", str, ploc)
            ev.paths_written = [p] if p else []
            ev.bytes_written = utf8_len(get(params, WRITE_TOOLS[name], str, ploc))
        elif name in READ_TOOLS:
            p = params.get("file_path", params.get("absolute_path"))
            if isinstance(p, str) and p:
                ev.paths_read = [p]
        if tid in self._tools:
            raise loc.error(f"tool_id {tid!r} used twice before its result")
        self._tools[tid] = ev

    def _tool_result(self, obj: dict[str, Any], loc: Loc, ts: float | None) -> None:
        tid = get(obj, "tool_id", str, loc, required=True)
        ev = self._tools.pop(tid, None)
        if ev is None:
            ev = plain_event(EventKind.OTHER, self._state["step"],
                             {"line": loc.line, "tool_id": tid, "orphan_result": True})
        ev.end = ts
        ev.extra["result_line"] = loc.line
        status = get(obj, "status", str, loc)
        ev.extra["status"] = status
        out = get(obj, "output", str, loc)
        if out is not None:
            ev.extra["output"] = out
        err = get(obj, "error", dict, loc)
        if status == "error" or err:
            ev.is_error = True
            if err:
                ev.extra["error"] = err
            if ev.kind is EventKind.FILE_CHANGE:
                ev.paths_written, ev.bytes_written = [], None
        if ev.kind is EventKind.COMMAND or ev.kind is EventKind.TEST:
            text = out if out is not None else (err or {}).get("message")
            if isinstance(text, str) and (m := _EXIT.search(text)) is not None:
                ev.exit_code = to_int(m.group(1), loc / "output")
            if ev.kind is EventKind.TEST:
                apply_test_counts(ev, out)
        mark_tool_return(ev)
        self.emit(ev, turn_end=False)

    def _user(self, obj: dict[str, Any], loc: Loc, ts: float | None) -> None:
        role = get(obj, "role", str, loc)
        text = get(obj, "content", str, loc, default="")
        if role != "user":
            raise (loc / "role").error(f"expected 'user' or 'assistant', got {role!r}")
        new_step_on_user_input(self._state)
        self.emit(plain_event(EventKind.MESSAGE, self._state["step"],
                              {"line": loc.line, "role": "user", "prompt": True}, end=ts,
                              text=text), turn_end=False)

    def _result(self, obj: dict[str, Any], loc: Loc, ts: float | None) -> None:
        for ev in list(self._tools.values()):
            self._release_incomplete(ev)
        self._tools.clear()
        status = get(obj, "status", str, loc)
        stats = get(obj, "stats", dict, loc)
        extra: dict[str, Any] = {"line": loc.line, "event_type": "result", "status": status}
        ev = plain_event(EventKind.OTHER, self._state["step"], extra, end=ts)
        if stats is not None:
            sl = loc / "stats"
            extra["stats"] = stats
            ev.input_tokens = to_int(stats.get("input_tokens"), sl / "input_tokens")
            ev.cached_tokens = to_int(stats.get("cached"), sl / "cached")
            ev.output_tokens = to_int(stats.get("output_tokens"), sl / "output_tokens")
            self.meta["stats"] = stats
        err = get(obj, "error", dict, loc)
        if err:
            extra["error"] = err
        ev.is_error = status == "error"
        self.meta["exit_status"] = status
        self.emit(ev, turn_end=True)

    def _close_response(self) -> None:
        ev = self._response
        if ev is not None:
            self._response = None
            ev.text = "".join(self._text) if self._text else None
            self.emit(ev, turn_end=False)

    def _release_incomplete(self, ev: Event) -> None:
        ev.extra["incomplete"] = True
        self.emit(ev, turn_end=False)

    def on_end(self) -> None:
        self._close_response()
        for ev in self._tools.values():
            self._release_incomplete(ev)
        self._tools.clear()

    def task_default(self) -> str:
        return self.meta.get("session_id") or super().task_default()


def read_gemini_stream(path: str | Path, *, task_id: str | None = None, repo: str | None = None,
                       allow_truncated_tail: bool = False) -> Trajectory:
    """Read a Gemini CLI ``stream-json`` log into a :class:`Trajectory` (see module doc)."""
    parser = GeminiStreamParser(source=path, task_id=task_id, repo=repo)
    return read_with(parser, path, allow_truncated_tail=allow_truncated_tail)
