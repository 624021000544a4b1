"""The API-migration agent: dependent modules ported one by one, mappings found by probing."""

from __future__ import annotations

import json
import runpy
import shutil
from pathlib import Path

import pytest

from oracle.agents.migrate import MigrateAgent
from oracle.agents.migrate.tasks import SCALE, make_migrate_tasks, make_vendor
from oracle.agents.program import seeded
from oracle.protocol import RestorePoint, WallClock


def test_the_new_api_computes_the_legacy_functions_under_their_mapping(tmp_path: Path) -> None:
    (task,) = make_migrate_tasks(1, seed=3, root=tmp_path, repos=1)
    old = runpy.run_path(str(task.workspace_template / "vendor" / "oldapi.py"))
    new = runpy.run_path(str(task.workspace_template / "vendor" / "newapi.py"))
    v = make_vendor("billing", seeded("migrate", 3, "billing"))
    for f in v.functions:
        args = [17, 4242, 99][: f.arity]
        call = [args[j] for j in f.perm]
        call[0] *= f.scale
        assert new[f.new](*call) == old[f.old](*args) == f.value(*args)
        doc = new[f.new].__doc__
        assert (f"oldapi.{f.old}." in doc) == f.documented
        assert ("milli-units" in doc) == (f.scale == SCALE)


def test_port_every_module_and_resume_with_the_mappings_preserved(tmp_path: Path, finish) -> None:
    tasks = make_migrate_tasks(4, seed=0, root=tmp_path / "tasks", repos=1)
    task = max(tasks, key=lambda t: t.params["modules"])
    scen = json.loads((tmp_path / "tasks" / task.task_id / "scenario.json").read_text())
    agent = MigrateAgent()
    ws = tmp_path / "ws"
    shutil.copytree(task.workspace_template, ws)
    assert not agent.verify(task, ws)
    done = finish(agent.start(task, ws, 1, WallClock()), tmp_path / "snaps", ws)
    n = task.params["modules"]
    assert done.rc == 0 and agent.verify(task, ws) and done.boundaries == list(range(1, n + 1))
    assert not (ws / "vendor" / "oldapi.py").exists()
    golden = [e for e in done.events if e.extra.get("phase") == "golden"]
    assert len(golden) == n and all((ws / "data" / f"golden_mod{k}.json").stat().st_size > 50_000
                                    for k in range(1, n + 1))
    snap, transcript, facts = done.snapshots[1]
    assert {f"map:{u['old']}" for u in scen["first_uses"][0]} <= set(facts)
    ws2 = tmp_path / "resume"
    shutil.copytree(snap, ws2)
    again = finish(agent.resume(task, RestorePoint(1, ws2, transcript, facts), ws2, 1, WallClock()))
    assert again.rc == 0 and agent.verify(task, ws2) and again.boundaries == list(range(2, n + 1))
    # only functions first used after module 1 are probed again
    needed = [u for mod in scen["first_uses"][1:] for u in mod]
    probes = sum(1 for e in again.events if e.extra.get("phase") == "probe")
    assert (probes > 0) == bool(needed)
    assert "rewrite" in again.phases and again.phases.count("test") == n - 1


def test_the_repository_count_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="repos must be >= 1"):
        make_migrate_tasks(1, 0, tmp_path, repos=0)
