"""The simulated agent: determinism, agent == fast path, harness runs, schema, calibration."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from features.schema import Trajectory, read_parquet, write_parquet
from oracle.agents import get_agent
from oracle.agents.protocol import RestorePoint, VirtualClock
from oracle.simulator import (
    STATE_FILE,
    SimulatedAgent,
    branch_costs,
    branch_seed,
    family_tasks,
    simulate_label_set,
    task_specs,
)
from oracle.tables import LabelSet
from ripplecp_policy import stats

# ---------------------------------------------------------------------------------------
# determinism
# ---------------------------------------------------------------------------------------


def test_same_seed_same_tables_different_seed_different() -> None:
    a = simulate_label_set("swe-pilot", design="full", repetitions=2, seed=11)
    b = simulate_label_set("swe-pilot", design="full", repetitions=2, seed=11)
    c = simulate_label_set("swe-pilot", design="full", repetitions=2, seed=12)
    assert a.content_hash() == b.content_hash()
    pd.testing.assert_frame_equal(a.labels, b.labels)
    assert a.content_hash() != c.content_hash()
    assert not np.allclose(a.recovery["cost_s"].to_numpy()[:20], c.recovery["cost_s"].to_numpy()[:20])


def test_editing_a_returned_trajectory_never_changes_a_later_study() -> None:
    a = simulate_label_set("swe-pilot", n_repos=1, tasks_per_repo=2, seed=5)
    tid = a.task_ids[0]
    pristine = copy.deepcopy(a.trajectories[tid])
    t = a.trajectories[tid]
    t.events[0].extra["edited"] = True  # a caller annotating or trimming its copy
    t.events[1].paths_read.append("/edited")
    t.meta["edited"] = True
    t.events.pop()
    b = simulate_label_set("swe-pilot", n_repos=1, tasks_per_repo=2, seed=5)
    assert b.trajectories[tid] == pristine
    assert b.trajectories[tid].events[0] is not t.events[0]


def test_repetitions_differ_within_a_cell() -> None:
    ls = simulate_label_set("swe-pilot", design="full", repetitions=2, seed=3)
    wide = ls.recovery.pivot_table(index=["task_id", "restore_point", "failure"], columns="repetition",
                                   values="cost_s")
    assert (wide[1] != wide[2]).all()  # within-cell noise: every cell's repetitions differ


# ---------------------------------------------------------------------------------------
# (a) the agent on a virtual clock == (b) the fast path
# ---------------------------------------------------------------------------------------


def _nominal(agent: SimulatedAgent, spec, ws: Path) -> tuple[dict, list]:
    clock = VirtualClock()
    run = agent.start(spec, ws, 0, clock)
    snaps: dict[int, tuple] = {}
    events = []
    for rep in run.reports():
        if rep.kind == "boundary":
            snaps[rep.boundary] = run.preserved()
        else:
            events.append(rep.event)
    assert run.wait() == 0
    assert clock.now() == pytest.approx(agent.latent(spec).nominal_s, rel=1e-12)
    return snaps, events


@pytest.mark.parametrize("granularity", ["turn", "tool_call"])
def test_agent_cost_equals_fast_path_cost(tmp_path: Path, granularity: str) -> None:
    seed = 7
    specs = task_specs("swe-pilot", n_repos=1, tasks_per_repo=4, seed=seed, granularity=granularity)
    design = "full" if granularity == "turn" else "tool_call"
    ls = simulate_label_set("swe-pilot", n_repos=1, tasks_per_repo=4, design=design, repetitions=2, seed=seed)
    rec = ls.recovery.set_index(["task_id", "restore_point", "failure", "repetition"])
    agent = SimulatedAgent("swe-pilot")
    checked = 0
    for spec in specs[3:] if granularity == "turn" else specs[:1]:
        ws = tmp_path / spec.task_id
        ws.mkdir()
        snaps, _ = _nominal(agent, spec, ws)
        B = len(snaps)
        cells = [(r, f) for f in range(1, B + 1) for r in range(f)]
        if granularity == "tool_call":
            cells = cells[:: max(1, len(cells) // 12)]
        for r, f in cells:
            for k in (1, 2):
                # drive from f-1 into segment f and fail-stop at the first event
                d = f - 1
                agent._write_state(ws, agent.latent(spec), d, complete=False)
                tr, fa = snaps[d] if d else ([], {})
                drive = agent.resume(spec, RestorePoint(d, ws, tr, fa), ws, branch_seed(seed, k), VirtualClock())
                for rep in drive.reports():
                    if rep.kind == "event":
                        drive.kill()
                        break
                assert drive.wait() != 0
                agent._write_state(ws, agent.latent(spec), r, complete=False)
                tr, fa = snaps[r] if r else ([], {})
                clock = VirtualClock()
                run = agent.resume(spec, RestorePoint(r, ws, tr, fa), ws, branch_seed(seed, k), clock)
                bounds = [rep.boundary for rep in run.reports() if rep.kind == "boundary"]
                row = rec.loc[(spec.task_id, r, f, k)]
                assert clock.now() == pytest.approx(float(row["cost_s"]), rel=1e-9)
                assert run.usage["tokens"] == int(row["tokens"])
                assert run.usage["tool_calls"] == int(row["tool_calls"])
                assert bounds == list(range(r + 1, B + 1))
                assert agent.verify(spec, ws) == bool(ls.tasks.set_index("task_id").at[spec.task_id, "verified"])
                checked += 1
    assert checked >= 20


def test_resume_receives_preserved_state_not_lost_events(tmp_path: Path) -> None:
    agent = SimulatedAgent("long-horizon")
    (spec,) = task_specs("long-horizon", n_repos=1, tasks_per_repo=1, seed=2)
    snaps, events = _nominal(agent, spec, tmp_path)
    tr, facts = snaps[2]
    assert len(tr) == sum(1 for e in events if e.step <= 2)
    lt = agent.latent(spec)
    n_facts = int(sum(lt.fact_scale[: lt.positions("turn")[2]] > 0))
    assert len(facts) == n_facts
    # a kill during segment 4, then a resume from boundary 2: facts of step 3 must be rediscovered
    agent._write_state(tmp_path, lt, 3, complete=False)
    drive = agent.resume(spec, RestorePoint(3, tmp_path, *snaps[3]), tmp_path, 5, VirtualClock())
    next(r for r in drive.reports() if r.kind == "event")
    drive.kill()
    agent._write_state(tmp_path, lt, 2, complete=False)
    run = agent.resume(spec, RestorePoint(2, tmp_path, tr, facts), tmp_path, 5, VirtualClock())
    list(run.reports())
    c = branch_costs(lt, [2], [4], [5])
    step3_facts = int(sum(lt.fact_scale[lt.positions("turn")[2]: lt.positions("turn")[3]] > 0))
    assert int(c["n_facts"][0]) == step3_facts
    _, facts_after = run.preserved()
    assert len(facts_after) >= len(facts) + step3_facts


def test_kill_abandons_and_wrong_workspace_is_refused(tmp_path: Path) -> None:
    agent = SimulatedAgent("swe-pilot")
    spec = task_specs("swe-pilot", n_repos=1, tasks_per_repo=1, seed=0)[0]
    clock = VirtualClock()
    run = agent.start(spec, tmp_path, 0, clock)
    it = run.reports()
    while next(it).kind != "boundary":
        pass
    run.kill()
    t = clock.now()
    assert list(it) == []
    assert clock.now() == t and run.wait() == -9
    assert not agent.verify(spec, tmp_path)  # never completed
    state = json.loads((tmp_path / STATE_FILE).read_text())
    assert state["boundary"] == 1 and not state["complete"]
    with pytest.raises(ValueError, match="restored workspace holds boundary 1"):
        agent.resume(spec, RestorePoint(2, tmp_path, [], {}), tmp_path, 0, VirtualClock())


def test_registered_and_checkpoint_costs(tmp_path: Path) -> None:
    agent = get_agent("sim:multi-stage-build")
    assert agent.name == "sim:multi-stage-build"
    assert get_agent("simulator", family="long-horizon").name == "sim:long-horizon"
    spec = task_specs("multi-stage-build", n_repos=1, tasks_per_repo=1, seed=0)[0]
    lt = agent.latent(spec)
    sizes = [agent.simulated_checkpoint_cost(spec, b, tmp_path)[1] for b in range(1, lt.n_steps + 1)]
    assert sizes == sorted(sizes) and sizes[-1] > sizes[0]  # artifacts accumulate
    assert agent.simulated_restore_latency(spec, 0) > 0
    with pytest.raises(ValueError, match="boundary 0 outside 1"):
        agent.simulated_checkpoint_cost(spec, 0, tmp_path)


# ---------------------------------------------------------------------------------------
# under the harness, exactly like a real agent
# ---------------------------------------------------------------------------------------


def test_runs_under_the_harness_with_fast_path_numbers(tmp_path: Path) -> None:
    from oracle.harness import HarnessConfig
    from oracle.plan import pilot_plan
    from oracle.study import run_study

    specs = task_specs("swe-pilot", n_repos=1, tasks_per_repo=4, seed=4)[2:]
    agent = SimulatedAgent("swe-pilot")
    n_b = {t.task_id: len(agent.latent(t).positions("turn")) - 1 for t in specs}
    plan = pilot_plan(specs, n_b, seed=4, agent="simulator", agent_options={"family": "swe-pilot"},
                      config=HarnessConfig(granularity="turn", clock="virtual"))
    ls = run_study(plan, tmp_path / "study")
    assert len(ls.recovery) >= 8 and not ls.recovery["quarantined"].any()
    for row in ls.recovery.itertuples():
        lt = agent.latent(next(t for t in specs if t.task_id == row.task_id))
        c = branch_costs(lt, [row.restore_point], [row.failure], [row.seed])
        assert row.cost_s == pytest.approx(float(c["cost_s"][0]), rel=1e-9)
        assert row.tokens == int(c["tokens"][0])
    # the nominal trajectories the harness recorded are the simulator's
    for tid, traj in ls.trajectories.items():
        lt = agent.latent(next(t for t in specs if t.task_id == tid))
        assert [e.command for e in traj.events] == [e.command for e in lt.trajectory.events]
        assert traj.boundaries("turn") == lt.trajectory.boundaries("turn")
    cps = ls.checkpoints.set_index(["task_id", "boundary"])
    lt = agent.latent(specs[0])
    creation, size, _ = lt.checkpoint_costs("turn")
    assert cps.at[(lt.task_id, 1), "creation_s"] == pytest.approx(creation[1])
    assert cps.at[(lt.task_id, 1), "size_bytes"] == size[1]


# ---------------------------------------------------------------------------------------
# schema conformance of everything emitted
# ---------------------------------------------------------------------------------------

_HIDDEN = ("dead_end", "dead end", "fact_scale", "rediscovery", "redo_s", "decision", "latent")


@pytest.mark.parametrize("family", ["swe-pilot", "dependency-resolution", "multi-stage-build", "long-horizon"])
def test_emitted_trajectories_conform_and_hide_latent_state(tmp_path: Path, family: str) -> None:
    tasks = family_tasks(family, tasks_per_repo=1, seed=5)
    trajs = [lt.trajectory for lt in tasks]
    for lt, t in zip(tasks, trajs, strict=True):
        t.validate()
        assert len(t.boundaries("turn")) == lt.n_steps
        assert len(t.boundaries("tool_call")) == lt.n_units
        assert set(t.meta) <= {"family", "simulated", "seed"}
        for e in t.events:
            assert e.extra == {}
            blob = json.dumps([e.command, e.text, e.argv, e.paths_read, e.paths_written]).lower()
            assert not any(h in blob for h in _HIDDEN), blob
            assert e.duration is not None and e.duration >= 0
    write_parquet(trajs, tmp_path / "t.parquet")
    back = read_parquet(tmp_path / "t.parquet")
    assert [len(t.events) for t in back] == [len(t.events) for t in trajs]
    assert back[0].events[3] == trajs[0].events[3]


@pytest.mark.parametrize("design", ["full", "pilot", "tool_call"])
def test_label_set_round_trip(tmp_path: Path, design: str) -> None:
    ls = simulate_label_set("dependency-resolution", n_repos=1, tasks_per_repo=2, design=design, seed=1)
    assert isinstance(ls, LabelSet)
    back = LabelSet.load(ls.save(tmp_path / design))
    assert back.content_hash() == ls.content_hash()
    assert all(isinstance(t, Trajectory) for t in back.trajectories.values())
    lab = ls.labels
    assert np.allclose(lab["advantage"], lab["j_skip"] - lab["j_cp"])
    assert (lab["stratum"] == np.where(lab["fallback"] == 0, "first", "additional")).all()
    rt = ls.recovery_table(ls.task_ids[0])
    if design != "pilot":
        assert rt.is_full()
        one = lab[(lab["task_id"] == ls.task_ids[0]) & (lab["repetition"] == 1)].iloc[-1]
        j = ls.recovery.set_index(["task_id", "restore_point", "failure", "repetition"])["cost_s"]
        assert one["j_skip"] == j[(one["task_id"], one["fallback"], one["failure"], 1)]


def test_bad_inputs_name_the_problem() -> None:
    lt = family_tasks("swe-pilot", n_repos=1, tasks_per_repo=1, seed=0)[0]
    with pytest.raises(ValueError, match=r"need 0 <= r < f"):
        branch_costs(lt, [2], [2], [0])
    with pytest.raises(ValueError, match="design must be"):
        simulate_label_set("swe-pilot", design="nope")  # type: ignore[arg-type]
    with pytest.raises(KeyError, match="unknown workload family"):
        simulate_label_set("no-such-family")
    with pytest.raises(ValueError, match="n_repos"):
        family_tasks("swe-pilot", n_repos=9)
    with pytest.raises(ValueError, match="params lacks"):
        from oracle.agents.protocol import TaskSpec
        SimulatedAgent().latent(TaskSpec("x", "r", "swe-pilot", None, None, {}))


# ---------------------------------------------------------------------------------------
# calibration at fixed seeds (fast path; the harness path is experiments.calibrate)
# ---------------------------------------------------------------------------------------

PILOT = stats.load_pilot_tables()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_swe_pilot_calibration_within_tolerance(seed: int) -> None:
    ls = simulate_label_set("swe-pilot", design="pilot", repetitions=2, seed=seed)
    t1 = stats.marginal_value(ls.labels, n_resamples=2000)
    pub = PILOT["table1_marginal_value_verified_10_tasks"]
    for stratum, key in (("first", "first_checkpoint_vs_none"), ("additional", "additional_one_step_later"),
                         ("pooled", "pooled")):
        lo, hi = pub[key]["ci95"]
        assert lo <= t1.at[stratum, "advantage_s"] <= hi, (stratum, t1.at[stratum, "advantage_s"])
    rec = ls.recovery.groupby("restore_point")["cost_s"].mean()
    for depth, row in enumerate(PILOT["table5_recovery_by_restore_depth"]):
        assert abs(rec[depth] / row["cost_s"] - 1) <= 0.15, (depth, rec[depth])
    secs = pd.DataFrame([(e.step, e.duration) for t in ls.trajectories.values() for e in t.events],
                        columns=["step", "s"]).groupby("step")["s"].sum()
    for row in PILOT["table4_nominal_work_by_step"]:
        assert abs(secs[row["step"]] / secs.sum() - row["share"]) <= 0.05
    assert int(ls.tasks["verified"].sum()) == 10 and len(ls.tasks) == 12
    assert len(ls.labels) >= 48  # 24 cells x 2 repetitions, plus thirds for sign-unstable cells
