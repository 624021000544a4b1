"""A conformance suite every placement policy, baseline or learned, must pass.

:func:`check_policy` runs a policy on a label set and raises ``AssertionError`` with a
message naming the policy, task, budget and check when it breaks a rule:

1. **scikit-learn contract** — ``get_params``/``clone`` work and round-trip; ``fit``
   returns ``self`` and leaves the parameters unchanged; attributes ``fit`` adds end in
   ``_`` (private ``_x`` helpers aside).
2. **Budget never exceeded** — by count, creation seconds and bytes (policies marked
   with the role of an unmatched reference are exempt, but must say so).
3. **Deterministic for a seed** — two fresh fits and two runs with the same seed place
   the same checkpoints.
4. **Prefix causality** — an online policy's decisions at and before boundary b do not
   change when the trajectory's future is altered after b (events mutated: errors,
   bytes, durations; future checkpoint costs changed) or truncated at b. Offline
   policies (oracle, optimum) read the table by design and are exempt.
5. **The fitted setting is the evaluated one** — ``fit`` records the setting it was given
   (``setting_``), and evaluating the fitted policy under another failure model is an
   error (:class:`~ripplecp_policy.policy.SettingMismatchError`), not a silent mismatch.

Every check runs under the :class:`~ripplecp_policy.policy.Setting` s given (budgets by
count, creation seconds and bytes by default). Use it in a test:
``check_policy(lambda: MyPolicy(), label_set)``.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import clone

from ripplecp_policy.episode import Placement
from ripplecp_policy.evaluation import Evaluator
from ripplecp_policy.policy import (
    HAZARDS,
    Budget,
    PlacementPolicy,
    Role,
    Setting,
    SettingMismatchError,
)
from ripplecp_policy.pricing import fits

PolicyFactory = Callable[[], PlacementPolicy]


def default_settings(label_set: Any) -> list[Setting]:
    """Settings the suite checks (uniform failures, default features): budgets of 1 and 2
    checkpoints and 2 checkpoints' worth of seconds and of bytes."""
    cp = label_set.checkpoints
    return [
        Setting(Budget("count", 1)),
        Setting(Budget("count", 2)),
        Setting(Budget("seconds", 2.0 * float(cp["creation_s"].mean()))),
        Setting(Budget("bytes", 2.0 * float(cp["size_bytes"].astype(float).mean()))),
    ]


def _params_equal(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a.keys() != b.keys():
        return False
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, PlacementPolicy) or hasattr(x, "get_params"):
            continue
        try:
            same = x is y or x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))
        except Exception:  # noqa: BLE001 - arrays and odd types: fall back to repr
            same = repr(x) == repr(y)
        if not bool(np.all(same)):
            return False
    return True


def check_sklearn_contract(policy_factory: PolicyFactory, label_set: Any, setting: Setting) -> PlacementPolicy:
    """Check (1); return the fitted policy."""
    policy = policy_factory()
    name = type(policy).__name__
    try:
        params = policy.get_params()
    except Exception as exc:  # noqa: BLE001
        raise AssertionError(f"{name}: get_params() failed: {exc!r}") from exc
    try:
        twin = clone(policy)
    except Exception as exc:  # noqa: BLE001
        raise AssertionError(f"{name}: sklearn.base.clone() failed: {exc!r}") from exc
    assert _params_equal(twin.get_params(), params), (
        f"{name}: clone() does not round-trip the parameters: {params} vs {twin.get_params()}"
    )
    before = set(vars(policy))
    out = policy.fit(label_set, setting)
    assert out is policy, f"{name}: fit() must return self, got {type(out).__name__}"
    assert _params_equal(policy.get_params(), params), (
        f"{name}: fit() changed constructor parameters: {params} -> {policy.get_params()}"
    )
    added = sorted(a for a in set(vars(policy)) - before if not a.startswith("_") and not a.endswith("_"))
    assert not added, f"{name}: attributes set by fit() must end with '_': {added}"
    learned = [a for a in vars(policy) if a.endswith("_") and not a.startswith("_")]
    assert learned, f"{name}: fit() set no learned attribute ending in '_' (e.g. is_fitted_)"
    return policy


def _spent(ev: Evaluator, task_id: str, checkpoints: Sequence[int]) -> dict[str, float]:
    tc = ev.costs(task_id)
    p = list(checkpoints)
    return {
        "count": float(len(p)),
        "seconds": float(tc.creation_s[p].sum()),
        "bytes": float(tc.size_bytes[p].sum()),
    }


def check_budget(policy: PlacementPolicy, ev: Evaluator, tasks: Sequence[str], setting: Setting,
                 seed: int) -> list[Placement]:
    """Check (2) for a fitted policy; return its placements."""
    budget = setting.budget
    assert budget is not None, "the conformance suite runs under settings with a budget"
    out = []
    for t in tasks:
        pl = ev.run(policy, t, setting, seed=seed)
        b = pl.n_boundaries
        assert pl.checkpoints == sorted(set(pl.checkpoints)), (
            f"{policy.name} on {t}: checkpoints {pl.checkpoints} are not sorted and unique"
        )
        assert all(1 <= x <= b for x in pl.checkpoints), (
            f"{policy.name} on {t}: checkpoints {pl.checkpoints} outside 1..{b}"
        )
        if not pl.budget_matched:
            assert policy.role is Role.REFERENCE, f"{policy.name}: unmatched run not declared"
            out.append(pl)
            continue
        spent = _spent(ev, t, pl.checkpoints)[budget.kind]
        assert fits(0.0, spent, budget.amount), (
            f"{policy.name} on {t}: spent {spent:g} {budget.kind} over the budget {budget.label()} "
            f"(checkpoints {pl.checkpoints})"
        )
        out.append(pl)
    return out


def _cut_future(label_set: Any, task_id: str, boundary: int, mode: str) -> Any:
    """A copy of ``label_set`` whose task's future after ``boundary`` is mutated or cut."""
    traj = copy.deepcopy(label_set.trajectories[task_id])
    cps = label_set.checkpoints
    mine = cps["task_id"] == task_id
    ev_idx = int(cps[mine & (cps["boundary"] == boundary)]["event_index"].iloc[0])
    tasks = label_set.tasks.copy()
    cps = cps.copy()
    rec = label_set.recovery
    if mode == "truncate":
        traj = traj.cut(ev_idx)
        cps = cps[~mine | (cps["boundary"] <= boundary)].reset_index(drop=True)
        rec = rec[(rec["task_id"] != task_id) | (rec["failure"] <= boundary)].reset_index(drop=True)
        tasks.loc[tasks["task_id"] == task_id, "n_boundaries"] = boundary
    else:
        t_cut = None
        for e in traj.events:
            if e.index <= ev_idx:
                t_cut = e.end if e.end is not None else t_cut
                continue
            e.is_error = not e.is_error
            e.exit_code = 1 if e.exit_code in (None, 0) else 0
            if e.bytes_written is not None:
                e.bytes_written = e.bytes_written * 10 + 1
            if e.tests_passed is not None:
                e.tests_passed = 0
            if e.duration is not None:
                e.duration *= 3.0
            if t_cut is not None:
                for attr in ("start", "end"):
                    v = getattr(e, attr)
                    if v is not None:
                        setattr(e, attr, t_cut + (v - t_cut) * 3.0)
        fut = mine & (cps["boundary"] > boundary)
        cps.loc[fut, "creation_s"] = cps.loc[fut, "creation_s"] * 3.0 + 1.0
        cps.loc[fut, "size_bytes"] = cps.loc[fut, "size_bytes"] * 3 + 1
    trajs = dict(label_set.trajectories)
    trajs[task_id] = traj
    # The frames were validated with the original and only values inside their schema
    # changed, so a shallow copy avoids re-running LabelSet's schema checks per probe.
    out = copy.copy(label_set)
    out.tasks, out.checkpoints, out.recovery, out.trajectories = tasks, cps, rec, trajs
    return out


def check_prefix_causality(
    policy: PlacementPolicy, label_set: Any, tasks: Sequence[str], setting: Setting, seed: int
) -> None:
    """Check (4) for a fitted online policy."""
    base = Evaluator(label_set)
    budget = setting.budget
    assert budget is not None, "the conformance suite runs under settings with a budget"
    for t in tasks:
        n = base.costs(t).n_boundaries
        if n < 2:
            continue
        ref = base.run(policy, t, setting, seed=seed)
        for b in sorted({max(1, n // 2), n - 1}):
            for mode in ("mutate", "truncate"):
                alt_ls = _cut_future(label_set, t, b, mode)
                alt = Evaluator(alt_ls).run(policy, t, setting, seed=seed)
                want = ([x for x in ref.requested if x <= b], [x for x in ref.checkpoints if x <= b])
                got = ([x for x in alt.requested if x <= b], [x for x in alt.checkpoints if x <= b])
                assert want == got, (
                    f"{policy.name} on {t} at {budget.label()}: decisions at boundaries <= {b} "
                    f"changed when the future after {b} was {mode}d: requested/taken {want} -> {got}"
                )


def check_fitted_setting(policy: PlacementPolicy, ev: Evaluator, task: str, setting: Setting) -> None:
    """Check (5) for a policy fitted under ``setting``."""
    fitted = getattr(policy, "setting_", None)
    assert fitted == setting, (
        f"{policy.name}: fit() must record the setting it was fitted under as setting_ "
        f"(got {fitted!r}, fitted under {setting!r}); end fit with super().fit(data, setting)"
    )
    other = dataclasses.replace(setting, hazard=next(h for h in HAZARDS if h != setting.hazard))
    try:
        ev.run(policy, task, other)
    except SettingMismatchError:
        return
    raise AssertionError(
        f"{policy.name}: fitted under {setting.label()}, it was evaluated under {other.label()} "
        "without a SettingMismatchError"
    )


def check_policy(
    policy_factory: PolicyFactory,
    label_set: Any,
    *,
    settings: Sequence[Setting] | None = None,
    seed: int = 0,
    max_tasks: int = 4,
) -> None:
    """Run the whole suite; raise ``AssertionError`` naming the broken rule.

    ``policy_factory`` returns a fresh, unfitted policy. Under each setting the policy is
    fitted on the label set's tasks (the suite checks contracts, not generalisation) and
    run on up to ``max_tasks`` of them.
    """
    settings = list(settings) if settings is not None else default_settings(label_set)
    tasks = list(label_set.task_ids)[:max_tasks]
    ev = Evaluator(label_set)
    for setting in settings:
        budget = setting.budget
        assert budget is not None, "the conformance suite runs under settings with a budget"
        policy = check_sklearn_contract(policy_factory, label_set, setting)
        check_fitted_setting(policy, ev, tasks[0], setting)
        first = check_budget(policy, ev, tasks, setting, seed)
        again = check_budget(policy, ev, tasks, setting, seed)
        twin = policy_factory().fit(label_set, setting)
        other = check_budget(twin, ev, tasks, setting, seed)
        for a, b, c in zip(first, again, other, strict=True):
            assert a.checkpoints == b.checkpoints, (
                f"{policy.name} on {a.task_id} at {budget.label()}: two runs with seed {seed} "
                f"differ: {a.checkpoints} vs {b.checkpoints}"
            )
            assert a.checkpoints == c.checkpoints, (
                f"{policy.name} on {a.task_id} at {budget.label()}: two fits with seed {seed} "
                f"differ: {a.checkpoints} vs {c.checkpoints}"
            )
        if policy.role is not Role.OFFLINE:
            check_prefix_causality(policy, label_set, tasks[:2], setting, seed)


def conformance_report(policies: Sequence[PolicyFactory], label_set: Any) -> pd.DataFrame:
    """Run :func:`check_policy` over several factories; one row per policy (pass or error)."""
    rows = []
    for factory in policies:
        name = factory().name
        try:
            check_policy(factory, label_set)
            rows.append({"policy": name, "passed": True, "error": ""})
        except AssertionError as exc:
            rows.append({"policy": name, "passed": False, "error": str(exc)})
    return pd.DataFrame(rows)
