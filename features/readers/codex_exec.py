"""Reader for Codex CLI ``codex exec --json`` streams (JSONL on stdout).

Mapping (one :class:`~features.schema.Event` per thread item, lifecycle lines merged):

* ``turn.started`` opens logical step *k* (the k-th ``turn.started``); events before the
  first one belong to step 1.
* ``item.started`` / ``item.updated`` / ``item.completed`` of one item id become one event,
  placed where the item completed (when what it did is known: a prefix of the trajectory
  never holds an item's final state early; an item that never completes stays at its
  first line, marked ``extra["incomplete"]``); the last line seen wins for its fields and
  the step is the turn in which it completed.
  ``command_execution`` → ``command`` (or ``test``), ``file_change`` → ``file_change``
  (``paths_written`` from ``changes[].path`` as published; ``kind: delete`` paths go to
  ``extra["paths_deleted"]``), ``agent_message`` (and the
  early ``assistant_message``) and ``reasoning`` → ``message``, ``todo_list``,
  ``mcp_tool_call``, ``web_search``, ``plan`` … → ``other``; a command's
  ``aggregated_output`` is kept as ``extra["output"]``; ``error`` items → ``other``
  with ``is_error``. Both the ``type`` and the early ``item_type`` spellings are read.
* ``turn.completed`` → a ``model_call`` event carrying that turn's tokens. Its ``usage``
  is the thread's RUNNING TOTAL, so per-turn tokens are the deltas from the previous
  ``turn.completed`` of the same thread (the raw total stays in ``extra["usage_total"]``;
  a second ``thread.started`` in one file restarts the total).
* ``error`` lines (``Re-connecting... 1/5``) and ``turn.failed`` → ``other`` events with
  ``is_error=True``; they are non-fatal and kept in place.
* A completed command, file change, MCP call or web search is a safe boundary.
* ``exit_code`` is None when the item has none (still running, or omitted).

Timing: this format has no timestamps, so start/end/duration stay None — unless the
caller supplies arrival times, either as ``arrival_times`` (one float per non-blank line,
in file order) or by feeding the harness's stamped form where each line is wrapped as
``{"arrival": <epoch seconds float>, "line": {<original event>}}``. With arrival times an
item's ``start`` is the arrival of its first line and ``end`` the arrival of its last line
when it spans several lines; a single-line item only gets ``end`` (when it was observed).
``meta["turns"]`` lists each turn's start/end arrival and usage; ``meta["exit_status"]``
is ``completed`` (every turn completed), ``failed`` (a ``turn.failed``) or ``incomplete``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from features.readers.common import (
    JsonlLine,
    Loc,
    apply_test_counts,
    classify_command,
    finish,
    get,
    iter_jsonl,
    mark_tool_return,
    stem,
    to_float,
    to_int,
    utf8_len,
    warn_unknown,
)
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


def looks_like(first: dict[str, Any]) -> bool:
    """Whether a first JSONL object is a codex-exec line (bare or arrival-wrapped)."""
    if set(first) == {"arrival", "line"} and isinstance(first.get("line"), dict):
        first = first["line"]
    t = first.get("type")
    return isinstance(t, str) and (t in TOP_TYPES or t.startswith(("thread.", "turn.", "item.")))


def _unwrap(lines: list[JsonlLine], path: Path, arrival_times: Sequence[float] | None) -> None:
    wrapped = [ln for ln in lines if set(ln.obj) == {"arrival", "line"}]
    if wrapped and arrival_times is not None:
        raise ValueError(
            f"{path}: lines carry their own arrival times; do not also pass arrival_times"
        )
    if arrival_times is not None:
        if len(arrival_times) != len(lines):
            raise ValueError(
                f"{path}: arrival_times has {len(arrival_times)} entries but the file has "
                f"{len(lines)} non-blank lines"
            )
        for ln, t in zip(lines, arrival_times, strict=True):
            ln.arrival = to_float(t, Loc(path, ln.lineno, "arrival_times"))
        return
    for ln in wrapped:
        loc = Loc(path, ln.lineno)
        ln.arrival = to_float(ln.obj["arrival"], loc / "arrival")
        inner = ln.obj["line"]
        if not isinstance(inner, dict):
            raise (loc / "line").error("expected object")
        ln.obj = inner


def read_codex_exec(
    path: str | Path,
    *,
    task_id: str | None = None,
    repo: str | None = None,
    arrival_times: Sequence[float] | None = None,
    allow_truncated_tail: bool = False,
) -> Trajectory:
    """Read a ``codex exec --json`` stream into a :class:`Trajectory` (see module doc)."""
    path = Path(path)
    meta: dict[str, Any] = {}
    lines = list(iter_jsonl(path, allow_truncated_tail=allow_truncated_tail, meta=meta))
    _unwrap(lines, path, arrival_times)

    keyed: list[tuple[int, Event]] = []  # (line that fixes the position, event)
    open_items: dict[str, tuple[Event, int]] = {}
    turn = 0
    prev_total = {k: 0 for k in _USAGE_KEYS}
    turns: list[dict[str, Any]] = []
    spellings: set[str] = set()

    def step() -> int:
        return max(turn, 1)

    for ln in lines:
        loc = Loc(path, ln.lineno)
        obj = ln.obj
        t = get(obj, "type", str, loc, required=True)
        if t == "thread.started":
            tid = get(obj, "thread_id", str, loc)
            if "thread_id" in meta and tid != meta["thread_id"]:
                meta.setdefault("other_thread_ids", []).append(tid)
            else:
                meta["thread_id"] = tid
            meta["thread_started"] = obj
            prev_total = {k: 0 for k in _USAGE_KEYS}  # a new thread restarts its total
        elif t == "turn.started":
            turn += 1
            turns.append({"step": turn, "start": ln.arrival, "end": None, "usage": None,
                          "extra": {k: v for k, v in obj.items() if k != "type"}})
        elif t == "turn.completed":
            usage = get(obj, "usage", dict, loc, required=True)
            uloc = loc / "usage"
            # a count the usage does not report stays missing (None), never 0
            total = {k: v for k in _USAGE_KEYS
                     if (v := to_int(usage.get(k), uloc / k)) is not None}
            delta: dict[str, int | None] = {k: None for k in _USAGE_KEYS}
            delta.update({k: total[k] - prev_total[k] for k in total})
            if any(v is not None and v < 0 for v in delta.values()):
                raise uloc.error(
                    f"running token total decreased ({prev_total} -> {total}); "
                    "turn.completed.usage must be a running total"
                )
            prev_total = {**prev_total, **total}
            extra_usage = {k: v for k, v in usage.items() if k not in _USAGE_KEYS}
            keyed.append((ln.lineno, Event(
                index=0, kind=EventKind.MODEL_CALL, step=step(), end=ln.arrival,
                input_tokens=delta["input_tokens"], cached_tokens=delta["cached_input_tokens"],
                output_tokens=delta["output_tokens"],
                extra={"line": ln.lineno, "event_type": t, "usage_total": usage,
                       **({"usage_other": extra_usage} if extra_usage else {}),
                       **{k: v for k, v in obj.items() if k not in ("type", "usage")}},
            )))
            if turns:
                turns[-1].update(end=ln.arrival, usage=usage, completed=True)
        elif t in ("turn.failed", "error"):
            if t == "error":
                msg = get(obj, "message", str, loc)
            else:
                err = get(obj, "error", (dict, str), loc)
                msg = err.get("message") if isinstance(err, dict) else err
            keyed.append((ln.lineno, Event(
                index=0, kind=EventKind.OTHER, step=step(), end=ln.arrival, is_error=True,
                text=msg, extra={"line": ln.lineno, "event_type": t,
                                 **{k: v for k, v in obj.items() if k != "type"}},
            )))
            if t == "turn.failed" and turns:
                turns[-1].update(end=ln.arrival, failed=True)
        elif t in ("item.started", "item.updated", "item.completed"):
            item = get(obj, "item", dict, loc, required=True)
            iloc = loc / "item"
            if "type" in item:
                itype = get(item, "type", str, iloc)
                spellings.add("type")
            else:
                itype = get(item, "item_type", str, iloc, required=True)
                spellings.add("item_type")
            iid = get(item, "id", (str, int), iloc)
            key = str(iid) if iid is not None else f"line{ln.lineno}"
            if key in open_items:
                ev, first_line = open_items[key]
            else:
                ev, first_line = _new_item_event(itype, step(), ln, path), ln.lineno
                open_items[key] = (ev, first_line)
                if ln.arrival is not None and t != "item.completed":
                    ev.start = ln.arrival
            _update_item(ev, itype, item, iloc, t, ln)
            if t == "item.completed":
                del open_items[key]
                ev.step = step()
                keyed.append((ln.lineno, ev))
                if ev.start is not None or ln.arrival is not None:
                    ev.end = ln.arrival
                if itype in _TOOL_ITEMS:
                    mark_tool_return(ev)
        else:
            if t not in TOP_TYPES:
                warn_unknown(path, f"line {ln.lineno}", f"event type {t!r}")
            keyed.append((ln.lineno, Event(
                index=0, kind=EventKind.OTHER, step=step(), end=ln.arrival,
                extra={"line": ln.lineno, "event_type": t,
                       **{k: v for k, v in obj.items() if k != "type"}},
            )))

    for ev, first_line in open_items.values():
        ev.extra["incomplete"] = True
        keyed.append((first_line, ev))
    keyed.sort(key=lambda x: x[0])
    events = [ev for _, ev in keyed]
    if any(tr.get("failed") for tr in turns):
        status = "failed"
    elif turns and all(tr.get("completed") for tr in turns):
        status = "completed"
    else:
        status = "incomplete"
    meta.update(
        exit_status=status,
        turns=turns,
        n_turns=turn,
        item_type_spelling=sorted(spellings),
        usage_total=dict(prev_total),
        has_arrival_times=any(ln.arrival is not None for ln in lines),
    )
    tid = task_id or meta.get("thread_id") or stem(path)
    return finish(tid, repo or "unknown", FORMAT, events, meta)


def _new_item_event(itype: str, step: int, ln: JsonlLine, path: Path) -> Event:
    if itype == "command_execution":
        kind = EventKind.COMMAND
    elif itype == "file_change":
        kind = EventKind.FILE_CHANGE
    elif itype in ("agent_message", "assistant_message", "reasoning"):
        kind = EventKind.MESSAGE
    else:
        if itype not in ITEM_TYPES:
            warn_unknown(path, f"line {ln.lineno}", f"item type {itype!r}")
        kind = EventKind.OTHER
    return Event(index=0, kind=kind, step=step,
                 extra={"line": ln.lineno, "item_type": itype, "lifecycle": []})


def _update_item(ev: Event, itype: str, item: dict[str, Any], loc: Loc, lifecycle: str,
                 ln: JsonlLine) -> None:
    ev.extra["lifecycle"].append(lifecycle.split(".", 1)[1])
    ev.extra["last_line"] = ln.lineno
    skip = {"type", "item_type"}
    if itype == "command_execution":
        cmd = get(item, "command", str, loc)
        if cmd is not None and cmd != ev.command:
            ev.command = cmd
            ev.argv = split_command(cmd)
            ev.kind = classify_command(cmd, ev.argv)
        ev.exit_code = to_int(item.get("exit_code"), loc / "exit_code")
        out = get(item, "aggregated_output", str, loc)
        if out is not None:
            ev.extra["output"] = out
        status = get(item, "status", str, loc)
        ev.is_error = status == "declined"
        apply_test_counts(ev, out)
        skip |= {"command", "exit_code", "aggregated_output"}
    elif itype == "file_change":
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
    elif itype in ("agent_message", "assistant_message", "reasoning"):
        ev.text = get(item, "text", str, loc)
        skip.add("text")
    elif itype == "error":
        ev.is_error = True
        ev.text = get(item, "message", str, loc)
    elif itype == "mcp_tool_call":
        err = item.get("error")
        ev.is_error = bool(err) or item.get("status") == "failed"
    for k, v in item.items():
        if k not in skip:
            ev.extra[k] = v
