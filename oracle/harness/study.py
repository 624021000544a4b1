"""The study runner: nominal runs as jobs, freezing a plan, running a study (paper, App. A).

:func:`collect_nominal` runs (or reads back) the nominal run of every task, one audit
record each; :func:`freeze_plan` freezes a :class:`~oracle.harness.plan.Plan` of a design from
them; :func:`run_study` executes a frozen plan through any
``concurrent.futures.Executor``, writes one fsync'd audit record per finished nominal run
and branch (in this, the parent, process), resumes from the audit log, applies the
predeclared third-repetition rule and builds the :class:`~labelsets.tables.LabelSet` from
the audit log only (:func:`build_label_set`). One run's mechanics (a nominal run with a
checkpoint at every boundary, one branch) are :mod:`oracle.harness.branch`'s.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from pathlib import Path
from typing import Any

import pandas as pd

from features.schema import Trajectory
from features.schema import read_parquet as read_trajectories
from features.schema import write_parquet as write_trajectories
from labelsets.definitions import (
    DESIGNS,
    advantage,
    charged_cp,
    nominal_seed,
    sign_unstable,
    table_cell_id,
)
from labelsets.recovery_model import ADAPTIVE_CRITERION, SparseDesign, next_cells
from labelsets.tables import RECOVERY_COLUMNS, LabelSet, conform, empty, labels_from_recovery
from oracle.harness.branch import BranchSpec, StudyContext, finish_discards, run_branch, run_nominal
from oracle.harness.executors import InlineExecutor
from oracle.harness.plan import (
    Plan,
    full_table_plan,
    pilot_plan,
    sparse_plan,
    task_to_dict,
    tool_call_plan,
)
from oracle.protocol import TaskSpec
from oracle.store.audit import AuditLog

__all__ = [
    "build_label_set",
    "collect_nominal",
    "freeze_plan",
    "run_nominal_job",
    "run_study",
]

def run_nominal_job(task_id: str, ctx: StudyContext, seed: int) -> dict:
    """Run the nominal run of ``task_id`` and return its audit record (trajectory on disk)."""
    agent = ctx.agent()
    task = ctx.tasks[task_id]
    ndir = ctx.nominal_dir(task_id)
    res = run_nominal(agent, task, store=ctx.store(), work_dir=ndir, seed=seed, config=ctx.config)
    traj_path = ctx.trajectory_path(task_id)
    write_trajectories([res.trajectory], traj_path)
    shutil.rmtree(ndir / "workspace", ignore_errors=True)
    rec = res.record()
    rec.update(key=f"nominal/{task_id}", kind="nominal", seed=seed,
               repo=task.repo, family=task.family,
               task=json.loads(json.dumps(task_to_dict(task), default=str)),  # the task it ran
               trajectory_file=str(traj_path.relative_to(ctx.study_dir)),
               trajectory_sha256=hashlib.sha256(traj_path.read_bytes()).hexdigest())
    for cp in rec["checkpoints"]:  # audit records are strict JSON: no NaN
        if not math.isfinite(cp["restore_latency_s"]):
            cp["restore_latency_s"] = None
    return rec


# ---------------------------------------------------------------------------------------
# tables from the audit log
# ---------------------------------------------------------------------------------------


def build_label_set(records: list[dict], study_dir: Path, provenance: dict | None = None) -> LabelSet:
    """Build the label set from audit records only (nominal + branch records)."""
    noms = [r for r in records if r.get("kind") == "nominal"]
    branches = [r for r in records if r.get("kind") == "branch"]
    tasks = pd.DataFrame([
        dict(task_id=r["task_id"], repo=r["repo"], family=r["family"], verified=r["verified"],
             nominal_s=r["nominal_s"], n_boundaries=r["n_boundaries"], granularity=r["granularity"])
        for r in noms
    ]) if noms else empty("tasks")
    cp_rows = [dict(task_id=r["task_id"], **{k: c[k] for k in (
        "boundary", "event_index", "step", "nominal_t_s", "creation_s", "size_bytes",
        "restore_latency_s")}) for r in noms for c in r["checkpoints"]]
    checkpoints = pd.DataFrame(cp_rows) if cp_rows else empty("checkpoints")
    rec_rows = [{k: b.get(k) for k in RECOVERY_COLUMNS} for b in branches]
    recovery = pd.DataFrame(rec_rows) if rec_rows else empty("recovery")
    recovery = conform(recovery, "recovery")
    if len(recovery):
        recovery = recovery.sort_values("branch_id", kind="stable").reset_index(drop=True)
    tasks_c = conform(tasks, "tasks")
    cps_c = conform(checkpoints, "checkpoints")
    labels = labels_from_recovery(tasks_c, cps_c, recovery)
    trajs: dict[str, Trajectory] = {}
    for r in noms:
        path = study_dir / r["trajectory_file"]
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != r["trajectory_sha256"]:
            raise ValueError(f"{path}: trajectory file changed since its audit record "
                             f"(sha256 {digest[:12]} != {r['trajectory_sha256'][:12]})")
        (traj,) = read_trajectories(path)
        trajs[traj.task_id] = traj
    prov = dict(provenance or {})
    prov.setdefault("n_quarantined_branches", int(recovery["quarantined"].fillna(False).sum())
                    if len(recovery) else 0)
    return LabelSet(tasks_c, cps_c, recovery, labels, trajs, prov)


# ---------------------------------------------------------------------------------------
# study runner
# ---------------------------------------------------------------------------------------


def collect_nominal(ctx: StudyContext, tasks: Iterable[TaskSpec], study_seed: int,
                    executor: Executor | None = None,
                    progress: bool | Callable[[dict], None] = False) -> dict[str, dict]:
    """Nominal records of ``tasks``: read from the study's audit log, or run and recorded.

    The nominal seed of a task is derived from the study seed
    (:func:`labelsets.definitions.nominal_seed`), so planning and running agree on it.
    """
    tasks = list(tasks)
    ctx.study_dir.mkdir(parents=True, exist_ok=True)
    audit = AuditLog(ctx.study_dir / "audit.jsonl")
    records = {r["key"]: r for r in audit.records() if r.get("kind") == "nominal"}
    ex = executor or InlineExecutor()
    futs: dict[Future, str] = {}
    out: dict[str, dict] = {}

    bar = _Progress(progress, "nominal runs", "run")
    bar.start(total=len(tasks), done=sum(f"nominal/{t.task_id}" in records for t in tasks),
              quarantined=0)

    def record(f: Future) -> None:
        tid = futs.pop(f)
        rec = f.result()
        audit.append(rec)
        out[tid] = rec
        bar.update(rec)
        for w in rec.get("warnings", []):
            warnings.warn(f"nominal run of {tid}: {w}", stacklevel=3)

    for t in tasks:
        ctx.tasks.setdefault(t.task_id, t)
        key = f"nominal/{t.task_id}"
        if key in records:
            out[t.task_id] = records[key]
        else:
            seed = nominal_seed(study_seed, t.task_id)
            fut = ex.submit(run_nominal_job, t.task_id, ctx, seed)
            futs[fut] = t.task_id
            if fut.done():  # an inline executor ran it already: record it before the next
                record(fut)
    try:
        while futs:
            done, _ = wait(list(futs), return_when=FIRST_COMPLETED)
            for f in done:
                record(f)
    finally:
        bar.close()
    return out


def freeze_plan(ctx: StudyContext, tasks: list[TaskSpec], design: str, *, seed: int,
                repetitions: int = 2, executor: Executor | None = None, stride: int = 1,
                include_final: bool = False,
                progress: bool | Callable[[dict], None] = False,
                branches: int | None = None, branches_per_task: int | None = None,
                shares: tuple[float, float, float] | None = None) -> Plan:
    """Run (or reuse) the nominal runs of ``tasks``, then freeze a plan of ``design``.

    ``design``: ``pilot`` (one early and one late cell per task), ``tool_call``, ``full`` or
    ``sparse`` (sized by ``branches`` in total or ``branches_per_task``; ``shares`` of the
    pristine, adjacent and long strata, :class:`labelsets.recovery_model.SparseDesign`).
    The plan records each nominal trajectory's hash, so a later run refuses a changed one.
    """
    if design == "sparse" and (branches is None) == (branches_per_task is None):
        raise ValueError("design sparse: give exactly one of branches and branches_per_task")
    noms = collect_nominal(ctx, tasks, seed, executor, progress)
    nb = {tid: int(r["n_boundaries"]) for tid, r in noms.items()}
    frozen = {tid: {"trajectory_sha256": r["trajectory_sha256"], "n_boundaries": nb[tid],
                    "verified": r["verified"]} for tid, r in noms.items()}
    common = dict(seed=seed, agent=ctx.agent_name, agent_options=ctx.agent_options,
                  config=ctx.config, nominal=frozen, repetitions=repetitions)
    gran = ctx.config.granularity
    if design == "pilot":
        return pilot_plan(tasks, nb, granularity=gran, **common)
    if design == "tool_call":
        return tool_call_plan(tasks, nb, stride=stride, **common)
    if design == "full":
        return full_table_plan(tasks, nb, include_final=include_final, granularity=gran, **common)
    if design == "sparse":
        sd = SparseDesign(**({"shares": tuple(shares)} if shares is not None else {}),
                          repetitions=repetitions, include_final=include_final)
        common.pop("repetitions")
        return sparse_plan(tasks, nb, branches=branches, branches_per_task=branches_per_task,
                           design=sd, granularity=gran, **common)
    raise ValueError(f"design must be one of {', '.join(DESIGNS)}, got {design!r}")


def run_study(
    plan: Plan,
    study_dir: str | Path,
    *,
    executor: Executor | None = None,
    out: str | Path | None = None,
    progress: bool | Callable[[dict], None] = False,
    adaptive_branches: int = 0,
    adaptive_batch: int | None = None,
) -> LabelSet:
    """Execute a frozen plan (resumable: branches already in the audit log are skipped).

    Nominal runs first (one audit record each), then every branch of every cell's first
    two repetitions; a cell whose first two advantages differ in sign gets the plan's
    predeclared third repetition. Records are appended by this (parent) process as futures
    complete. The label set is built from the audit log and saved to ``out`` (default
    ``<study_dir>/labelset``).

    Adaptive collection (sparse plans): once the plan's branches are in, up to
    ``adaptive_branches`` more are spent in rounds of ``adaptive_batch`` (default: all at
    once) on the table cells that most reduce the variance of the study's confirmatory
    comparison (:func:`labelsets.recovery_model.next_cells`, on the label set so far). Each
    round's choice is one audit record (``adaptive/<round>``: its cells, the criterion,
    the budget) appended *before* its branches run, so a resumed study reruns the same
    round's missing branches and never chooses again what it chose; a round once recorded
    is run whatever budget a later call states. The label set names the adaptive cells in
    its provenance (``sparse.adaptive``).
    """
    if adaptive_branches < 0:
        raise ValueError(f"adaptive_branches must be >= 0, got {adaptive_branches}")
    if adaptive_branches and plan.design != "sparse":
        raise ValueError(f"adaptive collection needs a sparse plan, this one is {plan.design!r}")
    if adaptive_batch is not None and adaptive_batch < 1:
        raise ValueError(f"adaptive_batch must be >= 1, got {adaptive_batch}")
    if not isinstance(plan, Plan):
        raise TypeError(f"run_study needs an oracle.harness.plan.Plan, got {type(plan).__name__}")
    study_dir = Path(study_dir).resolve()
    audit = AuditLog(study_dir / "audit.jsonl")
    for r in audit.records():
        if r.get("kind") in ("branch", "adaptive") and r.get("plan_hash") != plan.hash:
            raise ValueError(f"{audit.path}: record {r['key']!r} belongs to plan "
                             f"{str(r.get('plan_hash'))[:12]}, not {plan.hash[:12]}; use a new study dir")
    for r in audit.records():  # before anything runs: the plan still is what was frozen
        if r.get("kind") == "nominal" and r.get("task_id") in plan.n_boundaries:
            plan.check_nominal(r["task_id"], r)
    ctx = plan.context(study_dir)
    ex = executor or InlineExecutor()
    bar = _Progress(progress)

    def submit(fn: Callable, *args: Any) -> Future:
        return ex.submit(fn, *args)

    # phase 1: nominal runs (reused when the plan was frozen from them)
    noms = collect_nominal(ctx, plan.tasks, plan.study_seed, ex)
    for tid in plan.task_ids:
        plan.check_nominal(tid, noms[tid])
        ctx.nominal[tid] = noms[tid]
    records = {r["key"]: r for r in audit.records()}

    # phase 2: branches (leftover attempt directories of a killed run are discarded)
    shutil.rmtree(study_dir / "branches", ignore_errors=True)
    base = tuple(range(1, plan.repetitions + 1))
    specs = {s.branch_id: s for s in plan.branch_specs(repetitions=base)}
    third_done: set[str] = set()

    def maybe_third(cell_id: str) -> list[BranchSpec]:
        if cell_id in third_done or not plan.third_rule or plan.repetitions != 2:
            return []
        pairs = plan.pairs_of(cell_id, (1, 2))
        recs = [[records.get(b) for b in p] for p in pairs]
        if any(r is None for p in recs for r in p):
            return []
        cell = plan.cell(cell_id)
        creation = next(float(c["creation_s"]) for c in ctx.nominal[cell["task_id"]]["checkpoints"]
                        if int(c["boundary"]) == cell["candidate"])
        advs = []
        for p in recs:
            by_role = {r["role"]: r for r in p}
            advs.append(advantage(float(by_role["skip"]["cost_s"]),
                                  charged_cp(float(by_role["cp"]["cost_s"]), creation)))
        third_done.add(cell_id)
        if sign_unstable(advs):
            return plan.branch_specs(repetitions=(3,), cells=[cell_id])
        return []

    for cell_id in plan.pair_cells():
        for s in maybe_third(cell_id):
            specs[s.branch_id] = s
    todo = [s for k, s in specs.items() if k not in records]
    bar.start(total=len(specs), done=len(specs) - len(todo),
              quarantined=sum(1 for k in specs if records.get(k, {}).get("quarantined")))
    errors: list[tuple[str, BaseException]] = []

    def drain(queue: list[BranchSpec]) -> None:
        # An executor that runs calls at submit time (inline) gets one call in flight, so
        # each finished branch is recorded before the next starts; pools get everything.
        in_flight = 1 if isinstance(ex, InlineExecutor) else max(1, len(queue))
        futs: dict[Future, BranchSpec] = {}
        while futs or queue:
            while queue and len(futs) < in_flight:
                s = queue.pop(0)
                futs[submit(run_branch, s, ctx)] = s
            done, _ = wait(list(futs), return_when=FIRST_COMPLETED)
            for f in done:
                s = futs.pop(f)
                exc = f.exception()
                if exc is not None:  # keep recording the others; report after the drain
                    errors.append((s.branch_id, exc))
                    continue
                rec = f.result()
                audit.append(rec)
                records[rec["key"]] = rec
                bar.update(rec)
                if s.pair_id is not None:
                    for extra in maybe_third(s.cell_id):
                        if extra.branch_id not in specs:
                            specs[extra.branch_id] = extra
                            bar.grow(1)
                            if extra.branch_id not in records:
                                queue.append(extra)

    def raise_errors() -> None:
        if errors:
            bid, exc = errors[0]
            raise RuntimeError(f"{len(errors)} branch(es) failed (not recorded; a rerun retries "
                               f"them); first: {bid}: {exc!r}") from exc

    prov = plan.provenance()
    try:
        drain(list(todo))
        raise_errors()
        # phase 3: adaptive rounds (sparse plans), each chosen once and recorded first
        adaptive = _adaptive_rounds(plan, study_dir, audit, records, prov, adaptive_branches,
                                    adaptive_batch, bar, drain, raise_errors)
    finally:
        bar.close()
        finish_discards(study_dir / "branches")
    if adaptive:
        prov["sparse"] = {**prov["sparse"], "adaptive": adaptive}
    describe = getattr(ctx.agent(), "describe", None)
    runtime = describe() if describe is not None else None
    if runtime is not None:  # a real runtime: which program and version made the labels
        prov["runtime"] = runtime
    ls = build_label_set(audit.records(), study_dir, provenance=prov)
    ls.save(Path(out) if out is not None else study_dir / "labelset")
    return ls


def _adaptive_rounds(plan: Plan, study_dir: Path, audit: AuditLog, records: dict[str, dict],
                     prov: dict, budget: int, batch: int | None, bar: _Progress,
                     drain: Callable[[list[BranchSpec]], None],
                     raise_errors: Callable[[], None]) -> list[str]:
    """Run the recorded adaptive rounds' missing branches, then choose and run new rounds
    while the stated budget lasts (see :func:`run_study`). Returns every adaptive cell id."""
    reps = plan.repetitions
    chosen: list[str] = []
    spent = 0
    planned = {(c["task_id"], int(c["restore_point"]), int(c["failure"])) for c in plan.cells
               if c["kind"] == "table"}
    k = 0
    while True:
        key = f"adaptive/{k}"
        rec = records.get(key)
        if rec is None:
            n_cells = min(batch or budget, budget - spent) // reps
            if n_cells < 1:
                break
            so_far = {**prov, "sparse": {**prov["sparse"], "adaptive": sorted(chosen)}}
            ls = build_label_set(audit.records(), study_dir, provenance=so_far)
            taken = planned | {_cell_key(c) for c in chosen}
            cells = next_cells(ls, n_cells, exclude=taken)
            rec = {"key": key, "kind": "adaptive", "plan_hash": plan.hash, "round": k,
                   "budget_branches": int(budget), "spent_before": int(spent),
                   "criterion": ADAPTIVE_CRITERION,
                   "cells": [[t, int(r), int(f)] for t, r, f in cells]}
            audit.append(rec)
            records[key] = rec
        specs = plan.adaptive_specs(rec["cells"])
        chosen += [table_cell_id(t, r, f) for t, r, f in rec["cells"]]
        spent += len(specs)
        todo = [s for s in specs if s.branch_id not in records]
        bar.grow(len(specs))
        bar.done += len(specs) - len(todo)
        drain(todo)
        raise_errors()
        if not rec["cells"]:
            break
        k += 1
    return sorted(chosen)


def _cell_key(cid: str) -> tuple[str, int, int]:
    tid, r, f = cid.rsplit(":", 2)
    return tid, int(r[1:]), int(f[1:])


class _Progress:
    """Progress of a phase (nominal runs, branches) or a callback.

    On a terminal: a tqdm bar (done/total, ETA, quarantined). Elsewhere (a log file, CI): one
    plain line per finished run instead of carriage-return redraws, e.g.
    ``branches 3/16 quarantined=0 elapsed 0:41 eta 2:58 (t1:c0:f2:rep1/0)``.
    """

    def __init__(self, progress: bool | Callable[[dict], None], desc: str = "branches",
                 unit: str = "branch") -> None:
        self.cb = progress if callable(progress) else None
        self.enabled = bool(progress) and self.cb is None
        self.desc, self.unit = desc, unit
        self.bar: Any = None
        self.q = 0
        self.done = 0
        self.total = 0
        self.started = 0
        self.t0 = time.monotonic()

    def start(self, total: int, done: int, quarantined: int) -> None:
        self.total, self.done, self.q = total, done, quarantined
        self.started, self.t0 = done, time.monotonic()
        if self.enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=done, unit=self.unit, desc=self.desc)
            self.bar.set_postfix(quarantined=self.q)

    def grow(self, n: int) -> None:
        self.total += n
        if self.bar is not None:
            self.bar.total = self.total
            self.bar.refresh()

    def update(self, rec: dict) -> None:
        self.done += 1
        self.q += bool(rec.get("quarantined"))
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(quarantined=self.q)
        elif self.enabled:
            self._line(rec)
        if self.cb is not None:
            self.cb({"done": self.done, "total": self.total, "quarantined": self.q, "record": rec})

    def _line(self, rec: dict) -> None:
        from tqdm import tqdm

        elapsed = time.monotonic() - self.t0
        rate = (self.done - self.started) / elapsed if elapsed > 0 else 0.0
        eta = tqdm.format_interval((self.total - self.done) / rate) if rate > 0 else "?"
        print(f"{self.desc} {self.done}/{self.total} quarantined={self.q} elapsed "
              f"{tqdm.format_interval(elapsed)} eta {eta} ({rec.get('key', '')})",
              file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
