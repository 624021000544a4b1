"""Where MLflow runs go: one SQLite store and one artifact folder per checkout.

Layout (``root`` is the mlruns directory itself, default ``<cwd>/mlruns``, overridden by the
``RIPPLECP_MLRUNS`` environment variable or by passing ``root``)::

    <root>/mlflow.db              tracking store   -> sqlite:///<abs root>/mlflow.db
    <root>/artifacts/<experiment> artifact location of each experiment (absolute file URI)

Every study script calls :func:`ensure_experiment` and logs with
``mlflow.set_tracking_uri(tracking_uri(root))``; tests pass a ``tmp_path`` root so they
never touch the checkout's store.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "RIPPLECP_MLRUNS"


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


def ensure_experiment(name: str, root: Path | str | None = None) -> str:
    """Create the experiment ``name`` in the store at ``root`` if absent; return its id.

    An existing experiment is reused as is (its artifact location is whatever it was
    created with). Nothing global is changed: callers set the tracking URI themselves.
    """
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri(root))
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return str(exp.experiment_id)
    return str(client.create_experiment(name, artifact_location=artifact_location(name, root)))
