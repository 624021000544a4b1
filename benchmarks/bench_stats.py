"""Speed of the statistics: task bootstrap and permutation test (targets: < 1 s each, one core).

    python benchmarks/bench_stats.py [--repeats 3]

Cases (issue: "10,000 bootstrap replicates over 1,000 tasks, and 20,000 permutations over
100 cells, each in under a second on one core"):

- task bootstrap, record weighting, 1,000 tasks x 3 records, 10,000 replicates, percentile
- the same with BCa (adds a leave-one-task-out jackknife)
- task bootstrap, task weighting, 1,000 tasks, 10,000 replicates
- Spearman permutation test, 100 cells, 20,000 relabelings

Set OMP_NUM_THREADS/OPENBLAS_NUM_THREADS=1 (done below, before NumPy loads) so the figures
are single-core. Prints best-of-N wall seconds and the ratio to the 1 s target.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402

from ripplecp_policy import stats  # noqa: E402

TARGET_S = 1.0


def best_of(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    repeats = ap.parse_args().repeats
    try:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # pin to one core
        pinned = "pinned to one core"
    except (AttributeError, OSError):
        pinned = "not pinned (no sched_setaffinity)"
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(1000), 3)
    values = rng.normal(50, 30, len(groups))
    x, y = rng.normal(size=100), rng.normal(size=100)

    cases = [
        ("bootstrap 10,000 x 1,000 tasks (record, percentile)",
         lambda: stats.task_bootstrap(values, groups, weighting="record")),
        ("bootstrap 10,000 x 1,000 tasks (record, BCa)",
         lambda: stats.task_bootstrap(values, groups, weighting="record", method="bca")),
        ("bootstrap 10,000 x 1,000 tasks (task, percentile)",
         lambda: stats.task_bootstrap(values, groups, weighting="task")),
        ("Spearman permutation 20,000 x 100 cells",
         lambda: stats.spearman_permutation(x, y)),
    ]
    print(f"# bench_stats: best of {repeats}, single-threaded BLAS, {pinned}")
    print(f"{'case':<55} {'seconds':>9} {'target':>7} {'ratio':>7}  ok")
    for name, fn in cases:
        fn()  # warm-up (imports, caches)
        s = best_of(fn, repeats)
        print(f"{name:<55} {s:>9.3f} {TARGET_S:>7.1f} {s / TARGET_S:>7.2f}  {'yes' if s < TARGET_S else 'NO'}")


if __name__ == "__main__":
    main()
