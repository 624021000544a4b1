"""The agent protocol the oracle harness drives.

An :class:`Agent` starts a task from a pristine workspace or resumes it from a
:class:`RestorePoint` (a restored workspace plus the preserved transcript and facts). A
run (:class:`AgentRun`) yields :class:`AgentReport` objects live: events in the canonical
schema (``features.schema.Event``), candidate boundaries reached (numbered 1..B from the
pristine start, also on a resumed run), side effects for the durable effect log, and — from
agents that can say so — *activity*: the run is now inside a tool (``"tool"``) or waiting on
a model call (``"model"``), the moments a fail-stop can strike mid-tool or mid-model-call.

Time comes from a :class:`Clock`: :class:`WallClock` for real agents, :class:`VirtualClock`
for simulated ones (sleep advances time instantly), so the same harness measures both.

Agents are found by name through :mod:`oracle.agents.registry`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from features.schema import Event

__all__ = [
    "ACTIVITIES",
    "Agent",
    "AgentReport",
    "AgentRun",
    "Clock",
    "RestorePoint",
    "TaskSpec",
    "VirtualClock",
    "WallClock",
    "clock_kind",
    "make_tasks",
]


@runtime_checkable
class Clock(Protocol):
    """Seconds source used for every measured duration."""

    kind: str  # "wall" | "virtual"

    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class WallClock:
    """Real time: ``time.monotonic`` and ``time.sleep``."""

    kind = "wall"

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class VirtualClock:
    """Simulated time starting at 0.0; ``sleep``/``advance`` move it forward instantly.

    Thread-safe, so a simulated agent's reader thread and the harness can share it.
    """

    kind = "virtual"

    def __init__(self, start: float = 0.0) -> None:
        self._t = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._t

    def advance(self, dt: float) -> float:
        """Move time forward by ``dt`` seconds (must be >= 0); returns the new time."""
        if dt < 0:
            raise ValueError(f"VirtualClock.advance: negative step {dt}")
        with self._lock:
            self._t += float(dt)
            return self._t

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.advance(seconds)


@dataclass
class TaskSpec:
    """One task the oracle runs: where its pristine state comes from and how it is verified."""

    task_id: str
    repo: str  # "repository" for leave-one-repository-out splits
    family: str
    workspace_template: Path | None  # copied into a fresh workspace for a pristine start
    verifier: list[str] | None  # argv run in the workspace; exit 0 = verified
    params: dict[str, Any] = field(default_factory=dict)  # agent-specific


@dataclass
class RestorePoint:
    """What a resumed run starts from: a restored workspace plus preserved agent state."""

    boundary: int  # 0 = pristine, b >= 1 = checkpoint at candidate boundary b
    workspace: Path  # the restored workspace (already written by the harness)
    transcript: list[dict]  # preserved agent-visible transcript at that boundary
    facts: dict[str, Any]  # preserved discovered facts at that boundary


#: what an ``activity`` report says the run is doing
ACTIVITIES = ("tool", "model")


@dataclass
class AgentReport:
    """One thing a running agent reports: an event, a boundary reached, a side effect, or an
    activity (a tool started, a model call is waiting for its answer)."""

    kind: str  # "event" | "boundary" | "effect" | "activity"
    event: Event | None = None
    boundary: int | None = None  # 1-based from the pristine start, also on resumed runs;
    #   a parser inside an adapter may leave it None ("a boundary passed"): the adapter numbers it
    effect: dict | None = None
    activity: str | None = None  # "tool" | "model" (kind "activity")

    def __post_init__(self) -> None:
        if self.kind == "event" and self.event is None:
            raise ValueError("AgentReport(kind='event') needs an event")
        if self.kind == "boundary" and self.boundary is not None and self.boundary < 1:
            raise ValueError(f"AgentReport(kind='boundary') needs boundary >= 1, got {self.boundary}")
        if self.kind == "effect" and self.effect is None:
            raise ValueError("AgentReport(kind='effect') needs an effect dict")
        if self.kind == "activity" and self.activity not in ACTIVITIES:
            raise ValueError(f"AgentReport(kind='activity') needs activity in {ACTIVITIES}, "
                             f"got {self.activity!r}")
        if self.kind not in ("event", "boundary", "effect", "activity"):
            raise ValueError("AgentReport.kind must be event|boundary|effect|activity, got "
                             f"{self.kind!r}")


@runtime_checkable
class AgentRun(Protocol):
    """A running agent: live reports, preserved state, fail-stop kill, exit status."""

    usage: dict  # running totals: tokens, tool_calls

    def reports(self) -> Iterator[AgentReport]: ...

    def preserved(self) -> tuple[list[dict], dict[str, Any]]: ...

    def kill(self) -> None: ...

    def wait(self) -> int: ...


@runtime_checkable
class Agent(Protocol):
    """A coding agent the harness can start, resume and verify.

    Simulated agents may also define ``simulated_checkpoint_cost(task, boundary, workspace)
    -> (creation_s, size_bytes)`` and ``simulated_restore_latency(task, boundary) -> float``;
    the harness then uses them instead of measuring the checkpoint store.

    Optional attributes the command line uses: ``make_tasks(n, seed, root, **opts) ->
    list[TaskSpec]`` (so ``python -m oracle plan`` can generate tasks: exactly ``n`` of
    them, or a ``ValueError`` saying why not; see :func:`make_tasks`), ``granularity``
    (``"turn"`` | ``"tool_call"``) and ``clock_kind`` (``"wall"`` | ``"virtual"``; default
    ``"virtual"`` when the agent has ``simulated_checkpoint_cost``, else ``"wall"``).
    An agent whose runs report ``activity`` sets ``reports_activity = True``: the harness
    then strikes a branch's failure at a tool or model-call activity (see
    :mod:`oracle.harness.branch`), else at the first event of the failure segment.
    """

    name: str

    def start(self, task: TaskSpec, workspace: Path, seed: int, clock: Clock) -> AgentRun: ...

    def resume(
        self, task: TaskSpec, restore: RestorePoint, workspace: Path, seed: int, clock: Clock
    ) -> AgentRun: ...

    def verify(self, task: TaskSpec, workspace: Path) -> bool: ...


def clock_kind(agent: Any) -> str:
    """``agent.clock_kind`` if set; simulated agents (with simulated costs) get "virtual"."""
    kind = getattr(agent, "clock_kind", None)
    if kind is None:
        kind = "virtual" if hasattr(agent, "simulated_checkpoint_cost") else "wall"
    if kind not in ("wall", "virtual"):
        raise ValueError(f"agent clock_kind must be 'wall' or 'virtual', got {kind!r}")
    return kind


def make_tasks(agent: Any, n: int, seed: int, root: Path, **options: Any) -> list[TaskSpec]:
    """Exactly ``n`` tasks from ``agent.make_tasks``: a count the agent cannot meet is an
    error (naming the agent and the count), never a smaller study."""
    build = getattr(agent, "make_tasks", None)
    name = getattr(agent, "name", type(agent).__name__)
    if build is None:
        raise ValueError(f"agent {name!r} cannot generate tasks; build the plan with the "
                         "oracle.harness.plan API from your TaskSpecs")
    if n < 1:
        raise ValueError(f"agent {name!r}: the task count must be >= 1, got {n}")
    tasks = list(build(n, seed, root, **options))
    if len(tasks) != n:
        raise ValueError(f"agent {name!r} made {len(tasks)} tasks, {n} were asked for")
    return tasks
