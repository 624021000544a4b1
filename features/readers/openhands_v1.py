"""Reader for OpenHands V1 conversations (the software-agent-sdk): typed events with a
``kind`` (``SystemPromptEvent``, ``MessageEvent``, ``ActionEvent``, ``ObservationEvent``,
``UserRejectObservation``, ``AgentErrorEvent``, condensation events, ...) and UUID string
ids, persisted either as a JSON list of events or as a conversation directory::

    <conversation>/base_state.json          stats (token usage, cost), execution status, ...
    <conversation>/events/event-00000-<id>.json   one event per file

A directory is read in the order of the index in its file names (not of their text);
the ``events`` folder itself may be given too. V0 logs (integer ids, ``action`` /
``observation`` strings) are the ``openhands`` format (:mod:`.openhands`).

Mapping (the V0 conventions, where V1 has the same notion):

* Each ``ActionEvent`` becomes one event, placed where its result arrived; the
  ``ObservationEvent`` / ``UserRejectObservation`` whose ``action_id`` names it, or the
  ``AgentErrorEvent`` whose ``tool_call_id`` matches its own, is merged into it (``end`` =
  the result's timestamp, its text in ``extra["output"]``, the rest in
  ``extra["observation"]``) and makes it a safe boundary. A rejection or an agent error
  marks it ``is_error``, so does an observation with ``is_error``.
  By ``action.kind`` (else ``tool_name``): a terminal action (``TerminalAction``,
  ``ExecuteBashAction``) → ``command``/``test`` (argv by shlex; exit code from the
  observation's ``exit_code``, -1 = still running → None; ``metadata.working_dir`` in
  ``extra["cwd"]``), or ``other`` when ``is_input`` (keys sent to a running process, not a
  command); the file editor (``FileEditorAction``, ``StrReplaceEditorAction``) →
  ``file_change`` with ``paths_written=[path]`` and ``bytes_written`` as for V0, or
  ``other`` with ``paths_read`` for ``view``; ``ThinkAction``/``FinishAction`` →
  ``message``; other known tools → ``other``; an action the agent could not execute
  (``action`` null) → ``other`` (the agent error that answers it follows).
* ``MessageEvent`` → ``message`` (text of ``llm_message.content``); ``SystemPromptEvent``
  → ``message``; condensation, pause, state-update and error events → ``other``
  (``ConversationErrorEvent`` with ``is_error``). Unknown kinds warn and stay ``other``.
* A ``model_call`` is emitted before the first event carrying each ``llm_response_id``
  (actions of one response, an agent message, a condensation). Its tokens come from
  ``base_state.json`` (``stats.usage_to_metrics.*.token_usages``, in early SDKs
  ``stats.service_to_metrics.*.token_usages``, matched by
  ``response_id``: input = ``prompt_tokens``, cached = ``cache_read_tokens``, output =
  ``completion_tokens``) and its ``duration`` from ``response_latencies``; without a
  base state (the list form) they stay None. Usage records no event names are counted in
  ``meta["token_usages_without_event"]``.
* Timestamps are ISO-8601 (naive ones read as UTC, as for V0).

Steps: a user ``MessageEvent`` opens a new logical step when the agent acted since the
last one (as V0).
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path
from typing import Any

from features.readers.errors import TrajectoryFormatError, warn_unknown
from features.readers.events import classify_command, new_step_on_user_input
from features.readers.fields import (
    Loc,
    Shape,
    get,
    int_field,
    iso_field,
    message_text,
    need,
    to_duration,
    to_int,
    without,
)
from features.readers.files import current_limits, stem
from features.readers.openhands import (
    created_file_bytes,
    editor_bytes,
    settle_result,
)
from features.readers.stream import StreamParser, read_document
from features.readers.strict_json import load_json, load_json_files
from features.schema import Event, EventKind, Trajectory
from features.shell import split_command

FORMAT = "openhands-v1"
BASE_STATE = "base_state.json"
EVENTS_DIR = "events"
EVENT_FILE = re.compile(r"^event-(?P<idx>\d{5,})-(?P<event_id>[0-9A-Za-z_\-]+)\.json$")

KINDS = {"SystemPromptEvent", "MessageEvent", "ActionEvent", "ObservationEvent",
         "UserRejectObservation", "AgentErrorEvent", "Condensation", "CondensationRequest",
         "CondensationSummaryEvent", "ConversationStateUpdateEvent", "PauseEvent",
         "ConversationErrorEvent", "InterruptEvent", "TokenEvent", "StreamingDeltaEvent",
         "LLMCompletionLogEvent", "HookExecutionEvent", "ACPToolCallEvent",
         "ConversationIterationLimitEvent", "UserActionEvent"}
_TERMINAL = {"TerminalAction", "ExecuteBashAction", "BashAction"}
_TERMINAL_TOOLS = {"terminal", "execute_bash", "bash"}
_EDITOR = {"FileEditorAction", "StrReplaceEditorAction"}
_EDITOR_TOOLS = {"file_editor", "str_replace_editor"}
_MESSAGE_ACTIONS = {"ThinkAction": "thought", "FinishAction": "message"}
_MESSAGE_TOOLS = {"think": "thought", "finish": "message"}
_KNOWN_ACTIONS = {"TaskTrackerAction", "BrowserNavigateAction", "BrowserClickAction",
                  "BrowserTypeAction", "BrowserGetStateAction", "BrowserGetContentAction",
                  "BrowserScrollAction", "BrowserGoBackAction", "BrowserListTabsAction",
                  "BrowserSwitchTabAction", "BrowserCloseTabAction", "MCPToolAction",
                  "DelegateAction", "TaskToolSetAction", "GlobAction", "GrepAction",
                  "PlanningFileEditorAction", "ApplyPatchAction", "TaskAction"}
_RESULTS = {"ObservationEvent", "UserRejectObservation", "AgentErrorEvent"}
# the typed fields read together: an event's kind and id, then (past its timestamp) its
# source and response id; an action event's action and tool; a terminal and an editor action's
_HEAD = Shape(("kind", str), ("id", str), required=("kind", "id"))
_ORIGIN = Shape(("source", str), ("llm_response_id", str))
_ACTION = Shape(("action", (dict, type(None))), ("tool_name", str))
_TERMINAL_ACTION = Shape(("command", str), ("is_input", bool), required=("command",))
_EDITOR_ACTION = Shape(("path", str), ("command", str), required=("path", "command"))
_MISSING = object()


def looks_like(doc: Any) -> bool:
    """Whether a parsed JSON document is a V1 event list (V0 events have no ``kind``)."""
    if not isinstance(doc, list) or not doc or not isinstance(doc[0], dict):
        return False
    return isinstance(doc[0].get("kind"), str)


def looks_like_dir(path: Path) -> bool:
    """Whether a directory is a V1 conversation (or its ``events`` folder)."""
    events = path / EVENTS_DIR if (path / EVENTS_DIR).is_dir() else path
    try:  # scandir stops at the first event file (a listing of thousands is not needed)
        with os.scandir(events) as entries:
            return any(EVENT_FILE.match(e.name) for e in entries)
    except OSError:
        return False


def _read_dir(path: Path) -> tuple[list[str], list[Any], dict[str, Any] | None, Path]:
    """The event files in index order, their parsed events, the base state (or None), the
    root.

    A clean directory (every file an event file, indices 0..n-1, each file's id the one
    in its name) is loaded in one go (:func:`load_json_files`); anything else, or any
    doubt, is read file by file (:func:`_read_events`), which words the first error."""
    if (path / EVENTS_DIR).is_dir():
        root, events_dir = path, path / EVENTS_DIR
    else:
        root, events_dir = path.parent, path
    loaded = _load_clean(events_dir)
    files, docs = loaded if loaded is not None else _read_events(events_dir)
    base = root / BASE_STATE
    state = load_json(base) if base.is_file() else None
    if state is not None and not isinstance(state, dict):
        raise Loc(base).error(f"expected a JSON object, got {type(state).__name__}")
    return files, docs, state, root


# an event file's name, for many names joined by newlines at once (EVENT_FILE's groups)
_EVENT_FILES = re.compile(EVENT_FILE.pattern.replace("?P<idx>", "").replace(
    "?P<event_id>", ""), re.M)


def _load_clean(events_dir: Path) -> tuple[list[str], list[Any]] | None:
    """The event files and events of a clean directory (see :func:`_read_dir`) as
    :func:`_read_events` returns them, or None (not clean, or a file to read the slow
    way). The names are matched in one pass over them all, joined by newlines."""
    where = os.fspath(events_dir)
    try:
        names = [n for n in os.listdir(where) if not n.startswith(".")]  # the SDK's lock
    except OSError:  # and length markers are hidden
        return None
    listing = "\n".join(names)
    found = _EVENT_FILES.findall(listing)
    if len(found) != len(names) or listing.count("\n") != max(len(names) - 1, 0):
        return None  # a name that is not an event file (or holds a newline): the slow path
    n = len(names)
    sep = "" if where.endswith("/") else "/"  # as os.path.join joins
    numbered: list[tuple[str, str] | None] = [None] * n
    for name, (idx, fid) in zip(names, found, strict=True):
        i = int(idx)
        if i >= n or numbered[i] is not None:
            return None  # a gap or a repeated index: the slow path warns or refuses
        numbered[i] = (f"{where}{sep}{name}", fid)
    files = [f for f, _ in numbered]  # type: ignore[misc]
    docs = load_json_files(files, current_limits().max_bytes)
    if docs is None:
        return None
    fids = [fid for _, fid in numbered]  # type: ignore[misc]
    if all(type(d) is dict for d in docs) and [d.get("id") for d in docs] == fids:
        return files, docs  # every id as named (the usual directory)
    for fid, doc in zip(fids, docs, strict=True):
        if type(doc) is dict:
            eid = doc.get("id")
            if type(eid) is str and eid != fid:
                return None
    return files, docs


def _read_events(events_dir: Path) -> tuple[list[str], list[Any]]:
    """The event files in index order and their parsed events, file by file: each error
    as it comes."""
    limit = current_limits().max_bytes
    numbered: dict[int, tuple[str, str]] = {}  # index -> (file name, event id)
    ignored: list[str] = []
    total = 0
    where = os.fspath(events_dir)  # stat by name: no Path per file before it is read
    match, join, stat = EVENT_FILE.match, os.path.join, os.stat
    for name in os.listdir(events_dir):
        m = match(name)
        if m is None:
            if not name.startswith("."):  # the SDK's lock and length markers are hidden
                ignored.append(name)
            continue
        idx = int(m["idx"])
        if idx in numbered:
            raise TrajectoryFormatError(
                f"{events_dir}: two event files with index {idx}: {numbered[idx][0]}, {name}")
        numbered[idx] = (name, m["event_id"])
        try:
            total += stat(join(where, name)).st_size
        except OSError:
            pass  # reported when the file is read
        if total > limit:
            raise TrajectoryFormatError(
                f"{events_dir}: event files larger than the {limit / 2**20:g} MiB limit together "
                "(raise it with --max-mb or ReadLimits(max_bytes=...))")
    if ignored:
        warnings.warn(f"{events_dir}: {len(ignored)} file(s) that are not events ignored: "
                      f"{', '.join(sorted(ignored)[:5])}", UserWarning, stacklevel=4)
    order = sorted(numbered)
    missing = sorted(set(range(order[-1] + 1)) - set(order)) if order and (
        order[-1] >= len(order)) else []
    if missing:
        warnings.warn(f"{events_dir}: {len(missing)} event file(s) missing (indices "
                      f"{missing[:5]}{'...' if len(missing) > 5 else ''}); read what is there",
                      UserWarning, stacklevel=4)
    files, docs = [], []
    for idx in order:
        name, fid = numbered[idx]
        f = join(where, name)
        doc = load_json(Path(f))
        if type(doc) is dict:
            eid = doc.get("id")
            if type(eid) is str and eid != fid:
                raise (Loc(f) / "id").error(f"event id {eid!r} differs from the file name's")
        files.append(f)
        docs.append(doc)
    return files, docs


def _usage_index(state: dict[str, Any] | None, base: Path) -> tuple[dict[str, dict], set[str]]:
    """response_id -> {"usage": token usage, "latency": s} from the base state's stats."""
    out: dict[str, dict[str, Any]] = {}
    if state is None:
        return out, set()
    sloc = Loc(base) / "stats"
    stats = get(state, "stats", dict, Loc(base), default={})
    # early SDKs named it service_to_metrics (per LLM service, the same records)
    key = "service_to_metrics" if "usage_to_metrics" not in stats and (
        "service_to_metrics" in stats) else "usage_to_metrics"
    metrics = get(stats, key, dict, sloc, default={})
    for usage_id, m in metrics.items():
        mloc = sloc / key / usage_id
        if not isinstance(m, dict):
            raise mloc.error("expected object")
        for j, u in enumerate(get(m, "token_usages", list, mloc, default=[])):
            uloc = mloc / "token_usages" / j
            if not isinstance(u, dict):
                raise uloc.error("expected object")
            rid = get(u, "response_id", str, uloc)
            if rid:
                out.setdefault(rid, {})["usage"] = (u, uloc)
        for j, lat in enumerate(get(m, "response_latencies", list, mloc, default=[])):
            lloc = mloc / "response_latencies" / j
            if not isinstance(lat, dict):
                raise lloc.error("expected object")
            rid = get(lat, "response_id", str, lloc)
            if rid:
                out.setdefault(rid, {})["latency"] = to_duration(lat.get("latency"), lloc / "latency")
    return out, set(out)


class OpenHandsV1Parser(StreamParser):
    """Reader of an OpenHands V1 conversation (see the module docstring): one record per
    event. A directory's events come with their files (:meth:`conversation`), a list's
    from the list itself."""

    FORMAT = FORMAT
    LAYOUT = "json"

    def __init__(self, *, source: str | Path = "<stream>", task_id: str | None = None,
                 repo: str | None = None) -> None:
        super().__init__(source=source, task_id=task_id, repo=repo)
        self._state: dict[str, Any] | None = None  # the base state, for a directory
        self._locs: list[Loc] | None = None  # each event's file, for a directory
        self._list_loc = Loc(self.source, None, "")
        self._root = self.source.parent
        self._base = self.source.parent / BASE_STATE
        self._n_docs = 0
        self._usage: dict[str, dict[str, Any]] = {}
        self._unused: set[str] = set()
        self._by_id: dict[str, Event] = {}
        self._by_call: dict[str, Event] = {}
        self._seen_responses: set[str] = set()
        self._st = {"step": 1, "agent_acted": False}

    def conversation(self, files: list[str], state: dict[str, Any] | None, root: Path) -> None:
        """A conversation directory's event files (in index order), base state and root:
        its events are then fed as :meth:`records` of the list of their documents."""
        self._locs = list(map(Loc, files))
        self._state, self._root, self._base = state, root, root / BASE_STATE

    def records(self, doc: Any) -> list[Any]:
        if self._locs is None and not isinstance(doc, list):
            raise Loc(self.source).error(f"expected a JSON list of OpenHands V1 events, got "
                                         f"{type(doc).__name__}")
        self._n_docs = len(doc)
        self._usage, self._unused = _usage_index(self._state, self._base)
        return doc

    def on_record(self, raw: Any, i: int, arrival: float | None) -> None:
        loc = self._list_loc / i if self._locs is None else self._locs[i]
        if type(raw) is not dict:
            raise loc.error(f"expected an OpenHands V1 event object, got {type(raw).__name__}")
        st = self._st
        kind, eid = _HEAD.read(raw, loc)
        ts = iso_field(raw, "timestamp", loc)
        source, rid = _ORIGIN.read(raw, loc)
        if rid is not None and rid not in self._seen_responses:
            self._seen_responses.add(rid)
            self._unused.discard(rid)
            self.place(_model_call(rid, self._usage.get(rid), st["step"], i))

        if kind in _RESULTS:
            target = _result_target(raw, loc, self._by_id, self._by_call)
            if target is not None:
                _merge_result(target, raw, kind, loc, ts, i)
                target.step = st["step"]
                return
            self.place(Event(
                index=0, kind=EventKind.OTHER, step=st["step"], start=ts,
                is_error=kind != "ObservationEvent" or _obs_error(raw, loc),
                text=_result_text(raw, kind, loc) or None,
                extra={"event_index": i, **raw}))
            return

        if kind == "MessageEvent":
            msg = need(raw, "llm_message", dict, loc)
            if source == "user":
                new_step_on_user_input(st)
            elif source == "agent":
                st["agent_acted"] = True
            self.place(Event(
                index=0, kind=EventKind.MESSAGE, step=st["step"], start=ts,
                text=message_text(msg.get("content"), loc, "llm_message", "content"),
                extra={"event_index": i, "role": msg.get("role"),
                       **without(raw, "llm_message"),
                       "llm_message": without(msg, "content")}))
            return
        if kind == "SystemPromptEvent":
            sp = raw.get("system_prompt")
            text = message_text([sp] if isinstance(sp, dict) else sp, loc, "system_prompt")
            self.place(Event(
                index=0, kind=EventKind.MESSAGE, step=st["step"], start=ts, text=text,
                extra={"event_index": i, **without(raw, "system_prompt")}))
            return
        if kind != "ActionEvent":
            if kind not in KINDS:
                warn_unknown(loc.path, str(loc).removeprefix(f"{loc.path}: ") or "event",
                             f"OpenHands V1 event kind {kind!r}")
            self.place(Event(
                index=0, kind=EventKind.OTHER, step=st["step"], start=ts,
                is_error=kind == "ConversationErrorEvent",
                text=_str_field(raw, ("summary", "detail", "error"), loc),
                extra={"event_index": i, **raw}))
            return

        if source is None or source == "agent":
            st["agent_acted"] = True
        ev = _action_event(raw, loc, st["step"], ts, i)
        self.place(ev)
        self._by_id[eid] = ev
        call = get(raw, "tool_call_id", str, loc)
        if call:
            self._by_call[call] = ev

    def position(self, ev: Event) -> tuple[int, int]:
        """An action sits where its result arrived; a model call just before its first
        event."""
        pos = ev.extra.get("observation_index", ev.extra["event_index"])
        return pos, 0 if ev.kind == EventKind.MODEL_CALL else 1

    def on_end(self) -> None:
        self.release_placed()

    def on_final(self) -> None:
        meta = self.meta
        meta.update({
            "format_version": "v1",
            "n_events_in_log": self._n_docs,
            "n_results_merged": sum(1 for e in self._events if "observation" in e.extra),
            "token_usages_without_event": len(self._unused),
        })
        if self._state is not None:
            meta["base_state"] = without(self._state, "secret_registry")

    def task_default(self) -> str:
        conv = self._state.get("id") if self._state is not None else None
        if isinstance(conv, str) and conv:
            return conv
        return self._root.name if self._locs is not None and self._root.name else stem(
            self.source)


def read_openhands_v1(
    path: str | Path, *, task_id: str | None = None, repo: str | None = None
) -> Trajectory:
    """Read an OpenHands V1 conversation (directory or JSON event list; see module doc)."""
    path = Path(path)
    parser = OpenHandsV1Parser(source=path, task_id=task_id, repo=repo)
    if not path.is_dir():
        return read_document(parser, path)
    files, docs, state, root = _read_dir(path)
    parser.conversation(files, state, root)
    parser.feed_document(docs)
    return parser.finish()


def _model_call(rid: str, rec: dict[str, Any] | None, step: int, i: int) -> Event:
    ev = Event(index=0, kind=EventKind.MODEL_CALL, step=step,
               extra={"event_index": i, "response_id": rid})
    if rec is None:
        return ev
    if "usage" in rec:
        u, uloc = rec["usage"]
        ev.input_tokens = to_int(u.get("prompt_tokens"), uloc / "prompt_tokens")
        ev.cached_tokens = to_int(u.get("cache_read_tokens"), uloc / "cache_read_tokens")
        ev.output_tokens = to_int(u.get("completion_tokens"), uloc / "completion_tokens")
        ev.extra["usage"] = u
        if isinstance(u.get("model"), str):
            ev.extra["model"] = u["model"]
    ev.duration = rec.get("latency")
    return ev


def _str_field(raw: dict[str, Any], keys: tuple[str, ...], loc: Loc) -> str | None:
    for k in keys:
        v = get(raw, k, (str, type(None)), loc)
        if v:
            return v
    return None


def _action_event(raw: dict[str, Any], loc: Loc, step: int, ts: float | None, i: int
                  ) -> Event:
    """The event of an ``ActionEvent``."""
    action, tool = _ACTION.read(raw, loc)
    akind = None if action is None else get(action, "kind", str, loc, "action")
    extra = {"event_index": i, **raw}
    extra.pop("thought", None)
    text = None
    thought = raw.get("thought")
    if thought is not None:
        text = message_text(thought, loc, "thought") or None
    if action is None:
        extra["not_executed"] = True
        return Event(index=0, kind=EventKind.OTHER, step=step, start=ts, text=text,
                     extra=extra)
    kind = EventKind.OTHER
    command = argv = bytes_written = None
    paths_read: list[str] = []
    paths_written: list[str] = []
    if akind in _TERMINAL or (akind not in _EDITOR and tool in _TERMINAL_TOOLS):
        cmd, is_input = _TERMINAL_ACTION.read(action, loc, "action")
        if is_input:
            extra["input"] = cmd  # keys for a running process, not a command line
        else:
            command = cmd
            argv = split_command(cmd)
            kind = classify_command(cmd, argv)
    elif akind in _EDITOR or tool in _EDITOR_TOOLS:
        p, sub = _EDITOR_ACTION.read(action, loc, "action")
        if sub == "view":
            paths_read = [p]
        else:
            kind = EventKind.FILE_CHANGE
            paths_written = [p]
            bytes_written = editor_bytes(sub, action, loc / "action")
    elif (field := _MESSAGE_ACTIONS.get(akind or "") or _MESSAGE_TOOLS.get(tool or "")):
        kind = EventKind.MESSAGE
        said = get(action, field, str, loc, "action")
        if said:
            text = said
    elif akind not in _KNOWN_ACTIONS:
        warn_unknown(loc.path, str(loc).removeprefix(f"{loc.path}: ") or "event",
                     f"OpenHands V1 action {akind!r} (tool {tool!r})")
    return Event(index=0, kind=kind, step=step, start=ts, command=command, argv=argv,
                 paths_read=paths_read, paths_written=paths_written,
                 bytes_written=bytes_written, text=text, extra=extra)


def _result_target(raw: dict[str, Any], loc: Loc, by_id: dict[str, Event],
                   by_call: dict[str, Event]) -> Event | None:
    aid = get(raw, "action_id", str, loc)
    target = by_id.get(aid) if aid is not None else None
    if target is None:
        call = get(raw, "tool_call_id", str, loc)
        target = by_call.get(call) if call is not None else None
    if target is None or "observation" in target.extra:
        return None
    return target


def _obs_error(raw: dict[str, Any], loc: Loc) -> bool:
    obs = raw.get("observation")
    if type(obs) is not dict:
        return False
    if get(obs, "is_error", bool, loc, "observation", default=False):
        return True
    return bool(get(obs, "error", (bool, str, type(None)), loc, "observation", default=False))


def _result_text(raw: dict[str, Any], kind: str, loc: Loc) -> str:
    if kind == "AgentErrorEvent":
        return get(raw, "error", str, loc, default="")
    if kind == "UserRejectObservation":
        return get(raw, "rejection_reason", str, loc, default="")
    obs = need(raw, "observation", dict, loc)
    if "content" in obs:
        return message_text(obs["content"], loc, "observation", "content")
    return get(obs, "output", str, loc, "observation", default="")  # older SDKs


def _merge_result(ev: Event, raw: dict[str, Any], kind: str, loc: Loc, ts: float | None,
                  i: int) -> None:
    ev.end = ts
    extra = ev.extra
    extra["observation_index"] = i
    output = _result_text(raw, kind, loc)
    extra["output"] = output
    obs = raw.get("observation") if kind == "ObservationEvent" else None
    if type(obs) is dict:
        kept = dict(obs)
        kept.pop("content", None)
        kept.pop("output", None)
        merged = dict(raw)
        del merged["observation"]
        merged["observation"] = kept
        extra["observation"] = merged
    else:
        extra["observation"] = without(raw, "error")
    ev.is_error = kind != "ObservationEvent" or _obs_error(raw, loc)
    if type(obs) is dict:
        md = get(obs, "metadata", dict, loc, "observation", default={})
        cwd = md.get("working_dir")
        if type(cwd) is str:
            extra["cwd"] = cwd
        code = obs.get("exit_code")
        code = int_field(code, loc, "observation", "exit_code") if code is not None \
            else int_field(md.get("exit_code"), loc, "observation", "metadata", "exit_code")
        if ev.kind == EventKind.COMMAND or ev.kind == EventKind.TEST:
            ev.exit_code = None if code == -1 else code  # -1: still running (soft timeout)
        if ev.kind == EventKind.FILE_CHANGE and ev.bytes_written is None:
            ev.bytes_written = created_file_bytes(obs)
    settle_result(ev, output)
