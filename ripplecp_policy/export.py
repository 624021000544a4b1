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
frame whose features were computed with the decided placement. A runtime that calls it one
boundary at a time passes its state as pyfunc params (in the signature, so MLflow does not
drop them): ``predict(df, params={"remaining_budget": 1.0})`` — the budget left before the
first row — and, to run under another budget, ``budget_kind`` / ``budget_amount``. (The
advisor, :mod:`ripplecp_policy.advisor`, does all of this in-process and is the faster way.)

Every output row also has ``out_of_range``: the share of its features outside the range seen
in training (the model's ``feature_ranges``); a call with any such row warns, naming the
worst share (a model trained on simulated features meeting a real log shows here). A frame
without a column the policy was trained on is refused in one short line naming the columns.

What is stored is the policy's numbers, never a pickle (:mod:`ripplecp_policy.stored`):
for an advantage policy on xgboost its booster in xgboost's JSON model format
(``config["format"] == "xgboost-json"``), for every other kind (fitted-Q, ridge, logistic)
its trees or coefficients as numpy arrays (``"arrays"``), with ``config.json`` and the
digests of every stored file. The pyfunc wrapper is logged as code (MLflow's
models-from-code, :mod:`ripplecp_policy.pyfunc_model`: three lines that call this package),
not as a pickled object.

A logged model lives in an MLflow store; :func:`load_policy_model` loads one by its
``models:/<model id>`` or ``runs:/<run id>/<name>`` URI from the store at a given mlruns root,
or from a local folder, rebuilding the policy from its numbers with this package's code:
nothing stored with the model runs. (``mlflow.pyfunc.load_model`` works too, after
``mlflow.set_tracking_uri``, but runs the wrapper file stored in the folder: load only
models from a store you trust that way.)
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import json
import logging
import math
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from features.online import FeatureConfig, boundary_features, config_for
from ripplecp_policy.datasets import FEATURE_PREFIXES, replays
from ripplecp_policy.episode import Episode
from ripplecp_policy.policy import BoundaryObservation, Budget, PlacementPolicy, Setting
from ripplecp_policy.stored import ModelRefused, read_policy, write_policy
from ripplecp_policy.tracking import mlruns_root

if TYPE_CHECKING:
    from labelsets.tables import LabelSet

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
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise ValueError(f"boundary features frame lacks columns the policy was trained on "
                         f"({len(missing)}): {', '.join(missing[:5])}{more}")
    start_left = config.get("remaining_budget")
    ranges = config.get("feature_ranges") or {}
    episodes: dict[str, Episode] = {}
    rows_seen: dict[str, int] = {}
    out = []
    for pos, rec in enumerate(frame.to_dict("records")):
        task_id = str(rec.get("task_id", "task"))
        ep = episodes.get(task_id)
        if ep is None:
            ep = episodes[task_id] = Episode(task_id, str(rec.get("repo", "")), budget)
            if _present(start_left):
                ep.resume(budget.amount - float(start_left))
            policy.reset(task_id, int(config.get("seed", 0)))
        rows_seen[task_id] = rows_seen.get(task_id, 0) + 1
        boundary = int(rec["boundary"]) if _present(rec.get("boundary")) else rows_seen[task_id]
        if _present(rec.get("remaining_budget")):
            ep.resume(budget.amount - float(rec["remaining_budget"]))
        cost = float(rec["checkpoint_cost"]) if _present(rec.get("checkpoint_cost")) else default_cost
        features = {k: (math.nan if not _present(rec[k]) else float(rec[k])) for k in feats}
        obs = ep.observe(
            boundary, event_index=int(rec["event_index"]) if _present(rec.get("event_index")) else pos,
            features=features, elapsed_s=math.nan, charge=cost,
        )
        given = {k: int(rec[k]) for k in ("last_checkpoint", "n_checkpoints") if _present(rec.get(k))}
        if given:
            obs = dataclasses.replace(obs, **given)
        take = bool(policy.decide(obs)) and ep.offer(boundary, cost)
        out.append({"task_id": task_id, "boundary": boundary, "checkpoint": take,
                    "score": policy_score(policy, obs),
                    "out_of_range": out_of_range_share(features, ranges)})
    result = pd.DataFrame(out, columns=["task_id", "boundary", "checkpoint", "score", "out_of_range"])
    if ranges and len(result) and (worst := float(result["out_of_range"].max())) > 0:
        n = int((result["out_of_range"] > 0).sum())
        warnings.warn(f"{n} of {len(result)} boundary rows lie partly outside the training range "
                      f"(up to {worst:.0%} of a row's features): the policy was not trained on "
                      "runs like this one", OutOfRangeWarning, stacklevel=2)
    return result


class OutOfRangeWarning(UserWarning):
    """Boundary features outside the range the policy was trained on."""


def feature_ranges(frames: Iterable[pd.DataFrame]) -> dict[str, list[float] | None]:
    """``{feature: [min, max]}`` over boundary-feature frames (NaN ignored; None for a
    feature never known): the training range saved in a model's config."""
    lo: dict[str, float] = {}
    hi: dict[str, float] = {}
    names: set[str] = set()
    for frame in frames:
        for c in frame.columns:
            if not c.startswith(FEATURE_PREFIXES):
                continue
            names.add(c)
            col = pd.to_numeric(frame[c], errors="coerce")
            if col.notna().any():
                lo[c] = min(lo.get(c, math.inf), float(col.min()))
                hi[c] = max(hi.get(c, -math.inf), float(col.max()))
    return {c: [lo[c], hi[c]] if c in lo else None for c in sorted(names)}


#: a log format's suffixes that name the file, not the runtime (codex-exec -> codex)
_FORMAT_SUFFIXES = ("-session", "-stream", "-exec", "-rollout")


def runtime_of_format(fmt: str) -> str:
    """The runtime a log format comes from (``claude-code-session`` -> ``claude-code``)."""
    for suffix in _FORMAT_SUFFIXES:
        if fmt.endswith(suffix):
            return fmt[: -len(suffix)]
    return fmt


def training_provenance(data: LabelSet) -> dict[str, Any]:
    """What a policy trained on ``data`` was trained on: the runtimes and log formats of its
    nominal trajectories and the label set's content hash (saved in the model's config)."""
    formats = sorted({str(t.source_format) for t in data.trajectories.values()})
    return {"log_format": formats, "training_runtime": sorted({runtime_of_format(f) for f in formats}),
            "label_set_sha256": data.content_hash()}


def training_feature_ranges(data: LabelSet, setting: Setting) -> dict[str, list[float] | None]:
    """The feature ranges of ``data``'s nominal trajectories at their candidate boundaries,
    under ``setting``'s feature configuration, each walked under four placements (none; one
    at every boundary; one at the first; one mid-run), so the placement-dependent features
    (``*_since_cp``, ``context__*``, ``ripple__from_prev_segment``) span about what any
    placement gives."""
    frames = []
    for task in replays(data, setting).values():
        traj = task.trajectory
        config = config_for(traj, setting.features)
        n = len(traj.boundaries(task.granularity))  # type: ignore[arg-type]
        for cps in ((), range(1, n + 1), (1,), (max(1, n // 2),)) if n else ((),):
            frames.append(boundary_features(traj, task.granularity, checkpoints=cps, config=config))
    return feature_ranges(frames)


def out_of_range_share(features: dict[str, float], ranges: dict[str, Any]) -> float:
    """The share of the features with a known value that lie outside their training range
    (``ranges``: ``{name: [lo, hi]}``, or None for a feature never seen in training, so any
    value of it is outside): 0 for a row like the training rows, 1 for one unlike any."""
    known = out = 0
    for name, rng in ranges.items():
        v = features.get(name)
        if v is None or v != v:
            continue
        known += 1
        if rng is None or v < rng[0] or v > rng[1]:
            out += 1
    return out / known if known else 0.0


def _present(v: Any) -> bool:
    if v is None or v is pd.NA:
        return False
    return not (isinstance(v, float) and math.isnan(v))


#: the models-from-code file MLflow stores as the pyfunc wrapper
PYFUNC_CODE = Path(__file__).with_name("pyfunc_model.py")


def model_config(policy: PlacementPolicy, budget: Budget, *, default_checkpoint_cost: float = 1.0,
                 seed: int = 0) -> dict[str, Any]:
    """The JSON config saved beside the policy: budget, features, threshold, provenance, the
    setting it was fitted under (failure model, feature configuration)."""
    fitted = getattr(policy, "setting_", None)
    features = fitted.features if fitted is not None else FeatureConfig()
    hazard = fitted.hazard if fitted is not None else "uniform"
    return {
        "policy": policy.name,
        "feature_config": {"edge_families": sorted(str(f) for f in features.edge_families),
                           "expensive_tool_seconds": features.expensive_tool_seconds,
                           "error_trend_window": features.error_trend_window},
        "hazard": hazard if isinstance(hazard, str) else [list(p) for p in hazard],
        "fitted_budget": fitted is None or fitted.budget is not None,
        "budget_kind": budget.kind,
        "budget_amount": float(budget.amount),
        "default_checkpoint_cost": float(default_checkpoint_cost),
        "feature_names": list(getattr(policy, "feature_names_", [])),
        "threshold": float(getattr(policy, "threshold_", math.nan)),
        "trained_on_repos": list(getattr(policy, "repos_", [])),
        "seed": seed,
    }


def _signature(example: pd.DataFrame, output: pd.DataFrame, cfg: dict[str, Any]) -> Any:
    """Inputs: the example's columns, every one optional but the features checked by
    :func:`decide_frame` (one short error), ids and state columns the example lacks added
    (``step`` among them); params: the budget and the budget left."""
    from mlflow.models import infer_signature
    from mlflow.types.schema import ColSpec, ParamSchema, ParamSpec, Schema

    sig = infer_signature(example, output)
    cols = [ColSpec(c.type, c.name, required=False) for c in sig.inputs.inputs]
    have = {c.name for c in cols}
    extra = {"task_id": "string", "repo": "string", "boundary": "long", "event_index": "long",
             "step": "long", "remaining_budget": "double", "checkpoint_cost": "double",
             "last_checkpoint": "long", "n_checkpoints": "long"}
    cols += [ColSpec(t, n, required=False) for n, t in extra.items() if n not in have]
    sig.inputs = Schema(cols)
    sig.params = ParamSchema([
        ParamSpec("budget_kind", "string", cfg["budget_kind"]),
        ParamSpec("budget_amount", "double", float(cfg["budget_amount"])),
        ParamSpec("remaining_budget", "double", None),
    ])
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
    ranges: dict[str, list[float] | None] | None = None,
    data: LabelSet | None = None,
    registered_model_name: str | None = None,
) -> Any:
    """Log (inside an active MLflow run) or save (``path`` given) the policy as pyfunc.

    ``input_example`` is a boundary-features frame; the signature is inferred from it and
    from the decisions the in-process policy makes on it (state columns are optional).
    ``params`` and ``tags`` go on the logged model (MLflow 3's model page and search).
    ``ranges``: the training feature ranges (:func:`training_feature_ranges`), for the
    out-of-range warning. ``data``: the label set it was trained on, whose runtime, log
    format and hash go in the config (:func:`training_provenance`; the advisor warns when it
    follows another runtime or format). ``registered_model_name``: also register the logged
    model in the store's model registry under that name (a new version each time).
    """
    import mlflow.pyfunc

    pol = copy.deepcopy(policy)
    if "feature_fn" in pol.get_params():  # the runtime supplies features; keep the pickle small
        pol.set_params(feature_fn=None)
    cfg = model_config(pol, budget, default_checkpoint_cost=default_checkpoint_cost, seed=seed)
    if ranges:
        cfg["feature_ranges"] = ranges
    if data is not None:
        cfg.update(training_provenance(data))
    example = input_example.reset_index(drop=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OutOfRangeWarning)
        output = decide_frame(copy.deepcopy(pol), example, cfg)
    with tempfile.TemporaryDirectory() as tmp, _quiet_mlflow():
        artifacts = write_policy(pol, cfg, Path(tmp), code={PYFUNC_CODE.name: PYFUNC_CODE})
        with warnings.catch_warnings():
            # integer id columns (boundary, event_index) are never missing in boundary rows
            warnings.filterwarnings("ignore", message=".*integer column", category=UserWarning)
            kw: dict[str, Any] = dict(
                python_model=str(PYFUNC_CODE),
                artifacts=artifacts,
                signature=_signature(example, output, cfg),
                input_example=example.head(min(len(example), 3)),
                pip_requirements=["mlflow", "xgboost", "scikit-learn", "pandas", "numpy"],
            )
            if path is not None:
                mlflow.pyfunc.save_model(str(path), **kw)
                return Path(path)
            # registering prints its own lines straight to stderr, one pair per model
            quiet = contextlib.redirect_stderr(io.StringIO()) if registered_model_name else contextlib.nullcontext()
            with quiet:
                return mlflow.pyfunc.log_model(name=name, params=params, tags=tags,
                                               registered_model_name=registered_model_name, **kw)


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


class PolicyModel:
    """An exported policy loaded by :func:`load_policy_model`: the policy rebuilt from its
    stored numbers, its config, and ``predict`` as the MLflow pyfunc model answers it."""

    def __init__(self, policy: PlacementPolicy, config: dict[str, Any], uri: str,
                 input_example: pd.DataFrame | None = None) -> None:
        self.policy = policy
        self.config = config
        self.uri = uri
        self.input_example = input_example

    @classmethod
    def read(cls, folder: str | Path, uri: str, *, allow_pickle: bool = False) -> PolicyModel:
        """The model in ``folder`` (:func:`ripplecp_policy.stored.read_policy`) and the input
        example MLflow saved beside it (JSON data, read as such)."""
        policy, config = read_policy(folder, allow_pickle=allow_pickle)
        example = None
        ex = Path(folder) / "input_example.json"
        if ex.is_file() and ex.stat().st_size < 2**24:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                d = json.loads(ex.read_text())
                example = pd.DataFrame(d["data"], columns=d["columns"])
        return cls(policy, config, uri, example)

    def predict(self, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> pd.DataFrame:
        """Decisions for boundary rows (:func:`decide_frame`); ``params`` as the pyfunc's."""
        cfg = dict(self.config)
        if params:
            cfg.update({k: v for k, v in params.items() if v is not None})
        return decide_frame(self.policy, pd.DataFrame(model_input), cfg)


#: the URI schemes resolved through an MLflow tracking store
STORE_SCHEMES = ("runs:/", "models:/")


def load_policy_model(uri: str, root: str | Path | None = None, *,
                      allow_pickle: bool = False, cache: str | Path | None = None,
                      refresh: bool = False) -> PolicyModel:
    """The exported policy at ``uri`` (``models:/...``, ``runs:/...`` read from the store at
    mlruns ``root``, default ``$RIPPLECP_MLRUNS`` or ``./mlruns``; or a local model folder),
    rebuilt from its stored numbers by :func:`ripplecp_policy.stored.read_policy`: nothing
    stored with it runs (``mlflow.pyfunc.load_model`` would run the wrapper code stored in
    the folder). :class:`~ripplecp_policy.stored.ModelRefused` (one line) for a store that
    does not exist (nothing is created), a pickle unless ``allow_pickle``, or a folder
    changed after export. MLflow's global tracking URI is left as it was.

    ``cache`` (a folder): a model named by a URI that always means the same files
    (``runs:/RUN/PATH``, ``models:/NAME/VERSION``) is kept there once read from the store and
    read from there next time, without MLflow (1.8 s of imports and store queries, measured
    in ``benchmarks/bench_advisor.py``; the folder's integrity is still checked); ``refresh``
    reads the store anyway and brings the kept copy up to date (see :func:`cached_model`)."""
    text = str(uri)
    if text.startswith("file:"):
        text = text[len("file:"):].removeprefix("//")
    if not text.startswith(STORE_SCHEMES):
        return PolicyModel.read(text, str(uri), allow_pickle=allow_pickle)
    store = Path(root).expanduser() if root is not None else mlruns_root()
    if not (store / "mlflow.db").is_file():
        raise ModelRefused(f"{uri}: no MLflow store at {store} (no mlflow.db there); name the "
                           "mlruns folder the model was logged in (--mlruns / $RIPPLECP_MLRUNS)")
    kept = cached_model(text, store, cache) if cache is not None else None
    if kept is not None and kept.is_dir() and not refresh:
        with contextlib.suppress(ModelRefused):  # a copy changed since: read the store again
            return PolicyModel.read(kept, str(uri), allow_pickle=allow_pickle)
    import mlflow.artifacts

    from ripplecp_policy.tracking import using_store

    with tempfile.TemporaryDirectory(prefix="ripplecp-model-") as tmp, _quiet_mlflow():
        try:
            with using_store(store):
                local = mlflow.artifacts.download_artifacts(artifact_uri=text, dst_path=tmp)
        except Exception as exc:
            _drop(kept)
            raise ModelRefused(f"{uri}: not found in the MLflow store at {store} "
                               f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]})") from None
        try:
            model = PolicyModel.read(local, str(uri), allow_pickle=allow_pickle)
        except Exception:
            _drop(kept)
            raise
        if kept is not None:
            _keep(Path(local), kept)
        return model


def _drop(kept: Path | None) -> None:
    """A kept model the store no longer gives (or gives refused) is never served again."""
    if kept is not None:
        shutil.rmtree(kept, ignore_errors=True)


def cached_model(uri: str, store: str | Path, cache: str | Path) -> Path | None:
    """Where :func:`load_policy_model` keeps the model of ``uri`` in ``store`` under
    ``cache``; None for a URI whose files may change (a ``models:/`` alias, stage or
    ``latest``), which is always read from the store."""
    import hashlib
    import re

    # a run's artifact, a registered version, a logged model's id (models:/m-...)
    if not re.fullmatch(r"runs:/[0-9a-f]{32}/.+|models:/[^/@]+(/[0-9]+)?", uri):
        return None
    key = hashlib.sha256(f"{Path(store).resolve()}\0{uri}".encode()).hexdigest()[:32]
    return Path(cache) / key


def _keep(local: Path, kept: Path) -> None:
    """Copy a model folder read from the store to ``kept``, whole or not at all (copied
    beside it, then renamed over it); a copy that cannot be made is only not kept."""
    tmp = kept.with_name(f".{kept.name}.{os.getpid()}.tmp")
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(local, tmp)
        old = kept.with_name(f".{kept.name}.{os.getpid()}.old")
        if kept.exists():
            os.replace(kept, old)
        os.replace(tmp, kept)
        shutil.rmtree(old, ignore_errors=True)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)


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


__all__ = ["PYFUNC_CODE", "STORE_SCHEMES", "OutOfRangeWarning", "PolicyModel", "cached_model", "decide_frame",
           "default_checkpoint_cost", "example_frame", "feature_ranges", "load_policy_model",
           "log_policy_model", "model_config", "out_of_range_share", "policy_example",
           "policy_score", "runtime_of_format", "training_feature_ranges",
           "training_provenance"]
