"""ripplecp_policy: the placement-policy interface and the setting it runs under, exact
pricing, the episode runner, matched-budget evaluation and verdicts, statistics, learned
policies (gradient-boosted advantage, fitted-Q), the policy registry, splits, tuning,
tracking and the advisor.

The names below are imported on first use (PEP 562): ``python -m ripplecp_policy.advise``
starts without scikit-learn, which the policy interface needs.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Budget", "BoundaryObservation", "PlacementPolicy", "Role", "Setting"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'ripplecp_policy' has no attribute {name!r}")
    from ripplecp_policy import policy

    value = getattr(policy, name)
    globals()[name] = value
    return value
