"""Small hand-made label sets for the evaluation and baseline tests.

Full recovery tables (every J(r, f), r < f) over a few repositories, with nominal
trajectories in the canonical event schema, so the real feature extractor runs on them.
Costs are a simple generative story — not the simulator — chosen so that the first
checkpoint is worth much more than later ones, as in the pilot.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from features.schema import BoundaryKind, Event, EventKind, Trajectory
from oracle.tables import LabelSet, empty


def _trajectory(task_id: str, repo: str, n_steps: int, rng: np.random.Generator) -> tuple[Trajectory, list[float]]:
    events: list[Event] = []
    t = 0.0
    step_end_times: list[float] = []
    for step in range(1, n_steps + 1):
        n_units = int(rng.integers(1, 4))
        for u in range(n_units):
            d = float(rng.uniform(5, 60 if step == 1 else 15))
            events.append(Event(
                index=len(events), kind=EventKind.MODEL_CALL, step=step, start=t, end=t + d,
                input_tokens=int(rng.integers(500, 5000)), output_tokens=int(rng.integers(50, 500)),
            ))
            t += d
            d = float(rng.uniform(1, 20))
            kind = [EventKind.COMMAND, EventKind.FILE_CHANGE, EventKind.TEST][int(rng.integers(0, 3))]
            last = u == n_units - 1
            err = bool(rng.random() < 0.25) and kind == EventKind.COMMAND
            kw: dict = {}
            if kind == EventKind.COMMAND:
                kw = dict(command="make build", argv=["make", "build"], exit_code=1 if err else 0,
                          is_error=err, paths_read=["src/a.py"])
                bk = BoundaryKind.TOOL_RETURN
            elif kind == EventKind.FILE_CHANGE:
                kw = dict(paths_written=[f"src/f{int(rng.integers(0, 5))}.py"],
                          bytes_written=int(rng.integers(10, 100_000)))
                bk = BoundaryKind.TOOL_RETURN
            else:
                passed = int(rng.integers(0, 10)) + step
                kw = dict(command="pytest -q", argv=["pytest", "-q"], exit_code=0,
                          tests_passed=passed, tests_failed=int(rng.integers(0, 3)))
                bk = BoundaryKind.TEST
            events.append(Event(
                index=len(events), kind=kind, step=step, start=t, end=t + d, duration=d,
                safe_boundary=True, boundary_kind=bk, turn_end=last, **kw,
            ))
            t += d
        step_end_times.append(t)
    return Trajectory(task_id, repo, "synthetic", events, {}), step_end_times


def make_label_set(
    n_repos: int = 3,
    tasks_per_repo: int = 2,
    n_steps: tuple[int, int] = (3, 5),
    repetitions: int = 2,
    seed: int = 0,
    missing_cells: int = 0,
) -> LabelSet:
    """A label set with full recovery tables at turn granularity (B = steps per task).

    ``missing_cells`` drops that many (r, f) cells per task (r >= 1) to make partial tables.
    """
    rng = np.random.default_rng(seed)
    tasks, cps, recs, trajs = [], [], [], {}
    for r in range(n_repos):
        repo = f"org/repo{r}"
        for k in range(tasks_per_repo):
            tid = f"repo{r}-task{k}"
            n = int(rng.integers(n_steps[0], n_steps[1] + 1))
            traj, ends = _trajectory(tid, repo, n, rng)
            trajs[tid] = traj
            bounds = traj.boundaries("turn")
            assert len(bounds) == n
            tasks.append(dict(task_id=tid, repo=repo, family="synthetic", verified=True,
                              nominal_s=ends[-1] + 5.0, n_boundaries=n, granularity="turn"))
            for b, ev in enumerate(bounds, start=1):
                cps.append(dict(task_id=tid, boundary=b, event_index=ev, step=b,
                                nominal_t_s=ends[b - 1], creation_s=float(rng.uniform(2, 8)),
                                size_bytes=int(rng.integers(5_000_000, 25_000_000)),
                                restore_latency_s=float(rng.uniform(0.5, 2))))
            value = rng.uniform(0.3, 1.0, size=n + 1)  # how much of segment b's work recovery redoes
            drop = set()
            cells = [(rp, f) for f in range(2, n + 1) for rp in range(1, f)]
            if missing_cells:
                idx = rng.choice(len(cells), size=min(missing_cells, len(cells)), replace=False)
                drop = {cells[i] for i in idx}
            for f in range(1, n + 1):
                for rp in range(f):
                    if (rp, f) in drop:
                        continue
                    seg = np.diff([0.0, *ends])
                    redo = float(sum(seg[s] * value[s + 1] for s in range(rp, f)))
                    if rp == 0:
                        redo *= 1.5  # rediscovery from scratch is dear
                    for rep in range(repetitions):
                        recs.append(dict(
                            task_id=tid, restore_point=rp, failure=f, repetition=rep,
                            branch_id=f"{tid}/r{rp}/f{f}/{rep}", pair_id=None, role="table",
                            cost_s=redo + 30.0 + float(rng.normal(0, 3)),
                            restore_latency_s=0.0 if rp == 0 else float(rng.uniform(0.5, 2)),
                            tokens=int(redo * 100), tool_calls=int(redo // 10),
                            verified=bool(rng.random() < 0.9), capped=False, seed=rep,
                            state_digest="s", obs_digest="o", quarantined=False,
                            quarantine_reason=None,
                        ))
    return LabelSet(pd.DataFrame(tasks), pd.DataFrame(cps), pd.DataFrame(recs), empty("labels"),
                    trajs, {"source": "tests.baselines.synthetic", "seed": seed})
