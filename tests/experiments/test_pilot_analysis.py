"""Smoke tests that run the real ``python -m experiments.pilot_analysis`` into tmp dirs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from labelsets.tables import LabelSet
from ripplecp_policy.tracking import tracking_uri

REPO = Path(__file__).resolve().parents[2]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real command, importing this checkout (not whichever one is installed)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))  # this checkout, whatever cwd
    return subprocess.run(
        [sys.executable, "-m", "experiments.pilot_analysis", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
    )


@pytest.fixture(scope="module")
def mlruns(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tmp MLflow store for the module (creating a SQLite store costs seconds); each
    test logs to its own experiment."""
    return tmp_path_factory.mktemp("mlruns")


def _runs(mlruns: Path, experiment: str) -> list:
    client = MlflowClient(tracking_uri=tracking_uri(mlruns))
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, "experiment not created in the tmp MLflow store"
    assert exp.artifact_location == (mlruns / "artifacts" / experiment).resolve().as_uri()
    return client.search_runs([exp.experiment_id])


def _artifact_names(mlruns: Path, run_id: str) -> set[str]:
    client = MlflowClient(tracking_uri=tracking_uri(mlruns))
    return {a.path for a in client.list_artifacts(run_id)}


def test_pilot_command(tmp_path: Path, mlruns: Path) -> None:
    out = tmp_path / "out"
    res = _run(["--pilot", "--out", str(out), "--mlruns", str(mlruns), "--experiment", "pilot"],
               cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "G.1" in res.stdout and "Table 1" in res.stdout and "Table 2" in res.stdout
    g1 = pd.read_csv(out / "g1_verified_sensitivity.csv", index_col=0)
    assert g1.at["all_tasks", "low"] == pytest.approx(40.4, abs=0.1)
    assert g1.at["verified_only", "advantage_s"] == pytest.approx(49.4, abs=0.1)
    for png in ("figure2_marginal_value.png", "figure4_per_task_advantage.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    runs = _runs(mlruns, "pilot")
    assert len(runs) == 1
    run = runs[0]
    assert run.data.metrics["advantage_pooled_all_s"] == pytest.approx(61.3, abs=0.1)
    assert run.data.metrics["reps_ratio_additional_over_first"] > 10
    assert {"figure2_marginal_value.png", "g1_verified_sensitivity.csv"} <= _artifact_names(mlruns, run.info.run_id)
    assert not (tmp_path / "mlruns").exists()  # nothing went to the default ./mlruns


def test_synthetic_label_set(tmp_path: Path, mlruns: Path, synthetic_labels, seal_labels) -> None:
    labels = synthetic_labels(n_tasks=9, reps=2, seed=5)
    lset = seal_labels(labels, tmp_path / "labelset")
    feats = labels.groupby("cell_id").agg(tool_calls=("tool_calls_skip", "first")).reset_index()
    feats.to_parquet(tmp_path / "cell_features.parquet")
    out = tmp_path / "out"
    res = _run(["--labels", str(lset), "--out", str(out), "--mlruns", str(mlruns), "--experiment", "synthetic",
                "--features", str(tmp_path / "cell_features.parquet"),
                "--n-resamples", "2000", "--n-permutations", "1000"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    t1 = pd.read_csv(out / "table1_marginal_value.csv", index_col=0)
    assert list(t1.index) == ["first", "additional", "pooled"]
    assert t1.at["first", "advantage_s"] > 50 > abs(t1.at["additional", "advantage_s"])
    assert t1.at["first", "tasks"] == 8  # task t04 is unverified
    t2 = pd.read_csv(out / "table2_spearman.csv", index_col=0)
    assert {"protected_work_s", "tool_calls"} <= set(t2.index)
    for png in ("figure2_marginal_value.png", "figure4_per_task_advantage.png"):
        assert (out / png).stat().st_size > 1000
    runs = _runs(mlruns, "synthetic")
    assert len(runs) == 1 and runs[0].data.params["n_resamples"] == "2000"
    # the hash of the set it verified and read (was: the manifest's, whatever the tables held)
    manifest = json.loads((lset / "label_set.json").read_text())
    assert runs[0].data.params["label_set_hash"] == manifest["hash"] == LabelSet.load(lset).content_hash()
    assert "table1_marginal_value.csv" in _artifact_names(mlruns, runs[0].info.run_id)


def test_bad_labels_path_is_a_clear_error(tmp_path: Path) -> None:
    res = _run(["--labels", str(tmp_path / "nope"), "--out", str(tmp_path / "o"), "--no-mlflow"],
               cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert "argument --labels: " in res.stderr and "nope: no such file or directory" in res.stderr
    (tmp_path / "empty").mkdir()
    res = _run(["--labels", str(tmp_path / "empty"), "--out", str(tmp_path / "o"), "--no-mlflow"],
               cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert "empty" in res.stderr and "missing" in res.stderr
