"""The main job evaluates the shipped real label set by name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_matched_budget_on_the_shipped_set_by_name(tmp_path: Path) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "experiments.matched_budget", "--labels", "shipped", "--quick",
         "--no-mlflow", "--no-learned", "--budgets", "count:1", "--n-resamples", "500",
         "--out", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stderr[-3000:]
    for fam in ("repair", "depres", "cbuild", "migrate"):
        assert f"== {fam}: " in p.stdout
    assert (tmp_path / "summary.csv").exists()
