"""Shared fixtures of the ``features`` tests: the real public agent logs in ``shared/fixtures``.

The logs are never copied into the project: they are found in a ``shared/fixtures/
trajectories`` folder beside the checkout or above it (a worktree of the checkout sits one
level deeper), or where ``RIPPLECP_FIXTURES`` points. Tests that need them skip, saying
why, when the folder is absent (a user's clone).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from features.fixtures import trajectories
from features.readers import read_trajectory
from features.schema import EventKind, Trajectory

TRAJECTORIES = trajectories()


def fixture_file(rel: str) -> Path:
    """Path of a fixture log, skipping the calling test when it is absent."""
    if not TRAJECTORIES.is_dir():
        pytest.skip(f"shared fixtures folder absent (user clone): {TRAJECTORIES}")
    p = TRAJECTORIES / rel
    if not p.exists():
        pytest.skip(f"fixture missing: {p}")
    return p


@functools.cache
def _read_cached(rel: str) -> Trajectory:
    return read_trajectory(TRAJECTORIES / rel)


@pytest.fixture
def fixture_path() -> Callable[[str], Path]:
    """``fixture_path(rel)``: the path of a fixture log (the test skips when absent)."""
    return fixture_file


@pytest.fixture
def read_fixture() -> Callable[[str], Trajectory]:
    """``read_fixture(rel)``: a fixture log read once per session (skips when absent).
    The trajectory is shared: tests must not change it."""

    def read(rel: str) -> Trajectory:
        fixture_file(rel)
        return _read_cached(rel)

    return read


@pytest.fixture
def fixture_logs() -> list[Path]:
    """Every agent log among the fixtures (SWE-bench report siblings left out)."""
    if not TRAJECTORIES.is_dir():
        pytest.skip(f"shared fixtures folder absent (user clone): {TRAJECTORIES}")
    return sorted(p for p in TRAJECTORIES.glob("*/*") if p.is_file()
                  and p.suffix in (".jsonl", ".json", ".traj") and not p.name.endswith(".report.json"))


@pytest.fixture
def write_jsonl(tmp_path: Path) -> Callable[[str, Iterable[object]], Path]:
    """``write_jsonl(name, records)``: a JSONL log of ``records`` in the test's tmp folder."""

    def write(name: str, records: Iterable[object]) -> Path:
        p = tmp_path / name
        p.write_text("".join(json.dumps(x) + "\n" for x in records), encoding="utf-8")
        return p

    return write


@pytest.fixture
def kinds() -> Callable[[Trajectory, EventKind], list]:
    """``kinds(traj, kind)``: the events of one kind, in order."""
    return lambda t, kind: [e for e in t.events if e.kind == kind]


@pytest.fixture
def tokens() -> Callable[[Trajectory], tuple[int, int, int]]:
    """``tokens(traj)``: (input, cached, output) token sums, missing counts as 0."""
    return lambda t: tuple(sum(getattr(e, f) or 0 for e in t.events)
                           for f in ("input_tokens", "cached_tokens", "output_tokens"))


@pytest.fixture
def write_file(tmp_path: Path) -> Callable[[str, bytes | str], Path]:
    """``write_file(name, data)``: a file of ``data`` (str as UTF-8) in the test's tmp folder."""

    def write(name: str, data: bytes | str) -> Path:
        p = tmp_path / name
        p.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
        return p

    return write
