"""Baseline placement policies of the RippleCP paper's Appendix F, the position-only rule
(fixed positions), the offline limits, and the online-reachable reference beside them
(``causal-advantage``: the true current advantage, no future; a limit, never judged).

Every baseline is a :class:`ripplecp_policy.policy.PlacementPolicy` (scikit-learn
contract) and is registered once in :data:`BASELINES` (:mod:`ripplecp_policy.registry`),
in report order; :func:`all_baselines` makes one of each. Baselines that tune a parameter do so in
``fit`` on the training tasks (no Optuna search space).

Each entry declares its report name (the key) and role; its class is imported on first
``make()``, and the classes below on first use (PEP 562), so ``import baselines`` and a
command's ``--help`` that lists the baselines need no scikit-learn.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ripplecp_policy.registry import Factory, PolicyEntry, register
from ripplecp_policy.roles import Role

if TYPE_CHECKING:
    from ripplecp_policy.policy import PlacementPolicy

#: public class -> the module that defines it (imported on first use)
_CLASSES = {
    "FailureRisk": "baselines.failure_risk",
    **dict.fromkeys(["CausalAdvantage", "ClairvoyantOptimum", "OraclePolicy"], "baselines.offline"),
    **dict.fromkeys(["EveryBoundary", "FirstBoundary", "FixedK", "FixedPositions", "NoCheckpoint",
                     "RandomPolicy"], "baselines.simple"),
    "TimeBased": "baselines.time_based",
    **dict.fromkeys(["Progress", "StateChange"], "baselines.triggers"),
}

__all__ = [*sorted(_CLASSES), "BASELINES", "all_baselines"]


def __getattr__(name: str) -> Any:
    if name not in _CLASSES:
        raise AttributeError(f"module 'baselines' has no attribute {name!r}")
    return getattr(importlib.import_module(_CLASSES[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_CLASSES])


def _fixed(cls: str, **params: Any) -> Factory:
    """The factory of a baseline that takes no seed, model size or device (its class is
    imported on the first call)."""
    return lambda seed=0, quick=False, device="cpu": __getattr__(cls)(**params)


def _seeded(cls: str) -> Factory:
    """The factory of a baseline seeded by ``random_state``."""
    return lambda seed=0, quick=False, device="cpu": __getattr__(cls)(random_state=seed)


def _baseline(key: str, make: Factory, role: Role = Role.ONLINE) -> PolicyEntry:
    """Register a baseline: its report name is its key."""
    return register(key, make, name=key, role=role)


#: every baseline, registered once in report order (the registry's baseline entries)
BASELINES: tuple[PolicyEntry, ...] = (
    _baseline("first-boundary", _fixed("FirstBoundary")),
    _baseline("no-checkpoint", _fixed("NoCheckpoint")),
    _baseline("every-boundary", _fixed("EveryBoundary"), Role.REFERENCE),
    _baseline("fixed-k", _fixed("FixedK")),
    _baseline("fixed-positions", _fixed("FixedPositions")),
    _baseline("time-young-daly", _fixed("TimeBased", mode="young_daly")),
    _baseline("time-tuned", _fixed("TimeBased", mode="tuned")),
    _baseline("state-change", _fixed("StateChange")),
    _baseline("progress", _fixed("Progress")),
    _baseline("failure-risk", _seeded("FailureRisk")),
    _baseline("random", _fixed("RandomPolicy")),
    _baseline("oracle", _fixed("OraclePolicy"), Role.OFFLINE),
    _baseline("optimum", _fixed("ClairvoyantOptimum"), Role.OFFLINE),
    _baseline("causal-advantage", _fixed("CausalAdvantage"), Role.OFFLINE),
)


def all_baselines(seed: int = 0) -> list[PlacementPolicy]:
    """One instance of every registered baseline, unfitted, in report order (the setting
    reaches them through ``fit``)."""
    return [e.make(seed=seed) for e in BASELINES]
