"""A real, LLM-free long-horizon agent: an application ported from a legacy API, module by module.

Value structure (what a checkpoint at each boundary preserves, and what it saves):

* **Where the expensive discovery lies**: in the modules that first call a legacy
  function whose successor is undocumented (every new function of the same arity, every
  argument order and unit is a candidate; one probe subprocess each, in a seeded order).
  Several modules of a task may hold such a first use, at any position: there are several
  expensive phases, and a mapping found in one is reused by every later one. What a
  discovery leaves is a mapping of a few bytes and a one-line edit per call site.
* **What is cheap to redo**: the golden data each module regenerates (``data/``:
  megabytes from one fast subprocess) and the modules that only reuse known mappings.
* **What a boundary shows of it**: the probes of the module (how many, their failures and
  durations), the rewrite and the data written.

Tasks: :func:`oracle.agents.migrate.tasks.make_migrate_tasks`; the program:
:mod:`oracle.agents.migrate.agent`; verifier: ``verify.py`` beside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from oracle.agents.program import program_agent

if TYPE_CHECKING:
    from oracle.agents.command_line import CommandLineAgent

AGENT_SCRIPT = Path(__file__).with_name("agent.py")


def MigrateAgent(granularity: str = "turn", python: str | None = None) -> CommandLineAgent:  # noqa: N802 - factory named like the agent
    """The API-migration agent as a command-line agent (a real program)."""
    from oracle.agents.migrate.tasks import make_migrate_tasks

    return program_agent("migrate", AGENT_SCRIPT, make_migrate_tasks, granularity=granularity,
                         python=python)
