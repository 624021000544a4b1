"""Smoke test of the real calibration command: one seed, through the harness, tmp MLflow store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_calibrate_command_runs_harness_and_logs_to_mlflow(tmp_path: Path) -> None:
    mlruns = tmp_path / "mlruns"
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.calibrate", "--seeds", "3", "--tasks-per-repo", "2", "--n-resamples", "500",
         "--mlruns", str(mlruns), "--out", str(out), "--experiment", "calibration-test"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout
    assert "path: harness; 2 tasks per repository" in text
    assert "=== seed x check ===" in text and "pass rate" in text
    for check in ("T1 first advantage", "T1 additional advantage", "T1 pooled advantage",
                  "T5 pristine cost", "T4 step 1 share", "creation mean", "G.4 first within-cell sd"):
        assert check in text
    assert "PASS" in text
    checks = (out / "checks.csv").read_text()
    assert checks.count("\n") >= 20  # one row per check
    assert (out / "report.txt").read_text() == text.rstrip("\n")

    from mlflow.tracking import MlflowClient

    from ripplecp_policy.tracking import tracking_uri

    client = MlflowClient(tracking_uri=tracking_uri(mlruns))
    exp = client.get_experiment_by_name("calibration-test")
    assert exp is not None
    (run,) = client.search_runs([exp.experiment_id])
    assert run.data.tags["path"] == "harness"
    assert 0.0 <= run.data.metrics["core_pass_rate"] <= 1.0
    assert "T1_first_advantage_s" in run.data.metrics
    arts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"report.txt", "checks.csv", "summary.csv"} <= arts
