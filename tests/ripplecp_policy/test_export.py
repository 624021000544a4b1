"""Round trip of the MLflow pyfunc export: the loaded model decides like the policy."""

from __future__ import annotations

from pathlib import Path

import mlflow.pyfunc
import pandas as pd
import pytest

from ripplecp_policy.datasets import replays
from ripplecp_policy.export import decide_frame, example_frame, log_policy_model, model_config
from ripplecp_policy.learned import AdvantageRegressorPolicy, FittedQPolicy
from ripplecp_policy.policy import Budget, Setting
from ripplecp_policy.splits import leave_one_repo_out

BUDGET = Budget("count", 2)


@pytest.fixture(scope="module")
def fold(toy_label_set):
    ls = toy_label_set(n_repos=3, tasks_per_repo=2, seed=3)
    f = leave_one_repo_out(ls)[0]
    return ls.subset(f.train_tasks), ls.subset(f.test_tasks)


def _trace(policy, data):
    """In-process decisions with the observations the policy saw, per held-out task."""
    obs_all, decided = [], []
    for task in replays(data).values():
        policy.reset(task.task_id, 0)
        trace = []
        place = task.replay(policy.decide, BUDGET, trace=trace)
        obs_all += trace
        decided += [o.boundary in place for o in trace]
    return example_frame(obs_all), decided


@pytest.mark.parametrize("make", [
    lambda: AdvantageRegressorPolicy("xgboost", n_estimators=30, threshold=-5.0),
    lambda: FittedQPolicy(n_estimators=10, n_behaviour_seeds=2),
], ids=["xgboost", "fqi"])
def test_pyfunc_round_trip_matches_in_process(tmp_path: Path, fold, make) -> None:
    train, test = fold
    policy = make().fit(train, Setting(BUDGET))
    frame, decided = _trace(policy, test)
    assert any(decided) and not all(decided)  # the comparison can fail both ways
    path = log_policy_model(policy, BUDGET, frame.head(3), path=tmp_path / "model")
    loaded = mlflow.pyfunc.load_model(str(path))
    out = loaded.predict(frame)
    assert list(out["checkpoint"]) == decided
    # without state columns the model tracks the budget itself and decides the same
    bare = frame.drop(columns=["remaining_budget", "last_checkpoint", "n_checkpoints"])
    assert list(loaded.predict(bare)["checkpoint"]) == decided


def test_decide_frame_refuses_missing_features(fold) -> None:
    train, _ = fold
    policy = AdvantageRegressorPolicy("ridge").fit(train, Setting(BUDGET))
    cfg = model_config(policy, BUDGET)
    with pytest.raises(ValueError, match="lacks columns"):
        decide_frame(policy, pd.DataFrame({"boundary": [1], "cost__nonexistent": [0.0]}), cfg)


def test_logged_model_carries_params_and_loads_from_its_store_without_a_global_uri(
        tmp_path: Path, fold) -> None:
    """A model logged in a run of the store at ``root`` keeps its params and tags, and
    load_policy_model reads it by models:/ or runs:/ URI with the global tracking URI
    pointing elsewhere (plain mlflow.pyfunc.load_model needs set_tracking_uri)."""
    from mlflow.tracking import MlflowClient

    from ripplecp_policy.export import default_checkpoint_cost, load_policy_model, policy_example
    from ripplecp_policy.tracking import ensure_experiment, policy_params, tracking_uri

    train, test = fold
    setting = Setting(BUDGET)
    policy = AdvantageRegressorPolicy("ridge").fit(train, setting)
    example = policy_example(policy, train, setting)
    assert {"task_id", "boundary", "remaining_budget"} <= set(example.columns)
    assert example["task_id"].nunique() == 1 and len(example) >= 1
    assert default_checkpoint_cost(train, BUDGET) == 1.0
    secs = default_checkpoint_cost(train, Budget("seconds", 10.0))
    assert secs == pytest.approx(float(train.checkpoints["creation_s"].astype(float).mean()))
    with pytest.raises(ValueError, match="budget"):
        policy_example(policy, train, Setting(None))

    root = tmp_path / "store"
    exp = ensure_experiment("export", root)
    params = policy_params(policy)
    mlflow.set_tracking_uri(tracking_uri(root))
    try:
        with mlflow.start_run(experiment_id=exp) as run:
            info = log_policy_model(policy, BUDGET, example, name="policy", params=params,
                                    tags={"ripplecp.policy": policy.name})
    finally:
        mlflow.set_tracking_uri((tmp_path / "elsewhere").as_uri())
    model = MlflowClient(tracking_uri=tracking_uri(root)).get_logged_model(info.model_id)
    assert model.params == params and model.tags["ripplecp.policy"] == policy.name
    assert model.source_run_id == run.info.run_id

    frame, decided = _trace(policy, test)
    for uri in (info.model_uri, f"runs:/{run.info.run_id}/policy"):
        loaded = load_policy_model(uri, root)
        assert list(loaded.predict(frame)["checkpoint"]) == decided
        assert mlflow.get_tracking_uri() == (tmp_path / "elsewhere").as_uri()  # left as it was
