"""Learned placement policies: local advantage models and fitted-Q (paper, Appendices D-E).

Every policy here is fitted on training repositories only and reports which repositories
each stage saw (``audit_``). Each kind is registered once (:mod:`ripplecp_policy.registry`)
with its Optuna search space: ``xgboost`` and ``ridge`` advantage regressors and Q-Ripple
with extremely randomized trees (``fqi-extratrees``) are the matched-budget study's learned
policies; the advantage classifiers (``classifier``: xgboost, ``classifier-logistic``) and
``fqi-xgboost`` and the budget-aware stopping learner (``stopping``) are trained on request
(``python -m experiments.train_policies --kinds``). :data:`LEARNED` lists them; adding a
learned policy is one :func:`~ripplecp_policy.registry.register` call in it.

Each entry declares its key, report name and role; its class is imported on first
``make()``, and the classes and functions below on first use (PEP 562), so reading
:data:`LEARNED` (a command's ``--help``) needs no scikit-learn or xgboost.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ripplecp_policy.registry import PolicyEntry, register
from ripplecp_policy.roles import Role

if TYPE_CHECKING:
    from ripplecp_policy.learned.advantage import (
        AdvantageClassifierPolicy,
        AdvantageRegressorPolicy,
    )
    from ripplecp_policy.learned.fqi import FittedQPolicy
    from ripplecp_policy.learned.stopping import StoppingPolicy
    from ripplecp_policy.policy import PlacementPolicy

#: public name -> the module that defines it (imported on first use)
_LAZY = {
    **dict.fromkeys(["AdvantageClassifierPolicy", "AdvantageRegressorPolicy", "rank_report"],
                    "ripplecp_policy.learned.advantage"),
    **dict.fromkeys(["FittedQPolicy", "value_error_summary"], "ripplecp_policy.learned.fqi"),
    "StoppingPolicy": "ripplecp_policy.learned.stopping",
}

__all__ = [
    "AdvantageClassifierPolicy",
    "AdvantageRegressorPolicy",
    "FittedQPolicy",
    "StoppingPolicy",
    "DEVICES",
    "LEARNED",
    "check_device",
    "default_learned_policies",
    "rank_report",
    "value_error_summary",
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'ripplecp_policy.learned' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


# -- search spaces (small: the data are small) -------------------------------------------


def _xgboost_advantage_space(t: Any) -> dict[str, Any]:
    return {
        "n_estimators": t.suggest_int("n_estimators", 50, 300, step=25),
        "max_depth": t.suggest_int("max_depth", 2, 5),
        "learning_rate": t.suggest_float("learning_rate", 0.01, 0.3, log=True),
    }


def _ridge_space(t: Any) -> dict[str, Any]:
    return {"alpha": t.suggest_float("alpha", 1e-3, 1e3, log=True)}


def _logistic_space(t: Any) -> dict[str, Any]:
    return {"C": t.suggest_float("C", 1e-3, 1e2, log=True)}


def _fqi_extratrees_space(t: Any) -> dict[str, Any]:
    return {
        "n_estimators": t.suggest_int("n_estimators", 20, 100, step=10),
        "min_samples_leaf": t.suggest_int("min_samples_leaf", 1, 10),
    }


def _stopping_space(t: Any) -> dict[str, Any]:
    return {
        "n_estimators": t.suggest_int("n_estimators", 50, 300, step=25),
        "max_depth": t.suggest_int("max_depth", 2, 5),
        "learning_rate": t.suggest_float("learning_rate", 0.01, 0.3, log=True),
    }


def _fqi_xgboost_space(t: Any) -> dict[str, Any]:
    return {
        "n_estimators": t.suggest_int("n_estimators", 20, 150, step=10),
        "max_depth": t.suggest_int("max_depth", 2, 6),
        "learning_rate": t.suggest_float("learning_rate", 0.03, 0.3, log=True),
    }


# -- the registered kinds ------------------------------------------------------------------


def _advantage(model: str) -> Any:
    def make(seed: int = 0, quick: bool = False, device: str = "cpu") -> AdvantageRegressorPolicy:
        from ripplecp_policy.learned.advantage import AdvantageRegressorPolicy

        return AdvantageRegressorPolicy(model=model, n_estimators=50 if quick else 200,
                                        random_state=seed, device=device)

    return make


def _classifier(model: str) -> Any:
    def make(seed: int = 0, quick: bool = False, device: str = "cpu") -> AdvantageClassifierPolicy:
        from ripplecp_policy.learned.advantage import AdvantageClassifierPolicy

        return AdvantageClassifierPolicy(model=model, n_estimators=50 if quick else 200,
                                         random_state=seed, device=device)

    return make


def _stopping(seed: int = 0, quick: bool = False, device: str = "cpu") -> StoppingPolicy:
    from ripplecp_policy.learned.stopping import StoppingPolicy

    return StoppingPolicy(n_estimators=50 if quick else 200, random_state=seed, device=device)


def _fqi(regressor: str) -> Any:
    def make(seed: int = 0, quick: bool = False, device: str = "cpu") -> FittedQPolicy:
        from ripplecp_policy.learned.fqi import FittedQPolicy

        # 25 trees (Ernst et al. 2005 used 50): the tree fits are half of the default
        # study's CPU, and it must run in 3 minutes on 2 cores; tuning searches 20-150
        return FittedQPolicy(regressor=regressor, n_estimators=20 if quick else 25,
                             n_behaviour_seeds=2 if quick else 4, random_state=seed, device=device)

    return make


#: every learned policy kind, registered once (the registry's learned entries), with the
#: report name and role its policy has (checked by the conformance tests)
LEARNED: tuple[PolicyEntry, ...] = (
    register("xgboost", _advantage("xgboost"), name="AdvantageRegressorPolicy[xgboost]",
             role=Role.ONLINE, learned=True, space=_xgboost_advantage_space),
    register("ridge", _advantage("ridge"), name="AdvantageRegressorPolicy[ridge]",
             role=Role.ONLINE, learned=True, space=_ridge_space),
    register("classifier", _classifier("xgboost"), name="AdvantageClassifierPolicy[xgboost]",
             role=Role.ONLINE, learned=True, space=_xgboost_advantage_space, in_study=False),
    register("classifier-logistic", _classifier("logistic"),
             name="AdvantageClassifierPolicy[logistic]", role=Role.ONLINE, learned=True,
             space=_logistic_space, in_study=False),
    register("fqi-extratrees", _fqi("extratrees"), name="FittedQPolicy[extratrees]",
             role=Role.ONLINE, learned=True, space=_fqi_extratrees_space),
    register("fqi-xgboost", _fqi("xgboost"), name="FittedQPolicy[xgboost]", role=Role.ONLINE,
             learned=True, space=_fqi_xgboost_space, in_study=False),
    # the budget-aware stopping learner: out of the default study until it beats the
    # regressors' first-exceedance rule on held-out repositories (README: it did not)
    register("stopping", _stopping, name="StoppingPolicy[xgboost]", role=Role.ONLINE,
             learned=True, space=_stopping_space, in_study=False),
)


def default_learned_policies(seed: int = 0, quick: bool = False) -> list[PlacementPolicy]:
    """The learned policies a matched-budget study compares with the baselines (unfitted):
    the registered learned kinds marked for the study. The study's setting (budget,
    failure model, features) reaches them through ``fit``."""
    return [e.make(seed=seed, quick=quick) for e in LEARNED if e.in_study]


#: the devices the xgboost-based learned policies run on
DEVICES: tuple[str, ...] = ("cpu", "cuda")


def check_device(device: str) -> None:
    """ValueError unless ``device`` is there as xgboost sees it: ``cuda`` needs an xgboost
    built with CUDA that finds a GPU (a tiny booster trained on ``cuda`` keeps it, where
    xgboost would otherwise fall back to the CPU with a warning)."""
    if device == "cpu":
        return
    if device not in DEVICES:
        raise ValueError(f"device must be {' or '.join(DEVICES)}, got {device!r}")
    import json
    import warnings

    import numpy as np
    import xgboost

    if not xgboost.build_info().get("USE_CUDA"):
        raise ValueError(f"{device}: this xgboost {xgboost.__version__} is built without CUDA; "
                         "use --device cpu")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the fall-back warning; read the config instead
            booster = xgboost.train({"device": device, "tree_method": "hist", "verbosity": 0},
                                    xgboost.DMatrix(np.zeros((2, 1)), label=[0.0, 1.0]),
                                    num_boost_round=1)
        seen = json.loads(booster.save_config())["learner"]["generic_param"]["device"]
    except xgboost.core.XGBoostError as exc:
        raise ValueError(f"{device}: xgboost cannot use it: {exc}") from None
    if not str(seen).startswith("cuda"):
        raise ValueError(f"{device}: xgboost finds no GPU on this machine; use --device cpu")
