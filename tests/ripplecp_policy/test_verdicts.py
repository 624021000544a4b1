"""Verdicts at matched budgets: refusals, intervals, the summaries beside them."""

from __future__ import annotations

import pandas as pd
import pytest

from ripplecp_policy.policy import Role
from ripplecp_policy.verdicts import (
    MismatchedBudgetError,
    compare,
    interquartile_mean,
    paired_contrast,
    probability_of_improvement,
)


def _results(policy: str, costs: list[float], spend: float, amount: float = 2.0,
             matched: bool = True, role: Role = Role.ONLINE) -> pd.DataFrame:
    n = len(costs)
    return pd.DataFrame(dict(
        task_id=[f"t{i}" for i in range(n)], repo=[f"r{i % 3}" for i in range(n)], policy=policy,
        budget="2ckpt", budget_kind="count", budget_amount=amount, budget_matched=matched,
        role=str(role), total_failure_cost=costs, spend=spend,
    ))


def test_mismatched_spend_is_refused():
    ref = _results("first-boundary", [100, 110, 120, 130, 140, 150], spend=2.0)
    greedy = _results("greedy", [50, 60, 70, 80, 90, 100], spend=3.0)  # outspends the reference
    res = pd.concat([ref, greedy])
    (v,) = compare(res, n_resamples=500)
    assert v.status == "refused" and "spend" in v.reason
    assert "refused" in v.text()
    with pytest.raises(MismatchedBudgetError, match="greedy"):
        compare(res, strict=True, n_resamples=500)


def test_unmatched_reference_and_different_caps_are_refused():
    ref = _results("first-boundary", [100, 110, 120, 130], spend=2.0)
    every = _results("every-boundary", [90, 100, 110, 120], spend=4.0, amount=99.0, matched=False)
    other_cap = _results("other", [90, 100, 110, 120], spend=2.0, amount=3.0)
    verdicts = {v.policy: v for v in compare(pd.concat([ref, every, other_cap]), n_resamples=500)}
    assert verdicts["every-boundary"].status == "refused"
    assert "not budget-matched" in verdicts["every-boundary"].reason
    assert verdicts["other"].status == "refused" and "budgets differ" in verdicts["other"].reason


def test_matched_comparison_gives_a_verdict_with_interval():
    ref = _results("first-boundary", [100, 110, 120, 130, 140, 150], spend=2.0)
    better = _results("better", [90, 101, 108, 121, 133, 140], spend=2.0)
    worse = _results("worse", [101, 120, 119, 140, 139, 160], spend=1.98)
    verdicts = {v.policy: v for v in compare(pd.concat([ref, better, worse]), n_resamples=2000)}
    b = verdicts["better"]
    assert b.status == "yes" and b.high < 0 and b.low <= b.diff <= b.high
    assert b.diff == pytest.approx(-9.5)
    assert b.p_improvement == 1.0
    assert verdicts["worse"].status == "no"
    assert "beats first-boundary at matched budget 2ckpt: no" in verdicts["worse"].text()


def test_only_online_policies_get_verdicts():
    """Offline limits and unmatched references are shown beside the verdicts, never judged;
    their paired difference to the reference is still there to be shown."""
    ref = _results("first-boundary", [100, 110, 120, 130, 140, 150], spend=2.0)
    online = _results("learned", [90, 101, 108, 121, 133, 140], spend=2.0)
    optimum = _results("optimum", [80, 90, 100, 110, 120, 130], spend=2.0, role=Role.OFFLINE)
    every = _results("every-boundary", [70, 80, 90, 100, 110, 120], spend=6.0, amount=99.0,
                     matched=False, role=Role.REFERENCE)
    res = pd.concat([ref, online, optimum, every])
    assert [v.policy for v in compare(res, n_resamples=500)] == ["learned"]
    c = paired_contrast(optimum, ref, n_resamples=500)
    assert c["diff"] == pytest.approx(-20.0) and c["high"] < 0 and c["n_tasks"] == 6
    assert paired_contrast(optimum.head(1), ref, n_resamples=500) is None
    with pytest.raises(ValueError, match="'role' column"):
        compare(res.drop(columns="role"), n_resamples=500)


def test_probability_of_improvement_counts_ties_as_half():
    a = pd.Series([1.0, 2.0, 3.0, 4.0], index=list("abcd"))
    b = pd.Series([2.0, 2.0, 1.0, 5.0], index=list("abcd"))
    assert probability_of_improvement(a, b) == pytest.approx((2 + 0.5) / 4)
    # rounding is no improvement: a mean over seeds of the same placement is a tie
    c = pd.Series([0.1 + 0.2, 5.0], index=list("ab"))
    assert probability_of_improvement(c, pd.Series([0.3, 5.0 + 1e-12], index=list("ab"))) == 0.5


def test_interquartile_mean_ignores_the_tails():
    assert interquartile_mean([0, 1, 2, 3, 4, 5, 6, 1000]) == pytest.approx(3.5)
