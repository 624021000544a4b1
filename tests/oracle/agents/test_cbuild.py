"""The multi-stage build agent: real make and gcc on a generated C project, faults found by building.

The spec checksums come from the generator's Python mirror of the C (no compiler at
generation time); the first test checks the compiled tests print them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from oracle.agents.cbuild import CbuildAgent
from oracle.agents.cbuild.tasks import make_cbuild_tasks
from oracle.protocol import RestorePoint, WallClock

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("make") is None,
                                reason="gcc and make are needed to build the generated projects")


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    root = tmp_path_factory.mktemp("cbuild")
    ts = make_cbuild_tasks(6, seed=0, root=root, repos=2)
    scen = {t.task_id: json.loads((root / t.task_id / "scenario.json").read_text()) for t in ts}
    return ts, scen


def test_the_python_mirror_predicts_what_the_compiled_tests_print(tasks, tmp_path: Path) -> None:
    ts, scen = tasks
    task = next(t for t in ts if scen[t.task_id]["faults"])
    ws = tmp_path / "ws"
    shutil.copytree(task.workspace_template, ws)
    fault = scen[task.task_id]["faults"][0]
    stages = scen[task.task_id]["stages"]
    subprocess.run([sys.executable, "tools/configure.py"], cwd=ws, check=True)
    k = stages.index(fault["stage"])
    subprocess.run(["make", "-s", fault["stage"]], cwd=ws, check=True, capture_output=True)
    shipped = subprocess.run([f"bin/test_{fault['stage']}"], cwd=ws, capture_output=True,
                             text=True).stdout.strip()
    spec = (ws / "spec" / f"{fault['stage']}.sum").read_text().strip()
    assert shipped != spec  # the configuration fault shows only once the stage is built
    ini = (ws / "config.ini").read_text()
    section = ini.split(f"[{fault['stage']}]")[1].split("[")[0]
    fixed = section.replace(f"{fault['option'].lower()} = {fault['shipped']}",
                            f"{fault['option'].lower()} = {fault['correct']}")
    (ws / "config.ini").write_text(ini.replace(section, fixed))
    subprocess.run([sys.executable, "tools/configure.py"], cwd=ws, check=True)
    subprocess.run(["make", "-s", fault["stage"]], cwd=ws, check=True, capture_output=True)
    out = subprocess.run([f"bin/test_{fault['stage']}"], cwd=ws, capture_output=True, text=True)
    assert out.stdout.strip() == spec
    assert len(stages) in (3, 4) and 0 <= k < len(stages)


def test_build_find_the_fault_and_resume_without_rebuilding(tasks, tmp_path: Path, finish) -> None:
    ts, scen = tasks
    task = next(t for t in ts if scen[t.task_id]["faults"]
                and scen[t.task_id]["stages"].index(scen[t.task_id]["faults"][0]["stage"]) < 2)
    stages = scen[task.task_id]["stages"]
    fault = scen[task.task_id]["faults"][0]
    agent = CbuildAgent()
    ws = tmp_path / "ws"
    shutil.copytree(task.workspace_template, ws)
    assert not agent.verify(task, ws)
    done = finish(agent.start(task, ws, 2, WallClock()), tmp_path / "snaps", ws)
    assert done.rc == 0 and agent.verify(task, ws)
    assert done.boundaries == list(range(1, len(stages) + 1))
    assert "rebuild" in done.phases and "edit_config" in done.phases
    b = stages.index(fault["stage"]) + 1
    snap, transcript, facts = done.snapshots[b]
    assert facts[f"config:{fault['stage']}"] == {fault["option"].lower(): fault["correct"]}
    builds = [e for e in done.events if e.extra.get("phase") == "build"]
    assert all(e.bytes_written > 100_000 for e in builds)  # objects, archives, tables
    ws2 = tmp_path / "resume"
    shutil.copytree(snap, ws2)
    again = finish(agent.resume(task, RestorePoint(b, ws2, transcript, facts), ws2, 7, WallClock()))
    assert again.rc == 0 and agent.verify(task, ws2)
    assert "rebuild" not in again.phases and again.boundaries == list(range(b + 1, len(stages) + 1))
    made = [e.argv[-1] for e in again.events if e.argv and e.argv[:2] == ["make", "-s"]
            and len(e.argv) == 3]
    assert made == stages[b:]  # only the stages after the restore point are built
