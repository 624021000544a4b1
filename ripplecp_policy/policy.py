"""The placement-policy interface: online checkpoint/skip decisions under a budget.

A policy follows scikit-learn's estimator contract: parameters are stored by ``__init__``
unchanged, ``fit`` learns from training tasks and returns ``self``, learned attributes end
in ``_``. At evaluation, a runner walks each held-out task's candidate boundaries in
trajectory order; at each it builds a :class:`BoundaryObservation` from the prefix alone
(features computed with the placement so far) and asks :meth:`PlacementPolicy.decide`.
The runner, not the policy, enforces the budget: a checkpoint whose measured cost does not
fit the remaining budget is refused, so no policy can overspend.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np
from sklearn.base import BaseEstimator

if TYPE_CHECKING:
    from oracle.tables import LabelSet, RecoveryTable

BudgetKind = Literal["count", "seconds", "bytes"]


@dataclass(frozen=True)
class Budget:
    """A per-task checkpoint budget: by count, by creation seconds, or by checkpoint bytes."""

    kind: BudgetKind
    amount: float

    def __post_init__(self) -> None:
        if self.kind not in ("count", "seconds", "bytes"):
            raise ValueError(f"budget kind must be count, seconds or bytes, got {self.kind!r}")
        if not (self.amount >= 0 and np.isfinite(self.amount)):
            raise ValueError(f"budget amount must be finite and >= 0, got {self.amount}")

    def charge(self, creation_s: float, size_bytes: float) -> float:
        """What one checkpoint costs in this budget's unit."""
        if self.kind == "count":
            return 1.0
        if self.kind == "seconds":
            return float(creation_s)
        return float(size_bytes)

    def label(self) -> str:
        unit = {"count": "ckpt", "seconds": "s", "bytes": "B"}[self.kind]
        return f"{self.amount:g}{unit}"


@dataclass
class BoundaryObservation:
    """What a policy may see at candidate boundary ``boundary`` (1-based) of a task.

    Everything here is computable online from the past: ``features`` are the prefix-causal
    features with the placement so far; ``checkpoint_cost`` is the cost this checkpoint
    would be charged (estimated by the runtime before it is taken; in table evaluation,
    the measured creation cost); ``affordable`` says whether it fits the remaining budget
    (the runner's own check, :func:`ripplecp_policy.pricing.fits`: the runner refuses a
    checkpoint that does not fit, whatever the policy answers).
    """

    task_id: str
    repo: str
    boundary: int
    event_index: int
    features: dict[str, float]
    budget: Budget
    remaining: float
    n_checkpoints: int
    last_checkpoint: int  # 0 = none yet
    elapsed_s: float  # nominal seconds at this boundary (NaN when unknown)
    checkpoint_cost: float
    affordable: bool
    history: list[int] = field(default_factory=list)  # boundaries checkpointed so far


class PlacementPolicy(BaseEstimator):
    """Base class of every placement policy, baseline or learned.

    Subclasses override :meth:`decide` and, when they learn or tune, :meth:`fit`.
    ``reset`` is called at the start of every task with the evaluation seed, so a
    stochastic policy is deterministic for a seed.
    """

    #: offline policies see the measured table (oracle, clairvoyant optimum): unattainable;
    #: the runner calls :meth:`place` instead of :meth:`decide`
    offline: bool = False
    #: False for policies that ignore features (the runner then skips feature extraction)
    uses_features: bool = True
    #: False for reference policies run without a budget cap (every boundary); a
    #: comparison refuses to give them a verdict
    budget_matched: bool = True

    def fit(self, data: LabelSet, budget: Budget | None = None) -> PlacementPolicy:
        """Learn or tune on training tasks only; the default learns nothing."""
        self.is_fitted_ = True
        return self

    def reset(self, task_id: str, seed: int = 0) -> None:
        """Start a new task; stochastic policies seed their generator here."""
        self._rng = np.random.default_rng([seed, _stable_hash(task_id)])

    def decide(self, obs: BoundaryObservation) -> bool:
        """True to checkpoint at this boundary (subject to the runner's budget check)."""
        raise NotImplementedError

    def place(self, table: RecoveryTable, budget: Budget) -> list[int]:
        """Offline policies only: the boundaries to checkpoint, chosen from the measured table."""
        raise NotImplementedError(f"{type(self).__name__} is an online policy; use decide()")

    @property
    def name(self) -> str:
        return type(self).__name__


def _stable_hash(s: str) -> int:
    """A process-independent 32-bit hash (``hash()`` is salted per process)."""
    import zlib

    return zlib.crc32(s.encode())
