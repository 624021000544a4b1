"""The recovery model: prices the cells of a recovery table that a sparse design did not execute.

A ``full`` design executes every table cell (restore point r, failure f), r < f: B(B+1)/2
cells per task. A **sparse design** executes a stated number of them, drawn by a frozen rule
with known inclusion probabilities, and prices the rest from a model:

- **Strata** (:func:`cell_stratum`): ``pristine`` (r = 0, the no-checkpoint cost of every
  failure), ``adjacent`` (r = f-1, the redo of the failed segment alone) and ``long`` (every
  longer jump 0 < r < f-1). The study's cell budget is shared between them
  (:class:`SparseDesign`: ``shares``, by default half pristine, a quarter each; a stratum's
  unused share goes to the others), and each stratum's cells are a simple random sample of
  that stratum over the whole study, so every cell of stratum s has the same, known
  inclusion probability pi_s = k_s / N_s > 0 (recorded in the label set's provenance).
- **Model** (:class:`RecoveryModel`): J(r, f) regressed, with scikit-learn's histogram
  gradient boosting, on the cell's position and nominal timing, the checkpoint's measured
  costs, the online features (:mod:`features.online`) of the work between r and f (a prefix
  walk with a checkpoint at r, read at boundary f) and the task's own executed cells that
  identify additive re-derivation (J(0, f), J(0, r+1), J(r, r+1), J(f-1, f) and
  J(0, f) - J(0, r+1) + J(r, r+1), which equals J(r, f) when recovery re-derives each step
  at a fixed cost) - the task effects, missing when not executed (the cell's own value is
  never one of its inputs). It is **never fitted on the repository it prices**: the cells of
  repository k are predicted by a model fitted on the other repositories of the label set
  (cross-fitting; tasks are the groups when there is one repository).
- **Doubly-robust price** (:func:`complete`): every cell gets
  ``m + S (Y - m) / pi`` (augmented inverse-probability weighting), m the cross-fitted
  prediction, S whether the cell was executed, Y its mean measured cost and pi its inclusion
  probability. Any placement's price is linear in the cells it uses, so it is unbiased over
  the design's draw whatever the model's error (the model only sets the variance); cells
  executed with certainty (pi = 1, e.g. a full design) keep their measurement.

Adaptive cells (chosen after a first pass, :func:`next_cells`) are executed with certainty
given the data seen, so they keep their measurement, and the random sample of their stratum
is then read as a sample of the stratum's other cells (pi_s = k_s / (N_s - a_s)).

A quarantined branch is not a measurement: its cell counts as not executed (its stratum's
inclusion probability then overstates the share measured; ``oracle audit`` names them).
With one repository (a training fold of a two-repository family) tasks are the groups.
Executed cells with pi < 1 can be priced below zero (the correction of a cell measured below
its prediction, scaled by 1/pi): an unbiased price, not a plausible single recovery.

Uncertainty: the model is cross-fitted and the price doubly robust, so a per-task price is
a sum of a cross-fitted prediction and an unbiased correction; the task (two-stage) bootstrap
of the per-task prices is the usual cross-fitted (double machine learning) interval.
``python -m experiments.design_check`` measures that these intervals cover the full-table
truth (ripplecp_policy does the bootstrap; this module only prices).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, RegressorMixin, clone
from threadpoolctl import threadpool_limits

from features.online import FEATURE_NAMES, PrefixWalk
from labelsets.definitions import table_cell_id
from labelsets.tables import LabelSet, empty

__all__ = [
    "ADAPTIVE_CRITERION", "PRISTINE", "ADJACENT", "LONG", "CELL_STRATA", "SPARSE", "RecoveryModel", "SparseDesign",
    "cell_features", "cell_stratum", "complete", "inclusion", "is_sparse", "next_cells",
    "sparse_provenance", "subsample", "table_cells",
]

SPARSE = "sparse"
PRISTINE, ADJACENT, LONG = "pristine", "adjacent", "long"
#: the sparse design's strata of table cells, in allocation order
CELL_STRATA: tuple[str, str, str] = (PRISTINE, ADJACENT, LONG)
#: the sparse design's rule, as recorded in its plans and label sets
SPARSE_RULE = (
    "stratified: the study's table cells split into pristine (r=0), adjacent (r=f-1) and long "
    "(0<r<f-1); a budget of n cells is shared by `shares` (a full stratum's excess goes to the "
    "others, largest remainders first); each stratum's cells are a simple random sample over "
    "the whole study, drawn from the study seed; inclusion probability pi_s = k_s / N_s"
)


def cell_stratum(r: int, f: int) -> str:
    """``pristine`` (r = 0), ``adjacent`` (r = f-1 > 0) or ``long`` (0 < r < f-1)."""
    if not 0 <= r < f:
        raise ValueError(f"need 0 <= r < f, got r={r}, f={f}")
    return PRISTINE if r == 0 else ADJACENT if r == f - 1 else LONG


def table_cells(n_boundaries: int, include_final: bool = False) -> list[tuple[int, int]]:
    """Every (r, f) a full design executes: f = 1..B (B+1 with ``include_final``), r < f."""
    top = int(n_boundaries) + (1 if include_final else 0)
    return [(r, f) for f in range(1, top + 1) for r in range(f)]


@dataclass(frozen=True)
class SparseDesign:
    """The sparse design's rule (module docstring): how a cell budget is shared by the strata.

    ``shares``: the budget's shares for pristine, adjacent and long cells; ``repetitions``:
    branches per chosen cell; ``include_final``: also the segment after the last boundary.
    """

    shares: tuple[float, float, float] = (0.5, 0.25, 0.25)
    repetitions: int = 1
    include_final: bool = False

    def __post_init__(self) -> None:
        if len(self.shares) != 3 or any(not (s >= 0 and math.isfinite(s)) for s in self.shares) \
                or sum(self.shares) <= 0:
            raise ValueError(f"shares must be three finite numbers >= 0, not all 0, got {self.shares}")
        if self.repetitions < 1:
            raise ValueError(f"repetitions must be >= 1, got {self.repetitions}")

    def population(self, n_boundaries: Mapping[str, int]) -> dict[str, list[tuple[str, int, int]]]:
        """Every table cell (task, r, f) of the study, by stratum, in task order."""
        out: dict[str, list[tuple[str, int, int]]] = {s: [] for s in CELL_STRATA}
        for tid, b in n_boundaries.items():
            for r, f in table_cells(b, self.include_final):
                out[cell_stratum(r, f)].append((tid, r, f))
        return out

    def cells_for_branches(self, branches: int) -> int:
        """Cells a budget of ``branches`` buys (whole cells of ``repetitions`` branches)."""
        return int(branches) // self.repetitions

    def choose(self, n_boundaries: Mapping[str, int], n_cells: int, seed: int
               ) -> tuple[list[tuple[str, int, int]], dict[str, float]]:
        """The cells a budget of ``n_cells`` executes, in population order, and each
        stratum's inclusion probability. Deterministic in ``seed``."""
        if n_cells < 0:
            raise ValueError(f"n_cells must be >= 0, got {n_cells}")
        pop = self.population(n_boundaries)
        sizes = {s: len(pop[s]) for s in CELL_STRATA}
        alloc = _allocate(n_cells, sizes, dict(zip(CELL_STRATA, self.shares, strict=True)))
        chosen: list[tuple[str, int, int]] = []
        probs: dict[str, float] = {}
        for i, s in enumerate(CELL_STRATA):
            rng = np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(0x5A, i)))
            k, n = alloc[s], sizes[s]
            pick = np.sort(rng.choice(n, size=k, replace=False)) if k else np.zeros(0, dtype=int)
            chosen += [pop[s][j] for j in pick]
            probs[s] = k / n if n else 1.0
        order = {c: i for i, c in enumerate(c for s in CELL_STRATA for c in pop[s])}
        return sorted(chosen, key=order.__getitem__), probs


def _allocate(n: int, sizes: Mapping[str, int], shares: Mapping[str, float]) -> dict[str, int]:
    """Share ``n`` among the strata by ``shares``, capped by their sizes; what a full stratum
    cannot take goes to the others; remainders to the largest fractional parts."""
    alloc = dict.fromkeys(sizes, 0)
    left = min(int(n), sum(sizes.values()))
    while left > 0:
        room = [s for s in sizes if alloc[s] < sizes[s]]
        weighted = [s for s in room if shares[s] > 0]
        open_ = weighted or room
        w = np.array([shares[s] if weighted else 1.0 for s in open_], dtype=float)
        raw = left * w / w.sum()
        give = np.floor(raw).astype(int)
        give[np.argsort(-(raw - give), kind="stable")[: left - int(give.sum())]] += 1
        for s, g in zip(open_, give, strict=True):
            take = min(int(g), sizes[s] - alloc[s])
            alloc[s] += take
            left -= take
    return alloc


def sparse_provenance(design: SparseDesign, probs: Mapping[str, float], n_cells: int,
                      adaptive: Sequence[str] = ()) -> dict[str, Any]:
    """The ``provenance["sparse"]`` record a sparse label set carries (what :func:`inclusion`
    reads): the rule, shares, repetitions, the strata's inclusion probabilities, the cell
    budget, and the ids of cells chosen adaptively."""
    return {"rule": SPARSE_RULE, "shares": list(design.shares), "repetitions": design.repetitions,
            "include_final": design.include_final, "inclusion": {s: float(probs[s]) for s in CELL_STRATA},
            "n_cells": int(n_cells), "adaptive": sorted(adaptive)}


def is_sparse(label_set: LabelSet) -> bool:
    """True for a label set of the sparse design (its provenance names it)."""
    return label_set.provenance.get("design") == SPARSE and "sparse" in label_set.provenance


def inclusion(label_set: LabelSet) -> Any:
    """``pi(task_id, r, f)``: the probability the design executed cell (r, f) of the task.

    A full (non-sparse) set executes every cell: 1. A sparse set: 1 for an adaptive cell,
    else its stratum's probability, read as a sample of the stratum's cells that were not
    chosen adaptively (pi_s = k_s / (N_s - a_s)), 0 for a cell of an empty draw."""
    if not is_sparse(label_set):
        return lambda task_id, r, f: 1.0
    rec = label_set.provenance["sparse"]
    adaptive = set(rec.get("adaptive") or ())
    probs = {s: float(rec["inclusion"][s]) for s in CELL_STRATA}
    design = SparseDesign(tuple(rec["shares"]), int(rec["repetitions"]), bool(rec["include_final"]))
    nb = dict(zip(label_set.tasks["task_id"], label_set.tasks["n_boundaries"].astype(int), strict=True))
    sizes = {s: len(c) for s, c in design.population(nb).items()}
    # the probabilities were drawn over the whole study: a subset keeps them (the draw is
    # the study's); adaptive cells of the subset only shift their own stratum's denominator
    n_adaptive = dict.fromkeys(CELL_STRATA, 0)
    for cid in adaptive:
        tid, r, f = _parse_cell(cid)
        if tid in nb:
            n_adaptive[cell_stratum(r, f)] += 1
    adj = {}
    for s in CELL_STRATA:
        k = probs[s] * sizes[s]
        rest = sizes[s] - n_adaptive[s]
        adj[s] = min(1.0, k / rest) if rest > 0 and probs[s] > 0 else probs[s]

    def pi(task_id: str, r: int, f: int) -> float:
        if table_cell_id(task_id, r, f) in adaptive:
            return 1.0
        return adj[cell_stratum(r, f)]

    return pi


def _parse_cell(cid: str) -> tuple[str, int, int]:
    tid, r, f = cid.rsplit(":", 2)
    return tid, int(r[1:]), int(f[1:])


# ---------------------------------------------------------------------------------------
# cell features
# ---------------------------------------------------------------------------------------

#: the online features the model reads (the work between r and f: since-checkpoint counts)
MODEL_FEATURES: tuple[str, ...] = tuple(
    n for n in FEATURE_NAMES
    if n.endswith("_since_cp") or n in ("ripple__new_descendant_count", "ripple__segment_nodes",
                                        "ripple__edges_from_past", "ripple__frontier_size",
                                        "state__live_files", "context__step"))
#: the task's own executed cells used as inputs (task effects); NaN when not executed
OWN_CELLS: tuple[str, ...] = ("own__j0f", "own__j0r1", "own__jadj_r", "own__jadj_f", "own__additive",
                              "own__rate")
STATIC: tuple[str, ...] = ("r", "f", "gap", "n_boundaries", "is_pristine", "is_adjacent",
                           "t_r", "t_f1", "lost_s", "segment_s", "creation_r", "log_size_r",
                           "restore_r", "nominal_s")

_STATIC_CACHE: dict[tuple[str, int, bool], tuple[Any, pd.DataFrame]] = {}
_CACHE_MAX = 4096


def _static_frame(label_set: LabelSet, task_id: str, include_final: bool) -> pd.DataFrame:
    """Cells of one task with their position, timing, checkpoint and online features."""
    traj = label_set.trajectories[task_id]
    key = (task_id, id(traj), include_final)
    hit = _STATIC_CACHE.get(key)
    if hit is not None and hit[0] is traj:
        return hit[1]
    cps = label_set.checkpoints[label_set.checkpoints["task_id"] == task_id].sort_values("boundary")
    b = len(cps)
    task = label_set.tasks.loc[label_set.tasks["task_id"] == task_id].iloc[0]
    t_nom = np.concatenate([[0.0], cps["nominal_t_s"].to_numpy(float)])
    creation = np.concatenate([[0.0], cps["creation_s"].to_numpy(float)])
    size = np.concatenate([[0.0], cps["size_bytes"].to_numpy(float)])
    restore = np.concatenate([[0.0], cps["restore_latency_s"].astype("Float64").to_numpy(float, na_value=np.nan)])
    nominal_s = float(task["nominal_s"])
    events = cps["event_index"].to_numpy(np.int64)
    # online features of the work since restore point r, read at boundary g (g > r)
    walks: dict[int, list[dict[str, float] | None]] = {}
    for r in range(b + 1):
        walk = PrefixWalk(traj, events)
        rows: list[dict[str, float] | None] = [None] * (b + 1)
        for g in range(1, b + 1):
            walk.advance(g)
            if g > r:
                feats = walk.features()
                rows[g] = {n: float(feats.get(n, np.nan)) for n in MODEL_FEATURES}
            if g == r:
                walk.extractor.mark_checkpoint()
        walks[r] = rows
    recs = []
    for r, f in table_cells(b, include_final):
        g = min(f, b)
        seg_end = t_nom[f] if f <= b else (nominal_s if math.isfinite(nominal_s) else t_nom[b])
        feats = walks[r][g] if g > r else None
        recs.append({
            "r": r, "f": f, "gap": f - r, "n_boundaries": b, "is_pristine": float(r == 0),
            "is_adjacent": float(r == f - 1), "t_r": t_nom[r], "t_f1": t_nom[f - 1],
            "lost_s": t_nom[f - 1] - t_nom[r], "segment_s": seg_end - t_nom[f - 1],
            "creation_r": creation[r], "log_size_r": math.log1p(size[r]),
            "restore_r": restore[r], "nominal_s": nominal_s,
            **(feats or dict.fromkeys(MODEL_FEATURES, np.nan)),
        })
    frame = pd.DataFrame(recs, columns=[*STATIC, *MODEL_FEATURES])
    if len(_STATIC_CACHE) >= _CACHE_MAX:
        _STATIC_CACHE.clear()
    _STATIC_CACHE[key] = (traj, frame)
    return frame


def _observed(label_set: LabelSet) -> pd.DataFrame:
    """Executed cells: mean cost, repetitions, half means (alternate repetitions) and the
    means of restore latency, verified, tokens and tool calls (quarantined branches out)."""
    rec = label_set.recovery
    ok = rec[~rec["quarantined"].astype("boolean").fillna(False).to_numpy(dtype=bool)]
    if ok.empty:
        return pd.DataFrame(columns=["task_id", "r", "f", "y", "n", "y_h0", "y_h1", "rl", "verified",
                                     "tokens", "tool_calls"])
    ok = ok.sort_values(["task_id", "restore_point", "failure", "repetition"], kind="stable")
    num = pd.DataFrame({
        "task_id": ok["task_id"].to_numpy(), "r": ok["restore_point"].to_numpy(np.int64),
        "f": ok["failure"].to_numpy(np.int64), "cost": ok["cost_s"].to_numpy(float),
        "rl": ok["restore_latency_s"].astype("Float64").to_numpy(float, na_value=np.nan),
        "verified": ok["verified"].astype("Float64").to_numpy(float, na_value=np.nan),
        "tokens": ok["tokens"].astype("Float64").to_numpy(float, na_value=np.nan),
        "tool_calls": ok["tool_calls"].astype("Float64").to_numpy(float, na_value=np.nan),
    })
    num["rank"] = num.groupby(["task_id", "r", "f"]).cumcount()
    num["c0"] = num["cost"].where(num["rank"] % 2 == 0)
    num["c1"] = num["cost"].where(num["rank"] % 2 == 1)
    g = num.groupby(["task_id", "r", "f"], sort=True)
    out = g.agg(y=("cost", "mean"), n=("cost", "size"), y_h0=("c0", "mean"), y_h1=("c1", "mean"),
                rl=("rl", "mean"), verified=("verified", "mean"), tokens=("tokens", "mean"),
                tool_calls=("tool_calls", "mean")).reset_index()
    return out


def cell_features(label_set: LabelSet, task_ids: Iterable[str] | None = None) -> pd.DataFrame:
    """Every table cell of the tasks (default: all) with the model's inputs, its stratum,
    the measured mean ``y`` (NaN when not executed), repetitions ``n`` and half means.

    The task-effect inputs (:data:`OWN_CELLS`) of a cell are read from the task's *other*
    executed cells, never from the cell itself."""
    include_final = bool((label_set.provenance.get("sparse") or {}).get("include_final", False))
    ids = list(label_set.task_ids if task_ids is None else task_ids)
    obs = _observed(label_set)
    by_task = {t: g for t, g in obs.groupby("task_id", sort=False)} if len(obs) else {}
    repo = dict(zip(label_set.tasks["task_id"], label_set.tasks["repo"], strict=True))
    frames = []
    for tid in ids:
        static = _static_frame(label_set, tid, include_final)
        f_max = int(static["f"].max()) if len(static) else 0
        o = by_task.get(tid)
        if o is not None and len(o) and int(o["f"].max()) > f_max:  # a set measured past B
            static = _static_frame(label_set, tid, True)
        fr = static.copy()
        fr.insert(0, "task_id", tid)
        fr.insert(1, "repo", repo[tid])
        fr["stratum"] = [cell_stratum(int(r), int(f)) for r, f in zip(fr["r"], fr["f"], strict=True)]
        if o is not None and len(o):
            fr = fr.merge(o.drop(columns="task_id"), on=["r", "f"], how="left")
        else:
            for c in ("y", "n", "y_h0", "y_h1", "rl", "verified", "tokens", "tool_calls"):
                fr[c] = np.nan
        fr["n"] = fr["n"].fillna(0).astype(int)
        _own_cells(fr)
        frames.append(fr)
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True)


def _own_cells(fr: pd.DataFrame) -> None:
    """Fill :data:`OWN_CELLS` of one task's frame in place (the cell itself masked)."""
    y = {(int(r), int(f)): v for r, f, v in zip(fr["r"], fr["f"], fr["y"], strict=True) if v == v}
    work = (fr["lost_s"] + fr["segment_s"]).to_numpy(float)
    rate = {(int(r), int(f)): v / w for (r, f, v, w) in zip(fr["r"], fr["f"], fr["y"], work, strict=True)
            if v == v and w > 0}
    cols: dict[str, list[float]] = {c: [] for c in OWN_CELLS}
    for r, f in zip(fr["r"].astype(int), fr["f"].astype(int), strict=True):
        def get(rr: int, ff: int, r: int = r, f: int = f) -> float:
            return np.nan if (rr, ff) == (r, f) else y.get((rr, ff), np.nan)

        j0f, j0r1 = get(0, f), (get(0, r + 1) if r >= 1 else 0.0)
        jadj_r = get(r, r + 1) if r >= 1 else get(0, 1)
        cols["own__j0f"].append(j0f)
        cols["own__j0r1"].append(j0r1)
        cols["own__jadj_r"].append(jadj_r)
        cols["own__jadj_f"].append(get(f - 1, f))
        cols["own__additive"].append(j0f - j0r1 + jadj_r if r >= 1 else np.nan)
        others = [v for k, v in rate.items() if k != (r, f)]
        cols["own__rate"].append(float(np.mean(others)) if others else np.nan)
    for c, v in cols.items():
        fr[c] = v


# ---------------------------------------------------------------------------------------
# the model and the doubly-robust completion
# ---------------------------------------------------------------------------------------


class RecoveryModel(RegressorMixin, BaseEstimator):
    """J(r, f) from a cell's inputs (:func:`cell_features`): scikit-learn's histogram gradient
    boosting (missing task-effect inputs are native NaN), fitted on executed cells.

    ``X`` is a :func:`cell_features` frame (the columns it reads are ``feature_names_in_``);
    ``y`` the cells' mean measured cost."""

    def __init__(self, max_iter: int = 150, learning_rate: float = 0.08, max_leaf_nodes: int = 15,
                 min_samples_leaf: int = 8, l2_regularization: float = 1.0,
                 random_state: int = 0) -> None:
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf
        self.l2_regularization = l2_regularization
        self.random_state = random_state

    def _inputs(self, X: pd.DataFrame) -> np.ndarray:
        return X[list(self.feature_names_in_)].to_numpy(dtype=float)

    def fit(self, X: pd.DataFrame, y: Sequence[float] | np.ndarray) -> RecoveryModel:
        # inputs with a finite value in the training cells (an all-missing column says nothing)
        self.feature_names_in_ = np.array([c for c in (*STATIC, *MODEL_FEATURES, *OWN_CELLS)
                                           if c in X.columns and np.isfinite(X[c].to_numpy(float)).any()],
                                          dtype=object)
        y = np.asarray(y, dtype=float)
        if len(y) == 0:
            raise ValueError("RecoveryModel.fit: no executed cells to fit")
        self.n_train_ = len(y)
        self.mean_ = float(np.mean(y))
        if len(y) < 2 * self.min_samples_leaf:  # too few cells to split: the mean
            self.model_ = None
            return self
        from sklearn.ensemble import HistGradientBoostingRegressor  # (0.2 s: where it fits)

        self.model_ = HistGradientBoostingRegressor(
            max_iter=self.max_iter, learning_rate=self.learning_rate,
            max_leaf_nodes=self.max_leaf_nodes, min_samples_leaf=self.min_samples_leaf,
            l2_regularization=self.l2_regularization, early_stopping=False,
            random_state=self.random_state,
        )
        # one OpenMP thread: on a few hundred cells threads only contend (a shared 2-core
        # machine took 100x longer with two)
        with threadpool_limits(limits=1, user_api="openmp"):
            self.model_.fit(self._inputs(X), y)
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        if self.model_ is None:
            return np.full(len(X), self.mean_)
        with threadpool_limits(limits=1, user_api="openmp"):
            return self.model_.predict(self._inputs(X))


@dataclass
class Completion:
    """A label set's cells priced (:func:`complete`): one row per table cell of every task,
    with ``m`` (the cross-fitted model's prediction), ``pi``, ``executed``, ``y`` and the
    doubly-robust price ``j`` (``j_h0``/``j_h1`` from each half of the repetitions when every
    executed cell has >= 2, else NaN), plus the restore latency, verified rate, tokens and
    tool calls a placement's metrics read."""

    cells: pd.DataFrame
    groups: str
    models: dict[str, RecoveryModel] = field(default_factory=dict)

    def task(self, task_id: str) -> pd.DataFrame:
        """The task's cells as recovery rows (:data:`labelsets.tables.RECOVERY_SCHEMA`'s
        columns the pricing reads), one per cell, priced at ``j``."""
        c = self.cells[self.cells["task_id"] == task_id]
        return pd.DataFrame({
            "task_id": task_id, "restore_point": c["r"].to_numpy(np.int64),
            "failure": c["f"].to_numpy(np.int64), "repetition": 1, "cost_s": c["j"].to_numpy(float),
            "restore_latency_s": c["rl_fill"].to_numpy(float), "verified": c["verified_fill"].to_numpy(float),
            "tokens": c["tokens"].to_numpy(float), "tool_calls": c["tool_calls"].to_numpy(float),
            "quarantined": False,
        })

    def model_task(self, task_id: str) -> pd.DataFrame:
        """The task's rows priced by the model alone (``m``: fitted on the other
        repositories, so free of this task's measurements): what a placement is chosen on
        when it is then scored on the task's own prices (the sparse set's limit)."""
        c = self.cells[self.cells["task_id"] == task_id]
        return self.task(task_id).assign(cost_s=c["m"].to_numpy(float))

    def halves(self, task_id: str) -> tuple[pd.DataFrame, pd.DataFrame] | None:
        """The task's rows priced from each half of the repetitions (None without halves)."""
        c = self.cells[self.cells["task_id"] == task_id]
        if c["j_h0"].isna().any():
            return None
        base = self.task(task_id)
        return base.assign(cost_s=c["j_h0"].to_numpy(float)), base.assign(cost_s=c["j_h1"].to_numpy(float))


def complete(label_set: LabelSet, model: RecoveryModel | None = None) -> Completion:
    """Price every table cell of every task (module docstring): the cross-fitted model's
    prediction, corrected doubly robustly where the cell was executed.

    Groups for cross-fitting: repositories (tasks when the set has one repository)."""
    model = model if model is not None else RecoveryModel()
    cells = cell_features(label_set)
    pi_of = inclusion(label_set)
    cells["pi"] = [pi_of(t, int(r), int(f)) for t, r, f in zip(cells["task_id"], cells["r"], cells["f"], strict=True)]
    cells["executed"] = cells["n"] > 0
    groups = "repo" if cells["repo"].nunique() >= 2 else "task_id"
    cells["m"] = np.nan
    fitted: dict[str, RecoveryModel] = {}
    train_mask = cells["executed"].to_numpy()
    for g in pd.unique(cells[groups]):
        here = (cells[groups] == g).to_numpy()
        tr = train_mask & ~here
        if not tr.any():  # nothing else executed: the mean of the set's other cells, or of all
            tr = train_mask
        mdl = clone(model).fit(cells.loc[tr], cells.loc[tr, "y"].to_numpy(float))
        fitted[str(g)] = mdl
        cells.loc[here, "m"] = mdl.predict(cells.loc[here])
    ex = cells["executed"].to_numpy()
    pi = cells["pi"].to_numpy(float)
    m = cells["m"].to_numpy(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        w = np.where(ex, 1.0 / np.where(pi > 0, pi, 1.0), 0.0)
        for src, dst in (("y", "j"), ("y_h0", "j_h0"), ("y_h1", "j_h1")):
            y = cells[src].to_numpy(float)
            cells[dst] = np.where(ex, m + w * (y - m), m)
    halves_ok = bool(ex.any()) and bool((cells.loc[ex, "n"] >= 2).all())
    if not halves_ok:
        cells["j_h0"] = cells["j_h1"] = np.nan
    # what a placement's other metrics read: measured where executed, else the checkpoint's
    # own restore latency (0 for the pristine start) and the task's mean verified rate
    cells["rl_fill"] = cells["rl"].where(cells["rl"].notna(), np.where(cells["r"] == 0, 0.0, cells["restore_r"]))
    cells["rl_fill"] = cells["rl_fill"].fillna(0.0)
    task_ver = cells.groupby("task_id")["verified"].transform("mean")
    cells["verified_fill"] = cells["verified"].fillna(task_ver)
    return Completion(cells, groups, fitted)


# ---------------------------------------------------------------------------------------
# sub-sampling a full set (validation) and adaptive choice
# ---------------------------------------------------------------------------------------


def subsample(label_set: LabelSet, n_cells: int, seed: int,
              design: SparseDesign | None = None) -> LabelSet:
    """The sparse label set the design would have produced on the tasks of an executed full
    set: its rule draws ``n_cells`` cells (seeded), each keeps its first ``repetitions``
    executed branches; pairs are dropped. For validating the design where the truth is known."""
    design = design or SparseDesign()
    nb = dict(zip(label_set.tasks["task_id"], label_set.tasks["n_boundaries"].astype(int), strict=True))
    chosen, probs = design.choose(nb, n_cells, seed)
    keep = pd.DataFrame(chosen, columns=["task_id", "restore_point", "failure"])
    rec = label_set.recovery[label_set.recovery["role"] == "table"]
    rec = rec.merge(keep, on=["task_id", "restore_point", "failure"])
    rec = rec.sort_values(["task_id", "restore_point", "failure", "repetition"], kind="stable")
    rec = rec[rec.groupby(["task_id", "restore_point", "failure"]).cumcount() < design.repetitions]
    prov = {**label_set.provenance, "design": SPARSE, "subsampled_from": label_set.provenance.get("design"),
            "sparse": sparse_provenance(design, probs, n_cells) | {"seed": int(seed)}}
    return LabelSet(label_set.tasks, label_set.checkpoints, rec.reset_index(drop=True),
                     empty("labels"), dict(label_set.trajectories), prov)


#: the adaptive choice's criterion, as recorded with every round
ADAPTIVE_CRITERION = (
    "next_cells: per task, the unexecuted cells of the contrast cheapest single checkpoint other "
    "than the first boundary minus the first boundary (uniform failures, current doubly-robust "
    "prices), ranked by "
    "coef^2 * (stratum's cross-fitted residual variance - repetition variance)"
)


def next_cells(label_set: LabelSet, n: int, completion: Completion | None = None,
               exclude: Iterable[tuple[str, int, int]] = ()) -> list[tuple[str, int, int]]:
    """The ``n`` unexecuted cells that most reduce the variance of the study's confirmatory
    comparison - the best single checkpoint against the first boundary (the clairvoyant
    limit's gain over first-boundary at one checkpoint, the gain every policy is measured
    within) - priced on the current completion.

    Per task, the comparison is sum_f w_f (cost of {b*} at f - cost of {1} at f), uniform
    w_f, b* the cheapest single checkpoint other than the first boundary on the current
    prices (its strongest challenger; the limit itself unless that is 1): its coefficient on cell
    (r, f) is +-w_f where one of the two placements restores r at f. Executing an
    unexecuted cell replaces its model price (variance s2_model of its stratum, estimated
    from the executed cells' cross-fitted residuals) by its measurement (variance s2_rep,
    the repetitions' spread, or a quarter of s2_model without repetitions), so its value is
    coef^2 (s2_model - s2_rep). The largest values win; ties go to task and cell order.
    Deterministic given the label set."""
    comp = completion if completion is not None else complete(label_set)
    c = comp.cells
    ex = c["executed"].to_numpy()
    resid = (c["y"] - c["m"]).where(c["executed"])
    s2_model = resid.groupby(c["stratum"]).apply(lambda v: float(np.nanmean(v.to_numpy() ** 2))
                                                 if v.notna().any() else np.nan).to_dict()
    fallback = float(np.nanmean(resid.to_numpy() ** 2)) if np.isfinite(resid).any() else 1.0
    two = c[ex & (c["n"] >= 2)]
    s2_rep = float(((two["y_h0"] - two["y_h1"]) ** 2 / 2).mean()) if len(two) else math.nan
    skip = {tuple(x) for x in exclude}
    scores = []
    for tid, g in c.groupby("task_id", sort=False):
        fs = sorted(g["f"].unique())
        if not fs:
            continue
        j = {(int(r), int(f)): float(v) for r, f, v in zip(g["r"], g["f"], g["j"], strict=True)}
        creation = dict(zip(g["r"].astype(int), g["creation_r"].astype(float), strict=False))
        w = 1.0 / len(fs)
        b_max = int(g["n_boundaries"].iloc[0])

        def price(b: int, j: dict = j, fs: list = fs, creation: dict = creation) -> float:
            return sum(creation.get(b, 0.0) + j[(b, f)] if f > b else j[(0, f)] for f in fs)

        if b_max < 2:
            continue
        # the strongest challenger to the first boundary (the limit itself when it is not 1)
        best = min(range(2, b_max + 1), key=lambda b: (price(b), b))
        coef: dict[tuple[int, int], float] = {}
        for b, sign in ((best, 1.0), (1, -1.0)):
            for f in fs:
                cell = (b, f) if f > b else (0, f)
                coef[cell] = coef.get(cell, 0.0) + sign * w
        for (r, f), k in coef.items():
            row = g[(g["r"] == r) & (g["f"] == f)]
            if row.empty or bool(row["executed"].iloc[0]) or (tid, r, f) in skip or abs(k) < 1e-12:
                continue
            s2m = s2_model.get(cell_stratum(r, f), np.nan)
            s2m = fallback if not np.isfinite(s2m) else s2m
            s2r = s2_rep if np.isfinite(s2_rep) else s2m / 4
            scores.append((k * k * max(s2m - s2r, 0.0), tid, r, f))
    order = {t: i for i, t in enumerate(label_set.task_ids)}
    scores.sort(key=lambda x: (-x[0], order[x[1]], x[3], x[2]))
    return [(t, r, f) for _, t, r, f in scores[: max(0, int(n))]]
