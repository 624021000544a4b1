"""LLM-free agents as programs: the child side of their JSON-line protocol, and the adapter.

Every LLM-free agent of the toolkit (:mod:`oracle.agents.repair`, :mod:`oracle.agents.depres`,
:mod:`oracle.agents.cbuild`, :mod:`oracle.agents.migrate`) is a real program that speaks the
scripted agent's JSON-line protocol (:func:`oracle.agents.scripted.scripted_parse_line`) on
stdout and runs its steps as real subprocesses in the workspace. This module holds what
they share, once:

* :class:`ProgramChild` (child side, standard library only, so the program starts fast):
  the task file, seed and restore directory; ``emit``/``fact``/``event``/``tool`` for the
  protocol (a tool event is a candidate boundary after the tool returns: at ``turn``
  granularity only the last one of a step, at ``tool_call`` every one); ``run_cmd`` for
  timed subprocesses; :meth:`ProgramChild.run`, the step loop: a resumed run re-orients
  (lists the workspace), then runs every step the preserved transcript does not mark done,
  each step re-deriving what the preserved facts and the restored workspace lack.
* :func:`program_agent` (parent side): the program as a
  :class:`~oracle.agents.command_line.CommandLineAgent` (``start`` / ``resume`` from the
  preserved transcript and facts), so a fail-stop is a real SIGKILL of its process group.
* ``step`` mode (:meth:`ProgramChild.run_step`): one step only, the facts given on the
  command line (``--facts JSON``), the task too (``--task-json``); what it did is printed as
  short plain lines, the facts it found as protocol ``fact`` lines, and, when the step
  finished, one last :data:`STEP_END` line carrying every fact. This is how a brain behind a
  real runtime (:mod:`oracle.agents.model_server.program`) runs the program: one shell command per
  step, the facts carried from one step's output to the next step's command line.

Step contract of :meth:`ProgramChild.run`: step ``k`` (1-based) of ``steps()`` ends with
one candidate boundary at turn granularity, its last tool event (``done=True`` marks the
step done just before that event, so the transcript preserved at boundary ``k`` says so);
the last step ends without a boundary (it is the final verification), followed by the
final message.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # parent side only: the child imports the standard library alone
    from oracle.agents.command_line import CommandLineAgent

__all__ = ["GRANULARITIES", "STEP_END", "CmdResult", "ProgramChild", "program_agent",
           "repository_names", "seeded", "sha"]

GRANULARITIES = ("turn", "tool_call")
#: ``type`` of the last line a step-mode run prints when its step finished:
#: ``{"type": STEP_END, "step": k, "name": ..., "last": bool, "facts": {...every fact...}}``
STEP_END = "step_end"
_ROOT = Path(__file__).resolve().parents[2]


def sha(text: str | bytes) -> str:
    """sha256 hex digest of text (utf-8) or bytes: the payload digest of an observation."""
    data = text if isinstance(text, bytes) else text.encode("utf-8", errors="replace")
    return hashlib.sha256(data).hexdigest()


def seeded(*key: object) -> random.Random:
    """A generator seeded by a sha256 of ``key`` (task generators: one stream per item, and
    streams of neighbouring keys are independent)."""
    digest = hashlib.sha256("/".join(map(str, key)).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def repository_names(declared: Sequence[str], n: int) -> list[str]:
    """The first ``n`` repository names of a task generator: the ``declared`` ones, then
    generated variants named after them (``codec2``, ``geom2``, ..., ``codec3``, ...); a
    variant is its own repository (the generators draw its contents from its name and the
    seed), so ``--repos`` is not bounded by the declared list."""
    if n < 1 or not declared:
        raise ValueError(f"need at least one repository and one declared name, got {n}")
    d = len(declared)
    return [declared[i] if i < d else f"{declared[i % d]}{i // d + 1}" for i in range(n)]


class CmdResult(NamedTuple):
    """A finished subprocess: exit status (-9 on timeout), stdout, stderr, seconds."""

    code: int
    out: str
    err: str
    dur: float


class ProgramChild:
    """The agent program's state and protocol (see the module docstring)."""

    #: program name for the command line (``python SCRIPT``)
    prog = "agent"

    def __init__(self, args: argparse.Namespace) -> None:
        self.ws = Path(args.workspace).resolve()
        task = json.loads(args.task_json if args.task_json else Path(args.task_file).read_text())
        self.task_id: str = task["task_id"]
        self.repo: str = task.get("repo", "")
        self.params: dict[str, Any] = dict(task.get("params") or {})
        self.gran: str = args.granularity
        self.seed = int(args.seed)
        self.rng = random.Random(self.seed)
        self.boundary = 0
        self.transcript: list[dict] = []
        self.facts: dict[str, Any] = {}
        self.resumed = args.mode == "resume"
        self.step_mode = args.mode == "step"
        if self.step_mode:  # the step's own seeded stream: the same choices wherever a run resumed
            self.facts = json.loads(args.facts or "{}")
            self.rng = seeded(self.seed, "step", args.step)
        if self.resumed:
            rdir = Path(args.restore_dir)
            self.transcript = json.loads((rdir / "transcript.json").read_text())
            self.facts = json.loads((rdir / "facts.json").read_text())
            self.boundary = int((rdir / "boundary").read_text())

    # -- protocol ---------------------------------------------------------------------
    def emit(self, obj: dict) -> None:
        """Write one protocol line (step mode: a short plain line for an event, a JSON line
        for a fact, nothing for boundaries and step marks)."""
        if self.step_mode:
            line = self.plain(obj)
            if line is None:
                return
        else:
            line = json.dumps(obj)
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def fact(self, key: str, value: Any) -> None:
        """Record a discovered fact (preserved at the next boundary)."""
        self.facts[key] = value
        self.emit({"type": "fact", "key": key, "value": value})

    def plain(self, obj: dict) -> str | None:
        """A protocol line as step mode prints it (None: not printed): facts as JSON, an event
        as one short line. Nothing that varies between runs of the same choices (durations,
        the workspace's path), so a rerun's output, and its digest, is the same."""
        if obj.get("type") == "fact":
            return json.dumps(obj, sort_keys=True)
        if obj.get("type") != "event" or obj.get("kind") == "message":
            return None
        what = obj.get("command") or " ".join(obj.get("paths_written") or ())
        code = "" if obj.get("exit_code") is None else f" -> exit {obj['exit_code']}"
        text = f"  ({obj['text']})" if obj.get("text") else ""
        return f"[{obj.get('phase')}] {obj['kind']}: {what.replace(str(self.ws), '.')}{code}{text}"

    def boundary_passed(self) -> None:
        self.boundary += 1
        self.emit({"type": "boundary", "n": self.boundary})

    def step_done(self, step: int) -> None:
        self.emit({"type": "step_done", "step": step})

    def event(self, step: int, kind: str, *, last: bool, duration: float, boundary: bool = True,
              done: bool = False, **fields: Any) -> None:
        """Emit one event; after a tool returns it is a candidate boundary (tool_call
        granularity: every one; turn: the step's last). ``done`` marks the step done first."""
        safe = boundary and (self.gran == "tool_call" or last)
        if done:
            self.step_done(step)
        ev = {"type": "event", "kind": kind, "agent_step": step, "duration": duration,
              "safe_boundary": safe,
              "boundary_kind": ("test" if kind == "test" else "tool_return") if safe else None,
              "turn_end": last, **fields}
        self.emit(ev)
        if safe:
            self.boundary_passed()

    def run_cmd(self, argv: Sequence[str], *, timeout: float = 120.0,
                env: dict[str, str] | None = None, cwd: Path | None = None) -> CmdResult:
        """Run ``argv`` (no shell) in the workspace; a timeout gives exit status -9."""
        t0 = time.monotonic()
        try:
            p = subprocess.run(list(argv), cwd=cwd or self.ws, capture_output=True, text=True,
                               timeout=timeout, env=env, stdin=subprocess.DEVNULL)
            code, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as exc:
            code = -9
            out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            err = "timeout"
        return CmdResult(code, out, err, time.monotonic() - t0)

    def tool(self, step: int, argv: Sequence[str], *, kind: str = "command", last: bool = False,
             boundary: bool = True, done: bool = False, phase: str, timeout: float = 120.0,
             env: dict[str, str] | None = None, shown: Sequence[str] | None = None,
             **fields: Any) -> CmdResult:
        """Run a tool (a subprocess) and emit its event (``shown``: the argv to record)."""
        res = self.run_cmd(argv, timeout=timeout, env=env)
        self.record(step, shown if shown is not None else argv, res, kind=kind, last=last,
                    boundary=boundary, done=done, phase=phase, **fields)
        return res

    def record(self, step: int, argv: Sequence[str], res: CmdResult, *, kind: str = "command",
               last: bool = False, boundary: bool = True, done: bool = False, phase: str,
               **fields: Any) -> None:
        """Emit the event of a finished command (when its fields depend on the result)."""
        rec = list(argv)
        self.event(step, kind, last=last, boundary=boundary, done=done, duration=res.dur,
                   command=" ".join(rec), argv=rec, exit_code=res.code,
                   payload_digest=sha(res.out + res.err), phase=phase, **fields)

    def write_file(self, step: int, rel: str, data: str | bytes, *, last: bool = False,
                   boundary: bool = True, done: bool = False, phase: str, **fields: Any) -> float:
        """Write a workspace file atomically (temp + rename) and emit the file change."""
        t0 = time.monotonic()
        path = self.ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data)
        tmp.replace(path)
        dur = time.monotonic() - t0
        self.event(step, "file_change", last=last, boundary=boundary, done=done, duration=dur,
                   paths_written=[rel], bytes_written=len(data), phase=phase, **fields)
        return dur

    # -- the step loop -----------------------------------------------------------------
    def steps(self) -> list[str]:
        """Names of the task's logical steps, in order (method ``step_<name>(k)`` each)."""
        raise NotImplementedError

    def done_steps(self) -> set[int]:
        return {int(e["step"]) for e in self.transcript if e.get("type") == "step_done"}

    def orient(self, step: int) -> None:
        """Re-orientation of a resumed run: list the workspace (no candidate boundary)."""
        self.tool(step, ["ls", "-la", "."], boundary=False, phase="orient", paths_read=["."])

    def run(self) -> int:
        """Run every step not marked done (a resumed run re-orients first), then say done."""
        names = self.steps()
        done = self.done_steps()
        if self.resumed:
            self.orient(min(len(done) + 1, len(names)))
        for k, name in enumerate(names, 1):
            if k not in done:
                getattr(self, f"step_{name}")(k)  # a name may repeat (one method, k-th step)
        self.emit({"type": "event", "kind": "message", "agent_step": len(names),
                   "text": "done", "phase": "final", "turn_end": True})
        return 0

    def run_step(self, k: int) -> int:
        """Step mode: run step ``k`` alone, then print the :data:`STEP_END` line."""
        names = self.steps()
        if not 1 <= k <= len(names):
            raise SystemExit(f"{self.prog}: --step {k}: the task has steps 1..{len(names)}")
        getattr(self, f"step_{names[k - 1]}")(k)
        sys.stdout.write(json.dumps({"type": STEP_END, "step": k, "name": names[k - 1],
                                     "last": k == len(names), "facts": self.facts},
                                    sort_keys=True) + "\n")
        sys.stdout.flush()
        return 0

    @classmethod
    def main(cls, argv: list[str] | None = None) -> int:
        """Entry point of the agent program: ``start``, ``resume --restore-dir DIR``, or
        ``step --step K [--facts JSON]`` (the task in ``--task-file`` or ``--task-json``)."""
        ap = argparse.ArgumentParser(prog=f"python {cls.prog}")
        ap.add_argument("--workspace", required=True)
        task = ap.add_mutually_exclusive_group(required=True)
        task.add_argument("--task-file")
        task.add_argument("--task-json")
        ap.add_argument("--seed", type=int, required=True)
        ap.add_argument("--granularity", choices=GRANULARITIES, default="turn")
        ap.add_argument("mode", choices=["start", "resume", "step"])
        ap.add_argument("--restore-dir")
        ap.add_argument("--step", type=int)
        ap.add_argument("--facts")
        args = ap.parse_args(argv)
        if args.mode == "resume" and not args.restore_dir:
            ap.error("resume needs --restore-dir")
        if (args.mode == "step") != (args.step is not None):
            ap.error("--step K goes with the step mode, and the step mode needs it")
        if args.facts is not None and args.mode != "step":
            ap.error("--facts goes with the step mode")
        child = cls(args)
        return child.run_step(args.step) if args.mode == "step" else child.run()


def program_agent(name: str, script: Path, make_tasks: Callable[..., list], *,
                  granularity: str = "turn", python: str | None = None) -> CommandLineAgent:
    """The agent program ``script`` as a :class:`~oracle.agents.command_line.CommandLineAgent`.

    It runs as a script (not ``-m``) so the workspace, which may hold modules named like the
    project's or the standard library's, is never first on the agent's own ``sys.path``.
    """
    from oracle.agents.command_line import CommandLineAgent
    from oracle.agents.scripted import scripted_parse_line

    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be 'turn' or 'tool_call', got {granularity!r}")
    base = [python or sys.executable, str(script), "--workspace", "{workspace}",
            "--task-file", "{task_file}", "--seed", "{seed}", "--granularity", granularity]
    agent = CommandLineAgent(
        [*base, "start"], [*base, "resume", "--restore-dir", "{restore_dir}"],
        scripted_parse_line, name=name,
        env={"PYTHONPATH": os.pathsep.join(p for p in [str(_ROOT), os.environ.get("PYTHONPATH", "")] if p)},
    )
    agent.granularity = granularity  # type: ignore[attr-defined]
    agent.make_tasks = make_tasks  # type: ignore[attr-defined]
    return agent
