"""The regression-bisect agent: real git histories, real builds, a real ``git bisect run``.

The expected checksums come from the generator's Python mirror of the C (no compiler at
generation time); every run below checks them against what gcc builds."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from oracle.agents.bisect import BisectAgent
from oracle.agents.bisect.tasks import PROJECTS, make_bisect_tasks
from oracle.protocol import RestorePoint, WallClock

pytestmark = pytest.mark.skipif(
    any(shutil.which(t) is None for t in ("gcc", "make", "git")),
    reason="gcc, make and git are needed to build and bisect the generated projects")


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    root = tmp_path_factory.mktemp("bisect")
    ts = make_bisect_tasks(6, seed=0, root=root, repos=3, releases=(2, 3), commits=(3, 8))
    scen = {t.task_id: json.loads((root / t.task_id / "scenario.json").read_text()) for t in ts}
    return ts, scen


def _log(template: Path) -> dict[str, str]:
    """sha -> subject of the task's upstream history."""
    out = subprocess.run(["git", "--git-dir=upstream.git", "log", "--format=%H %s", "main"],
                         cwd=template, capture_output=True, text=True, check=True).stdout
    return dict(line.split(" ", 1) for line in out.splitlines())


def test_tasks_are_real_histories_drawn_per_task(tasks, tmp_path: Path) -> None:
    ts, scen = tasks
    assert len({t.repo for t in ts}) == 3 and all(t.family == "bisect" for t in ts)
    for t in ts:
        s = scen[t.task_id]
        tags = subprocess.run(["git", "--git-dir=upstream.git", "tag"], cwd=t.workspace_template,
                              capture_output=True, text=True, check=True).stdout.split()
        assert sorted(tags) == [f"v{k}" for k in range(s["releases"] + 1)]
        assert t.params["releases"] == s["releases"] and len(_log(t.workspace_template)) == s["commits"]
    # the position of the failing release varies with the task
    assert len({r["release"] for s in scen.values() for r in s["regressions"]}) >= 2
    again = make_bisect_tasks(6, seed=0, root=tmp_path / "again", repos=3, releases=(2, 3),
                              commits=(3, 8))
    assert [_log(t.workspace_template) for t in again] == [_log(t.workspace_template) for t in ts]


def test_repos_beyond_the_declared_are_generated_variants(tmp_path: Path) -> None:
    ts = make_bisect_tasks(10, seed=3, root=tmp_path, repos=10, releases=(1, 1), commits=(1, 2))
    repos = [t.repo for t in ts]
    assert len(set(repos)) == 10
    assert repos[:8] == [f"bisect/{p}" for p in PROJECTS] and repos[8:] == ["bisect/ledger2",
                                                                           "bisect/imaging2"]
    base = (ts[0].workspace_template / "src" / "units.def").read_text()
    assert (ts[8].workspace_template / "src" / "units.def").read_text() != base
    with pytest.raises(ValueError, match="releases"):
        make_bisect_tasks(1, 0, tmp_path / "x", releases=(3, 2))


def test_sync_bisect_revert_and_resume_by_rederivation(tasks, tmp_path: Path, finish) -> None:
    ts, scen = tasks
    task = next(t for t in ts if len(scen[t.task_id]["regressions"]) == 1
                and scen[t.task_id]["regressions"][0]["release"] == 1)
    s = scen[task.task_id]
    reg = s["regressions"][0]
    agent = BisectAgent()
    ws = tmp_path / "ws"
    shutil.copytree(task.workspace_template, ws)
    assert not agent.verify(task, ws)
    done = finish(agent.start(task, ws, 2, WallClock()), tmp_path / "snaps", ws)
    assert done.rc == 0 and agent.verify(task, ws)
    n_b = s["releases"] + 1
    assert done.boundaries == list(range(1, n_b + 1))
    assert done.phases.count("bisect") == 5 and "rebuild" in done.phases
    culprit = done.snapshots[2][2]["culprit:v1"]  # boundary 2 ends the sync of v1
    assert _log(task.workspace_template)[culprit] == reg["message"]
    assert not (done.snapshots[2][0] / ".bisect").exists()
    steps = [e for e in done.events if (e.argv or [])[3:5] == ["bisect", "run"]]
    assert len(steps) == 1 and reg["unit"] in steps[0].argv
    # restored before the failing release: the bisect is lost and redone
    snap, transcript, facts = done.snapshots[1]
    ws1 = tmp_path / "r1"
    shutil.copytree(snap, ws1)
    again = finish(agent.resume(task, RestorePoint(1, ws1, transcript, facts), ws1, 7, WallClock()))
    assert again.rc == 0 and agent.verify(task, ws1) and "bisect" in again.phases
    assert again.boundaries == list(range(2, n_b + 1))
    # restored after it: the culprit and the revert are in what the restore point preserved
    snap, transcript, facts = done.snapshots[2]
    ws2 = tmp_path / "r2"
    shutil.copytree(snap, ws2)
    later = finish(agent.resume(task, RestorePoint(2, ws2, transcript, facts), ws2, 7, WallClock()))
    assert later.rc == 0 and agent.verify(task, ws2)
    assert "bisect" not in later.phases and "edit" not in later.phases
    assert later.boundaries == list(range(3, n_b + 1))
    applied = [e.argv[-1] for e in later.events if e.argv and e.argv[3:4] == ["apply"]]
    assert applied == [f"patches/upstream-v{k}.patch" for k in range(2, n_b)]


def test_no_candidate_boundary_inside_the_bisect_at_tool_call_granularity(tasks, tmp_path: Path,
                                                                          finish) -> None:
    ts, scen = tasks
    task = next(t for t in ts if scen[t.task_id]["regressions"])
    ws = tmp_path / "ws"
    shutil.copytree(task.workspace_template, ws)
    agent = BisectAgent(granularity="tool_call")
    done = finish(agent.start(task, ws, 0, WallClock()))
    assert done.rc == 0 and agent.verify(task, ws)
    assert len(done.boundaries) > scen[task.task_id]["releases"] + 1
    bis = [e for e in done.events if e.extra.get("phase") == "bisect"]
    assert [e.argv[0] for e in bis][-1] == "rm"
    assert [e.safe_boundary for e in bis] == [False] * (len(bis) - 1) + [True]


def test_one_task_end_to_end_through_the_harness_full_table(tmp_path: Path) -> None:
    """A one-release task with its regression: nominal run, full plan, every branch."""
    from oracle.harness.branch import HarnessConfig, StudyContext
    from oracle.harness.study import freeze_plan, run_study

    ts = make_bisect_tasks(6, seed=1, root=tmp_path / "tasks", repos=1, releases=(1, 1),
                           commits=(4, 6))
    task = next(t for t in ts if json.loads(
        (tmp_path / "tasks" / t.task_id / "scenario.json").read_text())["regressions"])
    config = HarnessConfig(require_obs_determinism=False)
    ctx = StudyContext("bisect", {"granularity": "turn"}, {task.task_id: task}, config,
                       tmp_path / "study")
    plan = freeze_plan(ctx, [task], "full", seed=0, repetitions=1)
    ls = run_study(plan, tmp_path / "study")
    rec = ls.recovery
    assert set(zip(rec["restore_point"], rec["failure"], strict=True)) == {(0, 1), (0, 2), (1, 2)}
    assert rec["verified"].all() and not rec["quarantined"].any()
    assert ls.recovery_table(task.task_id).is_full()


def test_step_mode_runs_each_step_as_one_command_carrying_the_facts(tasks, tmp_path: Path) -> None:
    """How a runtime's program brain runs it: one command per step, facts on the command line."""
    import sys

    from oracle.agents.bisect import AGENT_SCRIPT
    from oracle.agents.program import STEP_END

    ts, scen = tasks
    task = next(t for t in ts if scen[t.task_id]["regressions"])
    ws = tmp_path / "ws"
    shutil.copytree(task.workspace_template, ws)
    spec = json.dumps({"task_id": task.task_id, "repo": task.repo, "params": task.params})
    facts: dict = {}
    n = task.params["releases"] + 2
    for k in range(1, n + 1):
        out = subprocess.run([sys.executable, str(AGENT_SCRIPT), "--workspace", str(ws),
                              "--task-json", spec, "--seed", "0", "step", "--step", str(k),
                              "--facts", json.dumps(facts)], capture_output=True, text=True,
                             check=True).stdout
        end = json.loads(out.strip().splitlines()[-1])
        assert end["type"] == STEP_END and end["step"] == k and end["last"] == (k == n)
        facts = end["facts"]
    assert BisectAgent().verify(task, ws)
    assert {f"culprit:v{r['release']}" for r in scen[task.task_id]["regressions"]} == set(facts)


def test_a_users_git_configuration_does_not_change_the_patches(tasks, tmp_path: Path, finish,
                                                               monkeypatch) -> None:
    """A global ``diff.noprefix`` or ``color.diff = always`` would make every patch the agent
    writes unappliable; the agent and the verifier read only the task's repositories' config."""
    ts, scen = tasks
    task = next(t for t in ts if scen[t.task_id]["regressions"])
    cfg = tmp_path / "gitconfig"
    cfg.write_text("[diff]\n\tnoprefix = true\n[color]\n\tdiff = always\n\tui = always\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(cfg))
    ws = tmp_path / "ws"
    shutil.copytree(task.workspace_template, ws)
    agent = BisectAgent()
    done = finish(agent.start(task, ws, 0, WallClock()))
    assert done.rc == 0 and agent.verify(task, ws)
