"""Advantage policies: thresholds on validation repositories, separation, determinism, scoring."""

from __future__ import annotations

import math
import pickle
import zlib

import numpy as np
import pytest

from ripplecp_policy.datasets import advantage_table, first_boundary_placement, replays, run_policy
from ripplecp_policy.learned import (
    AdvantageClassifierPolicy,
    AdvantageRegressorPolicy,
    default_learned_policies,
    rank_report,
)
from ripplecp_policy.policy import Budget, Setting

BUDGET = Budget("count", 1)
SETTING = Setting(BUDGET)


@pytest.mark.parametrize("model", ["xgboost", "ridge"])
def test_regressor_learns_regimes_and_sets_threshold_on_validation(toy_fold, model) -> None:
    f, train, test = toy_fold
    pol = AdvantageRegressorPolicy(model=model, n_estimators=40).fit(train, SETTING)
    assert pol.threshold_source_.startswith("validation")
    assert math.isfinite(pol.threshold_) or pol.threshold_ in (math.inf, -math.inf)
    vc = pol.validation_costs_
    assert len(vc) >= 3 and vc["mean_cost"].min() == pytest.approx(
        vc.loc[vc["threshold"] == pol.threshold_, "mean_cost"].iloc[0])
    # held-out rank quality reported beside error, never pooled
    rep = pol.report(advantage_table(test))
    assert {"rmse", "mae", "spearman_first", "spearman_additional", "spearman_within"} <= set(rep)
    assert pol.heldout_metrics(test, SETTING) == {**rep, "threshold": pol.threshold_}
    # predicted advantage of a first checkpoint beats that of an additional one
    table = advantage_table(test)
    s = pol.score_frame(table.X)
    strata = table.frame["stratum"].to_numpy()
    assert s[strata == "first"].mean() > s[strata == "additional"].mean()
    # separation: every stage saw training repositories only
    pol.audit_.check([f.held_out])
    assert pol.audit_.seen() == set(f.train_repos)
    assert {"scaler", "model", "threshold"} <= set(pol.audit_.stages)


def test_policy_never_overspends_and_is_comparable_to_first_boundary(toy_fold) -> None:
    _, train, test = toy_fold
    pol = AdvantageRegressorPolicy(model="ridge").fit(train, Setting(Budget("count", 2)))
    for task in replays(test).values():
        place = run_policy(pol, task, Budget("count", 2))
        assert len(place) <= 2 and place == sorted(place)
        fb = first_boundary_placement(task, Budget("count", 2))
        assert fb == list(range(1, min(2, task.n_boundaries) + 1))
        assert math.isfinite(task.expected_cost(place))


def test_classifier_is_reweighted_for_imbalance(toy_fold) -> None:
    _, train, test = toy_fold
    clf = AdvantageClassifierPolicy(model="xgboost", n_estimators=30).fit(train, SETTING)
    y = advantage_table(train).y > 0
    assert 0 < y.mean() < 1
    assert clf.model_.get_params()["scale_pos_weight"] == pytest.approx((~y).sum() / y.sum())
    rep = clf.report(advantage_table(test))
    assert 0 <= rep["brier"] <= 1 and "rmse" not in rep
    logit = AdvantageClassifierPolicy(model="logistic").fit(train, SETTING)
    assert logit.model_.named_steps["model"].class_weight == "balanced"


def test_one_seed_same_models_thresholds_predictions(toy_fold) -> None:
    _, train, test = toy_fold
    table = advantage_table(test)
    a = AdvantageRegressorPolicy(model="xgboost", n_estimators=30, subsample=0.8, random_state=7).fit(train, SETTING)
    b = AdvantageRegressorPolicy(model="xgboost", n_estimators=30, subsample=0.8, random_state=7).fit(train, SETTING)
    assert a.threshold_ == b.threshold_
    np.testing.assert_array_equal(a.score_frame(table.X), b.score_frame(table.X))
    c = pickle.loads(pickle.dumps(a))
    np.testing.assert_array_equal(a.score_frame(table.X), c.score_frame(table.X))


def test_rank_report_is_within_stratum() -> None:
    y = np.array([10, 20, 30, 0, 1, 2], float)
    s = np.array(["first"] * 3 + ["additional"] * 3)
    rep = rank_report(y, np.array([1, 2, 3, 3, 2, 1], float), s)
    assert rep["spearman_first"] == pytest.approx(1.0)
    assert rep["spearman_additional"] == pytest.approx(-1.0)
    assert rep["spearman_within"] == pytest.approx(0.0)


def test_packed_trees_match_the_libraries() -> None:
    """The fast per-boundary path gives the libraries' own predictions, missing values included."""
    from sklearn.ensemble import ExtraTreesRegressor
    from xgboost import XGBClassifier, XGBRegressor

    from ripplecp_policy.learned.advantage import PackedTrees

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 8)) * 50
    X[rng.random(X.shape) < 0.1] = np.nan
    y = np.nan_to_num(X[:, 0]) * 0.3 + rng.random(300) * 10
    Xt = rng.normal(size=(200, 8)) * 50
    Xt[rng.random(Xt.shape) < 0.2] = np.nan
    Xt[:40] = X[:40]  # training values: ties with split thresholds
    reg = XGBRegressor(n_estimators=60, max_depth=3, n_jobs=1).fit(X, y)
    np.testing.assert_allclose(PackedTrees.from_xgboost(reg).predict(Xt),
                               reg.get_booster().inplace_predict(Xt), rtol=1e-5, atol=1e-4)
    clf = XGBClassifier(n_estimators=40, max_depth=3, n_jobs=1, scale_pos_weight=2.0).fit(X, (y > 0).astype(int))
    np.testing.assert_allclose(PackedTrees.from_xgboost(clf).predict(Xt), clf.predict_proba(Xt)[:, 1], atol=1e-6)
    et = ExtraTreesRegressor(n_estimators=20, min_samples_leaf=2, random_state=0).fit(X, y)
    np.testing.assert_allclose(PackedTrees.from_sklearn_forest(et).predict(Xt), et.predict(Xt), atol=1e-9)


def test_threshold_validation_prices_under_the_setting_hazard(toy_fold) -> None:
    """Validation costs are expectations under the failure model of the setting the policy
    is fitted (and will be scored) under: at threshold +inf no task checkpoints, so the mean
    validation cost there is the mean no-checkpoint cost of the training tasks under that
    hazard, and it differs between hazards on tasks whose segments differ in length."""
    _, train, _ = toy_fold
    never = {}
    for hazard in ("uniform", "duration"):
        setting = Setting(BUDGET, hazard=hazard)
        pol = AdvantageRegressorPolicy(model="ridge", max_inner_splits=None).fit(train, setting)
        assert pol.setting_ == setting
        vc = pol.validation_costs_.set_index("threshold")
        expected = np.mean([t.expected_cost([]) for t in replays(train, setting).values()])
        assert vc.loc[math.inf, "mean_cost"] == pytest.approx(expected, rel=1e-12)
        never[hazard] = vc.loc[math.inf, "mean_cost"]
    assert never["uniform"] != pytest.approx(never["duration"], rel=1e-6)


def test_learned_policies_take_the_study_setting_through_fit(toy_fold) -> None:
    """The failure model reaches a learned policy once, through fit, and the evaluation
    holds it to it: no constructor copies a hazard that could disagree."""
    from ripplecp_policy.evaluation import Evaluator
    from ripplecp_policy.policy import SettingMismatchError

    _, train, test = toy_fold
    pols = default_learned_policies(seed=3, quick=True)
    assert pols and not any("hazard" in p.get_params() for p in pols)
    duration = Setting(BUDGET, hazard="duration")
    pol = AdvantageRegressorPolicy(model="ridge").fit(train, duration)
    task = test.task_ids[0]
    Evaluator(test).run(pol, task, duration)
    with pytest.raises(SettingMismatchError, match="hazard duration"):
        Evaluator(test).run(pol, task, SETTING)
    with pytest.raises(SettingMismatchError):
        run_policy(pol, replays(test)[task], BUDGET)


@pytest.mark.parametrize("budget", [Budget("count", 1), Budget("count", 2), Budget("seconds", 9.0)])
def test_threshold_placements_are_each_thresholds_replay(budget) -> None:
    """The one-walk-per-path search gives, for every threshold, the placement the episode
    runner's replay gives (budget refusals included)."""
    from oracle.simulator import simulate_label_set
    from ripplecp_policy.learned.advantage import threshold_placements

    ls = simulate_label_set("positive-control", n_repos=2, tasks_per_repo=3, seed=1)
    setting = Setting(budget)
    rng = np.random.default_rng(0)
    thetas = [-math.inf, *sorted(rng.normal(0, 1, 9)), math.inf]
    for task in replays(ls, setting).values():
        def score(o, t=task.task_id) -> float:  # history-dependent, as a learned score is
            return float(np.sin(7 * o.boundary + 3 * len(o.history) + zlib.crc32(t.encode()) % 5) + 0.1 * o.remaining)

        got = threshold_placements(task, score, thetas, budget)
        want = [tuple(task.replay(lambda o, th=th: score(o) > th, budget)) for th in thetas]
        assert got == want
