"""The advisor's cost per boundary decision and per followed session, model loaded from MLflow.

    python benchmarks/bench_advisor.py [--events 10000] [--sessions 3]

A ``codex exec --json`` session of ``--events`` events (shell calls writing and reading a
few dozen files, a test run every 10 calls, a turn every 20) is fed line by line to an
:class:`ripplecp_policy.advisor.Advisor` whose policy (xgboost advantage regressor, stored
as its booster) was logged in a run of a temporary MLflow store and is loaded back by its
``runs:/`` URI. The budget never binds (so every boundary is scored) and there is no store
(no checkpoint is written: the checkpoint's own cost is benchmarks/bench_checkpoint.py's);
the decision log is written to a file, as in use.

Reported, in microseconds, p50 / p99 / max over every boundary:

- ``line -> decision``: the whole :meth:`Advisor.feed` call of a line that ends at a boundary
  (parse the line, update the features, decide, write the log record);
- ``same, CPU time``: that call in this thread's CPU time (``time.thread_time``): the work
  itself, without the waits of a loaded machine (on a machine with more runnable processes
  than cores, wall-clock p99 measures the scheduler);
- ``decision``: from the features read to the decision made (observation, policy decision and
  score, out-of-range share) — the advisor's own ``decide_ms``.

Memory per followed session: Python heap held by one advisor after following the whole
session (tracemalloc, after a collection), and its peak while following; the process RSS
growth is printed beside it. The target is p99 <= 1 ms per boundary decision.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGET_P99_US = 1000.0


def session_lines(n_events: int) -> list[str]:
    """A ``codex exec --json`` stream of about ``n_events`` events."""
    lines = [json.dumps({"type": "thread.started", "thread_id": "bench-thread"}),
             json.dumps({"type": "turn.started"})]
    events = 0
    i = 0
    while events < n_events:
        if i % 10 == 9:
            cmd = "/bin/bash -lc \"python -m pytest -q\""
            out = f"{i} passed in 0.1s\n"
        elif i % 3 == 0:
            cmd = f"/bin/bash -lc \"printf '{i}\\\\n' > src/f{i % 40}.py\""
            out = ""
        else:
            cmd = f"/bin/bash -lc \"cat src/f{(i * 7) % 40}.py\""
            out = f"{i}\n"
        item = {"id": f"item_{i}", "type": "command_execution", "command": cmd,
                "aggregated_output": out, "exit_code": 0, "status": "completed"}
        lines.append(json.dumps({"type": "item.started", "item": {**item, "exit_code": None,
                                                                  "status": "in_progress"}}))
        lines.append(json.dumps({"type": "item.completed", "item": item}))
        events += 1
        i += 1
        if i % 20 == 0:
            lines.append(json.dumps({"type": "turn.completed", "usage": {
                "input_tokens": 1000 * i, "cached_input_tokens": 0, "output_tokens": 50 * i}}))
            lines.append(json.dumps({"type": "turn.started"}))
            events += 1
    lines.append(json.dumps({"type": "turn.completed", "usage": {
        "input_tokens": 1000 * i, "cached_input_tokens": 0, "output_tokens": 50 * i}}))
    return lines


def logged_model(root: Path) -> str:
    """Fit the toy xgboost policy, log it in a run of the store at ``root``; its URI."""
    import importlib.util

    import mlflow

    from ripplecp_policy.export import log_policy_model, policy_example, training_feature_ranges
    from ripplecp_policy.learned import AdvantageRegressorPolicy
    from ripplecp_policy.policy import Budget, Setting
    from ripplecp_policy.tracking import ensure_experiment, tracking_uri

    spec = importlib.util.spec_from_file_location("fixtures", ROOT / "tests" / "conftest.py")
    fixtures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fixtures)  # type: ignore[union-attr]
    data = fixtures._toy_label_set(n_repos=3, tasks_per_repo=3, seed=0)
    setting = Setting(Budget("count", 2))
    policy = AdvantageRegressorPolicy("xgboost", n_estimators=100).fit(data, setting)
    exp = ensure_experiment("bench-advisor", root)
    mlflow.set_tracking_uri(tracking_uri(root))
    with mlflow.start_run(experiment_id=exp) as run:
        log_policy_model(policy, setting.budget, policy_example(policy, data, setting),
                         name="policy", ranges=training_feature_ranges(data, setting))
    mlflow.set_tracking_uri((root / "elsewhere").as_uri())  # the advisor must not need it
    return f"runs:/{run.info.run_id}/policy"


def follow(model, lines: list[str], log: Path, *, timed: bool = True):
    """One session through a fresh advisor; (advisor, per-boundary feed wall seconds, the
    same in this thread's CPU seconds)."""
    from ripplecp_policy.advisor import Advisor
    from ripplecp_policy.policy import Budget

    adv = Advisor(model, Budget("count", 1e12), log=log, source="bench")
    feed_s, cpu_s = [], []
    clock, cpu = time.perf_counter, time.thread_time
    for line in lines:
        t0, c0 = clock(), cpu()
        made = adv.feed(line)
        if made and timed:
            feed_s.append(clock() - t0)
            cpu_s.append(cpu() - c0)
    adv.finish()
    return adv, feed_s, cpu_s


def _pct(values_us: list[float]) -> tuple[float, float, float]:
    a = np.asarray(values_us)
    return float(np.percentile(a, 50)), float(np.percentile(a, 99)), float(a.max())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=10_000, help="events per session")
    ap.add_argument("--sessions", type=int, default=3, help="sessions timed (after one warm-up)")
    args = ap.parse_args(argv)
    os.environ.setdefault("MLFLOW_DISABLE_AGENT_HINT", "1")
    from ripplecp_policy.advisor import load_model

    lines = session_lines(args.events)
    with tempfile.TemporaryDirectory(prefix="bench-advisor-") as tmp:
        tmp_path = Path(tmp)
        uri = logged_model(tmp_path / "mlruns")
        t0 = time.perf_counter()
        model = load_model(uri, mlruns=tmp_path / "mlruns")
        load_s = time.perf_counter() - t0
        follow(model, lines, tmp_path / "warm.jsonl")  # warm-up: imports, caches
        feed_us: list[float] = []
        cpu_us: list[float] = []
        decide_us: list[float] = []
        n_bound = 0
        for s in range(args.sessions):
            adv, feed_s, cpu_s = follow(model, lines, tmp_path / f"d{s}.jsonl")
            feed_us += [x * 1e6 for x in feed_s]
            cpu_us += [x * 1e6 for x in cpu_s]
            decide_us += [d.decide_ms * 1e3 for d in adv.decisions if d.decide_ms is not None]
            n_bound = len(adv.decisions)
        events_seen = int(adv.decisions[-1].event_index) + 1
        # memory: one advisor kept after following the whole session
        gc.collect()
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        kept, _, _ = follow(model, lines, tmp_path / "mem.jsonl", timed=False)
        gc.collect()
        held, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        del kept
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    f50, f99, fmax = _pct(feed_us)
    d50, d99, dmax = _pct(decide_us)
    c50, c99, cmax = _pct(cpu_us)
    print(f"advisor benchmark: {events_seen} events, {n_bound} boundaries per session, "
          f"{args.sessions} sessions timed; model loaded from MLflow ({uri.split('/')[0]}/...) "
          f"in {load_s:.2f} s")
    print(f"load: {load}")
    print(f"{'per boundary (us)':<22}{'p50':>9}{'p99':>9}{'max':>10}")
    print(f"{'line -> decision':<22}{f50:>9.0f}{f99:>9.0f}{fmax:>10.0f}")
    print(f"{'  same, CPU time':<22}{c50:>9.0f}{c99:>9.0f}{cmax:>10.0f}")
    print(f"{'decision':<22}{d50:>9.0f}{d99:>9.0f}{dmax:>10.0f}")
    print(f"memory per followed session: {(held - before) / 2**20:.1f} MiB held after "
          f"{events_seen} events (peak {(peak - before) / 2**20:.1f} MiB while following); "
          f"max RSS {rss0 / 1024:.0f} -> {rss1 / 1024:.0f} MiB")
    ok = f99 <= TARGET_P99_US
    print(f"target p99 <= {TARGET_P99_US:.0f} us per boundary decision (line -> decision): "
          f"{'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
