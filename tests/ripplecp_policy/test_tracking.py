"""Tests for ripplecp_policy.tracking: where the MLflow store and artifacts go."""

from __future__ import annotations

import contextlib
import os
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


# ---- the run lifecycle (study_run / TrackedRun.child) ---------------------------------


def _runs(root: Path) -> dict[str, object]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking.tracking_uri(root))
    exps = [e.experiment_id for e in client.search_experiments()]
    return {r.info.run_name: r for r in client.search_runs(exps)}


@pytest.mark.parametrize("exc, status", [(None, "FINISHED"), (ValueError("bad"), "FAILED"),
                                         (KeyboardInterrupt(), "KILLED"),
                                         (tracking.Terminated("signal SIGTERM"), "KILLED")])
def test_every_run_ends_by_how_its_block_ends(tmp_path: Path, exc: BaseException | None, status: str) -> None:
    """A parent and its children end FINISHED, FAILED on an error, KILLED on Ctrl-C or a
    termination signal; a child that ended before the error keeps FINISHED."""
    with pytest.raises(type(exc)) if exc else contextlib.nullcontext():
        with tracking.study_run("study", tmp_path, name="parent", tags={"ripplecp.study": "t"},
                                params={"seed": 3, "families": ("a", "b")}) as parent:
            with parent.child("done") as kid:
                kid.log({"x": 1.0, "nan": float("nan")}, history={"fold/x": [1.0, 2.0]})
            with parent.child("open"):
                if exc is not None:
                    raise exc
    runs = _runs(tmp_path)
    assert runs["parent"].info.status == runs["open"].info.status == status
    assert runs["done"].info.status == "FINISHED"
    assert runs["done"].data.tags["mlflow.parentRunId"] == runs["parent"].info.run_id
    assert runs["parent"].data.tags["ripplecp.kind"] == "study"
    assert runs["parent"].data.params == {"seed": "3", "families": '["a", "b"]'}
    assert runs["done"].data.metrics == {"x": 1.0, "fold/x": 2.0}  # non-finite values left out


def test_fold_history_is_stepped(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    with tracking.study_run("study", tmp_path, name="p") as parent, parent.child("c") as kid:
        kid.log(history={"fold/x": [3.0, 1.0, 2.0], "by_seed": {5: 1.0, 9: 0.0}})
    client = MlflowClient(tracking_uri=tracking.tracking_uri(tmp_path))
    rid = _runs(tmp_path)["c"].info.run_id
    assert [(m.step, m.value) for m in client.get_metric_history(rid, "fold/x")] == [(0, 3.0), (1, 1.0), (2, 2.0)]
    assert sorted(m.step for m in client.get_metric_history(rid, "by_seed")) == [5, 9]


def test_sigterm_unwinds_and_ends_the_runs_killed(tmp_path: Path) -> None:
    """A real process stopped by SIGTERM inside a study run: the parent and the open child
    end KILLED (without the handler the process would die with both RUNNING)."""
    import signal
    import subprocess
    import sys
    import textwrap
    import time

    code = textwrap.dedent(f"""
        import time
        from ripplecp_policy.tracking import study_run
        with study_run("study", {str(tmp_path)!r}, name="parent") as p, p.child("open"):
            print("ready", flush=True)
            time.sleep(120)
    """)
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(root)})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert time.monotonic() - t0 < 30
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Terminated: signal SIGTERM" in err
    runs = _runs(tmp_path)
    assert {n: r.info.status for n, r in runs.items()} == {"parent": "KILLED", "open": "KILLED"}


def test_an_off_run_logs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tracking.ENV_VAR, str(tmp_path / "store"))
    with tracking.study_run("study", name="p", enabled=False) as parent, parent.child("c") as kid:
        kid.log({"x": 1.0}, params={"a": 1})
        kid.log_text("t", "t.txt")
        assert not parent.on and not kid.on
        assert tracking.save_runs_view(parent, "v", columns=["metrics.`x`"], order_by="tags.`r`") == ""
    assert not (tmp_path / "store").exists()


def test_model_names_say_what_the_model_is() -> None:
    assert tracking.model_name("long-horizon", "AdvantageRegressorPolicy[ridge]", "seconds:2x") == \
        "long-horizon--AdvantageRegressorPolicy[ridge]--seconds_2x"
    assert tracking.model_name("a/b", "p.q", "9.2s") == "a_b--p_q--9_2s"


def test_a_saved_runs_view_is_what_the_url_opens(tmp_path: Path) -> None:
    import json

    from mlflow.tracking import MlflowClient

    with tracking.study_run("study", tmp_path, name="p") as parent:
        url = tracking.save_runs_view(parent, "comparison", columns=["metrics.`x`"], order_by="tags.`r`")
    exp = MlflowClient(tracking_uri=tracking.tracking_uri(tmp_path)).get_experiment(parent.experiment_id)
    view = json.loads(exp.tags[tracking.VIEW_TAG + "comparison"])
    assert view["selectedColumns"] == ["metrics.`x`"] and view["orderByKey"] == "tags.`r`"
    assert url == tracking.runs_url(parent.experiment_id) + "&viewStateShareKey=comparison"


_LOST_IN_A_CALLBACK = """
import ctypes, os, signal, sys, time
from ripplecp_policy.tracking import study_run

signal.signal(signal.SIGINT, signal.default_int_handler)  # a background shell may have set SIG_IGN
sig, then = getattr(signal, sys.argv[2]), sys.argv[3]

def callback():  # as xgboost's data iterator is called from C: what it raises is printed, then lost
    os.kill(os.getpid(), sig)
    time.sleep(0.2)  # the handler runs here, inside the callback
    return 0

with study_run("study", sys.argv[1], name="parent") as p, p.child("fold"):
    ctypes.CFUNCTYPE(ctypes.c_int)(callback)()
    print("went on", flush=True)
    if then == "error":
        raise ValueError("the library's own error after the lost interrupt")
    if then == "child":
        with p.child("next"):
            pass
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("then", ["end", "error", "child"])
def test_a_signal_lost_in_a_library_callback_still_stops_the_study(tmp_path: Path, sig: str, then: str) -> None:
    """The main job's flaky stop: a SIGTERM or Ctrl-C that arrived while xgboost called back
    into Python from C was printed and dropped by ctypes, and the study ran on to exit 0 (or
    failed on xgboost's next check, exit 2). The signal is remembered: the study unwinds as
    stopped at its next run boundary, or when it ends, and every run ends KILLED."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    res = subprocess.run([sys.executable, "-c", _LOST_IN_A_CALLBACK, str(tmp_path), sig, then],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(root)})
    assert "Exception ignored on calling ctypes callback" in res.stderr  # the loss is real
    last = res.stderr.splitlines()[-1]
    # an uncaught KeyboardInterrupt ends Python by SIGINT; Terminated is an error (1)
    assert res.returncode in (1, -2) and ("KeyboardInterrupt" in last or "Terminated: signal SIGTERM" in last), res.stderr[-1500:]
    runs = _runs(tmp_path)
    assert {r.info.status for r in runs.values()} == {"KILLED"}, {n: r.info.status for n, r in runs.items()}
    assert "next" not in runs  # no new run opens once a stop is known
