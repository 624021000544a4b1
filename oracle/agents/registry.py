"""Agents by name: every built-in adapter is listed here once, imported only when asked for.

The command line, plans and executor workers name an agent by a string (a plan records it,
a process-pool or Dask worker rebuilds the agent from it). :data:`BUILTIN_AGENTS` maps each
built-in name to ``"module:factory"``; :func:`get_agent` imports that module on first use,
so nothing needs importing beforehand and a worker process finds every built-in agent.
``sim:<family>`` names the simulated agent of every workload family
(:mod:`oracle.simulator.workloads`). :func:`register_agent` adds agents defined elsewhere (a worker
finds those only if their module is imported there too).

Every pinned runtime of :data:`oracle.agents.runtimes.RUNTIMES` (``codex``, ``claude-code``,
``mini-swe-agent``) is an agent of the same name, driven by a brain on a loopback model
server (:class:`oracle.agents.runtime.RuntimeAgent`); a new runtime is its record there, not
an entry here. ``codex-cli`` is Codex CLI as installed and configured by the user
(:func:`oracle.agents.codex.codex_agent`).

Standard library only: the scripted agent's child program imports this package.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from oracle.agents.runtimes import RUNTIMES

if TYPE_CHECKING:  # the protocol module imports the event schema (pandas): not at run time
    from oracle.protocol import Agent

__all__ = ["BUILTIN_AGENTS", "SIMULATED_PREFIX", "agent_names", "get_agent", "register_agent"]

#: built-in agents: name -> "module:factory" (``factory(**options) -> Agent``)
BUILTIN_AGENTS: dict[str, str] = {
    "bisect": "oracle.agents.bisect:BisectAgent",
    "cbuild": "oracle.agents.cbuild:CbuildAgent",
    "cli": "oracle.agents.command_line:CommandLineAgent",
    "codex-cli": "oracle.agents.codex:codex_agent",
    "depres": "oracle.agents.depres:DepresAgent",
    "llm-free": "oracle.agents.llmfree:LLMFreeAgent",
    "migrate": "oracle.agents.migrate:MigrateAgent",
    "repair": "oracle.agents.repair:RepairAgent",
    "scripted": "oracle.agents.scripted:ScriptedAgent",
    "simulated": "oracle.simulator.agent:SimulatedAgent",
    "simulator": "oracle.simulator.agent:SimulatedAgent",
    # every pinned runtime, by the name of its record (``factory(runtime=name, **options)``)
    **dict.fromkeys(RUNTIMES, "oracle.agents.runtime:RuntimeAgent"),
}
#: ``sim:<family>``: the simulated agent of a workload family
SIMULATED_PREFIX = "sim:"

AgentFactory = Callable[..., "Agent"]
_REGISTRY: dict[str, AgentFactory] = {}


def register_agent(name: str, factory: AgentFactory) -> None:
    """Make ``factory(**options) -> Agent`` available as ``get_agent(name, **options)``."""
    if not name or not isinstance(name, str):
        raise ValueError(f"agent name must be a non-empty string, got {name!r}")
    _REGISTRY[name] = factory


def _simulated_names() -> list[str]:
    from oracle.simulator.workloads import family_names

    return [SIMULATED_PREFIX + f for f in family_names()]


def agent_names() -> list[str]:
    """Every agent name :func:`get_agent` accepts: built-ins, ``sim:<family>``, registered."""
    return sorted({*BUILTIN_AGENTS, *_simulated_names(), *_REGISTRY})


def _builtin(target: str, name: str) -> AgentFactory:
    module, _, attr = target.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except ImportError as exc:
        raise KeyError(f"agent {name!r}: module {module} unavailable: {exc}") from exc


def get_agent(name: str, **options: Any) -> Agent:
    """Build the agent called ``name`` with ``options``; an unknown name is a ``KeyError``
    that lists the known ones and suggests the nearest."""
    if name in _REGISTRY:
        return _REGISTRY[name](**options)
    if name in RUNTIMES:
        return _builtin(BUILTIN_AGENTS[name], name)(runtime=name, **options)
    if name in BUILTIN_AGENTS:
        return _builtin(BUILTIN_AGENTS[name], name)(**options)
    if name in _simulated_names():
        factory = _builtin(BUILTIN_AGENTS["simulated"], name)
        return factory(**{"family": name[len(SIMULATED_PREFIX):], **options})
    known = agent_names()
    near = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    raise KeyError(f"unknown agent {name!r}{hint}; known agents: {', '.join(known)}")
