"""Harness: nominal runs, branches, fail-stop, replay validation, durable fork points."""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from oracle.agents.scripted import ScriptedAgent, make_scripted_tasks
from oracle.harness.branch import (
    BranchSpec,
    HarnessConfig,
    StudyContext,
    finish_discards,
    run_branch,
    run_nominal,
)
from oracle.harness.study import run_nominal_job
from oracle.store.checkpoint import CheckpointStore, state_digest
from oracle.store.effects import ForkBarrierError

# ---------------------------------------------------------------------------------------
# scripted (real, wall clock) fixtures
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> StudyContext:
    root = tmp_path_factory.mktemp("scripted")
    tasks = make_scripted_tasks(1, 11, root / "tasks", n_steps=3, n_files=3, time_scale=0.2)
    ctx = StudyContext("scripted", {"granularity": "turn"}, {t.task_id: t for t in tasks},
                       HarnessConfig(), root / "study", "test-plan")
    rec = run_nominal_job(tasks[0].task_id, ctx, seed=5)
    ctx.nominal[tasks[0].task_id] = rec
    return ctx


def _spec(ctx: StudyContext, role: str, r: int, f: int, d: int, **kw: Any) -> BranchSpec:
    tid = next(iter(ctx.tasks))
    return BranchSpec(branch_id=kw.pop("branch_id", f"{tid}:{role}:r{r}:f{f}"), task_id=tid,
                      role=role, restore_point=r, failure=f, drive_from=d, repetition=1,
                      seed=kw.pop("seed", 3), **kw)


def test_nominal_checkpoints_every_boundary(scripted: StudyContext) -> None:
    rec = next(iter(scripted.nominal.values()))
    assert rec["verified"] and rec["exit_code"] == 0 and rec["warnings"] == []
    assert rec["n_boundaries"] == 3 == len(rec["checkpoints"])
    cps = rec["checkpoints"]
    assert [c["boundary"] for c in cps] == [1, 2, 3]
    assert [c["event_index"] for c in cps] == rec["boundary_events"]
    ts = [c["nominal_t_s"] for c in cps]
    assert ts == sorted(ts) and ts[-1] <= rec["nominal_s"]
    assert all(c["creation_s"] > 0 and c["size_bytes"] > 0 and c["restore_latency_s"] > 0 for c in cps)
    # every checkpoint restores to its recorded state
    store = CheckpointStore(scripted.store_dir)
    info = store.restore(cps[1]["checkpoint_id"], scripted.study_dir / "chk")
    assert state_digest(scripted.study_dir / "chk") == cps[1]["state_digest"]
    assert any(t.get("type") == "step_done" for t in info.transcript)
    assert "magic" in info.facts
    shutil.rmtree(scripted.study_dir / "chk")
    # the external config read is an observation; the test step's effect went through the log
    assert [o["source"] for o in rec["observations"]] == ["config"]
    assert rec["effects"] == 1
    outbox = scripted.study_dir / "nominal" / next(iter(scripted.tasks)) / "outbox.jsonl"
    assert len(outbox.read_text().splitlines()) == 1


def test_cp_and_skip_branches_fail_stop_and_rederive(scripted: StudyContext) -> None:
    cp = run_branch(_spec(scripted, "cp", 1, 2, 1, candidate=1, fallback=0), scripted)
    sk = run_branch(_spec(scripted, "skip", 0, 2, 1, candidate=1, fallback=0), scripted)
    nom = next(iter(scripted.nominal.values()))
    for rec in (cp, sk):
        assert rec["drive_struck"] and rec["drive_boundary"] == 1  # killed in segment 2
        assert rec["drive_exit_code"] == -9
        assert rec["verified"] and not rec["quarantined"], rec["quarantine_reason"]
        assert rec["cost_s"] > 0 and rec["restore_latency_s"] >= 0
        # the recovery's test step emitted one effect, attributed to this branch and drained
        assert rec["effects_emitted"] == 1 and rec["effects_undrained_at_kill"] == 0
    assert cp["state_digest"] == nom["checkpoints"][0]["state_digest"]
    assert sk["state_digest"] == nom["pristine_digest"]
    assert cp["cp_creation_s"] > 0 and sk["cp_creation_s"] is None
    # SKIP restarts from pristine: it must search again (more tool calls and tokens)
    assert sk["tool_calls"] > cp["tool_calls"] and sk["tokens"] > cp["tokens"]
    # every attempt's workspaces are cleaned up (removed in the background: wait for it)
    finish_discards()
    assert list((scripted.study_dir / "branches").iterdir()) == []


def test_observation_divergence_is_quarantined(scripted: StudyContext) -> None:
    task = next(iter(scripted.tasks.values()))
    cfg = Path(task.params["external_config"])
    orig = cfg.read_text()
    try:  # the "config service" changed since the nominal run
        cfg.write_text(json.dumps({"format": "CHANGED[{magic}]\n"}))
        rec = run_branch(_spec(scripted, "table", 1, 2, 1), scripted)
    finally:
        cfg.write_text(orig)
    assert rec["quarantined"] and "observation divergence in recovery" in rec["quarantine_reason"]
    m = rec["divergence"]["recovery_obs"]  # the divergence record: which read, what changed
    assert m["expected"][1] == m["got"][1] == "config" and m["expected"][2] != m["got"][2]
    ok = run_branch(_spec(scripted, "table", 1, 2, 1), scripted)
    assert not ok["quarantined"] and ok["obs_digest"] != rec["obs_digest"]
    lenient = dataclasses.replace(scripted, config=HarnessConfig(require_obs_determinism=False))
    try:
        cfg.write_text(json.dumps({"format": "CHANGED[{magic}]\n"}))
        rec2 = run_branch(_spec(lenient, "table", 1, 2, 1), lenient)
    finally:
        cfg.write_text(orig)
    assert not rec2["quarantined"] and rec2["obs_digest"] == rec["obs_digest"]


def test_restored_state_divergence_is_quarantined(scripted: StudyContext) -> None:
    task = next(iter(scripted.tasks.values()))
    extra = task.workspace_template / "late_addition.txt"
    extra.write_text("the pristine state changed after the nominal run\n")
    try:
        rec = run_branch(_spec(scripted, "skip", 0, 2, 1, candidate=1, fallback=0), scripted)
    finally:
        extra.unlink()
    assert rec["quarantined"]
    assert "restored state of restore point 0 diverges" in rec["quarantine_reason"]
    assert rec["divergence"]["restore_state"]["boundary"] == 0


def test_unpinned_nondeterministic_read_and_cap(tmp_path: Path) -> None:
    tasks = make_scripted_tasks(1, 4, tmp_path / "tasks", n_steps=2, n_files=2, time_scale=0.2)
    tasks[0].params["clock_read_step"] = 2
    ctx = StudyContext("scripted", {}, {tasks[0].task_id: tasks[0]}, HarnessConfig(),
                       tmp_path / "study", "p")
    ctx.nominal[tasks[0].task_id] = run_nominal_job(tasks[0].task_id, ctx, seed=1)
    rec = run_branch(_spec(ctx, "table", 1, 2, 1), ctx)
    assert rec["quarantined"] and "unpinned nondeterministic read: clock at step 2" in rec["quarantine_reason"]
    assert rec["verified"] and not rec["capped"]  # uncapped, the same agent completes
    # capped: killed once the cap passed (no wall-clock upper bound: a loaded machine may
    # delay the kill, never advance it), so the run is cut short and unverified
    capped_ctx = dataclasses.replace(ctx, config=HarnessConfig(branch_cap_s=0.05))
    rec = run_branch(_spec(capped_ctx, "table", 0, 1, 0, branch_id="capped"), capped_ctx)
    assert rec["capped"] and not rec["verified"] and rec["cost_s"] >= 0.05


def test_agent_output_that_is_not_json_is_reported_in_the_nominal_warnings(tmp_path: Path) -> None:
    tasks = make_scripted_tasks(1, 4, tmp_path / "tasks", n_steps=2, n_files=2, time_scale=0.05)
    chatty = tmp_path / "chatty-python"  # the agent program prints a banner before its JSON
    chatty.write_text(f"#!/bin/sh\necho 'agent v1.2 starting'\nexec {shlex.quote(sys.executable)} \"$@\"\n")
    chatty.chmod(0o755)
    store = CheckpointStore(tmp_path / "store")
    with pytest.warns(UserWarning, match="stdout line 1 is not a JSON object.*agent v1.2"):
        res = run_nominal(ScriptedAgent(python=str(chatty)), tasks[0], store=store,
                          work_dir=tmp_path / "nom", seed=1, config=HarnessConfig())
    assert res.verified and res.usage["non_json_lines"] == 1
    assert res.warnings == ["1 agent output line(s) were not JSON objects and were ignored"]


def test_fork_barrier_refuses_checkpoint_with_undrained_effects(tmp_path: Path) -> None:
    tasks = make_scripted_tasks(1, 4, tmp_path / "tasks", n_steps=3, n_files=2, time_scale=0.2)
    store = CheckpointStore(tmp_path / "store")
    with pytest.raises(ForkBarrierError, match="drain the log"):
        run_nominal(ScriptedAgent(), tasks[0], store=store, work_dir=tmp_path / "nom", seed=1,
                    config=HarnessConfig(drain_effects=False))


def test_tool_call_granularity_nominal(tmp_path: Path) -> None:
    (task,) = make_scripted_tasks(1, 6, tmp_path / "tasks", n_steps=3, n_files=3, time_scale=0.1)
    res = run_nominal(ScriptedAgent("tool_call"), task, store=CheckpointStore(tmp_path / "store"),
                      work_dir=tmp_path / "nom", seed=2, config=HarnessConfig(granularity="tool_call"))
    assert res.warnings == [] and res.verified
    assert res.boundary_events == res.trajectory.boundaries("tool_call")
    assert res.n_boundaries > 3  # finer than the three turns
    assert [c["step"] for c in res.checkpoints] == sorted(c["step"] for c in res.checkpoints)
