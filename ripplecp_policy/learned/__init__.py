"""Learned placement policies: local advantage models and fitted-Q (paper, Appendices D-E).

:func:`default_learned_policies` is the set the matched-budget study runs beside the
baselines; every policy here is fitted on training repositories only and reports which
repositories each stage saw (``audit_``).
"""

from __future__ import annotations

from ripplecp_policy.learned.advantage import (
    AdvantageClassifierPolicy,
    AdvantageRegressorPolicy,
    rank_report,
)
from ripplecp_policy.learned.fqi import FittedQPolicy, value_error_summary
from ripplecp_policy.policy import PlacementPolicy

__all__ = [
    "AdvantageClassifierPolicy",
    "AdvantageRegressorPolicy",
    "FittedQPolicy",
    "default_learned_policies",
    "rank_report",
    "value_error_summary",
]


def default_learned_policies(seed: int = 0, quick: bool = False) -> list[PlacementPolicy]:
    """The learned policies a matched-budget study compares with the baselines (unfitted).

    Gradient-boosted and ridge advantage regressors, and Q-Ripple with extremely
    randomized trees; ``quick`` shrinks ensembles and iterations for CI-sized runs. The
    study's setting (budget, failure model, features) reaches them through ``fit``.
    """
    n_trees = 50 if quick else 200
    return [
        AdvantageRegressorPolicy(model="xgboost", n_estimators=n_trees, random_state=seed),
        AdvantageRegressorPolicy(model="ridge", random_state=seed),
        FittedQPolicy(
            regressor="extratrees",
            n_estimators=20 if quick else 50,
            n_behaviour_seeds=2 if quick else 4,
            random_state=seed,
        ),
    ]
