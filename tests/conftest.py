"""Shared fixtures: the label-set factories the policy, baseline and experiment tests use.

Each factory is a plain function handed out by a session fixture of the same name, so a test
(or a module fixture) asks for ``make_label_set``, ``toy_label_set`` or ``synthetic_labels``
and calls it with the arguments it needs; no test module imports another.

- ``make_label_set``: full recovery tables over a few repositories with nominal
  trajectories in the canonical event schema (the real feature extractor runs on them);
  costs follow a simple generative story, not the simulator, in which the first checkpoint
  is worth much more than later ones, as in the pilot.
- ``toy_label_set``: a full-design label set with CP/SKIP pairs on hand-made trajectories
  whose two regimes (a first checkpoint pays, an additional one barely does) are built in.
- ``synthetic_labels``: a label table alone, in the harness's schema, for the statistics.
"""

from __future__ import annotations

import signal
from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest

from features.schema import BoundaryKind, Event, EventKind, Trajectory
from labelsets.tables import LabelSet, empty

# A test run started in the background (``cmd &`` from a non-interactive shell, nohup) inherits
# SIGINT ignored, and so would every program the tests start: the Ctrl-C tests would send a
# signal no program hears. A run from a terminal has Python's own handler; give it that, so
# the programs started here begin with SIGINT at its default, as a terminal's would.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _synthetic_trajectory(task_id: str, repo: str, n_steps: int, rng: np.random.Generator) -> tuple[Trajectory, list[float]]:
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


def _make_label_set(
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
            traj, ends = _synthetic_trajectory(tid, repo, n, rng)
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
                    trajs, {"source": "tests.conftest.make_label_set", "seed": seed})


def _toy_label_set(
    n_repos: int = 3, tasks_per_repo: int = 3, seed: int = 0, first_conv: float = 0.9,
    later_conv: float = 0.05,
) -> LabelSet:
    """A full-design label set on hand-made trajectories.

    Step k costs w_k seconds of nominal work; recovering from restore point r after a
    failure in segment f re-derives steps r+1..f-1 at conversion ``first_conv`` (step 1)
    or ``later_conv`` (later steps), plus half of step f. So the first checkpoint pays and
    an additional one barely does: the pilot's two regimes, by construction.
    """
    rng = np.random.default_rng(seed)
    tasks, cps, rec, labels, trajs = [], [], [], [], {}
    for r_i in range(n_repos):
        repo = f"org/repo{r_i}"
        for t_i in range(tasks_per_repo):
            tid = f"repo{r_i}-t{t_i}"
            B = int(rng.integers(3, 6))
            work = rng.uniform(20, 200, size=B + 1)
            work[0] = 0.0
            events, idx, clock, t_nom = [], 0, 0.0, [0.0]
            for k in range(1, B + 1):
                n_cmd = int(rng.integers(1, 4))
                for j in range(n_cmd):
                    d = float(work[k] / (n_cmd + 1))
                    events.append(Event(idx, EventKind.COMMAND, step=k, start=clock, end=clock + d,
                                        duration=d, command=f"make step{k}-{j}", argv=["make"],
                                        exit_code=0, safe_boundary=True, boundary_kind="tool_return",
                                        paths_written=[f"src/f{k}_{j}.py"],
                                        bytes_written=int(rng.integers(100, 5000))))
                    idx += 1
                    clock += d
                d = float(work[k] / (n_cmd + 1))
                events.append(Event(idx, EventKind.TEST, step=k, start=clock, end=clock + d,
                                    duration=d, command="pytest", argv=["pytest"], exit_code=0,
                                    tests_passed=k, tests_failed=B - k, safe_boundary=True,
                                    boundary_kind="test", turn_end=True))
                cps.append(dict(task_id=tid, boundary=k, event_index=idx, step=k,
                                nominal_t_s=clock + d, creation_s=float(rng.uniform(2, 6)),
                                size_bytes=int(rng.integers(10**6, 2 * 10**7)), restore_latency_s=0.5))
                idx += 1
                clock += d
                t_nom.append(clock)
            trajs[tid] = Trajectory(tid, repo, "toy", events)
            tasks.append(dict(task_id=tid, repo=repo, family="toy", verified=True, nominal_s=clock,
                              n_boundaries=B, granularity="turn"))
            conv = np.array([0.0, first_conv] + [later_conv] * (B - 1)) * (1 + 0.2 * r_i)
            creation = {c["boundary"]: c["creation_s"] for c in cps if c["task_id"] == tid}

            def J(r: int, f: int, noise: float) -> float:
                return 10.0 + float(sum(conv[k] * work[k] for k in range(r + 1, f))) + 0.5 * work[f] + noise  # noqa: B023

            for f in range(1, B + 1):
                for r in range(f):
                    for rep in range(2):
                        rec.append(dict(task_id=tid, restore_point=r, failure=f, repetition=rep,
                                        branch_id=f"{tid}/r{r}f{f}/{rep}", pair_id=None, role="table",
                                        cost_s=J(r, f, float(rng.normal(0, 2))), restore_latency_s=0.5,
                                        tokens=None, tool_calls=None, verified=True, capped=False,
                                        seed=rep, state_digest=None, obs_digest=None,
                                        quarantined=False, quarantine_reason=None))
            jt = pd.DataFrame([x for x in rec if x["task_id"] == tid]).groupby(
                ["restore_point", "failure"])["cost_s"].mean()
            for f in range(2, B + 1):
                for t in range(1, f):
                    for c in range(t):
                        j_cp = float(jt[(t, f)]) + creation[t]
                        j_skip = float(jt[(c, f)])
                        labels.append(dict(
                            task_id=tid, repo=repo, cell_id=f"{tid}:t{t}:c{c}:f{f}", candidate=t,
                            fallback=c, failure=f, repetition=0,
                            stratum="first" if c == 0 else "additional", branch_order="cp_first",
                            j_cp=j_cp, j_skip=j_skip, advantage=j_skip - j_cp, creation_s=creation[t],
                            protected_work_s=t_nom[t] - t_nom[c], verified=True, verified_cp=True,
                            verified_skip=True, tokens_cp=None, tokens_skip=None, tool_calls_cp=None,
                            tool_calls_skip=None, pair_seed=0, digest_cp=None, digest_skip=None,
                            quarantined=False, quarantine_reason=None))
    return LabelSet(pd.DataFrame(tasks), pd.DataFrame(cps), pd.DataFrame(rec), pd.DataFrame(labels),
                    trajs, {"source": "toy"})


def _synthetic_labels(n_tasks: int = 10, reps: int = 2, seed: int = 0) -> pd.DataFrame:
    """A label table in the harness's schema: every task has an early (1,0,2) and late (2,1,3)
    cell; the first checkpoint is worth ~100 s, the additional one ~0 s; every fifth task
    is unverified."""
    rng = np.random.default_rng(seed)
    rows = []
    repos = ["django/django", "sympy/sympy", "scikit-learn/scikit-learn"]
    for t in range(n_tasks):
        ver = t % 5 != 4
        for cand, fb, fail in [(1, 0, 2), (2, 1, 3)]:
            base = 100 + rng.normal(0, 10)
            eff = (100 + rng.normal(0, 40)) if fb == 0 else rng.normal(0, 10)
            for r in range(reps):
                cr = 4 + rng.uniform(-1, 1)
                j_cp = base + rng.normal(0, 5) + cr
                j_skip = base + eff + rng.normal(0, 15)
                rows.append(dict(
                    task_id=f"t{t:02d}", repo=repos[t % 3], cell_id=f"t{t:02d}:t{cand}:c{fb}:f{fail}",
                    candidate=cand, fallback=fb, failure=fail, repetition=r,
                    stratum="first" if fb == 0 else "additional",
                    branch_order="cp_first" if (t + r) % 2 else "skip_first",
                    j_cp=j_cp, j_skip=j_skip, advantage=j_skip - j_cp, creation_s=cr,
                    protected_work_s=150.0 if fb == 0 else 40.0, verified=ver,
                    verified_cp=ver, verified_skip=ver, tokens_cp=1000 + t, tokens_skip=2000 + t,
                    tool_calls_cp=3, tool_calls_skip=5 + t, pair_seed=1000 * t + r,
                    digest_cp="a", digest_skip="b", quarantined=False, quarantine_reason=None,
                ))
    return pd.DataFrame(rows)


@pytest.fixture(scope="session")
def make_label_set() -> Callable[..., LabelSet]:
    """Factory of synthetic full-table label sets (see the module docstring)."""
    return _make_label_set


@pytest.fixture(scope="session")
def toy_label_set() -> Callable[..., LabelSet]:
    """Factory of toy full-design label sets with pairs (see the module docstring)."""
    return _toy_label_set


@pytest.fixture(scope="session")
def synthetic_labels() -> Callable[..., pd.DataFrame]:
    """Factory of synthetic label tables (see the module docstring)."""
    return _synthetic_labels
