"""Shared fixtures of the agent adapter tests."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from oracle.agents.protocol import TaskSpec

# the shared fixtures beside the checkout or above it (a worktree sits deeper), or where
# RIPPLECP_FIXTURES points (the same search as tests/features/conftest.py)
FIXTURES = Path(os.environ["RIPPLECP_FIXTURES"]) if os.environ.get("RIPPLECP_FIXTURES") else next(
    (up / "shared" / "fixtures" for up in Path(__file__).resolve().parents[3:]
     if (up / "shared" / "fixtures").is_dir()),
    Path(__file__).resolve().parents[3].parent / "shared" / "fixtures")


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
