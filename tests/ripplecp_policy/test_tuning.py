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


def test_a_failing_trial_prints_no_optuna_traceback(toy_fold) -> None:
    """Issue 32 item 10: a trial that raises reaches the caller as its own error; Optuna's
    logged traceback (753 lines from train_policies) is not printed."""
    import logging

    _, train, _ = toy_fold
    pol = AdvantageRegressorPolicy(model="ridge")
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    def space(trial):
        trial.suggest_float("alpha", 0.1, 1.0)
        raise ValueError("no space left on device")

    handler = Keep()
    logging.getLogger("optuna").addHandler(handler)  # what Optuna's own handler would print
    try:
        with pytest.raises(ValueError, match="no space left"):
            tune(pol, train, SETTING, n_trials=2, seed=0, space=space)
    finally:
        logging.getLogger("optuna").removeHandler(handler)
    printed = [r.getMessage() for r in seen if r.exc_info or "failed" in r.getMessage()]
    assert printed == [], printed
