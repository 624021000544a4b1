"""The real calibration command: a large sample and one pilot-sized seed through the harness,
a tmp MLflow store; its help and one-line errors."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.calibrate import Args

REPO = Path(__file__).resolve().parents[2]


def _run(args: list[str], cwd: Path, timeout: int = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "experiments.calibrate", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_calibrate_command_runs_harness_and_logs_to_mlflow(tmp_path: Path) -> None:
    mlruns = tmp_path / "mlruns"
    out = tmp_path / "out"
    proc = _run(["--seeds", "3", "--tasks-per-repo", "2", "--n-resamples", "500", "--large-sample", "48",
                 "--mlruns", str(mlruns), "--out", str(out), "--experiment", "calibration-test"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout
    assert "path harness; 2 tasks per repository" in text
    assert "swe-pilot: large sample, 48 tasks in 8 repositories" in text
    assert "Population inside the published intervals:" in text
    assert "swe-pilot: pilot-sized samples (3 repositories x 2 tasks, path harness, 1 seeds)" in text
    assert "swe-pilot seed   3: 6 tasks" in text
    assert "=== swe-pilot: seed x check ===" in text and "pass rate" in text
    for check in ("T1 first advantage", "T1 additional advantage", "T1 pooled advantage",
                  "T5 pristine cost", "T4 step 1 share", "creation mean", "G.4 first within-cell sd",
                  "verified share"):
        assert check in text
    assert "PASS" in text
    checks = (out / "checks.csv").read_text()
    assert checks.count("\n") >= 40  # one row per check, for the large sample and the seed
    assert ",large\n" in checks and ",seed 3\n" in checks
    assert (out / "report.txt").read_text() == text.rstrip("\n")

    from mlflow.tracking import MlflowClient

    from ripplecp_policy.tracking import tracking_uri

    client = MlflowClient(tracking_uri=tracking_uri(mlruns))
    exp = client.get_experiment_by_name("calibration-test")
    assert exp is not None
    (run,) = client.search_runs([exp.experiment_id])
    assert run.data.tags["path"] == "harness" and run.data.tags["family"] == "swe-pilot"
    assert 0.0 <= run.data.metrics["core_pass_rate"] <= 1.0
    assert run.data.metrics["large_core_pass"] in (0.0, 1.0)
    assert "T1_first_advantage_s" in run.data.metrics and "large/T1_first_advantage_s" in run.data.metrics
    arts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"report.txt", "checks.csv", "summary.csv"} <= arts


def test_help_lists_every_option_with_its_help(tmp_path: Path) -> None:
    proc = _run(["--help"], tmp_path, timeout=60)
    assert proc.returncode == 0
    out = " ".join(proc.stdout.split())
    assert out.startswith("usage: python -m experiments.calibrate")
    docs = {"seeds": "pilot-sized samples, one per seed", "families": "workload families to calibrate",
            "path": "{harness, fast}", "repos": "the pilot: 3", "large_sample": "large-sample check",
            "mlflow": "--no-mlflow turns it off"}
    for f in dataclasses.fields(Args):
        flag = "--" + f.name.replace("_", "-")
        assert flag in out, flag
    for name, text in docs.items():
        assert text in out, (name, text)


@pytest.mark.parametrize("argv, needle", [
    (["--families", "swe-pilto"], "argument --families: invalid choice 'swe-pilto' (did you mean 'swe-pilot'?)"),
    (["--seeds", "-1"], "argument --seeds: must be >= 0, got -1"),
    (["--path", "harnes"], "argument --path: invalid choice 'harnes' (did you mean 'harness'?)"),
    (["--n-resamples", "5"], "argument --n-resamples: must be >= 100, got 5"),
    (["--repos", "9"], "argument --repos: swe-pilot has 8 repositories, got --repos 9"),
    (["--large-sample", "many"], "argument --large-sample: expected an integer, got 'many'"),
])
def test_wrong_arguments_are_one_line_errors(tmp_path: Path, argv: list[str], needle: str) -> None:
    proc = _run([*argv, "--no-mlflow"], tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr
    assert err.count("\n") == 1 and err.startswith("python -m experiments.calibrate: error: "), err
    assert needle in err, err
