"""Matched-budget evaluation of placement policies against measured recovery tables.

A policy is scored by the *exact* cost of its placement under the recovery table, never
by a proxy (paper, Appendix F). For failure f (striking during segment f, after boundary
f-1) the placement costs the creation of its checkpoints before f plus the measured
recovery J(last, f) from the latest of them (0 = pristine), plus the restore latency of
that restore point. The expectation is over a failure distribution: uniform over the
measured failures by default, or a hazard such as "proportional to nominal segment
duration".

Online policies are walked boundary by boundary by the one episode runner
(:mod:`ripplecp_policy.episode`): at boundary b the prefix walk has seen the nominal
trajectory's events up to the boundary's event (prefix only), the policy decides and is
charged the measured cost; a checkpoint that does not fit the remaining budget is refused.
Offline policies (``policy.offline``: oracle, clairvoyant optimum) receive the recovery table.
The :class:`Evaluator` holds the caches (per-task cost arrays, prefix features per placement
history, optima) every episode of a label set shares.

Metrics (Appendix F) are reported side by side and never folded into one scalar:
LostWork, RecoveryEfficiency, TotalFailureCost, task completion, repeated tokens and tool
calls, bytes written, checkpoint and restore latency, plus regret against the clairvoyant
optimum (:func:`ripplecp_policy.pricing.optimal_placement`, an exact dynamic program).
Verdicts over these results are :mod:`ripplecp_policy.verdicts`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ripplecp_policy.episode import Episode, FeatureSource, LiveFeatures, Placement, prefix_features
from ripplecp_policy.policy import Budget, PlacementPolicy
from ripplecp_policy.pricing import (
    HazardSpec,
    TaskCosts,
    optimal_placement,
    placement_metrics,
    unlimited,
)

if TYPE_CHECKING:
    from oracle.tables import LabelSet, RecoveryTable


class Evaluator:
    """Runs policies on one label set and prices their placements; caches per-task arrays,
    prefix features per (task, placement history) and optima.

    ``hazard`` is the failure distribution of every expectation (see
    :func:`ripplecp_policy.pricing.failure_weights`); ``feature_config`` configures the online
    features (:class:`features.online.FeatureConfig`).
    """

    def __init__(
        self, label_set: LabelSet, *, hazard: HazardSpec = "uniform", feature_config: Any = None,
        cache_features: bool = True,
    ) -> None:
        self.label_set = label_set
        self.hazard = hazard
        self.feature_config = feature_config
        self.cache_features = cache_features
        self._fcache: dict[tuple[str, tuple[int, ...]], list[dict[str, float] | None]] = {}
        self._tasks = label_set.tasks.set_index("task_id")
        self._rec_idx: dict[str, np.ndarray] | None = None
        self._cps_idx: dict[str, np.ndarray] | None = None
        self._costs: dict[str, TaskCosts] = {}
        self._optimum: dict[tuple[str, Budget], tuple[list[int], float]] = {}

    def _rows(self, name: str, task_id: str) -> pd.DataFrame:
        """The rows of table ``name`` (recovery | checkpoints) for one task."""
        df = getattr(self.label_set, name)
        attr = "_rec_idx" if name == "recovery" else "_cps_idx"
        idx = getattr(self, attr)
        if idx is None:
            idx = {str(k): v for k, v in df.groupby("task_id", sort=False).indices.items()}
            setattr(self, attr, idx)
        pos = idx.get(task_id)
        return df.iloc[:0] if pos is None else df.iloc[pos]

    def costs(self, task_id: str) -> TaskCosts:
        if task_id not in self._costs:
            if task_id not in self._tasks.index:
                raise KeyError(f"task {task_id!r} is not in the label set")
            self._costs[task_id] = TaskCosts.build(
                task_id, self._rows("recovery", task_id), self._rows("checkpoints", task_id),
                self.hazard, float(self._tasks.at[task_id, "nominal_s"]),
            )
        return self._costs[task_id]

    def recovery_table(self, task_id: str) -> RecoveryTable:
        from oracle.tables import RecoveryTable

        return RecoveryTable(task_id, self._rows("recovery", task_id), self._rows("checkpoints", task_id))

    def features_at(self, task_id: str, boundary: int, history: Sequence[int]) -> dict[str, float]:
        """Online features at ``boundary`` with checkpoints ``history`` (all before it) marked.

        The episode's prefix walk (:func:`ripplecp_policy.episode.prefix_features`), cached
        per (task, history): every boundary after the history's last checkpoint shares one
        walk. Identical to an uncached episode's walk (a test checks it).
        """
        hist = tuple(int(h) for h in history)
        if hist and hist[-1] >= boundary:
            raise ValueError(f"history {hist} must lie before boundary {boundary}")
        key = (task_id, hist)
        rows = self._fcache.get(key)
        if rows is None:
            tc = self.costs(task_id)
            rows = prefix_features(self.label_set.trajectories[task_id], tc.event_index[1:], hist,
                                   self.feature_config)
            if self.cache_features:
                self._fcache[key] = rows
        row = rows[boundary]
        assert row is not None
        return dict(row)

    def optimum(self, task_id: str, budget: Budget) -> tuple[list[int], float]:
        key = (task_id, budget)
        if key not in self._optimum:
            self._optimum[key] = optimal_placement(self.costs(task_id), budget)
        return self._optimum[key]

    def run(
        self, policy: PlacementPolicy, task_id: str, budget: Budget, *,
        granularity: str | None = None, seed: int = 0,
    ) -> Placement:
        """One episode: see :func:`run_episode`."""
        tc = self.costs(task_id)
        task_gran = str(self._tasks.at[task_id, "granularity"])
        if granularity is not None and granularity != task_gran:
            raise ValueError(
                f"{task_id}: the recovery table is measured at {task_gran!r} boundaries; "
                f"it cannot price {granularity!r} boundaries"
            )
        matched = bool(getattr(policy, "budget_matched", True))
        cap = budget if matched else unlimited(budget, tc)
        charge = tc.charges(cap)
        ep = Episode(task_id, str(self._tasks.at[task_id, "repo"]), cap)
        policy.reset(task_id, seed)
        if getattr(policy, "offline", False):
            wanted = policy.place(self.recovery_table(task_id), cap)
            for b in sorted({int(x) for x in wanted}):
                if not 1 <= b <= tc.n_boundaries:
                    raise ValueError(f"{policy.name} placed boundary {b} outside 1..{tc.n_boundaries} on {task_id}")
                ep.offer(b, float(charge[b]))
        else:
            ep.walk(policy.decide, tc, charge, self._feature_source(policy, task_id), policy.name)
        return ep.placement(policy.name, budget_matched=matched, seed=seed,
                            n_boundaries=tc.n_boundaries)

    def _feature_source(self, policy: PlacementPolicy, task_id: str) -> FeatureSource:
        """Cached prefix features, a live prefix walk, or none (policies that read none)."""
        if not getattr(policy, "uses_features", True):
            return lambda b, history: {}
        if self.cache_features:
            return lambda b, history: self.features_at(task_id, b, history)
        return LiveFeatures(self.label_set.trajectories[task_id], self.costs(task_id).event_index[1:],
                            self.feature_config)

    def score(self, placement: Placement, budget: Budget | None = None) -> dict[str, Any]:
        """Metrics of a placement plus regret to the optimum at ``budget`` (default: the cap it
        ran under — for an unmatched reference, the unconstrained optimum), so regret >= 0."""
        tc = self.costs(placement.task_id)
        m = placement_metrics(tc, placement.checkpoints)
        ref_budget = budget or placement.budget
        _, opt = self.optimum(placement.task_id, ref_budget)
        m["optimum_objective_s"] = opt
        m["regret_s"] = m["objective_s"] - opt
        m["spend"] = placement.spend
        m["n_refused"] = float(len(placement.refused))
        return m

    def evaluate(
        self, policy: PlacementPolicy, task_ids: Sequence[str], budget: Budget, *,
        seeds: Sequence[int] = (0,), granularity: str | None = None,
    ) -> pd.DataFrame:
        """One row per task: metrics averaged over ``seeds`` (stochastic policies); the
        ``checkpoints`` column shows the first seed's placement."""
        if len(seeds) == 0:
            raise ValueError("evaluate: give at least one seed")
        rows = []
        for task_id in task_ids:
            per_seed = []
            for s in seeds:
                pl = self.run(policy, task_id, budget, granularity=granularity, seed=s)
                per_seed.append(self.score(pl, budget if pl.budget_matched else None))
                if len(per_seed) == 1:
                    first = pl
            m = {k: float(np.nanmean([d[k] for d in per_seed])) if not all(
                math.isnan(d[k]) for d in per_seed) else math.nan for k in per_seed[0]}
            rows.append(
                dict(
                    task_id=task_id, repo=pl.repo, policy=pl.policy,
                    budget=budget.label(), budget_kind=budget.kind, budget_amount=budget.amount,
                    budget_matched=pl.budget_matched, n_seeds=len(seeds),
                    checkpoints=" ".join(map(str, first.checkpoints)), **m,
                )
            )
        return pd.DataFrame(rows)


_EVALUATORS: list[Evaluator] = []
_EVALUATOR_CACHE_SIZE = 8


def evaluator_for(
    label_set: LabelSet, *, hazard: HazardSpec = "uniform", feature_config: Any = None
) -> Evaluator:
    """A shared :class:`Evaluator` for this label set object (small LRU, identity-keyed), so
    tuning inside ``fit`` and evaluation reuse per-task arrays and feature caches."""
    hkey = _hazard_key(hazard)
    for i, ev in enumerate(_EVALUATORS):
        if ev.label_set is label_set and _hazard_key(ev.hazard) == hkey and ev.feature_config == feature_config:
            _EVALUATORS.append(_EVALUATORS.pop(i))
            return ev
    ev = Evaluator(label_set, hazard=hazard, feature_config=feature_config)
    _EVALUATORS.append(ev)
    del _EVALUATORS[:-_EVALUATOR_CACHE_SIZE]
    return ev


def _hazard_key(hazard: HazardSpec) -> Any:
    return tuple(sorted((int(k), float(v)) for k, v in hazard.items())) if isinstance(hazard, Mapping) else hazard


def run_episode(
    policy: PlacementPolicy,
    label_set: LabelSet,
    task_id: str,
    budget: Budget,
    *,
    granularity: str | None = None,
    seed: int = 0,
    feature_config: Any = None,
    evaluator: Evaluator | None = None,
) -> Placement:
    """Walk a task's candidate boundaries 1..B in order and let ``policy`` place checkpoints.

    At boundary b the feature extractor has seen the nominal trajectory's events up to the
    boundary's event and no further, with the checkpoints taken so far marked; the policy
    sees a :class:`BoundaryObservation` and decides. A checkpoint whose measured cost
    (creation seconds, bytes or 1, per the budget) exceeds the remaining budget is refused
    and recorded. Offline policies get ``policy.place(recovery_table, budget)`` instead.
    Policies with ``budget_matched = False`` (every-boundary) run with an unlimited budget.
    Pass an :class:`Evaluator` to reuse its per-task caches across episodes.
    """
    ev = evaluator or evaluator_for(label_set, feature_config=feature_config)
    return ev.run(policy, task_id, budget, granularity=granularity, seed=seed)
