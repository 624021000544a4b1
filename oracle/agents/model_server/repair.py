"""The repair brain: the LLM-free repair agent's decisions, taken from the runtime's transcript.

A runtime (Codex CLI, Claude Code, mini-swe-agent) driven by this brain repairs a stdlib
module carrying an injected bug, as the standalone repair agent
(:mod:`oracle.agents.repair.agent`) does: **reproduce** (run the module's whole test suite),
**localise** (trace each failing test and a seeded sample of passing ones, rank lines by the
Ochiai score), **patch** (list the single-token edits on the suspicious lines, then, in a
seeded order, apply one, run the failing tests, keep it when they pass, undo it otherwise),
**verify** (run the whole suite again), then finish. Every step is a real shell command the
runtime executes (the tools of :mod:`oracle.agents.repair.runner`); the brain only decides.

It decides from the conversation alone — the tool results the runtime sends back — never from
the workspace: the decision procedure is replayed over the transcript's shell calls in order,
each call that matches the command the procedure would issue next feeding it that call's
output, and the first command without a result is the next step. So a resumed session
(restored from the session file captured at a boundary) re-derives its state from what its
transcript holds, as the standalone agent does from its preserved facts, and a fresh session
starts over. Calls the procedure did not ask for, or without a result (a killed call), are
passed over.

The task reaches the brain in the first user prompt, as a tagged JSON header
(:func:`task_prompt`): the module, the runner and interpreter to call, the seed of the seeded
choices and the search bounds. With one seed per task (what :func:`task_prompt` writes from
``params["brain_seed"]``) every run of a task makes the same choices: a deterministic model.
"""

from __future__ import annotations

import json
import random
import re
import shlex
from collections.abc import Generator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from oracle.agents.model_server.brain import BrainError, StepBrain
from oracle.agents.model_server.conversation import Conversation, Shell, Step
from oracle.agents.repair.strategy import (
    MAX_FAILING_RUNS,
    json_tail,
    localisation_runs,
    ochiai_ranking,
)

__all__ = ["SEARCH", "RepairBrain", "RepairTask", "task_prompt"]

_TAG = re.compile(r"<ripplecp-repair>(.*?)</ripplecp-repair>", re.S)
#: seconds a runtime is asked to wait for one repair tool before it reports back
TOOL_TIMEOUT_S = 120.0
#: the search bounds a task may set (params and header): tests traced, lines, edits tried
SEARCH = ("passing_sample", "failing_sample", "top_lines", "max_edits")


@dataclass(frozen=True)
class RepairTask:
    """What the brain needs to know about a repair task (sent in the prompt header)."""

    module: str
    runner: str
    python: str
    seed: int
    passing_sample: int = 12
    top_lines: int = 10
    max_edits: int = 60
    failing_sample: int = MAX_FAILING_RUNS

    @classmethod
    def from_prompt(cls, text: str) -> RepairTask | None:
        """The task in a prompt's ``<ripplecp-repair>`` header, or None when it has none."""
        m = _TAG.search(text)
        if m is None:
            return None
        try:
            obj = json.loads(m.group(1))
            return cls(**{k: obj[k] for k in ("module", "runner", "python", "seed")},
                       **{k: int(obj[k]) for k in SEARCH if k in obj})
        except (ValueError, KeyError, TypeError) as exc:
            raise BrainError(f"repair brain: bad <ripplecp-repair> header: {exc}") from None

    def tool(self, *args: str) -> str:
        """The shell command running one repair tool in the runtime's working directory."""
        return shlex.join([self.python, self.runner, args[0], ".", self.module, *args[1:]])


def task_prompt(params: Mapping[str, Any], *, runner: str, python: str, seed: int) -> str:
    """The first prompt of a repair task: plain words and the header the brain reads."""
    task = RepairTask(str(params["module"]), runner, python,
                      int(params.get("brain_seed", seed)),
                      **{k: int(params[k]) for k in SEARCH if k in params})
    header = json.dumps(asdict(task), sort_keys=True)
    return (f"One token of {task.module}.py in the current directory was changed and its tests "
            f"now fail. Find the change and undo it, using the repair tools "
            f"(python3 {task.runner} suite|cover|candidates|edit . {task.module} ...).\n"
            f"<ripplecp-repair>{header}</ripplecp-repair>")


# the decision procedure: yields (phase, command), receives each command's output
Procedure = Generator[tuple[str, str], str, str]


def _procedure(task: RepairTask) -> Procedure:
    res = json_tail((yield "reproduce", task.tool("suite")))
    failing = [str(i) for i in res.get("failed", [])]
    if not failing:
        return "the test suite passes: nothing to repair"
    passing = [str(i) for i in res.get("ids", []) if i not in set(failing)]
    random.Random(task.seed).shuffle(passing)
    cover: list[tuple[set[int], bool]] = []
    for tid, _ in localisation_runs(failing, passing, task.passing_sample, task.failing_sample):
        out = json_tail((yield "localise", task.tool("cover", tid)))
        cover.append((set(out.get("lines", [])), bool(out.get("ok", False))))
    ranked = [ln for ln, _ in ochiai_ranking(cover, task.top_lines)]
    if not ranked:
        return "no line is executed by a failing test: no patch found"
    listed = json_tail((yield "patch", task.tool("candidates", *map(str, ranked))))
    by_line: dict[int, list[dict]] = {}
    for c in listed.get("candidates", []):
        by_line.setdefault(int(c["line"]), []).append(c)
    tries = 0
    for line in ranked:
        cands = list(by_line.get(line, []))
        random.Random(f"{task.seed}:{line}").shuffle(cands)
        for c in cands:
            if tries >= task.max_edits:
                return f"no patch found in {tries} edits"
            tries += 1
            args = (str(c["line"]), str(c["col"]))
            edit = json_tail((yield "patch", task.tool("edit", *args, c["old"], c["new"])))
            if not edit.get("ok"):
                continue
            res = json_tail((yield "patch", task.tool("suite", *failing)))
            if res and not res.get("failed") and res.get("run", 0) > 0:
                final = json_tail((yield "verify", task.tool("suite")))
                left = len(final.get("failed", [])) if final else "?"
                return (f"patched line {c['line']}: {c['old']} -> {c['new']} "
                        f"({left} tests failing after the patch)")
            yield "patch", task.tool("edit", *args, c["new"], c["old"])
    return f"no patch found in {tries} edits"


class RepairBrain(StepBrain):
    """Repairs the task named in the first prompt's header (see the module docstring)."""

    name = "repair"

    def next_step(self, conversation: Conversation) -> Step:
        task = next((t for _, text in conversation.prompts()
                     if (t := RepairTask.from_prompt(text)) is not None), None)
        if task is None:
            raise BrainError("repair brain: no <ripplecp-repair> task header in any prompt")
        results = conversation.results()
        done = [(c.command, results[c.id].output) for c in conversation.tool_calls()
                if c.kind == "shell" and c.command and c.id in results]
        proc = _procedure(task)
        n = 0
        try:
            phase, command = next(proc)
            for issued, output in done:
                if issued == command:
                    n += 1
                    phase, command = proc.send(output)
        except StopIteration as stop:
            return Step((), str(stop.value), f"repair/done/{n}")
        return Step((Shell(command, TOOL_TIMEOUT_S),), "", f"repair/{phase}/{n}")
