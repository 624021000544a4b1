"""Reader for Codex CLI ``codex exec --json`` streams (JSONL on stdout): the streaming parser
:class:`CodexExecParser` (a line in, final events out; see :mod:`features.readers.stream`) and
:func:`read_codex_exec`, which feeds it a whole file.

Mapping (one :class:`~features.schema.Event` per thread item, lifecycle lines merged):

* ``turn.started`` opens logical step *k* (the k-th ``turn.started``); lines before the first
  one, or between a finished turn and the next ``turn.started``, belong to the next step.
* ``item.started`` / ``item.updated`` / ``item.completed`` of one item id become one event,
  released where the item completed (when what it did is known: a prefix of the trajectory
  never holds an item's final state early); the last line seen wins for its fields and the
  step is the turn in which it completed. An item that never completes is released at the
  end of the stream, marked ``extra["incomplete"]`` (``extra["line"]`` keeps its first line).
  ``command_execution`` → ``command`` (or ``test``), ``file_change`` → ``file_change``
  (``paths_written`` from ``changes[].path`` as published; ``kind: delete`` paths go to
  ``extra["paths_deleted"]``), ``agent_message`` (and the
  early ``assistant_message``) and ``reasoning`` → ``message``, ``todo_list``,
  ``mcp_tool_call``, ``web_search``, ``plan`` … → ``other``; a command's
  ``aggregated_output`` is kept as ``extra["output"]``; ``error`` items → ``other``
  with ``is_error``. Both the ``type`` and the early ``item_type`` spellings are read.
* ``turn.completed`` → a ``model_call`` event carrying that turn's tokens, with ``turn_end``.
  Its ``usage`` is the thread's RUNNING TOTAL, so per-turn tokens are the deltas from the
  previous ``turn.completed`` of the same thread (the raw total stays in
  ``extra["usage_total"]``; a second ``thread.started`` of another thread restarts the
  total). A resumed or forked thread (``codex exec resume`` / ``fork``) reports the total
  of its whole history, earlier runs included: pass ``usage_base`` (the thread's total
  before this stream, e.g. the resumed rollout's ``meta["total_token_usage"]``), else the
  first turn is charged with the history too.
* ``error`` lines (``Re-connecting... 1/5``) and ``turn.failed`` → ``other`` events with
  ``is_error=True``; they are non-fatal and kept in place. ``turn.failed`` ends its turn.
* A completed command, file change, MCP call or web search is a safe boundary.
* ``exit_code`` is None when the item has none (still running, or omitted).
* Nothing is held: every event's ``turn_end`` is known on its own line (a turn cut by the
  end of the stream stays open).

Timing: this format has no timestamps, so start/end/duration stay None — unless the
caller supplies arrival times (``arrival_s`` per fed line; ``arrival_times``, one float per
non-blank line, for a file; or the harness's stamped form where each line is wrapped as
``{"arrival": <epoch seconds float>, "line": {<original event>}}``). With arrival times an
item's ``start`` is the arrival of its first line and ``end`` the arrival of its last line
when it spans several lines; a single-line item only gets ``end`` (when it was observed).
``meta["turns"]`` lists each turn's start/end arrival and usage; ``meta["exit_status"]``
is ``completed`` (every turn completed), ``failed`` (a ``turn.failed``) or ``incomplete``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from features.readers.errors import warn_unknown
from features.readers.events import apply_test_counts, classify_command, mark_tool_return, utf8_len
from features.readers.fields import INT_TEXT, Loc, Shape, get, need, to_int
from features.readers.stream import StreamParser, read_with
from features.schema import Event, EventKind, Trajectory
from features.shell import split_command

FORMAT = "codex-exec"

TOP_TYPES = {
    "thread.started", "turn.started", "turn.completed", "turn.failed", "error",
    "item.started", "item.updated", "item.completed", "item.plan.delta", "request_user_input",
}
ITEM_TYPES = {
    "agent_message", "assistant_message", "reasoning", "command_execution", "file_change",
    "mcp_tool_call", "web_search", "todo_list", "error", "plan", "collab_tool_call",
}
_TOOL_ITEMS = {"command_execution", "file_change", "mcp_tool_call", "web_search",
               "collab_tool_call"}
_USAGE_KEYS = ("input_tokens", "cached_input_tokens", "output_tokens")
_ITEM_LIFECYCLE = frozenset({"item.started", "item.updated", "item.completed"})
_MESSAGE_ITEMS = frozenset({"agent_message", "assistant_message", "reasoning"})
_ITEM_KINDS = {"command_execution": EventKind.COMMAND, "file_change": EventKind.FILE_CHANGE,
               **dict.fromkeys(_MESSAGE_ITEMS, EventKind.MESSAGE)}


def looks_like(first: dict[str, Any]) -> bool:
    """Whether a first JSONL object is a codex-exec line (bare or arrival-wrapped)."""
    if set(first) == {"arrival", "line"} and isinstance(first.get("line"), dict):
        first = first["line"]
    t = first.get("type")
    return isinstance(t, str) and (t in TOP_TYPES or t.startswith(("thread.", "turn.", "item.")))


class CodexExecParser(StreamParser):
    """Streaming parser of ``codex exec --json`` (see the module docstring for the mapping).

    ``usage_base``: the thread's running token total before this stream (``input_tokens``,
    ``cached_input_tokens``, ``output_tokens``), for a resumed or forked thread whose first
    ``turn.completed`` counts the history too; None takes the thread as fresh.
    """

    FORMAT = FORMAT
    ARRIVAL_TIMES = True

    def __init__(self, *, source: str | Path = "<stream>", task_id: str | None = None,
                 repo: str | None = None, usage_base: Mapping[str, Any] | None = None) -> None:
        super().__init__(source=source, task_id=task_id, repo=repo)
        self._open: dict[str, Event] = {}
        self._turn = 0
        self._in_turn = False
        base = _usage_counts(usage_base or {}, Loc(self.source, None, "usage_base"))
        self._base = {k: base.get(k, 0) for k in _USAGE_KEYS}
        self._prev_total = dict(self._base)
        self._turns: list[dict[str, Any]] = []
        self._spellings: set[str] = set()
        self._commands: dict[str, tuple[Any, ...]] = {}  # command -> (argv, kind)
        self.meta["usage_base"] = dict(usage_base) if usage_base is not None else None

    @property
    def thread_id(self) -> str | None:
        """The thread (session) id, once ``thread.started`` was seen: the resume id."""
        return self.meta.get("thread_id")

    def _step(self) -> int:
        # a turn's events are its step; lines between turns belong to the next one
        return self._turn if self._in_turn else self._turn + 1

    def on_record(self, obj: dict[str, Any], lineno: int, arrival: float | None) -> None:
        loc = self._line_loc  # the parser's one Loc, its line moved (see line_loc)
        loc.line = lineno
        t = need(obj, "type", str, loc)
        handler = _HANDLERS.get(t)  # one look-up per line, not a chain of comparisons
        if handler is not None:
            handler(self, t, obj, loc, arrival)
        else:
            self._other(t, obj, loc, arrival)

    def _turn_started(self, t: str, obj: dict[str, Any], loc: Loc,
                      arrival: float | None) -> None:
        self._turn += 1
        self._in_turn = True
        # the usual line is {"type": "turn.started"} alone: nothing else to keep
        rest = {} if len(obj) == 1 else {k: v for k, v in obj.items() if k != "type"}
        self._turns.append({"step": self._turn, "start": arrival, "end": None,
                            "usage": None, "extra": rest})

    def _thread_started(self, t: str, obj: dict[str, Any], loc: Loc,
                        arrival: float | None) -> None:
        meta = self.meta
        tid = get(obj, "thread_id", str, loc)
        if "thread_id" in meta and tid != meta["thread_id"]:
            meta.setdefault("other_thread_ids", []).append(tid)
            self._prev_total = {k: 0 for k in _USAGE_KEYS}  # a new thread restarts
        else:
            meta["thread_id"] = tid
        meta["thread_started"] = obj

    def _error_line(self, t: str, obj: dict[str, Any], loc: Loc,
                    arrival: float | None) -> None:
        """``turn.failed`` and ``error`` lines."""
        if t == "error":
            msg = get(obj, "message", str, loc)
        else:
            err = get(obj, "error", (dict, str), loc)
            msg = err.get("message") if isinstance(err, dict) else err
        step = self._turn if self._in_turn else self._turn + 1
        ends = t == "turn.failed"
        if ends:
            if self._turns:
                self._turns[-1].update(end=arrival, failed=True)
            self._in_turn = False
        extra = {"line": loc.line, "event_type": t}
        for k, v in obj.items():
            if k != "type":
                extra[k] = v
        self.emit(Event(index=0, kind=EventKind.OTHER, step=step, end=arrival,
                        is_error=True, text=msg, extra=extra), turn_end=ends)

    def _other(self, t: str, obj: dict[str, Any], loc: Loc, arrival: float | None) -> None:
        """Any other line type (``item.plan.delta`` …, an unknown one warned): ``other``."""
        if t not in TOP_TYPES:
            warn_unknown(self.source, f"line {loc.line}", f"event type {t!r}")
        extra = {"line": loc.line, "event_type": t}
        for k, v in obj.items():
            if k != "type":
                extra[k] = v
        self.emit(Event(index=0, kind=EventKind.OTHER,
                        step=self._turn if self._in_turn else self._turn + 1,
                        end=arrival, extra=extra), turn_end=False)

    def _turn_completed(self, t: str, obj: dict[str, Any], loc: Loc,
                        arrival: float | None) -> None:
        usage, ti, tc, to = _USAGE.read(obj, loc)
        prev = self._prev_total
        pi, pc, po = prev["input_tokens"], prev["cached_input_tokens"], prev["output_tokens"]
        if (ti is not None and tc is not None and to is not None
                and ti >= pi and tc >= pc and to >= po):  # the usual line: all three, none down
            d_in, d_cached, d_out = ti - pi, tc - pc, to - po
            n_total = 3
            self._prev_total = {"input_tokens": ti, "cached_input_tokens": tc,
                                "output_tokens": to}
        else:
            delta = self._usage_delta((ti, tc, to), loc)
            d_in, d_cached, d_out = (delta["input_tokens"], delta["cached_input_tokens"],
                                     delta["output_tokens"])
            n_total = 3 - (d_in is None) - (d_cached is None) - (d_out is None)
        extra: dict[str, Any] = {"line": loc.line, "event_type": "turn.completed",
                                 "usage_total": usage}
        if len(usage) > n_total:  # else every key is one of _USAGE_KEYS
            extra_usage = {k: v for k, v in usage.items() if k not in _USAGE_KEYS}
            if extra_usage:
                extra["usage_other"] = extra_usage
        if len(obj) > 2:  # else its keys are "type" and "usage" alone
            for k, v in obj.items():
                if k != "type" and k != "usage":
                    extra[k] = v
        if self._in_turn:
            step = self._turn
            self._in_turn = False
        else:
            step = self._turn + 1
        if self._turns:
            last = self._turns[-1]
            last["end"], last["usage"], last["completed"] = arrival, usage, True
        self.emit(Event(index=0, kind=EventKind.MODEL_CALL, step=step, end=arrival,
                        input_tokens=d_in, cached_tokens=d_cached, output_tokens=d_out,
                        extra=extra), turn_end=True)

    def _usage_delta(self, counts: tuple[int | None, ...], loc: Loc
                     ) -> dict[str, int | None]:
        """The per-turn counts of a ``turn.completed`` usage's checked ``counts`` (None for a
        key not reported), and the running total moved on (the general path)."""
        prev = self._prev_total
        delta: dict[str, int | None] = dict.fromkeys(_USAGE_KEYS)
        moved = dict(prev)
        for k, v in zip(_USAGE_KEYS, counts, strict=True):
            if v is None:
                continue  # a count not reported: None, never 0
            d = v - prev[k]
            if d < 0:
                total = {k: v for k, v in zip(_USAGE_KEYS, counts, strict=True)
                         if v is not None}
                raise (loc / "usage").error(
                    f"running token total decreased ({prev} -> {total}); "
                    "turn.completed.usage must be a running total")
            delta[k] = d
            moved[k] = v
        self._prev_total = moved
        return delta

    def _item(self, t: str, obj: dict[str, Any], loc: Loc, arrival: float | None) -> None:
        lineno = loc.line
        item = need(obj, "item", dict, loc)
        if "type" in item:
            # the record's shape by its kind: a command item's fields are read at once
            if item["type"] == "command_execution":
                itype, iid, cmd, code, out, status = _COMMAND_ITEM.read(item, loc, "item")
            else:
                itype, iid = _ITEM.read(item, loc, "item")
            self._spellings.add("type")
        else:
            itype = get(item, "item_type", str, loc, "item", required=True)
            iid = get(item, "id", (str, int), loc, "item")
            self._spellings.add("item_type")
        key = iid if iid.__class__ is str else str(iid) if iid is not None else f"line{lineno}"
        step = self._turn if self._in_turn else self._turn + 1
        done = t == "item.completed"
        ev = self._open.get(key)
        opened = ev is not None  # an earlier line opened it
        if ev is None:
            kind = _ITEM_KINDS.get(itype)
            if kind is None:
                if itype not in ITEM_TYPES:
                    warn_unknown(self.source, f"line {lineno}", f"item type {itype!r}")
                kind = EventKind.OTHER
            # the lifecycle word and last line in at once: what the first fold adds
            extra = {"line": lineno, "item_type": itype, "lifecycle": [_PHASES[t]],
                     "last_line": lineno}
            ev = Event(index=0, kind=kind, step=step, extra=extra)
            if not done:
                self._open[key] = ev
                if arrival is not None:
                    ev.start = arrival
        else:
            extra = ev.extra
            extra["lifecycle"].append(_PHASES[t])
            extra["last_line"] = lineno
        # fold this line into the event (the last line wins)
        if itype == "command_execution":
            if "type" not in item:  # the early item_type spelling: read now
                cmd, code, out, status = _COMMAND.read(item, loc, "item")
            if cmd is not None and cmd != ev.command:
                ev.command = cmd
                # argv and kind are functions of the command alone: worked out once per
                # distinct command (agents rerun the same ones); each event gets its own list
                known = self._commands.get(cmd)
                if known is None:
                    argv = split_command(cmd)
                    known = self._commands[cmd] = (
                        None if argv is None else tuple(argv), classify_command(cmd, argv))
                words, ev.kind = known
                ev.argv = None if words is None else list(words)
            ev.exit_code = code
            if out is not None:
                extra["output"] = out
            ev.is_error = status == "declined"
            if ev.kind is EventKind.TEST:
                if out:
                    apply_test_counts(ev, out)
                else:  # no output (a started line): no counts, as apply_test_counts finds
                    ev.tests_passed = ev.tests_failed = None
            skip = _SKIP_COMMAND
        elif itype in _MESSAGE_ITEMS:
            ev.text = get(item, "text", str, loc, "item")
            skip = _SKIP_MESSAGE
        else:
            _update_other(ev, itype, item, loc / "item")
            skip = _SKIP_TYPE
        for k, v in item.items():
            if k not in skip:
                extra[k] = v
        if done:
            if opened:
                del self._open[key]
            ev.step = step
            if ev.start is not None or arrival is not None:
                ev.end = arrival
            if itype in _TOOL_ITEMS:
                mark_tool_return(ev)
            self.emit(ev, turn_end=False)

    def on_end(self) -> None:
        for ev in self._open.values():  # started, never completed: what is known of them
            ev.extra["incomplete"] = True
            ev.step = self._step()
            self.emit(ev, turn_end=False)
        self._open.clear()
        turns = self._turns
        failed, completed = False, bool(turns)  # any turn failed / every turn completed
        for tr in turns:
            if tr.get("failed"):
                failed = True
                break
            if completed and not tr.get("completed"):
                completed = False
        status = "failed" if failed else "completed" if completed else "incomplete"
        self.meta.update(
            exit_status=status,
            turns=turns,
            n_turns=self._turn,
            item_type_spelling=sorted(self._spellings),
            usage_total=dict(self._prev_total),
        )

    def task_default(self) -> str:
        return self.meta.get("thread_id") or super().task_default()


def _usage_counts(usage: Mapping[str, Any], loc: Loc) -> dict[str, int]:
    """The usage keys a ``usage`` object reports (as ints), missing ones left out."""
    return {k: v for k in _USAGE_KEYS if (v := to_int(usage.get(k), loc / k)) is not None}


def read_codex_exec(
    path: str | Path,
    *,
    task_id: str | None = None,
    repo: str | None = None,
    arrival_times: Sequence[float] | None = None,
    allow_truncated_tail: bool = False,
    usage_base: Mapping[str, Any] | None = None,
) -> Trajectory:
    """Read a ``codex exec --json`` stream into a :class:`Trajectory` (see module doc)."""
    parser = CodexExecParser(source=path, task_id=task_id, repo=repo, usage_base=usage_base)
    return read_with(parser, path, allow_truncated_tail=allow_truncated_tail,
                     arrival_times=arrival_times)


# the typed fields of a turn's usage, of an item (its type and id), and of a command item
_USAGE = Shape(("usage", dict), *((("usage", k), INT_TEXT) for k in _USAGE_KEYS),
               required=("usage",))
_ITEM = Shape(("type", str), ("id", (str, int)))
_COMMAND_FIELDS = (("command", str), ("exit_code", INT_TEXT), ("aggregated_output", str),
                   ("status", str))
_COMMAND = Shape(*_COMMAND_FIELDS)
_COMMAND_ITEM = Shape(*_ITEM.fields, *_COMMAND_FIELDS)  # a command item's, all at once
_SKIP_TYPE = frozenset({"type", "item_type"})
# the item keys an event holds in its own fields, not again in extra
_SKIP_COMMAND = _SKIP_TYPE | {"command", "exit_code", "aggregated_output"}
_SKIP_MESSAGE = _SKIP_TYPE | {"text"}
_PHASES = {"item.started": "started", "item.updated": "updated", "item.completed": "completed"}


# the handler of each line type (the rest: CodexExecParser._other); a file's lines reach
# them straight from StreamParser.feed_records, a streamed line through on_record
_HANDLERS = {
    "item.started": CodexExecParser._item, "item.updated": CodexExecParser._item,
    "item.completed": CodexExecParser._item, "turn.completed": CodexExecParser._turn_completed,
    "turn.started": CodexExecParser._turn_started,
    "thread.started": CodexExecParser._thread_started,
    "turn.failed": CodexExecParser._error_line, "error": CodexExecParser._error_line,
}
CodexExecParser.DISPATCH = _HANDLERS


def _update_other(ev: Event, itype: str, item: dict[str, Any], loc: Loc) -> None:
    """Fold one lifecycle line of an item that is neither a command nor a message."""
    if itype == "file_change":
        _file_change(ev, item, loc)
    elif itype == "error":
        ev.is_error = True
        ev.text = get(item, "message", str, loc)
    elif itype == "mcp_tool_call":
        err = item.get("error")
        ev.is_error = bool(err) or item.get("status") == "failed"


def _file_change(ev: Event, item: dict[str, Any], loc: Loc) -> None:
    changes = get(item, "changes", list, loc, default=[])
    paths, deleted = [], []
    for j, ch in enumerate(changes):
        if not isinstance(ch, dict):
            raise (loc / "changes" / j).error("expected object")
        p = get(ch, "path", str, loc / "changes" / j, required=True)
        kind = get(ch, "kind", (str, dict), loc / "changes" / j)
        kname = kind.get("type") if isinstance(kind, dict) else kind
        (deleted if kname == "delete" else paths).append(p)
    status = get(item, "status", str, loc)
    ev.is_error = status in ("failed", "declined")
    ev.paths_written = [] if ev.is_error else paths
    if deleted and not ev.is_error:
        ev.extra["paths_deleted"] = deleted
    diff = get(item, "diff", str, loc)
    if diff is not None:
        ev.bytes_written = sum(
            utf8_len(x[1:]) + 1 for x in diff.splitlines()
            if x.startswith("+") and not x.startswith("+++")
        )
