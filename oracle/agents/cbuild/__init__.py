"""A real, LLM-free multi-stage build agent: generated C projects built with make and gcc.

Value structure (what a checkpoint at each boundary preserves, and what it saves):

* **Where the expensive discovery lies**: in the stage whose shipped configuration is
  wrong (none, one or two stages per task, at any position). Nothing reports the fault
  until the stage is built and its test run; finding the option then costs one full
  rebuild of the stage per tried change (in a seeded order). What it leaves is one line
  of ``config.ini``.
* **What is cheap to redo**: the tables each stage generates (``out/``: megabytes written
  by a small generator in milliseconds). Compiled objects are moderately expensive and
  preserved as they are: a restored workspace keeps its mtimes, so make rebuilds only what
  the restore point lacks. Checkpoints grow with every stage (objects with debug
  information, archives, tables) while the content-addressed store writes each unchanged
  artifact once, so later checkpoints pay only for new artifacts.
* **What a boundary shows of it**: the make and test runs of the stage (how many rebuilds,
  their durations, the bytes of the artifacts) and the config edits.

Tasks: :func:`oracle.agents.cbuild.tasks.make_cbuild_tasks`; the program:
:mod:`oracle.agents.cbuild.agent`; verifier: ``verify.py`` beside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from oracle.agents.program import program_agent

if TYPE_CHECKING:
    from oracle.agents.command_line import CommandLineAgent

AGENT_SCRIPT = Path(__file__).with_name("agent.py")


def CbuildAgent(granularity: str = "turn", python: str | None = None) -> CommandLineAgent:  # noqa: N802 - factory named like the agent
    """The multi-stage build agent as a command-line agent (a real program)."""
    from oracle.agents.cbuild.tasks import make_cbuild_tasks

    return program_agent("cbuild", AGENT_SCRIPT, make_cbuild_tasks, granularity=granularity,
                         python=python)
