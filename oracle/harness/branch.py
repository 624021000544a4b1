"""The paired-recovery harness: one nominal run, one branch, replay validation (paper, App. A-B).

Nominal run (:func:`run_nominal`)
    ``agent.start`` from a pristine copy of the task template, run to completion. At every
    boundary report the harness pauses the agent (SIGSTOP of its process group, when the
    run supports ``pause``/``cont``), drains the effect log through the barrier, and
    takes a checkpoint (workspace + preserved transcript/facts) into the
    :class:`~oracle.store.checkpoint.CheckpointStore`, so every boundary is a restore point.
    Paused time is excluded from the nominal clock: event times and ``nominal_t_s`` are
    agent seconds from the start. Each checkpoint is then restored once into a scratch
    directory to measure restore latency and check its digest.

Branch (:func:`run_branch`), for restore point r, failure f, drive start d
    1. restore the nominal checkpoint at d (pair: the candidate t; table cell: f-1) into a
       fresh workspace and check its state digest against the one recorded at nominal time;
    2. CP branch only: materialise the candidate state (a real checkpoint into the study's
       content-addressed store, so unchanged contents are not rewritten; its creation cost
       is recorded as ``cp_creation_s``; labels charge the nominal creation cost);
    3. drive: ``resume`` from d and **fail-stop** it in segment f. Precise rule: the run is
       SIGKILLed — the agent and every process it started, tools in sessions of their own
       included (:mod:`oracle.processes`: its own PID namespace) — at the first *event*
       report that arrives once boundary f-1 has been passed (immediately on the first event
       when d >= f-1), so the failure strikes after some work of segment f was done. An agent
       that reports *activity* (real runtimes: a tool started, a model call in flight) is
       struck instead at the first activity of the branch's strike mode in segment f —
       mid-tool or mid-model-call, drawn from the branch seed (:func:`strike_mode`; both
       branches of a pair alike); the record says which (``strike``). A drive that ends
       before that never reached the failure: the branch is quarantined ("failure not
       reached");
    4. restore r (CP: the checkpoint materialised in step 2; SKIP: the fallback c-'s
       nominal checkpoint; 0: the pristine template) into another fresh workspace, check
       its digest, ``resume`` with the preserved transcript and facts (never the lost
       events), run to completion under the per-branch cap, then ``verify``.
    J(r, f) = clock seconds from the ``resume`` call to the end of the run's reports
    (agent exit or cap kill); restore latency, checkpoint creation and verification are
    recorded separately.

Replay validation (``paper/003``): observations are events carrying ``extra["source"]``
(an external read) with ``extra["payload_digest"]``. Each branch records the ordered
``(step, source, payload_digest)`` of its drive segment and of its recovery, and
``obs_digest`` = sha256 of that list. Restored state digests come from the checkpoint
manifest (the store verifies every blob's sha256 while restoring); a pristine copy of the
template is hashed. A branch is **quarantined** (kept, with a reason) when
a restored state digest differs from the recorded one, when (if the study requires
determinism) its observation sequence differs from the nominal run's over the same
segments, or when it consumed a nondeterministic read that was not pinned
(``extra["nondeterministic"]`` and not ``extra["pinned"]``).

Durable fork points (``paper/002``): effect reports go to the branch's
:class:`~oracle.store.effects.EffectLog`; the harness is the effect consumer (it drains into an
outbox file) and checkpoints only through the barrier. Effects of the aborted drive are
attributable by branch id; their counts are recorded.

Running a whole study (nominal runs as jobs, a frozen plan, the audit log, resumption)
is :mod:`oracle.harness.study`'s; :class:`StudyContext` carries what a worker needs for one run
of a study, including where its files live.

Known limits. Every branch attempt uses a fresh uniquely named directory (discarded when
a study restarts); agent programs die with the process that runs them and pool workers
with the study runner (:mod:`oracle.processes`), so a killed runner leaves nothing behind to
touch a later attempt. The nominal run's SIGSTOP lands one line-latency after a command-line
agent passed a boundary; a real runtime is held at the boundary exactly (its model server
answers nothing until the harness has taken the boundary, :mod:`oracle.agents.runtime`). With several workers, the two branches of a pair may overlap in time; "branch
order" is submission order. Whether a cell gets its third repetition depends on measured
(wall-clock) advantages, so two executions of one plan may differ there, each consistent
with its own records. Agents must be registered by an importable module (see
:mod:`oracle.agents.registry`) to be found inside process-pool or Dask workers.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import math
import re
import shutil
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from features.schema import Event, Trajectory
from oracle.agents import get_agent
from oracle.processes import ensure_parent
from oracle.protocol import (
    Agent,
    AgentRun,
    Clock,
    RestorePoint,
    TaskSpec,
    VirtualClock,
    WallClock,
)
from oracle.store.checkpoint import DEFAULT_EXCLUDES, CheckpointStore, state_digest
from oracle.store.effects import EffectLog

__all__ = [
    "BranchSpec",
    "HarnessConfig",
    "NominalResult",
    "StudyContext",
    "finish_discards",
    "run_branch",
    "run_nominal",
    "strike_mode",
]


@dataclass
class HarnessConfig:
    """Settings shared by every run of a study (frozen into the plan)."""

    granularity: str = "turn"
    branch_cap_s: float = 1800.0
    require_obs_determinism: bool = True
    drain_effects: bool = True
    exclude: tuple[str, ...] = tuple(DEFAULT_EXCLUDES)
    clock: str = "wall"  # "wall" | "virtual"

    def make_clock(self) -> Clock:
        return VirtualClock() if self.clock == "virtual" else WallClock()


# ---------------------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------------------


def _sha(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _safe_name(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", key)


def _fresh_dir(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


_discards: list[threading.Thread] = []


def _discard(path: Path) -> None:
    """Remove a finished branch's directory off the branch's critical path: renamed aside at
    once (its name is free again) and deleted by a background thread; the process waits for
    those threads at exit, and a study run discards leftovers of a killed one."""
    trash = path.with_name(f".discard-{path.name}-{uuid.uuid4().hex[:8]}")
    try:
        path.rename(trash)
    except OSError:
        shutil.rmtree(path, ignore_errors=True)
        return
    _discards[:] = [t for t in _discards if t.is_alive()]
    t = threading.Thread(target=shutil.rmtree, args=(trash,), kwargs={"ignore_errors": True},
                         name="discard-branch", daemon=True)
    t.start()
    _discards.append(t)


def finish_discards(branches: Path | None = None) -> None:
    """Wait for this process's background removals; with ``branches`` (a study's branch
    folder) also remove what other processes (pool workers) left being removed there."""
    for t in list(_discards):
        t.join()
    _discards.clear()
    if branches is not None and branches.is_dir():
        for left in branches.glob(".discard-*"):
            shutil.rmtree(left, ignore_errors=True)


atexit.register(finish_discards)


def _pristine(task: TaskSpec, dest: Path) -> float:
    """Copy the task template into ``dest`` (absent); returns seconds taken."""
    t0 = time.perf_counter()
    if task.workspace_template is not None:
        shutil.copytree(task.workspace_template, dest, symlinks=True)
    else:
        dest.mkdir(parents=True)
    return time.perf_counter() - t0


def _observation(ev: Event) -> dict | None:
    src = ev.extra.get("source")
    if src is None and not ev.extra.get("nondeterministic"):
        return None
    return {
        "step": int(ev.step), "source": str(src), "payload_digest": ev.extra.get("payload_digest"),
        "nondeterministic": bool(ev.extra.get("nondeterministic", False)),
        "pinned": bool(ev.extra.get("pinned", False)),
    }


def _obs_key(o: dict) -> tuple:
    return (o["step"], o["source"], o["payload_digest"])


class _Cap:
    """Per-run cap: a wall-clock timer that kills the run, or a virtual-clock check."""

    def __init__(self, run: AgentRun, clock: Clock, t0: float, cap_s: float) -> None:
        self.run, self.clock, self.t0, self.cap_s = run, clock, t0, cap_s
        self.hit = False
        self.timer: threading.Timer | None = None
        if clock.kind == "wall" and math.isfinite(cap_s):
            self.timer = threading.Timer(cap_s, self._fire)
            self.timer.daemon = True
            self.timer.start()

    def _fire(self) -> None:
        self.hit = True
        self.run.kill()

    def check(self) -> bool:
        """Virtual clock: kill when past the cap; returns True if the cap has been hit."""
        if not self.hit and self.clock.kind != "wall" and self.clock.now() - self.t0 > self.cap_s:
            self._fire()
        return self.hit

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()


class _Outbox:
    """The effect consumer: applies (appends) drained effects to a JSONL outbox file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self, rec: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(rec, sort_keys=True) + "\n")


# ---------------------------------------------------------------------------------------
# nominal run
# ---------------------------------------------------------------------------------------


@dataclass
class NominalResult:
    """What a nominal run produced: checkpoints per boundary, trajectory, observations."""

    task_id: str
    verified: bool
    nominal_s: float
    n_boundaries: int
    granularity: str
    exit_code: int
    checkpoints: list[dict]
    observations: list[dict]  # with "event_index"
    boundary_events: list[int]  # event index of boundary b = boundary_events[b-1]
    pristine_digest: str
    trajectory: Trajectory
    effects: int = 0
    usage: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def record(self) -> dict:
        """JSON-able form for the audit log (without the trajectory itself)."""
        d = asdict(self)
        d.pop("trajectory")
        return d


def run_nominal(
    agent: Agent, task: TaskSpec, *, store: CheckpointStore, work_dir: Path, seed: int,
    config: HarnessConfig, clock: Clock | None = None,
) -> NominalResult:
    """Run the task once from pristine, checkpointing at every boundary (see module doc)."""
    ensure_parent()  # a pool worker whose study runner is gone starts nothing
    clock = clock or config.make_clock()
    work_dir = _fresh_dir(Path(work_dir))
    ws = work_dir / "workspace"
    _pristine(task, ws)
    pristine_digest = state_digest(ws, config.exclude)
    log = EffectLog(work_dir / "effects.jsonl", f"nominal:{task.task_id}")
    outbox = _Outbox(work_dir / "outbox.jsonl")
    events: list[Event] = []
    cps: list[dict] = []
    bevents: list[int] = []
    paused = 0.0
    t0 = clock.now()
    run = agent.start(task, ws, seed, clock)
    cap = _Cap(run, clock, t0, config.branch_cap_s)
    sim_cost = getattr(agent, "simulated_checkpoint_cost", None)
    n_eff = 0
    try:
        for rep in run.reports():
            if cap.check():
                break
            if rep.kind == "event":
                ev = rep.event
                assert ev is not None
                ev.index = len(events)
                for name in ("start", "end"):
                    v = getattr(ev, name)
                    if v is not None:
                        setattr(ev, name, v - t0 - paused)
                events.append(ev)
            elif rep.kind == "effect":
                log.append(dict(rep.effect or {}))
                n_eff += 1
            elif rep.kind == "boundary":
                b = int(rep.boundary or len(cps) + 1)
                if b != len(cps) + 1:
                    raise RuntimeError(f"{task.task_id}: nominal run reported boundary {b} "
                                       f"after {len(cps)} boundaries")
                pause = getattr(run, "pause", None)
                tp = clock.now()
                if pause is not None:
                    pause()
                try:
                    if config.drain_effects:
                        log.drain(outbox)
                    transcript, facts = run.preserved()
                    info = store.create(ws, transcript, facts, effect_log=log)
                finally:
                    if pause is not None:
                        run.cont()  # type: ignore[attr-defined]
                paused += clock.now() - tp
                creation, size = info.creation_s, info.size_bytes
                if sim_cost is not None:
                    creation, size = sim_cost(task, b, ws)
                last = events[-1] if events else None
                bevents.append(last.index if last else -1)
                cps.append(dict(
                    boundary=b, event_index=last.index if last else -1,
                    step=int(last.step) if last else 1,
                    nominal_t_s=clock.now() - t0 - paused, creation_s=float(creation),
                    size_bytes=int(size), restore_latency_s=float("nan"),
                    checkpoint_id=info.checkpoint_id, state_digest=info.state_digest,
                    effect_seq=info.effect_seq,
                ))
    finally:
        cap.cancel()
    nominal_s = clock.now() - t0 - paused
    rc = run.wait()
    verified = bool(agent.verify(task, ws)) and not cap.hit
    # restore latency (and digest check) of every nominal checkpoint
    sim_restore = getattr(agent, "simulated_restore_latency", None)
    warn: list[str] = []
    scratch = work_dir / "restore_check"
    for cp in cps:
        _fresh_dir(scratch)
        dest = scratch / "ws"
        info = store.restore(cp["checkpoint_id"], dest)
        got = state_digest(dest, config.exclude)
        if got != cp["state_digest"]:
            warn.append(f"boundary {cp['boundary']}: restored digest {got[:12]} != recorded "
                        f"{cp['state_digest'][:12]}")
        cp["restore_latency_s"] = float(sim_restore(task, cp["boundary"]) if sim_restore
                                        else info.restore_latency_s)
    shutil.rmtree(scratch, ignore_errors=True)
    traj = Trajectory(task.task_id, task.repo, f"oracle:{agent.name}", events,
                      {"seed": seed, "granularity": config.granularity, "exit_code": rc,
                       "verified": verified, "clock": clock.kind})
    traj.validate()
    expected = traj.boundaries(config.granularity)  # type: ignore[arg-type]
    if expected != bevents:
        warn.append(f"reported boundaries at events {bevents} but the trajectory's "
                    f"{config.granularity} boundaries are {expected}")
    skipped = int(run.usage.get("non_json_lines") or 0)
    if skipped:
        warn.append(f"{skipped} agent output line(s) were not JSON objects and were ignored")
    obs = []
    for ev in events:
        o = _observation(ev)
        if o is not None:
            obs.append({**o, "event_index": ev.index})
    return NominalResult(
        task_id=task.task_id, verified=verified, nominal_s=float(nominal_s),
        n_boundaries=len(cps), granularity=config.granularity, exit_code=int(rc),
        checkpoints=cps, observations=obs, boundary_events=bevents,
        pristine_digest=pristine_digest, trajectory=traj, effects=n_eff,
        usage=dict(run.usage), warnings=warn,
    )


# ---------------------------------------------------------------------------------------
# branches
# ---------------------------------------------------------------------------------------


@dataclass
class BranchSpec:
    """One branch to execute (picklable; everything a worker needs besides the context)."""

    branch_id: str
    task_id: str
    role: str  # "cp" | "skip" | "table"
    restore_point: int
    failure: int
    drive_from: int
    repetition: int
    seed: int
    pair_id: str | None = None
    cell_id: str = ""
    candidate: int | None = None
    fallback: int | None = None
    order: int = 0  # position of this branch within its pair (0 = ran first)


@dataclass
class StudyContext:
    """Everything a worker needs to run a branch of a study (picklable)."""

    agent_name: str
    agent_options: dict[str, Any]
    tasks: dict[str, TaskSpec]
    config: HarnessConfig
    study_dir: Path
    plan_hash: str = ""
    nominal: dict[str, dict] = field(default_factory=dict)  # task_id -> nominal record

    @property
    def store_dir(self) -> Path:
        return self.study_dir / "store"

    def agent(self) -> Agent:
        return get_agent(self.agent_name, **self.agent_options)

    def store(self) -> CheckpointStore:
        """The study's checkpoint store, one instance per process (workers reuse it)."""
        key = str(self.store_dir)
        if key not in _STORES:
            _STORES[key] = CheckpointStore(self.store_dir, exclude=tuple(self.config.exclude),
                                           threads=1)
        return _STORES[key]

    def nominal_dir(self, task_id: str) -> Path:
        """Work directory of the nominal run of ``task_id``."""
        return self.study_dir / "nominal" / _safe_name(task_id)

    def trajectory_path(self, task_id: str) -> Path:
        """Where the nominal trajectory of ``task_id`` is kept (Parquet)."""
        return self.study_dir / "nominal" / f"{_safe_name(task_id)}.trajectory.parquet"

    def branch_dir(self, branch_id: str) -> Path:
        """A fresh, uniquely named directory for one attempt at ``branch_id``."""
        return self.study_dir / "branches" / f"{_safe_name(branch_id)}-{uuid.uuid4().hex[:8]}"


_STORES: dict[str, CheckpointStore] = {}


def strike_mode(seed: int, failure: int, n_boundaries: int) -> str:
    """Where a branch's failure strikes for an agent that reports activity: ``"tool"`` (at
    the first tool call started in segment ``failure``) or ``"model"`` (at its first model
    request, while the call is in flight), drawn from the branch's seed, so both branches of
    a pair strike alike; the segment after the last boundary holds no tool call: ``"model"``."""
    if failure > n_boundaries:
        return "model"
    return ("tool", "model")[hashlib.sha256(f"strike:{int(seed)}".encode()).digest()[0] % 2]


def _drive(agent: Agent, task: TaskSpec, restore: RestorePoint, ws: Path, seed: int,
           failure: int, clock: Clock, cap_s: float, log: EffectLog,
           strike: str | None = None) -> dict:
    """Resume from ``restore`` and fail-stop the run in segment ``failure`` (module doc);
    ``strike`` (an activity) strikes at that activity instead of the first event."""
    t0 = clock.now()
    run = agent.resume(task, restore, ws, seed, clock)
    cap = _Cap(run, clock, t0, cap_s)
    passed = restore.boundary
    struck = False
    obs: list[dict] = []
    n_eff = 0
    try:
        for rep in run.reports():
            if cap.check():
                break
            if rep.kind == "boundary":
                passed = int(rep.boundary or passed + 1)
            elif rep.kind == "effect":
                log.append(dict(rep.effect or {}))
                n_eff += 1
            elif rep.kind == "activity":
                if strike is not None and rep.activity == strike and passed >= failure - 1:
                    run.kill()  # fail-stop mid-tool / mid-model-call: every process of the run
                    struck = True
                    break
            elif rep.kind == "event":
                assert rep.event is not None
                o = _observation(rep.event)
                if o is not None:
                    obs.append(o)
                if strike is None and passed >= failure - 1:
                    run.kill()  # fail-stop: SIGKILL of the run and everything it started
                    struck = True
                    break
    finally:
        cap.cancel()
    rc = run.wait()
    return {"struck": struck, "boundary": passed, "drive_s": clock.now() - t0, "obs": obs,
            "exit_code": rc, "effects": n_eff, "capped": cap.hit, "strike": strike or "event"}


def _expected_obs(nom: dict, lo_boundary: int, hi_event: int | None) -> list[tuple]:
    """Nominal observations after boundary ``lo_boundary`` up to event ``hi_event``."""
    bev = nom["boundary_events"]
    lo = -1 if lo_boundary == 0 else bev[lo_boundary - 1]
    return [_obs_key(o) for o in nom["observations"]
            if o["event_index"] > lo and (hi_event is None or o["event_index"] <= hi_event)]


def _first_mismatch(want: list[tuple], got: list[tuple]) -> dict:
    i = next((k for k, (a, b) in enumerate(zip(want, got, strict=False)) if a != b),
             min(len(want), len(got)))
    return {"index": i, "expected": list(want[i]) if i < len(want) else None,
            "got": list(got[i]) if i < len(got) else None,
            "n_expected": len(want), "n_got": len(got)}


def _describe(m: dict) -> str:
    def one(x: list | None) -> str:
        return "nothing" if x is None else f"{x[1]} at step {x[0]} ({str(x[2])[:12]})"
    return f"observation {m['index']}: expected {one(m['expected'])}, got {one(m['got'])}"


def run_branch(spec: BranchSpec, ctx: StudyContext) -> dict:
    """Execute one branch and return its audit record (recovery-row fields + extras)."""
    ensure_parent()  # a pool worker whose study runner is gone starts nothing
    t_branch = time.perf_counter()
    agent = ctx.agent()
    task = ctx.tasks[spec.task_id]
    nom = ctx.nominal[spec.task_id]
    cfg = ctx.config
    clock = cfg.make_clock()
    store = ctx.store()
    cps = {int(c["boundary"]): c for c in nom["checkpoints"]}
    # a unique directory per attempt: a straggler agent of a killed earlier attempt (agents
    # run in their own sessions) can never write into this attempt's workspaces
    bdir = _fresh_dir(ctx.branch_dir(spec.branch_id))
    reasons: list[str] = []
    divergence: dict[str, Any] = {}  # the divergence record kept with a quarantined branch
    log = EffectLog(bdir / "effects.jsonl", spec.branch_id)
    try:
        # 1. restore the drive start state
        drive_ws = bdir / "drive"
        d = spec.drive_from
        if d == 0:
            _pristine(task, drive_ws)
            transcript, facts, expect = [], {}, nom["pristine_digest"]
            got = state_digest(drive_ws, cfg.exclude)
        else:
            rinfo = store.restore(cps[d]["checkpoint_id"], drive_ws)
            transcript, facts, expect = rinfo.transcript, rinfo.facts, cps[d]["state_digest"]
            got = rinfo.state_digest  # restore verified every blob against the manifest
        if got != expect:
            divergence["drive_state"] = {"boundary": d, "expected": expect, "got": got}
            reasons.append(f"restored state of boundary {d} diverges from the nominal digest")
        # 2. CP branch: materialise the candidate state as its own checkpoint
        cp_creation = None
        cp_id = None
        if spec.role == "cp":
            if cfg.drain_effects:
                log.drain(_Outbox(bdir / "outbox.jsonl"))
            # into the study's content-addressed store: unchanged contents are not rewritten
            bstore = store
            info = bstore.create(drive_ws, transcript, facts, effect_log=log,
                                 checkpoint_id=f"branch-{bdir.name}"[:200])
            cp_creation, cp_id, cp_digest = info.creation_s, info.checkpoint_id, info.state_digest
            sim = getattr(agent, "simulated_checkpoint_cost", None)
            if sim is not None:
                cp_creation = float(sim(task, d, drive_ws)[0])
        # 3. drive into segment f and fail-stop
        strike = strike_mode(spec.seed, spec.failure, int(nom["n_boundaries"])) \
            if getattr(agent, "reports_activity", False) else None
        drive = _drive(agent, task, RestorePoint(d, drive_ws, transcript, facts), drive_ws,
                       spec.seed, spec.failure, clock, cfg.branch_cap_s, log, strike)
        if not drive["struck"]:
            reasons.append(f"failure {spec.failure} not reached: the drive from boundary {d} "
                           f"ended after boundary {drive['boundary']}")
        undrained = len(log.pending())
        # 4. restore r into a fresh workspace
        r = spec.restore_point
        rec_ws = bdir / "recover"
        t_restore = time.perf_counter()
        if r == 0:
            _pristine(task, rec_ws)
            r_transcript, r_facts, expect = [], {}, nom["pristine_digest"]
            restore_latency = time.perf_counter() - t_restore
        elif spec.role == "cp":
            assert cp_id is not None
            rinfo = bstore.restore(cp_id, rec_ws)
            r_transcript, r_facts, expect = rinfo.transcript, rinfo.facts, cps[r]["state_digest"]
            restore_latency = rinfo.restore_latency_s
            if rinfo.state_digest != cp_digest:
                reasons.append("CP checkpoint manifest digest differs from its creation digest")
        else:
            rinfo = store.restore(cps[r]["checkpoint_id"], rec_ws)
            r_transcript, r_facts, expect = rinfo.transcript, rinfo.facts, cps[r]["state_digest"]
            restore_latency = rinfo.restore_latency_s
        sim_restore = getattr(agent, "simulated_restore_latency", None)
        if sim_restore is not None:
            restore_latency = float(sim_restore(task, r))
        # a store restore checks every blob's sha256 against the manifest, so the manifest's
        # digest is the restored state's; a pristine copy is hashed
        restored_digest = state_digest(rec_ws, cfg.exclude) if r == 0 else rinfo.state_digest
        if restored_digest != expect:
            divergence["restore_state"] = {"boundary": r, "expected": expect, "got": restored_digest}
            reasons.append(f"restored state of restore point {r} diverges from the nominal digest")
        # 5. recover to completion under the cap; J excludes restore and verification
        t0 = clock.now()
        run = agent.resume(task, RestorePoint(r, rec_ws, r_transcript, r_facts), rec_ws,
                           spec.seed, clock)
        cap = _Cap(run, clock, t0, cfg.branch_cap_s)
        rec_obs: list[dict] = []
        try:
            for rep in run.reports():
                if cap.check():
                    break
                if rep.kind == "event":
                    assert rep.event is not None
                    o = _observation(rep.event)
                    if o is not None:
                        rec_obs.append(o)
                elif rep.kind == "effect":
                    log.append(dict(rep.effect or {}))
            cost = clock.now() - t0
        finally:
            cap.cancel()
        rc = run.wait()
        usage = dict(run.usage)
        t_verify = time.perf_counter()
        verified = bool(agent.verify(task, rec_ws))
        verify_s = time.perf_counter() - t_verify
        if cfg.drain_effects:
            log.drain(_Outbox(bdir / "outbox.jsonl"))
        # replay validation
        all_obs = [("drive", *_obs_key(o)) for o in drive["obs"]] + \
                  [("recover", *_obs_key(o)) for o in rec_obs]
        obs_digest = _sha(all_obs)
        unpinned = [o for o in drive["obs"] + rec_obs if o["nondeterministic"] and not o["pinned"]]
        if unpinned:
            o = unpinned[0]
            reasons.append(f"unpinned nondeterministic read: {o['source']} at step {o['step']}"
                           + (f" (+{len(unpinned) - 1} more)" if len(unpinned) > 1 else ""))
        if cfg.require_obs_determinism:
            bev = nom["boundary_events"]
            # the drive is compared up to the nominal run's first event of segment f
            hi = 0 if spec.failure == 1 else (
                bev[spec.failure - 2] + 1 if spec.failure - 2 < len(bev) else None)
            want_drive = _expected_obs(nom, d, hi)
            got_drive = [_obs_key(o) for o in drive["obs"]]
            if drive["struck"] and got_drive != want_drive[: len(got_drive)]:
                divergence["drive_obs"] = _first_mismatch(want_drive, got_drive)
                reasons.append("observation divergence in the drive segment: "
                               + _describe(divergence["drive_obs"]))
            want_rec = _expected_obs(nom, r, None)
            got_rec = [_obs_key(o) for o in rec_obs]
            if got_rec != want_rec and not cap.hit:
                divergence["recovery_obs"] = _first_mismatch(want_rec, got_rec)
                reasons.append("observation divergence in recovery: "
                               + _describe(divergence["recovery_obs"]))
        q = bool(reasons)
        return {
            "key": spec.branch_id, "kind": "branch", "plan_hash": ctx.plan_hash,
            "task_id": spec.task_id, "restore_point": r, "failure": spec.failure,
            "repetition": spec.repetition, "branch_id": spec.branch_id, "pair_id": spec.pair_id,
            "role": spec.role, "cost_s": float(cost), "restore_latency_s": float(restore_latency),
            "tokens": int(usage["tokens"]) if usage.get("tokens") is not None else None,
            "tool_calls": int(usage["tool_calls"]) if usage.get("tool_calls") is not None else None,
            "verified": verified, "capped": bool(cap.hit), "seed": int(spec.seed),
            "state_digest": restored_digest, "obs_digest": obs_digest, "quarantined": q,
            "quarantine_reason": "; ".join(reasons) if q else None,
            "cell_id": spec.cell_id, "candidate": spec.candidate, "fallback": spec.fallback,
            "order": spec.order, "drive_from": d, "drive_struck": drive["struck"],
            "drive_boundary": drive["boundary"], "drive_s": float(drive["drive_s"]),
            "strike": drive["strike"],
            "cp_creation_s": None if cp_creation is None else float(cp_creation),
            "effects_emitted": len(log.effects_of(spec.branch_id)),
            "effects_undrained_at_kill": undrained, "exit_code": int(rc),
            "drive_exit_code": int(drive["exit_code"]), "clock": clock.kind,
            "verify_s": verify_s, "branch_wall_s": time.perf_counter() - t_branch,
            "divergence": divergence or None,
        }
    finally:
        log.close()
        _discard(bdir)
