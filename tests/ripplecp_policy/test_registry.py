"""The policy registry: every baseline and learned policy once, with its role and search space."""

from __future__ import annotations

import optuna
import pytest

from baselines import BASELINES, EveryBoundary, all_baselines
from ripplecp_policy.learned import LEARNED, AdvantageRegressorPolicy, default_learned_policies
from ripplecp_policy.policy import PlacementPolicy, Role
from ripplecp_policy.registry import PolicyEntry, check_entry, entries, entry, entry_for, register


def test_every_policy_is_registered_once_with_a_unique_key_and_name():
    listed = entries()
    assert [e.key for e in listed] == [e.key for e in (*BASELINES, *LEARNED)]
    assert len({e.key for e in listed}) == len(listed) == len({e.name for e in listed})
    assert entries(learned=True) == list(LEARNED) and entries(learned=False) == list(BASELINES)
    for want in ("no-checkpoint", "every-boundary", "fixed-k", "fixed-positions", "time-young-daly", "time-tuned",
                 "first-boundary", "state-change", "progress", "failure-risk", "random",
                 "oracle", "optimum"):
        assert entry(want).name == want


def test_declared_roles_are_the_classes_roles():
    roles = {e.key: e.role for e in entries()}
    assert roles["every-boundary"] is Role.REFERENCE is EveryBoundary.role
    assert roles["oracle"] is roles["optimum"] is roles["causal-advantage"] is Role.OFFLINE
    limits = {"oracle", "optimum", "causal-advantage"}  # the reachable reference is a limit too
    assert {k for k, r in roles.items() if r is Role.ONLINE} == set(roles) - {"every-boundary", *limits}
    assert [e.key for e in entries(role=Role.OFFLINE)] == ["oracle", "optimum", "causal-advantage"]
    for e in entries():
        assert type(e.make()).role is e.role


def test_learned_entries_carry_their_search_space_and_make_fresh_policies():
    for e in LEARNED:
        assert e.learned and e.space is not None
        a, b = e.make(seed=7, quick=True), e.make(seed=7, quick=True)
        assert a is not b and not hasattr(a, "is_fitted_") and a.get_params()["random_state"] == 7
        params = e.space(optuna.trial.FixedTrial({
            "n_estimators": 50, "max_depth": 3, "learning_rate": 0.1, "alpha": 1.0, "C": 1.0,
            "min_samples_leaf": 2}))
        a.set_params(**params)  # every suggested parameter is a constructor parameter
        assert entry_for(a) is e
    assert all(e.space is None for e in BASELINES)


def test_the_default_lists_read_the_registry():
    assert [p.name for p in all_baselines()] == [e.name for e in BASELINES]
    study = [e.name for e in LEARNED if e.in_study]
    assert [p.name for p in default_learned_policies(quick=True)] == study


def test_lookups_name_what_is_registered():
    assert entry("AdvantageRegressorPolicy[ridge]") is entry("ridge")
    with pytest.raises(KeyError, match="did you mean 'fqi-xgboost'"):
        entry("fqi-xgbost")
    with pytest.raises(KeyError, match="registered: .*first-boundary"):
        entry_for(AdvantageRegressorPolicy(model="lasso"))


class Twin(PlacementPolicy):
    @property
    def name(self) -> str:
        return "first-boundary"


def test_a_report_name_is_registered_once():
    with pytest.raises(ValueError, match="already 'first-boundary'"):
        register("another-first", lambda seed=0, quick=False, device="cpu": Twin(),
                 name="first-boundary", role=Role.ONLINE)
    assert "another-first" not in {e.key for e in entries()}


def test_every_entry_builds_the_policy_it_declares():
    """An entry's name and role are literals (read without building the policy); each
    built policy must be a PlacementPolicy with exactly those."""
    for e in entries():
        policy = check_entry(e)
        assert policy.name == e.name and type(policy).role is e.role


def _declared(make, name="first-boundary", role=Role.ONLINE):
    return PolicyEntry(key="declared", name=name, role=role, make=make, learned=False,
                       space=None, in_study=True)


def test_a_declaration_that_disagrees_with_its_policy_is_caught():
    first = entry("first-boundary").make
    check_entry(_declared(first))
    with pytest.raises(ValueError, match="declared name 'first-boundary', role 'offline limit'"):
        check_entry(_declared(first, role=Role.OFFLINE))
    with pytest.raises(ValueError, match="declared name 'first'.*built name 'first-boundary'"):
        check_entry(_declared(first, name="first"))
    with pytest.raises(TypeError, match="not a PlacementPolicy"):
        check_entry(_declared(lambda seed=0, quick=False, device="cpu": object()))


def test_default_learned_policies_are_unfitted_policies() -> None:
    pols = default_learned_policies(seed=5, quick=True)
    assert len(pols) >= 3 and all(isinstance(p, PlacementPolicy) for p in pols)
    assert all(p.get_params().get("random_state") == 5 for p in pols)
    assert not any(hasattr(p, "is_fitted_") for p in pols)
    assert len({p.name for p in pols}) == len(pols)
