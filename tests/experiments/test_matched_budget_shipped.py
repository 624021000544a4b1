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
         "--families", "bisect", "migrate",  # two of its five families: the CI's time
         "--no-mlflow", "--no-learned", "--budgets", "count:1", "--n-resamples", "500",
         "--out", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stderr[-3000:]
    report = (tmp_path / "report.txt").read_text()
    assert "== repair: " not in report
    for fam in ("bisect", "migrate"):
        assert f"== {fam}: " in report
        assert any(ln.split()[:1] == [fam] for ln in p.stdout.split("\n\n")[0].splitlines())  # a headline row
    assert (tmp_path / "summary.csv").exists()


def test_the_default_study_holds_the_shipped_families_beside_the_simulated_ones() -> None:
    """Issue 17: the main job evaluates the shipped set by default; --quick and --no-shipped
    leave it out, and --labels replaces both."""
    from experiments.matched_budget import label_sets, parse_args
    from labelsets.tables import LabelSet
    from ripplecp_policy.data import resolve_labels

    real = LabelSet.load(resolve_labels("shipped"))
    real_fams = {str(f) for f in real.tasks["family"].unique()}
    data = label_sets(parse_args(["--families", "swe-pilot", "--tasks-per-repo", "1", "--no-controls"]))
    assert set(data) == {"swe-pilot"} | real_fams
    for fam in real_fams:  # each real family whole, verified by the loader
        assert sorted(data[fam].task_ids) == sorted(
            real.tasks.loc[real.tasks["family"] == fam, "task_id"])
    assert set(label_sets(parse_args(["--families", "swe-pilot", "--tasks-per-repo", "1",
                                           "--no-shipped", "--no-controls"]))) == {"swe-pilot"}
    # the controls come with every simulated study unless --no-controls
    assert set(label_sets(parse_args(["--families", "swe-pilot", "--tasks-per-repo", "1",
                                       "--no-shipped"]))) == {"swe-pilot", "long-horizon", "positive-control"}
    assert set(label_sets(parse_args(["--quick"]))) == {"long-horizon", "positive-control"}
    assert set(label_sets(parse_args(["--labels", "shipped"]))) == real_fams
