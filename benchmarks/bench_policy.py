"""Per-boundary decision latency of the learned policies, and LORO study training time.

    python benchmarks/bench_policy.py [--family long-horizon] [--repeats 5] [--skip-study]

Latency is what a runtime pays at each candidate boundary: reading the online features
("features": ``PrefixWalk.features()``), then building the observation and
asking the fitted policy ("inference"); the target (p99 <= 1 ms) is on their sum. Feeding
the events to the extractor happens as they arrive, between boundaries; its cost per
boundary (all events of a turn at turn granularity) is printed separately ("ingest").
Reported as p50/p99 in microseconds; garbage collection is left on, as in a runtime. The study figure is the wall time of
``experiments.train_policies`` (tuning, LORO fits, evaluation, export) on the default
simulated data, into a temporary MLflow store.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time

import numpy as np

from features.online import PrefixWalk
from oracle.simulator import simulate_label_set
from ripplecp_policy.datasets import replays
from ripplecp_policy.episode import Episode
from ripplecp_policy.learned import AdvantageRegressorPolicy, FittedQPolicy
from ripplecp_policy.policy import Budget, Setting
from ripplecp_policy.splits import leave_one_repo_out

TARGET_P99_US = 1000.0


def _walk(policy, task, budget: Budget) -> tuple[list[float], list[float], list[float]]:
    """One episode as a runtime runs it (the prefix walk advanced as events arrive, the
    episode runner's observation and budget check); per-boundary ingest, feature and
    inference seconds."""
    ingest_t, feats_t, infer_t = [], [], []
    walk = PrefixWalk(task.trajectory, [task.event_index[b] for b in range(1, task.n_boundaries + 1)])
    ep = Episode(task.task_id, task.repo, budget)
    policy.reset(task.task_id, 0)
    for b in range(1, task.n_boundaries + 1):
        ti = time.perf_counter()
        walk.advance(b)
        t0 = time.perf_counter()
        f = walk.features()
        t1 = time.perf_counter()
        cost = task.charge(b, budget)
        obs = ep.observe(b, event_index=task.event_index[b], features=f, elapsed_s=math.nan, charge=cost)
        take = policy.decide(obs) and ep.offer(b, cost)
        t2 = time.perf_counter()
        if take:
            walk.extractor.mark_checkpoint()
        ingest_t.append(t0 - ti)
        feats_t.append(t1 - t0)
        infer_t.append(t2 - t1)
    return ingest_t, feats_t, infer_t


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--family", default="long-horizon")
    p.add_argument("--tasks-per-repo", type=int, default=4)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--skip-study", action="store_true")
    args = p.parse_args(argv)
    budget = Budget("count", 2)
    data = simulate_label_set(args.family, tasks_per_repo=args.tasks_per_repo, design="full", seed=0)
    fold = leave_one_repo_out(data)[0]
    train, test = data.subset(fold.train_tasks), data.subset(fold.test_tasks)
    policies = {
        "advantage-xgboost": AdvantageRegressorPolicy("xgboost"),
        "advantage-ridge": AdvantageRegressorPolicy("ridge"),
        "fqi-extratrees": FittedQPolicy("extratrees"),
        "fqi-xgboost": FittedQPolicy("xgboost", n_estimators=100),
    }
    tasks = list(replays(test).values())
    print(f"data: {args.family}, {len(data.tasks)} tasks, {len(data.repos)} repos; "
          f"held out {fold.held_out} ({len(tasks)} tasks, "
          f"{sum(t.n_boundaries for t in tasks)} boundaries) x {args.repeats} repeats")
    print(f"{'policy':<20}{'fit s':>8}{'feat p50':>10}{'feat p99':>10}{'inf p50':>10}{'inf p99':>10}"
          f"{'tot p50':>10}{'tot p99':>10}{'p99/target':>12}{'ingest p50':>12}{'ingest p99':>12}")
    for name, pol in policies.items():
        t0 = time.perf_counter()
        pol.fit(train, Setting(budget))
        fit_s = time.perf_counter() - t0
        ing, fe, inf = [], [], []
        for _ in range(args.repeats):
            for task in tasks:
                a, b, c = _walk(pol, task, budget)
                ing += a
                fe += b
                inf += c
        ing_us, fe_us, inf_us = np.array(ing) * 1e6, np.array(fe) * 1e6, np.array(inf) * 1e6
        tot = fe_us + inf_us
        q = lambda x, p: float(np.percentile(x, p))  # noqa: E731
        print(f"{name:<20}{fit_s:>8.2f}{q(fe_us, 50):>10.0f}{q(fe_us, 99):>10.0f}{q(inf_us, 50):>10.0f}"
              f"{q(inf_us, 99):>10.0f}{q(tot, 50):>10.0f}{q(tot, 99):>10.0f}{q(tot, 99) / TARGET_P99_US:>12.2f}"
              f"{q(ing_us, 50):>12.0f}{q(ing_us, 99):>12.0f}")
    print(f"(microseconds; target p99 <= {TARGET_P99_US:.0f} us per boundary, features plus inference)")
    if not args.skip_study:
        from experiments.train_policies import parse_args, run_study

        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            out = run_study(parse_args(["--families", args.family, "--tasks-per-repo", str(args.tasks_per_repo),
                                        "--mlruns", tmp]))
            study_s = time.perf_counter() - t0
        print(f"LORO study (default data, {out['per_fold']['kind'].nunique()} kinds x "
              f"{out['per_fold']['fold'].nunique()} folds, tuning, export): {study_s:.1f} s wall")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
