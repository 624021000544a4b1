"""Q-Ripple (fitted-Q iteration): measured-cost targets, convergence, value validation."""

from __future__ import annotations

import numpy as np
import pytest

from ripplecp_policy.datasets import first_boundary_placement, replays, run_policy
from ripplecp_policy.learned import FittedQPolicy, value_error_summary
from ripplecp_policy.policy import Budget, Setting, SettingMismatchError
from ripplecp_policy.pricing import optimal_placement
from ripplecp_policy.splits import leave_one_repo_out

BUDGET = Budget("count", 1)
SETTING = Setting(BUDGET)


@pytest.fixture(scope="module")
def late_value(toy_label_set):
    """A workload where the first step is cheap to redo and later ones are not."""
    return toy_label_set(n_repos=3, tasks_per_repo=2, seed=2, first_conv=0.02, later_conv=0.9)


@pytest.fixture(scope="module")
def fitted(late_value):
    f = leave_one_repo_out(late_value)[0]
    train = late_value.subset(f.train_tasks)
    pol = FittedQPolicy(n_estimators=30, min_samples_leaf=1, n_behaviour_seeds=4).fit(train, SETTING)
    return f, train, late_value.subset(f.test_tasks), pol


def test_transition_costs_come_from_the_measured_table(fitted) -> None:
    _, train, _, pol = fitted
    task = next(iter(replays(train).values()))
    tr = pol.transitions([task], BUDGET)
    tc = task.costs
    surv = tc.survival()
    k2 = list(tc.failures).index(2)
    h = tc.weights[k2] / surv[1]
    # the first state (boundary 1, nothing taken): skip pays the pristine recovery J(0, 2),
    # checkpoint pays creation plus J(1, 2), each weighted by the hazard of failing next
    skip = h * (tc.J[0, k2] + tc.restore_latency[0, k2])
    cp = tc.creation_s[1] + h * (tc.J[1, k2] + tc.restore_latency[1, k2])
    assert tr["cost"][0] == pytest.approx(skip) and tr["action"][0] == 0
    assert tr["cost"][1] == pytest.approx(cp) and tr["action"][1] == 1
    assert tr["cont"][0] == pytest.approx(surv[2] / surv[1])
    # after the only budgeted checkpoint, checkpointing is infeasible at the next state
    assert not tr["next_feasible"][1] and tr["next_feasible"][0]


def test_convergence_is_logged_and_contracts(fitted) -> None:
    _, _, _, pol = fitted
    conv = pol.convergence_
    assert list(conv.columns) == ["iteration", "max_abs_delta", "mean_target"]
    assert len(conv) >= 2
    assert conv["max_abs_delta"].iloc[-1] < conv["max_abs_delta"].iloc[0]


def test_fqi_learns_late_placement_on_training_tasks(fitted) -> None:
    """Where only later checkpoints pay, Q-Ripple moves the budget off the first boundary."""
    _, train, _, pol = fitted
    gaps, fb_gaps = [], []
    for task in replays(train).values():
        place = run_policy(pol, task, BUDGET)
        assert len(place) <= 1
        _, opt = optimal_placement(task.costs, BUDGET)
        gaps.append(task.expected_cost(place) - opt)
        fb_gaps.append(task.expected_cost(first_boundary_placement(task, BUDGET)) - opt)
    assert np.mean(gaps) < np.mean(fb_gaps)


def test_value_report_on_held_out_tasks(fitted) -> None:
    f, _, test, pol = fitted
    rep = pol.value_report(test, SETTING)
    assert set(rep["repo"]) == {f.held_out}
    np.testing.assert_allclose(rep["error_s"], rep["predicted_s"] - rep["executed_s"])
    assert np.isfinite(rep[["predicted_s", "executed_s"]].to_numpy()).all()
    s = value_error_summary(rep)
    assert s["value_mae_s"] >= abs(s["value_bias_s"])
    m = pol.heldout_metrics(test)  # what training reports per fold
    assert m["value_mae_s"] == pytest.approx(s["value_mae_s"]) and m["fqi_iterations"] == len(pol.convergence_)


def test_fqi_feature_importances_cover_state_and_action(fitted) -> None:
    _, _, _, pol = fitted
    imp = pol.feature_importances()
    assert imp.index[-2:].tolist() == ["fqi__remaining", "fqi__action"]
    assert imp.sum() == pytest.approx(1.0) and imp["fqi__action"] > 0


def test_fqi_stages_see_training_repos_only(fitted) -> None:
    f, _, _, pol = fitted
    pol.audit_.check([f.held_out])
    assert set(pol.audit_.stages) == {"fqi_transitions", "fqi_targets"}
    assert pol.audit_.seen() == set(f.train_repos)


@pytest.mark.parametrize("regressor", ["extratrees", "xgboost"])
def test_fqi_is_deterministic(late_value, regressor) -> None:
    train = late_value.subset(late_value.task_ids[:4])
    a = FittedQPolicy(regressor=regressor, n_estimators=10, n_behaviour_seeds=2, random_state=4).fit(train, SETTING)
    b = FittedQPolicy(regressor=regressor, n_estimators=10, n_behaviour_seeds=2, random_state=4).fit(train, SETTING)
    task = next(iter(replays(train).values()))
    obs = task.observation(2, [], BUDGET)
    assert a.q_values(obs) == b.q_values(obs)
    assert a.convergence_.equals(b.convergence_)


def test_fqi_refuses_tables_it_cannot_price(late_value) -> None:
    sparse = late_value.recovery[late_value.recovery["restore_point"] != 0]
    bad = type(late_value)(late_value.tasks, late_value.checkpoints, sparse, late_value.labels,
                           late_value.trajectories, {})
    with pytest.raises(ValueError, match="full"):
        FittedQPolicy(n_estimators=5).fit(bad, SETTING)


def test_fqi_values_are_expectations_under_its_hazard(late_value) -> None:
    """Fitted under hazard="duration", both the fitted targets and the executed costs of
    the value report use duration-weighted failures: the executed cost of each task equals
    the measured objective of its placement under that hazard, and the predicted values
    differ from the uniform fit. The report defaults to the fitted setting; another is refused."""
    f = leave_one_repo_out(late_value)[0]
    train, test = late_value.subset(f.train_tasks), late_value.subset(f.test_tasks)
    reports = {}
    for hazard in ("uniform", "duration"):
        setting = Setting(BUDGET, hazard=hazard)
        pol = FittedQPolicy(n_estimators=20, min_samples_leaf=1, n_behaviour_seeds=2).fit(train, setting)
        rep = pol.value_report(test)
        assert rep.equals(pol.value_report(test, setting))
        with pytest.raises(SettingMismatchError):
            pol.value_report(test, Setting(BUDGET, hazard="uniform" if hazard == "duration" else "duration"))
        tasks = replays(test, setting)
        for row in rep.itertuples():
            place = [int(b) for b in row.checkpoints.split()]
            assert row.executed_s == pytest.approx(tasks[row.task_id].expected_cost(place), rel=1e-12)
        reports[hazard] = rep.set_index("task_id")["predicted_s"]
    assert not np.allclose(reports["uniform"].to_numpy(), reports["duration"].to_numpy())
