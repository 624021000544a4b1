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
