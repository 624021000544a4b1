"""Matched-budget evaluation: the Evaluator, its caches, and the setting it runs under."""

from __future__ import annotations

import numpy as np
import pytest

from ripplecp_policy.evaluation import Evaluator, evaluator_for
from ripplecp_policy.policy import (
    BoundaryObservation,
    Budget,
    PlacementPolicy,
    Role,
    Setting,
    SettingMismatchError,
)
from ripplecp_policy.pricing import optimal_placement, placement_metrics

# ---------------------------------------------------------------------------------------
# The runner
# ---------------------------------------------------------------------------------------


class Always(PlacementPolicy):
    uses_features = False

    def decide(self, obs: BoundaryObservation) -> bool:
        return True


class Recorder(PlacementPolicy):
    """Checkpoints at even boundaries and records every observation it is shown."""

    def __init__(self) -> None:
        self.seen: list[BoundaryObservation] = []

    def decide(self, obs: BoundaryObservation) -> bool:
        self.seen.append(obs)
        return obs.boundary % 2 == 0


@pytest.fixture(scope="module")
def label_set(make_label_set):
    return make_label_set(n_repos=3, tasks_per_repo=2, seed=3)


def test_runner_refuses_checkpoints_over_budget(label_set):
    ev = Evaluator(label_set)
    t = label_set.task_ids[0]
    n = ev.costs(t).n_boundaries
    pl = ev.run(Always(), t, Setting(Budget("count", 2)))
    assert pl.checkpoints == [1, 2]
    assert pl.refused == list(range(3, n + 1))
    assert pl.spend == 2
    tc = ev.costs(t)
    amount = float(tc.creation_s[1] + tc.creation_s[2]) + 1e-6
    pl = ev.run(Always(), t, Setting(Budget("seconds", amount)))
    assert tc.creation_s[pl.checkpoints].sum() <= amount
    assert 1 in pl.checkpoints and 2 in pl.checkpoints


def test_runner_observations_are_prefix_only(label_set):
    ev = Evaluator(label_set)
    t = label_set.task_ids[1]
    rec = Recorder()
    pl = ev.run(rec, t, Setting(Budget("count", 5)))
    tc = ev.costs(t)
    assert [o.boundary for o in rec.seen] == list(range(1, tc.n_boundaries + 1))
    for o in rec.seen:
        assert o.history == [b for b in pl.checkpoints if b < o.boundary]
        assert o.event_index == tc.event_index[o.boundary]
        # the extractor saw exactly the events up to the boundary
        assert o.features["context__events_seen"] == o.event_index + 1
        assert o.features["context__checkpoints"] == len(o.history)


def test_feature_cache_equals_incremental_walk(label_set):
    cached, plain = Evaluator(label_set), Evaluator(label_set, cache_features=False)
    for t in label_set.task_ids[:3]:
        a, b = Recorder(), Recorder()
        cached.run(a, t, Setting(Budget("count", 3)))
        plain.run(b, t, Setting(Budget("count", 3)))
        for x, y in zip(a.seen, b.seen, strict=True):
            assert x.features.keys() == y.features.keys()
            for k in x.features:
                assert x.features[k] == pytest.approx(y.features[k], nan_ok=True), k


def test_granularity_mismatch_is_an_error(label_set):
    with pytest.raises(ValueError, match="granularity|boundaries"):
        evaluator_for(label_set).run(Always(), label_set.task_ids[0], Setting(Budget("count", 1)),
                                     granularity="tool_call")


class Offline(PlacementPolicy):
    role = Role.OFFLINE

    def place(self, costs, budget):
        return list(range(costs.n_boundaries, 0, -1))  # asks for everything, latest first


def test_offline_placements_are_capped_in_trajectory_order(label_set):
    pl = evaluator_for(label_set).run(Offline(), label_set.task_ids[0], Setting(Budget("count", 2)))
    assert pl.checkpoints == [1, 2]


def test_evaluate_reports_regret_against_optimum(label_set):
    ev = Evaluator(label_set)
    df = ev.evaluate(Always(), label_set.task_ids, Setting(Budget("count", 1)))
    assert (df["regret_s"] >= -1e-9).all()
    for row in df.itertuples():
        _, opt = optimal_placement(ev.costs(row.task_id), Budget("count", 1))
        assert row.objective_s - opt == pytest.approx(row.regret_s)


# ---------------------------------------------------------------------------------------
# The setting
# ---------------------------------------------------------------------------------------


def test_a_policy_is_evaluated_only_under_the_setting_it_was_fitted_under(label_set):
    ev = Evaluator(label_set)
    t = label_set.task_ids[0]
    duration = Setting(Budget("count", 2), hazard="duration")
    pol = Always().fit(label_set, duration)
    assert pol.setting_ == duration
    assert ev.run(pol, t, duration).checkpoints == [1, 2]
    with pytest.raises(SettingMismatchError, match="fitted under 2ckpt, hazard duration"):
        ev.run(pol, t, Setting(Budget("count", 2)))
    with pytest.raises(SettingMismatchError):
        ev.run(pol, t, Setting(Budget("count", 1), hazard="duration"))
    # fitted for no budget in particular: any budget, but still only its failure model
    anywhere = Always().fit(label_set, Setting(hazard="duration"))
    assert ev.run(anywhere, t, Setting(Budget("count", 1), hazard="duration")).checkpoints == [1]
    with pytest.raises(SettingMismatchError):
        ev.run(anywhere, t, Setting(Budget("count", 1)))
    with pytest.raises(ValueError, match="names no budget"):
        ev.run(Always(), t, Setting())


def test_metrics_are_expectations_under_the_setting_hazard(label_set):
    ev = Evaluator(label_set)
    t = label_set.task_ids[2]
    rows = {h: ev.evaluate(Always(), [t], Setting(Budget("count", 1), hazard=h)).iloc[0]
            for h in ("uniform", "duration")}
    for h, row in rows.items():
        want = placement_metrics(ev.costs(t, h), [1])
        assert row["objective_s"] == pytest.approx(want["objective_s"])
        _, opt = optimal_placement(ev.costs(t, h), Budget("count", 1))
        assert row["regret_s"] == pytest.approx(want["objective_s"] - opt)
    assert rows["uniform"]["objective_s"] != pytest.approx(rows["duration"]["objective_s"])


def test_crossfitted_limit_is_chosen_on_one_half_and_scored_on_the_other(make_label_set):
    """The honest limit: the optimum chosen on one half of the repetitions and scored on the
    other, both directions averaged; with one repetition it says it is in-sample."""
    from ripplecp_policy.pricing import TaskCosts, optimal_placement, placement_objective

    ls = make_label_set(n_repos=2, tasks_per_repo=2, repetitions=2, seed=5)
    ev = Evaluator(ls)
    budget = Budget("count", 1)
    t = ls.task_ids[0]
    rec = ls.recovery[ls.recovery["task_id"] == t]
    cps = ls.checkpoints[ls.checkpoints["task_id"] == t]
    nominal = float(ls.tasks.set_index("task_id").at[t, "nominal_s"])
    reps = sorted(rec["repetition"].unique())
    halves = [TaskCosts.build(t, rec[rec["repetition"] == r], cps, "uniform", nominal) for r in reps]
    (pa, _), (pb, _) = (optimal_placement(h, budget) for h in halves)
    want = 0.5 * (placement_objective(halves[1], pa) + placement_objective(halves[0], pb))
    limit, cross_fitted = ev.crossfit_optimum(t, budget)
    assert cross_fitted and limit == pytest.approx(want)
    # over the tasks, the honest limit is no better than the in-sample optimum on average
    ins = np.mean([ev.optimum(x, budget)[1] for x in ls.task_ids])
    xf = np.mean([ev.crossfit_optimum(x, budget)[0] for x in ls.task_ids])
    assert xf >= ins - 1e-9
    # scored rows carry it: regret against the cross-fitted limit
    row = ev.evaluate(Always(), [t], Setting(budget)).iloc[0]
    assert row["xfit_optimum_objective_s"] == pytest.approx(limit)
    assert row["xfit_regret_s"] == pytest.approx(row["objective_s"] - limit)
    assert row["limit_in_sample"] == 0.0

    one = make_label_set(n_repos=2, tasks_per_repo=1, repetitions=1, seed=5)
    ev1 = Evaluator(one)
    lim1, cf1 = ev1.crossfit_optimum(one.task_ids[0], budget)
    assert not cf1 and lim1 == pytest.approx(ev1.optimum(one.task_ids[0], budget)[1])
    assert ev1.evaluate(Always(), one.task_ids[:1], Setting(budget)).iloc[0]["limit_in_sample"] == 1.0


def test_checkpoint_cost_is_an_estimate_known_before_the_checkpoint(label_set):
    """obs.checkpoint_cost is what a runtime could know: before any checkpoint of the task,
    the mean charge of the other repositories' checkpoints; after, the mean realised charge
    of this task's earlier checkpoints — never the realised cost of the one not yet taken."""
    ev = Evaluator(label_set)
    t = label_set.task_ids[0]
    budget = Budget("seconds", 1e6)
    rec = Recorder()
    ev.run(rec, t, Setting(budget))
    cps = label_set.checkpoints
    repo = ev.repo_of(t)
    others = cps[cps["task_id"].map(ev.repo_of) != repo]["creation_s"].mean()
    tc = ev.costs(t)
    assert rec.seen[0].checkpoint_cost == pytest.approx(others)
    assert rec.seen[0].checkpoint_cost != pytest.approx(tc.creation_s[1])
    # Recorder checkpoints at even boundaries: at boundary 3 the estimate is boundary 2's cost
    assert rec.seen[2].checkpoint_cost == pytest.approx(tc.creation_s[2])
    # count budgets charge exactly 1
    rec1 = Recorder()
    ev.run(rec1, t, Setting(Budget("count", 2)))
    assert all(o.checkpoint_cost == 1.0 for o in rec1.seen)


def test_a_sparse_label_set_is_priced_from_its_completion_everywhere() -> None:
    """A sparse set: every placement priced (the completed table), executed cells of
    certainty keep their measurement, the optimum, the cross-fitted limit (with two
    repetitions) and the table-derived training targets all read the completion."""
    from labelsets.recovery_model import SparseDesign, subsample
    from oracle.simulator import simulate_label_set
    from ripplecp_policy.datasets import advantage_table

    full = simulate_label_set("dependency-resolution", n_repos=3, tasks_per_repo=2, seed=1)
    sp = subsample(full, 40, seed=0, design=SparseDesign(repetitions=2, shares=(1.0, 0.0, 0.0)))
    ev = Evaluator(sp)
    assert ev.sparse and not Evaluator(full).sparse
    budget = Budget("count", 1)
    comp = ev.completion().cells
    for tid in sp.task_ids:
        tc = ev.costs(tid)
        assert tc.is_full() and list(tc.failures) == list(range(1, tc.n_boundaries + 1))
        place, value = ev.optimum(tid, budget)
        assert len(place) <= 1 and np.isfinite(value)
        limit, cross = ev.crossfit_optimum(tid, budget)
        assert cross and np.isfinite(limit)
        # pristine cells were drawn with certainty here: their price is the measurement
        c = comp[(comp["task_id"] == tid) & comp["executed"] & (comp["r"] == 0)]
        assert len(c) == tc.n_boundaries and (c["pi"] == 1.0).all()
        assert np.allclose(tc.J[c["r"].to_numpy(), c["f"].to_numpy() - 1], c["y"].to_numpy())
    table = advantage_table(sp)
    assert len(table.frame) and set(table.frame["target_source"]) == {"recovery_table"}


def test_a_one_repetition_sparse_limit_is_chosen_on_the_other_repositories_model() -> None:
    """A sparse set with one repetition has no halves; its in-sample optimum picks the
    cells whose doubly-robust prices came out low by chance (25 % of the branches of a
    simulated family: 20-30 % below the full table's optimum). Its limit is instead chosen
    on the recovery model fitted on the other repositories and scored on the task's own
    prices: the design makes those unbiased for any placement the model picks, so the
    limit estimates what the placement really costs (within noise of its full-table cost)
    and is no better than the full table's own limit on average."""
    from labelsets.recovery_model import subsample
    from oracle.simulator import simulate_label_set
    from ripplecp_policy.pricing import TaskCosts, optimal_placement, placement_objective

    full = simulate_label_set("dependency-resolution", seed=0)
    ef = Evaluator(full)
    n_cells = len(full.recovery[full.recovery["role"] == "table"]
                  .groupby(["task_id", "restore_point", "failure"])) // 4
    sp = subsample(full, n_cells, seed=0)
    ev = Evaluator(sp)
    budget = Budget("count", 1)
    comp = ev.completion()
    limits, chosen_truth, ins, full_limit = [], [], [], []
    for t in sp.task_ids:
        c = comp.cells[comp.cells["task_id"] == t]
        model_tc = TaskCosts.build(t, comp.task(t).assign(cost_s=c["m"].to_numpy(float)),
                                   ev._rows("checkpoints", t), "uniform", ev._nominal[t])
        chosen, _ = optimal_placement(model_tc, budget)
        limit, cross = ev.crossfit_optimum(t, budget)
        assert cross and limit == pytest.approx(placement_objective(ev.costs(t), chosen))
        limits.append(limit)
        chosen_truth.append(placement_objective(ef.costs(t), chosen))
        ins.append(ev.optimum(t, budget)[1])
        full_limit.append(ef.crossfit_optimum(t, budget)[0])
    assert np.mean(ins) < 0.9 * np.mean(full_limit)  # the in-sample optimum: far too good
    assert abs(np.mean(limits) - np.mean(chosen_truth)) < 0.1 * np.mean(chosen_truth)
    assert np.mean(limits) > 0.97 * np.mean(full_limit)
    row = ev.evaluate(Always(), sp.task_ids[:1], Setting(budget)).iloc[0]
    assert row["limit_in_sample"] == 0.0 and row["limit_model_chosen"] == 1.0
