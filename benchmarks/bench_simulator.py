"""Speed of the simulated workloads, single core: recovery branches per second and study time.

    python benchmarks/bench_simulator.py [--quick]

Targets (issue: simulated agent workloads): >= 5,000 recovery branches per second per core,
and a study of 10,000 labels in seconds. Measured side by side:

- the cost function alone (``batch_branch_costs``, one numpy pass over many branches);
- whole studies through ``simulate_label_set`` (task generation, nominal trajectories,
  every r < f per repetition, labels, schema-checked LabelSet), at turn and tool-call
  granularity, sized to >= 10,000 labels;
- the ``SimulatedAgent`` on a ``VirtualClock`` (drive + kill + resume per branch, events
  emitted one by one): the protocol path the harness uses.

Threads are pinned to one (OMP/MKL/OpenBLAS) before numpy is imported.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from labelsets.definitions import pair_seed  # noqa: E402
from oracle.protocol import RestorePoint, VirtualClock  # noqa: E402
from oracle.simulator import (  # noqa: E402
    SimulatedAgent,
    TaskBatch,
    batch_branch_costs,
    family_tasks,
    simulate_label_set,
    task_specs,
)

TARGET = 5_000.0


def bench_cost_function(n_tasks: int) -> tuple[int, float]:
    tasks = family_tasks("long-horizon", tasks_per_repo=max(1, n_tasks // 3), seed=0)
    batch = TaskBatch(tasks, "tool_call")
    ti, rr, ff = [], [], []
    for i, lt in enumerate(tasks):
        r, f = np.triu_indices(lt.n_units + 1, 1)
        ti.append(np.full(len(r), i))
        rr.append(r)
        ff.append(f)
    ti, rr, ff = np.concatenate(ti), np.concatenate(rr), np.concatenate(ff)
    seeds = np.full(len(rr), pair_seed(0, "bench", 1))
    t0 = time.perf_counter()
    batch_branch_costs(batch, ti, rr, ff, seeds)
    return len(rr), time.perf_counter() - t0


def bench_study(family: str, design: str, tasks_per_repo: int) -> tuple[int, int, float]:
    t0 = time.perf_counter()
    ls = simulate_label_set(family, tasks_per_repo=tasks_per_repo, design=design, repetitions=2, seed=1)
    return len(ls.recovery), len(ls.labels), time.perf_counter() - t0


def bench_agent(n_branches: int) -> tuple[int, float]:
    agent = SimulatedAgent("swe-pilot")
    spec = task_specs("swe-pilot", n_repos=1, tasks_per_repo=1, seed=0)[0]
    lt = agent.latent(spec)
    with tempfile.TemporaryDirectory() as d:
        ws = Path(d)
        run = agent.start(spec, ws, 0, VirtualClock())
        snaps = {}
        for rep in run.reports():
            if rep.kind == "boundary":
                snaps[rep.boundary] = run.preserved()
        B = len(snaps)
        cells = [(r, f) for f in range(2, B + 1) for r in range(f)]
        t0 = time.perf_counter()
        for i in range(n_branches):
            r, f = cells[i % len(cells)]
            agent._write_state(ws, lt, f - 1, complete=False)
            drive = agent.resume(spec, RestorePoint(f - 1, ws, *snaps[f - 1]), ws, i, VirtualClock())
            next(x for x in drive.reports() if x.kind == "event")
            drive.kill()
            agent._write_state(ws, lt, r, complete=False)
            tr, fa = snaps[r] if r else ([], {})
            for _ in agent.resume(spec, RestorePoint(r, ws, tr, fa), ws, i, VirtualClock()).reports():
                pass
        return n_branches, time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    args = p.parse_args()
    q = args.quick
    rows = []
    n, s = bench_cost_function(6 if q else 60)
    rows.append(("cost function (batch_branch_costs), long-horizon tool-call", n, None, s))
    n, labels, s = bench_study("swe-pilot", "full", 60 if q else 400)
    rows.append(("study: swe-pilot, turn boundaries, full table", n, labels, s))
    n, labels, s = bench_study("long-horizon", "tool_call", 1 if q else 2)
    rows.append(("study: long-horizon, tool-call boundaries, full table", n, labels, s))
    n, labels, s = bench_study("swe-pilot", "tool_call", 1 if q else 4)
    rows.append(("study: swe-pilot, tool-call boundaries, full table", n, labels, s))
    n, s = bench_agent(50 if q else 300)
    rows.append(("SimulatedAgent on a VirtualClock (drive + kill + resume)", n, None, s))
    print(f"{'what':58s} {'branches':>9s} {'labels':>8s} {'seconds':>8s} {'branches/s':>11s} {'x target':>9s}")
    for name, n, labels, s in rows:
        rate = n / s
        lab = "" if labels is None else f"{labels:d}"
        print(f"{name:58s} {n:9d} {lab:>8s} {s:8.2f} {rate:11.0f} {rate / TARGET:9.1f}")
    print(f"target: >= {TARGET:.0f} recovery branches per second per core; a 10,000-label study in seconds")


if __name__ == "__main__":
    main()
