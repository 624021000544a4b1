"""Baseline placement policies of the RippleCP paper's Appendix F, the position-only rule
(fixed positions), the offline limits, and the online-reachable reference beside them
(``causal-advantage``: the true current advantage, no future; a limit, never judged).

Every baseline is a :class:`ripplecp_policy.policy.PlacementPolicy` (scikit-learn
contract) and is registered once in :data:`BASELINES` (:mod:`ripplecp_policy.registry`),
in report order; :func:`all_baselines` makes one of each. Baselines that tune a parameter do so in
``fit`` on the training tasks (no Optuna search space).
"""

from __future__ import annotations

from typing import Any

from baselines.failure_risk import FailureRisk
from baselines.offline import CausalAdvantage, ClairvoyantOptimum, OraclePolicy
from baselines.simple import (
    EveryBoundary,
    FirstBoundary,
    FixedK,
    FixedPositions,
    NoCheckpoint,
    RandomPolicy,
)
from baselines.time_based import TimeBased
from baselines.triggers import Progress, StateChange
from ripplecp_policy.policy import PlacementPolicy
from ripplecp_policy.registry import Factory, PolicyEntry, register

__all__ = [
    "CausalAdvantage", "ClairvoyantOptimum", "EveryBoundary", "FailureRisk", "FirstBoundary", "FixedK", "FixedPositions",
    "NoCheckpoint", "OraclePolicy", "Progress", "RandomPolicy", "StateChange", "TimeBased",
    "BASELINES", "all_baselines",
]


def _fixed(cls: type[PlacementPolicy], **params: Any) -> Factory:
    """The factory of a baseline that takes no seed, model size or device."""
    return lambda seed=0, quick=False, device="cpu": cls(**params)


#: every baseline, registered once in report order (the registry's baseline entries)
BASELINES: tuple[PolicyEntry, ...] = (
    register("first-boundary", _fixed(FirstBoundary)),
    register("no-checkpoint", _fixed(NoCheckpoint)),
    register("every-boundary", _fixed(EveryBoundary)),
    register("fixed-k", _fixed(FixedK)),
    register("fixed-positions", _fixed(FixedPositions)),
    register("time-young-daly", _fixed(TimeBased, mode="young_daly")),
    register("time-tuned", _fixed(TimeBased, mode="tuned")),
    register("state-change", _fixed(StateChange)),
    register("progress", _fixed(Progress)),
    register("failure-risk", lambda seed=0, quick=False, device="cpu": FailureRisk(random_state=seed)),
    register("random", _fixed(RandomPolicy)),
    register("oracle", _fixed(OraclePolicy)),
    register("optimum", _fixed(ClairvoyantOptimum)),
    register("causal-advantage", _fixed(CausalAdvantage)),
)


def all_baselines(seed: int = 0) -> list[PlacementPolicy]:
    """One instance of every registered baseline, unfitted, in report order (the setting
    reaches them through ``fit``)."""
    return [e.make(seed=seed) for e in BASELINES]
