"""Where MLflow runs go, and how a researcher opens them: one SQLite store and one artifact
folder per checkout, experiments that open on their runs table, policy parameters as params.

Layout (``root`` is the mlruns directory itself, default ``<cwd>/mlruns``, overridden by the
``RIPPLECP_MLRUNS`` environment variable or by passing ``root``)::

    <root>/mlflow.db              tracking store   -> sqlite:///<abs root>/mlflow.db
    <root>/artifacts/<experiment> artifact location of each experiment (absolute file URI)
    <root>/artifacts/0            the Default experiment's (MLflow creates it with every store)

Every study script calls :func:`ensure_experiment` and logs with
``mlflow.set_tracking_uri(tracking_uri(root))`` (or an ``MlflowClient`` on that URI); tests
pass a ``tmp_path`` root so they never touch the checkout's store.

What the MLflow 3 UI shows first (read in the UI code MLflow 3.17.2 ships, and served by a
real ``mlflow ui`` in tests/ripplecp_policy/test_tracking_ui.py): an experiment page opens
on the view of the sidebar's workflow type, which comes from the URL's ``workflowType``
parameter, else the browser's remembered choice (local storage ``mlflow.workflowType``),
else "GenAI" (an empty traces overview). Without the workflow selector (earlier MLflow 3
releases) the UI chooses by the experiment's ``mlflow.experimentKind`` tag instead. So
experiments are created with that tag set to ``custom_model_development`` (what the UI's
own "Machine learning" type writes), and the studies print :func:`runs_url`, which carries
``workflowType=machine_learning`` and opens the runs table in any MLflow 3 release.
"""

from __future__ import annotations

import contextlib
import math
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

ENV_VAR = "RIPPLECP_MLRUNS"
#: the experiment tag the MLflow 3 UI reads for an experiment's type, and the type's value
#: for classic model training (runs with params and metrics), as its type selector writes it
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
#: where ``mlflow ui`` listens unless told otherwise: loopback only
UI_HOST, UI_PORT = "127.0.0.1", 5000
#: MLflow's limit on a param value's length
PARAM_MAX = 6000


def mlruns_root() -> Path:
    """The mlruns directory: ``$RIPPLECP_MLRUNS`` if set, else ``<cwd>/mlruns`` (absolute)."""
    env = os.environ.get(ENV_VAR)
    return (Path(env).expanduser() if env else Path.cwd() / "mlruns").resolve()


def _root(root: Path | str | None) -> Path:
    path = Path(root).expanduser().resolve() if root is not None else mlruns_root()
    path.mkdir(parents=True, exist_ok=True)
    return path


def tracking_uri(root: Path | str | None = None) -> str:
    """The SQLite tracking URI ``sqlite:///<abs root>/mlflow.db`` (creates ``root``)."""
    return f"sqlite:///{_root(root) / 'mlflow.db'}"


def check_experiment_name(name: str) -> None:
    """An experiment name is a plain, non-empty name (it names its artifact folder);
    ValueError otherwise. Commands check ``--experiment`` with it before any work."""
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"experiment name must be a plain, non-empty name, got {name!r}")


def artifact_location(name: str, root: Path | str | None = None) -> str:
    """Absolute file URI of ``<root>/artifacts/<name>``, the experiment's artifact location."""
    check_experiment_name(name)
    path = _root(root) / "artifacts" / name
    path.mkdir(parents=True, exist_ok=True)
    return path.as_uri()


def ensure_store(root: Path | str | None = None) -> str:
    """Create the store at ``root`` if absent, with every artifact under ``root``; return
    its tracking URI.

    MLflow creates a Default experiment with every store, its artifacts by default in
    ``./mlruns/0`` of whatever folder the first process ran in; here it gets
    ``<root>/artifacts/0``. A store made before this rule has its Default experiment moved
    there as long as it holds no run (so no artifact is left behind).
    """
    uri = tracking_uri(root)
    db = _root(root) / "mlflow.db"
    home = _root(root) / "artifacts"
    if not db.exists() or db.stat().st_size == 0:
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        home.mkdir(parents=True, exist_ok=True)
        SqlAlchemyStore(uri, home.as_uri()).engine.dispose()
        return uri
    default = (home / "0").as_uri()
    with sqlite3.connect(db) as con:
        con.execute(
            "UPDATE experiments SET artifact_location = ? WHERE experiment_id = 0 "
            "AND artifact_location NOT LIKE ? AND NOT EXISTS "
            "(SELECT 1 FROM runs WHERE experiment_id = 0)", (default, home.as_uri() + "/%"))
    con.close()
    return uri


def ensure_experiment(name: str, root: Path | str | None = None) -> str:
    """Create the experiment ``name`` in the store at ``root`` if absent; return its id.

    New experiments get their artifact folder under ``root`` and the experiment type of
    classic model training (:data:`EXPERIMENT_KIND_TAG`), so MLflow's UI opens them on the
    runs table; an existing experiment keeps its artifact location and gets the type tag if
    it has none. Nothing global is changed: callers set the tracking URI themselves.
    """
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=ensure_store(root))
    exp = client.get_experiment_by_name(name)
    if exp is None:
        return str(client.create_experiment(name, artifact_location=artifact_location(name, root),
                                            tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND}))
    if EXPERIMENT_KIND_TAG not in exp.tags:
        client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    return str(exp.experiment_id)


@contextlib.contextmanager
def using_store(root: Path | str | None = None) -> Iterator[str]:
    """MLflow's global tracking URI set to the store at ``root`` for the ``with`` block, and
    put back after it (``mlflow.pyfunc`` logs and loads models through the global URI only);
    yields the URI."""
    import mlflow

    previous = mlflow.get_tracking_uri()
    uri = tracking_uri(root)
    mlflow.set_tracking_uri(uri)
    try:
        yield uri
    finally:
        mlflow.set_tracking_uri(previous)


def ui_command(root: Path | str | None = None, port: int = UI_PORT) -> str:
    """The command that serves this store's UI on the loopback interface only."""
    return f"mlflow ui --backend-store-uri {tracking_uri(root)} --host {UI_HOST} --port {port}"


def runs_url(experiment_id: str, port: int = UI_PORT, host: str = UI_HOST) -> str:
    """The UI address of an experiment's runs table (see the module docstring for why it
    names the workflow type)."""
    return f"http://{host}:{port}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def policy_params(policy: Any) -> dict[str, str]:
    """MLflow params of a placement policy: its constructor parameters (``get_params``) and
    its fitted attributes that are scalars (names ending in ``_``, e.g. ``threshold_``,
    ``k_``, ``interval_``), as text; a value longer than MLflow accepts is cut."""
    out: dict[str, Any] = dict(policy.get_params(deep=False))
    for name, value in vars(policy).items():
        if name.endswith("_") and not name.startswith("_") and _scalar(value):
            out[name] = value
    return {k: _text(v)[:PARAM_MAX] for k, v in sorted(out.items())}


def _scalar(value: Any) -> bool:
    return bool(np.isscalar(value)) and not isinstance(value, bytes | complex)


def _text(value: Any) -> str:
    if callable(value):
        return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', repr(value))}"
    if isinstance(value, float) and math.isfinite(value):
        return repr(float(value))
    return str(value)
