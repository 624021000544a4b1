"""Study plans: frozen cells, seeds, hash verification, designs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labelsets.definitions import pair_seed
from oracle.harness.plan import Plan, PlanError, full_table_plan, pilot_plan, tool_call_plan
from oracle.protocol import TaskSpec


def _tasks(n: int) -> list[TaskSpec]:
    return [TaskSpec(f"t{i}", f"repo{i % 2}", "fam", None, None, {"k": i}) for i in range(n)]


def _cells(plan: Plan) -> list[tuple]:
    return [(c["task_id"], c["candidate"], c["fallback"], c["failure"]) for c in plan.cells]


def test_pilot_design_early_and_late_cells() -> None:
    tasks = _tasks(3)
    plan = pilot_plan(tasks, {"t0": 2, "t1": 3, "t2": 4}, seed=1)
    assert _cells(plan) == [("t0", 1, 0, 2), ("t1", 1, 0, 2), ("t1", 2, 1, 3),
                            ("t2", 1, 0, 2), ("t2", 3, 2, 4)]
    strata = [c["stratum"] for c in plan.cells]
    assert strata == ["first", "first", "additional", "first", "additional"]


def test_tool_call_adjacent_and_full_table_designs() -> None:
    tasks = _tasks(1)
    tc = tool_call_plan(tasks, {"t0": 5}, seed=2)
    assert _cells(tc) == [("t0", t, t - 1, t + 1) for t in range(1, 5)]
    assert tc.config.granularity == "tool_call"
    strided = tool_call_plan(tasks, {"t0": 5}, seed=2, stride=2)
    assert [c["candidate"] for c in strided.cells] == [1, 3]
    pilot_like = tool_call_plan(tasks, {"t0": 5}, seed=2, mode="pilot")
    assert _cells(pilot_like) == [("t0", 1, 0, 2), ("t0", 4, 3, 5)]
    full = full_table_plan(tasks, {"t0": 3}, seed=2)
    got = {(c["restore_point"], c["failure"]) for c in full.cells}
    assert got == {(r, f) for f in range(1, 4) for r in range(f)}
    assert all(c["drive_from"] == c["failure"] - 1 for c in full.cells)
    fin = full_table_plan(tasks, {"t0": 3}, seed=2, include_final=True)
    assert {c["failure"] for c in fin.cells} == {1, 2, 3, 4}
    specs = full.branch_specs((1, 2))
    assert len(specs) == 2 * 6 and {s.role for s in specs} == {"table"}


def test_seeds_deterministic_distinct_and_order_from_seed() -> None:
    tasks = _tasks(4)
    nb = {t.task_id: 4 for t in tasks}
    a = pilot_plan(tasks, nb, seed=7)
    b = pilot_plan(tasks, nb, seed=7)
    c = pilot_plan(tasks, nb, seed=8)
    assert a.hash == b.hash and a.hash != c.hash
    seeds = [s for cell in a.cells for s in cell["seeds"]]
    assert len(set(seeds)) == len(seeds) == 3 * len(a.cells)
    assert a.cells[0]["seeds"][0] == pair_seed(7, a.cells[0]["cell_id"], 1)
    orders = [o for cell in a.cells for o in cell["cp_first"]]
    assert 0 < sum(orders) < len(orders)  # randomised, not constant
    specs = a.branch_specs((1, 2))
    for s in specs:
        cell = a.cell(s.cell_id)
        first_role = "cp" if cell["cp_first"][s.repetition - 1] else "skip"
        assert (s.order == 0) == (s.role == first_role)
        assert s.branch_id.endswith(f"/{s.order}")
        assert s.restore_point == (cell["candidate"] if s.role == "cp" else cell["fallback"])
        assert s.drive_from == cell["candidate"]
    third = a.branch_specs((3,), cells=[a.cells[0]["cell_id"]])
    assert len(third) == 2 and {s.seed for s in third} == {a.cells[0]["seeds"][2]}


def test_save_load_and_tamper_detection(tmp_path: Path) -> None:
    plan = pilot_plan(_tasks(2), {"t0": 3, "t1": 3}, seed=3,
                      nominal={"t0": {"trajectory_sha256": "ab"}})
    path = plan.save(tmp_path / "plan.json")
    loaded = Plan.load(path)
    assert loaded.hash == plan.hash and loaded.cells == plan.cells
    assert loaded.tasks == plan.tasks and loaded.config == plan.config
    doc = json.loads(path.read_text())
    assert doc["hash"] == plan.hash and "sign_change" in doc["third_repetition"]["rule"]
    doc["cells"][0]["failure"] = 3
    path.write_text(json.dumps(doc))
    with pytest.raises(PlanError, match="hash mismatch"):
        Plan.load(path)
    path.write_text("{not json")
    with pytest.raises(PlanError, match="plan.json"):
        Plan.load(path)


def test_check_nominal_refuses_a_different_nominal_run() -> None:
    plan = pilot_plan(_tasks(1), {"t0": 3}, seed=3,
                      nominal={"t0": {"trajectory_sha256": "ab"}})
    plan.check_nominal("t0", {"n_boundaries": 3, "trajectory_sha256": "ab"})
    with pytest.raises(PlanError, match="4 boundaries"):
        plan.check_nominal("t0", {"n_boundaries": 4, "trajectory_sha256": "ab"})
    with pytest.raises(PlanError, match="differs"):
        plan.check_nominal("t0", {"n_boundaries": 3, "trajectory_sha256": "cd"})


def test_bad_inputs_are_named() -> None:
    with pytest.raises(PlanError, match="lacks tasks"):
        pilot_plan(_tasks(2), {"t0": 3}, seed=1)
    with pytest.raises(PlanError, match="duplicate"):
        pilot_plan(_tasks(1) * 2, {"t0": 3}, seed=1)
    with pytest.raises(PlanError, match="mode"):
        tool_call_plan(_tasks(1), {"t0": 3}, seed=1, mode="every")


def test_sparse_design_draws_cells_by_stratum_within_the_budget(tmp_path: Path) -> None:
    from labelsets.recovery_model import SparseDesign, cell_stratum
    from oracle.harness.plan import sparse_plan

    tasks = _tasks(4)
    nb = {"t0": 3, "t1": 4, "t2": 5, "t3": 3}
    plan = sparse_plan(tasks, nb, seed=3, branches=12)
    assert plan.design == "sparse" and len(plan.cells) == 12 and plan.n_branches() == 12
    assert all(c["kind"] == "table" and c["stratum"] == cell_stratum(c["restore_point"], c["failure"])
               for c in plan.cells)
    pop = SparseDesign().population(nb)
    for s, pi in plan.design_params["inclusion"].items():  # pi_s = k_s / N_s, recorded per cell
        k = sum(c["stratum"] == s for c in plan.cells)
        assert pi == pytest.approx(k / len(pop[s])) and k > 0
        assert all(c["inclusion"] == pi for c in plan.cells if c["stratum"] == s)
    assert [c["cell_id"] for c in sparse_plan(tasks, nb, seed=3, branches=12).cells] == \
        [c["cell_id"] for c in plan.cells]  # one seed, one draw
    assert [c["cell_id"] for c in sparse_plan(tasks, nb, seed=4, branches=12).cells] != \
        [c["cell_id"] for c in plan.cells]
    per_task = sparse_plan(tasks, nb, seed=3, branches_per_task=3,
                           design=SparseDesign(repetitions=1))
    assert [c["cell_id"] for c in per_task.cells] == [c["cell_id"] for c in plan.cells]
    # frozen and hashed like every design: the design's parameters too
    path = plan.save(tmp_path / "sparse.json")
    again = Plan.load(path)
    assert again.hash == plan.hash and again.design_params == plan.design_params
    assert again.provenance()["sparse"]["inclusion"] == plan.design_params["inclusion"]
    doc = json.loads(path.read_text())
    doc["design_params"]["inclusion"]["long"] = 1.0
    path.write_text(json.dumps(doc))
    with pytest.raises(PlanError, match="hash"):
        Plan.load(path)
    # a drawn cell swapped for another cell of its stratum, the plan resealed with a
    # recomputed hash: refused, the cells are not the draw the recorded rule makes
    drawn = {(c["task_id"], c["restore_point"], c["failure"]) for c in plan.cells}
    other = next((t, 0, f) for t, b in nb.items() for f in range(1, b + 1)
                 if (t, 0, f) not in drawn)
    edited = Plan.load(plan.save(tmp_path / "edited.json"))
    first = next(i for i, c in enumerate(edited.cells) if c["stratum"] == "pristine")
    cid = f"{other[0]}:r0:f{other[2]}"  # a well-formed cell of the same stratum, its own seeds
    edited.cells[first] = {**edited.cells[first], "cell_id": cid, "task_id": other[0],
                           "failure": other[2], "drive_from": other[2] - 1,
                           "seeds": [pair_seed(3, cid, k) for k in range(1, plan.repetitions + 1)]}
    edited.hash = edited.compute_hash()
    with pytest.raises(PlanError, match="not the draw the sparse rule"):
        Plan.load(edited.save(tmp_path / "edited.json"))
    # a design with no parameters hashes as before (older plans stay valid)
    assert "design_params" not in full_table_plan(tasks, nb, seed=3).content()
    with pytest.raises(PlanError, match="exactly one"):
        sparse_plan(tasks, nb, seed=3, branches=12, branches_per_task=3)
    with pytest.raises(PlanError, match="exactly one"):
        sparse_plan(tasks, nb, seed=3)
    # adaptive cells: table cells of the plan's tasks not already held, the plan's seeds
    free = next((t, r, f) for t in nb for (r, f) in [(r, f) for f in range(1, nb[t] + 1)
                                                     for r in range(f)]
                if f"{t}:r{r}:f{f}" not in {c["cell_id"] for c in plan.cells})
    (spec,) = plan.adaptive_specs([free])
    assert spec.seed == pair_seed(3, f"{free[0]}:r{free[1]}:f{free[2]}", 1)
    with pytest.raises(PlanError, match="already in the plan"):
        plan.adaptive_specs([(plan.cells[0]["task_id"], plan.cells[0]["restore_point"],
                              plan.cells[0]["failure"])])
    with pytest.raises(PlanError, match="not a table cell"):
        plan.adaptive_specs([("t0", 3, 9)])
