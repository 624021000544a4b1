"""Shared fixtures of the oracle tests: a small agent on the virtual clock (the protocol's
other side), registered as ``toy-virtual`` (noise-free) and ``toy-noisy``; and a hand-made
one-task label set (``tiny_label_set``, rows from ``recovery_row``) for the table tests."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from features.schema import Event
from oracle.agents import register_agent
from oracle.protocol import AgentReport, Clock, RestorePoint, TaskSpec

#: nominal seconds of the toy agent's steps (one boundary after each)
STEP_S = (5.0, 2.0, 1.0)


class _ToyRun:
    def __init__(self, ws: Path, clock: Clock, seed: int, start_b: int, transcript: list[dict],
                 facts: dict, noise: float) -> None:
        self.ws, self.clock, self.rng = ws, clock, random.Random(seed * 31 + start_b)
        self.start_b, self.noise = start_b, noise
        self.transcript, self.facts = list(transcript), dict(facts)
        self._pres = (list(transcript), dict(facts))
        self.killed = False
        self.usage = {"tokens": 0, "tool_calls": 0}

    def reports(self) -> Iterator[AgentReport]:
        if self.start_b > 0:
            # re-orientation after a restore, with a random detour when noisy
            self.clock.sleep(0.5 + self.noise * 4 * self.rng.random())
            yield AgentReport("event", event=Event(index=0, kind="model_call", input_tokens=10))
        for b in range(self.start_b + 1, len(STEP_S) + 1):
            if self.killed:
                return
            self.clock.sleep(STEP_S[b - 1] * (1 + self.noise * self.rng.uniform(-1, 1)))
            (self.ws / f"step{b}.txt").write_text(f"step {b}\n")
            self.usage["tool_calls"] += 1
            self.usage["tokens"] += 100
            yield AgentReport("event", event=Event(
                index=0, kind="command", step=b, safe_boundary=True, boundary_kind="tool_return",
                turn_end=True, extra={"source": "api", "payload_digest": f"d{b}"}))
            if self.killed:
                return
            self.transcript.append({"done": b})
            self._pres = (list(self.transcript), dict(self.facts))
            yield AgentReport("boundary", boundary=b)
        (self.ws / "done").write_text("ok")

    def preserved(self) -> tuple[list[dict], dict[str, Any]]:
        return list(self._pres[0]), dict(self._pres[1])

    def kill(self) -> None:
        self.killed = True

    def wait(self) -> int:
        return -9 if self.killed else 0


class ToyAgent:
    name = "toy-virtual"

    def __init__(self, noise: float = 0.0) -> None:
        self.noise = noise

    def start(self, task: TaskSpec, workspace: Path, seed: int, clock: Clock) -> _ToyRun:
        return _ToyRun(workspace, clock, seed, 0, [], {}, self.noise)

    def resume(self, task: TaskSpec, restore: RestorePoint, workspace: Path, seed: int,
               clock: Clock) -> _ToyRun:
        return _ToyRun(workspace, clock, seed, restore.boundary, restore.transcript,
                       restore.facts, self.noise)

    def verify(self, task: TaskSpec, workspace: Path) -> bool:
        return (workspace / "done").exists()

    def simulated_checkpoint_cost(self, task: TaskSpec, boundary: int, workspace: Path) -> tuple[float, int]:
        return 0.25, 1000 * boundary

    def simulated_restore_latency(self, task: TaskSpec, boundary: int) -> float:
        return 0.125


register_agent("toy-virtual", ToyAgent)
register_agent("toy-noisy", lambda: ToyAgent(noise=0.9))


@pytest.fixture
def scripted_plan(tmp_path: Path) -> Callable[[int, int], Path]:
    """``scripted_plan(n_tasks, seed)``: freeze a pilot plan of fast scripted tasks with
    ``python -m oracle plan`` (nominal runs included); returns the plan file, whose study
    directory is ``<plan>.study`` beside it."""
    from oracle.__main__ import main

    def make(n_tasks: int, seed: int) -> Path:
        path = tmp_path / "plan.json"
        assert main(["plan", "--agent", "scripted", "--tasks", str(n_tasks), "--design", "pilot",
                     "--seed", str(seed), "--out", str(path), "--task-opt", "time_scale=0.1",
                     "--task-opt", "n_files=2", "--task-opt", "n_steps=3"]) == 0
        return path

    return make


_install_results: dict[str, object] = {}


def ready_runtime(name: str) -> Any:
    """The pinned runtime ``name``, installed (idempotent, once per session) into
    ``.runtimes/``, or skip the calling test saying why it cannot be installed here."""
    from oracle.agents import runtimes

    if name not in _install_results:
        try:
            _install_results[name] = runtimes.install(name)
        except runtimes.RuntimeInstallError as exc:
            _install_results[name] = exc
    found = _install_results[name]
    if isinstance(found, Exception):
        pytest.skip(f"{name} cannot be installed here: {found}")
    return runtimes.get_runtime(name)


@pytest.fixture
def runtime() -> Callable[[str], Any]:
    """``runtime(name)``: the pinned runtime, installed, or the test skips saying why."""
    return ready_runtime


@pytest.fixture
def toy_tasks() -> Callable[[int], list[TaskSpec]]:
    """``toy_tasks(n)``: n tasks of the toy agent, one repository each."""
    return lambda n: [TaskSpec(f"toy{i}", f"repo{i}", "toy", None, None, {}) for i in range(n)]


@pytest.fixture
def toy_step_s() -> tuple[float, ...]:
    """The toy agent's nominal step seconds."""
    return STEP_S
