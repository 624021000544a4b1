"""The conformance suite catches each rule it states (and passes a well-behaved policy)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from ripplecp_policy.conformance import check_policy
from ripplecp_policy.learned import LEARNED
from ripplecp_policy.policy import BoundaryObservation, Budget, PlacementPolicy, Setting

SETTINGS = [Setting(Budget("count", 2))]


@pytest.fixture(scope="module")
def label_set(make_label_set):
    return make_label_set(n_repos=2, tasks_per_repo=2, n_steps=(4, 5), seed=11)


class EveryOther(PlacementPolicy):
    uses_features = False

    def decide(self, obs: BoundaryObservation) -> bool:
        return obs.boundary % 2 == 1


def test_well_behaved_policy_passes(label_set):
    check_policy(EveryOther, label_set, max_tasks=2)


class Unseeded(PlacementPolicy):
    uses_features = False

    def decide(self, obs: BoundaryObservation) -> bool:
        return bool(np.random.default_rng().random() < 0.5)  # ignores the runner's seed


def test_nondeterminism_is_caught(label_set):
    with pytest.raises(AssertionError, match="differ"):
        check_policy(Unseeded, label_set, settings=[Setting(Budget("count", 3))], max_tasks=4)


class Peeker(PlacementPolicy):
    """Cheats: reads the runner's label set off the call stack and looks ahead."""

    def decide(self, obs: BoundaryObservation) -> bool:
        frame = inspect.currentframe().f_back
        while frame is not None and not hasattr(frame.f_locals.get("self"), "label_set"):
            frame = frame.f_back
        events = frame.f_locals["self"].label_set.trajectories[obs.task_id].events
        future = [e for e in events if e.index > obs.event_index]
        return any(e.is_error for e in future)


def test_reading_the_future_is_caught(label_set):
    with pytest.raises(AssertionError, match="future"):
        check_policy(Peeker, label_set, settings=SETTINGS, max_tasks=2)


class BadAttr(EveryOther):
    def fit(self, data, setting=None):
        self.threshold = 3  # learned attribute without the trailing underscore
        self.is_fitted_ = True
        return self


class NoSelf(EveryOther):
    def fit(self, data, setting=None):
        self.is_fitted_ = True


def test_sklearn_contract_is_checked(label_set):
    with pytest.raises(AssertionError, match="end with '_'"):
        check_policy(BadAttr, label_set, settings=SETTINGS, max_tasks=1)
    with pytest.raises(AssertionError, match="return self"):
        check_policy(NoSelf, label_set, settings=SETTINGS, max_tasks=1)


class Forgetful(EveryOther):
    """Learns nothing but does not record the setting it was fitted under."""

    def fit(self, data, setting=None):
        self.is_fitted_ = True
        return self


def test_the_fitted_setting_must_be_the_evaluated_one(label_set):
    """A fit that does not record its setting could be evaluated under another: caught."""
    with pytest.raises(AssertionError, match="must record the setting"):
        check_policy(Forgetful, label_set, settings=SETTINGS, max_tasks=1)
    # and one that does record it is refused under another failure model by the runner
    check_policy(EveryOther, label_set, settings=[Setting(Budget("count", 1), hazard="duration")], max_tasks=1)


def test_budget_overrun_is_caught(label_set, monkeypatch):
    # A runner that believed checkpoints were free would overspend; the suite recomputes
    # the spend from the measured table and says so.
    monkeypatch.setattr(Budget, "charge", lambda self, c, s: 0.0)
    with pytest.raises(AssertionError, match="over the budget"):
        check_policy(EveryOther, label_set, settings=[Setting(Budget("seconds", 1.0))], max_tasks=2)


@pytest.mark.parametrize("entry", LEARNED, ids=lambda e: e.key)
def test_every_learned_policy_conforms(label_set, entry):
    """Every registered learned policy passes the same suite as the baselines."""

    def factory():
        return entry.make(seed=0, quick=True)

    check_policy(factory, label_set, settings=[Setting(Budget("count", 1)), Setting(Budget("seconds", 5.0))], max_tasks=2)
