"""A fitted placement policy as data: the numbers it decides with, written and read by our code.

Loading a model must never run code from it (a pickle runs whatever its author put in it;
MLflow's models-from-code runs the Python file stored beside the model). So an exported
policy is its parameters alone, in ``artifacts/`` of the model folder:

- ``config.json``: what it decides under (budget, features, setting, threshold, provenance)
  and ``"format"``;
- ``"format": "xgboost-json"`` (an advantage policy on xgboost): ``booster.json``, the
  booster in xgboost's own JSON model format;
- ``"format": "arrays"`` (every other kind): ``policy.npz``, numpy arrays read with
  ``allow_pickle=False`` — trees as flat node arrays (:class:`~ripplecp_policy.learned.advantage.PackedTrees`),
  a linear model as its folded coefficients, a constant — with ``config["scorer"]`` naming
  the kind and its scalars, and ``config["rule"]`` the decision (``advantage``: the score
  above the threshold; ``fitted-q``: the fitted cost-to-go of checkpointing below skipping's);
- ``digests.json``: the sha256 of each of those files and of the stored wrapper code.

:func:`read_policy` rebuilds the policy from those files with this module's code, after
checking every digest: a folder changed after export (the wrapper code edited, a number
changed) is refused in one line (:class:`ModelRefused`), as is a pickle (``"format":
"joblib"``, what earlier versions wrote for fitted-Q, ridge and logistic policies) unless the
caller passes ``allow_pickle=True``, the opt-in that names the risk. The digests catch a
corrupt or edited folder; they are not a signature (whoever can write the folder can write
them too): the protection is that nothing in the folder is ever executed.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from features.online import FeatureConfig
from ripplecp_policy.datasets import observation_vector
from ripplecp_policy.learned.advantage import PackedTrees, scorer_from_data
from ripplecp_policy.learned.stopping import checkpoints_left
from ripplecp_policy.policy import BoundaryObservation, Budget, PlacementPolicy, Setting

__all__ = ["ARRAYS", "DIGESTS", "FORMATS", "PICKLE", "XGBOOST_JSON", "ModelRefused", "StoredPolicy", "StoredQPolicy",
           "read_policy", "setting_from_config", "write_policy"]

XGBOOST_JSON, ARRAYS, PICKLE = "xgboost-json", "arrays", "joblib"
#: the formats this version writes (a pickle is read only when asked for)
FORMATS = (XGBOOST_JSON, ARRAYS)
#: the digest file, and the files of each format, under the model folder
DIGESTS = "artifacts/digests.json"
CONFIG = "artifacts/config.json"
DATA = {XGBOOST_JSON: "artifacts/booster.json", ARRAYS: "artifacts/policy.npz"}
#: the largest stored file read (a hostile folder must not exhaust memory)
MAX_FILE_BYTES = 256 * 2**20


class ModelRefused(ValueError):
    """A model folder that is not loaded: a pickle not asked for, a file changed after export,
    a format this version does not know. The message is one line naming the folder."""


def setting_from_config(config: Mapping[str, Any]) -> Setting:
    """The setting a stored policy was fitted under (budget, failure model, features)."""
    fc = config.get("feature_config") or {}
    features = FeatureConfig(**fc) if fc else FeatureConfig()
    hazard = config.get("hazard", "uniform")
    if isinstance(hazard, list):
        hazard = tuple((int(f), float(w)) for f, w in hazard)
    budget = Budget(config["budget_kind"], float(config["budget_amount"]))
    return Setting(budget if config.get("fitted_budget", True) else None, hazard, features)


class StoredPolicy(PlacementPolicy):
    """A learned advantage policy rebuilt from its stored numbers (never from code or a
    pickle): checkpoint when affordable and the score of the feature vector exceeds the
    threshold, as the fitted advantage regressors and classifiers do."""

    #: the decision rule stored as ``config["rule"]``
    rule = "advantage"

    def __init__(self, policy_name: str = "StoredPolicy", feature_names: tuple[str, ...] = (),
                 threshold: float = 0.0) -> None:
        self.policy_name = policy_name
        self.feature_names = feature_names
        self.threshold = threshold

    #: the extra inputs of the scorer beyond the features
    _extra_inputs = 0

    @staticmethod
    def from_scorer(scorer: Any, config: Mapping[str, Any]) -> StoredPolicy:
        """The policy of a stored model: its scorer and ``config.json`` (the rule picks the
        class); the scorer's width is checked against the feature names."""
        rule = str(config.get("rule", "advantage"))
        kinds = {c.rule: c for c in (StoredPolicy, StoredQPolicy, StoredStoppingPolicy)}
        if rule not in kinds:
            raise ValueError(f"unknown decision rule {rule!r}")
        cls = kinds[rule]
        names = tuple(str(n) for n in config["feature_names"])
        pol = cls(str(config["policy"]), names, float(config.get("threshold", math.nan)))
        width = len(names) + cls._extra_inputs
        if isinstance(scorer, PackedTrees) and len(scorer.feature) and scorer.feature.max() >= width:
            raise ValueError(f"trees split on input {int(scorer.feature.max())}; the policy has {width}")
        coef = getattr(scorer, "coef", None)
        if coef is not None and len(coef) != width:
            raise ValueError(f"{len(coef)} coefficients for {width} inputs")
        pol.scorer_ = scorer
        pol.feature_names_ = list(names)
        pol.threshold_ = pol.threshold
        pol.setting_ = setting_from_config(config)
        pol.is_fitted_ = True
        return pol

    @property
    def name(self) -> str:
        return self.policy_name

    def score(self, obs: BoundaryObservation) -> float:
        """The model's score for checkpointing at ``obs``."""
        return float(self.scorer_(observation_vector(obs, self.feature_names_)[None, :])[0])

    def decide(self, obs: BoundaryObservation) -> bool:
        return bool(obs.affordable) and self.score(obs) > self.threshold_


class StoredQPolicy(StoredPolicy):
    """A fitted-Q policy rebuilt from its stored trees: checkpoint when affordable and the
    fitted cost-to-go of checkpointing is below that of skipping; the state is the feature
    vector and the budget left, as :class:`ripplecp_policy.learned.FittedQPolicy` sees it."""

    rule = "fitted-q"
    _extra_inputs = 2  # the budget left, the action

    def q_values(self, obs: BoundaryObservation) -> tuple[float, float]:
        """Fitted cost-to-go (skip, checkpoint) at ``obs``; lower is better."""
        z = np.append(observation_vector(obs, self.feature_names_), obs.remaining)
        g = self.scorer_(np.vstack([np.append(z, 0.0), np.append(z, 1.0)]))
        return float(g[0]), float(g[1])

    def score(self, obs: BoundaryObservation) -> float:
        """G(skip) - G(checkpoint): positive where checkpointing is fitted to pay."""
        g_skip, g_cp = self.q_values(obs)
        return g_skip - g_cp

    def decide(self, obs: BoundaryObservation) -> bool:
        if not obs.affordable:
            return False
        g_skip, g_cp = self.q_values(obs)
        return g_cp < g_skip


class StoredStoppingPolicy(StoredPolicy):
    """A stopping policy rebuilt from its stored trees: checkpoint when affordable and the
    predicted value of checkpointing now over waiting exceeds the threshold; the last input
    is the checkpoints the budget still buys, as :class:`ripplecp_policy.learned.StoppingPolicy`
    sees it."""

    rule = "stopping"

    def score(self, obs: BoundaryObservation) -> float:
        x = observation_vector(obs, self.feature_names_)
        x[-1] = float(checkpoints_left(obs))
        return float(self.scorer_(x[None, :])[0])


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _xgboost_booster(policy: PlacementPolicy) -> Any:
    """The xgboost booster an advantage policy scores with, or None (another model)."""
    model = getattr(policy, "model_", None)
    if model is None or not hasattr(model, "get_booster") or not hasattr(policy, "threshold_"):
        return None
    return model.get_booster()


def write_policy(policy: PlacementPolicy, config: dict[str, Any], folder: Path,
                 code: Mapping[str, Path] = ()) -> dict[str, str]:
    """Write ``policy`` as data into ``folder`` (what becomes ``artifacts/``): its numbers,
    ``config`` (given ``format``, ``rule`` and ``scorer`` here) and the digests, which also
    cover ``code`` (``{name in the model folder: local file}``: the wrapper MLflow stores).
    Returns the MLflow artifacts mapping ``{name: local path}``. A policy with no numbers of
    its own to store is refused (ValueError)."""
    folder = Path(folder)
    booster = _xgboost_booster(policy)
    if booster is not None:
        config.update(format=XGBOOST_JSON, rule="advantage")
        data = bytes(booster.save_raw("json"))
    else:
        to_data = getattr(policy, "scorer_data", None)
        if to_data is None:
            raise ValueError(f"{policy.name}: no stored form (a policy needs scorer_data() to be "
                             "exported without a pickle)")
        kind, params, arrays = to_data()
        rule = getattr(policy, "stored_rule",
                       "fitted-q" if hasattr(policy, "q_values") else "advantage")
        config.update(format=ARRAYS, rule=rule, scorer={"kind": kind, **params})
        buf = io.BytesIO()
        np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
        data = buf.getvalue()
    conf = json.dumps(config, indent=2, sort_keys=True).encode()
    files = {CONFIG: conf, DATA[config["format"]]: data}
    digests = {name: _sha256(b) for name, b in files.items()}
    digests.update({name: _sha256(Path(p).read_bytes()) for name, p in dict(code).items()})
    files[DIGESTS] = json.dumps({"sha256": digests}, indent=2, sort_keys=True).encode()
    out = {}
    for name, b in files.items():
        local = folder / Path(name).name
        local.write_bytes(b)
        out[Path(name).stem] = str(local)
    return out


def _read(path: Path, name: str) -> bytes:
    f = path / name
    if not f.is_file():
        raise ModelRefused(f"{path}: no {name}")
    if f.stat().st_size > MAX_FILE_BYTES:
        raise ModelRefused(f"{path}: {name} is larger than {MAX_FILE_BYTES >> 20} MiB")
    return f.read_bytes()


def read_policy(path: str | Path, *, allow_pickle: bool = False) -> tuple[PlacementPolicy, dict[str, Any]]:
    """The policy stored in the model folder ``path`` and its config, rebuilt from data by
    this module (nothing in the folder is executed). :class:`ModelRefused`, in one line, for
    a pickle (unless ``allow_pickle``: loading one runs any code its author put in it), a file
    that does not match its digest, or a format this version does not know."""
    path = Path(path)
    if not path.is_dir():
        raise ModelRefused(f"{path}: not a model folder")
    try:
        config = json.loads(_read(path, CONFIG))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelRefused(f"{path}: {CONFIG} is not JSON ({exc})") from None
    if not isinstance(config, dict):
        raise ModelRefused(f"{path}: {CONFIG} is not a JSON object")
    fmt = config.get("format")
    if fmt == PICKLE:
        if not allow_pickle:
            raise ModelRefused(
                f"{path}: a pickled policy (format joblib): loading it runs whatever code is "
                "inside it; re-export it with this version, or opt in (--allow-pickle-code-"
                "execution / allow_pickle=True) only for a model you wrote yourself")
        import joblib

        return joblib.load(path / "artifacts" / "policy.joblib"), config
    if fmt not in FORMATS:
        raise ModelRefused(f"{path}: unknown model format {fmt!r} (this version reads "
                           f"{', '.join(FORMATS)})")
    _check_digests(path, fmt)
    data = _read(path, DATA[fmt])
    try:
        if fmt == XGBOOST_JSON:
            scorer = _trees_from_xgboost_json(data)
        else:
            spec = dict(config.get("scorer") or {})
            kind = spec.pop("kind", None)
            with np.load(io.BytesIO(data), allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
            scorer = scorer_from_data(str(kind), spec, arrays)
        policy = StoredPolicy.from_scorer(scorer, config)
    except (KeyError, ValueError, TypeError, IndexError) as exc:
        raise ModelRefused(f"{path}: the stored policy does not load: "
                           f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}") from None
    return policy, config


def _trees_from_xgboost_json(data: bytes) -> PackedTrees:
    import xgboost

    booster = xgboost.Booster()
    booster.load_model(bytearray(data))
    return PackedTrees.from_xgboost(booster)


def _check_digests(path: Path, fmt: str) -> None:
    try:
        listed = json.loads(_read(path, DIGESTS))["sha256"]
        if not isinstance(listed, dict):
            raise TypeError
    except ModelRefused:
        raise ModelRefused(f"{path}: no {DIGESTS} (not exported by this version, or its "
                           "digests were removed): re-export it") from None
    except (ValueError, KeyError, TypeError):
        raise ModelRefused(f"{path}: {DIGESTS} is not a digest list") from None
    for need in (CONFIG, DATA[fmt]):
        if need not in listed:
            raise ModelRefused(f"{path}: {DIGESTS} lists no digest of {need}")
    for name, digest in sorted(listed.items()):
        rel = Path(name)
        if rel.is_absolute() or ".." in rel.parts:
            raise ModelRefused(f"{path}: {DIGESTS} names a file outside the folder ({name})")
        if _sha256(_read(path, name)) != digest:
            raise ModelRefused(f"{path}: {name} does not match its digest: the model folder "
                               "was changed after export; refusing it")
