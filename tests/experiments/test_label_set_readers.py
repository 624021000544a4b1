"""Every command that reads a label set goes through the one verified loader and refuses a
corrupted set in one line (exit status 2) naming the file and field; ``pilot_analysis``
reads a full-design set on the pilot's cells derived from its recovery tables."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from labelsets.tables import labels_from_table, read_table, write_table
from oracle.simulator import simulate_label_set

REPO = Path(__file__).resolve().parents[2]
#: each reader, with the arguments that keep it small and off MLflow
READERS = {
    "matched_budget": ["--quick", "--no-mlflow", "--no-learned"],
    "pilot_analysis": ["--no-mlflow", "--n-resamples", "200", "--n-permutations", "200"],
    "train_policies": ["--quick", "--no-export", "--kinds", "ridge"],
}


def _run(module: str, labels: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), RIPPLECP_MLRUNS=str(tmp / "mlruns"))
    return subprocess.run(
        [sys.executable, "-m", f"experiments.{module}", "--labels", str(labels), "--out",
         str(tmp / "out"), *READERS[module]],
        cwd=tmp, env=env, capture_output=True, text=True, timeout=300,
    )


@pytest.fixture(scope="module")
def full_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A full-design set as the harness writes it: table branches, no pairs."""
    ls = simulate_label_set("dependency-resolution", n_repos=2, tasks_per_repo=2, design="full",
                            seed=2)
    ls.labels = ls.labels.iloc[:0]
    return ls.save(tmp_path_factory.mktemp("full") / "labelset")


def _corrupt(src: Path, dst: Path, how: str) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    m = json.loads((dst / "label_set.json").read_text())
    if how == "hash-removed":
        del m["hash"]
    elif how == "version-999":
        m["version"] = "999"
    elif how == "manifest-list":
        m = [m]
    elif how == "advantage-x10":  # the hash kept: the first-checkpoint advantage x 10
        lab = read_table(dst / "labels.parquet", "labels")
        lab["advantage"] *= 10
        write_table(lab, "labels", dst / "labels.parquet")
    elif how == "garbage-recovery":
        (dst / "recovery.parquet").write_bytes(b"PAR1 garbage")
    (dst / "label_set.json").write_text(json.dumps(m))
    return dst


@pytest.mark.parametrize("module, how, field", [
    ("matched_budget", "hash-removed", "label_set.json: field 'hash'"),
    ("matched_budget", "garbage-recovery", "recovery.parquet"),
    ("pilot_analysis", "manifest-list", "label_set.json: must be a JSON object"),
    ("pilot_analysis", "version-999", "label_set.json: field 'version'"),
    ("train_policies", "hash-removed", "label_set.json: field 'hash'"),
])  # every corruption against the loader: tests/oracle/test_label_set_integrity.py
def test_a_corrupted_set_is_refused_in_one_line(tmp_path: Path, full_set: Path, module: str,
                                                how: str, field: str) -> None:
    res = _run(module, _corrupt(full_set, tmp_path / how, how), tmp_path)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2, res.stderr[-2000:]
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in res.stderr, res.stderr
    assert str(tmp_path / how) in lines[0]
    assert not (tmp_path / "out" / "summary.csv").exists()


def test_pilot_analysis_refuses_edited_advantages_under_a_kept_hash(tmp_path: Path) -> None:
    """It read labels.parquet alone: advantages x 10 printed 1361.4 s instead of 136.1 s."""
    ls = simulate_label_set("swe-pilot", n_repos=2, tasks_per_repo=2, design="pilot", seed=0)
    src = ls.save(tmp_path / "pilot")
    res = _run("pilot_analysis", _corrupt(src, tmp_path / "x10", "advantage-x10"), tmp_path)
    # refused for the impossible rows (advantage != J_skip - J_cp) or, were they
    # consistent, for the hash
    assert res.returncode == 2 and ("field 'hash' does not match" in res.stderr
                                    or "not J_skip - J_cp" in res.stderr), res.stderr[-2000:]
    assert "Table 1" not in res.stdout


def test_pilot_analysis_names_the_file_of_invalid_json(tmp_path: Path, full_set: Path) -> None:
    bad = _corrupt(full_set, tmp_path / "bad", "none")
    (bad / "label_set.json").write_text("{not json")
    res = _run("pilot_analysis", bad, tmp_path)
    assert res.returncode == 2 and f"{bad / 'label_set.json'}: invalid JSON" in res.stderr


def test_pilot_analysis_reads_a_full_design_set(tmp_path: Path, full_set: Path) -> None:
    """It failed with 'operands could not be broadcast together' on a set without pairs."""
    res = _run("pilot_analysis", full_set, tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "pilot cells derived from the recovery tables" in res.stdout
    t1 = pd.read_csv(tmp_path / "out" / "table1_marginal_value.csv", index_col=0)
    from labelsets.tables import LabelSet

    data = LabelSet.load(full_set)
    want = labels_from_table(data.tasks, data.checkpoints, data.recovery)
    assert t1.at["pooled", "pairs"] == len(want[want["verified"]]) > 0
    assert set(want["cell_id"].str.extract(r":(t\d+:c\d+:f\d+)$")[0]) >= {"t1:c0:f2"}
