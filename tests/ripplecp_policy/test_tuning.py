"""Optuna tuning: validation repositories inside the training fold only, seeded, registered spaces."""

from __future__ import annotations

import pytest

from ripplecp_policy.learned import AdvantageRegressorPolicy
from ripplecp_policy.policy import Budget, Setting
from ripplecp_policy.splits import SplitAudit, leave_one_repo_out
from ripplecp_policy.tuning import tune

BUDGET = Budget("count", 1)
SETTING = Setting(BUDGET)


def test_tuning_sees_training_repos_only_and_is_seeded(toy_fold) -> None:
    f, train, _ = toy_fold
    pol = AdvantageRegressorPolicy(model="ridge")
    r1 = tune(pol, train, SETTING, n_trials=4, seed=3)
    r2 = tune(pol, train, SETTING, n_trials=4, seed=3)
    assert r1.best_params == r2.best_params and r1.objective == "rmse"
    assert len(r1.trials) == 4
    r1.audit.check([f.held_out])
    assert r1.audit.seen() == set(f.train_repos)


def test_full_loro_pipeline_never_leaks(toy_data) -> None:
    """Every stage (tuning, scaling, threshold, model) of every toy_fold misses its held-out repo."""
    for f in leave_one_repo_out(toy_data):
        train = toy_data.subset(f.train_tasks)
        pol = AdvantageRegressorPolicy(model="ridge")
        res = tune(pol, train, SETTING, n_trials=2, seed=0)
        pol.set_params(**res.best_params).fit(train, SETTING)
        audit = SplitAudit()
        audit.merge(res.audit)
        audit.merge(pol.audit_)
        audit.check([f.held_out])
        assert f.held_out not in audit.seen()
        # and a deliberately leaky fit is caught
        leaky = AdvantageRegressorPolicy(model="ridge").fit(toy_data, SETTING)
        with pytest.raises(AssertionError, match="held-out"):
            leaky.audit_.check([f.held_out])
