"""ripplecp_policy."""
