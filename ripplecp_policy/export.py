"""Export a fitted placement policy as an MLflow pyfunc model a runtime can call.

The runtime loads it with ``mlflow.pyfunc.load_model(uri)`` and calls ``predict`` on a
DataFrame of boundary features, one row per candidate boundary in trajectory order
(columns as produced by ``features.online.boundary_features``). It gets back one row per
input row with ``checkpoint`` (bool) and ``score``.

Placement state is read from optional columns when the runtime tracks it, else tracked by
the model across the rows of one call (per ``task_id``):

- ``remaining_budget``: budget left before this boundary (default: the budget in the
  model's config minus the charges of the checkpoints it decided in this call);
- ``checkpoint_cost``: what this checkpoint would be charged (default: 1 for a count
  budget, the mean training creation cost / size for a seconds / bytes budget);
- ``last_checkpoint`` and ``n_checkpoints`` (default: tracked from its own decisions).

Features that depend on the placement (``context__*``, ``*_since_cp``) must be computed
with the checkpoints actually taken: call the model one boundary at a time, or pass a
frame whose features were computed with the decided placement.

A logged model lives in an MLflow store; :func:`load_policy_model` loads one by its
``models:/<model id>`` or ``runs:/<run id>/<name>`` URI from the store at a given mlruns root
(``mlflow.pyfunc.load_model`` alone needs ``mlflow.set_tracking_uri`` first).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import logging
import math
import os
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import joblib
import numpy as np
import pandas as pd

from ripplecp_policy.datasets import FEATURE_PREFIXES, replays
from ripplecp_policy.episode import Episode
from ripplecp_policy.policy import BoundaryObservation, Budget, PlacementPolicy, Setting

if TYPE_CHECKING:
    from oracle.tables import LabelSet

STATE_COLUMNS = ("remaining_budget", "checkpoint_cost", "last_checkpoint", "n_checkpoints")
ID_COLUMNS = ("task_id", "repo", "boundary", "event_index", "step")


def policy_score(policy: PlacementPolicy, obs: BoundaryObservation) -> float:
    """A scalar the decision thresholds: advantage score, or G(skip) - G(checkpoint) for fitted-Q."""
    if hasattr(policy, "q_values"):
        g_skip, g_cp = policy.q_values(obs)
        return g_skip - g_cp
    if hasattr(policy, "score"):
        return float(policy.score(obs))
    return math.nan


def decide_frame(
    policy: PlacementPolicy, frame: pd.DataFrame, config: dict[str, Any]
) -> pd.DataFrame:
    """Checkpoint/skip decisions for boundary rows in order (see the module docstring).

    Each task's rows are one episode of the episode runner (:class:`ripplecp_policy.episode.Episode`):
    the same observation builder and budget check as the evaluation, with the runtime's
    state columns, when given, taking the place of the tracked state.
    """
    budget = Budget(config["budget_kind"], float(config["budget_amount"]))
    default_cost = float(config.get("default_checkpoint_cost", 1.0))
    feats = [c for c in frame.columns if c.startswith(FEATURE_PREFIXES)]
    missing = [n for n in config.get("feature_names", []) if n not in frame.columns and not n.startswith("policy__")]
    if missing:
        raise ValueError(f"boundary features frame lacks columns the policy was trained on: {missing[:5]}")
    episodes: dict[str, Episode] = {}
    rows_seen: dict[str, int] = {}
    out = []
    for pos, rec in enumerate(frame.to_dict("records")):
        task_id = str(rec.get("task_id", "task"))
        ep = episodes.get(task_id)
        if ep is None:
            ep = episodes[task_id] = Episode(task_id, str(rec.get("repo", "")), budget)
            policy.reset(task_id, int(config.get("seed", 0)))
        rows_seen[task_id] = rows_seen.get(task_id, 0) + 1
        boundary = int(rec["boundary"]) if _present(rec.get("boundary")) else rows_seen[task_id]
        if _present(rec.get("remaining_budget")):
            ep.spent = budget.amount - float(rec["remaining_budget"])
        cost = float(rec["checkpoint_cost"]) if _present(rec.get("checkpoint_cost")) else default_cost
        obs = ep.observe(
            boundary, event_index=int(rec["event_index"]) if _present(rec.get("event_index")) else pos,
            features={k: (math.nan if not _present(rec[k]) else float(rec[k])) for k in feats},
            elapsed_s=math.nan, charge=cost,
        )
        given = {k: int(rec[k]) for k in ("last_checkpoint", "n_checkpoints") if _present(rec.get(k))}
        if given:
            obs = dataclasses.replace(obs, **given)
        take = bool(policy.decide(obs)) and ep.offer(boundary, cost)
        out.append({"task_id": task_id, "boundary": boundary, "checkpoint": take,
                     "score": policy_score(policy, obs)})
    return pd.DataFrame(out, columns=["task_id", "boundary", "checkpoint", "score"])


def out_of_range_share(features: dict[str, float], ranges: dict[str, Any]) -> float:
    """The share of the features with a training range (``{name: [lo, hi]}``) and a known
    value that lie outside it: 0 for a row like the training rows, 1 for one unlike any."""
    known = out = 0
    for name, (lo, hi) in ranges.items():
        v = features.get(name)
        if v is None or v != v:
            continue
        known += 1
        if v < lo or v > hi:
            out += 1
    return out / known if known else 0.0


def _present(v: Any) -> bool:
    if v is None or v is pd.NA:
        return False
    return not (isinstance(v, float) and math.isnan(v))


def _pyfunc_class() -> type:
    import mlflow.pyfunc

    class PlacementModel(mlflow.pyfunc.PythonModel):
        """A fitted placement policy plus its budget config, as an MLflow pyfunc model."""

        def load_context(self, context: Any) -> None:
            self.policy = joblib.load(context.artifacts["policy"])
            self.config = json.loads(Path(context.artifacts["config"]).read_text())

        def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> pd.DataFrame:
            cfg = dict(self.config)
            if params:
                cfg.update({k: v for k, v in params.items() if v is not None})
            return decide_frame(self.policy, pd.DataFrame(model_input), cfg)

    return PlacementModel


def model_config(policy: PlacementPolicy, budget: Budget, *, default_checkpoint_cost: float = 1.0,
                 seed: int = 0) -> dict[str, Any]:
    """The JSON config saved beside the policy: budget, features, threshold, provenance."""
    return {
        "policy": policy.name,
        "budget_kind": budget.kind,
        "budget_amount": float(budget.amount),
        "default_checkpoint_cost": float(default_checkpoint_cost),
        "feature_names": list(getattr(policy, "feature_names_", [])),
        "threshold": float(getattr(policy, "threshold_", math.nan)),
        "trained_on_repos": list(getattr(policy, "repos_", [])),
        "seed": seed,
    }


def _signature(example: pd.DataFrame, output: pd.DataFrame) -> Any:
    from mlflow.models import infer_signature
    from mlflow.types.schema import ColSpec, Schema

    sig = infer_signature(example, output)
    optional = set(STATE_COLUMNS) | set(ID_COLUMNS)
    try:
        cols = [
            ColSpec(c.type, c.name, required=c.name not in optional) for c in sig.inputs.inputs
        ]
        sig.inputs = Schema(cols)
    except TypeError:  # pragma: no cover - older MLflow without optional columns
        pass
    return sig


def log_policy_model(
    policy: PlacementPolicy,
    budget: Budget,
    input_example: pd.DataFrame,
    *,
    name: str = "policy",
    path: str | Path | None = None,
    default_checkpoint_cost: float = 1.0,
    seed: int = 0,
    params: dict[str, Any] | None = None,
    tags: dict[str, Any] | None = None,
) -> Any:
    """Log (inside an active MLflow run) or save (``path`` given) the policy as pyfunc.

    ``input_example`` is a boundary-features frame; the signature is inferred from it and
    from the decisions the in-process policy makes on it (state columns are optional).
    ``params`` and ``tags`` go on the logged model (MLflow 3's model page and search).
    """
    import mlflow.pyfunc

    pol = copy.deepcopy(policy)
    if "feature_fn" in pol.get_params():  # the runtime supplies features; keep the pickle small
        pol.set_params(feature_fn=None)
    cfg = model_config(pol, budget, default_checkpoint_cost=default_checkpoint_cost, seed=seed)
    example = input_example.reset_index(drop=True)
    output = decide_frame(copy.deepcopy(pol), example, cfg)
    with tempfile.TemporaryDirectory() as tmp, _quiet_mlflow():
        pkl = Path(tmp) / "policy.joblib"
        joblib.dump(pol, pkl)
        conf = Path(tmp) / "config.json"
        conf.write_text(json.dumps(cfg, indent=2, sort_keys=True))
        with warnings.catch_warnings():
            # integer id columns (boundary, event_index) are never missing in boundary rows
            warnings.filterwarnings("ignore", message=".*integer column", category=UserWarning)
            kw: dict[str, Any] = dict(
                python_model=_pyfunc_class()(),
                artifacts={"policy": str(pkl), "config": str(conf)},
                signature=_signature(example, output),
                input_example=example.head(min(len(example), 3)),
                pip_requirements=["mlflow", "xgboost", "scikit-learn", "pandas", "numpy", "joblib"],
            )
            if path is not None:
                mlflow.pyfunc.save_model(str(path), **kw)
                return Path(path)
            return mlflow.pyfunc.log_model(name=name, params=params, tags=tags, **kw)


@contextlib.contextmanager
def _quiet_mlflow() -> Iterator[None]:
    """While a model is logged: no MLflow INFO/WARNING lines or artifact progress bars (a
    study logs many; the pickle warning is about this very model, whose code is ours)."""
    log = logging.getLogger("mlflow")
    level, bar = log.level, os.environ.get("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")
    log.setLevel(logging.ERROR)
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
    try:
        yield
    finally:
        log.setLevel(level)
        if bar is None:
            os.environ.pop("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", None)
        else:
            os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = bar


def load_policy_model(uri: str, root: str | Path | None = None) -> Any:
    """The pyfunc model at ``uri`` (``models:/...``, ``runs:/...`` or a local path) from the
    store at mlruns ``root`` (default: ``$RIPPLECP_MLRUNS`` or ``./mlruns``), without
    changing MLflow's global tracking URI for longer than the load (``models:/`` URIs are
    resolved through the global URI whatever ``tracking_uri`` a download is given)."""
    import mlflow
    import mlflow.pyfunc

    from ripplecp_policy.tracking import tracking_uri

    if Path(uri).exists():
        return mlflow.pyfunc.load_model(str(uri))
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(tracking_uri(root))
    try:
        return mlflow.pyfunc.load_model(uri)
    finally:
        mlflow.set_tracking_uri(previous)


def default_checkpoint_cost(data: LabelSet, budget: Budget) -> float:
    """What a logged model charges a checkpoint when the runtime gives no
    ``checkpoint_cost``: 1 for a count budget, else the mean creation seconds or bytes of
    ``data``'s checkpoints."""
    if budget.kind == "count":
        return 1.0
    col = "creation_s" if budget.kind == "seconds" else "size_bytes"
    return float(np.mean(data.checkpoints[col].astype(float)))


def policy_example(policy: PlacementPolicy, data: LabelSet, setting: Setting) -> pd.DataFrame:
    """Boundary rows of ``data``'s first task as ``policy`` walks it under ``setting``'s
    budget (ids, features, state columns): a logged model's input example and signature."""
    if setting.budget is None:
        raise ValueError("policy_example needs a setting with a budget")
    task = next(iter(replays(data, setting).values()))
    trace: list[BoundaryObservation] = []
    policy.reset(task.task_id, 0)
    task.replay(policy.decide, setting.budget, trace=trace)
    return example_frame(trace)


def example_frame(observations: list[BoundaryObservation]) -> pd.DataFrame:
    """Boundary rows (ids, features, state columns) from a replay trace, for examples/tests."""
    rows = []
    for o in observations:
        rows.append({
            "task_id": o.task_id, "repo": o.repo, "boundary": o.boundary, "event_index": o.event_index,
            **o.features, "remaining_budget": o.remaining, "checkpoint_cost": o.checkpoint_cost,
            "last_checkpoint": o.last_checkpoint, "n_checkpoints": o.n_checkpoints,
        })
    df = pd.DataFrame(rows)
    for c in ("boundary", "event_index", "last_checkpoint", "n_checkpoints"):
        df[c] = df[c].astype("int64")
    return df.astype({c: "float64" for c in df.columns if c.startswith(FEATURE_PREFIXES)})


__all__ = ["decide_frame", "default_checkpoint_cost", "example_frame", "load_policy_model",
           "log_policy_model", "model_config", "out_of_range_share", "policy_example",
           "policy_score"]
