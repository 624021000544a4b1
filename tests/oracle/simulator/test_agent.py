"""The simulated agent: on a virtual clock it costs exactly what the fast path says, alone and
under the harness; preserved state, kills, registry names, checkpoint costs, task counts."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from labelsets.definitions import pair_seed, table_cell_id
from oracle.agents import get_agent
from oracle.harness.branch import HarnessConfig
from oracle.harness.plan import pilot_plan
from oracle.harness.study import run_study
from oracle.protocol import RestorePoint, TaskSpec, VirtualClock
from oracle.simulator import (
    STATE_FILE,
    SimulatedAgent,
    branch_costs,
    simulate_label_set,
    task_specs,
)


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
                bseed = pair_seed(seed, table_cell_id(spec.task_id, r, f), k)  # the plan's seed
                # drive from f-1 into segment f and fail-stop at the first event
                d = f - 1
                agent._write_state(ws, agent.latent(spec), d, complete=False)
                tr, fa = snaps[d] if d else ([], {})
                drive = agent.resume(spec, RestorePoint(d, ws, tr, fa), ws, bseed, VirtualClock())
                for rep in drive.reports():
                    if rep.kind == "event":
                        drive.kill()
                        break
                assert drive.wait() != 0
                agent._write_state(ws, agent.latent(spec), r, complete=False)
                tr, fa = snaps[r] if r else ([], {})
                clock = VirtualClock()
                run = agent.resume(spec, RestorePoint(r, ws, tr, fa), ws, bseed, clock)
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


def test_runs_under_the_harness_with_fast_path_numbers(tmp_path: Path) -> None:
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
    # the fast path's pilot design is this very study: the plan's cells, pair seeds, branch
    # order and third repetitions, branch for branch and label for label
    fast = simulate_label_set("swe-pilot", n_repos=1, tasks_per_repo=4, design="pilot", seed=4)
    ids = {t.task_id for t in specs}
    cols = ["branch_id", "task_id", "restore_point", "failure", "repetition", "pair_id", "role",
            "cost_s", "restore_latency_s", "tokens", "tool_calls", "verified", "capped", "seed"]
    want = fast.recovery[fast.recovery["task_id"].isin(ids)][cols].reset_index(drop=True)
    got = ls.recovery[cols].sort_values("branch_id").reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want.sort_values("branch_id").reset_index(drop=True),
                                  check_exact=False, rtol=1e-9)
    assert (ls.recovery["repetition"] == 3).any()  # a third repetition was run, in both paths
    cols = ["cell_id", "repetition", "stratum", "branch_order", "j_cp", "j_skip", "advantage",
            "creation_s", "protected_work_s", "pair_seed", "verified_cp", "verified_skip"]
    want = fast.labels[fast.labels["task_id"].isin(ids)][cols].reset_index(drop=True)
    pd.testing.assert_frame_equal(ls.labels[cols].reset_index(drop=True), want,
                                  check_exact=False, rtol=1e-9)


def test_a_task_spec_without_its_params_is_refused() -> None:
    with pytest.raises(ValueError, match="params lacks"):
        SimulatedAgent().latent(TaskSpec("x", "r", "swe-pilot", None, None, {}))


def test_make_tasks_meets_the_count_or_says_which_sizes_would(tmp_path: Path) -> None:
    agent = SimulatedAgent("swe-pilot")
    tasks = agent.make_tasks(5, 0, tmp_path)
    assert [t.task_id for t in tasks] == [t.task_id for t in task_specs("swe-pilot", seed=0)[:5]]
    assert len(agent.make_tasks(50, 0, tmp_path, tasks_per_repo=7)) == 50
    with pytest.raises(ValueError, match=r"48 tasks asked for, the study holds 32 \(8 repositories x "
                                         r"4 tasks\); raise tasks_per_repo to at least 6"):
        agent.make_tasks(48, 0, tmp_path)
