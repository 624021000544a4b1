"""The dependency-resolution agent: real pip on a generated index, real re-derivation."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from oracle.agents.depres import DepresAgent
from oracle.agents.depres.tasks import LEGACY_BREAK, make_depres_tasks, make_universe
from oracle.agents.depres.wheels import build_wheel, module_name
from oracle.protocol import RestorePoint, WallClock

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed (sdists compile C)")


def _pip(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=300)


def test_a_generated_wheel_installs_with_real_pip(tmp_path: Path) -> None:
    idx = tmp_path / "idx"
    idx.mkdir()
    whl = build_wheel(idx, "demo-pkg", "2.0", ["other>=1"], {"demo_pkg/__init__.py": b"X = 1\n"})
    assert whl.name == "demo_pkg-2.0-py3-none-any.whl"
    with zipfile.ZipFile(whl) as z:
        record = z.read("demo_pkg-2.0.dist-info/RECORD").decode()
        assert "demo_pkg/__init__.py,sha256=" in record
        assert "Requires-Dist: other>=1" in z.read("demo_pkg-2.0.dist-info/METADATA").decode()
    p = _pip("install", "--no-index", "--find-links", str(idx), "--target", str(tmp_path / "t"),
             "--no-deps", "demo-pkg")
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "t" / "demo_pkg" / "__init__.py").read_text() == "X = 1\n"


def test_universe_windows_slide_and_the_legacy_cli_breaks_on_new_cores() -> None:
    import random

    u = make_universe("geo", random.Random(1))
    for lib in u.stack:
        windows = [u.release(lib, v).core_window for v in u.versions(lib)]
        assert windows == sorted(windows) and windows[0][0] == 1
        assert 1 <= u.tolerant_max(lib) < max(u.versions(lib))
    cli = [u.release(u.legacy, v).requires for v in u.versions(u.legacy)]
    assert cli[0] == () and all(r == (f"{u.core}<{LEGACY_BREAK}",) for r in cli[1:])
    util = [u.release(u.pure[0], v).regressed for v in u.versions(u.pure[0])]
    assert util == sorted(util) and util[-1] and not util[0]


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    root = tmp_path_factory.mktemp("depres")
    ts = make_depres_tasks(8, seed=0, root=root, repos=1)
    scen = {t.task_id: json.loads((root / t.task_id / "scenario.json").read_text()) for t in ts}
    return ts, scen


def test_tasks_differ_in_where_the_discovery_lies(tasks) -> None:
    ts, scen = tasks
    assert {t.repo for t in ts} == {"depres/geo-stack"} and len({t.task_id for t in ts}) == 8
    kinds = {(s["conflict"], s["regression"]) for s in scen.values()}
    assert len(kinds) >= 3  # resolution, bisection, both or neither vary across tasks
    conflict = next(t for t in ts if scen[t.task_id]["conflict"])
    p = _pip("install", "--dry-run", "--ignore-installed", "--no-index", "--find-links",
             conflict.params["index"], "-r", "requirements.in", cwd=conflict.workspace_template)
    assert p.returncode != 0 and "conflict" in (p.stderr + p.stdout).lower()


@needs_gcc
def test_resolve_install_bisect_and_resume_from_each_boundary(tasks, tmp_path: Path, finish) -> None:
    ts, scen = tasks
    task = next(t for t in ts if scen[t.task_id]["conflict"] and scen[t.task_id]["regression"])
    agent = DepresAgent()
    ws = tmp_path / "ws"
    shutil.copytree(task.workspace_template, ws)
    assert not agent.verify(task, ws)
    done = finish(agent.start(task, ws, 3, WallClock()), tmp_path / "snaps", ws)
    assert done.rc == 0 and agent.verify(task, ws)
    assert done.boundaries == [1, 2, 3]
    ph = done.phases
    assert ph.index("relax") < ph.index("lock") < ph.index("install") < ph.index("try_version")
    pip_runs = [e for e in done.events if e.argv and e.argv[1:3] == ["-m", "pip"]]
    assert pip_runs and all(e.duration > 0 and e.exit_code is not None for e in pip_runs)
    install = next(e for e in done.events if e.extra.get("phase") == "install")
    assert install.safe_boundary and install.bytes_written > 1_000_000
    _, _, facts = done.snapshots[3]
    assert facts["runtime_pin"] in facts["pins"] and facts["tried_relaxations"]
    lock = (ws / "requirements.lock").read_text().split()
    assert lock == facts["pins"]
    # resume after the resolution: no resolving again; the environment comes back
    for b, absent, present in ((1, "resolve", "install"), (2, "install", "smoke")):
        snap, transcript, facts = done.snapshots[b]
        ws_b = tmp_path / f"resume{b}"
        shutil.copytree(snap, ws_b)
        again = finish(agent.resume(task, RestorePoint(b, ws_b, transcript, facts), ws_b, 5, WallClock()))
        assert again.rc == 0 and agent.verify(task, ws_b), (b, again.phases)
        assert again.phases[0] == "orient" and absent not in again.phases and present in again.phases
        assert again.boundaries == list(range(b + 1, 4))


@needs_gcc
def test_the_wheel_cache_outside_the_workspace_skips_the_compiler(tasks, tmp_path: Path) -> None:
    ts, _ = tasks
    task = next(t for t in ts if "geo-fast" in (t.workspace_template / "requirements.in").read_text())
    cache = tmp_path / "cache"
    args = ["install", "--no-index", "--find-links", task.params["index"], "--cache-dir",
            str(cache), "--no-deps", "geo-fast"]
    first = _pip(*args, "--target", str(tmp_path / "a"), "-v")
    assert first.returncode == 0, first.stderr
    assert list(cache.rglob("*.whl")), "pip caches the wheel it built from the sdist"
    again = _pip(*args, "--target", str(tmp_path / "b"), "-v")
    assert again.returncode == 0 and "Building wheel" not in again.stdout
    mod = module_name("geo-fast")
    assert (tmp_path / "b" / mod / "_ext.so").exists()
    out = subprocess.run([sys.executable, "-S", "-c", f"import {mod}; print({mod}.process(7))"],
                         env={"PYTHONPATH": str(tmp_path / "b")}, capture_output=True, text=True)
    assert out.returncode == 0 and int(out.stdout) >= 0
