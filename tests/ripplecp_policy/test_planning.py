"""The power planner: variance components with a repetition term, designs that reach an
effect, and the pilot's differences read from a real (simulated) label set."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from baselines import FirstBoundary
from oracle.simulator import simulate_label_set
from ripplecp_policy.evaluation import evaluator_for
from ripplecp_policy.planning import (
    PilotEstimate,
    cheapest,
    estimate,
    pilot_differences,
    plan,
    subsample,
)
from ripplecp_policy.policy import Budget, Setting


def _synthetic(k: int, m: int, between: float, within: float, rep: float, R: int, seed: int = 0) -> pd.DataFrame:
    """Differences with known components: repository effect, task effect, and each half of
    R repetitions carrying noise of variance rep / (R/2)."""
    rng = np.random.default_rng(seed)
    repo = np.repeat(np.arange(k), m)
    true = -10.0 + rng.normal(0, np.sqrt(between), k)[repo] + rng.normal(0, np.sqrt(within), k * m)
    half = np.sqrt(rep / (R / 2))
    a = true + rng.normal(0, half, k * m)
    b = true + rng.normal(0, half, k * m)
    return pd.DataFrame(dict(repo=[f"r{i}" for i in repo], diff=(a + b) / 2, diff_a=a, diff_b=b))


def test_estimate_recovers_the_three_components() -> None:
    d = _synthetic(400, 6, between=25.0, within=100.0, rep=64.0, R=2)
    est = estimate(d, repetitions=2)
    assert est.gain == pytest.approx(10.0, abs=1.0)
    assert est.between == pytest.approx(25.0, rel=0.3)
    assert est.within == pytest.approx(100.0, rel=0.15)
    assert est.repetition == pytest.approx(64.0, rel=0.15)
    assert est.n_repos == 400 and est.n_tasks == 2400 and est.repetitions == 2


def test_mde_falls_with_repositories_tasks_and_repetitions() -> None:
    est = PilotEstimate(gain=10.0, between=20.0, within=100.0, repetition=200.0, n_repos=8, n_tasks=32,
                        repetitions=2)
    base = est.mde(8, 4, 1, alpha=0.005)
    assert est.mde(16, 4, 1, alpha=0.005) < base
    assert est.mde(8, 8, 1, alpha=0.005) < base
    assert est.mde(8, 4, 4, alpha=0.005) < base
    assert est.mde(8, 4, 1, alpha=0.05) < base  # a looser level detects less
    # repetitions only shrink the measurement part: never below the task-level floor
    floor = PilotEstimate(10.0, 20.0, 100.0, 0.0, 8, 32, 2).mde(8, 4, 1, alpha=0.005)
    assert est.mde(8, 4, 10_000, alpha=0.005) == pytest.approx(floor, rel=1e-3)


def test_the_planned_design_is_the_fewest_repositories_that_reach_the_effect() -> None:
    est = PilotEstimate(gain=10.0, between=20.0, within=100.0, repetition=50.0, n_repos=8, n_tasks=32,
                        repetitions=2)
    rows = plan(est, 10.0, alpha=0.005, tasks_per_repo=(2, 8), repetitions=(1, 2))
    assert len(rows) == 4
    for r in rows:
        assert r.n_repos > 0 and r.mde <= 10.0
        assert est.mde(r.n_repos - 1, r.tasks_per_repo, r.repetitions, alpha=0.005) > 10.0
    best = cheapest(rows)
    assert best is not None and best.n_tasks * best.repetitions == min(r.n_tasks * r.repetitions for r in rows)
    # an effect no design reaches: between-repository variance alone keeps the MDE up
    assert plan(est, 0.0, alpha=0.005)[0].n_repos == 0
    assert cheapest(plan(est, 0.0, alpha=0.005)) is None


@pytest.fixture(scope="module")
def pilot():
    return simulate_label_set("positive-control", n_repos=3, tasks_per_repo=2, design="full", repetitions=2, seed=0)


def test_pilot_differences_are_the_limit_minus_the_reference(pilot) -> None:
    setting = Setting(Budget("count", 1.0), "uniform")
    d = pilot_differences(pilot, setting, FirstBoundary())
    ev = evaluator_for(pilot)
    assert sorted(d["task_id"]) == sorted(pilot.task_ids) and d["repo"].nunique() == 3
    for r in d.itertuples():
        ref = ev.costs(r.task_id)
        from ripplecp_policy.pricing import placement_objective

        assert r.reference_s == pytest.approx(placement_objective(ref, [1]))
        assert r.limit_s == pytest.approx(ev.crossfit_optimum(r.task_id, Budget("count", 1.0))[0])
        assert r.diff == pytest.approx(r.limit_s - r.reference_s)
    assert np.isfinite(d[["diff_a", "diff_b"]].to_numpy()).all()
    est = estimate(d, 2)
    assert est.gain > 0 and est.repetition > 0
    with pytest.raises(ValueError, match="not an online policy"):
        from baselines import ClairvoyantOptimum

        pilot_differences(pilot, setting, ClairvoyantOptimum())


def test_subsample_takes_the_first_repositories_and_tasks(pilot) -> None:
    small = subsample(pilot, 2, 1)
    assert len(small.tasks) == 2 and small.tasks["repo"].nunique() == 2
    assert subsample(pilot, None, None) is pilot
