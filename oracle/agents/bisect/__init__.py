"""A real, LLM-free regression-bisect agent: generated C projects with a real git history.

Value structure (what a checkpoint at each boundary preserves, and what it saves):

* **Where the expensive discovery lies**: in the release that breaks a unit (none, one or
  two per task, at any release: the task's history, not the agent, decides). Nothing
  reports it until that release is synced, built and tested; finding the culprit then
  costs a ``git bisect run`` over the release's commits in a scratch clone: a full build,
  then one real build and test per bisection step, so its cost grows with the project's
  size at that point of the history and with the log of the release's length. What it
  leaves is one fact (the culprit's hash) and a revert patch.
* **What is cheap to redo**: reading the release's log and diff, applying it, the
  incremental builds of the workspace (a restored workspace keeps its mtimes, so make
  rebuilds only what the restore point lacks). The upstream mirror (``upstream.git``)
  never changes, so the content-addressed store holds it once.
* **What a boundary shows of it**: the syncs, builds and tests (their durations, the
  failing units), the bisect's steps in its output, the revert.

Tasks: :func:`oracle.agents.bisect.tasks.make_bisect_tasks`; the program:
:mod:`oracle.agents.bisect.agent`; verifier: ``verify.py`` beside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from oracle.agents.program import program_agent

if TYPE_CHECKING:
    from oracle.agents.command_line import CommandLineAgent

AGENT_SCRIPT = Path(__file__).with_name("agent.py")


def BisectAgent(granularity: str = "turn", python: str | None = None) -> CommandLineAgent:  # noqa: N802 - factory named like the agent
    """The regression-bisect agent as a command-line agent (a real program)."""
    from oracle.agents.bisect.tasks import make_bisect_tasks

    return program_agent("bisect", AGENT_SCRIPT, make_bisect_tasks, granularity=granularity,
                         python=python)
