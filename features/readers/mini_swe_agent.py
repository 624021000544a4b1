"""Reader for mini-SWE-agent trajectories (``*.traj.json``), formats ``mini-swe-agent-1``
(mini 1.x) and ``mini-swe-agent-1.1`` (mini >= 2.0; later ``1.N`` read the same way, a
later major version too, with a warning).

Mapping:

* ``system`` and the task ``user`` message → ``message`` events.
* Each ``assistant`` message → a ``model_call`` event (``text`` = the THOUGHT + action as
  written, tokens from the LiteLLM ``usage``: input = ``prompt_tokens``, cached =
  ``prompt_tokens_details.cached_tokens``, output = ``completion_tokens``), followed by one
  ``command`` (or ``test``) event per bash action: v1 parses the single ```` ```bash ````
  block of the content as mini-swe-agent does; v1.1 reads ``extra.actions[].command``.
* The observation that answers an action (v1: the next ``user`` message with
  ``<returncode>N</returncode><output>…``; v1.1: ``user``/``tool`` messages, matched by
  ``tool_call_id`` when present, else in order) is merged into the command event, which
  is placed at the observation's position (a prefix never holds a result early):
  ``exit_code``, the message in ``extra["observation"]`` and the output text (inside
  ``<output>``, or v1.1's ``raw_output``) in ``extra["output"]``, test counts; it is a safe boundary.
  The submission turn's observation (a bare diff, no returncode tag) leaves ``exit_code``
  None. A user message that answers an assistant message without a usable action is the
  agent's format-error feedback: a ``message`` event with ``is_error``; in v1.1 such a
  message (``extra.interrupt_type`` ``FormatError``) also carries the billed response,
  which becomes a ``model_call`` before it.
* v1.1 with tool-calling models: observations are ``tool`` messages answering by
  ``tool_call_id``; with the Responses API the model's turn is the response object itself
  (``object`` ``response``: text of its ``message`` outputs, ``input_tokens`` /
  ``output_tokens`` usage) and results are ``function_call_output`` items (``call_id``).
* ``exit`` messages (v1.1) → ``other``, except the ``Submitted`` exit that answers the
  submit command (mini >= 2 raises on the submit command's output, so no tool message
  does): it is merged into that command as its result (``extra["output"]`` the
  submission, ``extra["exit_message"]``), which makes it a safe boundary. A command no
  message answers is marked ``extra["incomplete"]``.

Steps: mini-SWE-agent runs one user turn, so every event is step 1 (one step per model
response would contradict the paper's logical steps); a later ``user`` message that is
not an observation would open step 2.

Times: v1 records only the response ``created`` second per model call (→ ``start`` of
the ``model_call``); v1.1 records ``extra.timestamp`` on model and observation messages
(→ ``end`` of the model call / command). Nothing else is timed, and nothing is invented.

Run-level ``meta``: exit status, whether a submission is present, model stats, mini
version, and the SWE-bench verdict from a ``<stem>.report.json`` sibling when one exists.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from features.readers.errors import warn_unknown
from features.readers.events import apply_test_counts, classify_command, mark_tool_return
from features.readers.fields import (
    Loc,
    float_field,
    get,
    int_field,
    message_text,
    repo_from_instance_id,
    without,
)
from features.readers.files import stem, strip_compression
from features.readers.stream import StreamParser, read_document
from features.readers.strict_json import load_json
from features.schema import Event, EventKind, Trajectory
from features.shell import split_command

FORMAT = "mini-swe-agent"
VERSIONS = ("mini-swe-agent-1", "mini-swe-agent-1.1")

_ACTION_RE = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
_RC_RE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")
_OUT_RE = re.compile(r"<output>\n?(.*?)</output>", re.DOTALL)
_ROLES = {"system", "user", "assistant", "tool", "exit"}
_RESPONSE = ("extra", "response")
_MISSING = object()


def looks_like(doc: Any) -> bool:
    """Whether a parsed JSON document is a mini-SWE-agent trajectory."""
    if not isinstance(doc, dict):
        return False
    tf = doc.get("trajectory_format")
    if isinstance(tf, str) and tf.startswith("mini-swe-agent"):
        return True
    return isinstance(doc.get("messages"), list) and isinstance(doc.get("info"), dict) and (
        "mini_version" in doc["info"]
    )


_MINOR_OF_V11 = re.compile(r"^mini-swe-agent-1\.\d+$")
_SUBMIT_MARKERS = ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "MINI_SWE_AGENT_FINAL_OUTPUT")


def _is_v11(version: str | None) -> bool:
    """The 1.1 layout (mini >= 2.0): ``mini-swe-agent-1.N`` for N >= 1, and any later
    major version (read as the latest layout, with a warning)."""
    if version is None or version == "mini-swe-agent-1":
        return False
    return bool(_MINOR_OF_V11.match(version)) or version not in VERSIONS


def _role(m: dict[str, Any], mloc: Loc) -> str:
    """A message's role; the Responses API's response objects (the model's turn) and
    ``function_call_output`` items (a tool result) carry none."""
    if "role" not in m:
        if m.get("object") == "response":
            return "assistant"
        if m.get("type") == "function_call_output":
            return "tool"
    return get(m, "role", str, mloc, required=True)


def _content(m: dict[str, Any], role: str, mloc: Loc) -> str:
    if m.get("object") == "response":  # output items: messages' text parts
        out = get(m, "output", list, mloc, default=[])
        return "\n".join(message_text(o.get("content"), mloc, "output", j, "content")
                         for j, o in enumerate(out)
                         if isinstance(o, dict) and o.get("type") == "message")
    if m.get("type") == "function_call_output" and "content" not in m:
        return message_text(m.get("output"), mloc, "output")
    return message_text(m.get("content"), mloc, "content")


def _usage(response: Any, loc: Loc, *at: str) -> tuple[int | None, int | None, int | None]:
    """(input, cached, output) tokens of a LiteLLM chat completion (``prompt_tokens``...) or
    a Responses API response (``input_tokens``...); ``loc / at...`` is the response."""
    if not isinstance(response, dict):
        return None, None, None
    usage = response.get("usage")
    if not isinstance(usage, dict):
        return None, None, None
    chat = "prompt_tokens" in usage or "completion_tokens" in usage
    ik, ok, dk = (("prompt_tokens", "completion_tokens", "prompt_tokens_details") if chat
                  else ("input_tokens", "output_tokens", "input_tokens_details"))
    inp = int_field(usage.get(ik), loc, *at, "usage", ik)
    out = int_field(usage.get(ok), loc, *at, "usage", ok)
    details = usage.get(dk)
    cached = None
    if isinstance(details, dict):
        cached = int_field(details.get("cached_tokens"), loc, *at, "usage", dk, "cached_tokens")
    if cached is None and usage.get("cache_read_input_tokens") is not None:
        cached = int_field(usage.get("cache_read_input_tokens"), loc, *at, "usage",
                           "cache_read_input_tokens")
    return inp, cached, out


def _model_call(response: Any, mloc: Loc, at: tuple[str, ...], mextra: dict[str, Any],
                v11: bool, step: int, text: str | None, base: dict[str, Any]) -> Event:
    """The model call of a message at ``mloc`` whose response sits at ``mloc / at...``."""
    inp, cached, out = _usage(response, mloc, *at)
    created = response.get("created", response.get("created_at")) if isinstance(
        response, dict) else None
    ts = float_field(mextra.get("timestamp"), mloc, "extra", "timestamp") if v11 else None
    return Event(index=0, kind=EventKind.MODEL_CALL, step=step,
                 start=None if v11 else float_field(created, mloc, *at, "created"),
                 end=ts, input_tokens=inp, cached_tokens=cached, output_tokens=out,
                 text=text, extra={**base, **mextra})


def _submitting(pending: list[Event], mextra: dict[str, Any]) -> Event | None:
    """The command a ``Submitted`` exit message answers (mini >= 2 raises on the submit
    command's output, so no tool message answers it): the pending one that prints the
    submit marker, else the only pending one."""
    if mextra.get("exit_status") != "Submitted" or not pending:
        return None
    marked = [e for e in pending if any(k in (e.command or "") for k in _SUBMIT_MARKERS)]
    if marked:
        return marked[0]
    return pending[0] if len(pending) == 1 else None


def _merge_exit(ev: Event, content: str, mextra: dict[str, Any], mloc: Loc, v11: bool,
                i: int) -> None:
    ev.extra["observation_index"] = i
    ev.extra["observation"] = content
    ev.extra["exit_message"] = mextra
    sub = mextra.get("submission")
    ev.extra["output"] = sub if isinstance(sub, str) else content
    if v11 and mextra.get("timestamp") is not None:
        ev.end = float_field(mextra.get("timestamp"), mloc, "extra", "timestamp")
    mark_tool_return(ev)


def _command_event(cmd: str, step: int, extra: dict[str, Any]) -> Event:
    """A command (or test) event."""
    argv = split_command(cmd)
    return Event(index=0, kind=classify_command(cmd, argv), step=step, command=cmd, argv=argv,
                 extra=extra)


class MiniSweAgentParser(StreamParser):
    """Reader of a mini-SWE-agent ``.traj.json`` (see the module docstring): one record per
    message."""

    FORMAT = FORMAT
    LAYOUT = "json"

    def __init__(self, *, source: str | Path = "<stream>", task_id: str | None = None,
                 repo: str | None = None) -> None:
        super().__init__(source=source, task_id=task_id, repo=repo)
        self._doc: dict[str, Any] = {}
        self._version: str | None = None
        self._v11 = False
        self._info: dict[str, Any] = {}
        self._mroot = Loc(self.source) / "messages"
        self._commands: list[Event] = []
        self._step = 1
        self._pending: list[Event] = []  # commands of the last model response awaiting a result
        self._by_call_id: dict[str, Event] = {}
        self._seen_assistant = False
        self._last_assistant_had_action = False

    def records(self, doc: Any) -> list[Any]:
        root = Loc(self.source)
        if not isinstance(doc, dict):
            raise root.error(f"expected a JSON object at top level, got {type(doc).__name__}")
        self._doc = doc
        version = self._version = get(doc, "trajectory_format", str, root)
        self._v11 = _is_v11(version)
        if version is not None and version not in VERSIONS and not _MINOR_OF_V11.match(
                version):
            warn_unknown(self.source, "field trajectory_format",
                         f"mini-swe-agent version {version!r}")
        messages = get(doc, "messages", list, root, required=True)
        self._info = get(doc, "info", dict, root, default={})
        return messages

    def on_record(self, m: Any, i: int, arrival: float | None) -> None:
        mloc = self._mroot / i
        if type(m) is not dict:
            raise mloc.error(f"expected object, got {type(m).__name__}")
        v11, step = self._v11, self._step
        role = _role(m, mloc)
        content = _content(m, role, mloc)
        mextra = get(m, "extra", dict, mloc, default={})
        base = {"message_index": i, "role": role, **m}
        base["role"] = role
        base.pop("content", None)
        base.pop("extra", None)
        place = self.place
        if role == "assistant":
            self._seen_assistant = True
            if m.get("object") == "response":
                place(_model_call(m, mloc, (), mextra, v11, step, content, base))
            else:
                place(_model_call(mextra.get("response"), mloc, _RESPONSE, mextra, v11, step,
                                  content, base))
            cmds: list[tuple[str, str | None]] = []
            if v11 or "actions" in mextra:
                actions = get(mextra, "actions", list, mloc, "extra", default=[])
                for j, a in enumerate(actions):
                    if type(a) is not dict:
                        raise (mloc / "extra" / "actions" / j).error("expected object")
                    cmd = get(a, "command", str, mloc, "extra", "actions", j, required=True)
                    tcid = get(a, "tool_call_id", str, mloc, "extra", "actions", j)
                    cmds.append((cmd, tcid))
            else:
                found = _ACTION_RE.findall(content)
                if len(found) == 1:
                    cmds.append((found[0].strip(), None))
            self._pending = pending = []
            for cmd, tcid in cmds:
                ev = _command_event(cmd, step, {"message_index": i, "tool_call_id": tcid}
                                    if tcid else {"message_index": i})
                place(ev)
                self._commands.append(ev)
                pending.append(ev)
                if tcid:
                    self._by_call_id[tcid] = ev
            self._last_assistant_had_action = bool(cmds)
        elif role == "user" and mextra.get("interrupt_type") == "FormatError":
            # mini >= 2: a billed response whose action could not be parsed
            response = mextra.get("response")
            if isinstance(response, dict):
                place(_model_call(response, mloc, _RESPONSE, mextra, v11, step, None, base))
            place(Event(index=0, kind=EventKind.MESSAGE, step=step, text=content,
                        is_error=True, extra={**base, "format_error_feedback": True,
                                              **mextra}))
        elif role in ("user", "tool") and self._seen_assistant:
            pending = self._pending
            tcid = m.get("tool_call_id", m.get("call_id"))
            target = None
            if isinstance(tcid, str) and tcid in self._by_call_id:
                target = self._by_call_id.pop(tcid)
                if target in pending:
                    pending.remove(target)
            elif pending:
                target = pending.pop(0)
            if target is not None:
                _merge_observation(target, content, mextra, mloc, v11, i)
            elif not self._last_assistant_had_action and role == "user":
                place(Event(index=0, kind=EventKind.MESSAGE, step=step, text=content,
                            is_error=True,
                            extra={**base, "format_error_feedback": True, **mextra}))
                self._last_assistant_had_action = True  # only the first reply is feedback
            else:
                # a fresh user input after the agent acted: a new logical step
                self._step = step = step + 1
                place(Event(index=0, kind=EventKind.MESSAGE, step=step, text=content,
                            extra={**base, **mextra}))
                self._seen_assistant = False
        elif role == "exit" and (target := _submitting(self._pending, mextra)) is not None:
            self._pending.remove(target)
            _merge_exit(target, content, mextra, mloc, v11, i)
        elif role == "exit":
            place(Event(index=0, kind=EventKind.OTHER, step=step, text=content,
                        extra={**base, **mextra}))
        else:
            if role not in _ROLES:
                warn_unknown(self.source, f"field messages[{i}].role", f"role {role!r}")
                kind = EventKind.OTHER
            else:
                kind = EventKind.MESSAGE
            place(Event(index=0, kind=kind, step=step, text=content,
                        extra={**base, **mextra}))

    def position(self, ev: Event) -> tuple[int, int]:
        """A command sits where its observation arrived; a model call before its
        commands."""
        pos = ev.extra.get("observation_index", ev.extra["message_index"])
        return pos, 0 if ev.kind == EventKind.MODEL_CALL else 1

    def on_end(self) -> None:
        for ev in self._commands:
            if "observation_index" not in ev.extra:
                ev.extra["incomplete"] = True
        self.release_placed()

    def on_final(self) -> None:
        doc, info = self._doc, self._info
        sub = info.get("submission")
        meta = self.meta
        meta.update({
            "trajectory_format": self._version,
            "exit_status": info.get("exit_status"),
            "submission_present": isinstance(sub, str) and bool(sub.strip()),
            "model_stats": info.get("model_stats"),
            "mini_version": info.get("mini_version"),
            "info": without(info, "config"),
            "config": info.get("config"),
            "instance_id": doc.get("instance_id"),
            **{f"top_{k}": v for k, v in doc.items()
               if k not in ("messages", "info", "trajectory_format", "instance_id")},
        })
        report = _report_path(self.source)
        if report is not None:
            rep_doc = load_json(report)
            if not isinstance(rep_doc, dict):
                raise Loc(report).error("expected a JSON object")
            iid = doc.get("instance_id")
            if isinstance(iid, str) and isinstance(rep_doc.get(iid), dict):
                rep_doc = rep_doc[iid]  # SWE-bench harness reports keyed by instance id
            resolved = rep_doc.get("resolved")
            if resolved is not None and not isinstance(resolved, bool):
                raise (Loc(report) / "resolved").error("expected boolean")
            meta["verdict"] = {"resolved": resolved, "report_path": report.name, **rep_doc}

    def task_default(self) -> str:
        iid = self._doc.get("instance_id")
        return iid if isinstance(iid, str) and iid else stem(self.source)

    def repo_default(self) -> str | None:
        iid = self._doc.get("instance_id")
        return repo_from_instance_id(iid if isinstance(iid, str) else
                                     (self.task_id or self.task_default()))


def read_mini_swe_agent(
    path: str | Path, *, task_id: str | None = None, repo: str | None = None
) -> Trajectory:
    """Read a mini-SWE-agent ``.traj.json`` into a :class:`Trajectory` (see module doc)."""
    return read_document(MiniSweAgentParser(source=path, task_id=task_id, repo=repo), path)


def _merge_observation(ev: Event, content: str, mextra: dict[str, Any], mloc: Loc, v11: bool,
                       i: int) -> None:
    ev.extra["observation_index"] = i
    ev.extra["observation"] = content
    if mextra:
        ev.extra["observation_extra"] = mextra
    rc = None
    if "returncode" in mextra:
        rc = int_field(mextra.get("returncode"), mloc, "extra", "returncode")
    else:
        m = _RC_RE.search(content)
        if m:
            rc = int(m.group(1))
    ev.exit_code = rc
    if v11 and mextra.get("timestamp") is not None:
        ev.end = float_field(mextra.get("timestamp"), mloc, "extra", "timestamp")
    if mextra.get("exception_info"):
        ev.is_error = True
    out = mextra.get("raw_output")
    if not isinstance(out, str):
        m2 = _OUT_RE.search(content)
        out = m2.group(1) if m2 else content
    ev.extra["output"] = out
    apply_test_counts(ev, out)
    mark_tool_return(ev)


def _report_path(path: Path) -> Path | None:
    name = strip_compression(path.name)
    for suf in (".traj.json", ".json"):
        if name.endswith(suf):
            cand = path.with_name(name[: -len(suf)] + ".report.json")
            if cand.exists() and cand != path:
                return cand
    return None

