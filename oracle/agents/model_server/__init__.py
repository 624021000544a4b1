"""A loopback model server that real agent runtimes use as their model API, offline.

Codex CLI (OpenAI Responses), Claude Code (Anthropic Messages), litellm / mini-swe-agent
(OpenAI chat completions) and Gemini CLI (Gemini ``generateContent``) are pointed at :class:`ModelServer` on 127.0.0.1; each request is
read into one normalized :class:`Conversation`, a pluggable :class:`Brain` decides the next
:class:`Step`, and the server renders it in the request's protocol and writes the exchange to
an append-only audit log. Brains: ``scripted`` (a fixed JSON plan), ``repair`` (the LLM-free
repair agent's decisions, from the transcript), ``depres`` / ``cbuild`` / ``migrate`` (the
LLM-free family's step program, one shell command per step, the facts carried in the
transcript: :mod:`oracle.agents.model_server.program`) and ``proxy`` (a real endpoint).
``python -m oracle.agents.model_server`` runs one as a process.
"""

from __future__ import annotations

from pathlib import Path

from oracle.agents.model_server.brain import Brain, BrainError, ModelRequest, StepBrain
from oracle.agents.model_server.conversation import (
    Action,
    Call,
    Conversation,
    Edit,
    Message,
    Shell,
    Step,
    ToolCall,
    ToolResult,
)
from oracle.agents.model_server.latency import LatencyModel
from oracle.agents.model_server.program import PROGRAM_FAMILIES, ProgramBrain
from oracle.agents.model_server.proxy import ProxyBrain
from oracle.agents.model_server.repair import RepairBrain
from oracle.agents.model_server.scripted import Plan, PlanError, ScriptedBrain, Turn
from oracle.agents.model_server.server import PROTOCOLS, ModelServer, ServerConfig, check_loopback
from oracle.agents.model_server.wire import BadRequest, Reply

__all__ = [
    "BRAINS", "PROTOCOLS", "Action", "BadRequest", "Brain", "BrainError", "Call",
    "Conversation", "Edit", "LatencyModel", "Message", "ModelRequest", "ModelServer", "Plan",
    "PlanError", "ProgramBrain", "ProxyBrain", "RepairBrain", "Reply", "ScriptedBrain", "ServerConfig", "Shell", "Step",
    "StepBrain", "ToolCall", "ToolResult", "Turn", "check_loopback", "make_brain",
]

#: the brains ``--brain`` selects, by name (every program family's brain is a ProgramBrain)
BRAINS: dict[str, type[Brain]] = {ScriptedBrain.name: ScriptedBrain, RepairBrain.name: RepairBrain,
                                  **{f: ProgramBrain for f in PROGRAM_FAMILIES},
                                  ProxyBrain.name: ProxyBrain}


def make_brain(name: str, *, plan: str | Path | Plan | None = None, url: str | None = None,
               key_env: str | None = None) -> Brain:
    """A brain by name: ``scripted`` needs ``plan`` (a file or a :class:`Plan`), ``repair``
    and the program brains (``depres``, ``cbuild``, ``migrate``, ``bisect``) nothing (their task comes
    in the prompt), ``proxy`` needs ``url`` and, where the endpoint wants a key, ``key_env``
    (the variable's NAME)."""
    if name == RepairBrain.name:
        return RepairBrain()
    if name in PROGRAM_FAMILIES:
        return ProgramBrain(name)
    if name == ScriptedBrain.name:
        if plan is None:
            raise ValueError("brain 'scripted' needs a plan (--plan P.json)")
        return ScriptedBrain(plan if isinstance(plan, Plan) else Plan.load(plan))
    if name == ProxyBrain.name:
        if not url:
            raise ValueError("brain 'proxy' needs the endpoint's --url")
        return ProxyBrain(url, key_env)
    raise ValueError(f"unknown brain {name!r}; choose from {', '.join(BRAINS)}")
