"""A policy is data: every learned kind is stored without a pickle and loaded by our own code,
never by code stored beside it; a pickle or an edited folder is refused in one line
(issue 32, item 1)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from ripplecp_policy.advisor import load_model
from ripplecp_policy.datasets import replays
from ripplecp_policy.export import example_frame, load_policy_model, log_policy_model
from ripplecp_policy.learned import LEARNED
from ripplecp_policy.policy import Budget, Setting
from ripplecp_policy.stored import ModelRefused, read_policy

REPO = Path(__file__).resolve().parents[2]
RECORDING = REPO / "tests" / "data" / "recordings" / "codex-0.171.0" / "task.exec.jsonl"
BUDGET = Budget("count", 2)


def _trace(policy, data):
    obs_all, decided = [], []
    for task in replays(data).values():
        policy.reset(task.task_id, 0)
        trace: list = []
        place = task.replay(policy.decide, BUDGET, trace=trace)
        obs_all += trace
        decided += [o.boundary in place for o in trace]
    return example_frame(obs_all), decided


@pytest.fixture(scope="module")
def data(toy_label_set):
    return toy_label_set(n_repos=3, tasks_per_repo=2, seed=3)


@pytest.mark.parametrize("entry", LEARNED, ids=lambda e: e.key)
def test_every_learned_kind_is_stored_as_data_and_decides_as_fitted(entry, data, tmp_path) -> None:
    policy = entry.make(seed=0, quick=True)
    policy.set_params(**{k: v for k, v in {"n_estimators": 10, "n_behaviour_seeds": 1}.items()
                         if k in policy.get_params()})
    policy.fit(data, Setting(BUDGET))
    frame, decided = _trace(policy, data)
    path = log_policy_model(policy, BUDGET, frame.head(3), path=tmp_path / "m")
    files = {p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()}
    assert not [f for f in files if f.endswith((".pkl", ".pickle", ".joblib"))], files
    cfg = json.loads((path / "artifacts" / "config.json").read_text())
    assert cfg["format"] in ("xgboost-json", "arrays")
    loaded = load_policy_model(str(path))
    assert list(loaded.predict(frame)["checkpoint"]) == decided
    stored, _ = read_policy(path)
    again, _ = _trace(stored, data)
    assert list(again["boundary"]) == list(frame["boundary"])
    if hasattr(policy, "q_values"):
        obs = []
        for task in replays(data).values():
            task.replay(policy.decide, BUDGET, trace=obs)
        for o in obs[:5]:
            assert stored.q_values(o) == pytest.approx(policy.q_values(o), rel=1e-6, abs=1e-9)
    else:
        obs = []
        for task in replays(data).values():
            task.replay(policy.decide, BUDGET, trace=obs)
        for o in obs[:5]:
            assert stored.score(o) == pytest.approx(policy.score(o), rel=1e-6, abs=1e-9)


class _Payload:
    """Unpickling this writes a marker file: what an attacker's pickle would run."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture()
def pickled_model(data, tmp_path) -> tuple[Path, Path]:
    """A model folder as the old exporter wrote a ridge policy (``"format": "joblib"``),
    its pickle replaced by one that runs a command."""
    from ripplecp_policy.learned import AdvantageRegressorPolicy

    policy = AdvantageRegressorPolicy("ridge").fit(data, Setting(BUDGET))
    frame, _ = _trace(policy, data)
    path = log_policy_model(policy, BUDGET, frame.head(3), path=tmp_path / "m")
    arts = path / "artifacts"
    cfg = json.loads((arts / "config.json").read_text())
    cfg["format"] = "joblib"
    (arts / "config.json").write_text(json.dumps(cfg))
    marker = tmp_path / "PWNED"
    (arts / "policy.joblib").write_bytes(pickle.dumps(_Payload(str(marker))))
    return path, marker


def test_a_pickle_is_never_loaded_unless_asked(pickled_model) -> None:
    path, marker = pickled_model
    with pytest.raises(ModelRefused, match="pickle") as err:
        load_policy_model(str(path))
    assert "\n" not in str(err.value) and str(path) in str(err.value)
    with pytest.raises(ModelRefused):
        load_model(path)
    assert not marker.exists()
    # the advisor's command line: fail-open, the reason logged, nothing run
    env = dict(os.environ, PYTHONPATH=str(REPO))
    log = path.parent / "d.jsonl"
    p = subprocess.run([sys.executable, "-m", "ripplecp_policy.advise", "--model", str(path),
                        "--budget", "count:2", "--input", str(RECORDING), "--log", str(log)],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "pickle" in p.stderr and p.stderr.count("\n") == 1, p.stderr[-2000:]
    assert not marker.exists() and not log.exists()
    p = subprocess.run([sys.executable, "-m", "ripplecp_policy.advise", "--model", str(path),
                        "--hook", "claude-code", "--log", str(log)],
                       input=json.dumps({"transcript_path": str(RECORDING), "session_id": "s"}),
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and not marker.exists()


def test_a_tampered_model_folder_is_refused_in_one_line(data, tmp_path) -> None:
    """The stored wrapper code edited (MLflow would run it), or the policy's numbers edited:
    refused in one line, and the edited code never runs."""
    from ripplecp_policy.learned import AdvantageRegressorPolicy

    policy = AdvantageRegressorPolicy("xgboost", n_estimators=5).fit(data, Setting(BUDGET))
    frame, _ = _trace(policy, data)
    path = log_policy_model(policy, BUDGET, frame.head(3), path=tmp_path / "m")
    marker = tmp_path / "PWNED"
    code = next(path.glob("*.py"))
    code.write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n" + code.read_text())
    with pytest.raises(ModelRefused, match="does not match") as err:
        load_policy_model(str(path))
    assert "\n" not in str(err.value) and code.name in str(err.value)
    assert not marker.exists()
    path2 = log_policy_model(policy, BUDGET, frame.head(3), path=tmp_path / "m2")
    cfg = path2 / "artifacts" / "config.json"
    cfg.write_text(cfg.read_text().replace('"threshold"', '"threshold" ', 1))
    with pytest.raises(ModelRefused, match="config.json"):
        read_policy(path2)
