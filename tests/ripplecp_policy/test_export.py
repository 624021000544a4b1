"""Round trip of the MLflow pyfunc export: the loaded model decides like the policy."""

from __future__ import annotations

import os
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


def test_a_kept_model_is_read_without_mlflow_and_refreshed_from_its_store(
        tmp_path: Path, fold) -> None:
    """With ``cache``, a model named by a URI that always means the same files is kept once
    read from the store, then read from the kept copy in a process where MLflow cannot
    even be imported; a URI that may change is never kept; ``refresh`` reads the store
    again and drops the copy of a model no longer there."""
    import shutil
    import subprocess
    import sys

    from ripplecp_policy.export import cached_model, load_policy_model
    from ripplecp_policy.stored import ModelRefused
    from ripplecp_policy.tracking import ensure_experiment, tracking_uri

    train, test = fold
    policy = AdvantageRegressorPolicy("ridge").fit(train, Setting(BUDGET))
    frame, decided = _trace(policy, test)
    root, cache = tmp_path / "store", tmp_path / "kept"
    exp = ensure_experiment("export", root)
    mlflow.set_tracking_uri(tracking_uri(root))
    try:
        with mlflow.start_run(experiment_id=exp) as run:
            info = log_policy_model(policy, BUDGET, frame.head(3), name="policy")
    finally:
        mlflow.set_tracking_uri((tmp_path / "elsewhere").as_uri())
    uri = f"runs:/{run.info.run_id}/policy"
    assert cached_model("models:/policy@champion", root, cache) is None
    assert cached_model("models:/policy/latest", root, cache) is None
    assert cached_model(info.model_uri, root, cache) is not None
    kept = cached_model(uri, root, cache)
    assert kept is not None and not kept.exists()
    assert list(load_policy_model(uri, root, cache=cache).predict(frame)["checkpoint"]) == decided
    assert (kept / "MLmodel").is_file()
    frame.to_json(tmp_path / "frame.json", orient="split")
    code = ("import sys; sys.modules['mlflow'] = None\n"  # any import of MLflow fails
            "import pandas as pd\n"
            "from ripplecp_policy.export import load_policy_model\n"
            f"m = load_policy_model({uri!r}, {str(root)!r}, cache={str(cache)!r})\n"
            f"frame = pd.read_json({str(tmp_path / 'frame.json')!r}, orient='split')\n"
            "print([bool(x) for x in m.predict(frame)['checkpoint']])")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    assert p.returncode == 0 and p.stdout.strip() == str(decided), p.stderr[-2000:]
    # the run's files gone from the store: a refresh refuses, and the copy is not kept
    for mlmodel in list(root.rglob("MLmodel")):  # (where MLflow keeps them is its business)
        shutil.rmtree(mlmodel.parent)
    with pytest.raises(ModelRefused):
        load_policy_model(uri, root, cache=cache, refresh=True)
    assert not kept.exists()


@pytest.fixture(scope="module")
def eager_model(fold, toy_label_set, tmp_path_factory):
    """An xgboost policy that wants every boundary, saved with the feature ranges of the
    whole toy set (so the held-out rows are in range)."""
    from ripplecp_policy.export import training_feature_ranges

    train, test = fold
    whole = toy_label_set(n_repos=3, tasks_per_repo=2, seed=3)
    policy = AdvantageRegressorPolicy("xgboost", n_estimators=20, threshold=-1e9).fit(
        train, Setting(BUDGET))
    frame, _ = _trace(policy, test)
    path = log_policy_model(policy, BUDGET, frame.head(3), path=tmp_path_factory.mktemp("m") / "m",
                            ranges=training_feature_ranges(whole, Setting(BUDGET)))
    return policy, path, frame


def test_an_xgboost_policy_is_stored_without_a_pickle(eager_model, fold) -> None:
    """The booster in xgboost's JSON format, the wrapper as code: loading runs no unpickling,
    and the rebuilt policy decides and scores as the fitted one."""
    import json

    from ripplecp_policy.export import PYFUNC_CODE
    from ripplecp_policy.stored import StoredPolicy

    policy, path, frame = eager_model
    files = {p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()}
    assert {"artifacts/booster.json", "artifacts/config.json", PYFUNC_CODE.name} <= files
    assert not [f for f in files if f.endswith((".pkl", ".joblib"))]
    mlmodel = (path / "MLmodel").read_text()
    assert "loader_module: mlflow.pyfunc.loaders.code_model" in mlmodel
    assert json.loads((path / "artifacts" / "config.json").read_text())["format"] == "xgboost-json"
    loaded = mlflow.pyfunc.load_model(str(path))
    inner = loaded.unwrap_python_model().policy
    assert isinstance(inner, StoredPolicy) and inner.name == policy.name
    assert inner.setting_ == policy.setting_
    out = loaded.predict(frame)
    assert list(out["score"]) == pytest.approx(list(decide_frame(
        policy, frame, model_config(policy, BUDGET))["score"]), rel=1e-6)
    # fitted-Q has no booster of its own: its trees are stored as arrays, no pickle either
    train, _ = fold
    fqi = FittedQPolicy(n_estimators=5, n_behaviour_seeds=1).fit(train, Setting(BUDGET))
    fpath = log_policy_model(fqi, BUDGET, frame.head(2), path=path.parent / "fqi")
    assert json.loads((fpath / "artifacts" / "config.json").read_text())["format"] == "arrays"
    assert not list(fpath.rglob("*.joblib"))


def test_budget_and_budget_left_are_params_step_is_an_input(eager_model) -> None:
    """One boundary at a time, as a runtime calls it: the budget left is honoured, another
    budget can be asked for, ``step`` is in the schema; nothing warns."""
    import warnings

    _, path, frame = eager_model
    loaded = mlflow.pyfunc.load_model(str(path))
    sig = loaded.metadata.signature
    assert {p.name for p in sig.params} == {"budget_kind", "budget_amount", "remaining_budget"}
    assert "step" in sig.inputs.input_names()
    bare = frame.drop(columns=["remaining_budget", "last_checkpoint", "n_checkpoints"])
    bare = bare.assign(step=1)
    task = bare[bare["task_id"] == bare["task_id"].iloc[0]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        one = task.head(1)
        assert bool(loaded.predict(one)["checkpoint"].iloc[0])
        assert not bool(loaded.predict(one, params={"remaining_budget": 0.0})["checkpoint"].iloc[0])
        many = loaded.predict(task, params={"budget_amount": float(len(task))})
    assert many["checkpoint"].all() and len(task) > 2
    assert loaded.predict(task)["checkpoint"].sum() == 2


def test_a_missing_column_is_one_short_line(eager_model) -> None:
    _, path, frame = eager_model
    loaded = mlflow.pyfunc.load_model(str(path))
    with pytest.raises(Exception, match="lacks columns") as err:
        loaded.predict(frame.drop(columns=["cost__tool_calls_total", "state__live_files"]))
    text = str(err.value)
    assert len(text) < 400 and "\n" not in text
    assert "cost__tool_calls_total" in text and "state__live_files" in text


def test_rows_outside_the_training_range_warn(eager_model) -> None:
    from ripplecp_policy.export import OutOfRangeWarning, out_of_range_share

    _, path, frame = eager_model
    loaded = mlflow.pyfunc.load_model(str(path))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert (loaded.predict(frame)["out_of_range"] == 0).all()  # its own kind of rows
    far = frame.head(1).assign(**{"cost__tool_calls_total": 1e9, "state__live_files": 1e9})
    with pytest.warns(OutOfRangeWarning, match="1 of 1 boundary rows lie partly outside"):
        out = loaded.predict(far)
    assert 0 < out["out_of_range"].iloc[0] < 0.1
    assert out_of_range_share({"a": 1.0, "b": 5.0, "c": float("nan")},
                              {"a": [0, 2], "b": [0, 2], "c": [0, 1]}) == 0.5
    assert out_of_range_share({"a": 1.0}, {"a": None}) == 1.0
