"""A real, LLM-free program-repair agent on stdlib modules (see :mod:`oracle.agents.repair.agent`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from oracle.agents.command_line import CommandLineAgent
from oracle.agents.scripted import scripted_parse_line

AGENT_SCRIPT = Path(__file__).with_name("agent.py")


def RepairAgent(granularity: str = "turn", python: str | None = None) -> CommandLineAgent:  # noqa: N802 - factory named like the agent
    """The repair agent as a :class:`~oracle.agents.command_line.CommandLineAgent` (a real program).

    It runs as a script (not ``-m``) so the workspace, which holds a module named like a
    stdlib one, is never first on the agent's own ``sys.path``.
    """
    from oracle.agents.repair.tasks import make_repair_tasks

    if granularity not in ("turn", "tool_call"):
        raise ValueError(f"granularity must be 'turn' or 'tool_call', got {granularity!r}")
    base = [python or sys.executable, str(AGENT_SCRIPT), "--workspace", "{workspace}",
            "--task-file", "{task_file}", "--seed", "{seed}", "--granularity", granularity]
    root = str(Path(__file__).resolve().parents[3])
    agent = CommandLineAgent(
        [*base, "start"], [*base, "resume", "--restore-dir", "{restore_dir}"],
        scripted_parse_line, name="repair",
        env={"PYTHONPATH": os.pathsep.join(p for p in [root, os.environ.get("PYTHONPATH", "")] if p)},
    )
    agent.granularity = granularity  # type: ignore[attr-defined]
    agent.make_tasks = make_repair_tasks  # type: ignore[attr-defined]
    return agent
