"""The program brains: an LLM-free family's program run step by step behind a real runtime.

One design for every family whose standalone agent is a step program
(:class:`~oracle.agents.program.ProgramChild`: ``depres``, ``cbuild``, ``migrate``,
``bisect``). The brain
asks the runtime (Codex CLI, Claude Code) to run **each step of the family's program as one
real shell command** — the program's ``step`` mode (``agent.py ... step --step K --facts
JSON``), which runs that step's real tools (pip, make and gcc, the probes) in the runtime's
working directory and prints what it did, the facts it found and, when the step finished, one
:data:`~oracle.agents.program.STEP_END` line carrying every fact. The brain only sequences.

It decides from the conversation alone, never from the workspace: the commands the steps call
for are replayed over the transcript's shell calls in order — the first command is step 1
with no facts; a call that matches the command expected next, and has a result with a
``STEP_END`` line, moves on to the next step with that line's facts on its command line —
and the first expected command without a result is the next step. So the facts travel in the
transcript, from one step's output to the next step's command: a resumed session (restored
from the session file captured at a boundary, the workspace from the checkpoint) re-derives
them from what its transcript holds, as the standalone agent does from its preserved facts,
and a fresh session starts over. Calls the replay did not ask for, or without a result (a
killed call), are passed over; a step whose output has no ``STEP_END`` line failed, and the
brain finishes saying so. After the last step it finishes.

Long steps under Codex: its ``exec_command`` returns after at most 30 s with ``Process running
with session ID N``; the brain then polls the session (``write_stdin`` with no input) until the
process exits, and the joined outputs are the command's output (:func:`shell_outputs`). A
poll whose session is gone (a resumed process never had it) leaves the command unfinished, so
it is issued again.

The task reaches the brain in the first user prompt, as a tagged JSON header
(:func:`task_prompt`): the family, the program, the interpreter, the project root for its
imports, the task and the seed of the program's seeded choices. Step ``k`` draws from a stream
of its own (the seed and ``k``), so with one seed per task every run of a task makes the same
choices at every step, wherever it resumed: a deterministic model. Each step is one tool call,
so one candidate boundary (tool-call granularity); the standalone agent at ``turn``
granularity has the same boundaries, plus none after its final step.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from features.readers.codex_rollout import parse_output_header
from oracle.agents.model_server.brain import BrainError, StepBrain
from oracle.agents.model_server.conversation import Call, Conversation, Shell, Step
from oracle.agents.program import STEP_END
from oracle.protocol import TaskSpec

__all__ = ["PROGRAM_FAMILIES", "ProgramBrain", "ProgramTask", "running_session", "shell_outputs",
           "task_prompt"]

_TAG = re.compile(r"<ripplecp-program>(.*?)</ripplecp-program>", re.S)
_ROOT = Path(__file__).resolve().parents[3]
#: family -> its step program (the standalone agent's script), relative to the project root
PROGRAM_FAMILIES: dict[str, str] = {f: f"oracle/agents/{f}/agent.py"
                                    for f in ("depres", "cbuild", "migrate", "bisect")}
#: seconds a runtime is asked to wait for one step (Codex waits 30 s at most, then is polled)
STEP_TIMEOUT_S = 600.0
#: task params that are the runtime's business, not the program's
_RUNTIME_PARAMS = ("prompt", "resume_prompt", "brain_seed")


def running_session(output: str) -> str | None:
    """The session id when a tool output says its process is still running (Codex's unified
    exec: ``Process running with session ID N``), else None."""
    header = parse_output_header(output)
    return None if header is None else header.get("session")


@dataclass(frozen=True)
class ProgramTask:
    """What the brain needs to run a task's program (sent in the prompt header)."""

    family: str
    script: str
    python: str
    root: str
    seed: int
    task: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_prompt(cls, text: str) -> ProgramTask | None:
        """The task in a prompt's ``<ripplecp-program>`` header, or None when it has none."""
        m = _TAG.search(text)
        if m is None:
            return None
        try:
            obj = json.loads(m.group(1))
            return cls(str(obj["family"]), str(obj["script"]), str(obj["python"]),
                       str(obj["root"]), int(obj["seed"]), dict(obj["task"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise BrainError(f"program brain: bad <ripplecp-program> header: {exc}") from None

    def command(self, step: int, facts: Mapping[str, Any]) -> str:
        """The shell command running step ``step`` with ``facts`` in the runtime's cwd."""
        argv = ["env", f"PYTHONPATH={self.root}", self.python, str(Path(self.root) / self.script),
                "--workspace", ".", "--task-json", json.dumps(self.task, sort_keys=True),
                "--seed", str(self.seed), "step", "--step", str(step)]
        if facts:
            argv += ["--facts", json.dumps(facts, sort_keys=True)]
        return shlex.join(argv)


def task_prompt(task: TaskSpec, *, seed: int, python: str) -> str:
    """The first prompt of a program task (its family: ``task.family``): plain words and the
    header the brain reads. The header carries the task's id, repository and params (less
    the runtime's own: the prompts, the brain seed); ``seed`` seeds the program's choices."""
    family = task.family
    if family not in PROGRAM_FAMILIES:
        raise ValueError(f"task {task.task_id}: no step program for family {family!r}; "
                         f"choose from {', '.join(PROGRAM_FAMILIES)}")
    params = {k: v for k, v in task.params.items() if k not in _RUNTIME_PARAMS}
    header = ProgramTask(family, PROGRAM_FAMILIES[family], python, str(_ROOT), int(seed),
                         {"task_id": task.task_id, "repo": task.repo, "params": params})
    return (f"Complete the {family} task in the current directory by running each step of "
            f"its program ({header.script} ... step --step K) in order, carrying the facts "
            f"each step prints into the next.\n"
            f"<ripplecp-program>{json.dumps(asdict(header), sort_keys=True)}</ripplecp-program>")


def shell_outputs(conversation: Conversation) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """The finished shell commands of the transcript as ``(command, output)``, in the order
    they finished, and the sessions still running (session id -> command).

    A Codex command that outlived its wait is finished by the polls of its session
    (``write_stdin``); their outputs are joined to its own. A poll that says neither that the
    process runs on nor how it exited (its session is gone) drops the command: unfinished.
    """
    results = conversation.results()
    done: list[tuple[str, str]] = []
    running: dict[str, tuple[str, str]] = {}
    for c in conversation.tool_calls():
        res = results.get(c.id)
        if res is None:
            continue
        if c.kind == "shell" and c.command:
            cmd, out = c.command, res.output
        elif c.name == "write_stdin" and str(c.arguments.get("session_id")) in running:
            sid = str(c.arguments.get("session_id"))
            cmd, out = running.pop(sid)
            if running_session(res.output) is None and res.exit_code is None:
                continue  # the session is gone: the command never finished
            out += res.output
        else:
            continue
        sid = running_session(res.output)
        if sid is not None:
            running[sid] = (cmd, out)
        else:
            done.append((cmd, out))
    return done, {sid: cmd for sid, (cmd, _) in running.items()}


def _step_end(output: str, step: int) -> dict | None:
    """The ``STEP_END`` line of step ``step`` in a command's output (the last one), or None."""
    for line in reversed(output.strip().splitlines()):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("type") == STEP_END and obj.get("step") == step:
            return obj
    return None


class ProgramBrain(StepBrain):
    """Runs the program of the family named ``family``, step by step (the module docstring)."""

    name = "program"

    def __init__(self, family: str) -> None:
        if family not in PROGRAM_FAMILIES:
            raise ValueError(f"no program brain for {family!r}; choose from "
                             f"{', '.join(PROGRAM_FAMILIES)}")
        self.name = family  # type: ignore[misc] - the audit log names the family's brain

    def next_step(self, conversation: Conversation) -> Step:
        task = next((t for _, text in conversation.prompts()
                     if (t := ProgramTask.from_prompt(text)) is not None), None)
        if task is None:
            raise BrainError(f"{self.name} brain: no <ripplecp-program> task header in any prompt")
        if task.family != self.name:
            raise BrainError(f"{self.name} brain: the task header is a {task.family} task")
        done, running = shell_outputs(conversation)
        if running:  # a step outlived the runtime's wait: poll it until it exits
            sid = next(iter(running))
            return Step((Call("write_stdin", {"session_id": int(sid) if sid.isdigit() else sid,
                                              "chars": "",
                                              "yield_time_ms": int(STEP_TIMEOUT_S * 1000)}),),
                        "", f"{self.name}/poll")
        k, facts = 1, {}
        expected = task.command(k, facts)
        for issued, output in done:
            if issued != expected:
                continue
            end = _step_end(output, k)
            if end is None:
                tail = output.strip()[-1500:]
                return Step((), f"step {k} failed:\n{tail}", f"{self.name}/failed/{k}")
            facts = dict(end.get("facts") or {})
            if end.get("last"):
                return Step((), f"done: {k} steps", f"{self.name}/done/{k}")
            k += 1
            expected = task.command(k, facts)
        return Step((Shell(expected, STEP_TIMEOUT_S),), "", f"{self.name}/step/{k}")
