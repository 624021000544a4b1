"""Tests for ripplecp_policy.tracking: where the MLflow store and artifacts go."""

from __future__ import annotations

from pathlib import Path

import pytest

from ripplecp_policy import tracking


def test_root_defaults_to_cwd_and_env_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(tracking.ENV_VAR, raising=False)
    monkeypatch.chdir(tmp_path)
    assert tracking.mlruns_root() == (tmp_path / "mlruns").resolve()
    monkeypatch.setenv(tracking.ENV_VAR, str(tmp_path / "elsewhere"))
    assert tracking.mlruns_root() == (tmp_path / "elsewhere").resolve()
    assert tracking.tracking_uri() == f"sqlite:///{(tmp_path / 'elsewhere').resolve()}/mlflow.db"
    assert (tmp_path / "elsewhere").is_dir()


def test_artifact_location_is_an_absolute_file_uri(tmp_path: Path) -> None:
    uri = tracking.artifact_location("study", tmp_path / "m")
    assert uri == (tmp_path / "m" / "artifacts" / "study").resolve().as_uri()
    assert uri.startswith("file:///")
    with pytest.raises(ValueError, match="plain"):
        tracking.artifact_location("a/b", tmp_path)


@pytest.mark.parametrize("name", ["", "a/b", ".", ".."])
def test_experiment_names_are_plain(name: str) -> None:
    with pytest.raises(ValueError, match="plain, non-empty name"):
        tracking.check_experiment_name(name)
    tracking.check_experiment_name("matched-budget")


def test_ensure_experiment_creates_once(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    first = tracking.ensure_experiment("study", tmp_path)
    again = tracking.ensure_experiment("study", tmp_path)
    assert first == again
    exp = MlflowClient(tracking_uri=tracking.tracking_uri(tmp_path)).get_experiment(first)
    assert exp.name == "study"
    assert exp.artifact_location == (tmp_path / "artifacts" / "study").resolve().as_uri()
    assert (tmp_path / "mlflow.db").is_file()


def test_every_artifact_lives_under_the_store_default_experiment_included(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow creates a Default experiment with every store; it pointed at ./mlruns/0 of
    whatever folder the first process ran in."""
    from mlflow.tracking import MlflowClient

    monkeypatch.chdir(tmp_path)  # the folder MLflow would otherwise use
    root = tmp_path / "store"
    tracking.ensure_experiment("study", root)
    client = MlflowClient(tracking_uri=tracking.tracking_uri(root))
    home = (root / "artifacts").resolve().as_uri() + "/"
    locations = {e.name: e.artifact_location for e in client.search_experiments()}
    assert set(locations) == {"Default", "study"}
    assert all(loc.startswith(home) for loc in locations.values()), locations
    assert locations["Default"] == home + "0"


def test_an_older_store_gets_its_empty_default_experiment_moved(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow.tracking import MlflowClient

    monkeypatch.chdir(tmp_path)
    root = tmp_path / "store"
    root.mkdir()
    old = MlflowClient(tracking_uri=tracking.tracking_uri(root))  # a store made the old way
    (default,) = old.search_experiments()
    assert not default.artifact_location.startswith((root / "artifacts").resolve().as_uri())
    tracking.ensure_experiment("study", root)
    default = MlflowClient(tracking_uri=tracking.tracking_uri(root)).get_experiment("0")
    assert default.artifact_location == (root / "artifacts" / "0").resolve().as_uri()


def test_experiments_open_on_the_runs_table(tmp_path: Path) -> None:
    """MLflow 3's UI reads the experiment type tag (earlier 3.x) or the workflowType of the
    URL (3.17): the experiment carries the one, runs_url the other."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking.tracking_uri(tmp_path))
    legacy = client.create_experiment("legacy")  # made before the rule: no type tag
    exp_id = tracking.ensure_experiment("study", tmp_path)
    assert tracking.ensure_experiment("legacy", tmp_path) == legacy
    for e in (exp_id, legacy):
        tags = client.get_experiment(e).tags
        assert tags[tracking.EXPERIMENT_KIND_TAG] == "custom_model_development"
    url = tracking.runs_url(exp_id)
    assert url == f"http://127.0.0.1:5000/#/experiments/{exp_id}/runs?workflowType=machine_learning"
    cmd = tracking.ui_command(tmp_path)
    assert "--host 127.0.0.1" in cmd and "0.0.0.0" not in cmd
    assert cmd.startswith(f"mlflow ui --backend-store-uri {tracking.tracking_uri(tmp_path)} ")


def test_policy_params_are_parameters_and_fitted_scalars(make_label_set) -> None:
    from baselines import FixedK, TimeBased
    from ripplecp_policy.learned import AdvantageRegressorPolicy
    from ripplecp_policy.policy import Budget, Setting

    ls = make_label_set(n_repos=3, tasks_per_repo=2, seed=2)
    setting = Setting(Budget("count", 2))
    p = tracking.policy_params(FixedK().fit(ls, setting))
    assert p["default_k"] == "2" and p["k"] == "None" and int(p["k_"]) >= 1
    assert p["is_fitted_"] == "True" and "setting_" not in p  # objects are not params
    t = tracking.policy_params(TimeBased(mode="tuned").fit(ls, setting))
    assert float(t["interval_"]) > 0 and t["mode"] == "tuned" and "tuning_scores_" not in t
    a = tracking.policy_params(AdvantageRegressorPolicy("ridge").fit(ls, setting))
    assert a["model"] == "ridge" and float(a["threshold_"]) == pytest.approx(
        AdvantageRegressorPolicy("ridge").fit(ls, setting).threshold_)
    assert "feature_names_" not in a and "model_" not in a and "repos_" not in a
    assert all(isinstance(v, str) and len(v) <= tracking.PARAM_MAX for v in a.values())
