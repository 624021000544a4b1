"""Smoke test: the real LORO training study, --quick, into a temporary MLflow store."""

from __future__ import annotations

from pathlib import Path

import mlflow
import mlflow.pyfunc
import pytest
from mlflow.tracking import MlflowClient

from experiments.train_policies import KINDS, main, make_policy, parse_args, run_study
from ripplecp_policy.datasets import replays
from ripplecp_policy.export import example_frame
from ripplecp_policy.policy import Budget
from ripplecp_policy.tracking import tracking_uri


@pytest.fixture(scope="module")
def labels(tmp_path_factory, toy_label_set) -> Path:
    path = tmp_path_factory.mktemp("labels") / "toy"
    toy_label_set(n_repos=3, tasks_per_repo=2, seed=5).save(path)
    return path


@pytest.mark.slow
def test_quick_study_logs_runs_trials_and_model(labels: Path, tmp_path: Path, capsys,
                                                 toy_label_set) -> None:
    root = tmp_path / "mlruns"
    rc = main(["--labels", str(labels), "--quick", "--mlruns", str(root),
               "--kinds", "ridge,fqi-xgboost", "--n-trials", "2", "--out", str(tmp_path / "out")])
    assert rc == 0
    captured = capsys.readouterr()
    printed = captured.out
    assert "first-boundary" in printed and "VERDICT" in printed
    # long steps show their progress (stderr is no terminal here: plain lines; MLflow's own
    # artifact bars are tqdm's)
    ours = [line for line in captured.err.split("\n") if line.startswith(("folds ", "export "))]
    assert any(line.startswith("folds labels (kind x held-out repo): 6/6 done in ") for line in ours)
    assert any(line.startswith("export ") and " done in " in line for line in ours)
    assert not any("\r" in line for line in ours)
    assert (tmp_path / "out" / "per_fold.csv").exists()

    client = MlflowClient(tracking_uri(root))
    exp = client.get_experiment_by_name("train_policies")
    runs = client.search_runs([exp.experiment_id], max_results=500)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1
    parent = parents[0]
    assert parent.data.params["exported_kind"] in ("ridge", "fqi-xgboost")
    names = [r.info.run_name for r in runs]
    folds = [r for r in runs if "-fold" in r.info.run_name]
    assert len(folds) == 2 * 3  # two kinds x three held-out repositories
    for r in folds:
        assert "heldout_cost_s" in r.data.metrics and "first_boundary_cost_s" in r.data.metrics
        assert r.data.params["held_out"] in r.info.run_name
        # the policy's parameters and fitted scalars (issue 16): ridge's threshold_, FQI's
        assert "random_state" in r.data.params and any(k.endswith("_") for k in r.data.params)
    trials = [r for r in runs if r.info.run_name.startswith("trial-")]
    assert len(trials) == 2 * 6 and all("objective" in r.data.metrics for r in trials)
    fold_ids = {r.info.run_id for r in folds}
    assert all(r.data.tags["mlflow.parentRunId"] in fold_ids for r in trials)
    assert sum(n == "ridge" for n in names) == 1
    xgb_fold = next(r for r in folds if r.info.run_name.startswith("ridge"))
    arts = {a.path for a in client.list_artifacts(xgb_fold.info.run_id)}
    assert {"feature_importances.json", "split_audit.json", "policy.joblib"} <= arts

    # the exported policy loads and decides on boundary features
    mlflow.set_tracking_uri(tracking_uri(root))
    models = client.search_logged_models([exp.experiment_id])
    assert len(models) == 1
    assert models[0].params and models[0].params.get("random_state") is not None
    loaded = mlflow.pyfunc.load_model(models[0].model_uri)
    data = toy_label_set(n_repos=3, tasks_per_repo=2, seed=5)
    task = next(iter(replays(data).values()))
    trace = []
    task.replay(lambda o: False, Budget("count", 2), trace=trace)
    # no state columns: the model tracks its own placement and the study's budget (2)
    frame = example_frame(trace).drop(columns=["remaining_budget", "last_checkpoint", "n_checkpoints"])
    out = loaded.predict(frame)
    assert list(out.columns) == ["task_id", "boundary", "checkpoint", "score", "out_of_range"]
    assert len(out) == task.n_boundaries and out["checkpoint"].sum() <= 2
    # it names what it was trained on: the advisor warns when it follows something else
    cfg = loaded.unwrap_python_model().config
    assert cfg["log_format"] and cfg["training_runtime"] and len(cfg["label_set_sha256"]) == 64


def test_kinds_are_the_registered_learned_policies() -> None:
    from ripplecp_policy.learned import LEARNED
    from ripplecp_policy.registry import entry_for

    assert KINDS == tuple(e.key for e in LEARNED)
    args = parse_args(["--quick", "--device", "cpu", "--seed", "3"])
    for kind in KINDS:
        pol = make_policy(kind, args)
        assert entry_for(pol).key == kind and pol.get_params()["random_state"] == 3


def test_args_reject_unknown_kinds() -> None:
    with pytest.raises(SystemExit):
        parse_args(["--kinds", "xgboost,deep-q"])
    a = parse_args(["--quick"])
    assert a.n_trials == 3 and a.tasks_per_repo == 2


def test_leaky_labels_path_is_reported(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="label_set.json"):
        run_study(parse_args(["--labels", str(tmp_path), "--mlruns", str(tmp_path / "m")]))
