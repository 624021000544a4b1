"""ripplecp_policy: the placement-policy interface, matched-budget evaluation, statistics,
learned policies (gradient-boosted advantage, fitted-Q), splits, tuning and tracking."""

from ripplecp_policy.policy import BoundaryObservation, Budget, PlacementPolicy

__all__ = ["Budget", "BoundaryObservation", "PlacementPolicy"]
