"""A real, LLM-free dependency-resolution agent: real ``pip`` against a generated local index.

Value structure (what a checkpoint at each boundary preserves, and what it saves):

* **Where the expensive discovery lies**: in *resolve* for tasks whose specifiers conflict
  (each relaxation costs a full ``pip`` resolution, backtracking included, in a seeded
  order), in *smoke* for tasks whose newest library carries an undeclared regression (each
  bisection step is a ``pip install`` plus a test run). A task has one, both or neither,
  so the expensive boundary moves from task to task. What either leaves is a one-line fact
  (``pins``, ``runtime_pin``) and a tiny lock file.
* **What is cheap to redo**: the environment. *install* writes megabytes (``pylib/``, the
  largest checkpoint) and, in the nominal run, compiles the sdists; the wheel cache
  outside the workspace survives a failure, so re-creating the environment is an unzip.
  Preserved bytes and nominal seconds overstate this boundary's value.
* **What a boundary shows of it**: the trajectory up to a boundary holds the pip runs
  (how many resolutions, their exit codes and durations), file changes with their sizes
  and the test runs; the facts themselves are not features.

Tasks: :func:`oracle.agents.depres.tasks.make_depres_tasks`; the program:
:mod:`oracle.agents.depres.agent`; verifier: ``verify.py`` beside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from oracle.agents.program import program_agent

if TYPE_CHECKING:
    from oracle.agents.command_line import CommandLineAgent

AGENT_SCRIPT = Path(__file__).with_name("agent.py")


def DepresAgent(granularity: str = "turn", python: str | None = None) -> CommandLineAgent:  # noqa: N802 - factory named like the agent
    """The dependency-resolution agent as a command-line agent (a real program)."""
    from oracle.agents.depres.tasks import make_depres_tasks

    return program_agent("depres", AGENT_SCRIPT, make_depres_tasks, granularity=granularity,
                         python=python)
