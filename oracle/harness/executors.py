"""Executors for running branches in parallel: any ``concurrent.futures.Executor`` works.

* :func:`local_executor` - a local ``ProcessPoolExecutor`` (default 2 workers). Each branch
  already runs its agent under its own fail-stop; the pool only bounds concurrency. Its
  workers never outlive the process that made the pool (:func:`oracle.processes.guard_worker`):
  a SIGKILLed study runner leaves no worker, no forkserver, and no branch started after it.
* :func:`dask_executor` - a Dask ``distributed`` client's executor (``client.get_executor()``),
  for the ``cluster`` extra; pass a scheduler address, or nothing for a ``LocalCluster``
  (scheduler and dashboard on loopback only unless told otherwise).
* :class:`InlineExecutor` - runs each call synchronously in the caller (workers = 0), for
  debugging and for strictly sequential studies.

The study runner (:func:`oracle.harness.study.run_study`) submits nominal runs and branches and
appends each result to the audit log in the parent as futures complete, so a worker never
writes the audit log.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from typing import Any

from oracle.processes import guard_worker

__all__ = ["LOOPBACK_DASHBOARD", "InlineExecutor", "close_executor", "dask_executor",
           "local_executor", "make_executor"]

LOOPBACK_DASHBOARD = "127.0.0.1:0"
"""Where a local Dask cluster's dashboard listens unless told otherwise: loopback, a free
port (its link is printed when the cluster starts)."""


class InlineExecutor(Executor):
    """Runs each submitted call immediately in the calling thread."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        fut: Future = Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - delivered through the future
            fut.set_exception(exc)
        return fut


def local_executor(workers: int = 2) -> Executor:
    """A local process pool with ``workers`` processes (0: :class:`InlineExecutor`).

    Uses the ``forkserver`` start method so workers do not inherit the parent's threads
    (tqdm, reader threads) or open descriptors; each worker is guarded to die with this
    process (:func:`oracle.processes.guard_worker`).
    """
    if workers < 0:
        raise ValueError(f"workers must be >= 0, got {workers}")
    if workers == 0:
        return InlineExecutor()
    return ProcessPoolExecutor(max_workers=workers,
                               mp_context=multiprocessing.get_context("forkserver"),
                               initializer=guard_worker, initargs=(os.getpid(),))


def dask_executor(address: str | None = None, *, client: Any = None, **cluster_kwargs: Any) -> Executor:
    """The executor of a ``distributed.Client`` (``cluster`` extra).

    ``client``: an existing client; ``address``: a scheduler to connect to; neither: a new
    ``LocalCluster(**cluster_kwargs)`` (closed with the client's ``close``), whose scheduler
    and dashboard listen on loopback only unless ``cluster_kwargs`` name another ``host``
    or ``dashboard_address`` (Dask's own default is every interface: issue 32). The returned
    executor keeps a reference to its client as ``executor.client``.
    """
    try:
        from distributed import Client, LocalCluster
    except ImportError as exc:  # pragma: no cover - depends on the optional extra
        raise ImportError("dask_executor needs the 'cluster' extra (pip install "
                          "'ripplecp-policy[cluster]')") from exc
    if client is None:
        if address is not None:
            client = Client(address)
        else:
            if cluster_kwargs.get("processes", True):  # threads only: in-process transport
                cluster_kwargs.setdefault("host", "127.0.0.1")
            cluster_kwargs.setdefault("dashboard_address", LOOPBACK_DASHBOARD)
            cluster = LocalCluster(**cluster_kwargs)
            client = Client(cluster)
            client._ripplecp_owned_cluster = cluster  # closed by close_executor
    ex = client.get_executor()
    ex.client = client  # type: ignore[attr-defined]
    return ex


def close_executor(ex: Executor, *, wait: bool = True) -> None:
    """Shut an executor down (and a Dask client/cluster this module created).

    ``wait=False`` (after Ctrl-C or an error): queued calls are cancelled and a local
    pool's workers are terminated at once (the branches they run end with them, by their
    fail-stop), instead of waiting for the running calls to finish.
    """
    if not wait:
        ex.shutdown(wait=False, cancel_futures=True)
        if isinstance(ex, ProcessPoolExecutor):
            for proc in multiprocessing.active_children():  # this process's pool workers
                proc.terminate()
    ex.shutdown(wait=True)
    client = getattr(ex, "client", None)
    if client is not None:
        cluster = getattr(client, "_ripplecp_owned_cluster", None)
        client.close()
        if cluster is not None:
            cluster.close()


def make_executor(kind: str = "local", workers: int = 2, address: str | None = None,
                  dashboard: str | None = None) -> Executor:
    """``"local"`` (process pool), ``"inline"`` or ``"dask"`` (``address`` or LocalCluster;
    its dashboard at ``dashboard``, default :data:`LOOPBACK_DASHBOARD`)."""
    if kind == "local":
        return local_executor(workers)
    if kind == "inline":
        return InlineExecutor()
    if kind == "dask":
        if address is not None:
            return dask_executor(address)
        return dask_executor(n_workers=max(1, workers), threads_per_worker=1, processes=True,
                             dashboard_address=dashboard or LOOPBACK_DASHBOARD)
    raise ValueError(f"executor must be local, inline or dask, got {kind!r}")
