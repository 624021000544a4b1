"""Reader for OpenHands (V0) event streams: a JSON list of serialised events, or an
evaluation record (``output.jsonl`` line saved as JSON) holding them under ``history``.
V1 conversations (software-agent-sdk: events with a ``kind``, string ids) are another
format, ``openhands-v1`` (:mod:`.openhands_v1`).

Mapping:

* Each *action* becomes one event, placed where its observation arrived (a prefix never
  holds a result early); the observation whose ``cause`` names the action's ``id`` is
  merged into it (``end`` = the observation's timestamp, exit code from
  ``extras.metadata.exit_code``, its content in ``extra["output"]``, the rest in
  ``extra["observation"]``, ``extras.metadata.working_dir`` in ``extra["cwd"]``) and makes it a safe
  boundary. ``run`` → ``command``/``test`` (argv by shlex), ``run_ipython`` →
  ``command`` (the code as text, no argv), ``write`` and ``edit`` (create, str_replace,
  insert, undo_edit) → ``file_change`` with ``paths_written=[path]`` as published and
  ``bytes_written`` from the content written (``write.content``, ``file_text``,
  ``new_str``, or the new content of a created file), ``read`` and ``edit view`` →
  ``other`` with ``paths_read``; ``message``/``chat``/``finish``/``think`` → ``message``;
  the other known actions → ``other``.
* Before an agent action whose ``tool_call_metadata.model_response`` carries ``usage`` a
  ``model_call`` event is emitted, once per response id (several tool calls may share a
  response): input = ``prompt_tokens``, cached = ``cache_read_input_tokens`` (or
  ``prompt_tokens_details.cached_tokens``), output = ``completion_tokens``. Older LiteLLM
  counts Anthropic's cache writes (``cache_creation_input_tokens``) in ``prompt_tokens``,
  later versions leave them out; when ``prompt_tokens`` is smaller than the writes plus the
  reads it cannot hold them, and they are added (an older log never fails that test; a
  later one whose fresh input alone reaches the writes is, ambiguously, taken as older).
* Observations without a matching action stay as their own events (``error`` ones with
  ``is_error``); an ``error`` observation merged into its action marks it ``is_error``.
* Timestamps are ISO-8601 without zone; they are read as UTC epoch seconds. A
  ``model_call``'s ``start`` is the response's ``created`` second.

Steps: a user ``message`` opens a new logical step when the agent acted since the last
one, so a single-instruction run is step 1 throughout (not one step per model response);
the system prompt (an agent ``system`` action in newer logs) is not the agent acting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from features.readers.errors import warn_unknown
from features.readers.events import (
    apply_test_counts,
    classify_command,
    mark_tool_return,
    new_step_on_user_input,
    utf8_len,
)
from features.readers.fields import Loc, get, int_field, iso_field, without
from features.readers.files import stem
from features.readers.stream import StreamParser, read_document
from features.schema import Event, EventKind, Trajectory
from features.shell import split_command

FORMAT = "openhands"

ACTIONS = {"message", "system", "run", "run_ipython", "read", "write", "edit", "browse",
           "browse_interactive", "call_tool_mcp", "think", "finish", "reject", "delegate",
           "condensation", "condensation_request", "task_tracking", "recall",
           "change_agent_state", "null", "mcp", "start", "pause", "resume", "stop"}
OBSERVATIONS = {"run", "run_ipython", "read", "write", "edit", "browse", "error",
                "agent_state_changed", "null", "delegate", "success", "user_rejected",
                "think", "recall", "condense", "mcp", "task_tracking", "chat",
                "download", "loop_detection"}
_MESSAGE_ACTIONS = {"message", "chat", "finish", "think", "system"}


def looks_like(doc: Any) -> bool:
    """Whether a parsed JSON document is an OpenHands V0 event list (or record with
    history): events with an ``action`` or ``observation`` name and no V1 ``kind``."""
    events = doc.get("history") if isinstance(doc, dict) else doc
    if not isinstance(events, list) or not events:
        return False
    first = events[0]
    return isinstance(first, dict) and "id" in first and "kind" not in first and (
        isinstance(first.get("action"), str) or isinstance(first.get("observation"), str)
    )


_MISSING = object()


def _usage(mr: dict[str, Any], loc: Loc) -> tuple[int | None, int | None, int | None] | None:
    """(input, cached, output) tokens of a model response's ``usage``, or None without one
    (``loc``: the action's, the response sits at ``tool_call_metadata.model_response``)."""
    usage = get(mr, "usage", (dict, type(None)), loc, "tool_call_metadata", "model_response")
    if usage is None:
        return None
    inp = int_field(usage.get("prompt_tokens"), loc, *_USAGE, "prompt_tokens")
    out = int_field(usage.get("completion_tokens"), loc, *_USAGE, "completion_tokens")
    cached = usage.get("cache_read_input_tokens")
    if cached is not None:
        cached = int_field(cached, loc, *_USAGE, "cache_read_input_tokens")
    else:
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict):
            cached = int_field(details.get("cached_tokens"), loc, *_USAGE,
                               "prompt_tokens_details", "cached_tokens")
    written = usage.get("cache_creation_input_tokens")
    if written is not None and inp is not None:
        written = int_field(written, loc, *_USAGE, "cache_creation_input_tokens")
        if written and inp < written + (cached or 0):
            inp += written  # a later LiteLLM: prompt_tokens leaves the cache writes out
    return inp, cached, out


_USAGE = ("tool_call_metadata", "model_response", "usage")


class OpenHandsParser(StreamParser):
    """Reader of an OpenHands V0 event list (see the module docstring): one record per
    event of the list."""

    FORMAT = FORMAT
    LAYOUT = "json"

    def __init__(self, *, source: str | Path = "<stream>", task_id: str | None = None,
                 repo: str | None = None) -> None:
        super().__init__(source=source, task_id=task_id, repo=repo)
        self._record: dict[str, Any] = {}  # an evaluation record's fields around its history
        self._base_loc = Loc(self.source, None, "")
        self._n_items = 0
        self._by_id: dict[int, Event] = {}
        self._seen_responses: set[str] = set()
        self._state = {"step": 1, "agent_acted": False}

    def records(self, doc: Any) -> list[Any]:
        root = Loc(self.source)
        if isinstance(doc, dict):
            self._record = doc
            items = get(doc, "history", list, root, required=True)
            self._base_loc = root / "history"
        elif isinstance(doc, list):
            items = doc
        else:
            raise root.error(f"expected a JSON list of events, got {type(doc).__name__}")
        self._n_items = len(items)
        return items

    def on_record(self, raw: Any, i: int, arrival: float | None) -> None:
        loc = self._base_loc / i
        if type(raw) is not dict:
            raise loc.error(f"expected object, got {type(raw).__name__}")
        if "kind" in raw:
            raise loc.error("an OpenHands V1 event (it has a 'kind'): read the file as "
                            "openhands-v1")
        state = self._state
        eid = int_field(raw.get("id"), loc, "id")
        ts = iso_field(raw, "timestamp", loc)
        source = get(raw, "source", str, loc)
        action = get(raw, "action", str, loc)
        observation = get(raw, "observation", str, loc)
        if action is None and observation is None:
            raise loc.error("event has neither 'action' nor 'observation'")

        if observation is not None:
            cause = int_field(raw.get("cause"), loc, "cause")
            target = self._by_id.get(cause) if cause is not None else None
            if target is not None and "observation" not in target.extra:
                _merge_observation(target, raw, observation, loc, ts)
                target.extra["observation_index"] = i
                target.step = state["step"]
                return
            if observation not in OBSERVATIONS:
                warn_unknown(self.source, f"field {loc.field}", f"observation {observation!r}")
            content = raw.get("content")
            extra = {"event_index": i, **raw}
            extra.pop("content", None)
            self.place(Event(
                index=0, kind=EventKind.OTHER, step=state["step"], start=ts,
                is_error=observation == "error",
                text=content if isinstance(content, str) else None,
                extra=extra))
            return

        if action == "message" and source == "user":
            new_step_on_user_input(state)
        elif (source == "agent" and action != "change_agent_state" and action != "null"
              and action != "system"):  # the system prompt is not the agent acting
            state["agent_acted"] = True
        step = state["step"]

        tcm = get(raw, "tool_call_metadata", (dict, type(None)), loc)
        if tcm is not None:
            mr = get(tcm, "model_response", (dict, type(None)), loc, "tool_call_metadata")
            if mr is not None:
                rid = mr.get("id")
                u = _usage(mr, loc)
                if u is not None and (type(rid) is not str or rid not in self._seen_responses):
                    if type(rid) is str:
                        self._seen_responses.add(rid)
                    created = mr.get("created")
                    created = None if isinstance(created, bool) else created
                    self.place(Event(
                        index=0, kind=EventKind.MODEL_CALL, step=step,
                        start=float(created) if isinstance(created, int | float) else None,
                        input_tokens=u[0], cached_tokens=u[1], output_tokens=u[2],
                        extra={"event_index": i, "response_id": rid, "model": mr.get("model"),
                               "created": created, "usage": mr.get("usage"),
                               "total_calls_in_response": tcm.get("total_calls_in_response")}))

        args = get(raw, "args", dict, loc, default={})
        thought = args.get("thought")
        text = thought if type(thought) is str and thought else None
        kind = EventKind.OTHER
        command = argv = bytes_written = None
        paths_read: list[str] = []
        paths_written: list[str] = []
        if action == "run":
            command = get(args, "command", str, loc, "args", required=True)
            argv = split_command(command)
            kind = classify_command(command, argv)
        elif action == "run_ipython":
            command = get(args, "code", str, loc, "args")
            kind = EventKind.COMMAND
        elif action == "read":
            paths_read = [get(args, "path", str, loc, "args", required=True)]
        elif action == "write" or action == "edit":
            p = get(args, "path", str, loc, "args", required=True)
            sub = get(args, "command", str, loc, "args")
            if action == "edit" and sub == "view":
                paths_read = [p]
            else:
                kind = EventKind.FILE_CHANGE
                paths_written = [p]
                bytes_written = _bytes(action, sub, args, loc / "args")
        elif action in _MESSAGE_ACTIONS:
            kind = EventKind.MESSAGE
            content = args.get("content")
            if isinstance(content, str) and content:
                text = content
            elif text is None:
                msg = raw.get("message")
                if isinstance(msg, str) and msg:
                    text = msg
        elif action not in ACTIONS:
            warn_unknown(self.source, f"field {loc.field}", f"action {action!r}")
        ev = Event(index=0, kind=kind, step=step, start=ts, command=command, argv=argv,
                   paths_read=paths_read, paths_written=paths_written,
                   bytes_written=bytes_written, text=text, extra={"event_index": i, **raw})
        self.place(ev)
        if eid is not None:
            self._by_id[eid] = ev

    def position(self, ev: Event) -> tuple[int, int]:
        """An action sits where its observation arrived; a model call just before its
        action."""
        pos = ev.extra.get("observation_index", ev.extra["event_index"])
        return pos, 0 if ev.kind == EventKind.MODEL_CALL else 1

    def on_end(self) -> None:
        self.release_placed()

    def on_final(self) -> None:
        self.meta.update({
            **without(self._record, "history"),
            "n_events_in_log": self._n_items,
            "n_observations_merged": sum(1 for e in self._events if "observation" in e.extra),
        })

    def task_default(self) -> str:
        iid = self._record.get("instance_id")
        return iid if isinstance(iid, str) and iid else stem(self.source)

    def repo_default(self) -> str | None:
        inst = self._record.get("instance")
        logged = inst.get("repo") if isinstance(inst, dict) else None
        return logged if isinstance(logged, str) and logged else None


def read_openhands(
    path: str | Path, *, task_id: str | None = None, repo: str | None = None
) -> Trajectory:
    """Read an OpenHands event list into a :class:`Trajectory` (see module doc)."""
    return read_document(OpenHandsParser(source=path, task_id=task_id, repo=repo), path)


def _bytes(action: str, sub: str | None, args: dict[str, Any], loc: Loc) -> int | None:
    if action == "write":
        return utf8_len(get(args, "content", str, loc))
    return editor_bytes(sub, args, loc)


def editor_bytes(command: str | None, args: dict[str, Any], loc: Loc) -> int | None:
    """Bytes an OpenHands file-editor call writes, from its arguments: ``file_text`` of a
    ``create``, ``new_str`` of a ``str_replace``/``insert``; else None (V0 and V1 alike)."""
    if command == "create" and isinstance(args.get("file_text"), str):
        return utf8_len(args["file_text"])
    if command in ("str_replace", "insert") and isinstance(args.get("new_str"), str):
        return utf8_len(args["new_str"])
    return None  # filled from the observation when it reports a created file


def created_file_bytes(result: dict[str, Any]) -> int | None:
    """Size of a file the editor created, from its result (``prev_exist`` false and the
    ``new_content``), else None."""
    if result.get("prev_exist") is False and isinstance(result.get("new_content"), str):
        return utf8_len(result["new_content"])
    return None


def _merge_observation(ev: Event, raw: dict[str, Any], observation: str, loc: Loc,
                       ts: float | None) -> None:
    ev.end = ts
    content = raw.get("content")
    extras = raw.get("extras")
    if extras is not None and type(extras) is not dict:
        raise (loc / "extras").error("expected object")
    obs = dict(raw)
    obs.pop("content", None)
    extra = ev.extra
    extra["observation"] = obs
    extra["output"] = content
    if observation == "error" or observation == "user_rejected":
        ev.is_error = True
    md = extras.get("metadata") if extras else None
    if type(md) is dict:
        cwd = md.get("working_dir")
        if type(cwd) is str:
            extra["cwd"] = cwd
        code = md.get("exit_code", _MISSING)
        if code is not _MISSING:
            code = int_field(code, loc, "extras", "metadata", "exit_code")
            ev.exit_code = None if code == -1 else code  # -1: OpenHands' "no exit code"
    if ev.kind == EventKind.FILE_CHANGE and ev.bytes_written is None:
        ev.bytes_written = created_file_bytes(extras or {})
    settle_result(ev, content if type(content) is str else None)


def settle_result(ev: Event, output: str | None) -> None:
    """The last step of merging an action's result (V0 and V1 alike): a file change that
    failed writes nothing (its paths move to ``extra["attempted_paths"]``), a test gets
    its counts from the output, and the action becomes a safe boundary."""
    if ev.kind == EventKind.FILE_CHANGE and ev.is_error:
        ev.extra["attempted_paths"] = ev.paths_written
        ev.paths_written = []
        ev.bytes_written = None
    apply_test_counts(ev, output)
    mark_tool_return(ev)
