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
import json
import math
import os
import re
import signal
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

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


def runs_url(experiment_id: str, port: int = UI_PORT, host: str = UI_HOST, view: str | None = None) -> str:
    """The UI address of an experiment's runs table (see the module docstring for why it
    names the workflow type); ``view``: a runs view saved with :func:`save_runs_view`, the
    table as the study laid it out."""
    url = f"http://{host}:{port}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"
    return url + (f"&{VIEW_PARAM}={view}" if view else "")


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
    import numpy as np  # here, not at the top: commands check --experiment without numpy

    return bool(np.isscalar(value)) and not isinstance(value, bytes | complex)


def _text(value: Any) -> str:
    if callable(value):
        return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', repr(value))}"
    if isinstance(value, float) and math.isfinite(value):
        return repr(float(value))
    return str(value)


# ---------------------------------------------------------------------------------------
# the run lifecycle: one parent run per study, child runs beneath it, every run ended
# ---------------------------------------------------------------------------------------

#: how a run ends: normally, on an error, on Ctrl-C or a termination signal
FINISHED, FAILED, KILLED = "FINISHED", "FAILED", "KILLED"
#: the experiment tag prefix and URL parameter of the MLflow 3 UI's shared views (a saved
#: layout of the runs table: columns, order, filter), as its "share" button writes them
VIEW_TAG, VIEW_PARAM = "mlflow.sharedViewState.", "viewStateShareKey"
#: MLflow's limits per ``log_batch`` call
_BATCH_METRICS, _BATCH_PARAMS = 1000, 100


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived while a study run was open: unwinds like Ctrl-C, so every
    open run is ended KILLED (the command exits 130)."""


def end_status(exc: BaseException | None) -> str:
    """The status a run ends with when its block ends with ``exc``: FINISHED without one,
    KILLED on Ctrl-C or a termination signal, FAILED on anything else."""
    if exc is None:
        return FINISHED
    return KILLED if isinstance(exc, KeyboardInterrupt) else FAILED


def metric_key(text: str) -> str:
    """An MLflow-legal metric or param key (alphanumerics, ``_ - . /`` and space)."""
    return re.sub(r"[^A-Za-z0-9_\-./ ]", "_", text)


def model_name(*parts: str) -> str:
    """A logged and registered model's name from what it is (e.g. family, policy, budget):
    the parts joined by ``--``, each character MLflow refuses in a name (``/ : . % " '``)
    made ``_``."""
    return "--".join(re.sub(r"[/:.%\"']", "_", str(p)) for p in parts)


#: stops (signal names) that arrived while a study run was open and have not unwound it yet:
#: what a handler raises inside a callback from C (xgboost's data iterator, through ctypes)
#: is printed and dropped, so the stop is also remembered here and raised again at the next
#: run boundary (:func:`raise_pending_stop`)
_PENDING: list[str] = []


def raise_pending_stop() -> None:
    """Raise the stop a signal asked for while a study run was open, if its own unwinding
    was lost (see ``_PENDING``); called at every run boundary and log."""
    if _PENDING:
        name = _PENDING[0]
        if name == "SIGINT":
            raise KeyboardInterrupt(f"signal {name} (its first unwinding was lost in a library callback)")
        raise Terminated(f"signal {name} (its first unwinding was lost in a library callback)")


@contextlib.contextmanager
def _signals_unwind() -> Iterator[None]:
    """While the block runs in the main thread, SIGTERM and SIGHUP raise :class:`Terminated`
    (else they end the process before any run is ended) and SIGINT, unless ignored (a
    background job's), raises ``KeyboardInterrupt`` as Python's own handler does; each is
    also remembered, so one whose exception a library dropped stops the study at its next
    run boundary, or at the block's end, where a library error raised because of it is
    reported as the stop. The old handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        _PENDING.append(name)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(f"signal {name}")

    sigs = [signal.SIGTERM, signal.SIGHUP]
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        sigs.append(signal.SIGINT)
    old = {s: signal.signal(s, handler) for s in sigs}
    _PENDING.clear()
    try:
        yield
        raise_pending_stop()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        if _PENDING:  # e.g. xgboost's own check failing once its iterator lost the interrupt
            try:
                raise_pending_stop()
            except KeyboardInterrupt as stop:
                raise stop from exc
        raise
    finally:
        _PENDING.clear()
        for s, h in old.items():
            signal.signal(s, h)


class TrackedRun:
    """One MLflow run of a study, written through an ``MlflowClient`` (no global state): its
    metrics, params, tags, artifacts and child runs. Made by :func:`study_run` and
    :meth:`child`, which end it; a run of a study logged with ``--no-mlflow`` is off
    (``run_id`` None) and every method does nothing."""

    def __init__(self, client: Any, experiment_id: str, run_id: str | None, root: Path | None) -> None:
        self.client, self.experiment_id, self.run_id, self.root = client, experiment_id, run_id, root

    @property
    def on(self) -> bool:
        """Whether anything is logged (False under ``--no-mlflow``)."""
        return self.run_id is not None

    def log(self, metrics: Mapping[str, float] | None = None, *, params: Mapping[str, Any] | None = None,
            tags: Mapping[str, Any] | None = None,
            history: Mapping[str, Sequence[float] | Mapping[int, float]] | None = None,
            step: int = 0) -> None:
        """Metrics (non-finite values left out) at ``step``, params (as text, cut to MLflow's
        limit), tags, and ``history``: per key its values at steps 0, 1, ... (e.g. one per
        fold), or a mapping step -> value, all in as few batches as MLflow allows."""
        raise_pending_stop()
        if not self.on:
            return
        from mlflow.entities import Metric, Param, RunTag

        ts = int(time.time() * 1000)
        ms = [Metric(k, float(v), ts, step) for k, v in (metrics or {}).items() if _finite(v)]
        ms += [Metric(k, float(v), ts, int(i)) for k, vs in (history or {}).items()
               for i, v in (vs.items() if isinstance(vs, Mapping) else enumerate(vs)) if _finite(v)]
        ps = [Param(k, _param(v)) for k, v in (params or {}).items()]
        ts_ = [RunTag(k, str(v)) for k, v in (tags or {}).items()]
        n = max(1, -(-len(ms) // _BATCH_METRICS), -(-len(ps) // _BATCH_PARAMS))
        for i in range(n):
            self.client.log_batch(self.run_id, metrics=ms[i * _BATCH_METRICS:(i + 1) * _BATCH_METRICS],
                                  params=ps[i * _BATCH_PARAMS:(i + 1) * _BATCH_PARAMS],
                                  tags=ts_ if i == 0 else [])

    def log_artifact(self, path: str | Path, folder: str | None = None) -> None:
        """The file or folder ``path`` as an artifact (under ``folder``)."""
        if not self.on:
            return
        if Path(path).is_dir():
            self.client.log_artifacts(self.run_id, str(path), folder)
        else:
            self.client.log_artifact(self.run_id, str(path), folder)

    def log_text(self, text: str, name: str) -> None:
        """``text`` as the artifact ``name`` (a path inside the run's artifacts)."""
        if self.on:
            self.client.log_text(self.run_id, text, name)

    def log_dict(self, data: Mapping[str, Any], name: str) -> None:
        """``data`` as the JSON artifact ``name``."""
        if self.on:
            self.client.log_dict(self.run_id, dict(data), name)

    @contextlib.contextmanager
    def child(self, name: str, *, tags: Mapping[str, Any] | None = None) -> Iterator[TrackedRun]:
        """A child run of this one for the block, ended FINISHED, or FAILED / KILLED when the
        block raises (:func:`end_status`); the exception goes on."""
        raise_pending_stop()
        if not self.on:
            yield TrackedRun(None, self.experiment_id, None, self.root)
            return
        run = self.client.create_run(self.experiment_id, run_name=name, tags={
            "mlflow.parentRunId": self.run_id, **{k: str(v) for k, v in (tags or {}).items()}})
        kid = TrackedRun(self.client, self.experiment_id, run.info.run_id, self.root)
        with _ending(kid):
            yield kid

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """This run as MLflow's active run for the block, for the calls that log only through
        the global state (``mlflow.pyfunc.log_model``); MLflow ends it when the block ends,
        so make it the run's last step."""
        if not self.on:
            yield
            return
        import mlflow

        with using_store(self.root), mlflow.start_run(run_id=self.run_id):
            yield


@contextlib.contextmanager
def _ending(run: TrackedRun) -> Iterator[None]:
    """End ``run`` by how the block ends: FINISHED, KILLED (Ctrl-C, SIGTERM) or FAILED."""
    try:
        yield
        raise_pending_stop()
    except BaseException as exc:
        stop = exc if isinstance(exc, KeyboardInterrupt) or not _PENDING else KeyboardInterrupt()
        with contextlib.suppress(Exception):  # the study's own error is the one to report
            run.client.set_terminated(run.run_id, status=end_status(stop))
        raise
    run.client.set_terminated(run.run_id, status=FINISHED)


@contextlib.contextmanager
def study_run(experiment: str, root: Path | str | None = None, *, name: str,
              tags: Mapping[str, Any] | None = None, params: Mapping[str, Any] | None = None,
              enabled: bool = True) -> Iterator[TrackedRun]:
    """The parent run of one study in ``experiment`` (created if absent, in the store at
    ``root``) for the block: ``tags`` (``ripplecp.kind=study`` added) and ``params`` logged
    at once. It ends FINISHED, FAILED on an error or KILLED on Ctrl-C, SIGTERM or SIGHUP
    (those unwind the block as :class:`Terminated`), and every child opened with
    :meth:`TrackedRun.child` ends the same way first. ``enabled`` False: nothing is created
    and the run is off."""
    if not enabled:
        yield TrackedRun(None, "", None, None)
        return
    from mlflow.tracking import MlflowClient

    exp_id = ensure_experiment(experiment, root)
    _fast_sqlite()
    client = MlflowClient(tracking_uri=tracking_uri(root))
    run = client.create_run(exp_id, run_name=name, tags={"ripplecp.kind": "study",
                                                         **{k: str(v) for k, v in (tags or {}).items()}})
    parent = TrackedRun(client, exp_id, run.info.run_id, _root(root))
    with _signals_unwind(), _ending(parent):
        parent.log(params=params)
        yield parent


def save_runs_view(run: TrackedRun, key: str, *, columns: Iterable[str], order_by: str,
                   ascending: bool = True, search: str = "") -> str:
    """Save a layout of the experiment's runs table as the MLflow 3 UI's shared view ``key``
    (what its "share" button writes: an experiment tag) and return :func:`runs_url` opening
    it: ``columns`` shown (``metrics.`name```, ``params.`name```, ``tags.`name```,
    ``attributes.`Run Name```), rows ordered by ``order_by`` (ordering by anything but the
    start time lists child runs flat, each on its own row), ``search`` a filter. Without a
    view the table opens on the parent runs alone, collapsed, with no metric column."""
    if not run.on:
        return ""
    state = {"selectedColumns": list(columns), "columnOrder": list(columns), "orderByKey": order_by, "orderByAsc": ascending,
             "searchFilter": search, "runsHiddenMode": "SHOW_ALL"}
    run.client.set_experiment_tag(run.experiment_id, VIEW_TAG + key, json.dumps(state))
    return runs_url(run.experiment_id, view=key)


def _fast_sqlite() -> None:
    """Let the MLflow SQLite store commit without an fsync per statement (synchronous=OFF).

    Hundreds of child runs otherwise spend most of a study in fsync. Registered once per
    process, after the store exists (its creation and migrations run with SQLite's
    defaults), on every pool checkout of an SQLite connection. A crash of this process
    cannot corrupt the store; only an OS crash mid-study could (then rerun the study)."""
    global _FAST
    if _FAST:
        return
    from sqlalchemy import event
    from sqlalchemy.pool import Pool

    @event.listens_for(Pool, "checkout")
    def _pragma(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:  # pragma: no cover
        if type(dbapi_conn).__module__.startswith("sqlite3"):
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA synchronous=OFF")
            cur.close()

    _FAST = True


_FAST = False


def _finite(v: Any) -> bool:
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def _param(v: Any) -> str:
    text = v if isinstance(v, str) else json.dumps(v) if isinstance(v, list | tuple | dict | bool) or v is None else _text(v)
    return text[:PARAM_MAX]
