"""Baseline placement policies of the RippleCP paper's Appendix F, and the offline limits.

Every baseline is a :class:`ripplecp_policy.policy.PlacementPolicy` (scikit-learn
contract). :func:`all_baselines` returns one of each, in report order.
"""

from __future__ import annotations

from baselines.failure_risk import FailureRisk
from baselines.offline import ClairvoyantOptimum, OraclePolicy
from baselines.simple import EveryBoundary, FirstBoundary, FixedK, NoCheckpoint, RandomPolicy
from baselines.time_based import TimeBased
from baselines.triggers import Progress, StateChange
from ripplecp_policy.policy import PlacementPolicy

__all__ = [
    "ClairvoyantOptimum", "EveryBoundary", "FailureRisk", "FirstBoundary", "FixedK",
    "NoCheckpoint", "OraclePolicy", "Progress", "RandomPolicy", "StateChange", "TimeBased",
    "all_baselines",
]


def all_baselines(seed: int = 0) -> list[PlacementPolicy]:
    """One instance of every baseline, unfitted (the setting reaches them through ``fit``)."""
    return [
        FirstBoundary(),
        NoCheckpoint(),
        EveryBoundary(),
        FixedK(),
        TimeBased(mode="young_daly"),
        TimeBased(mode="tuned"),
        StateChange(),
        Progress(),
        FailureRisk(random_state=seed),
        RandomPolicy(),
        OraclePolicy(),
        ClairvoyantOptimum(),
    ]
