"""Matched-budget evaluation of placement policies against measured recovery tables.

A policy is scored by the *exact* cost of its placement under the recovery table, never
by a proxy (paper, Appendix F): the one price of :mod:`ripplecp_policy.pricing` (creation of
the checkpoints before the failure + restore latency of the restore point used + measured
recovery from it), in expectation over the setting's failure model.

Every run is under a :class:`~ripplecp_policy.policy.Setting` (budget, failure model,
features), the one the policy was fitted under. Online policies are walked boundary by
boundary by the one episode runner (:mod:`ripplecp_policy.episode`): at boundary b the prefix
walk has seen the nominal trajectory's events up to the boundary's event, the policy decides
and is charged the measured cost; a checkpoint that does not fit the remaining budget is
refused. Offline limits (oracle, clairvoyant optimum) receive the table's cost arrays. The
:class:`Evaluator` holds the caches (cost arrays per failure model, prefix features per
feature configuration and placement history, optima) every episode on a label set shares.

Metrics (Appendix F) are reported side by side and never folded into one scalar:
LostWork, RecoveryEfficiency, TotalFailureCost, task completion, repeated tokens and tool
calls, bytes written, checkpoint and restore latency, plus regret against the clairvoyant
optimum (:func:`ripplecp_policy.pricing.optimal_placement`, an exact dynamic program).
Verdicts over these results are :mod:`ripplecp_policy.verdicts`.

A sparse label set (:mod:`labelsets.recovery_model`) is priced the same way once its cells
are completed: the cells it did not execute by the recovery model fitted on its other
repositories, every executed cell with the doubly-robust correction; the optimum, the
cross-fitted limit and the training replays read the completed arrays.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from features.online import FeatureConfig
from labelsets.recovery_model import Completion, complete, is_sparse
from ripplecp_policy.episode import Episode, FeatureSource, LiveFeatures, Placement, prefix_features
from ripplecp_policy.policy import (
    Budget,
    PlacementPolicy,
    Role,
    Setting,
    canonical_hazard,
    check_setting,
)
from ripplecp_policy.pricing import (
    HazardSpec,
    TaskCosts,
    optimal_placement,
    placement_metrics,
    placement_objective,
    unlimited,
)

if TYPE_CHECKING:
    from labelsets.tables import LabelSet


class Evaluator:
    """Runs policies on one label set under a :class:`~ripplecp_policy.policy.Setting` and
    prices their placements; caches per-task cost arrays (per failure model), prefix features
    per (task, feature configuration, placement history) and optima, shared by every
    episode on the label set.
    """

    def __init__(self, label_set: LabelSet, *, cache_features: bool = True) -> None:
        self.label_set = label_set
        self.cache_features = cache_features
        self._fcache: dict[tuple[str, FeatureConfig, tuple[int, ...]], list[dict[str, float] | None]] = {}
        tasks = label_set.tasks
        # per-task columns as plain dicts: a run reads them per episode (pandas .at is slow)
        self._repo = dict(zip(tasks["task_id"].astype(str), tasks["repo"].astype(str), strict=True))
        self._granularity = dict(zip(tasks["task_id"].astype(str), tasks["granularity"].astype(str),
                                     strict=True))
        self._nominal = dict(zip(tasks["task_id"].astype(str), tasks["nominal_s"].astype(float),
                                 strict=True))
        self._rec_idx: dict[str, np.ndarray] | None = None
        self._cps_idx: dict[str, np.ndarray] | None = None
        self._costs: dict[tuple[str, HazardSpec], TaskCosts] = {}
        self._optimum: dict[tuple[str, HazardSpec, Budget], tuple[list[int], float]] = {}
        self._xfit: dict[tuple[str, HazardSpec, Budget], tuple[float, bool]] = {}
        self._prior: dict[tuple[str, str], float] = {}
        self._halves: dict[tuple[str, HazardSpec], tuple[TaskCosts, TaskCosts] | None] = {}
        self.sparse = is_sparse(label_set)
        self._completion: Completion | None = None

    def completion(self) -> Completion:
        """A sparse set's cells priced by the cross-fitted recovery model with the
        doubly-robust correction (:func:`labelsets.recovery_model.complete`), computed once."""
        if self._completion is None:
            self._completion = complete(self.label_set)
        return self._completion

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

    def costs(self, task_id: str, hazard: HazardSpec = "uniform") -> TaskCosts:
        """The task's cost arrays with failure weights under ``hazard``."""
        key = (task_id, canonical_hazard(hazard))
        if key not in self._costs:
            if task_id not in self._nominal:
                raise KeyError(f"task {task_id!r} is not in the label set")
            # a sparse set: every cell priced (measured where executed, doubly robust)
            rows = (self.completion().task(task_id) if self.sparse
                    else self._rows("recovery", task_id))
            self._costs[key] = TaskCosts.build(
                task_id, rows, self._rows("checkpoints", task_id), key[1], self._nominal[task_id],
            )
        return self._costs[key]

    def repo_of(self, task_id: str) -> str:
        """The task's repository (KeyError naming an unknown task)."""
        if task_id not in self._repo:
            raise KeyError(f"task {task_id!r} is not in the label set")
        return self._repo[task_id]

    def granularity_of(self, task_id: str) -> str:
        """The boundary granularity the task's recovery table is measured at."""
        if task_id not in self._granularity:
            raise KeyError(f"task {task_id!r} is not in the label set")
        return self._granularity[task_id]

    def features_at(self, task_id: str, boundary: int, history: Sequence[int],
                    config: FeatureConfig | None = None) -> dict[str, float]:
        """Online features at ``boundary`` with checkpoints ``history`` (all before it) marked.

        The episode's prefix walk (:func:`ripplecp_policy.episode.prefix_features`), cached
        per (task, feature configuration, history): every boundary after the history's last
        checkpoint shares one walk. Identical to an uncached episode's walk (a test checks it).
        """
        hist = tuple(int(h) for h in history)
        if hist and hist[-1] >= boundary:
            raise ValueError(f"history {hist} must lie before boundary {boundary}")
        config = config if config is not None else FeatureConfig()
        key = (task_id, config, hist)
        rows = self._fcache.get(key)
        if rows is None:
            rows = prefix_features(self.label_set.trajectories[task_id],
                                   self.costs(task_id).event_index[1:], hist, config)
            if self.cache_features:
                self._fcache[key] = rows
        row = rows[boundary]
        assert row is not None
        return dict(row)

    def optimum(self, task_id: str, budget: Budget, hazard: HazardSpec = "uniform") -> tuple[list[int], float]:
        """The clairvoyant optimum (placement, objective) of the task under ``budget``."""
        key = (task_id, canonical_hazard(hazard), budget)
        if key not in self._optimum:
            self._optimum[key] = optimal_placement(self.costs(task_id, hazard), budget)
        return self._optimum[key]

    def charge_prior(self, task_id: str, budget: Budget) -> float:
        """The estimate of a checkpoint's charge before the task's first: 1 for a count
        budget; else the mean creation seconds (or bytes) of the checkpoints of the label
        set's other repositories (other tasks when there is one repository; 0 when none)."""
        if budget.kind == "count":
            return 1.0
        key = (self._repo.get(task_id, ""), budget.kind)
        if key not in self._prior:
            cps = self.label_set.checkpoints
            col = "creation_s" if budget.kind == "seconds" else "size_bytes"
            repo = cps["task_id"].astype(str).map(self._repo)
            other = cps.loc[repo != key[0], col]
            if other.empty:
                other = cps.loc[cps["task_id"].astype(str) != task_id, col]
            self._prior[key] = float(other.astype(float).mean()) if len(other) else 0.0
        return self._prior[key]

    def half_costs(self, task_id: str, hazard: HazardSpec = "uniform") -> tuple[TaskCosts, TaskCosts] | None:
        """The task's cost arrays with J and restore latency from each half of its
        repetitions (alternate repetitions of every recovery cell, in repetition order);
        None unless every measured cell has >= 2 repetitions. A sparse set's halves are
        its completion's, each half's measurements corrected doubly robustly."""
        key = (task_id, canonical_hazard(hazard))
        if key not in self._halves and self.sparse:
            tc = self.costs(task_id, hazard)
            h = self.completion().halves(task_id)
            cps = self._rows("checkpoints", task_id)
            self._halves[key] = None if h is None else tuple(  # type: ignore[assignment]
                dataclasses.replace(tc, J=TaskCosts.build(task_id, rows, cps, key[1]).J) for rows in h)
        if key not in self._halves:
            tc = self.costs(task_id, hazard)
            rec = self._rows("recovery", task_id)
            ok = ~rec["quarantined"].astype("boolean").fillna(False).to_numpy(dtype=bool)
            rp = rec["restore_point"].to_numpy(dtype=np.int64)[ok]
            k = np.searchsorted(tc.failures, rec["failure"].to_numpy(dtype=np.int64)[ok])
            rep = rec["repetition"].to_numpy(dtype=np.int64)[ok]
            J = rec["cost_s"].astype("Float64").to_numpy(dtype=float, na_value=np.nan)[ok]
            rl = rec["restore_latency_s"].astype("Float64").to_numpy(dtype=float, na_value=np.nan)[ok]
            order = np.lexsort((rep, k, rp))
            rp, k, J, rl = rp[order], k[order], J[order], rl[order]
            cell = rp * (len(tc.failures) + 1) + k
            new_cell = np.r_[True, cell[1:] != cell[:-1]]
            starts = np.flatnonzero(new_cell)
            sizes = np.diff(np.r_[starts, len(cell)])
            rank = np.arange(len(cell)) - np.repeat(starts, sizes)
            halves = None
            if len(cell) and int(sizes.min()) >= 2:
                halves = []
                for h in (0, 1):
                    m = rank % 2 == h
                    arrays = []
                    for vals, full in ((J, tc.J), (rl, tc.restore_latency)):
                        tot, cnt = np.zeros(full.shape), np.zeros(full.shape)
                        fin = m & ~np.isnan(vals)
                        np.add.at(tot, (rp[fin], k[fin]), vals[fin])
                        np.add.at(cnt, (rp[fin], k[fin]), 1.0)
                        with np.errstate(invalid="ignore", divide="ignore"):
                            arrays.append(np.where(cnt > 0, tot / np.maximum(cnt, 1), full))
                    halves.append(dataclasses.replace(tc, J=arrays[0], restore_latency=arrays[1]))
                halves = tuple(halves)
            self._halves[key] = halves  # type: ignore[assignment]
        return self._halves[key]

    def crossfit_optimum(self, task_id: str, budget: Budget, hazard: HazardSpec = "uniform") -> tuple[float, bool]:
        """The honest limit of the task under ``budget``: ``(objective, cross_fitted)``.

        The in-sample optimum is chosen and scored on the same repetitions, so it fits their
        noise. Cross-fitted: the optimum chosen on one half of the repetitions scored on the
        other, both directions averaged. A sparse set without halves (one repetition): the
        optimum chosen on the recovery model fitted on the other repositories, scored on the
        task's doubly-robust prices — unbiased for the placement chosen, since the choice
        reads none of the task's measurements (:meth:`limit_is_model_chosen`); its
        in-sample optimum would pick the cells whose prices came out low by chance (20-30 %
        below the full table's optimum at a quarter of the branches). A full set with fewer
        than 2 repetitions of some cell: the in-sample optimum, with ``cross_fitted`` False."""
        key = (task_id, canonical_hazard(hazard), budget)
        if key not in self._xfit:
            halves = self.half_costs(task_id, hazard)
            if halves is None and self.sparse:
                cps = self._rows("checkpoints", task_id)
                model = TaskCosts.build(task_id, self.completion().model_task(task_id), cps,
                                        canonical_hazard(hazard), self._nominal[task_id])
                chosen, _ = optimal_placement(model, budget)
                self._xfit[key] = (placement_objective(self.costs(task_id, hazard), chosen), True)
            elif halves is None:
                self._xfit[key] = (self.optimum(task_id, budget, hazard)[1], False)
            else:
                a, b = halves
                pa, _ = optimal_placement(a, budget)
                pb, _ = optimal_placement(b, budget)
                self._xfit[key] = (0.5 * (placement_objective(b, pa) + placement_objective(a, pb)), True)
        return self._xfit[key]

    def limit_is_model_chosen(self, task_id: str, hazard: HazardSpec = "uniform") -> bool:
        """Whether the task's limit (:meth:`crossfit_optimum`) is chosen on the recovery
        model rather than on one half of the repetitions."""
        return self.sparse and self.half_costs(task_id, hazard) is None

    def run(
        self, policy: PlacementPolicy, task_id: str, setting: Setting, *,
        granularity: str | None = None, seed: int = 0,
    ) -> Placement:
        """One episode of ``policy`` on ``task_id`` under ``setting``.

        Online policies walk the candidate boundaries 1..B in order with the episode runner:
        at boundary b the prefix walk has seen the nominal trajectory's events up to the
        boundary's event and no further, with the checkpoints taken so far marked; a
        checkpoint whose measured charge (creation seconds, bytes or 1, per the budget) does
        not fit the remaining budget is refused and recorded. Offline policies get
        ``policy.place(costs, budget)`` instead. Unmatched references (every-boundary) run
        with a cap that never binds. A policy fitted under another
        setting is refused (:class:`~ripplecp_policy.policy.SettingMismatchError`).
        """
        if setting.budget is None:
            raise ValueError(f"run: the setting names no budget to run {policy.name} under")
        check_setting(policy, setting)
        tc = self.costs(task_id, setting.hazard)
        task_gran = self.granularity_of(task_id)
        if granularity is not None and granularity != task_gran:
            raise ValueError(
                f"{task_id}: the recovery table is measured at {task_gran!r} boundaries; "
                f"it cannot price {granularity!r} boundaries"
            )
        matched = policy.role is not Role.REFERENCE
        cap = setting.budget if matched else unlimited(setting.budget, tc)
        charge = tc.charges(cap)
        ep = Episode(task_id, self._repo[task_id], cap, prior=self.charge_prior(task_id, cap))
        policy.reset(task_id, seed)
        if policy.role is Role.OFFLINE:
            wanted = policy.place(tc, cap)
            for b in sorted({int(x) for x in wanted}):
                if not 1 <= b <= tc.n_boundaries:
                    raise ValueError(f"{policy.name} placed boundary {b} outside 1..{tc.n_boundaries} on {task_id}")
                ep.offer(b, float(charge[b]))
        else:
            ep.walk(policy.decide, tc, charge, self._feature_source(policy, task_id, setting), policy.name)
        return ep.placement(policy.name, setting, budget_matched=matched, seed=seed,
                            n_boundaries=tc.n_boundaries)

    def _feature_source(self, policy: PlacementPolicy, task_id: str, setting: Setting) -> FeatureSource:
        """Cached prefix features, a live prefix walk, or none (policies that read none)."""
        if not getattr(policy, "uses_features", True):
            return lambda b, history: {}
        if self.cache_features:
            return lambda b, history: self.features_at(task_id, b, history, setting.features)
        return LiveFeatures(self.label_set.trajectories[task_id], self.costs(task_id).event_index[1:],
                            setting.features)

    def score(self, placement: Placement, budget: Budget | None = None) -> dict[str, Any]:
        """Metrics of a placement under its setting's failure model, plus regret to the optimum
        at ``budget`` (default: the cap it ran under — for an unmatched reference, the
        unconstrained optimum), so regret >= 0; and regret to the cross-fitted limit
        (:meth:`crossfit_optimum`; ``limit_in_sample`` 1.0 when there were no halves), which
        may be negative."""
        hazard = placement.setting.hazard
        tc = self.costs(placement.task_id, hazard)
        m = placement_metrics(tc, placement.checkpoints)
        _, opt = self.optimum(placement.task_id, budget or placement.budget, hazard)
        m["optimum_objective_s"] = opt
        m["regret_s"] = m["objective_s"] - opt
        xfit, cross_fitted = self.crossfit_optimum(placement.task_id, budget or placement.budget, hazard)
        m["xfit_optimum_objective_s"] = xfit
        m["xfit_regret_s"] = m["objective_s"] - xfit
        m["limit_in_sample"] = 0.0 if cross_fitted else 1.0
        m["limit_model_chosen"] = 1.0 if self.limit_is_model_chosen(placement.task_id, hazard) else 0.0
        m["spend"] = placement.spend
        m["n_refused"] = float(len(placement.refused))
        return m

    def evaluate(
        self, policy: PlacementPolicy, task_ids: Sequence[str], setting: Setting, *,
        seeds: Sequence[int] = (0,), granularity: str | None = None,
    ) -> pd.DataFrame:
        """One row per task: metrics under ``setting`` averaged over ``seeds`` (stochastic
        policies), the policy's ``role``; the ``checkpoints`` column shows the first seed's
        placement."""
        if len(seeds) == 0:
            raise ValueError("evaluate: give at least one seed")
        budget = setting.budget
        if budget is None:
            raise ValueError(f"evaluate: the setting names no budget to evaluate {policy.name} at")
        rows = []
        for task_id in task_ids:
            per_seed = []
            for s in seeds:
                pl = self.run(policy, task_id, setting, granularity=granularity, seed=s)
                per_seed.append(self.score(pl, budget if pl.budget_matched else None))
                if len(per_seed) == 1:
                    first = pl
            m = {k: float(np.nanmean([d[k] for d in per_seed])) if not all(
                math.isnan(d[k]) for d in per_seed) else math.nan for k in per_seed[0]}
            rows.append(
                dict(
                    task_id=task_id, repo=pl.repo, policy=pl.policy,
                    budget=budget.label(), budget_kind=budget.kind, budget_amount=budget.amount,
                    budget_matched=pl.budget_matched, role=str(policy.role), n_seeds=len(seeds),
                    checkpoints=" ".join(map(str, first.checkpoints)), **m,
                )
            )
        return pd.DataFrame(rows)


_EVALUATORS: list[Evaluator] = []
_EVALUATOR_CACHE_SIZE = 8


def evaluator_for(label_set: LabelSet) -> Evaluator:
    """A shared :class:`Evaluator` for this label set object (small LRU, identity-keyed), so
    tuning inside ``fit`` and evaluation reuse per-task arrays and feature caches."""
    for i, ev in enumerate(_EVALUATORS):
        if ev.label_set is label_set:
            _EVALUATORS.append(_EVALUATORS.pop(i))
            return ev
    ev = Evaluator(label_set)
    _EVALUATORS.append(ev)
    del _EVALUATORS[:-_EVALUATOR_CACHE_SIZE]
    return ev
