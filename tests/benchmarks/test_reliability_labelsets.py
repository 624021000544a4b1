"""Smoke test of benchmarks/reliability_labelsets.py: the real script, the loader only, the
controls and a few generated cases (issue 32: resealed impossible labels, signed sets)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_reliability_labelsets_generated_cases_are_all_refused(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "reliability_labelsets.py"), "--no-commands",
         "--no-fixed", "--generated", "6", "--workdir", str(tmp_path)],
        capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "gen: resealed label" in res.stdout and "gen: signed set" in res.stdout
    assert "signed with the key (control)" in res.stdout
    assert "wrong 0" in res.stdout
