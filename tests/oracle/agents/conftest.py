"""Shared fixtures of the agent adapter tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from features.fixtures import fixtures_root
from oracle.protocol import TaskSpec

FIXTURES = fixtures_root()


@pytest.fixture
def task_spec() -> Callable[..., TaskSpec]:
    """``task_spec(**params)``: a task without template or verifier, carrying ``params``."""
    return lambda **params: TaskSpec("t1", "r", "fam", None, None, dict(params))


@pytest.fixture
def codex_stream() -> Path:
    """A real ``codex exec --json`` log from the shared fixtures (skips when absent)."""
    folder = FIXTURES / "trajectories" / "codex_exec_jsonl"
    if not folder.exists():
        pytest.skip(f"shared fixtures folder absent (user clone): {folder}")
    return folder / "tielec_issue-119_00_planning_execute.jsonl"


class Finished:
    """A finished agent run: its events, boundaries, exit status, and the workspace copies
    and preserved state taken at each boundary (the agent paused meanwhile)."""

    def __init__(self, events: list, boundaries: list[int], rc: int,
                 snapshots: dict[int, tuple[Path, list[dict], dict]]) -> None:
        self.events, self.boundaries, self.rc, self.snapshots = events, boundaries, rc, snapshots

    @property
    def phases(self) -> list[str | None]:
        return [e.extra.get("phase") for e in self.events]


@pytest.fixture
def finish() -> Callable[..., Finished]:
    """``finish(run, snap_dir=None)``: drive ``run`` to its end; with ``snap_dir``, copy the
    workspace at every boundary (as the harness checkpoints it: the agent is paused)."""
    import shutil

    def _finish(run, snap_dir: Path | None = None, workspace: Path | None = None) -> Finished:
        events, boundaries, snaps = [], [], {}
        for rep in run.reports():
            if rep.kind == "event":
                events.append(rep.event)
            elif rep.kind == "boundary":
                boundaries.append(rep.boundary)
                if snap_dir is not None:
                    run.pause()
                    try:
                        dest = snap_dir / f"b{rep.boundary}"
                        shutil.copytree(workspace, dest, symlinks=True)
                        transcript, facts = run.preserved()
                        snaps[rep.boundary] = (dest, transcript, facts)
                    finally:
                        run.cont()
        return Finished(events, boundaries, run.wait(), snaps)

    return _finish
