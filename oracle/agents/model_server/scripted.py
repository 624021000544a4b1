"""The scripted brain: a fixed plan of tool calls, read from JSON.

A plan is a list of steps, or turns of steps. Step ``k`` of a turn answers the request that
already holds ``k`` assistant turns, so a runtime that runs a plan sends its k-th request
and gets its k-th step — and a resumed conversation, which resends the earlier turns, picks
up where its transcript ends. A later turn starts where a user prompt contains its ``match``
text (a resume or fork prompt), and counts assistant turns from that prompt on::

    {"turns": [
      {"steps": [{"shell": "printf 'hello\\n' > hello.txt"},
                 {"edit": {"path": "hello.txt", "old": "hello", "new": "hello world"}},
                 {"finish": "done"}]},
      {"match": "RESUME", "steps": [{"finish": "resumed"}]}]}

A step is ``{"shell": CMD, "timeout_s": S}``, ``{"edit": {"path", "old", "new"}}``,
``{"call": {"name", "arguments"}}`` (a runtime's own tool), ``{"finish": TEXT}``, or
``{"calls": [step, ...], "text": TEXT}`` for parallel calls; any step may carry ``"text"``.
A bare list of steps, or ``{"steps": [...]}``, is a plan of one turn. Past the end of a turn
the brain finishes with the text ``plan finished``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oracle.agents.model_server.brain import StepBrain
from oracle.agents.model_server.conversation import Action, Call, Conversation, Edit, Shell, Step

__all__ = ["Plan", "PlanError", "ScriptedBrain", "Turn"]

_ACTIONS = ("shell", "edit", "call", "finish", "calls")


class PlanError(ValueError):
    """A plan that cannot be read; the message names the file and the step."""


@dataclass(frozen=True)
class Turn:
    """Steps answered in order; ``match`` selects the turn by a user prompt's text."""

    steps: tuple[Step, ...]
    match: str | None = None


@dataclass(frozen=True)
class Plan:
    """A scripted brain's plan: the first turn from the conversation's start, later turns
    from the first prompt containing their ``match``."""

    turns: tuple[Turn, ...]

    @classmethod
    def from_json(cls, obj: Any, source: str = "plan") -> Plan:
        """Read a plan from parsed JSON; :class:`PlanError` names ``source`` and the step."""
        if isinstance(obj, list):
            obj = {"steps": obj}
        if not isinstance(obj, Mapping):
            raise PlanError(f"{source}: a plan is a list of steps or an object with 'turns'")
        raw_turns = obj.get("turns", [obj] if "steps" in obj else None)
        if not isinstance(raw_turns, list) or not raw_turns:
            raise PlanError(f"{source}: expected 'steps' or a non-empty list 'turns'")
        turns = []
        for t, raw in enumerate(raw_turns):
            where = f"{source}: turns[{t}]" if "turns" in obj else source
            if not isinstance(raw, Mapping) or not isinstance(raw.get("steps"), list):
                raise PlanError(f"{where}: expected an object with a list 'steps'")
            match = raw.get("match")
            if t == 0 and match is not None:
                raise PlanError(f"{where}.match: the first turn starts the conversation; "
                                "it takes no match")
            if t > 0 and (not isinstance(match, str) or not match):
                raise PlanError(f"{where}.match: a later turn needs a non-empty match text")
            steps = tuple(_step(s, f"{where}.steps[{k}]", t, k)
                          for k, s in enumerate(raw["steps"]))
            turns.append(Turn(steps, match))
        return cls(tuple(turns))

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        """Read a plan file (JSON)."""
        p = Path(path)
        try:
            obj = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise PlanError(f"{p}:{exc.lineno}: not JSON ({exc.msg})") from None
        return cls.from_json(obj, str(p))


def _action(obj: Any, where: str) -> Action:
    if not isinstance(obj, Mapping):
        raise PlanError(f"{where}: expected an object")
    if "shell" in obj:
        if not isinstance(obj["shell"], str) or not obj["shell"]:
            raise PlanError(f"{where}.shell: expected a command")
        t = obj.get("timeout_s")
        if t is not None and (not isinstance(t, int | float) or t <= 0):
            raise PlanError(f"{where}.timeout_s: expected a positive number")
        return Shell(obj["shell"], None if t is None else float(t))
    if "edit" in obj:
        e = obj["edit"]
        if not isinstance(e, Mapping) or not all(isinstance(e.get(k), str)
                                                 for k in ("path", "old", "new")):
            raise PlanError(f"{where}.edit: expected strings 'path', 'old' and 'new'")
        return Edit(e["path"], e["old"], e["new"])
    if "call" in obj:
        c = obj["call"]
        if not isinstance(c, Mapping) or not isinstance(c.get("name"), str):
            raise PlanError(f"{where}.call: expected a 'name' and 'arguments'")
        args = c.get("arguments", {})
        if not isinstance(args, Mapping):
            raise PlanError(f"{where}.call.arguments: expected an object")
        return Call(c["name"], dict(args))
    raise PlanError(f"{where}: unknown step {sorted(obj)}; expected one of "
                    + ", ".join(_ACTIONS))


def _step(obj: Any, where: str, turn: int, k: int) -> Step:
    label = f"turn{turn}/step{k}"
    if not isinstance(obj, Mapping):
        raise PlanError(f"{where}: expected an object")
    text = obj.get("text", "")
    if not isinstance(text, str):
        raise PlanError(f"{where}.text: expected a string")
    if "finish" in obj:
        if not isinstance(obj["finish"], str):
            raise PlanError(f"{where}.finish: expected the final message text")
        return Step((), obj["finish"], label)
    if "calls" in obj:
        calls = obj["calls"]
        if not isinstance(calls, list) or not calls:
            raise PlanError(f"{where}.calls: expected a non-empty list")
        return Step(tuple(_action(c, f"{where}.calls[{i}]") for i, c in enumerate(calls)),
                    text, label)
    return Step((_action(obj, where),), text, label)


class ScriptedBrain(StepBrain):
    """Answers from a fixed :class:`Plan` (see the module docstring for how steps are chosen)."""

    name = "scripted"

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedBrain:
        """A scripted brain for the plan file at ``path``."""
        return cls(Plan.load(path))

    def next_step(self, conversation: Conversation) -> Step:
        t, k = self.position(conversation)
        steps = self.plan.turns[t].steps
        return steps[k] if k < len(steps) else Step((), "plan finished", f"turn{t}/end")

    def position(self, conversation: Conversation) -> tuple[int, int]:
        """``(turn, step)`` the plan is at for this transcript."""
        prompts = conversation.prompts()
        for t in range(len(self.plan.turns) - 1, 0, -1):
            match = self.plan.turns[t].match
            at = next((i for i, text in prompts if match and match in text), None)
            if at is not None:
                k = sum(1 for m in conversation.messages[at + 1:] if m.role == "assistant")
                return t, k
        return 0, conversation.assistant_turns
