"""Training tables for the learned policies, built from a label set by trace replay.

Two things are built here, both from the *measured* tables of a :class:`LabelSet`:

- the advantage table: one row per decision cell (task, candidate t, fallback c-), with the
  online features at t computed with c- as the placement so far (exactly what a runtime
  that checkpointed c- would see at t), and the measured advantage averaged over the
  cell's failures and repetitions (the policy decides at t without knowing the failure);
- replays: :class:`TaskReplay` walks a task's boundaries under any placement with the one
  episode runner (:mod:`ripplecp_policy.episode`), building the :class:`BoundaryObservation`
  the evaluation would hand a policy and pricing the placement with the measured table at
  the one price (:func:`ripplecp_policy.pricing.placement_objective`), never a cost model.

Targets keep the paper's label definition: advantage = J_skip - J_cp with J_cp charged the
candidate's creation time and restore latency recorded apart, not folded in (Section 3);
placements, by contrast, are priced with the restore latency (Appendix F).

Features come from the episode's prefix walk, the one the evaluation uses (so a policy is
trained on the features it will be shown); a different prefix-causal function with
``boundary_features``' signature can be passed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from features.online import FEATURE_NAMES, FeatureConfig
from features.schema import Trajectory
from labelsets.definitions import advantage, charged_cp, stratum
from labelsets.recovery_model import is_sparse
from labelsets.tables import LabelSet
from ripplecp_policy.episode import Episode, charge_estimate, observation, prefix_features
from ripplecp_policy.evaluation import evaluator_for
from ripplecp_policy.policy import (
    BoundaryObservation,
    Budget,
    HazardSpec,
    PlacementPolicy,
    Setting,
    as_setting,
    canonical_hazard,
    check_setting,
)
from ripplecp_policy.pricing import TaskCosts, placement_objective

#: prefixes of the online feature families (paper, Appendix C)
FEATURE_PREFIXES: tuple[str, ...] = ("cost__", "state__", "progress__", "ripple__", "context__")

#: placement-state features every learned policy adds; all are known online
POLICY_FEATURES: tuple[str, ...] = ("policy__boundary", "policy__since_last_cp", "policy__has_cp")

FeatureFn = Callable[..., pd.DataFrame]


_FULL_FRAMES: dict[tuple[int, str, tuple[int, ...]], tuple[Trajectory, pd.DataFrame]] = {}


@dataclass(frozen=True)
class FeatureSubset:
    """A feature function (:data:`FeatureFn`) showing a policy only some feature families
    (the prefixes of :data:`features.row.FAMILIES`): the ablation's instrument.

    It returns :func:`features.online.boundary_features` with the other families' columns
    left out; the full frame is computed once per (trajectory, granularity, placement
    history) and shared by every subset. Immutable, so a clone shares it (``__deepcopy__``
    returns it), which keeps the feature caches keyed on it warm across folds.
    """

    families: tuple[str, ...]

    def __post_init__(self) -> None:
        from features.row import FAMILIES

        bad = [f for f in self.families if f not in FAMILIES]
        if bad or not self.families:
            raise ValueError(f"FeatureSubset: families must be a non-empty subset of {FAMILIES}, "
                             f"got {list(self.families)}")

    def __call__(self, traj: Trajectory, granularity: str = "turn",
                 checkpoints: Iterable[int] = ()) -> pd.DataFrame:
        from features.online import boundary_features

        key = (id(traj), granularity, tuple(int(c) for c in checkpoints))
        hit = _FULL_FRAMES.get(key)
        if hit is None or hit[0] is not traj:
            if len(_FULL_FRAMES) >= _CACHE_MAX:
                _FULL_FRAMES.clear()
            hit = (traj, boundary_features(traj, granularity=granularity, checkpoints=key[2]))
            _FULL_FRAMES[key] = hit
        frame = hit[1]
        keep = [c for c in frame.columns
                if not c.startswith(FEATURE_PREFIXES) or c.split("__", 1)[0] in self.families]
        return frame[keep]

    def __deepcopy__(self, memo: dict[int, Any]) -> FeatureSubset:
        return self

    def label(self) -> str:
        return "+".join(self.families)


def feature_columns(frame: pd.DataFrame) -> list[str]:
    """The online feature columns of a boundary-feature frame, in frame order."""
    return [c for c in frame.columns if c.startswith(FEATURE_PREFIXES)]


def policy_features(boundary: int, last_checkpoint: int) -> dict[str, float]:
    """Placement-state features at ``boundary`` given the last checkpoint (0 = none)."""
    return {
        "policy__boundary": float(boundary),
        "policy__since_last_cp": float(boundary - last_checkpoint),
        "policy__has_cp": float(last_checkpoint > 0),
    }


def observation_vector(obs: BoundaryObservation, names: Sequence[str]) -> np.ndarray:
    """The model input for an observation: ``names`` looked up in features + policy state."""
    extra = policy_features(obs.boundary, obs.last_checkpoint)
    out = np.empty(len(names), dtype=np.float64)
    feats = obs.features
    for i, n in enumerate(names):
        v = extra[n] if n in extra else feats.get(n, np.nan)
        out[i] = np.nan if v is None else float(v)
    return out


_CACHE: dict[tuple[int, str, int, FeatureConfig],
             tuple[Trajectory, FeatureFn | None, dict[tuple[int, ...], Any]]] = {}
_CACHE_MAX = 20_000


def _frames_for(
    traj: Trajectory, granularity: str, feature_fn: FeatureFn | None, config: FeatureConfig
) -> dict[tuple[int, ...], Any]:
    """Per-trajectory feature frames, shared by every replay of the same trajectory object.

    Splits and tuning build many :class:`TaskReplay` objects over subsets of one label set
    (``LabelSet.subset`` keeps the trajectory objects), so features are computed once per
    (trajectory, feature configuration, placement history).
    """
    key = (id(traj), granularity, id(feature_fn), config)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is traj and hit[1] is feature_fn:
        return hit[2]
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.clear()
    frames: dict[tuple[int, ...], Any] = {}
    _CACHE[key] = (traj, feature_fn, frames)
    return frames


class TaskReplay:
    """One task's trajectory and measured cost arrays, replayable under any placement.

    Replays run the one episode runner (:class:`ripplecp_policy.episode.Episode`) on the
    task's :class:`~ripplecp_policy.pricing.TaskCosts`, the same arrays and the same walk the
    matched-budget evaluation uses. Features at boundary b depend only on checkpoints before
    b (prefix causality), so a frame computed for a history serves every boundary after its
    last checkpoint; frames are cached by history.
    """

    def __init__(
        self,
        data: LabelSet,
        task_id: str,
        setting: Setting | None = None,
        feature_fn: FeatureFn | None = None,
    ):
        setting = as_setting(setting)
        self.task_id = task_id
        self.setting = setting
        ev = evaluator_for(data)  # the label set's shared per-task arrays (one build per hazard)
        self._evaluator = ev
        self.repo = ev.repo_of(task_id)
        self.granularity = ev.granularity_of(task_id)
        self.trajectory: Trajectory = data.trajectories[task_id]
        self.costs = ev.costs(task_id, setting.hazard)
        self.n_boundaries = self.costs.n_boundaries
        self.event_index = {b: int(self.costs.event_index[b]) for b in range(1, self.n_boundaries + 1)}
        self.failures = [int(f) for f in self.costs.failures]
        self._feature_fn = feature_fn
        self._frames = _frames_for(self.trajectory, self.granularity, feature_fn, setting.features)
        self.feature_names: list[str] | None = None

    def _frame(self, history: tuple[int, ...]) -> tuple[list[str], np.ndarray]:
        frame = self._frames.get(history)
        if frame is None:
            frame = self._compute(history)
            self._frames[history] = frame
        if self.feature_names is None:
            self.feature_names = frame[0]
        return frame

    def _compute(self, history: tuple[int, ...]) -> tuple[list[str], np.ndarray]:
        """Features at every boundary with checkpoints ``history``: row b = boundary b."""
        if self._feature_fn is None:
            # the episode's own prefix walk: identical features to the evaluation's by construction
            rows = prefix_features(self.trajectory, self.costs.event_index[1:], history,
                                   self.setting.features)
            names = list(FEATURE_NAMES)
            arr = np.full((self.n_boundaries + 1, len(names)), np.nan)
            for b, r in enumerate(rows):
                if r is not None:
                    arr[b] = list(r.values())
            return names, arr
        raw = self._feature_fn(self.trajectory, granularity=self.granularity, checkpoints=history)
        if "boundary" not in raw.columns:
            raise ValueError(f"{self.task_id}: feature frame lacks a 'boundary' column")
        names = feature_columns(raw)
        if len(raw) < self.n_boundaries:
            raise ValueError(
                f"{self.task_id}: feature frame has {len(raw)} boundaries, "
                f"checkpoints table has {self.n_boundaries} (granularity {self.granularity!r})"
            )
        arr = np.full((self.n_boundaries + 1, len(names)), np.nan)
        b = raw["boundary"].to_numpy(dtype=int)
        keep = (b >= 1) & (b <= self.n_boundaries)
        arr[b[keep]] = raw.loc[keep, names].to_numpy(dtype=float)
        return names, arr

    def features_at(self, boundary: int, history: Iterable[int]) -> dict[str, float]:
        """Online features at ``boundary`` with checkpoints ``history`` (those before it)."""
        key = tuple(sorted(h for h in history if h < boundary))
        names, arr = self._frame(key)
        return dict(zip(names, arr[boundary].tolist(), strict=True))

    def observation(
        self, boundary: int, history: Sequence[int], budget: Budget, spent: float = 0.0
    ) -> BoundaryObservation:
        """What the episode runner hands a policy at ``boundary`` with ``spent`` of the budget
        used by ``history`` (costs from the measured table)."""
        return observation(
            self.task_id, self.repo, boundary, event_index=self.event_index[boundary],
            features=self.features_at(boundary, history), cap=budget, spent=spent,
            history=list(history), elapsed_s=float(self.costs.nominal_t[boundary]),
            charge=self.charge(boundary, budget),
            estimate=charge_estimate([self.charge(h, budget) for h in history],
                                     self.charge_prior(budget)),
        )

    def charge_prior(self, budget: Budget) -> float:
        """The charge estimate before the task's first checkpoint (the training label set's
        other repositories: :meth:`Evaluator.charge_prior`)."""
        return self._evaluator.charge_prior(self.task_id, budget)

    def charge(self, boundary: int, budget: Budget) -> float:
        """What a checkpoint at ``boundary`` costs in the budget's unit."""
        return budget.charge(float(self.costs.creation_s[boundary]), float(self.costs.size_bytes[boundary]))

    def expected_cost(self, placement: Iterable[int]) -> float:
        """E_f[creation before f + restore latency + J(last, f)] from the measured table.

        The one price (:func:`labelsets.definitions.failure_cost`) and the objective the
        matched-budget evaluation and the clairvoyant optimum use
        (:func:`ripplecp_policy.pricing.placement_objective`); NaN when a needed cell was
        never measured.
        """
        return float(placement_objective(self.costs, sorted(set(placement))))

    def replay(
        self,
        decide: Callable[[BoundaryObservation], bool],
        budget: Budget,
        *,
        trace: list[BoundaryObservation] | None = None,
    ) -> list[int]:
        """Walk boundaries 1..B in order, asking ``decide``; the episode enforces the budget.
        ``trace`` (a list) receives every observation shown."""
        if trace is not None:
            shown, ask = trace, decide

            def decide(obs: BoundaryObservation) -> bool:
                shown.append(obs)
                return ask(obs)

        ep = Episode(self.task_id, self.repo, budget, prior=self.charge_prior(budget))
        ep.walk(decide, self.costs, self.costs.charges(budget), self.features_at)
        return ep.taken


def replays(
    data: LabelSet, setting: Setting | None = None, feature_fn: FeatureFn | None = None
) -> dict[str, TaskReplay]:
    """A :class:`TaskReplay` per task of ``data`` under ``setting``'s failure model and
    features, keyed by task id, in task order."""
    return {t: TaskReplay(data, t, setting, feature_fn) for t in data.task_ids}


def run_policy(
    policy: PlacementPolicy, task: TaskReplay, budget: Budget, seed: int = 0
) -> list[int]:
    """The placement ``policy`` chooses on ``task`` (reset with ``seed``) under ``budget`` and
    the task's failure model and features; a policy fitted under another setting is refused."""
    check_setting(policy, task.setting.with_budget(budget))
    policy.reset(task.task_id, seed)
    return task.replay(policy.decide, budget)


def first_boundary_placement(task: TaskReplay, budget: Budget) -> list[int]:
    """The rule the decomposition implies: spend the budget on the earliest boundaries."""
    return task.replay(lambda obs: True, budget)


@dataclass
class AdvantageTable:
    """Decision cells with features, target and groups: what the advantage models fit."""

    frame: pd.DataFrame
    feature_names: list[str]
    repos: set[str] = field(default_factory=set)

    @property
    def X(self) -> np.ndarray:
        return self.frame[self.feature_names].to_numpy(dtype=np.float64)

    @property
    def y(self) -> np.ndarray:
        return self.frame["advantage"].to_numpy(dtype=np.float64)

    @property
    def groups(self) -> np.ndarray:
        return self.frame["repo"].to_numpy()

    def subset_repos(self, repos: Iterable[str]) -> AdvantageTable:
        keep = set(repos)
        sub = self.frame[self.frame["repo"].isin(keep)].reset_index(drop=True)
        return AdvantageTable(sub, self.feature_names, set(sub["repo"]))


def advantage_table(
    data: LabelSet,
    tasks: dict[str, TaskReplay] | None = None,
    *,
    feature_fn: FeatureFn | None = None,
    verified_only: bool = False,
    hazard: HazardSpec = "uniform",
) -> AdvantageTable:
    """One row per (task, candidate, fallback): features at the candidate, mean advantage.

    Under a failure model other than ``"uniform"`` (e.g. ``"duration"``) the target weights
    each failure by the hazard (the weights of the replays' cost arrays, which must be
    built under that failure model): the mean over a cell's pairs becomes the
    hazard-weighted mean over its failures (pairs of one failure averaged first).

    The target is the mean paired advantage of the cell's CP/SKIP pairs (the paper's label:
    J_skip - J_cp, J_cp charged the creation time, restore latency not folded in; see
    :mod:`labelsets.definitions`). Quarantined pairs
    are excluded (they stay in the label set, never used as targets). A label set with no
    pairs but full recovery tables (a harness ``full`` design) yields table-derived
    targets instead: for every c- < t, the mean over measured failures f > t of
    J(c-, f) - J(t, f) - C(t), each J a mean over executed repetitions; the frame's
    ``target_source`` column says which was used.
    """
    labels = data.labels
    ok = ~labels["quarantined"].fillna(False).astype(bool)
    if verified_only:
        ok &= labels["verified"].fillna(False).astype(bool)
    labels = labels[ok]
    weighted = canonical_hazard(hazard) != "uniform"
    tasks = tasks if tasks is not None else replays(data, Setting(hazard=hazard), feature_fn=feature_fn)
    if weighted:
        bad = [t for t, r in tasks.items() if r.setting.hazard != canonical_hazard(hazard)]
        if bad:
            raise ValueError(f"advantage_table: replays of {bad[0]!r} are not under hazard {hazard!r}")
    source = "pairs"
    if labels.empty:
        labels = table_labels(data, verified_only=verified_only, tasks=tasks if weighted else None)
        source = "recovery_table"
    elif weighted:
        # one row per (cell, failure): the mean over its repetitions, weighted by the hazard
        w = [_failure_weight(tasks[t].costs, int(f)) for t, f in zip(labels["task_id"], labels["failure"], strict=True)]
        labels = (labels.assign(_w=w)
                  .groupby(["task_id", "candidate", "fallback", "failure"], sort=True)
                  .agg(repo=("repo", "first"), stratum=("stratum", "first"), advantage=("advantage", "mean"),
                       creation_s=("creation_s", "mean"), protected_work_s=("protected_work_s", "mean"),
                       _w=("_w", "first"))
                  .reset_index())
        tot = labels.groupby(["task_id", "candidate", "fallback"])["_w"].transform("sum")
        labels["advantage"] = labels["advantage"] * labels["_w"] / tot
    if labels.empty:
        raise ValueError("labels: no usable (non-quarantined) pairs, and no full recovery "
                         "table to derive advantage targets from")
    cells = (
        labels.groupby(["task_id", "candidate", "fallback"], sort=True)
        .agg(
            repo=("repo", "first"),
            stratum=("stratum", "first"),
            advantage=("advantage", "sum" if weighted and source == "pairs" else "mean"),
            n_labels=("advantage", "size"),
            creation_s=("creation_s", "mean"),
            protected_work_s=("protected_work_s", "mean"),
        )
        .reset_index()
    )
    rows = []
    names: list[str] | None = None
    for rec in cells.to_dict("records"):
        task = tasks[rec["task_id"]]
        t, c = int(rec["candidate"]), int(rec["fallback"])
        hist = (c,) if c > 0 else ()
        feats = task.features_at(t, hist)
        if names is None:
            names = list(feats) + list(POLICY_FEATURES)
        rows.append({**rec, **feats, **policy_features(t, c), "target_source": source})
    assert names is not None
    frame = pd.DataFrame(rows)
    missing = [n for n in names if n not in frame.columns]
    if missing:
        raise ValueError(f"feature frames disagree across tasks: {missing[:5]} missing")
    frame[names] = frame[names].astype(float)
    return AdvantageTable(frame, names, set(frame["repo"]))


def _failure_weight(costs: TaskCosts, failure: int) -> float:
    """The failure model's weight of ``failure`` in a task's cost arrays."""
    k = np.flatnonzero(costs.failures == failure)
    return float(costs.weights[k[0]]) if k.size else 0.0


def table_labels(data: LabelSet, *, verified_only: bool = False,
                 tasks: dict[str, TaskReplay] | None = None) -> pd.DataFrame:
    """Cell targets derived from full recovery tables (no pairs needed); see ``advantage_table``.
    With ``tasks`` the mean over failures is weighted by their cost arrays' failure weights."""
    rows = []
    verified = data.tasks.set_index("task_id")["verified"]
    sparse = is_sparse(data)
    for tid in data.task_ids:
        if verified_only and not bool(verified.get(tid, False)):
            continue
        if sparse:  # every cell priced by the completed table (labelsets.recovery_model)
            costs = tasks[tid].costs if tasks is not None else evaluator_for(data).costs(tid)
            rows += _completed_targets(data.repo_of(tid), costs, weighted=tasks is not None)
            continue
        rt = data.recovery_table(tid)
        if not rt.is_full() or not rt.failures:
            continue
        for t in range(1, rt.n_boundaries + 1):
            fs = [f for f in rt.failures if f > t]
            if not fs:
                continue
            w = None if tasks is None else np.array([_failure_weight(tasks[tid].costs, f) for f in fs])
            for c in range(t):
                adv = [rt.advantage(t, c, f) for f in fs]
                rows.append(dict(
                    task_id=tid, candidate=t, fallback=c, repo=data.repo_of(tid),
                    stratum=stratum(c),
                    advantage=float(np.mean(adv)) if w is None or w.sum() <= 0
                    else float(np.dot(w, adv) / w.sum()),
                    creation_s=rt.creation_s(t), protected_work_s=rt.nominal_t(t) - rt.nominal_t(c),
                ))
    return pd.DataFrame(rows)


def _completed_targets(repo: str, costs: TaskCosts, *, weighted: bool) -> list[dict[str, Any]]:
    """:func:`table_labels`' rows of one task of a sparse set, from its completed cost arrays:
    for every c- < t, the mean over failures f > t of J(c-, f) - J(t, f) - C(t)."""
    rows = []
    fs = costs.failures
    for t in range(1, costs.n_boundaries + 1):
        ks = np.flatnonzero(fs > t)
        if not ks.size:
            continue
        w = costs.weights[ks] if weighted else np.ones(ks.size)
        for c in range(t):
            adv = advantage(costs.J[c, ks], charged_cp(costs.J[t, ks], costs.creation_s[t]))
            rows.append(dict(
                task_id=costs.task_id, candidate=t, fallback=c, repo=repo, stratum=stratum(c),
                advantage=float(np.mean(adv)) if w.sum() <= 0 else float(np.dot(w, adv) / w.sum()),
                creation_s=float(costs.creation_s[t]),
                protected_work_s=float(costs.nominal_t[t] - costs.nominal_t[c]),
            ))
    return rows
