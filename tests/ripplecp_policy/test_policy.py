"""The policy interface's value types: Budget and the Setting a policy is fitted and run under."""

from __future__ import annotations

import pytest

from features.online import FeatureConfig
from ripplecp_policy.policy import (
    Budget,
    BudgetSpec,
    PlacementPolicy,
    Setting,
    SettingMismatchError,
    as_setting,
    canonical_hazard,
    check_setting,
)


def test_budget_charges_in_its_unit_and_rejects_bad_values():
    assert Budget("count", 2).charge(4.0, 100) == 1.0
    assert Budget("seconds", 2).charge(4.0, 100) == 4.0
    assert Budget("bytes", 2).charge(4.0, 100) == 100.0
    assert Budget("seconds", 9.25).label() == "9.25s"
    with pytest.raises(ValueError, match="budget kind"):
        Budget("joules", 1)
    with pytest.raises(ValueError, match="finite and >= 0"):
        Budget("count", -1)


def test_budget_specs_parse_and_resolve_against_a_label_set(make_label_set):
    ls = make_label_set(n_repos=2, tasks_per_repo=1, seed=1)
    assert BudgetSpec.parse("count:2").resolve(ls).amount == 2
    assert BudgetSpec.parse("3").resolve(ls).kind == "count"
    mean_c = float(ls.checkpoints["creation_s"].mean())
    b = BudgetSpec.parse("seconds:2x").resolve(ls)
    assert b.kind == "seconds" and b.amount == pytest.approx(2 * mean_c, abs=1e-3)
    mean_b = float(ls.checkpoints["size_bytes"].mean())
    assert BudgetSpec.parse("bytes:1.5x").resolve(ls).amount == pytest.approx(1.5 * mean_b, abs=1e-3)
    assert BudgetSpec.parse("bytes:1000").resolve(ls).amount == 1000
    assert BudgetSpec.parse("seconds:9.5").resolve(ls) == Budget("seconds", 9.5)


@pytest.mark.parametrize("bad, needle", [
    ("joules:3", "the kind must be count, seconds or bytes, got 'joules'"),
    ("count:2x", "a count budget takes a positive integer, got 2x"),
    ("count:-1", "a count budget takes a positive integer, got -1"),
    ("count:0", "a count budget takes a positive integer, got 0"),
    ("count:1.5", "a count budget takes a positive integer, got 1.5"),
    ("seconds:abc", "the amount must be a number"),
    ("seconds:0", "the amount must be a finite number > 0, got 0"),
    ("seconds:0x", "K in Kx must be a finite number > 0, got 0"),
    ("bytes:-2x", "K in Kx must be a finite number > 0, got -2"),
    ("seconds:nan", "finite number > 0"),
    ("seconds:", "the amount must be a number"),
])
def test_bad_budget_specs_name_the_spec_and_what_it_accepts(bad, needle):
    with pytest.raises(ValueError) as exc:
        BudgetSpec.parse(bad)
    assert str(exc.value).startswith(repr(bad)) and needle in str(exc.value)
    assert "count:N, seconds:S, seconds:Kx, bytes:B or bytes:Kx" in str(exc.value)


def test_setting_is_frozen_hashable_and_normalised():
    a = Setting(Budget("count", 2), hazard={3: 1.0, 2: 0.5})
    b = Setting(Budget("count", 2), hazard={2: 0.5, 3: 1.0})
    assert a == b and hash(a) == hash(b) and a.hazard == ((2, 0.5), (3, 1.0))
    assert Setting().features == FeatureConfig() and Setting() == Setting(features=FeatureConfig())
    with pytest.raises(AttributeError):
        a.hazard = "uniform"  # type: ignore[misc]
    assert a.with_budget(Budget("count", 1)).hazard == a.hazard


def test_bad_settings_name_the_field():
    with pytest.raises(ValueError, match="hazard must be one of"):
        Setting(hazard="gamma")
    with pytest.raises(ValueError, match="hazard weights"):
        Setting(hazard={"x": "y"})
    with pytest.raises(TypeError, match="budget must be a Budget"):
        Setting(budget=2)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="features must be"):
        Setting(features={"root": "/"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected a Setting"):
        as_setting(Budget("count", 1))  # type: ignore[arg-type]
    assert canonical_hazard("duration") == "duration"


def test_a_fitted_setting_admits_only_the_same_conditions():
    fitted = Setting(Budget("count", 2), hazard="duration")
    assert fitted.admits(Setting(Budget("count", 2), hazard="duration"))
    assert not fitted.admits(Setting(Budget("count", 2)))
    assert not fitted.admits(Setting(Budget("count", 1), hazard="duration"))
    assert not fitted.admits(fitted.__class__(fitted.budget, "duration", FeatureConfig(error_trend_window=3)))
    anybudget = Setting(hazard="duration")
    assert anybudget.admits(Setting(Budget("seconds", 9.0), hazard="duration"))


class Nothing(PlacementPolicy):
    def decide(self, obs):
        return False


def test_fit_records_the_setting_and_the_check_enforces_it():
    pol = Nothing()
    check_setting(pol, Setting(Budget("count", 1)))  # unfitted: learned nothing, runs anywhere
    assert pol.fit(None, None).setting_ == Setting()
    pol.fit(None, Setting(Budget("count", 1), hazard="duration"))
    check_setting(pol, Setting(Budget("count", 1), hazard="duration"))
    with pytest.raises(SettingMismatchError, match="Nothing was fitted under 1ckpt, hazard duration"):
        check_setting(pol, Setting(Budget("count", 1)))


def test_the_generator_is_made_on_first_use_and_seeded_as_before():
    """reset() only records the seed; ``_rng`` is the generator seeded by (seed, task id),
    fresh after every reset, as an eager one would be."""
    import zlib

    import numpy as np

    from ripplecp_policy.policy import PlacementPolicy

    p = PlacementPolicy()
    p.reset("task-a", 3)
    assert "_rng_made" not in vars(p)
    draws = [p._rng.random() for _ in range(3)]
    eager = np.random.default_rng([3, zlib.crc32(b"task-a")])
    assert draws == [eager.random() for _ in range(3)]
    p.reset("task-a", 3)
    assert p._rng.random() == draws[0]
