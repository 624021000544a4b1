"""A real, LLM-free program-repair agent on stdlib modules (see :mod:`oracle.agents.repair.agent`).

Value structure (what a checkpoint at each boundary preserves, and what it saves):

* **Where the expensive discovery lies**: in *localise* (per-test coverage in separate
  processes) and in *patch* (a seeded walk over single-token edits, one test run each);
  a two-bug task has both twice, so its expensive boundaries sit at 2-3 and again at 4-5.
  What they leave is a few hundred bytes of facts (suspicious lines, the patch).
* **What is cheap to redo**: reproducing (one suite run) and the test index it writes
  (``cache/test_index.json``, the largest file the agent writes, regenerated on demand).
* **What a boundary shows of it**: the coverage and test runs (how many, how long), the
  edits and reverts.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from oracle.agents.program import program_agent

if TYPE_CHECKING:
    from oracle.agents.command_line import CommandLineAgent

AGENT_SCRIPT = Path(__file__).with_name("agent.py")


def RepairAgent(granularity: str = "turn", python: str | None = None) -> CommandLineAgent:  # noqa: N802 - factory named like the agent
    """The repair agent as a :class:`~oracle.agents.command_line.CommandLineAgent` (a real program).

    It runs as a script (not ``-m``) so the workspace, which holds a module named like a
    stdlib one, is never first on the agent's own ``sys.path``.
    """
    from oracle.agents.repair.tasks import make_repair_tasks

    return program_agent("repair", AGENT_SCRIPT, make_repair_tasks, granularity=granularity,
                         python=python)
