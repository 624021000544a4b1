"""Budget-aware tuning of one baseline parameter on training tasks only.

A tuned baseline (time-based, state-change, failure-risk) picks its parameter from a grid
by the mean exact placement objective on the *training* tasks of its fold, under the
setting (budget, failure model, features) it will be evaluated in (paper, Appendix F:
"validation-tuned"). The held-out repository is never seen here: the caller passes the
training label set.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from sklearn.base import clone

from ripplecp_policy.evaluation import evaluator_for
from ripplecp_policy.policy import PlacementPolicy, Setting
from ripplecp_policy.pricing import placement_objective

if TYPE_CHECKING:
    from labelsets.tables import LabelSet


def training_objective(policy: PlacementPolicy, data: LabelSet, setting: Setting) -> float:
    """Mean expected placement objective of an (already configured) policy on ``data``."""
    ev = evaluator_for(data)
    vals = []
    for t in data.task_ids:
        pl = ev.run(policy, t, setting)
        vals.append(placement_objective(ev.costs(t, setting.hazard), pl.checkpoints))
    arr = np.asarray(vals, dtype=float)
    return float(np.nanmean(arr)) if np.isfinite(arr).any() else math.inf


def tune_fitted(
    policy: PlacementPolicy,
    attr: str,
    grid: Sequence[Any],
    data: LabelSet,
    setting: Setting,
) -> tuple[Any, dict[Any, float]]:
    """The grid value of the fitted attribute ``attr`` with the lowest training objective.

    Each candidate is tried on a clone carrying the policy's other fitted attributes, so
    ``policy`` itself is not mutated. Ties keep the earliest grid value (grids are ordered
    from the most conservative choice).
    """
    scores: dict[Any, float] = {}
    best, best_v = math.inf, grid[0]
    fitted = {k: v for k, v in vars(policy).items() if k.endswith("_") and not k.startswith("_")}
    for v in grid:
        probe = clone(policy)
        for k, val in fitted.items():
            setattr(probe, k, val)
        probe.setting_ = setting  # the probe runs under the setting being tuned for
        setattr(probe, attr, v)
        s = training_objective(probe, data, setting)
        scores[v] = s
        if s < best - 1e-9:
            best, best_v = s, v
    return best_v, scores


def quantile_grid(values: Sequence[float] | np.ndarray, n: int = 9) -> list[float]:
    """Distinct quantiles (10%..90%) of the finite values, ascending; [] when none."""
    arr = np.asarray(values, dtype=float)
    arr = arr[np.isfinite(arr)]
    if arr.size == 0:
        return []
    qs = np.quantile(arr, np.linspace(0.1, 0.9, n))
    return sorted({float(q) for q in qs})
