"""Speed of the evaluation's hot paths, measured side by side (not a test: prints ratios).

    python benchmarks/bench_evaluation.py

1. The clairvoyant optimum: the dynamic programs against brute-force enumeration on the
   same tables (count and seconds budgets), as B grows.
2. Online episodes: the runner with the per-(task, history) feature cache against the
   plain incremental walk, on a simulated family at tool-call granularity.
"""

from __future__ import annotations

import time

import numpy as np

from ripplecp_policy.evaluation import Evaluator
from ripplecp_policy.policy import Budget, Setting
from ripplecp_policy.pricing import TaskCosts, brute_force_placement, optimal_placement


def _table(rng: np.random.Generator, b: int) -> TaskCosts:
    import pandas as pd

    cps = pd.DataFrame(dict(task_id="t", boundary=np.arange(1, b + 1), event_index=np.arange(b),
                            step=np.arange(1, b + 1), nominal_t_s=np.cumsum(rng.uniform(1, 50, b)),
                            creation_s=rng.uniform(1, 8, b), size_bytes=rng.integers(1, 100, b),
                            restore_latency_s=1.0))
    rows = [dict(task_id="t", restore_point=r, failure=f, repetition=0, cost_s=float(rng.uniform(0, 200)),
                 restore_latency_s=1.0, tokens=0, tool_calls=0, verified=True, quarantined=False)
            for f in range(1, b + 1) for r in range(f)]
    return TaskCosts.build("t", pd.DataFrame(rows), cps)


def bench_optimum() -> None:
    rng = np.random.default_rng(0)
    print("clairvoyant optimum: dynamic program vs brute force (same value checked)")
    print(f"{'B':>3} {'budget':>8} {'DP ms':>9} {'brute ms':>10} {'ratio':>8}")
    for b in (6, 10, 14):
        tc = _table(rng, b)
        for budget in (Budget("count", 3), Budget("seconds", 12.0)):
            t0 = time.perf_counter()
            _, v = optimal_placement(tc, budget)
            dp = time.perf_counter() - t0
            t0 = time.perf_counter()
            _, bv = brute_force_placement(tc, budget)
            bf = time.perf_counter() - t0
            assert abs(v - bv) < 1e-9
            print(f"{b:>3} {budget.label():>8} {dp * 1e3:9.2f} {bf * 1e3:10.1f} {bf / dp:8.0f}x")
    tc = _table(rng, 60)
    t0 = time.perf_counter()
    optimal_placement(tc, Budget("seconds", 20.0))
    print(f" 60 boundaries, seconds budget (brute force infeasible): DP {1e3 * (time.perf_counter() - t0):.1f} ms")


def bench_episodes() -> None:
    from baselines import StateChange
    from oracle.simulator import simulate_label_set

    ls = simulate_label_set("long-horizon", tasks_per_repo=2, design="tool_call", repetitions=1, seed=0)
    policy = StateChange(threshold=1.0).fit(ls)
    settings = [Setting(Budget("count", k)) for k in (1, 2, 3)]
    out = {}
    for cache in (False, True):
        ev = Evaluator(ls, cache_features=cache)
        for t in ls.task_ids:
            ev.costs(t)
        t0 = time.perf_counter()
        n = 0
        for _ in range(2):  # a second pass: what tuning and several budgets do
            for setting in settings:
                for t in ls.task_ids:
                    ev.run(policy, t, setting)
                    n += 1
        out[cache] = (time.perf_counter() - t0) / n
    b = int(ls.tasks["n_boundaries"].mean())
    print(f"online episodes ({len(ls.task_ids)} tasks, ~{b} tool-call boundaries each): "
          f"plain walk {out[False] * 1e3:.1f} ms/episode, cached {out[True] * 1e3:.1f} ms/episode, "
          f"speed-up {out[False] / out[True]:.1f}x")


if __name__ == "__main__":
    bench_optimum()
    bench_episodes()
