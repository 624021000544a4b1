"""Verdicts: does a policy beat a reference at a matched budget? (paper, Appendix D).

The API other modules use (everything a study needs to judge, print and plan):

- :class:`Verdict` — one (policy, reference, budget) judgement, a small dataclass. Its
  :class:`VerdictClass` (``verdict_class``) is one of
  ``yes`` (the policy is cheaper, significant at the level applied),
  ``no — powered`` (an equivalence statement: the interval excludes gains larger than the
  margin declared before the run; TOST's lower test at the level applied),
  ``inconclusive — under-powered`` (neither; :meth:`Verdict.explain` says by how much the
  MDE exceeds the cross-fitted limit's gain and which design would decide it), or
  ``refused`` (budgets not matched). Fields: ``diff`` (the effect, policy - reference,
  seconds per task; negative = policy cheaper), ``low``/``high`` (its 95 % interval),
  ``p_value`` / ``p_adjusted`` (two-sided, raw and Holm), ``mde`` (the gain detected with 80 %
  power at ``alpha``, the level actually applied), ``margin`` (seconds), ``limit_diff``
  and ``limit_class`` (the cross-fitted limit's own difference to the same reference and
  its class at the same level; ``limit_gain`` = -limit_diff), ``scope`` (``confirmatory``
  or ``exploratory``), ``needed`` (the design hint: repositories x tasks whose MDE reaches
  the margin) and ``headline`` (a confirmatory yes: the only "yes" a study may headline).
  ``status`` stays "yes" | "no" | "refused" for readers of older outputs.
- :func:`compare` — every online policy against one reference (exploratory, level
  ``alpha`` unadjusted); :func:`two_bar_verdicts` — a study's learned policies against both
  bars fixed in advance, with a :class:`Confirmatory` family declared before the run:
  Holm within it (per correction group: real and simulated families apart), everything
  else exploratory.
- :func:`choose_learned` — the confirmatory policy's rows: per held-out fold, the learned
  policy with the lowest mean cost on the *other* folds' held-out repositories (this fold's
  training repositories), renamed :data:`CHOSEN_LEARNED`.
- :class:`Margin` — the equivalence margin, declared before the run (``5%`` of the
  reference's mean cost by default, or seconds).
- Power for planners is :mod:`ripplecp_policy.power` (``variance_components``, ``mde_at``,
  ``design_for``); :func:`paired_contrast` is the one paired difference every report shows.

The statistic (:func:`ripplecp_policy.power.cluster_test`): the mean per-task difference,
its bias-reduced cluster-robust standard error over repositories and Student's t with
k - 1 degrees of freedom (k repositories) — a continuous p-value, so a Holm level of
0.05/m is decided by the statistic rather than by a bootstrap tail's last replicate. When
every difference is equal the interval is bounded by the costs (the unseen share of the
repositories times the larger cost), never a point.
Only online policies get verdicts: offline limits and unmatched references are shown
beside them, never judged. A verdict is refused when budgets were not matched (either
side ran without a matched budget, the caps differ, or a side's mean spend differs from
the cap beyond tolerance), never printing a verdict for an unfair comparison.

The bars of :func:`two_bar_verdicts`: (a) beats first-boundary (the paper's bar) and (b)
beats the best simple baseline (:data:`BEST_SIMPLE`: per held-out fold, the online simple
baseline with the lowest mean training objective at that budget, chosen before any
held-out result is seen).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
import pandas as pd

from ripplecp_policy.policy import Role
from ripplecp_policy.power import (
    POWER,
    ClusterTest,
    VarianceComponents,
    cluster_test,
    design_for,
    equal_differences_design,
    minimum_detectable_effect,
    p_below,
    variance_components,
)
from ripplecp_policy.stats import difference_test, holm


class MismatchedBudgetError(ValueError):
    """A comparison between policies whose budgets or spends differ beyond tolerance."""


#: the name under which a study records bar (b)'s reference: per held-out fold and budget,
#: the held-out results of the online simple baseline chosen on the training folds
BEST_SIMPLE = "best-simple"
#: the two bars of :func:`two_bar_verdicts`, in the order they are reported
BARS: tuple[str, str] = ("first-boundary", BEST_SIMPLE)
#: the name of the confirmatory learned policy's rows (:func:`choose_learned`)
CHOSEN_LEARNED = "chosen-learned"
#: the two scopes of a verdict: in the family declared before the run, or not
CONFIRMATORY, EXPLORATORY = "confirmatory", "exploratory"
#: the family-wise level of every study
ALPHA = 0.05


class VerdictClass(StrEnum):
    """What a verdict says."""

    YES = "yes"
    POWERED_NO = "no — powered"
    UNDERPOWERED = "inconclusive — under-powered"
    REFUSED = "refused"


@dataclass(frozen=True)
class Margin:
    """The equivalence margin, declared before the run: gains smaller than it are
    negligible, so a "no — powered" says the data exclude gains of ``margin`` or more.
    ``relative``: a fraction of the reference's mean cost at the budget (the rule is
    declared; the seconds are read from the reference, never from the comparison);
    else seconds."""

    amount: float = 0.05
    relative: bool = True

    def __post_init__(self) -> None:
        if not (math.isfinite(self.amount) and self.amount >= 0):
            raise ValueError(f"margin must be a finite number >= 0, got {self.amount}")

    @classmethod
    def parse(cls, text: str) -> Margin:
        """``5%`` (of the reference's mean cost) or ``2.5s`` / ``2.5`` (seconds)."""
        t = text.strip()
        try:
            if t.endswith("%"):
                return cls(float(t[:-1]) / 100.0, True)
            return cls(float(t[:-1] if t.endswith("s") else t), False)
        except ValueError:
            raise ValueError(f"margin {text!r}: give a percentage of the reference's mean cost "
                             "(5%) or seconds (2.5s)") from None

    def resolve(self, reference_mean: float) -> float:
        """The margin in seconds for a reference whose mean cost is ``reference_mean``."""
        return self.amount * abs(reference_mean) if self.relative else self.amount

    def label(self) -> str:
        return f"{100 * self.amount:g}% of the reference's mean cost" if self.relative else f"{self.amount:g} s"


@dataclass
class Verdict:
    """Does ``policy`` beat ``reference`` at a matched budget? See the module docstring."""

    policy: str
    reference: str
    budget: str
    status: str  # "yes" | "no" | "refused" (verdict_class says which no)
    metric: str
    diff: float = math.nan  # mean of (policy - reference) per task; negative = policy cheaper
    low: float = math.nan
    high: float = math.nan
    confidence_level: float = 0.95
    n_tasks: int = 0
    spend: float = math.nan
    reference_spend: float = math.nan
    iqm_repo_diff: float = math.nan  # interquartile mean over repositories of the mean difference
    p_improvement: float = math.nan  # P(policy cost < reference cost) over tasks, ties 0.5
    reason: str = ""
    p_value: float = math.nan  # two-sided p of "no difference" (cluster-robust t), uncorrected
    p_adjusted: float = math.nan  # Holm-adjusted within the verdict's multiplicity family
    bar: str = ""  # "first-boundary" | "best-simple" (two_bar_verdicts), "" from compare
    chosen: str = ""  # the policy each fold chose (bar (b)'s baseline, or the chosen learner)
    family: str = ""
    verdict_class: str = ""  # a VerdictClass value
    scope: str = EXPLORATORY  # CONFIRMATORY | EXPLORATORY
    alpha: float = ALPHA  # the two-sided level applied (alpha / m in a Holm family of m)
    group: str = ""  # the correction group of a confirmatory verdict (e.g. simulated | real)
    n_repos: int = 0
    se: float = math.nan  # cluster-robust standard error of diff
    df: int = 0  # its t degrees of freedom (repositories - 1)
    mde: float = math.nan  # gain detected with 80 % power at alpha (seconds)
    margin: float = math.nan  # equivalence margin, seconds (declared rule, resolved)
    p_equivalence: float = math.nan  # TOST lower test: H0 the policy gains >= margin
    p_equivalence_adjusted: float = math.nan
    limit_diff: float = math.nan  # cross-fitted limit - reference, seconds per task
    limit_low: float = math.nan
    limit_high: float = math.nan
    limit_se: float = math.nan
    limit_df: int = 0
    limit_p: float = math.nan
    limit_class: str = ""  # the limit's own VerdictClass at alpha (never a headline)
    between_var: float = math.nan  # variance components of the differences (for `needed`)
    within_var: float = math.nan
    needed: str = ""  # the design that would decide an inconclusive verdict
    needed_repos: int = 0
    needed_tasks_per_repo: int = 0
    method: str = ""
    bound: float = math.nan  # the largest difference of one task, when every difference was equal

    # -- reading ---------------------------------------------------------------------------
    @property
    def limit_gain(self) -> float:
        """How much the cross-fitted limit gains over the reference (seconds; >0: cheaper)."""
        return -self.limit_diff

    @property
    def headline(self) -> bool:
        """A confirmatory "yes": the only kind a study may headline."""
        return self.scope == CONFIRMATORY and self.verdict_class == VerdictClass.YES

    def word(self) -> str:
        """The verdict in plain words: "yes", "no — powered", "inconclusive — under-powered"
        or "refused: <why>"; exploratory verdicts say so."""
        if self.status == "refused":
            return f"refused: {self.reason}"
        word = str(self.verdict_class or self.status)
        return word if self.scope == CONFIRMATORY else f"{word} (exploratory)"

    def explain(self) -> str:
        """Why the class, in one clause: the MDE against the limit's gain, the margin, and
        for an inconclusive verdict the design that would decide it."""
        if self.status == "refused" or not self.verdict_class:
            return self.reason
        lim = (f"the limit's gain {self.limit_gain:.3g} s" if math.isfinite(self.limit_diff)
               else "no cross-fitted limit")
        a = f"alpha {self.alpha:.2g}"
        if self.verdict_class == VerdictClass.YES:
            return f"MDE {self.mde:.3g} s at {a}; {lim}"
        if self.verdict_class == VerdictClass.POWERED_NO:
            return (f"gains of {self.margin:.3g} s (the margin) or more excluded (TOST p "
                    f"{self.p_equivalence_adjusted:.2g}{', Holm' if self.scope == CONFIRMATORY else ''}); "
                    f"MDE {self.mde:.3g} s at {a}; {lim}")
        rel = ("above" if math.isfinite(self.limit_diff) and self.mde > self.limit_gain else "vs")
        text = f"MDE {self.mde:.3g} s {rel} {lim}, margin {self.margin:.3g} s, at {a}"
        if self.needed:
            text += f"; would decide: {self.needed}"
        return text

    def text(self) -> str:
        if self.status == "refused":
            return f"{self.policy} vs {self.reference} at {self.budget}: verdict refused ({self.reason})"
        line = (
            f"{self.policy} beats {self.reference} at matched budget {self.budget}: {self.word()}, "
            f"difference {self.diff:+.2f} s, {self.confidence_level:.0%} interval "
            f"[{self.low:+.2f}, {self.high:+.2f}] over {self.n_tasks} tasks "
            f"(IQM over repos {self.iqm_repo_diff:+.2f}, P(improvement) {self.p_improvement:.2f}; "
            f"spend {self.spend:.3g} vs {self.reference_spend:.3g}; {self.explain()})"
        )
        if self.reason:
            line += f"; {self.reason}"
        return line

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    # -- deciding --------------------------------------------------------------------------
    def decide(self, alpha: float = ALPHA, m: int = 1, p_adjusted: float | None = None,
               p_equivalence_adjusted: float | None = None) -> Verdict:
        """Set the class for a multiplicity family of ``m`` tests at family-wise level
        ``alpha``: "yes" when the difference is negative and the (Holm-adjusted, else raw)
        two-sided p is below ``alpha``; "no — powered" when the (adjusted) equivalence p is.
        The level applied, ``alpha`` / m (Holm's first step, the level a lone true effect
        must reach), is the one the MDE, the limit's class and the design hint use."""
        if self.status == "refused":
            self.verdict_class = VerdictClass.REFUSED
            return self
        self.alpha = float(alpha) / max(int(m), 1)
        self.p_adjusted = float(self.p_value if p_adjusted is None else p_adjusted)
        self.p_equivalence_adjusted = float(self.p_equivalence if p_equivalence_adjusted is None
                                            else p_equivalence_adjusted)
        self.mde = minimum_detectable_effect(self.se, self.df, self.alpha, POWER)
        yes = self.diff < 0 and self.p_adjusted < alpha
        no = not yes and self.p_equivalence_adjusted < alpha
        self.verdict_class = (VerdictClass.YES if yes else VerdictClass.POWERED_NO if no
                              else VerdictClass.UNDERPOWERED)
        self.status = "yes" if yes else "no"
        self.limit_class = _limit_class(self, self.alpha)
        self.needed, self.needed_repos, self.needed_tasks_per_repo = "", 0, 0
        if self.verdict_class == VerdictClass.UNDERPOWERED and math.isfinite(self.bound):
            n = equal_differences_design(self.diff, self.bound, self.margin, alpha=self.alpha,
                                         confidence_level=self.confidence_level)
            self.needed = (f"every difference was equal: {n} repositories, none differing, would bound "
                           f"the gain below the margin ({self.margin:.3g} s)" if n else
                           f"every difference was equal and no design of <= 100,000 repositories "
                           f"bounds the gain below the margin ({self.margin:.3g} s)")
            self.needed_repos = n or 0
            self.needed_tasks_per_repo = max(1, round(self.n_tasks / max(self.n_repos, 1))) if n else 0
        elif self.verdict_class == VerdictClass.UNDERPOWERED and math.isfinite(self.between_var):
            comp = VarianceComponents(self.diff, self.between_var, self.within_var,
                                      max(self.n_repos, 1), self.n_tasks)
            design = design_for(comp, self.margin, alpha=self.alpha) if self.margin > 0 else None
            if design is None:
                self.needed = (f"no design of <= 100,000 repositories reaches an MDE of "
                               f"{self.margin:.3g} s (the margin)" if self.margin > 0
                               else "a margin > 0 (none was declared)")
            else:
                self.needed = design.text()
                self.needed_repos, self.needed_tasks_per_repo = design.n_repos, design.tasks_per_repo
        return self


def _limit_class(v: Verdict, alpha: float) -> str:
    """The cross-fitted limit's own class against the verdict's reference at ``alpha``."""
    if not math.isfinite(v.limit_diff):
        return ""
    p = (1.0 if v.limit_diff == 0 else 0.0) if v.limit_se == 0.0 else v.limit_p
    p_eq = p_below(v.limit_diff, v.limit_se, v.limit_df, v.margin)
    if v.limit_diff < 0 and p < alpha:
        return str(VerdictClass.YES)
    return str(VerdictClass.POWERED_NO if p_eq < alpha else VerdictClass.UNDERPOWERED)


def _spend_mismatch(
    pol: pd.DataFrame, ref: pd.DataFrame, tolerance: float, symmetric: bool
) -> str:
    """Why two result sets are not budget-matched ('' when they are): either side's mean
    spend exceeds the cap by more than ``tolerance`` of it (with ``symmetric``, or falls
    short of it by more), measured against the cap itself, never the other side's spend."""
    if not pol["budget_matched"].all():
        return "policy ran without a matched budget (reference, not budget-matched)"
    if not ref["budget_matched"].all():
        return "reference ran without a matched budget"
    caps = set(zip(pol["budget_kind"], pol["budget_amount"], strict=True))
    ref_caps = set(zip(ref["budget_kind"], ref["budget_amount"], strict=True))
    if caps != ref_caps:
        return f"budgets differ: {sorted(caps)} vs {sorted(ref_caps)}"
    amount = float(pol["budget_amount"].mean())  # a relative budget's cap differs by fold
    scale = amount if amount > 0 else 1.0
    for side, frame in (("policy", pol), ("reference", ref)):
        spend = float(frame["spend"].mean())
        d = (spend - amount) / scale
        if d > tolerance or (symmetric and -d > tolerance):
            return (
                f"{side} mean spend {spend:.4g} differs from the cap {amount:g} by {d:+.1%}, "
                f"beyond tolerance {tolerance:.0%}"
            )
    return ""


#: costs within this relative difference are a tie (sums of the same seconds in another
#: order, or a mean over seeds of one placement, differ by rounding alone)
TIE_RTOL = 1e-9


def probability_of_improvement(policy_cost: pd.Series, reference_cost: pd.Series) -> float:
    """Fraction of tasks where the policy is cheaper than the reference; ties (equal up to
    :data:`TIE_RTOL`) count 0.5."""
    a, b = policy_cost.align(reference_cost, join="inner")
    if len(a) == 0:
        return math.nan
    tie = np.isclose(a.to_numpy(float), b.to_numpy(float), rtol=TIE_RTOL, atol=0.0)
    return float((((a < b).to_numpy() & ~tie).sum() + 0.5 * tie.sum()) / len(a))


def interquartile_mean(x: Sequence[float] | np.ndarray) -> float:
    """Mean of the middle 50% (scipy.stats.trim_mean(x, 0.25)); robust across repositories."""
    from scipy.stats import trim_mean

    arr = np.asarray(x, dtype=float)
    arr = arr[~np.isnan(arr)]
    return float(trim_mean(arr, 0.25)) if arr.size else math.nan


def paired_contrast(
    pol: pd.DataFrame, ref: pd.DataFrame, metric: str = "total_failure_cost", *,
    n_resamples: int = 10_000, seed: int = 20260818, confidence_level: float = 0.95,
    method: str = "cluster-t",
) -> dict[str, float] | None:
    """The paired per-task difference ``policy - reference`` of ``metric`` between two
    result sets at one budget: ``diff``, ``low``, ``high`` and ``p_value`` by the
    cluster-robust t over repositories (:func:`ripplecp_policy.power.cluster_test`, tasks
    alone when they come from one repository) — or, with ``method="bootstrap"``, the
    two-stage bootstrap of :func:`ripplecp_policy.stats.difference_test` (``n_resamples``,
    ``seed``) —, ``n_tasks``, ``n_repos``, ``se`` and ``df`` (NaN and 0 for the bootstrap),
    the IQM over repositories of the per-repository mean difference, and the probability of
    improvement. None with fewer than two paired tasks."""
    a = pol.set_index("task_id")[metric].astype(float)
    b = ref.set_index("task_id")[metric].astype(float)
    for name, s in (("policy", a), ("reference", b)):
        if not s.index.is_unique:
            raise ValueError(f"paired_contrast: {name} has task {s.index[s.index.duplicated()][0]!r} more than once")
    a, b = a.align(b, join="inner")
    if len(a) < 2:
        return None
    repos = pol.set_index("task_id")["repo"].reindex(a.index)
    d = a - b
    two_stage = repos.nunique() >= 2
    if method == "cluster-t":
        t: ClusterTest | Any = cluster_test(d.to_numpy(), repos.to_numpy(), confidence_level=confidence_level,
                                            bound=difference_bound(a.to_numpy(float), b.to_numpy(float)))
        se, df, bound, how = t.se, t.df, t.bound, t.method
    elif method == "bootstrap":
        t = difference_test(d.to_numpy(), repos.to_numpy() if two_stage else None,
                            n_resamples=n_resamples, seed=seed, confidence_level=confidence_level)
        se, df, bound, how = math.nan, 0, math.nan, t.method
    else:
        raise ValueError(f"paired_contrast: method must be 'cluster-t' or 'bootstrap', got {method!r}")
    per_repo = d.groupby(repos).mean()
    return {"diff": t.estimate, "low": t.low, "high": t.high, "p_value": t.p_value,
            "n_tasks": len(a), "n_repos": int(repos.nunique()), "se": se, "df": df,
            "bound": bound, "method": how,
            "iqm_repo_diff": interquartile_mean(per_repo.to_numpy()),
            "p_improvement": probability_of_improvement(a, b)}


def difference_bound(a: np.ndarray, b: np.ndarray) -> float | None:
    """The largest difference one task of these two paired result columns could have, for
    :func:`ripplecp_policy.power.cluster_test`'s ``bound``: the larger of the two values
    when both are non-negative (a cost), else the sum of their magnitudes — the largest
    seen, a plug-in for the unseen tasks. None when a value is not finite."""
    if not (np.isfinite(a).all() and np.isfinite(b).all()) or a.size == 0:
        return None
    if (a >= 0).all() and (b >= 0).all():
        return float(np.maximum(a, b).max())
    return float((np.abs(a) + np.abs(b)).max())


#: the columns a result set needs for the cross-fitted limit's difference (Evaluator.score)
LIMIT_COLUMNS = ("objective_s", "xfit_optimum_objective_s")


def limit_differences(ref: pd.DataFrame, metric: str = "total_failure_cost") -> pd.Series | None:
    """Per task, the cross-fitted limit's cost minus the reference's (seconds): the limit
    pays the same nominal work and its cross-fitted objective instead of the reference's
    objective, so ``xfit_optimum_objective_s - objective_s`` of the reference's rows. None
    when the rows lack those columns or the metric is not a cost in seconds."""
    if metric not in ("total_failure_cost", "objective_s") or any(c not in ref.columns for c in LIMIT_COLUMNS):
        return None
    s = ref.set_index("task_id")
    d = (s["xfit_optimum_objective_s"].astype(float) - s["objective_s"].astype(float))
    return d[np.isfinite(d.to_numpy())]


def _fill_test(v: Verdict, pol: pd.DataFrame, ref: pd.DataFrame, metric: str,
               margin: Margin, confidence_level: float) -> bool:
    """Fill ``v`` with the paired test of ``pol`` against ``ref``; False with < 2 tasks."""
    c = paired_contrast(pol, ref, metric, confidence_level=confidence_level)
    if c is None:
        return False
    v.diff, v.low, v.high, v.n_tasks = c["diff"], c["low"], c["high"], int(c["n_tasks"])
    v.iqm_repo_diff, v.p_improvement, v.p_value = c["iqm_repo_diff"], c["p_improvement"], c["p_value"]
    v.se, v.df, v.n_repos = c["se"], int(c["df"]), int(c["n_repos"])
    v.bound, v.method = float(c["bound"]), str(c["method"])
    a = pol.set_index("task_id")[metric].astype(float)
    b = ref.set_index("task_id")[metric].astype(float)
    a, b = a.align(b, join="inner")
    repos = pol.set_index("task_id")["repo"].reindex(a.index).to_numpy()
    comp = variance_components((a - b).to_numpy(), repos)
    v.between_var, v.within_var = comp.between, comp.within
    v.margin = margin.resolve(float(b.mean()))
    v.p_equivalence = _p_equivalence(v.diff, v.se, v.df, v.margin)
    lim = limit_differences(ref, metric)
    if lim is not None:
        lim = lim.reindex(a.index).dropna()
        if len(lim) >= 2:
            s = ref.set_index("task_id").reindex(lim.index)
            lt = cluster_test(lim.to_numpy(), pd.Series(repos, index=a.index).reindex(lim.index).to_numpy(),
                              confidence_level=confidence_level,
                              bound=difference_bound(s["xfit_optimum_objective_s"].to_numpy(float),
                                                     s["objective_s"].to_numpy(float)))
            v.limit_diff, v.limit_low, v.limit_high = lt.estimate, lt.low, lt.high
            v.limit_se, v.limit_df, v.limit_p = lt.se, lt.df, lt.p_value
    return True


def _p_equivalence(diff: float, se: float, df: int, margin: float) -> float:
    """TOST's lower test (:meth:`ripplecp_policy.power.ClusterTest.p_equivalence`)."""
    if not math.isfinite(margin):
        return math.nan
    return p_below(diff, se, df, margin)


def compare(
    results: pd.DataFrame,
    reference: str = "first-boundary",
    *,
    tolerance: float = 0.05,
    symmetric: bool = False,
    metric: str = "total_failure_cost",
    strict: bool = False,
    n_resamples: int = 10_000,
    seed: int = 20260818,
    confidence_level: float = 0.95,
    policies: Sequence[str] | None = None,
    alpha: float = ALPHA,
    margin: Margin = Margin(),
) -> list[Verdict]:
    """Exploratory verdicts for every online (policy, budget) in ``results`` against
    ``reference`` (only those of ``policies`` when given), each decided alone at level
    ``alpha`` (:meth:`Verdict.decide`; :func:`two_bar_verdicts` re-decides a confirmatory
    family with Holm).

    ``results`` has one row per (task, policy, budget) as returned by
    :meth:`Evaluator.evaluate`, whose ``role`` column says what each policy is: only online
    policies get a verdict; offline limits (oracle, optimum) and unmatched references
    (every-boundary) get none — they are limits and scale, not candidates. A verdict is
    **refused** when either side ran without a matched budget, when the budget caps differ,
    or when either side's mean spend exceeds the cap by more than ``tolerance`` (a fraction
    of the cap); with ``symmetric=True`` falling short of the cap beyond tolerance is
    refused too. (Spending less under the same cap is allowed by default: winning with
    fewer checkpoints is a fair win.) With ``strict=True`` a refusal raises
    :class:`MismatchedBudgetError` instead. The difference (policy - reference, per task,
    paired) is tested by the cluster-robust t over repositories (:func:`paired_contrast`);
    the equivalence margin is ``margin`` resolved on the reference's mean ``metric``; the
    cross-fitted limit's difference to the same reference rides along when the reference's
    rows carry :data:`LIMIT_COLUMNS`. ``n_resamples`` and ``seed`` are kept for callers of
    the bootstrap era and unused here.
    """
    del n_resamples, seed  # the decision is analytic now (cluster-robust t)
    out: list[Verdict] = []
    if reference not in set(results["policy"]):
        raise ValueError(f"reference policy {reference!r} is not in the results")
    if "role" not in results.columns:
        raise ValueError("compare: results lack the 'role' column (Evaluator.evaluate writes it)")
    for budget, by_budget in results.groupby("budget", sort=False):
        ref = by_budget[by_budget["policy"] == reference]
        for pol_name, pol in by_budget.groupby("policy", sort=False):
            if pol_name == reference or (pol["role"] != Role.ONLINE).any():
                continue
            if policies is not None and pol_name not in policies:
                continue
            if ref.empty:
                reason = f"no {reference} results at budget {budget}"
            else:
                reason = _spend_mismatch(pol, ref, tolerance, symmetric)
            v = Verdict(
                policy=str(pol_name), reference=reference, budget=str(budget), status="refused",
                metric=metric, spend=float(pol["spend"].mean()),
                reference_spend=float(ref["spend"].mean()) if len(ref) else math.nan,
                confidence_level=confidence_level, verdict_class=VerdictClass.REFUSED,
            )
            if reason:
                if strict:
                    raise MismatchedBudgetError(f"{pol_name} vs {reference} at {budget}: {reason}")
                v.reason = reason
                out.append(v)
                continue
            if not _fill_test(v, pol, ref, metric, margin, confidence_level):
                paired = len(set(pol["task_id"]) & set(ref["task_id"]))
                v.reason = f"only {paired} paired task(s)"
                out.append(v)
                continue
            v.status = "no"
            v.decide(alpha)
            if v.status == "no" and v.low > 0:
                v.reason = "reference is cheaper"
            cap = float(pol["budget_amount"].mean())
            if pol["spend"].mean() < cap - tolerance * max(cap, 1e-12):
                v.reason = (v.reason + "; " if v.reason else "") + (
                    f"policy left {1 - pol['spend'].mean() / cap:.0%} of the cap unused")
            out.append(v)
    return out


def choose_learned(
    results: pd.DataFrame, learned: Sequence[str], *, metric: str = "total_failure_cost",
    name: str = CHOSEN_LEARNED,
) -> pd.DataFrame:
    """The confirmatory learned policy's held-out rows, chosen without the held-out data.

    Per family (when there is a ``family`` column), budget and held-out fold i: among
    ``learned`` (in that order; ties keep the earlier), the policy with the lowest mean
    ``metric`` over the held-out tasks of every *other* fold — repositories that are fold
    i's training repositories, used as its validation repositories. (Those folds' models
    were fitted with fold i's repository among their training data; fold i's own results
    never enter its choice.) With one fold there is no other: the first of ``learned``.
    Returns that policy's rows of fold i renamed ``name``, with ``chosen`` naming it.
    """
    if "fold" not in results.columns:
        raise ValueError("choose_learned: results lack the 'fold' column (one per held-out repository)")
    learned = [p for p in learned if p in set(results["policy"])]
    if not learned:
        raise ValueError("choose_learned: none of the learned policies is in the results")
    mine = results[results["policy"].isin(learned)]
    fams = mine.groupby("family", sort=False) if "family" in mine.columns else [("", mine)]
    out = []
    for _, res in fams:
        for _, g in res.groupby("budget", sort=False):
            sums = g.groupby(["fold", "policy"], sort=False)[metric].agg(["sum", "count"])
            folds = list(dict.fromkeys(g["fold"]))
            for fold in folds:
                other = sums.drop(index=fold, level="fold", errors="ignore").groupby(level="policy").sum()
                pick = learned[0]
                if len(other):
                    mean = (other["sum"] / other["count"]).reindex(learned)
                    if mean.notna().any():
                        pick = str(mean.idxmin())
                rows = g[(g["fold"] == fold) & (g["policy"] == pick)]
                out.append(rows.assign(policy=name, chosen=pick))
    return pd.concat(out, ignore_index=True)


@dataclass(frozen=True)
class Confirmatory:
    """The confirmatory family, declared before the run: per workload family, ``policy``
    (default :data:`CHOSEN_LEARNED`, the learner chosen on validation repositories) at the
    primary ``budget`` against both bars. Holm runs within each correction group
    (``groups``: workload family -> group, e.g. "simulated" / "real"; families not named
    share the group ""), across both bars. Every other verdict is exploratory."""

    budget: str
    policy: str = CHOSEN_LEARNED
    groups: Mapping[str, str] = field(default_factory=dict)

    def group(self, family: str) -> str:
        return self.groups.get(family, "")

    def covers(self, v: Verdict) -> bool:
        return v.policy == self.policy and v.budget == self.budget


def _chosen(best: pd.DataFrame) -> str:
    """Which policy a chosen reference (or the chosen learner) was, per fold: "time-tuned
    x3, fixed-k x1"."""
    if "chosen" not in best.columns or "fold" not in best.columns:
        return ""
    per_fold = best.groupby("fold", sort=False)["chosen"].first().value_counts()
    return ", ".join(f"{name} x{n}" for name, n in per_fold.items())


def two_bar_verdicts(
    results: pd.DataFrame,
    policies: Sequence[str],
    *,
    reference: str = BARS[0],
    best: str = BEST_SIMPLE,
    tolerance: float = 0.05,
    symmetric: bool = False,
    metric: str = "total_failure_cost",
    n_resamples: int = 10_000,
    seed: int = 20260818,
    confidence_level: float = 0.95,
    confirmatory: Confirmatory | None = None,
    alpha: float = ALPHA,
    margin: Margin = Margin(),
) -> list[Verdict]:
    """Both bars for every policy of ``policies`` at every budget (per ``family`` when the
    results have that column).

    Bar (a): the policy against ``reference``; bar (b): against ``best``, the rows a study
    recorded for the best simple baseline chosen on each fold's training tasks (with a
    ``chosen`` column naming it). With ``confirmatory`` (declared before the run) its
    verdicts are decided with Holm within their correction group, across both bars, at
    family-wise ``alpha`` (superiority and equivalence p-values each adjusted; MDE at
    ``alpha`` / m); every other verdict is exploratory, decided alone at ``alpha``. Without
    it every verdict is confirmatory and Holm runs across every (family, policy, budget) of
    one bar (the study before families were declared). Refused verdicts are neither tested
    nor counted.
    """
    fams = results.groupby("family", sort=False) if "family" in results.columns else [("", results)]
    out: list[Verdict] = []
    for fam, res in fams:
        for bar, ref in ((BARS[0], reference), (BARS[1], best)):
            if ref not in set(res["policy"]):
                raise ValueError(f"two_bar_verdicts: {fam or 'results'}: no {ref!r} rows for bar {bar!r}")
            chosen = _chosen(res[res["policy"] == ref]) if bar == BARS[1] else ""
            for v in compare(res, ref, tolerance=tolerance, symmetric=symmetric, metric=metric,
                             confidence_level=confidence_level, policies=policies, alpha=alpha,
                             margin=margin):
                v.bar, v.family = bar, str(fam)
                if bar == BARS[1]:
                    g = res[(res["policy"] == ref) & (res["budget"] == v.budget)]
                    v.chosen = _chosen(g) or chosen
                if "chosen" in res.columns and v.bar == BARS[0]:
                    g = res[(res["policy"] == v.policy) & (res["budget"] == v.budget)]
                    v.chosen = _chosen(g) if g["chosen"].notna().any() else ""
                out.append(v)
    if confirmatory is None:
        families = [[v for v in out if v.bar == bar and v.status != "refused"] for bar in BARS]
        for v in out:
            v.scope = CONFIRMATORY
    else:
        groups: dict[str, list[Verdict]] = {}
        for v in out:
            if confirmatory.covers(v):
                v.scope, v.group = CONFIRMATORY, confirmatory.group(v.family)
                if v.status != "refused":
                    groups.setdefault(v.group, []).append(v)
        families = list(groups.values())
    for mine in families:
        p_sup = holm([v.p_value for v in mine])
        p_eq = holm([v.p_equivalence for v in mine])
        for v, ps, pe in zip(mine, p_sup, p_eq, strict=True):
            raw_yes = v.diff < 0 and v.p_value < alpha
            v.decide(alpha, len(mine), float(ps), float(pe))
            if raw_yes and v.verdict_class != VerdictClass.YES:
                v.reason = f"not after Holm's correction (p {v.p_value:.3g}, adjusted {ps:.3g})"
    return out
