"""ripplecp_policy: the placement-policy interface and the setting it runs under, exact
pricing, the episode runner, matched-budget evaluation and verdicts, statistics, learned
policies (gradient-boosted advantage, fitted-Q), the policy registry, splits, tuning and
tracking."""

from ripplecp_policy.policy import BoundaryObservation, Budget, PlacementPolicy, Role, Setting

__all__ = ["Budget", "BoundaryObservation", "PlacementPolicy", "Role", "Setting"]
