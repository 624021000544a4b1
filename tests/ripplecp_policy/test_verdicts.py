"""Verdicts at matched budgets: refusals, intervals, the summaries beside them."""

from __future__ import annotations

import numpy as np
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
    optimum = _results("optimum", [80, 91, 99, 110, 121, 129], spend=2.0, role=Role.OFFLINE)
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


def test_spend_tolerance_is_measured_against_the_cap():
    """A verdict is refused when spend differs from the cap beyond tolerance, not from the
    reference's realised spend (first-boundary leaves part of a seconds cap unused)."""
    def secs(policy, costs, spend):
        df = _results(policy, costs, spend, amount=10.0)
        return df.assign(budget="10s", budget_kind="seconds")

    ref = secs("first-boundary", [100, 110, 120, 130, 140, 150], spend=8.0)  # 20% unused
    within = secs("within", [90, 101, 108, 121, 133, 140], spend=9.9)
    slightly_over = secs("over4", [90, 101, 108, 121, 133, 140], spend=10.4)
    over = secs("over", [90, 101, 108, 121, 133, 140], spend=11.0)
    v = {x.policy: x for x in compare(pd.concat([ref, within, slightly_over, over]), n_resamples=500)}
    assert v["within"].status == "yes"  # spent more than the reference, within the cap
    assert v["over4"].status == "yes"  # +4% of the cap is within the 5% tolerance
    assert v["over"].status == "refused" and "cap" in v["over"].reason
    sym = {x.policy: x for x in compare(pd.concat([ref, within]), n_resamples=500, symmetric=True)}
    assert sym["within"].status == "refused" and "reference mean spend" in sym["within"].reason


def test_holm_matches_the_step_down_rule():
    from ripplecp_policy.stats import holm

    p = [0.01, 0.04, 0.03, float("nan"), 0.5]
    adj = holm(p)
    # sorted 0.01, 0.03, 0.04, 0.5 with m = 4: 0.04, 0.09, max(0.09, 0.08)=0.09, max(0.09, 0.5)
    assert adj[0] == pytest.approx(0.04) and adj[2] == pytest.approx(0.09)
    assert adj[1] == pytest.approx(0.09) and adj[4] == pytest.approx(0.5)
    assert np.isnan(adj[3])


def _study_rows(policy, costs, fam="fam", chosen=None):
    df = _results(policy, costs, spend=2.0).assign(family=fam, fold=lambda d: d["repo"])
    if chosen is not None:
        df["chosen"] = chosen
    return df


def test_two_bars_per_learned_policy_holm_corrected():
    from ripplecp_policy.verdicts import BEST_SIMPLE, two_bar_verdicts

    rng = np.random.default_rng(0)
    n = 12
    base = 100 + 10 * rng.random(n)
    rows = [
        _study_rows("first-boundary", list(base)),
        _study_rows(BEST_SIMPLE, list(base - 5 + rng.normal(0, 1, n)), chosen="time-tuned"),
        # clearly better than both bars
        _study_rows("strong", list(base - 20 + rng.normal(0, 1, n))),
        # beats first-boundary, not the best simple baseline
        _study_rows("middling", list(base - 5 + rng.normal(0, 1, n))),
        # a policy that is not learned gets no two-bar verdict
        _study_rows("fixed-k", list(base)),
    ]
    vs = two_bar_verdicts(pd.concat(rows, ignore_index=True), ["strong", "middling"], n_resamples=2000)
    by = {(v.policy, v.bar): v for v in vs}
    assert set(by) == {(p, b) for p in ("strong", "middling") for b in ("first-boundary", BEST_SIMPLE)}
    assert by[("strong", "first-boundary")].word() == "yes"
    assert by[("strong", BEST_SIMPLE)].word() == "yes"
    assert by[("middling", "first-boundary")].word() == "yes"
    # no better than the best simple baseline, and the interval excludes gains of 5 % of it
    assert by[("middling", BEST_SIMPLE)].word() == "no — powered"
    assert by[("strong", BEST_SIMPLE)].chosen == "time-tuned x3"
    for v in vs:
        assert v.family == "fam" and v.p_adjusted >= v.p_value


def test_holm_can_turn_a_raw_yes_into_no():
    from ripplecp_policy.verdicts import BEST_SIMPLE, two_bar_verdicts

    n = 12
    base = 100 + 10 * np.random.default_rng(1).random(n)
    rows = [_study_rows("first-boundary", list(base)),
            _study_rows(BEST_SIMPLE, list(base), chosen="fixed-k")]
    # one policy significant alone (raw p ~ 0.01) among seven null ones: 8 tests per bar
    learned = []
    for i in range(8):
        noise = np.random.default_rng(3 + i).normal(0, 1.5, n)
        shift = -1.6 if i == 0 else -noise.mean()
        rows.append(_study_rows(f"p{i}", list(base + shift + noise)))
        learned.append(f"p{i}")
    res = pd.concat(rows, ignore_index=True)
    res["repo"] = res["task_id"]  # one task per repository: the bootstrap resamples tasks
    raw = {v.policy: v for v in compare(res, n_resamples=4000, policies=learned)}
    vs = {v.policy: v for v in two_bar_verdicts(res, learned, n_resamples=4000) if v.bar == "first-boundary"}
    flipped = [p for p in learned if raw[p].status == "yes" and vs[p].status == "no"]
    assert flipped and "Holm" in vs[flipped[0]].reason


def _clustered(policy, effect, *, n_repos=8, per_repo=4, sd_repo=5.0, sd_task=5.0, seed=0,
               base=None, fam="fam", with_limit=True):
    """Study rows: ``n_repos`` x ``per_repo`` tasks, cost = base + effect + noise, with
    the Evaluator's limit columns (the limit 30 s under first-boundary)."""
    rng = np.random.default_rng(seed)
    n = n_repos * per_repo
    repo = np.repeat(np.arange(n_repos), per_repo)
    base = np.full(n, 500.0) if base is None else base
    cost = base + effect + rng.normal(0, sd_repo, n_repos)[repo] + rng.normal(0, sd_task, n)
    df = pd.DataFrame(dict(
        task_id=[f"t{i}" for i in range(n)], repo=[f"r{r}" for r in repo], policy=policy,
        budget="1ckpt", budget_kind="count", budget_amount=1.0, budget_matched=True,
        role=str(Role.ONLINE), total_failure_cost=cost, spend=1.0, family=fam,
        fold=[f"r{r}" for r in repo]))
    if with_limit:
        df["objective_s"] = cost - 100.0
        # the limit's own differences vary a little: all equal, its interval would be the
        # bounded one of a study that saw no variation (test_power)
        df["xfit_optimum_objective_s"] = base - 100.0 - 30.0 + rng.normal(0, 1.0, n)
    return df


def test_the_three_classes_with_mde_limit_and_design():
    from ripplecp_policy.verdicts import VerdictClass

    ref = _clustered("first-boundary", 0.0, sd_repo=0, sd_task=0)
    big = _clustered("big", -60.0, seed=1)
    same = _clustered("same", 0.0, sd_repo=1.0, sd_task=1.0, seed=2)
    noisy = _clustered("noisy", -10.0, sd_repo=40.0, sd_task=40.0, seed=3)
    v = {x.policy: x for x in compare(pd.concat([ref, big, same, noisy]))}
    assert v["big"].verdict_class == VerdictClass.YES and v["big"].status == "yes"
    assert v["same"].verdict_class == VerdictClass.POWERED_NO and v["same"].status == "no"
    assert v["same"].high - v["same"].diff < v["same"].margin == pytest.approx(0.05 * 500)
    u = v["noisy"]
    assert u.verdict_class == VerdictClass.UNDERPOWERED and u.status == "no"
    # the MDE at the level applied, the limit's own difference and class, and the design
    assert u.alpha == 0.05 and u.mde > u.limit_gain == pytest.approx(30.0, abs=1.0)
    assert u.limit_class == VerdictClass.YES
    assert u.needed_repos > 8 and "repositories" in u.needed
    assert "above the limit's gain 29.7 s" in u.explain() and "would decide" in u.explain()
    for x in v.values():
        assert x.scope == "exploratory" and not x.headline and "(exploratory)" in x.word()
        assert x.df == 7 and x.n_repos == 8 and x.mde > 0


def test_margin_is_declared_as_a_rule():
    from ripplecp_policy.verdicts import Margin

    assert Margin.parse("5%") == Margin(0.05, True) and Margin.parse("2.5s") == Margin(2.5, False)
    assert Margin.parse("3") == Margin(3.0, False)
    assert Margin(0.05).resolve(400.0) == 20.0 and Margin(2.0, False).resolve(400.0) == 2.0
    with pytest.raises(ValueError, match="percentage"):
        Margin.parse("lots")
    with pytest.raises(ValueError, match=">= 0"):
        Margin(-1.0)


def test_choose_learned_never_looks_at_the_held_out_fold():
    """Fold r0 chooses by the other folds only: "a" is best on r0 itself, "b" elsewhere."""
    from ripplecp_policy.verdicts import CHOSEN_LEARNED, choose_learned

    a = _clustered("a", 0.0, sd_repo=0, sd_task=0, n_repos=3)
    b = _clustered("b", 0.0, sd_repo=0, sd_task=0, n_repos=3)
    a.loc[a["repo"] == "r0", "total_failure_cost"] -= 50  # a is great on r0 ...
    a.loc[a["repo"] != "r0", "total_failure_cost"] += 5  # ... and worse elsewhere
    rows = choose_learned(pd.concat([a, b]), ["a", "b"])
    pick = rows.groupby("fold")["chosen"].first().to_dict()
    assert pick == {"r0": "b", "r1": "a", "r2": "a"}  # r1 and r2 see r0's -50 in "a"'s mean
    assert set(rows["policy"]) == {CHOSEN_LEARNED} and len(rows) == 12
    r0 = rows[rows["fold"] == "r0"]
    assert (r0["total_failure_cost"] == b[b["fold"] == "r0"]["total_failure_cost"].to_numpy()).all()
    with pytest.raises(ValueError, match="fold"):
        choose_learned(pd.concat([a, b]).drop(columns="fold"), ["a", "b"])


def test_confirmatory_family_holm_within_groups_rest_exploratory():
    from ripplecp_policy.verdicts import BEST_SIMPLE, CHOSEN_LEARNED, Confirmatory, two_bar_verdicts

    rows = []
    for fam in ("sim1", "sim2", "real1"):
        rows += [_clustered("first-boundary", 0.0, fam=fam, sd_repo=0, sd_task=0),
                 _clustered(BEST_SIMPLE, -5.0, fam=fam, sd_repo=0, sd_task=0).assign(chosen="fixed-k"),
                 _clustered(CHOSEN_LEARNED, -40.0, fam=fam, seed=5).assign(chosen="xgboost"),
                 _clustered("other", -40.0, fam=fam, seed=6)]
        extra = _clustered(CHOSEN_LEARNED, -40.0, fam=fam, seed=7).assign(budget="2ckpt", chosen="ridge")
        rows.append(extra)
        rows.append(_clustered("first-boundary", 0.0, fam=fam, sd_repo=0, sd_task=0).assign(budget="2ckpt"))
        rows.append(_clustered(BEST_SIMPLE, 0.0, fam=fam, sd_repo=0, sd_task=0).assign(budget="2ckpt", chosen="fixed-k"))
    res = pd.concat(rows, ignore_index=True)
    conf = Confirmatory("1ckpt", groups={"sim1": "simulated", "sim2": "simulated", "real1": "real"})
    vs = two_bar_verdicts(res, [CHOSEN_LEARNED, "other"], confirmatory=conf)
    confirm = [v for v in vs if v.scope == "confirmatory"]
    assert {(v.family, v.bar) for v in confirm} == {(f, b) for f in ("sim1", "sim2", "real1")
                                                     for b in ("first-boundary", BEST_SIMPLE)}
    for v in confirm:
        m = 4 if v.group == "simulated" else 2  # both bars, real and simulated apart
        assert v.alpha == pytest.approx(0.05 / m) and v.p_adjusted >= v.p_value
        assert v.headline and v.word() == "yes"
    explo = [v for v in vs if v.scope == "exploratory"]
    assert explo and all(v.alpha == 0.05 and not v.headline for v in explo)
    assert {v.policy for v in explo} == {CHOSEN_LEARNED, "other"}
    one = next(v for v in confirm if v.bar == "first-boundary")
    assert one.chosen == "xgboost x8"


def test_a_policy_equal_to_the_reference_on_every_task_is_bounded_not_certain():
    """Every difference 0 (a study that drew only tasks where the two agree): the interval is
    the unseen share of the repositories times the larger cost, never the point [0, 0]; too
    few repositories to bound the gain below the margin is an under-powered no whose design
    says how many would; the method names the variance the test used (it had read CR2 while
    the test used CR3)."""
    from ripplecp_policy.verdicts import VerdictClass

    ref = _clustered("first-boundary", 0.0, n_repos=4, sd_repo=3.0, sd_task=3.0, with_limit=False)
    same = ref.assign(policy="same")
    (v,) = compare(pd.concat([ref, same]))
    half = (1 - 0.025 ** (1 / 4)) * ref["total_failure_cost"].max()
    assert (v.low, v.high) == pytest.approx((-half, half)) and v.bound == ref["total_failure_cost"].max()
    assert v.verdict_class == VerdictClass.UNDERPOWERED and v.mde > 0
    assert v.needed_repos > 4 and "every difference was equal" in v.needed
    assert "CR3" in v.method and "CR2" not in v.method
    # (test_power checks that the design's count is the fewest that decide)
