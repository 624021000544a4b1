"""Power planning: repositories x tasks x repetitions a study needs to detect an effect.

A verdict tests the mean of per-task paired differences, tasks nested in repositories,
each task's difference read from recovery cells measured with some repetitions. Three
variances make up the standard error of a design of ``n`` repositories x ``m`` tasks x
``r`` repetitions:

    se^2 = between / n + (within + repetition / r) / (n m)

``between``: the spread of repository means; ``within``: of tasks within a repository
(net of measurement noise); ``repetition``: the noise one repetition of every recovery
cell adds to a task's difference. A *pilot* (any label set, or a small piece of one)
measures them: :func:`pilot_differences` walks the reference policy fitted
leave-one-repository-out and the clairvoyant limit over the pilot's tasks, and
:func:`estimate` splits the variance of ``limit - reference`` (the largest gain any
policy could show: a design that cannot detect it cannot detect any policy) by one-way
random-effects ANOVA, with the repetition part from the two halves of each cell's
repetitions. :meth:`PilotEstimate.design` is the fewest repositories whose minimum
detectable effect (80 % power, two-sided, at the level applied) reaches an effect.

The MDE itself, the variance components and the design search are
:mod:`ripplecp_policy.power`'s (one home: the verdicts' own MDE, ``mde_at`` /
``design_for`` / ``variance_components``); the planner adds only the repetition term.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from sklearn.base import clone

from ripplecp_policy.evaluation import evaluator_for
from ripplecp_policy.policy import PlacementPolicy, Role, Setting
from ripplecp_policy.power import (
    Design,
    VarianceComponents,
    design_for,
    mde_at,
    variance_components,
)
from ripplecp_policy.pricing import placement_objective
from ripplecp_policy.splits import leave_one_repo_out

if TYPE_CHECKING:
    from labelsets.tables import LabelSet

# ---------------------------------------------------------------------------------------
# The planner
# ---------------------------------------------------------------------------------------


def pilot_differences(data: LabelSet, setting: Setting, reference: PlacementPolicy,
                      *, seed: int = 0) -> pd.DataFrame:
    """Per task of ``data``: the ``reference`` policy's objective (an unfitted online
    policy, e.g. a baseline; fitted on the other repositories, walked online on the task's),
    the cross-fitted limit's, their difference
    ``diff = limit - reference`` (seconds; negative: the limit is cheaper), and the same
    difference priced on each half of the recovery cells' repetitions (``diff_a``,
    ``diff_b``; NaN without two repetitions), for the repetition noise."""
    if reference.role is not Role.ONLINE:
        raise ValueError(f"reference {reference.name!r} is not an online policy (it is {reference.role})")
    budget = setting.budget
    if budget is None:
        raise ValueError("pilot_differences: the setting names no budget")
    ev = evaluator_for(data)
    rows = []
    for fold in leave_one_repo_out(data):
        pol = clone(reference).fit(data.subset(fold.train_tasks), setting)
        res = ev.evaluate(pol, list(fold.test_tasks), setting, seeds=(seed,))
        for r in res.itertuples():
            tid = str(r.task_id)
            ref_place = [int(x) for x in str(r.checkpoints).split()]
            opt_place, _ = ev.optimum(tid, budget, setting.hazard)
            halves = ev.half_costs(tid, setting.hazard)
            da = db = math.nan
            if halves is not None:
                a, b = halves
                da = placement_objective(a, opt_place) - placement_objective(a, ref_place)
                db = placement_objective(b, opt_place) - placement_objective(b, ref_place)
            rows.append(dict(task_id=tid, repo=str(r.repo), reference_s=float(r.objective_s),
                             limit_s=float(r.xfit_optimum_objective_s),
                             diff=float(r.xfit_optimum_objective_s) - float(r.objective_s),
                             diff_a=da, diff_b=db))
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class PilotEstimate:
    """What a pilot measured: the limit's gain over the reference (``gain``, seconds per
    task; positive: the limit is cheaper) and the three variances of the module docstring
    (``between``, ``within`` net of repetition noise, ``repetition`` for one repetition),
    on ``n_repos`` x ``n_tasks`` tasks measured with ``repetitions``."""

    gain: float
    between: float
    within: float
    repetition: float
    n_repos: int
    n_tasks: int
    repetitions: int

    @property
    def tasks_per_repo(self) -> float:
        return self.n_tasks / self.n_repos if self.n_repos else math.nan

    def components(self, repetitions: int) -> VarianceComponents:
        """The variance components of a study measuring each cell ``repetitions`` times."""
        if repetitions < 1:
            raise ValueError(f"repetitions must be >= 1, got {repetitions}")
        return VarianceComponents(-self.gain, self.between, self.within + self.repetition / repetitions,
                                  self.n_repos, self.n_tasks)

    def mde(self, n_repos: int, tasks_per_repo: int, repetitions: int, *, alpha: float = 0.05) -> float:
        """The MDE (seconds, 80 % power, two-sided ``alpha``) of that design."""
        return mde_at(self.components(repetitions), n_repos, tasks_per_repo, alpha=alpha)

    def design(self, effect: float, tasks_per_repo: int, repetitions: int, *,
               alpha: float = 0.05) -> Design | None:
        """The fewest repositories at ``tasks_per_repo`` and ``repetitions`` whose MDE is at
        most ``effect`` (None when no design of <= 100,000 repositories is)."""
        return design_for(self.components(repetitions), effect, alpha=alpha, tasks_per_repo=tasks_per_repo)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def estimate(diffs: pd.DataFrame, repetitions: int) -> PilotEstimate:
    """Split the variance of :func:`pilot_differences`' ``diff`` (measured with
    ``repetitions`` per cell): ANOVA over repositories (the power module's), and the
    repetition part from the halves: ``Var(diff_a - diff_b) = 4 x repetition / R`` for
    halves of R/2 repetitions each, so ``repetition = R x mean((diff_a - diff_b)^2) / 4``;
    the task-level ``within`` is the ANOVA's less ``repetition / R`` (at least 0)."""
    if len(diffs) < 2:
        raise ValueError(f"estimate: need >= 2 tasks, got {len(diffs)}")
    comp = variance_components(diffs["diff"].to_numpy(float), diffs["repo"].to_numpy())
    both = diffs[["diff_a", "diff_b"]].dropna()
    rep = (float(repetitions) * float(np.mean((both["diff_a"] - both["diff_b"]) ** 2)) / 4.0
           if len(both) and repetitions >= 2 else 0.0)
    within = max(0.0, comp.within - rep / repetitions)
    return PilotEstimate(-comp.mean, comp.between, within, rep, comp.n_repos, comp.n_tasks, repetitions)


@dataclass(frozen=True)
class PlanRow:
    """One design option for one effect: the fewest repositories at ``tasks_per_repo`` x
    ``repetitions`` whose MDE reaches ``effect`` at ``alpha`` (``n_repos`` 0: none does)."""

    tasks_per_repo: int
    repetitions: int
    n_repos: int
    n_tasks: int
    mde: float
    effect: float
    alpha: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan(est: PilotEstimate, effect: float, *, alpha: float,
         tasks_per_repo: Sequence[int] = (1, 2, 4, 8, 16),
         repetitions: Sequence[int] = (1, 2, 4)) -> list[PlanRow]:
    """Every design option (tasks per repository x repetitions) for ``effect``."""
    out = []
    for r in repetitions:
        for m in tasks_per_repo:
            d = est.design(effect, m, r, alpha=alpha)
            out.append(PlanRow(m, r, d.n_repos if d else 0, d.n_tasks if d else 0,
                               d.mde if d else math.nan, effect, alpha))
    return out


def cheapest(rows: Sequence[PlanRow], *, repetitions: int | None = None) -> PlanRow | None:
    """The option with the fewest tasks (ties: fewer repetitions, then more repositories),
    among those at ``repetitions`` when given; None when no option reaches the effect."""
    ok = [r for r in rows if r.n_repos > 0 and (repetitions is None or r.repetitions == repetitions)]
    return min(ok, key=lambda r: (r.n_tasks * r.repetitions, r.repetitions, -r.n_repos)) if ok else None


def subsample(data: LabelSet, n_repos: int | None, tasks_per_repo: int | None) -> LabelSet:
    """A pilot taken from ``data``: its first ``n_repos`` repositories (sorted by name) and the
    first ``tasks_per_repo`` tasks of each (sorted by id); None keeps all."""
    tasks = data.tasks.sort_values(["repo", "task_id"], kind="stable")
    repos = sorted(tasks["repo"].unique())
    if n_repos is not None:
        repos = repos[:n_repos]
    tasks = tasks[tasks["repo"].isin(repos)]
    if tasks_per_repo is not None:
        tasks = tasks.groupby("repo", sort=False).head(tasks_per_repo)
    ids = list(tasks["task_id"])
    return data if len(ids) == len(data.tasks) else data.subset(ids)


__all__ = ["PilotEstimate", "PlanRow", "cheapest", "estimate", "pilot_differences", "plan", "subsample"]
