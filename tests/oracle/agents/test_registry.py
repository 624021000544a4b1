"""Agents by name: every built-in agent listed and built without importing its module first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from oracle.agents import BUILTIN_AGENTS, agent_names, get_agent, register_agent
from oracle.agents.scripted import ScriptedAgent
from oracle.protocol import Agent

REPO = Path(__file__).resolve().parents[3]


def test_registry() -> None:
    register_agent("unit-test-agent", lambda granularity="turn": ScriptedAgent(granularity))
    a = get_agent("unit-test-agent", granularity="tool_call")
    assert isinstance(a, Agent) and a.granularity == "tool_call"
    assert "unit-test-agent" in agent_names()
    assert get_agent("scripted").name == "scripted"  # built-in, imported on demand
    with pytest.raises(KeyError, match="unknown agent"):
        get_agent("no-such-agent")
    with pytest.raises(ValueError):
        register_agent("", ScriptedAgent)


def test_every_built_in_agent_is_listed_and_built_in_a_fresh_process() -> None:
    """Nothing imported first: the registry itself knows every built-in adapter."""
    code = ("import json, sys; from oracle.agents import agent_names, get_agent; "
            "names = agent_names(); before = sorted(m for m in sys.modules if m.startswith('oracle.')); "
            "built = {n: get_agent(n).name for n in ('scripted', 'repair', 'codex', 'simulator', "
            "'sim:long-horizon')}; print(json.dumps([names, before, built]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         check=True)
    names, before, built = json.loads(out.stdout)
    for n in ("scripted", "repair", "codex", "cli", "simulated", "simulator", "sim:swe-pilot",
              "sim:dependency-resolution", "sim:multi-stage-build", "sim:long-horizon"):
        assert n in names
    assert sorted(BUILTIN_AGENTS) == sorted(n for n in names if not n.startswith("sim:"))
    # listing loads no adapter: only the registry, the runtimes' records and the workload
    # families' names (and the light faces of their packages)
    assert set(before) <= {"oracle.agents", "oracle.agents.registry", "oracle.agents.runtimes",
                           "oracle.processes", "oracle.simulator", "oracle.simulator.workloads"}
    assert "oracle.agents.runtime" not in before
    assert built == {"scripted": "scripted", "repair": "repair", "codex": "codex",
                     "simulator": "sim:swe-pilot", "sim:long-horizon": "sim:long-horizon"}


def test_an_unknown_agent_names_the_known_ones_and_the_nearest() -> None:
    with pytest.raises(KeyError) as exc:
        get_agent("repiar")
    msg = str(exc.value)
    assert "unknown agent 'repiar' (did you mean 'repair'?)" in msg
    assert "scripted" in msg and "sim:swe-pilot" in msg
    with pytest.raises(KeyError, match="unknown agent 'zzzz'; known agents: "):
        get_agent("zzzz")
