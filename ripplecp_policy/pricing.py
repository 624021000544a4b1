"""Exact pricing of placements against a task's measured recovery table (paper, Appendix F).

One price, everywhere: at failure f (striking during segment f, after boundary f-1) a
placement costs the creation of its checkpoints before f, plus the restore latency of the
restore point used, plus the measured recovery J(last, f) from the latest of them (0 = the
pristine start) — :func:`labelsets.definitions.failure_cost`, the Appendix-F C/R overhead plus redo,
i.e. TotalFailureCost less the nominal run. The expectation is over a failure model: uniform
over the measured failures, proportional to nominal segment duration, or explicit weights.

Here: :class:`TaskCosts` (one task's table as arrays), :func:`failure_weights`, the metrics of
a placement side by side (:func:`placement_metrics`; never folded into one scalar), the one
objective (:func:`placement_objective`), the true current advantage of one checkpoint
(:func:`current_advantage`), the clairvoyant optimum by dynamic program
(:func:`optimal_placement`) and by enumeration (:func:`brute_force_placement`), and the one
budget check :func:`fits` every runner, solver and policy uses.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from labelsets.definitions import advantage, failure_cost
from ripplecp_policy.policy import Budget, HazardSpec

if TYPE_CHECKING:
    from labelsets.tables import RecoveryTable

#: relative slack of every budget check: a spend may exceed the cap by this fraction of
#: max(1, cap), so floating-point sums of creation seconds that equal the cap still fit
BUDGET_RTOL = 1e-9


def fits(spent: float, charge: float, cap: float) -> bool:
    """The one budget check: does a checkpoint charged ``charge`` fit when ``spent`` of the
    cap ``cap`` is used? ``spent + charge <= cap + BUDGET_RTOL * max(1, cap)``."""
    return spent + charge <= cap + BUDGET_RTOL * max(1.0, cap)


def unlimited(budget: Budget, tc: TaskCosts) -> Budget:
    """A cap in ``budget``'s unit that can never bind on this task (unmatched references)."""
    return Budget(budget.kind, float(tc.charges(budget).sum()) + 1.0)


# ---------------------------------------------------------------------------------------
# Per-task cost arrays
# ---------------------------------------------------------------------------------------


@dataclass
class TaskCosts:
    """One task's recovery table as arrays, for fast exact pricing of any placement.

    Index ``b`` of the boundary arrays is the restore point (0 = pristine). Column ``k`` of
    the cell arrays is failure ``failures[k]``. Unmeasured cells (and r >= f) are NaN.
    """

    task_id: str
    n_boundaries: int
    failures: np.ndarray  # (F,) int
    weights: np.ndarray  # (F,) failure probabilities, sum 1
    creation_s: np.ndarray  # (B+1,), [0] = 0
    size_bytes: np.ndarray  # (B+1,), [0] = 0
    nominal_t: np.ndarray  # (B+1,), [0] = 0
    event_index: np.ndarray  # (B+1,), [0] = -1
    J: np.ndarray  # (B+1, F) mean recovery seconds
    restore_latency: np.ndarray  # (B+1, F)
    verified: np.ndarray  # (B+1, F) verified rate of the branches
    tokens: np.ndarray  # (B+1, F) mean re-executed tokens (NaN when unknown)
    tool_calls: np.ndarray  # (B+1, F)
    nominal_s: float = math.nan  # nominal seconds start -> completion (NaN when unknown)
    #: placement -> its metrics (pricing is pure: a study prices the same few placements of
    #: a task tens of thousands of times); emptied whenever an attribute is reassigned
    _priced: dict[tuple, dict[str, float]] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    def __setattr__(self, name: str, value: object) -> None:
        if isinstance(value, np.ndarray):  # read-only, so a cached price cannot go stale
            value = value.view()
            value.flags.writeable = False
        object.__setattr__(self, name, value)
        if name != "_priced" and "_priced" in self.__dict__:
            self._priced.clear()

    @classmethod
    def build(
        cls,
        task_id: str,
        recovery: pd.DataFrame,
        checkpoints: pd.DataFrame,
        hazard: HazardSpec = "uniform",
        nominal_s: float = math.nan,
    ) -> TaskCosts:
        """Arrays from a task's recovery and checkpoint rows (quarantined branches excluded)."""
        cp = checkpoints.sort_values("boundary")
        b_max = len(cp)
        bounds = cp["boundary"].to_numpy(dtype=int)
        if b_max and not np.array_equal(bounds, np.arange(1, b_max + 1)):
            raise ValueError(
                f"{task_id}: checkpoints table boundaries must be 1..{b_max}, got {bounds.tolist()}"
            )

        def col(name: str) -> np.ndarray:
            return np.concatenate([[0.0], cp[name].to_numpy(dtype=float)])

        creation, size, t_nom = col("creation_s"), col("size_bytes"), col("nominal_t_s")
        ev = np.concatenate([[-1], cp["event_index"].to_numpy(dtype=np.int64)])
        q = recovery["quarantined"].astype("boolean").fillna(False).to_numpy(dtype=bool)
        ok = recovery[~q]
        rp = ok["restore_point"].to_numpy(dtype=np.int64)
        fl = ok["failure"].to_numpy(dtype=np.int64)
        failures = np.unique(fl).astype(int)
        shape = (b_max + 1, len(failures))
        bad = (rp < 0) | (rp >= fl) | (rp > b_max)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{task_id}: recovery cell (r={rp[i]}, f={fl[i]}) is out of range")

        def num(name: str) -> np.ndarray:
            return ok[name].astype("Float64").to_numpy(dtype=float, na_value=np.nan)

        k = np.searchsorted(failures, fl)
        arrays = {}
        for key, vals in (("J", num("cost_s")), ("rl", num("restore_latency_s")),
                          ("ver", num("verified")), ("tok", num("tokens")), ("tc", num("tool_calls"))):
            tot, cnt = np.zeros(shape), np.zeros(shape)
            m = ~np.isnan(vals)
            np.add.at(tot, (rp[m], k[m]), vals[m])
            np.add.at(cnt, (rp[m], k[m]), 1.0)
            with np.errstate(invalid="ignore", divide="ignore"):
                arrays[key] = np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan)
        # restore latency unknown on a branch: fall back to the checkpoint's own record
        cp_rl = col("restore_latency_s")
        miss = np.isnan(arrays["rl"]) & ~np.isnan(arrays["J"])
        arrays["rl"][miss] = np.broadcast_to(cp_rl[:, None], shape)[miss]
        arrays["rl"][np.isnan(arrays["rl"]) & ~np.isnan(arrays["J"])] = 0.0
        tc = cls(
            task_id=task_id, n_boundaries=b_max, failures=failures,
            weights=np.zeros(len(failures)), creation_s=creation, size_bytes=size,
            nominal_t=t_nom, event_index=ev, J=arrays["J"], restore_latency=arrays["rl"],
            verified=arrays["ver"], tokens=arrays["tok"], tool_calls=arrays["tc"],
            nominal_s=float(nominal_s),
        )
        tc.weights = failure_weights(tc, hazard)
        return tc

    @classmethod
    def from_recovery_table(cls, rt: RecoveryTable, hazard: HazardSpec = "uniform") -> TaskCosts:
        return cls.build(rt.task_id, rt.recovery, rt.checkpoints, hazard)

    # -- derived quantities ---------------------------------------------------------------

    def charges(self, budget: Budget) -> np.ndarray:
        """(B+1,) what each boundary's checkpoint costs in the budget's unit; [0] = 0
        (read-only: computed once per budget)."""
        key = ("charges", budget)
        out = self._priced.get(key)
        if out is None:
            out = np.array([budget.charge(c, s) for c, s in zip(self.creation_s, self.size_bytes, strict=True)])
            out[0] = 0.0
            out.flags.writeable = False
            self._priced[key] = out  # type: ignore[assignment]
        return out

    def recovery_cost(self) -> np.ndarray:
        """(B+1, F) restore latency plus measured recovery from restore point r at failure
        ``failures[k]``: the price of that failure with no creation counted (NaN unmeasured)."""
        return failure_cost(0.0, self.restore_latency, self.J)

    def survival(self) -> np.ndarray:
        """(B+1,) W(>b): probability that the failure strikes after boundary b."""
        return np.array([self.weights[self.failures > b].sum() for b in range(self.n_boundaries + 1)])

    def is_full(self) -> bool:
        """Some failure is measured, and every cell (r, f) with r < f and positive failure
        weight is: any placement can then be priced."""
        if len(self.failures) == 0:
            return False
        for k, f in enumerate(self.failures):
            if self.weights[k] > 0 and np.isnan(self.J[: min(f, self.n_boundaries + 1), k]).any():
                return False
        return True

    def segment_end_time(self, f: int) -> float:
        """Nominal elapsed seconds at the end of segment f (boundary f, or the run's end)."""
        if f <= self.n_boundaries:
            return float(self.nominal_t[f])
        return float(self.nominal_s) if math.isfinite(self.nominal_s) else float(self.nominal_t[-1])


def failure_weights(tc: TaskCosts, hazard: HazardSpec = "uniform") -> np.ndarray:
    """Failure probabilities over ``tc.failures`` for a hazard.

    ``"uniform"``: equal over the measured failures. ``"duration"``: proportional to the
    nominal duration of the segment the failure strikes in (a constant hazard per second).
    A mapping ``{failure: weight}`` (or a :class:`~ripplecp_policy.policy.Setting`'s sorted
    pairs) gives explicit weights (missing failures get 0).
    """
    n = len(tc.failures)
    if n == 0:
        return np.zeros(0)
    if isinstance(hazard, Mapping | tuple):
        weights = dict(hazard)
        w = np.array([float(weights.get(int(f), 0.0)) for f in tc.failures])
    elif hazard == "uniform":
        w = np.ones(n)
    elif hazard == "duration":
        w = np.array(
            [tc.segment_end_time(int(f)) - float(tc.nominal_t[min(int(f) - 1, tc.n_boundaries)])
             for f in tc.failures]
        )
        w = np.where(np.isfinite(w), w, 0.0)
        if (w < 0).any():
            raise ValueError(f"{tc.task_id}: nominal_t_s decreases; segment durations negative")
        if w.sum() <= 0:
            w = np.ones(n)
    else:
        raise ValueError(f"hazard must be 'uniform', 'duration' or a mapping, got {hazard!r}")
    if (w < 0).any() or not np.isfinite(w).all() or w.sum() <= 0:
        raise ValueError(f"{tc.task_id}: failure weights must be finite, >= 0, not all 0: {w}")
    return w / w.sum()


# ---------------------------------------------------------------------------------------
# Exact pricing of a placement
# ---------------------------------------------------------------------------------------


METRIC_COLUMNS = [
    "total_failure_cost", "lost_work_s", "recovery_efficiency", "redo_avoided_s",
    "checkpoint_latency_s", "restore_latency_s", "cr_overhead_s", "objective_s",
    "nominal_work_s", "completion", "tokens", "tool_calls", "bytes_written",
    "n_checkpoints", "spend_count", "spend_seconds", "spend_bytes",
]


def placement_metrics(tc: TaskCosts, checkpoints: Iterable[int]) -> dict[str, float]:
    """Expected Appendix-F metrics of a placement, side by side (never one scalar).

    Per failure f with last checkpoint ℓ(f) before f and placement P:
    ``objective`` = Σ_{b∈P, b<f} C(b) + restore latency(ℓ, f) + J(ℓ, f) (the one price,
    :func:`labelsets.definitions.failure_cost`) — the quantity the clairvoyant optimum minimises; ``lost_work`` = J(ℓ, f); ``total_failure_cost`` =
    nominal work up to the failure + C/R overhead + redo, where the failure strikes when
    boundary f-1 has passed (nominal work = nominal_t(f-1), as in ``oracle.simulator``;
    the same for every policy, so it never changes a comparison). ``recovery_efficiency`` = E[J(0,f) - J(ℓ,f)] /
    E[checkpoint creation before f] (NaN with no checkpoint overhead). Spend counts the
    whole placement, whether or not a failure precedes a checkpoint.
    """
    key = tuple(sorted({int(b) for b in checkpoints}))
    hit = tc._priced.get(key)
    if hit is None:
        hit = tc._priced[key] = _metrics(tc, key)
    return dict(hit)


def _metrics(tc: TaskCosts, placement: tuple[int, ...]) -> dict[str, float]:
    p = np.array(placement, dtype=int)
    if p.size and (p[0] < 1 or p[-1] > tc.n_boundaries):
        raise ValueError(f"{tc.task_id}: checkpoint boundaries must be in 1..{tc.n_boundaries}: {p}")
    w = tc.weights
    cum_c = np.concatenate([[0.0], np.cumsum(tc.creation_s[p])])
    cum_b = np.concatenate([[0.0], np.cumsum(tc.size_bytes[p])])
    n_before = np.searchsorted(p, tc.failures, side="left")  # checkpoints b < f
    last = np.where(n_before > 0, p[np.maximum(n_before - 1, 0)] if p.size else 0, 0)
    cols = np.arange(len(tc.failures))
    J = tc.J[last, cols]
    J0 = tc.J[0, cols]
    rl = tc.restore_latency[last, cols]
    created = cum_c[n_before]
    written = cum_b[n_before]
    nominal = tc.nominal_t[np.minimum(tc.failures - 1, tc.n_boundaries)]

    def ex(x: np.ndarray) -> float:
        m = w > 0
        return float(np.dot(w[m], x[m])) if m.any() else math.nan

    overhead = ex(created)
    avoided = ex(J0 - J)
    price = failure_cost(created, rl, J)
    return {
        "total_failure_cost": ex(nominal + price),
        "lost_work_s": ex(J),
        "recovery_efficiency": avoided / overhead if overhead > 0 else math.nan,
        "redo_avoided_s": avoided,
        "checkpoint_latency_s": overhead,
        "restore_latency_s": ex(rl),
        "cr_overhead_s": ex(created + rl),
        "objective_s": ex(price),
        "nominal_work_s": ex(nominal),
        "completion": ex(tc.verified[last, cols]),
        "tokens": ex(tc.tokens[last, cols]),
        "tool_calls": ex(tc.tool_calls[last, cols]),
        "bytes_written": ex(written),
        "n_checkpoints": float(p.size),
        "spend_count": float(p.size),
        "spend_seconds": float(tc.creation_s[p].sum()),
        "spend_bytes": float(tc.size_bytes[p].sum()),
    }


def current_advantage(tc: TaskCosts, boundary: int, last: int) -> float:
    """The true current advantage of checkpointing at ``boundary`` when the last checkpoint
    is ``last`` (0 = none): the paper's label, J(last, f) - J(boundary, f) - C(boundary)
    (:func:`labelsets.definitions.advantage`, restore latency not folded in), averaged over the
    failures f > boundary with their failure weights — what the advantage regressors
    predict. It reads rows ``last`` and ``boundary`` of the table and no later checkpoint's;
    -inf when no failure can strike after ``boundary``, NaN when a needed cell is unmeasured."""
    if not 0 <= last < boundary <= tc.n_boundaries:
        raise ValueError(f"{tc.task_id}: need 0 <= last < boundary <= {tc.n_boundaries}, got {last}, {boundary}")
    m = (tc.failures > boundary) & (tc.weights > 0)
    if not m.any():
        return -math.inf
    w = tc.weights[m]
    adv = advantage(tc.J[last, m], tc.J[boundary, m] + tc.creation_s[boundary])
    return float(np.dot(w, adv) / w.sum())


def placement_objective(tc: TaskCosts, checkpoints: Iterable[int]) -> float:
    """E_f[creation before f + restore latency + J(last, f)]: what the optimum minimises."""
    key = tuple(sorted({int(b) for b in checkpoints}))
    hit = tc._priced.get(key)
    return hit["objective_s"] if hit is not None else placement_metrics(tc, key)["objective_s"]


# ---------------------------------------------------------------------------------------
# The clairvoyant optimum: exact dynamic programs over the recovery table
# ---------------------------------------------------------------------------------------


def _segment_costs(tc: TaskCosts) -> np.ndarray:
    """seg[i, j] = Σ_{f∈(i, j]} w_f (J(i,f) + RL(i,f)); column B+1 means "to the end".

    Failures in (i, j] are served by restore point i when the next checkpoint is j (a
    checkpoint at j cannot serve the failure during segment j). Unmeasured cells with
    positive weight make the segment infinite (that placement cannot be priced).
    """
    b = tc.n_boundaries
    seg = np.full((b + 1, b + 2), np.inf)
    cell = tc.weights[None, :] * tc.recovery_cost()
    cell = np.where(tc.weights[None, :] > 0, cell, 0.0)  # weight 0: no contribution
    for i in range(b + 1):
        for j in range(i + 1, b + 2):
            m = (tc.failures > i) & ((tc.failures <= j) if j <= b else True)
            vals = cell[i, m]
            seg[i, j] = math.inf if np.isnan(vals).any() else float(vals.sum())
    return seg


def optimal_placement(tc: TaskCosts, budget: Budget) -> tuple[list[int], float]:
    """The clairvoyant optimum: the placement minimising the expected objective under budget.

    Exact in every case. Count budgets: a dynamic program over (last checkpoint,
    checkpoints used), O(B²·K). Seconds and bytes budgets: a dynamic program over the last
    checkpoint whose states are the Pareto front of (spend, cost) labels — a label is
    dropped only when another with the same last checkpoint spends no more and costs no
    more, which is safe because the future depends only on the last checkpoint and the
    remaining budget. Returns (sorted boundaries, objective). Ties prefer fewer and then
    earlier checkpoints.
    """
    b = tc.n_boundaries
    seg = _segment_costs(tc)
    surv = tc.survival()
    add = tc.creation_s * surv  # creation of j is paid by every failure after j
    if budget.kind == "count":
        k_max = max(k for k in range(b + 1) if fits(0.0, float(k), budget.amount))
        val = np.full((k_max + 1, b + 1), np.inf)
        back = np.full((k_max + 1, b + 1), -1, dtype=int)
        val[0, 0] = 0.0
        for c in range(1, k_max + 1):
            for j in range(1, b + 1):
                cand = val[c - 1, :j] + seg[:j, j] + add[j]
                i = int(np.argmin(cand))
                val[c, j], back[c, j] = cand[i], i
        best, best_c, best_j = math.inf, 0, 0
        for c in range(k_max + 1):
            for j in range(b + 1):
                total = val[c, j] + seg[j, b + 1]
                if total < best - 1e-12:
                    best, best_c, best_j = total, c, j
        path: list[int] = []
        c, j = best_c, best_j
        while c > 0:
            path.append(j)
            j, c = int(back[c, j]), c - 1
        return sorted(path), float(best)

    charge = tc.charges(budget)
    labels: list[list[tuple[float, float, tuple[int, ...]]]] = [[] for _ in range(b + 1)]
    labels[0] = [(0.0, 0.0, ())]
    for j in range(1, b + 1):
        cands = []
        for i in range(j):
            s_ij = seg[i, j]
            if not math.isfinite(s_ij):
                continue
            for spend, cost, path_i in labels[i]:
                s = spend + charge[j]
                if fits(spend, charge[j], budget.amount):
                    cands.append((s, cost + s_ij + add[j], (*path_i, j)))
        labels[j] = _pareto(cands)
    best, best_path = math.inf, ()
    for j in range(b + 1):
        for _, cost, path_j in labels[j]:
            total = cost + seg[j, b + 1]
            key = (len(path_j), path_j)
            if total < best - 1e-12 or (abs(total - best) <= 1e-12 and key < (len(best_path), best_path)):
                best, best_path = total, path_j
    return list(best_path), float(best)


def stopping_values(tc: TaskCosts, k_max: int) -> tuple[np.ndarray, np.ndarray]:
    """Hindsight values of checkpointing now versus waiting, with k checkpoints left.

    The dynamic program of :func:`optimal_placement` run backwards over decisions: ``H[k, t,
    c]`` is the least expected cost still to come (the objective's terms for failures after
    c) with at most k checkpoints among boundaries t..B and the last checkpoint at c < t
    (t = B + 1: none left). At boundary t, ``cp[k, t, c]`` = ``seg(c, t) + C(t) S(t) + H[k-1,
    t+1, t]`` (take t) and ``skip[k, t, c]`` = ``H[k, t+1, c]``; ``H = min(cp, skip)``.
    Returns ``(cp, skip)`` of shape (k_max + 1, B + 2, B + 1), +inf where undefined (c >= t,
    k = 0 for cp, an unmeasured cell); ``skip - cp`` is the value of checkpointing now
    rather than waiting with the budget left, in hindsight (a count of checkpoints: each
    uses one of k). Exact for count budgets; the stopping learner's training target."""
    b = tc.n_boundaries
    k_max = max(0, int(k_max))
    seg = _segment_costs(tc)
    add = tc.creation_s * tc.survival()
    H = np.full((k_max + 1, b + 2, b + 1), np.inf)
    cp = np.full_like(H, np.inf)
    skip = np.full_like(H, np.inf)
    H[:, b + 1, :] = seg[:, b + 1]
    for t in range(b, 0, -1):
        for k in range(k_max + 1):
            skip[k, t, :t] = H[k, t + 1, :t]
            if k > 0:
                cp[k, t, :t] = seg[:t, t] + add[t] + H[k - 1, t + 1, t]
            H[k, t, :t] = np.minimum(cp[k, t, :t], skip[k, t, :t])
    return cp, skip


def _pareto(labels: list[tuple[float, float, tuple[int, ...]]]) -> list[tuple[float, float, tuple[int, ...]]]:
    """Keep the labels no other label beats on both spend and cost."""
    labels.sort(key=lambda x: (x[0], x[1], len(x[2]), x[2]))
    out: list[tuple[float, float, tuple[int, ...]]] = []
    best = math.inf
    for lab in labels:
        if lab[1] < best - 1e-12:
            out.append(lab)
            best = lab[1]
    return out


def brute_force_placement(tc: TaskCosts, budget: Budget) -> tuple[list[int], float]:
    """Enumerate every feasible subset (exponential; for tests on small tables)."""
    b = tc.n_boundaries
    if b > 16:
        raise ValueError(f"brute force over {b} boundaries would enumerate 2^{b} subsets")
    charge = tc.charges(budget)
    best, best_p = math.inf, []
    for k in range(b + 1):
        for sub in itertools.combinations(range(1, b + 1), k):
            if not fits(0.0, float(charge[list(sub)].sum()), budget.amount):
                continue
            v = placement_objective(tc, sub)
            if not math.isnan(v) and v < best - 1e-12:
                best, best_p = v, list(sub)
    return best_p, best


