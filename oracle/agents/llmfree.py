"""Every real LLM-free task family behind one agent, so one study collects them all.

:class:`LLMFreeAgent` (registered as ``llm-free``) generates tasks of every family in
:data:`FAMILY_AGENTS` (program repair, dependency resolution, multi-stage build, API
migration, regression bisection) and hands each task to its family's agent by
``task.family``. One plan, one audit log, one label set: ``python -m
experiments.collect_labels --agent llm-free --families repair depres cbuild migrate --tasks
100 --repos 16 --design full`` collects the shipped set (see
``ripplecp_policy/data/labelsets/llm-free/DATASHEET.md``; it predates ``bisect``).

With ``runtime`` (``codex``, ``claude-code``) every family's agent is that real runtime driven
by the family's brain (:class:`~oracle.agents.runtime.RuntimeAgent` with ``brain=family``:
the repair brain, or the family's step program, :mod:`oracle.agents.model_server.program`), so the
same tasks are collected through the runtime, at tool-call granularity, and the label set
records the runtime and its version (:meth:`LLMFreeAgent.describe`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from oracle.agents.registry import get_agent

if TYPE_CHECKING:
    from oracle.protocol import Agent, AgentRun, Clock, RestorePoint, TaskSpec

__all__ = ["FAMILY_AGENTS", "LLMFreeAgent", "REPAIR_OPTIONS", "SHARES", "split"]

#: family -> the registered agent that runs its tasks (the family name is ``task.family``)
FAMILY_AGENTS: dict[str, str] = {"repair": "repair", "depres": "depres", "cbuild": "cbuild",
                                 "migrate": "migrate", "bisect": "bisect"}
#: share of the tasks each family gets, as weights (the costlier families per task get
#: fewer); the first four's are the shipped set's, so its four families split as before
SHARES: dict[str, float] = {"repair": 0.20, "depres": 0.30, "cbuild": 0.28, "migrate": 0.22,
                            "bisect": 0.24}
#: repair tasks in the suite: every 5th carries two bugs; smaller searches than the default
REPAIR_OPTIONS: dict[str, Any] = {"two_bug_every": 5,
                                  "params": {"passing_sample": 8, "max_edits": 40}}


def split(total: int, weights: list[float]) -> list[int]:
    """``total`` apportioned by ``weights`` (largest remainders; ties to the earlier part)."""
    if not weights or any(w <= 0 for w in weights):
        raise ValueError(f"weights must be positive, got {weights}")
    quota = [total * w / sum(weights) for w in weights]
    out = [int(q) for q in quota]
    for i in sorted(range(len(quota)), key=lambda i: (out[i] - quota[i], i))[: total - sum(out)]:
        out[i] += 1
    return out


class LLMFreeAgent:
    """The LLM-free families as one agent: tasks by family, runs by the family's agent."""

    name = "llm-free"
    clock_kind = "wall"

    def __init__(self, granularity: str = "turn", families: tuple[str, ...] | list[str] | None = None,
                 runtime: str | None = None) -> None:
        """``runtime``: None (the standalone programs) or a real runtime's agent name
        (``codex``, ``claude-code``), each family's brain behind it."""
        fams = tuple(families) if families is not None else tuple(FAMILY_AGENTS)
        unknown = [f for f in fams if f not in FAMILY_AGENTS]
        if unknown or not fams:
            raise ValueError(f"families must be some of {', '.join(FAMILY_AGENTS)}, got {list(fams)}")
        self.granularity = granularity
        self.families = fams
        self.runtime = runtime
        if runtime is None:
            self.agents: dict[str, Agent] = {f: get_agent(FAMILY_AGENTS[f], granularity=granularity)
                                             for f in fams}
        else:
            self.agents = {f: get_agent(runtime, brain=FAMILY_AGENTS[f], granularity=granularity)
                           for f in fams}
        #: a runtime's runs report activity (the harness strikes mid-tool and mid-model-call)
        self.reports_activity = runtime is not None

    def describe(self) -> dict[str, Any] | None:
        """What a label set records about the runtime behind its labels (None: standalone)."""
        if self.runtime is None:
            return None
        desc = dict(self.agents[self.families[0]].describe())  # type: ignore[attr-defined]
        desc["brain"] = self.name
        desc["brains"] = {f: FAMILY_AGENTS[f] for f in self.families}
        return desc

    def check_installed(self) -> None:
        """A one-line error when the runtime is not installed and usable (standalone: none)."""
        if self.runtime is not None:
            self.agents[self.families[0]].check_installed()  # type: ignore[attr-defined]

    def make_tasks(self, n: int, seed: int, root: str | Path, *, repos: int = 16) -> list[TaskSpec]:
        """``n`` tasks apportioned over the families by :data:`SHARES`, ``repos``
        repositories evenly (each family needs a task per repository it gets)."""
        k = len(self.families)
        if repos < k:
            raise ValueError(f"llm-free: {repos} repositories cannot cover {k} families")
        n_by = split(n, [SHARES[f] for f in self.families])
        r_by = split(repos, [1.0] * k)
        tasks: list[TaskSpec] = []
        for fam, n_f, r_f in zip(self.families, n_by, r_by, strict=True):
            if n_f < r_f:
                raise ValueError(f"llm-free: family {fam} gets {n_f} tasks for {r_f} repositories")
            make = self.agents[fam].make_tasks  # type: ignore[attr-defined]
            opts: dict[str, Any] = ({"n_repos": r_f, **REPAIR_OPTIONS} if fam == "repair"
                                    else {"repos": r_f})
            tasks += make(n_f, seed, Path(root) / fam, **opts)
        return tasks

    def _agent(self, task: TaskSpec) -> Agent:
        try:
            return self.agents[task.family]
        except KeyError:
            raise ValueError(f"llm-free: task {task.task_id} has family {task.family!r}, "
                             f"not one of {', '.join(self.families)}") from None

    def start(self, task: TaskSpec, workspace: Path, seed: int, clock: Clock) -> AgentRun:
        return self._agent(task).start(task, workspace, seed, clock)

    def resume(self, task: TaskSpec, restore: RestorePoint, workspace: Path, seed: int,
               clock: Clock) -> AgentRun:
        return self._agent(task).resume(task, restore, workspace, seed, clock)

    def verify(self, task: TaskSpec, workspace: Path) -> bool:
        return self._agent(task).verify(task, workspace)
