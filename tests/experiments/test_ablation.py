"""``python -m experiments.ablation``: the command line, the variants, and a smoke run of
the real script (--quick, logged to MLflow)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from experiments.ablation import ALL, Args, main, variants
from features.row import FAMILIES

MODULE = "experiments.ablation"


def test_help_lists_every_option(check_help) -> None:
    out = check_help(MODULE, Args)
    assert "--no-mlflow" in out and "--seed N" in " ".join(out.split())


@pytest.mark.parametrize("argv, needle", [
    (["--families", "long-horizn"], "argument --families: invalid choice 'long-horizn' (did you mean 'long-horizon'?)"),
    (["--budgets", "count:0"], "'count:0': a count budget takes a positive integer, got 0"),
    (["--labels", "/nonexistent"], "argument --labels: /nonexistent: no such directory"),
    (["--seed", "-1"], "argument --seed: must be >= 0, got -1"),
    (["--n-resamples", "5"], "argument --n-resamples: must be >= 100, got 5"),
    (["--experiment", "a/b"], "argument --experiment: experiment name must be a plain, non-empty name"),
    (["--workers", "2"], "unrecognized arguments: --workers 2"),
])
def test_wrong_arguments(one_line_error, argv, needle) -> None:
    one_line_error(main, [*argv, "--no-mlflow"], needle)


def test_every_family_removed_and_alone() -> None:
    v = dict(variants())
    assert set(v[ALL].families) == set(FAMILIES)
    for f in FAMILIES:
        assert f not in v[f"without {f}"].families and len(v[f"without {f}"].families) == len(FAMILIES) - 1
        assert v[f"only {f}"].families == (f,)


@pytest.mark.slow
def test_quick_run_of_the_real_script(run_command, tmp_path: Path) -> None:
    store, out = tmp_path / "mlruns", tmp_path / "out"
    proc = run_command(MODULE, "--quick", "--mlruns", str(store), "--out", str(out), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "== ablation: difference to first-boundary" in proc.stdout
    df = pd.read_csv(out / "ablation.csv")
    assert "fixed-positions" in set(df["policy"])
    learned = df[df["policy"] != "fixed-positions"]
    assert set(learned["features"]) == {label for label, _ in variants()}
    assert (learned[learned["features"] == ALL]["vs_all"].abs() < 1e-9).all()

    from mlflow.tracking import MlflowClient

    from ripplecp_policy.tracking import tracking_uri

    client = MlflowClient(tracking_uri=tracking_uri(store))
    (exp,) = [e for e in client.search_experiments() if e.name == "ablation"]
    runs = client.search_runs([exp.experiment_id])
    (run,) = [r for r in runs if r.data.tags.get("ripplecp.kind") == "study"]
    assert run.info.status == "FINISHED" and "study_seconds" in run.data.metrics
    assert {"ablation.csv", "ablation.txt"} <= {a.path for a in client.list_artifacts(run.info.run_id)}
    kids = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == run.info.run_id]
    assert len(kids) == len(runs) - 1 and all(k.info.status == "FINISHED" for k in kids)
    assert len({(k.data.tags["ripplecp.family"], k.data.tags["ripplecp.policy"],
                 k.data.tags["ripplecp.budget"]) for k in kids}) == len(kids)  # one per cell
    assert any("diff/only ripple" in k.data.metrics for k in kids)
