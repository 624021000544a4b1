"""Smoke test of benchmarks/reliability_model_server.py: the real script, each case small."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_reliability_model_server_runs_every_case_and_finds_nothing_wrong() -> None:
    res = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "reliability_model_server.py"), "--bombs",
         "1", "--malformed", "4", "--half-open", "1", "--idle", "1", "--bursts", "1"],
        capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    for case in ("bomb", "malformed", "half-open", "concurrent clients", "half-sent body",
                 "no traceback"):
        assert case in res.stdout
    assert "wrong: 0" in res.stdout
