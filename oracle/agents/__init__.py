"""Agent adapters: everything the harness can drive, behind one protocol, found by name.

- :mod:`oracle.protocol` - the agent protocol (agents, runs, reports, clocks, task
  specs, restore points) and the task-count contract (:func:`~oracle.protocol.make_tasks`);
- :mod:`oracle.agents.registry` - every built-in agent by name, imported on first use;
- :mod:`oracle.agents.command_line` - the generic adapter for an agent that is a program;
- :mod:`oracle.agents.codex` - Codex CLI on that adapter (further runtimes go beside it);
- :mod:`oracle.agents.scripted` - a small real, LLM-free agent program for tests and benchmarks;
- :mod:`oracle.agents.program` - what the LLM-free agent programs share (the child side of
  their JSON-line protocol, the step loop, the adapter);
- :mod:`oracle.agents.repair` - a real, LLM-free program-repair agent on stdlib modules;
- :mod:`oracle.agents.depres`, :mod:`oracle.agents.cbuild`, :mod:`oracle.agents.migrate` -
  real, LLM-free dependency resolution (pip), multi-stage builds (make, gcc) and a
  long-horizon API migration; :mod:`oracle.agents.llmfree` - all of them as one agent;
- the simulated agent of every workload family lives with its generative model in
  :mod:`oracle.simulator` and is listed here as ``simulated`` and ``sim:<family>``.

This package's own import is standard library only (the scripted child program runs
``python -S -m oracle.agents.scripted``), so the protocol types are imported from
:mod:`oracle.protocol`, not from here.
"""

from oracle.agents.registry import BUILTIN_AGENTS, agent_names, get_agent, register_agent

__all__ = ["BUILTIN_AGENTS", "agent_names", "get_agent", "register_agent"]
