"""Smoke test of benchmarks/reliability_checkpoint.py: the real script, a tiny budget."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_reliability_script_runs_every_case_and_loses_nothing(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "reliability_checkpoint.py"),
         "--checkpoints", "3", "--kills", "2", "--bomb-mb", "64", "--restores", "2",
         "--links", "20", "--hostile", "6", "--workdir", str(tmp_path)],
        capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    for case in ("symlinks to outside", "FIFOs", "deleted", "SIGKILLed", "bombs",
                 "edited manifests", "malformed manifests", "restore raced", "links at create",
                 "hostile stores", "restores SIGKILLed"):
        assert case in res.stdout
    assert "wrong: 0" in res.stdout
    assert list(tmp_path.iterdir()) == []  # its scratch folder is removed
