"""Branches through any concurrent.futures.Executor: inline, local process pool, Dask."""

from __future__ import annotations

from pathlib import Path

import pytest

from oracle.agents.scripted import make_scripted_tasks
from oracle.harness.branch import HarnessConfig
from oracle.harness.executors import InlineExecutor, close_executor, local_executor, make_executor
from oracle.harness.plan import full_table_plan
from oracle.harness.study import run_study


def _plan(tmp_path: Path, b: int = 2):
    tasks = make_scripted_tasks(1, 9, tmp_path / "tasks", n_steps=2, n_files=2, time_scale=0.1)
    return full_table_plan(tasks, {tasks[0].task_id: b}, seed=4, agent="scripted",
                           config=HarnessConfig(), repetitions=1)


def test_inline_executor_delivers_results_and_errors() -> None:
    ex = InlineExecutor()
    assert ex.submit(lambda x: x + 1, 1).result() == 2
    fut = ex.submit(lambda: 1 / 0)
    assert isinstance(fut.exception(), ZeroDivisionError)
    with pytest.raises(ValueError):
        make_executor("ray")
    with pytest.raises(ValueError):
        local_executor(-1)


def test_process_pool_runs_every_branch(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    ex = local_executor(2)
    try:
        pooled = run_study(plan, tmp_path / "pool", executor=ex)
    finally:
        close_executor(ex)
    want = {(s.branch_id, s.restore_point, s.failure, s.seed) for s in plan.branch_specs((1,))}
    got = {(r.branch_id, r.restore_point, r.failure, r.seed) for r in pooled.recovery.itertuples()}
    assert got == want and pooled.recovery["verified"].all()
    assert not pooled.recovery["quarantined"].any()


def test_dask_local_cluster(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    from oracle.harness.executors import dask_executor

    plan = _plan(tmp_path)
    ex = dask_executor(n_workers=1, processes=False, threads_per_worker=1,
                       dashboard_address=None)
    try:
        ls = run_study(plan, tmp_path / "dask", executor=ex)
    finally:
        close_executor(ex)
    assert len(ls.recovery) == 3 and ls.recovery["verified"].all()
    assert not ls.recovery["quarantined"].any()


@pytest.mark.parametrize("kind", ["local", "dask"])
def test_sparse_plan_and_an_adaptive_round_on_a_pool(tmp_path: Path, kind: str) -> None:
    """The sparse design's branches (table cells) and an adaptive round run on a process pool
    and on Dask, and a rerun on the same study adds nothing."""
    from oracle.harness.plan import sparse_plan

    tasks = make_scripted_tasks(2, 9, tmp_path / "tasks", n_steps=3, n_files=2, time_scale=0.1)
    plan = sparse_plan(tasks, {t.task_id: 3 for t in tasks}, seed=4, branches=4, agent="scripted",
                       config=HarnessConfig())
    if kind == "dask":
        pytest.importorskip("distributed")
        from oracle.harness.executors import dask_executor

        ex = dask_executor(n_workers=1, processes=False, threads_per_worker=1, dashboard_address=None)
    else:
        ex = local_executor(2)
    try:
        ls = run_study(plan, tmp_path / kind, executor=ex, adaptive_branches=2)
        again = run_study(plan, tmp_path / kind, executor=ex, adaptive_branches=2)
    finally:
        close_executor(ex)
    planned = {s.branch_id for s in plan.branch_specs((1,))}
    adaptive = ls.provenance["sparse"]["adaptive"]
    assert len(adaptive) == 2 and set(ls.recovery["branch_id"]) == planned | {f"{c}:rep1" for c in adaptive}
    assert again.content_hash() == ls.content_hash()


def _outward_ip() -> str | None:
    """This machine's address on its default route (no packet is sent), if it has one."""
    import socket

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("10.255.255.255", 1))
        ip = s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()
    return None if ip.startswith("127.") else ip


def _listens(host: str, port: int) -> bool:
    import socket

    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError:
        return False
    return True


def test_dask_executor_serves_the_dashboard_and_scheduler_on_loopback_only() -> None:
    """Issue 32 item 4: ``oracle run --executor dask`` must not serve the Dask dashboard
    (or its scheduler) on every interface; loopback unless the user names an address."""
    pytest.importorskip("distributed")
    from urllib.parse import urlsplit

    ip = _outward_ip()
    if ip is None:
        pytest.skip("this machine has no non-loopback address to probe from")
    ex = make_executor("dask", 1)
    try:
        client = ex.client  # type: ignore[attr-defined]
        dash = urlsplit(client.dashboard_link)
        sched = urlsplit(client.scheduler.address)
        assert _listens("127.0.0.1", dash.port)
        assert not _listens(ip, dash.port), f"dashboard reachable on {ip}:{dash.port}"
        assert not _listens(ip, sched.port), f"scheduler reachable on {ip}:{sched.port}"
    finally:
        close_executor(ex)
