"""Smoke test of benchmarks/reliability_harness.py: the real script, one case of each kind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_reliability_harness_runs_every_case_and_finds_nothing_wrong() -> None:
    res = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "reliability_harness.py"), "--edits", "1",
         "--files", "2", "--options", "1", "--outs", "1", "--interrupts", "1"],
        capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr[-2000:]
    for case in ("plan edited + resealed", "--task-opt", "--out", "Ctrl-C"):
        assert case in res.stdout
    assert "wrong: 0" in res.stdout
