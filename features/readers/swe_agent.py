"""Reader for SWE-agent ``.traj`` files: 1.x (``state`` a dict, ``execution_time`` per
step; with function calling, ``tool_calls`` on the history's actions; ``replay_config`` a
JSON string; ``query`` per step from 1.1) and the older 0.x (``state`` a JSON *string*,
no ``execution_time``).

Mapping:

* History items before the first assistant message (system prompt, demonstrations, the
  issue) → ``message`` events (``extra["is_demo"]`` kept). The rest of ``history``
  re-tells ``trajectory``; its length is in ``meta["history_len"]``.
* Each ``trajectory`` step → one action event, a safe boundary (the tool returned):
  ``file_change`` for the editor tools (``edit``, ``insert``, ``append``, ``create``,
  ``str_replace_editor create|str_replace|insert``), ``test`` for test commands, else
  ``command`` (``submit``, ``open``, ``find_file`` and shell commands alike).
  ``text`` = the thought, ``command`` = the action as written (``argv`` by shlex when
  parseable), ``duration`` = ``execution_time`` (v1 only), ``exit_code`` None (not logged),
  the observation in ``extra["output"]``, ``state.working_dir`` in ``extra["cwd"]``.
  Written paths: the path argument of ``create``/``str_replace_editor``, else the open file
  in the step's ``state`` (the state after the action), as published. An edit the tool
  refused (``Your proposed edit has introduced new syntax error(s)``) is ``is_error`` and
  writes nothing. ``bytes_written`` is the size of the inserted text when the action
  carries it. The history's action message of the step (the same ``action``, in order)
  gives ``extra["tool_calls"]`` and, where the action text cannot be split as shell words,
  the path and text the tool call's JSON arguments name.
* No per-step tokens or wall-clock times exist; run totals (``model_stats``:
  ``tokens_sent``, ``tokens_received``, ``api_calls``, cost) are in ``meta``.

Steps: SWE-agent runs one user turn, so every event is step 1 (one step per model
response would contradict the paper's logical steps).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from features.readers.events import apply_test_counts, classify_command, mark_tool_return
from features.readers.fields import (
    Loc,
    get,
    message_text,
    repo_from_instance_id,
    to_duration,
    to_int,
    without,
)
from features.readers.files import stem
from features.readers.stream import StreamParser, read_document
from features.readers.strict_json import load_embedded_json
from features.schema import Event, EventKind, Trajectory
from features.shell import split_command

FORMAT = "swe-agent"

_EDIT_TOOLS = {"edit", "insert", "append", "create", "edit_file", "write_file"}
_STR_REPLACE_WRITES = {"create", "str_replace", "insert", "undo_edit"}
_REFUSED = (
    "Your proposed edit has introduced new syntax error",
    "Your edit was not applied",
    "No replacement was performed",
)
_WINDOW_EDIT = re.compile(r"^edit\s+\d+:\d+\s*\n(.*?)\nend_of_edit\s*$", re.DOTALL)


def looks_like(doc: Any) -> bool:
    """Whether a parsed JSON document is a SWE-agent trajectory."""
    return (
        isinstance(doc, dict)
        and isinstance(doc.get("trajectory"), list)
        and ("info" in doc or "history" in doc)
    )


def _state(raw: Any, loc: Loc) -> dict[str, Any]:
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        if not raw.strip():
            return {}
        try:
            st = load_embedded_json(raw, loc)
        except json.JSONDecodeError as exc:
            raise loc.error(f"state string is not valid JSON ({exc.msg})") from exc
        if not isinstance(st, dict):
            raise loc.error("state string does not hold a JSON object")
        return st
    raise loc.error(f"expected object or JSON string, got {type(raw).__name__}")


def _edit_payload(action: str, argv: list[str] | None) -> str | None:
    m = _WINDOW_EDIT.match(action.strip())
    if m:
        return m.group(1) + "\n"
    if argv is None or not argv:
        return None
    if argv[0] == "edit" and len(argv) == 3:  # edit <search> <replace>
        return argv[2]
    if argv[0] in ("insert", "append") and len(argv) >= 2:
        return argv[-1]
    return None


class SweAgentParser(StreamParser):
    """Reader of a SWE-agent ``.traj`` (see the module docstring): its records are the
    history's messages before the first action, then the trajectory's steps."""

    FORMAT = FORMAT
    LAYOUT = "json"

    def __init__(self, *, source: str | Path = "<stream>", task_id: str | None = None,
                 repo: str | None = None) -> None:
        super().__init__(source=source, task_id=task_id, repo=repo)
        self._root = Loc(self.source)
        self._doc: dict[str, Any] = {}
        self._history: list[Any] = []
        self._info: dict[str, Any] = {}
        self._actions: list[tuple[int, dict[str, Any]]] = []
        self._versions: set[str] = set()
        self._prelude = True  # the history's messages before its first action
        self._iid: str | None = None

    def records(self, doc: Any) -> list[tuple[str, int, Any]]:
        root = self._root
        if not isinstance(doc, dict):
            raise root.error(f"expected a JSON object at top level, got {type(doc).__name__}")
        self._doc = doc
        traj = get(doc, "trajectory", list, root, required=True)
        history = self._history = get(doc, "history", list, root, default=[])
        self._info = get(doc, "info", dict, root, default={})
        self._actions = _history_actions(history, root)
        return [*(("history", i, h) for i, h in enumerate(history)),
                *(("trajectory", i, st) for i, st in enumerate(traj))]

    def on_record(self, rec: tuple[str, int, Any], at: int, arrival: float | None) -> None:
        part, i, item = rec
        if part == "history":
            if self._prelude:
                self._message(i, item)
        else:
            self._step(i, item)

    def _message(self, i: int, h: Any) -> None:
        """A message of the history before its first action."""
        hloc = self._root / "history" / i
        if not isinstance(h, dict):
            raise hloc.error("expected object")
        role = get(h, "role", str, hloc, required=True)
        if role == "assistant":
            self._prelude = False
            return
        content = h.get("content")
        text = None if content is None else message_text(content, hloc, "content")
        self.emit(Event(index=0, kind=EventKind.MESSAGE, step=1, text=text,
                        extra={"history_index": i, **without(h, "content")}))

    def _step(self, i: int, s: Any) -> None:
        """A step of the trajectory: one command."""
        root = self._root
        actions = self._actions
        sloc = root / "trajectory" / i
        if not isinstance(s, dict):
            raise sloc.error(f"expected object, got {type(s).__name__}")
        action = get(s, "action", str, sloc, required=True)
        obs = get(s, "observation", (str, type(None)), sloc, default=None)
        thought = get(s, "thought", (str, type(None)), sloc, default=None)
        raw_state = s.get("state")
        self._versions.add("0.x" if isinstance(raw_state, str) else "v1")
        state = _state(raw_state, sloc / "state")
        et = to_duration(s.get("execution_time"), sloc / "execution_time")
        hist = actions[i] if i < len(actions) and actions[i][1].get("action") == action else None
        calls = _tool_calls(hist, root) if hist is not None else []
        cmd = action.strip()
        argv = split_command(cmd)
        head = (argv[0] if argv else cmd.split(maxsplit=1)[0] if cmd else "")
        kind = classify_command(cmd, argv)
        paths: list[str] = []
        payload: str | None = None
        refused = obs is not None and any(r in obs for r in _REFUSED)
        words = argv  # what the mapping reads; argv stays the action's own words
        if words is None and len(calls) == 1:  # unsplittable text: the call's own arguments
            head = calls[0][0]
            words = _words_from_call(head, _arguments(calls[0][1]))
        if head in _EDIT_TOOLS or (
            head == "str_replace_editor" and words is not None and len(words) >= 3
            and words[1] in _STR_REPLACE_WRITES
        ):
            kind = EventKind.FILE_CHANGE
            if head == "str_replace_editor" and words is not None:
                paths = [words[2]]
                if words[1] == "create" and "--file_text" in words:
                    k = words.index("--file_text")
                    payload = words[k + 1] if k + 1 < len(words) else None
                elif "--new_str" in words:
                    k = words.index("--new_str")
                    payload = words[k + 1] if k + 1 < len(words) else None
            elif head == "create" and words is not None and len(words) >= 2:
                opened = state.get("open_file")
                paths = [opened if isinstance(opened, str) and opened.endswith(words[1])
                         else words[1]]
            else:
                opened = state.get("open_file")
                if isinstance(opened, str) and opened not in ("n/a", ""):
                    paths = [opened]
                payload = _edit_payload(action, words)
        ev = Event(
            index=0, kind=kind, step=1, duration=et, command=cmd, argv=argv, text=thought,
            is_error=refused,
            paths_written=[] if refused else paths,
            bytes_written=None if refused or payload is None else len(payload.encode()),
            extra={"trajectory_index": i, "output": obs, "state": state,
                   **({"tool_calls": hist[1]["tool_calls"], "history_index": hist[0]}
                      if hist is not None and "tool_calls" in hist[1] else {}),
                   **({"cwd": state["working_dir"]}
                      if isinstance(state.get("working_dir"), str) else {}),
                   **({"attempted_paths": paths} if refused and paths else {}),
                   **{k: v for k, v in s.items()
                      if k not in ("action", "observation", "thought", "state",
                                   "execution_time")}},
        )
        apply_test_counts(ev, obs)
        mark_tool_return(ev)
        self.emit(ev)


    def on_final(self) -> None:
        root, doc, info, history, versions = (self._root, self._doc, self._info, self._history,
                                              self._versions)
        model_stats = info.get("model_stats")
        if model_stats is not None and not isinstance(model_stats, dict):
            raise (root / "info" / "model_stats").error("expected object")
        ms = model_stats or {}
        sub = info.get("submission")
        replay = doc.get("replay_config")
        iid = None
        rc: Any = replay
        if isinstance(replay, str) and replay.strip():
            try:
                rc = load_embedded_json(replay, root / "replay_config")
            except json.JSONDecodeError as exc:
                raise (root / "replay_config").error(
                    f"a string that is not JSON ({exc.msg} at column {exc.colno})") from exc
        ps = rc.get("problem_statement") if isinstance(rc, dict) else None
        if isinstance(ps, dict) and isinstance(ps.get("id"), str):
            iid = ps["id"]
        self._iid = iid
        self.meta.update({
            "format_version": "/".join(sorted(versions)) if versions else None,
            "exit_status": info.get("exit_status"),
            "submission_present": isinstance(sub, str) and bool(sub.strip()),
            "model_stats": ms,
            "tokens_sent": to_int(ms.get("tokens_sent"), root / "info" / "model_stats" /
                                  "tokens_sent"),
            "tokens_received": to_int(ms.get("tokens_received"), root / "info" / "model_stats" /
                                      "tokens_received"),
            "api_calls": to_int(ms.get("api_calls"), root / "info" / "model_stats" / "api_calls"),
            "info": info,
            "environment": doc.get("environment"),
            "replay_config": replay,
            "instance_id": iid,
            "history_len": len(history),
            **{f"top_{k}": v for k, v in doc.items()
               if k not in ("trajectory", "history", "info", "environment", "replay_config")},
        })

    def task_default(self) -> str:
        return self._iid or stem(self.source)

    def repo_default(self) -> str | None:
        return repo_from_instance_id(self._iid)


def read_swe_agent(
    path: str | Path, *, task_id: str | None = None, repo: str | None = None
) -> Trajectory:
    """Read a SWE-agent ``.traj`` into a :class:`Trajectory` (see module doc)."""
    return read_document(SweAgentParser(source=path, task_id=task_id, repo=repo), path)


def _history_actions(history: list[Any], root: Loc) -> list[tuple[int, dict[str, Any]]]:
    """(index, item) of the history's own action messages (demonstrations left out), in
    order: one per trajectory step."""
    out = []
    for i, h in enumerate(history):
        if (isinstance(h, dict) and h.get("role") == "assistant" and not h.get("is_demo")
                and h.get("message_type", "action") == "action"):
            out.append((i, h))
    return out


def _tool_calls(hist: tuple[int, dict[str, Any]], root: Loc) -> list[tuple[str, Any]]:
    """(function name, raw arguments) of an action message's tool calls."""
    i, h = hist
    hloc = root / "history" / i
    calls = get(h, "tool_calls", (list, type(None)), hloc, default=None) or []
    out = []
    for j, c in enumerate(calls):
        cloc = hloc / "tool_calls" / j
        if not isinstance(c, dict):
            raise cloc.error("expected object")
        fn = get(c, "function", dict, cloc, required=True)
        name = get(fn, "name", str, cloc / "function", required=True)
        out.append((name, get(fn, "arguments", (str, dict), cloc / "function", default="{}")))
    return out


def _arguments(raw: str | dict[str, Any]) -> dict[str, Any]:
    """A tool call's arguments (JSON text or an object); {} when they do not parse (the
    model's own text: the action string stays the record)."""
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        return {}
    return args if isinstance(args, dict) else {}


def _words_from_call(name: str, args: dict[str, Any]) -> list[str] | None:
    """The words the action would have split into, from a tool call's arguments (only for
    the editor tools whose path and text the mapping reads)."""
    if name == "str_replace_editor" and isinstance(args.get("command"), str) and isinstance(
            args.get("path"), str):
        argv = [name, args["command"], args["path"]]
        for key in ("file_text", "new_str"):
            if isinstance(args.get(key), str):
                argv += [f"--{key}", args[key]]
        return argv
    if name == "create" and isinstance(args.get("filename"), str):
        return [name, args["filename"]]
    if name in ("insert", "append") and isinstance(args.get("text"), str):
        return [name, args["text"]]
    if name == "edit" and isinstance(args.get("search"), str) and isinstance(
            args.get("replace"), str):
        return [name, args["search"], args["replace"]]
    return None
