"""Local advantage policies: predict measured checkpoint advantage, checkpoint above a threshold.

The paper's primary model (Appendix D): gradient-boosted trees beside a ridge regression,
predicting measured A_CP from online features; optionally a classifier for A_CP > 0
(unbalanced: 17 of 24 pilot cells positive). Online, the policy checkpoints when the
score exceeds a threshold and the budget allows. The threshold is chosen on validation
repositories inside the training data: each training repository in turn is scored by a
model fitted on the others, its tasks are replayed under every candidate threshold with
the measured recovery tables, and the threshold with the lowest mean measured cost wins
(``-inf`` reproduces the first-boundary rule, so the validation choice can fall back to it).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy.stats import spearmanr
from sklearn.base import clone
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

from labelsets.definitions import STRATA
from labelsets.tables import LabelSet
from ripplecp_policy.datasets import (
    AdvantageTable,
    FeatureFn,
    TaskReplay,
    advantage_table,
    observation_vector,
    replays,
)
from ripplecp_policy.policy import BoundaryObservation, Budget, PlacementPolicy, Setting, as_setting
from ripplecp_policy.splits import SplitAudit, inner_splits

Scorer = Callable[[np.ndarray], np.ndarray]


def rank_report(y_true: np.ndarray, y_pred: np.ndarray, strata: np.ndarray) -> dict[str, float]:
    """Error and rank quality: RMSE, MAE and within-stratum Spearman (never pooled).

    Pooling the strata would manufacture a correlation from the first/additional split
    alone (paper, Table 2), so rank quality is reported per stratum and as their mean.
    """
    y_true, y_pred, strata = np.asarray(y_true, float), np.asarray(y_pred, float), np.asarray(strata)
    out: dict[str, float] = {
        "rmse": float(np.sqrt(np.mean((y_true - y_pred) ** 2))) if len(y_true) else math.nan,
        "mae": float(np.mean(np.abs(y_true - y_pred))) if len(y_true) else math.nan,
        "n": float(len(y_true)),
    }
    rhos = []
    for s in STRATA:
        m = strata == s
        rho = math.nan
        if m.sum() >= 3 and np.ptp(y_true[m]) > 0 and np.ptp(y_pred[m]) > 0:
            rho = float(spearmanr(y_true[m], y_pred[m]).statistic)
        out[f"spearman_{s}"] = rho
        if not math.isnan(rho):
            rhos.append(rho)
    out["spearman_within"] = float(np.mean(rhos)) if rhos else math.nan
    return out


_MEMOS: list[tuple[LabelSet, dict[Any, Any]]] = []
_MEMO_SIZE = 8


def _memo_for(data: LabelSet) -> dict[Any, Any]:
    """Fits shared by every policy fitted on this label set object (small LRU, identity-keyed).

    The advantage table and the scorer fits depend on the data, the features and the model's
    parameters, never on the budget or the failure model: a study fitting one policy under
    several budgets (the matched-budget folds) fits each model once. Fits are deterministic,
    so a memoised model is the model a fresh fit gives."""
    for i, (ls, memo) in enumerate(_MEMOS):
        if ls is data:
            _MEMOS.append(_MEMOS.pop(i))
            return memo
    memo: dict[Any, Any] = {}
    _MEMOS.append((data, memo))
    del _MEMOS[:-_MEMO_SIZE]
    return memo


def threshold_placements(
    task: TaskReplay, score: Callable[[BoundaryObservation], float], thresholds: Sequence[float],
    budget: Budget,
) -> list[tuple[int, ...]]:
    """The placement of "checkpoint when ``score`` > threshold" on ``task`` under ``budget``,
    for every threshold: what :meth:`TaskReplay.replay` gives for each, with one walk per
    distinct decision path instead of one per threshold. At each boundary the thresholds on
    a path split into those that ask to checkpoint and those that do not; an ask the budget
    cannot afford is refused (the episode runner's rule: the observation's ``affordable``
    is its check), so it stays on the skipping path."""
    out: list[tuple[int, ...]] = [()] * len(thresholds)
    B = task.n_boundaries
    stack: list[tuple[int, tuple[int, ...], float, list[int]]] = [(1, (), 0.0, list(range(len(thresholds))))]
    while stack:
        b, hist, spent, idx = stack.pop()
        if b > B:
            for i in idx:
                out[i] = hist
            continue
        obs = task.observation(b, hist, budget, spent)
        s = score(obs)
        ask = [i for i in idx if s > thresholds[i]]
        if ask and obs.affordable:
            stay = [i for i in idx if not s > thresholds[i]]
            stack.append((b + 1, (*hist, b), spent + task.charge(b, budget), ask))
        else:
            stay = idx
        if stay:
            stack.append((b + 1, hist, spent, stay))
    return out


class _ScoredPolicy(PlacementPolicy):
    """Shared machinery: fit a scorer on decision cells, pick a threshold on validation repos."""

    #: parameters that choose the threshold, not the scorer (left out of the fit memo's key)
    _THRESHOLD_PARAMS = ("threshold", "n_thresholds")

    _default_threshold: float = 0.0
    _tuning_metric: str = "rmse"

    # -- subclass hooks -------------------------------------------------------------------
    def _fit_model(self, X: np.ndarray, y: np.ndarray) -> Any:
        raise NotImplementedError

    def _scorer_for(self, model: Any) -> Scorer:
        raise NotImplementedError

    def _fit_scorer(self, X: np.ndarray, y: np.ndarray) -> tuple[Any, Scorer]:
        model = self._fit_model(X, y)
        return model, self._scorer_for(model)

    def _memo_key(self, *what: Any) -> tuple[Any, ...]:
        params = tuple(sorted((k, v) for k, v in self.get_params(deep=False).items()
                              if k not in self._THRESHOLD_PARAMS))
        return (type(self), params, *what)

    def _table_for(self, data: LabelSet, tasks: dict[str, TaskReplay], setting: Setting) -> AdvantageTable:
        """The advantage table of ``data`` (memoised per label set, features, target rule)."""
        key = ("table", setting.features, setting.hazard, self.feature_fn, self.verified_only)
        memo = _memo_for(data)
        if key not in memo:
            memo[key] = advantage_table(data, tasks, verified_only=self.verified_only, hazard=setting.hazard)
        return memo[key]

    def _fit_on(self, data: LabelSet, table: AdvantageTable, setting: Setting) -> tuple[Any, Scorer]:
        """:meth:`_fit_scorer` on ``table`` (all of it or a repository subset of the table of
        ``data``), memoised per repositories, features and model parameters."""
        key = self._memo_key("fit", setting.features, setting.hazard, frozenset(table.repos), len(table.frame))
        memo = _memo_for(data)
        if key not in memo:
            memo[key] = self._fit_scorer(table.X, self._target(table))
        return memo[key]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(super().__getstate__())  # a copy: Python returns the live __dict__
        state.pop("_scorer", None)  # closures do not pickle; rebuilt from model_ on load
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        if "model_" in state:
            self._scorer = self._scorer_for(self.model_)

    # -- fitting --------------------------------------------------------------------------
    def fit(self, data: LabelSet, setting: Setting | None = None) -> _ScoredPolicy:
        """Fit on ``data`` (training repositories only) under ``setting``; threshold from
        inner validation at the setting's budget, with validation costs expectations under
        its failure model (the evaluation's)."""
        setting = as_setting(setting)
        budget = setting.budget
        tasks = replays(data, setting, self.feature_fn)
        table = self._table_for(data, tasks, setting)
        self.audit_ = SplitAudit()
        self.feature_names_ = list(table.feature_names)
        self.repos_ = sorted(table.repos)
        if self.threshold is not None:
            self.threshold_ = float(self.threshold)
            self.threshold_source_ = "given"
            self.validation_costs_ = pd.DataFrame()
        elif budget is None:
            self.threshold_ = float(self._default_threshold)
            self.threshold_source_ = "default (no budget given)"
            self.validation_costs_ = pd.DataFrame()
        else:
            self._select_threshold(data, table, tasks, setting)
        self.model_, self._scorer = self._fit_on(data, table, setting)
        self.audit_.record("scaler", table.repos)
        self.audit_.record("model", table.repos)
        self.train_report_ = rank_report(
            table.y, self._scorer(table.X), table.frame["stratum"].to_numpy()
        )
        return super().fit(data, setting)

    def _target(self, table: AdvantageTable) -> np.ndarray:
        return table.y

    def _select_threshold(
        self, data: LabelSet, table: AdvantageTable, tasks: dict[str, TaskReplay], setting: Setting
    ) -> None:
        budget = setting.budget
        assert budget is not None
        task_repo = {t: r.repo for t, r in tasks.items()}
        splits = list(inner_splits(table.repos, task_repo, max_splits=self.max_inner_splits))
        if not splits:
            self.threshold_ = float(self._default_threshold)
            self.threshold_source_ = "default (one training repository: no validation split)"
            self.validation_costs_ = pd.DataFrame()
            return
        scored: list[tuple[TaskReplay, Scorer]] = []
        oof: list[np.ndarray] = []
        for tr, va in splits:
            tr_repos = {task_repo[t] for t in tr}
            va_repos = {task_repo[t] for t in va}
            sub = table.subset_repos(tr_repos)
            if sub.frame.empty:
                continue
            _, scorer = self._fit_on(data, sub, setting)
            self.audit_.record("threshold_inner_model", tr_repos)
            self.audit_.record("threshold", tr_repos | va_repos)
            val = table.subset_repos(va_repos)
            if not val.frame.empty:
                oof.append(scorer(val.X))
            scored.extend((tasks[t], scorer) for t in va)
        preds = np.concatenate(oof) if oof else np.array([self._default_threshold])
        qs = np.quantile(preds, np.linspace(0.0, 1.0, self.n_thresholds))
        cands = sorted({-math.inf, math.inf, float(self._default_threshold), *map(float, qs)})
        names = self.feature_names_
        cache: dict[tuple[int, str, int, tuple[int, ...]], float] = {}

        def score_of(i: int, scorer: Scorer, obs: BoundaryObservation) -> float:
            key = (i, obs.task_id, obs.boundary, tuple(obs.history))
            if key not in cache:
                cache[key] = float(scorer(observation_vector(obs, names)[None, :])[0])
            return cache[key]

        # one walk per distinct decision path: thresholds that agree on every score seen so
        # far share the walk (13 thresholds take 2-5 paths on a typical task), and each
        # placement is priced once per task
        placements = [threshold_placements(task, lambda o, i=i, s=scorer: score_of(i, s, o), cands, budget)
                      for i, (task, scorer) in enumerate(scored)]
        priced: list[dict[tuple[int, ...], float]] = [{} for _ in scored]
        rows = []
        for j, theta in enumerate(cands):
            costs, counts = [], []
            for i, (task, _) in enumerate(scored):
                place = placements[i][j]
                if place not in priced[i]:
                    priced[i][place] = task.expected_cost(place)
                cost = priced[i][place]
                if not math.isnan(cost):
                    costs.append(cost)
                    counts.append(len(place))
            rows.append(
                {
                    "threshold": theta,
                    "mean_cost": float(np.mean(costs)) if costs else math.nan,
                    "mean_checkpoints": float(np.mean(counts)) if counts else math.nan,
                    "n_tasks": len(costs),
                }
            )
        vc = pd.DataFrame(rows)
        self.validation_costs_ = vc
        best = vc["mean_cost"].min()
        if not np.isfinite(best):
            self.threshold_ = float(self._default_threshold)
            self.threshold_source_ = "default (validation tasks could not be priced)"
            return
        tied = vc[np.isclose(vc["mean_cost"], best, rtol=0, atol=1e-9)]
        # the largest tied threshold: checkpoint only where validation shows it pays
        self.threshold_ = float(tied["threshold"].max())
        self.threshold_source_ = "validation repositories (min mean measured cost)"

    # -- tuning ---------------------------------------------------------------------------
    def _validation_error(self, pred: np.ndarray, target: np.ndarray) -> float:
        return float(np.sqrt(np.mean((pred - target) ** 2)))

    def tuning_objective(
        self, data: LabelSet, splits: list[tuple[list[str], list[str]]], setting: Setting
    ) -> tuple[str, Callable[[dict[str, Any]], list[float]]]:
        """For :func:`ripplecp_policy.tuning.tune`: the objective's name and, per trial's
        parameters, the validation error of the model on each split's validation
        repositories (the feature table does not depend on the parameters: built once)."""
        table = advantage_table(data, replays(data, setting, self.feature_fn), verified_only=self.verified_only,
                                hazard=setting.hazard)
        task_repo = dict(zip(data.tasks["task_id"], data.tasks["repo"], strict=True))

        def run(params: dict[str, Any]) -> list[float]:
            est = clone(self).set_params(**params)
            vals = []
            for tr, va in splits:
                sub = table.subset_repos({task_repo[t] for t in tr})
                val = table.subset_repos({task_repo[t] for t in va})
                if sub.frame.empty or val.frame.empty:
                    continue
                _, scorer = est._fit_scorer(sub.X, est._target(sub))
                vals.append(est._validation_error(scorer(val.X), est._target(val)))
            return vals

        return self._tuning_metric, run

    # -- inference ------------------------------------------------------------------------
    def score(self, obs: BoundaryObservation) -> float:
        """The model's score for checkpointing at ``obs`` (advantage seconds or P(A>0))."""
        return float(self._scorer(observation_vector(obs, self.feature_names_)[None, :])[0])

    def scorer_data(self) -> tuple[str, dict[str, Any], dict[str, np.ndarray]]:
        """The fitted scorer as data (kind, scalars, arrays): what an exported model stores
        and :func:`scorer_from_data` rebuilds, without a pickle."""
        return self._scorer.to_data()

    def score_frame(self, X: np.ndarray) -> np.ndarray:
        return self._scorer(np.asarray(X, dtype=np.float64))

    def decide(self, obs: BoundaryObservation) -> bool:
        if not obs.affordable:
            return False
        return self.score(obs) > self.threshold_

    def report(self, table: AdvantageTable) -> dict[str, float]:
        """Error and within-stratum rank quality of the advantage scores on ``table``."""
        return rank_report(table.y, self.score_frame(table.X), table.frame["stratum"].to_numpy())

    def heldout_metrics(self, data: LabelSet, setting: Setting) -> dict[str, float]:
        """Model quality on held-out ``data`` under ``setting``: :meth:`report` of its
        advantage table, and the threshold in use."""
        table = advantage_table(data, replays(data, setting, self.feature_fn), hazard=setting.hazard)
        return {**self.report(table), "threshold": float(self.threshold_)}

    def feature_importances(self) -> pd.Series:
        """Gain importances (trees) or |standardized coefficient| (linear), summing to 1."""
        m = self.model_
        if hasattr(m, "feature_importances_"):
            imp = np.asarray(m.feature_importances_, dtype=float)
        elif isinstance(m, Pipeline):
            imp = np.abs(np.ravel(m[-1].coef_)).astype(float)
        else:
            imp = np.zeros(len(self.feature_names_))
        total = imp.sum()
        imp = imp / total if total > 0 else imp
        return pd.Series(imp, index=self.feature_names_, name="importance")

    @property
    def name(self) -> str:
        return f"{type(self).__name__}[{self.model}]"


class PackedTrees:
    """Every tree of a fitted ensemble as flat arrays, walked level by level for all trees at once.

    One boundary is one row: numpy walks all trees in ~depth vectorized steps, an order of
    magnitude under a library call's fixed overhead (xgboost ``inplace_predict``, sklearn
    ``predict``) — what keeps per-boundary inference well under a millisecond. Exact: the
    same comparisons (xgboost ``x < t`` in float32, sklearn ``x <= t`` on float32 inputs)
    and the same missing-value routing as the library.
    """

    def __init__(
        self, feature: Any, threshold: Any, left: Any, right: Any, default_left: Any, value: Any,
        roots: Any, base: float, mean: bool, strict: bool, link: str,
    ) -> None:
        self.feature = np.asarray(feature, np.int64)
        self.threshold = threshold
        self.left = np.asarray(left, np.int64)
        self.right = np.asarray(right, np.int64)
        self.default_left = np.asarray(default_left, bool)
        self.value = np.asarray(value, np.float64)
        self.roots = np.asarray(roots, np.int64)
        self.base = float(base)
        self.mean = mean
        self.strict = strict
        self.link = link

    @classmethod
    def from_xgboost(cls, model: Any) -> PackedTrees:
        booster = model.get_booster() if hasattr(model, "get_booster") else model
        cfg = json.loads(booster.save_raw("json"))
        learner = cfg["learner"]
        trees = learner["gradient_booster"]["model"]["trees"]
        base = float(str(learner["learner_model_param"]["base_score"]).strip("[]"))
        obj = learner["objective"]["name"]
        feat, thr, lo, hi, dl, val, roots = [], [], [], [], [], [], []
        off = 0
        for t in trees:
            lc = np.asarray(t["left_children"], np.int64)
            rc = np.asarray(t["right_children"], np.int64)
            leaf = lc < 0
            sc = np.asarray(t["split_conditions"], np.float32)
            feat.append(np.where(leaf, -1, np.asarray(t["split_indices"], np.int64)))
            thr.append(sc)
            lo.append(np.where(leaf, 0, lc) + off)
            hi.append(np.where(leaf, 0, rc) + off)
            dl.append(np.asarray(t["default_left"], bool))
            val.append(np.where(leaf, sc, 0.0))
            roots.append(off)
            off += len(lc)
        link = "identity"
        if obj == "binary:logistic":
            link = "logistic"
            base = float(np.log(base / (1 - base)))
        elif obj != "reg:squarederror":
            raise ValueError(f"unsupported xgboost objective {obj!r}")
        return cls(np.concatenate(feat), np.concatenate(thr).astype(np.float32), np.concatenate(lo),
                   np.concatenate(hi), np.concatenate(dl), np.concatenate(val), roots, base, False, True, link)

    @classmethod
    def from_sklearn_forest(cls, model: Any) -> PackedTrees:
        feat, thr, lo, hi, dl, val, roots = [], [], [], [], [], [], []
        off = 0
        for est in model.estimators_:
            tr = est.tree_
            leaf = tr.children_left < 0
            feat.append(np.where(leaf, -1, tr.feature))
            thr.append(tr.threshold)
            lo.append(np.where(leaf, 0, tr.children_left) + off)
            hi.append(np.where(leaf, 0, tr.children_right) + off)
            dl.append(np.asarray(tr.missing_go_to_left, bool))
            val.append(tr.value.reshape(tr.node_count, -1)[:, 0])
            roots.append(off)
            off += tr.node_count
        return cls(np.concatenate(feat), np.concatenate(thr), np.concatenate(lo), np.concatenate(hi),
                   np.concatenate(dl), np.concatenate(val), roots, 0.0, True, False, "identity")

    #: the arrays of :meth:`to_data` and :meth:`from_data`
    ARRAYS = ("feature", "threshold", "left", "right", "default_left", "value", "roots")

    def to_data(self) -> tuple[str, dict[str, Any], dict[str, np.ndarray]]:
        """The trees as data: ``("trees", scalars, arrays)`` (:func:`scorer_from_data`)."""
        return ("trees", {"base": self.base, "mean": self.mean, "strict": self.strict,
                          "link": self.link},
                {k: np.asarray(getattr(self, k)) for k in self.ARRAYS})

    @classmethod
    def from_data(cls, params: dict[str, Any], arrays: dict[str, np.ndarray]) -> PackedTrees:
        """The trees :meth:`to_data` wrote, checked: node indices inside the arrays, one
        length for every per-node array, a known link (a corrupt file fails here, once,
        not at a boundary)."""
        n = len(arrays["feature"])
        if any(len(arrays[k]) != n for k in cls.ARRAYS if k != "roots"):
            raise ValueError("trees: the per-node arrays differ in length")
        for k in ("left", "right", "roots"):
            a = np.asarray(arrays[k])
            if a.dtype.kind not in "iu" or (len(a) and (a.min() < 0 or a.max() >= n)):
                raise ValueError(f"trees: {k} holds a node index outside 0..{n - 1}")
        if params["link"] not in ("identity", "logistic"):
            raise ValueError(f"trees: unknown link {params['link']!r}")
        thr = np.asarray(arrays["threshold"])
        if thr.dtype.kind != "f":
            raise ValueError("trees: thresholds are not floating point")
        trees = cls(arrays["feature"], thr, arrays["left"], arrays["right"],
                    arrays["default_left"], arrays["value"], arrays["roots"],
                    float(params["base"]), bool(params["mean"]), bool(params["strict"]),
                    str(params["link"]))
        if len(trees.feature) and trees.feature.max() >= 0:
            inner = trees.feature >= 0
            # an inner node's children come after it: the level-by-level walk ends
            idx = np.arange(n)
            if ((trees.left[inner] <= idx[inner]).any() or (trees.right[inner] <= idx[inner]).any()):
                raise ValueError("trees: a child node does not follow its parent")
        return trees

    def __call__(self, X: np.ndarray) -> np.ndarray:
        return self.predict(X)

    def predict(self, X: np.ndarray) -> np.ndarray:
        X = np.atleast_2d(np.asarray(X, dtype=np.float32))
        if not self.strict:
            X = X.astype(np.float64)  # sklearn: float32 inputs against float64 thresholds
        n = X.shape[0]
        nodes = np.broadcast_to(self.roots, (n, len(self.roots))).copy()
        rows = np.arange(n)[:, None]
        while True:
            f = self.feature[nodes]
            inner = f >= 0
            if not inner.any():
                break
            x = X[rows, np.maximum(f, 0)]
            t = self.threshold[nodes]
            go = np.where(np.isnan(x), self.default_left[nodes], (x < t) if self.strict else (x <= t))
            nodes = np.where(inner, np.where(go, self.left[nodes], self.right[nodes]), nodes)
        v = self.value[nodes]
        out = v.mean(axis=1) if self.mean else v.sum(axis=1, dtype=np.float64) + self.base
        if self.link == "logistic":
            out = 1.0 / (1.0 + np.exp(-out))
        return out


class Constant:
    """A degenerate classifier (one class in training): a constant probability."""

    def __init__(self, p: float) -> None:
        self.p = p

    def __call__(self, X: np.ndarray) -> np.ndarray:
        return np.full(len(X), self.p)

    def to_data(self) -> tuple[str, dict[str, Any], dict[str, np.ndarray]]:
        """``("constant", {"p": p}, {})`` (:func:`scorer_from_data`)."""
        return "constant", {"p": float(self.p)}, {}


class LinearScorer:
    """A fitted imputer, scaler and linear model folded into arrays (microseconds per
    boundary): ``z = ((x, NaN filled) - mean) / scale . coef + intercept``, through the
    logistic function for a classifier."""

    ARRAYS = ("fill", "mean", "scale", "coef")

    def __init__(self, fill: Any, mean: Any, scale: Any, coef: Any, intercept: float,
                 logistic: bool = False) -> None:
        self.fill = np.asarray(fill, dtype=float)
        self.mean = np.asarray(mean, dtype=float)
        self.scale = np.asarray(scale, dtype=float)
        self.coef = np.asarray(coef, dtype=float)
        self.intercept = float(intercept)
        self.logistic = bool(logistic)
        if not (self.fill.shape == self.mean.shape == self.scale.shape == self.coef.shape
                and self.coef.ndim == 1):
            raise ValueError("linear: fill, mean, scale and coef differ in shape")

    @classmethod
    def from_pipeline(cls, pipe: Pipeline, logistic: bool = False) -> LinearScorer:
        imp: SimpleImputer = pipe.named_steps["impute"]
        sc: StandardScaler = pipe.named_steps["scale"]
        lin = pipe.named_steps["model"]
        return cls(imp.statistics_, sc.mean_, sc.scale_, np.ravel(lin.coef_),
                   float(np.ravel(lin.intercept_)[0]), logistic)

    def __call__(self, X: np.ndarray) -> np.ndarray:
        X = np.where(np.isnan(X), self.fill, X)
        z = ((X - self.mean) / self.scale) @ self.coef + self.intercept
        return 1.0 / (1.0 + np.exp(-z)) if self.logistic else z

    def to_data(self) -> tuple[str, dict[str, Any], dict[str, np.ndarray]]:
        """``("linear", scalars, arrays)`` (:func:`scorer_from_data`)."""
        return ("linear", {"intercept": self.intercept, "logistic": self.logistic},
                {k: getattr(self, k) for k in self.ARRAYS})


def scorer_from_data(kind: str, params: dict[str, Any], arrays: dict[str, np.ndarray]) -> Scorer:
    """The scorer a policy's ``to_data`` wrote (``kind``: trees, linear or constant), rebuilt
    from its numbers alone."""
    if kind == "trees":
        return PackedTrees.from_data(params, arrays)
    if kind == "linear":
        return LinearScorer(*(arrays[k] for k in LinearScorer.ARRAYS), float(params["intercept"]),
                            bool(params["logistic"]))
    if kind == "constant":
        return Constant(float(params["p"]))
    raise ValueError(f"unknown scorer kind {kind!r}")


def _xgb_scorer(model: Any) -> Scorer:
    return PackedTrees.from_xgboost(model)


def _linear_pipeline(model: Any) -> Pipeline:
    # StandardScaler is fitted inside fit(): on the training repositories only
    return Pipeline(
        [
            ("impute", SimpleImputer(strategy="median", keep_empty_features=True)),
            ("scale", StandardScaler()),
            ("model", model),
        ]
    )


class AdvantageRegressorPolicy(_ScoredPolicy):
    """Gradient-boosted (xgboost) or ridge regression of measured advantage (seconds)."""

    def __init__(
        self,
        model: Literal["xgboost", "ridge"] = "xgboost",
        threshold: float | None = None,
        device: str = "cpu",
        n_estimators: int = 200,
        max_depth: int = 3,
        learning_rate: float = 0.05,
        min_child_weight: float = 1.0,
        subsample: float = 1.0,
        reg_lambda: float = 1.0,
        alpha: float = 1.0,
        random_state: int = 0,
        feature_fn: FeatureFn | None = None,
        n_thresholds: int = 11,
        max_inner_splits: int | None = 5,
        verified_only: bool = False,
    ) -> None:
        self.model = model
        self.threshold = threshold
        self.device = device
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.min_child_weight = min_child_weight
        self.subsample = subsample
        self.reg_lambda = reg_lambda
        self.alpha = alpha
        self.random_state = random_state
        self.feature_fn = feature_fn
        self.n_thresholds = n_thresholds
        self.max_inner_splits = max_inner_splits
        self.verified_only = verified_only

    def _fit_model(self, X: np.ndarray, y: np.ndarray) -> Any:
        if self.model == "xgboost":
            from xgboost import XGBRegressor

            m = XGBRegressor(
                n_estimators=self.n_estimators,
                max_depth=self.max_depth,
                learning_rate=self.learning_rate,
                min_child_weight=self.min_child_weight,
                subsample=self.subsample,
                reg_lambda=self.reg_lambda,
                tree_method="hist",
                device=self.device,
                n_jobs=1,
                random_state=self.random_state,
            )
            m.fit(X, y)
            return m
        if self.model == "ridge":
            pipe = _linear_pipeline(Ridge(alpha=self.alpha))
            pipe.fit(X, y)
            return pipe
        raise ValueError(f"model must be 'xgboost' or 'ridge', got {self.model!r}")

    def _scorer_for(self, model: Any) -> Scorer:
        return LinearScorer.from_pipeline(model) if isinstance(model, Pipeline) else _xgb_scorer(model)


class AdvantageClassifierPolicy(_ScoredPolicy):
    """Classifier for A_CP > 0, reweighted for class imbalance; scores are P(A_CP > 0)."""

    _default_threshold = 0.5

    def __init__(
        self,
        model: Literal["xgboost", "logistic"] = "xgboost",
        threshold: float | None = None,
        device: str = "cpu",
        n_estimators: int = 200,
        max_depth: int = 3,
        learning_rate: float = 0.05,
        C: float = 1.0,
        random_state: int = 0,
        feature_fn: FeatureFn | None = None,
        n_thresholds: int = 11,
        max_inner_splits: int | None = 5,
        verified_only: bool = False,
    ) -> None:
        self.model = model
        self.threshold = threshold
        self.device = device
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.C = C
        self.random_state = random_state
        self.feature_fn = feature_fn
        self.n_thresholds = n_thresholds
        self.max_inner_splits = max_inner_splits
        self.verified_only = verified_only

    _tuning_metric = "brier"

    def _target(self, table: AdvantageTable) -> np.ndarray:
        return (table.y > 0).astype(int)

    def _validation_error(self, pred: np.ndarray, target: np.ndarray) -> float:
        return float(np.mean((pred - target) ** 2))  # Brier score of P(A_CP > 0)

    def _fit_model(self, X: np.ndarray, y: np.ndarray) -> Any:
        pos = int(y.sum())
        neg = int(len(y) - pos)
        if pos == 0 or neg == 0:
            return Constant(float(pos > 0))
        if self.model == "xgboost":
            from xgboost import XGBClassifier

            m = XGBClassifier(
                n_estimators=self.n_estimators,
                max_depth=self.max_depth,
                learning_rate=self.learning_rate,
                scale_pos_weight=neg / pos,
                tree_method="hist",
                device=self.device,
                n_jobs=1,
                random_state=self.random_state,
            )
            m.fit(X, y)
            return m
        if self.model == "logistic":
            pipe = _linear_pipeline(LogisticRegression(C=self.C, class_weight="balanced", max_iter=1000))
            pipe.fit(X, y)
            return pipe
        raise ValueError(f"model must be 'xgboost' or 'logistic', got {self.model!r}")

    def _scorer_for(self, model: Any) -> Scorer:
        if isinstance(model, Constant):
            return model
        if isinstance(model, Pipeline):
            return LinearScorer.from_pipeline(model, logistic=True)
        return _xgb_scorer(model)  # binary:logistic: inplace_predict returns P(A > 0)

    def report(self, table: AdvantageTable) -> dict[str, float]:
        """Brier score and balanced accuracy of P(A > 0), and within-stratum rank quality."""
        p = self.score_frame(table.X)
        y = (table.y > 0).astype(float)
        out = rank_report(table.y, p, table.frame["stratum"].to_numpy())
        del out["rmse"], out["mae"]  # a probability is not in seconds
        out["brier"] = float(np.mean((p - y) ** 2)) if len(y) else math.nan
        hit = p > self.threshold_
        tpr = float(hit[y == 1].mean()) if (y == 1).any() else math.nan
        tnr = float((~hit[y == 0]).mean()) if (y == 0).any() else math.nan
        out["balanced_accuracy"] = float(np.nanmean([tpr, tnr]))
        return out

    def feature_importances(self) -> pd.Series:
        if isinstance(self.model_, Constant):
            return pd.Series(np.zeros(len(self.feature_names_)), index=self.feature_names_, name="importance")
        return super().feature_importances()
