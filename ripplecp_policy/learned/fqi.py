"""Q-Ripple: fitted-Q iteration over trace-replay transitions (paper, Appendix E).

State ``z_t = [online features x_t, distance to the last checkpoint, remaining budget]``
(plus whether a checkpoint exists and the boundary index, both known online); actions
checkpoint / skip. We fit the cost-to-go ``G(z, a) = -Q(z, a)`` (seconds, lower is
better). One decision at boundary b, reached (so the failure strikes after b):

    G(z_b, a) = a * C(b)                                  # creation, charged on checkpoint
              + h_{b+1} * [J(last', b+1) + RL(last', b+1)]  # failure in the next segment
              + s_{b+1} * min_{a' feasible} G(z_{b+1}, a')  # survive to the next boundary

with ``h`` and ``s`` the failure model's conditional hazard and survival (the failure
weights of the setting it is fitted under, the evaluation's; uniform by default), ``last'`` the last checkpoint after the action, and J read from the
**measured** recovery table of the training task: never a cost model
monotone in elapsed work, which the pilot shows misprices the additional checkpoint
(Appendix E's caution). The failure is taken in expectation rather than sampled, which
removes sampling noise from the targets without changing their mean.

Transitions come from replaying training tasks under an exploratory behaviour policy
(checkpoint with probability ``behaviour_epsilon`` at each affordable boundary, several
seeds); at every visited state both actions are expanded, since the table prices either.
Regressors: extremely randomized trees as in Ernst et al. (2005), or xgboost. Each
iteration logs ``max |G_k - G_{k-1}|`` over the transitions; with gamma = 1 the horizon is
finite, so ``n_iterations`` defaults to the longest task plus one.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import pandas as pd
from sklearn.base import clone

from labelsets.tables import LabelSet
from ripplecp_policy.datasets import (
    POLICY_FEATURES,
    FeatureFn,
    TaskReplay,
    observation_vector,
    replays,
)
from ripplecp_policy.episode import Episode
from ripplecp_policy.learned.advantage import PackedTrees
from ripplecp_policy.policy import (
    BoundaryObservation,
    Budget,
    PlacementPolicy,
    Setting,
    as_setting,
    check_setting,
)
from ripplecp_policy.splits import SplitAudit

_EPS = 1e-9


class FittedQPolicy(PlacementPolicy):
    """Q-Ripple: checkpoint when the fitted cost-to-go of checkpointing is lower than skipping."""

    def __init__(
        self,
        regressor: Literal["extratrees", "xgboost"] = "extratrees",
        n_iterations: int | None = None,
        gamma: float = 1.0,
        n_estimators: int = 50,
        min_samples_leaf: int = 2,
        max_depth: int | None = None,
        learning_rate: float = 0.1,
        behaviour_epsilon: float = 0.3,
        n_behaviour_seeds: int = 4,
        tol: float = 1e-3,
        device: str = "cpu",
        random_state: int = 0,
        feature_fn: FeatureFn | None = None,
    ) -> None:
        self.regressor = regressor
        self.n_iterations = n_iterations
        self.gamma = gamma
        self.n_estimators = n_estimators
        self.min_samples_leaf = min_samples_leaf
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.behaviour_epsilon = behaviour_epsilon
        self.n_behaviour_seeds = n_behaviour_seeds
        self.tol = tol
        self.device = device
        self.random_state = random_state
        self.feature_fn = feature_fn

    # -- model ----------------------------------------------------------------------------
    def _make_regressor(self) -> Any:
        if self.regressor == "extratrees":
            from sklearn.ensemble import ExtraTreesRegressor

            return ExtraTreesRegressor(
                n_estimators=self.n_estimators,
                min_samples_leaf=self.min_samples_leaf,
                max_depth=self.max_depth,
                random_state=self.random_state,
                n_jobs=1,
            )
        if self.regressor == "xgboost":
            from xgboost import XGBRegressor

            return XGBRegressor(
                n_estimators=self.n_estimators,
                max_depth=self.max_depth or 4,
                learning_rate=self.learning_rate,
                tree_method="hist",
                device=self.device,
                n_jobs=1,
                random_state=self.random_state,
            )
        raise ValueError(f"regressor must be 'extratrees' or 'xgboost', got {self.regressor!r}")

    def _pack(self) -> None:
        # flat-array trees: the library's numbers without its per-call overhead, which
        # would dominate the per-boundary decision latency (see PackedTrees)
        if self.regressor == "xgboost":
            self._packed = PackedTrees.from_xgboost(self.model_)
        else:
            self._packed = PackedTrees.from_sklearn_forest(self.model_)

    def scorer_data(self) -> tuple[str, dict[str, Any], dict[str, np.ndarray]]:
        """The fitted cost-to-go as data (``PackedTrees.to_data``): what an exported model
        stores, without a pickle."""
        return self._packed.to_data()

    def _predict(self, X: np.ndarray) -> np.ndarray:
        return self._packed.predict(X)

    # -- transitions ----------------------------------------------------------------------
    def _state(self, obs: BoundaryObservation) -> np.ndarray:
        return np.concatenate([observation_vector(obs, self.feature_names_), [obs.remaining]])

    def transitions(self, tasks: list[TaskReplay], budget: Budget) -> dict[str, np.ndarray]:
        """Trace-replay transitions with both actions expanded at every visited state."""
        rows: list[tuple[Any, ...]] = []
        seen: set[tuple[Any, ...]] = set()
        for task in tasks:
            for seed in range(self.n_behaviour_seeds):
                self._behaviour_episode(task, budget, seed, seen, rows)
        if not rows:
            raise ValueError("fitted-Q: no transitions (no reachable boundary in the training tasks)")
        S, A, C, K, SN, NF, R = zip(*rows, strict=True)
        out = {
            "state": np.vstack(S), "action": np.asarray(A, dtype=float), "cost": np.asarray(C),
            "cont": np.asarray(K), "next_state": np.vstack(SN), "next_feasible": np.asarray(NF),
            "repo": np.asarray(R),
        }
        if not np.isfinite(out["cost"]).all():
            raise ValueError("fitted-Q: a transition cost is not finite (unmeasured recovery cell)")
        return out

    def _behaviour_episode(self, task: TaskReplay, budget: Budget, seed: int,
                           seen: set[tuple[Any, ...]], rows: list[tuple[Any, ...]]) -> None:
        """One episode of the exploratory behaviour policy (checkpoint with probability
        ``behaviour_epsilon`` where affordable), run by the episode runner; at every state
        not seen before, both actions are expanded into ``rows`` with their measured costs."""
        tc = task.costs
        B = tc.n_boundaries
        surv = tc.survival()
        charge = tc.charges(budget)
        fpos = {int(f): k for k, f in enumerate(tc.failures)}
        cost_cell = tc.recovery_cost()
        d = len(self.feature_names_) + 1
        rng = np.random.default_rng([self.random_state, seed, zlib.crc32(task.task_id.encode())])
        ep = Episode(task.task_id, task.repo, budget, prior=task.charge_prior(budget))

        def behave(obs: BoundaryObservation) -> bool:
            b = obs.boundary
            if surv[b] <= 0:  # no failure can strike after b: nothing left to decide
                return False
            key = (task.task_id, b, tuple(obs.history), round(obs.remaining, 9))
            if key not in seen:
                seen.add(key)
                z = self._state(obs)
                for a in (0, 1) if obs.affordable else (0,):
                    hist2 = [*obs.history, b] if a else obs.history
                    spent2 = ep.spent + charge[b] if a else ep.spent
                    last = hist2[-1] if hist2 else 0
                    k = fpos.get(b + 1)
                    h = float(tc.weights[k] / surv[b]) if k is not None else 0.0
                    fail = float(cost_cell[last, k]) if h > 0 else 0.0
                    cont = float(surv[b + 1] / surv[b]) if b + 1 <= B else 0.0
                    if cont > 0:
                        nxt = task.observation(b + 1, hist2, budget, spent2)
                        zn, nf = self._state(nxt), nxt.affordable
                    else:
                        zn, nf = np.zeros(d), False
                    rows.append((z, a, a * float(tc.creation_s[b]) + h * fail, cont, zn, nf, task.repo))
            return bool(obs.affordable and rng.random() < self.behaviour_epsilon)

        ep.walk(behave, tc, charge, task.features_at)

    # -- fitting --------------------------------------------------------------------------
    def fit(self, data: LabelSet, setting: Setting | None = None) -> FittedQPolicy:
        """Fitted-Q iteration on trace-replay transitions of the training tasks in ``data``,
        at the setting's budget and under its failure model and features."""
        setting = as_setting(setting)
        budget = setting.budget
        all_tasks = list(replays(data, setting, self.feature_fn).values())
        tasks = [t for t in all_tasks if t.costs.is_full()]
        self.skipped_tasks_ = sorted(t.task_id for t in all_tasks if not t.costs.is_full())
        if not tasks:
            raise ValueError(
                "fitted-Q needs tasks whose recovery table prices every placement "
                f"(design 'full'); none of {len(all_tasks)} tasks qualifies"
            )
        if budget is None:  # no budget: one that never binds
            budget = Budget("count", float(max(t.n_boundaries for t in tasks)))
        self.budget_ = budget
        tasks[0].features_at(1, ())
        self.feature_names_ = list(tasks[0].feature_names or []) + list(POLICY_FEATURES)
        self.audit_ = SplitAudit()
        tr = self.transitions(tasks, budget)
        self.audit_.record("fqi_transitions", set(tr["repo"]))
        self.repos_ = sorted(set(tr["repo"]))
        n = len(tr["cost"])
        X = np.column_stack([tr["state"], tr["action"]])
        Xn0 = np.column_stack([tr["next_state"], np.zeros(n)])
        Xn1 = np.column_stack([tr["next_state"], np.ones(n)])
        horizon = max(t.n_boundaries for t in tasks) + 1
        n_iter = self.n_iterations or horizon
        g_prev = np.zeros(n)
        history = []
        self.converged_ = False
        for k in range(1, n_iter + 1):
            if k == 1:
                y = tr["cost"].copy()
            else:
                q0 = self._predict(Xn0)
                q1 = np.where(tr["next_feasible"], self._predict(Xn1), np.inf)
                nxt = np.where(tr["cont"] > 0, np.minimum(q0, q1), 0.0)
                y = tr["cost"] + self.gamma * tr["cont"] * nxt
            self.model_ = self._make_regressor()
            self.model_.fit(X, y)
            self._pack()
            g = self._predict(X)
            delta = float(np.max(np.abs(g - g_prev)))
            history.append({"iteration": k, "max_abs_delta": delta, "mean_target": float(y.mean())})
            g_prev = g
            if k > 1 and delta <= self.tol * max(1.0, float(np.mean(np.abs(y)))):
                self.converged_ = True
                break
        self.audit_.record("fqi_targets", set(tr["repo"]))
        self.convergence_ = pd.DataFrame(history)
        self.n_transitions_ = n
        return super().fit(data, setting)

    # -- tuning ---------------------------------------------------------------------------
    def tuning_objective(
        self, data: LabelSet, splits: list[tuple[list[str], list[str]]], setting: Setting
    ) -> tuple[str, Callable[[dict[str, Any]], list[float]]]:
        """For :func:`ripplecp_policy.tuning.tune`: per trial's parameters, the mean measured
        cost of the placements a policy fitted on each split's training repositories takes
        on its validation tasks, at the setting's budget (the fitted one when it has none)."""
        tasks = replays(data, setting, self.feature_fn)

        def run(params: dict[str, Any]) -> list[float]:
            vals = []
            for tr, va in splits:
                est = clone(self).set_params(**params).fit(data.subset(tr), setting)
                b = setting.budget or est.budget_
                costs = []
                for t in va:
                    est.reset(t, 0)
                    c = tasks[t].expected_cost(tasks[t].replay(est.decide, b))
                    if not math.isnan(c):
                        costs.append(c)
                if costs:
                    vals.append(float(np.mean(costs)))
            return vals

        return "validation_cost_s", run

    # -- inference ------------------------------------------------------------------------
    def q_values(self, obs: BoundaryObservation) -> tuple[float, float]:
        """Fitted cost-to-go (skip, checkpoint) at ``obs``; lower is better."""
        z = self._state(obs)
        g = self._predict(np.vstack([np.append(z, 0.0), np.append(z, 1.0)]))
        return float(g[0]), float(g[1])

    def decide(self, obs: BoundaryObservation) -> bool:
        if not obs.affordable:
            return False
        g_skip, g_cp = self.q_values(obs)
        return g_cp < g_skip

    def value_report(self, data: LabelSet, setting: Setting | None = None) -> pd.DataFrame:
        """Predicted expected cost vs the executed cost of the greedy policy, per task.

        Predicted: E over failures before boundary 1 of J(0, f) + RL, plus survival to
        boundary 1 times min_a G(z_1, a). Executed: the measured objective of the placement
        this policy actually takes on the task (``pricing.placement_objective``). Run it on
        held-out tasks to validate the fitted values against measured recoveries. The
        setting defaults to the fitted one (at the budget fitted for); another is refused.
        """
        setting = setting if setting is not None else self.setting_.with_budget(self.budget_)
        check_setting(self, setting)
        budget = setting.budget or self.budget_
        rows = []
        for task in replays(data, setting, self.feature_fn).values():
            tc = task.costs
            if not tc.is_full():
                continue
            surv = tc.survival()
            early = sum(
                float(tc.weights[k] * tc.recovery_cost()[0, k])
                for k, f in enumerate(tc.failures)
                if f <= 1 and tc.weights[k] > 0
            )
            obs = task.observation(1, [], budget)
            g_skip, g_cp = self.q_values(obs)
            v1 = min(g_skip, g_cp) if obs.affordable else g_skip
            predicted = early + float(surv[1]) * v1
            self.reset(task.task_id, 0)
            place = task.replay(self.decide, budget)
            executed = task.expected_cost(place)
            rows.append(
                {
                    "task_id": task.task_id, "repo": task.repo, "predicted_s": predicted,
                    "executed_s": executed, "error_s": predicted - executed,
                    "checkpoints": " ".join(map(str, place)),
                }
            )
        return pd.DataFrame(rows)

    def heldout_metrics(self, data: LabelSet, setting: Setting | None = None) -> dict[str, float]:
        """Value quality on held-out ``data`` (:func:`value_error_summary` of
        :meth:`value_report`) and the fit's convergence."""
        m = value_error_summary(self.value_report(data, setting))
        m["fqi_iterations"] = float(len(self.convergence_))
        m["fqi_final_delta"] = float(self.convergence_["max_abs_delta"].iloc[-1])
        m["fqi_converged"] = float(self.converged_)
        m["fqi_transitions"] = float(self.n_transitions_)
        return m

    def feature_importances(self) -> pd.Series:
        """Impurity / gain importances over the state, remaining budget and action, summing to 1."""
        names = [*self.feature_names_, "fqi__remaining", "fqi__action"]
        imp = np.asarray(self.model_.feature_importances_, dtype=float)
        total = imp.sum()
        return pd.Series(imp / total if total > 0 else imp, index=names, name="importance")

    @property
    def name(self) -> str:
        return f"FittedQPolicy[{self.regressor}]"


def value_error_summary(report: pd.DataFrame) -> dict[str, float]:
    """MAE, bias and relative MAE of predicted vs executed cost from :meth:`value_report`."""
    if report.empty:
        return {"value_mae_s": math.nan, "value_bias_s": math.nan, "value_rel_mae": math.nan}
    err = report["error_s"].to_numpy(dtype=float)
    ex = report["executed_s"].to_numpy(dtype=float)
    return {
        "value_mae_s": float(np.mean(np.abs(err))),
        "value_bias_s": float(np.mean(err)),
        "value_rel_mae": float(np.mean(np.abs(err)) / max(np.mean(np.abs(ex)), _EPS)),
    }
