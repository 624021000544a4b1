"""Collecting the shipped label set: wall time (target <= 90 min on 2 cores) and harness
overhead (target <= 2 % of agent time), measured on the real collection.

    python benchmarks/bench_collect.py                         # the shipped set's collection
    python benchmarks/bench_collect.py --tasks 4 --repos 4 --out /tmp/small
    python benchmarks/bench_collect.py --report-only --out runs/llm-free
    python benchmarks/bench_collect.py --ship                  # ... and copy it into the package

It runs the one command that reproduces the shipped set (``python -m
experiments.collect_labels --agent llm-free --families repair depres cbuild migrate --tasks 100
--repos 16 --design full ...``; a
re-run resumes), samples the machine's load average every 15 s while it runs, then reads
the study's audit log and prints per family: tasks, branches, nominal seconds, the agents'
seconds in the branches (drive into the failure + recovery), the verifier's, and the
harness overhead = branch wall time - agent time - verifier time, as a share of agent
time, with and without the measured restore latency (a priced part of recovery, restoring
the checkpoint a branch resumes from). The collection's wall time is the command's,
measured here; under load the per-branch seconds show what a quiet machine would take.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, replace
from itertools import zip_longest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from labelsets.tables import LabelSet  # noqa: E402
from oracle.harness.executors import close_executor, make_executor  # noqa: E402
from oracle.harness.plan import Plan  # noqa: E402
from oracle.harness.study import build_label_set, run_study  # noqa: E402
from oracle.store.audit import AuditLog  # noqa: E402
from ripplecp_cli import opt, run  # noqa: E402

SHIP_TO = ROOT / "ripplecp_policy" / "data" / "labelsets" / "llm-free"
TARGET_MIN = 90.0
TARGET_OVERHEAD = 0.02


@dataclass(frozen=True)
class Args:
    agent: str = "llm-free"
    """registered agent (the shipped set: llm-free)"""
    tasks: int = opt(100, min=1)
    """tasks in all (dealt over the four families)"""
    repos: int = opt(16, min=1)
    """repositories in all (llm-free: at least one per family)"""
    families: tuple[str, ...] = opt(("repair", "depres", "cbuild", "migrate"), metavar="F")
    """llm-free: the families (the shipped set: these four; the next adds bisect)"""
    seed: int = opt(0, min=0)
    """study seed"""
    design: str = opt("full", choices=("full", "sparse"))
    """full (the shipped set: every restore point x failure) or sparse (--branches of them,
    one repetition each, priced by the recovery model)"""
    branches: int | None = opt(None, min=1)
    """sparse design: the branch budget in total"""
    out: str = "runs/llm-free"
    """study directory of the collection (resumed when it exists)"""
    jobs: int = opt(2, min=1)
    """parallel branches"""
    cap: float = opt(600.0, min=1.0)
    """per-branch cap, seconds"""
    report_only: bool = False
    """do not collect: report the study already in --out"""
    ship: bool = False
    """copy the finished label set (and its datasheet's figures) into the package"""
    ship_as: str = opt("llm-free", metavar="NAME")
    """with --ship: the shipped set's name (its folder in ripplecp_policy/data/labelsets/;
    the next real set goes beside llm-free, which stays the full-design ground truth)"""
    interleave: bool = True
    """once the plan is frozen, run the remaining branches task by task in turn over the
    families (same plan, hash and records; a collection stopped early then holds every
    family) instead of the plan's family-by-family order"""
    completed_only: bool = False
    """with --report-only: build the label set of a stopped collection from its audit log,
    keeping the tasks whose recovery tables are full (every cell, >= 2 repetitions)"""


def check_args(a: Args) -> None:
    """``--branches`` goes with ``--design sparse`` and only with it; ``--ship-as`` is a
    plain folder name."""
    if (a.design == "sparse") != (a.branches is not None):
        raise ValueError("argument --branches: needed by --design sparse, and only by it")
    if not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", a.ship_as):
        raise ValueError(f"argument --ship-as: a folder name of lower-case letters, digits, "
                         f"'-' and '_', got {a.ship_as!r}")


def collect_command(a: Args) -> list[str]:
    """The collection command (flags as ``experiments.collect_labels`` spells them)."""
    helptext = subprocess.run([sys.executable, "-m", "experiments.collect_labels", "--help"],
                              cwd=ROOT, capture_output=True, text=True).stdout
    jobs = "--jobs" if "--jobs" in helptext else "--workers"
    quiet = ["--no-progress"] if "--no-progress" in helptext else []
    sparse = ["--branches", str(a.branches), "--repetitions", "1"] if a.design == "sparse" else []
    return [sys.executable, "-m", "experiments.collect_labels", "--agent", a.agent,
            "--tasks", str(a.tasks), "--repos", str(a.repos), "--design", a.design, *sparse,
            *(["--families", *a.families] if a.agent == "llm-free" else []),
            "--seed", str(a.seed), "--out", a.out, jobs, str(a.jobs), "--cap", f"{a.cap:g}",
            *quiet]


def interleaved(plan: Plan) -> Plan:
    """The same plan (same hash) with its cells reordered: each task's cells together, the
    tasks in turn over the families (first task of each family, then the second, ...)."""
    fam = {t.task_id: t.family for t in plan.tasks}
    by_task: dict[str, list[dict]] = defaultdict(list)
    for c in plan.cells:
        by_task[c["task_id"]].append(c)
    per_fam: dict[str, list[str]] = defaultdict(list)
    for t in by_task:
        per_fam[fam[t]].append(t)
    order = [t for row in zip_longest(*per_fam.values()) for t in row if t is not None]
    return replace(plan, cells=[c for t in order for c in by_task[t]])


def collect_interleaved(a: Args) -> int:
    """The remaining branches of the frozen plan in ``a.out``, in :func:`interleaved` order,
    through :func:`oracle.harness.study.run_study` (what ``experiments.collect_labels`` runs)."""
    out = Path(a.out).resolve()
    plan = Plan.load(out / "plan.json")
    print(f"plan {out / 'plan.json'} (sha256 {plan.hash[:16]}): resuming, tasks in turn over "
          "the families", flush=True)
    ex = make_executor("local", a.jobs)
    try:
        ls = run_study(interleaved(plan), out / "study", executor=ex, out=out / "labelset")
    finally:
        close_executor(ex)
    print(f"label set {out / 'labelset'}: {len(ls.tasks)} tasks in {len(ls.repos)} repositories, "
          f"{len(ls.recovery)} branches", flush=True)
    return 0


class LoadSampler(threading.Thread):
    """1-minute load averages every ``every`` seconds until stopped."""

    def __init__(self, every: float = 15.0) -> None:
        super().__init__(daemon=True)
        self.every, self.samples = every, []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.samples.append(os.getloadavg()[0])
            self._halt.wait(self.every)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)


def report(study: Path) -> dict:
    """Per-family figures from the audit log of ``study`` (see the module docstring)."""
    recs = AuditLog(study / "audit.jsonl").records()
    family = {r["task_id"]: r["family"] for r in recs if r.get("kind") == "nominal"}
    fam: dict[str, dict] = defaultdict(lambda: defaultdict(float))
    branch_wall: dict[str, list[float]] = defaultdict(list)
    for r in recs:
        f = fam[family[r["task_id"]]]
        if r.get("kind") == "nominal":
            f["tasks"] += 1
            f["nominal_s"] += r["nominal_s"]
            f["boundaries"] += r["n_boundaries"]
        elif r.get("kind") == "branch":
            f["branches"] += 1
            f["agent_s"] += r["drive_s"] + r["cost_s"]
            f["verify_s"] += r["verify_s"]
            f["restore_s"] += r["restore_latency_s"]
            f["wall_s"] += r["branch_wall_s"]
            f["quarantined"] += bool(r["quarantined"])
            f["verified"] += bool(r["verified"])
            branch_wall[family[r["task_id"]]].append(r["branch_wall_s"])
    out = {}
    for name, f in sorted(fam.items()):
        if not f["agent_s"]:
            continue  # no branch of this family ran yet
        over = f["wall_s"] - f["agent_s"] - f["verify_s"]
        out[name] = dict(f, overhead=over / f["agent_s"] if f["agent_s"] else float("nan"),
                         overhead_ex_restore=(over - f["restore_s"]) / f["agent_s"] if f["agent_s"] else float("nan"),
                         branch_wall_median=statistics.median(branch_wall[name]) if branch_wall[name] else float("nan"))
    return out


def print_report(figs: dict, wall_s: float | None, load: list[float]) -> None:
    hdr = (f"{'family':<9}{'tasks':>6}{'B':>5}{'branches':>9}{'nominal s':>10}{'agent s':>9}"
           f"{'verify s':>9}{'restore s':>10}{'overhead':>9}{'ex restore':>11}{'median branch s':>16}")
    print(hdr)
    print("-" * len(hdr))
    tot: dict[str, float] = defaultdict(float)
    for name, f in figs.items():
        f = defaultdict(float, f)
        print(f"{name:<9}{int(f['tasks']):>6}{int(f['boundaries']):>5}{int(f['branches']):>9}"
              f"{f['nominal_s']:>10.0f}{f['agent_s']:>9.0f}{f['verify_s']:>9.0f}{f['restore_s']:>10.1f}"
              f"{f['overhead']:>9.2%}{f['overhead_ex_restore']:>11.2%}{f['branch_wall_median']:>16.1f}")
        for k in ("tasks", "boundaries", "branches", "nominal_s", "agent_s", "verify_s", "restore_s",
                  "wall_s", "quarantined", "verified"):
            tot[k] += f[k]
    over = tot["wall_s"] - tot["agent_s"] - tot["verify_s"]
    print(f"{'all':<9}{int(tot['tasks']):>6}{int(tot['boundaries']):>5}{int(tot['branches']):>9}"
          f"{tot['nominal_s']:>10.0f}{tot['agent_s']:>9.0f}{tot['verify_s']:>9.0f}{tot['restore_s']:>10.1f}"
          f"{over / tot['agent_s']:>9.2%}{(over - tot['restore_s']) / tot['agent_s']:>11.2%}")
    print(f"\n{int(tot['quarantined'])} quarantined branches; {int(tot['verified'])} of "
          f"{int(tot['branches'])} branches verified")
    ok = over / tot["agent_s"] <= TARGET_OVERHEAD
    print(f"harness overhead {over / tot['agent_s']:.2%} of agent time (target <= "
          f"{TARGET_OVERHEAD:.0%}): {'met' if ok else 'NOT met'}; without restore latency "
          f"{(over - tot['restore_s']) / tot['agent_s']:.2%}")
    if wall_s is not None:
        ok = wall_s / 60 <= TARGET_MIN
        print(f"collection wall time {wall_s / 60:.1f} min (target <= {TARGET_MIN:.0f} min on this "
              f"{os.cpu_count()}-core machine): {'met' if ok else 'NOT met'}")
    if load:
        print(f"load average (1 min) while it ran: mean {statistics.mean(load):.1f}, max "
              f"{max(load):.1f} over {len(load)} samples, {os.cpu_count()} cores")


def tool_versions() -> dict[str, str]:
    """Versions of what the agents ran (Python, pip, gcc, make, the OS) and this checkout's commit."""
    def first_line(*cmd: str) -> str:
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd=ROOT)
        except OSError as exc:
            return f"unavailable ({exc.strerror})"
        return (p.stdout or p.stderr).strip().splitlines()[0] if (p.stdout or p.stderr).strip() else "?"

    return {"python": sys.version.split()[0],
            "pip": first_line(sys.executable, "-m", "pip", "--version").split(" from ")[0],
            "gcc": first_line("gcc", "--version"), "make": first_line("make", "--version"),
            "os": " ".join(os.uname()[i] for i in (0, 2, 4)), "cpus": str(os.cpu_count()),
            "commit": first_line("git", "rev-parse", "HEAD")}


def ship(out: Path, dest: Path = SHIP_TO) -> Path:
    """Copy the label set of ``out`` into the package, its provenance completed with the
    runtime (standalone: the agents ran as their own programs) and the tool versions;
    verified by its hash before and after (its datasheet stays as written)."""
    ls = LabelSet.load(out / "labelset")
    ls.provenance.update(runtime="standalone", versions=tool_versions())
    dest.mkdir(parents=True, exist_ok=True)
    ls.save(dest)
    back = LabelSet.load(dest)
    assert back.content_hash() == ls.content_hash()
    print(f"shipped {out / 'labelset'} -> {dest}: {len(back.tasks)} tasks, "
          f"{back.tasks['repo'].nunique()} repositories, hash {back.content_hash()[:16]}")
    return dest


def completed_label_set(out: Path, dest: Path | None = None) -> Path:
    """The label set of the tasks a stopped collection in ``out`` finished, saved (hashed)
    to ``dest`` (default ``out/labelset``): every task all of whose planned branches (every cell, the first two
    repetitions) are recorded. The provenance records how many of the plan's tasks it holds."""
    plan = Plan.load(out / "plan.json")
    study = out / "study"
    recs = AuditLog(study / "audit.jsonl").records()
    prov = plan.provenance()
    full = build_label_set(recs, study, provenance=prov)
    planned: dict[str, set[str]] = defaultdict(set)  # the first two repetitions of every cell
    for spec in plan.branch_specs(repetitions=(1, 2)):
        planned[spec.task_id].add(spec.branch_id)
    done = set(full.recovery["branch_id"])
    # a sparse plan may leave a task no cell (the design's draw): it is complete when its
    # planned branches, if any, are in
    keep = [t for t in full.task_ids
            if (planned[t] or plan.design == "sparse") and planned[t] <= done]
    ls = full.subset(keep)
    ls.provenance.update(planned_tasks=len(plan.task_ids), completed_tasks=len(keep),
                         stopped_early=len(keep) < len(plan.task_ids))
    path = ls.save(dest or out / "labelset")
    back = LabelSet.load(path)  # verified by its hash
    print(f"label set {path}: {len(back.tasks)} of {len(plan.task_ids)} planned tasks, "
          f"{back.tasks['repo'].nunique()} repositories, {len(back.recovery)} branches, "
          f"hash {back.content_hash()[:16]}")
    return path


def _invocations(out: Path) -> list[dict]:
    path = out / "bench_collect.json"
    return json.loads(path.read_text()) if path.exists() else []


def interrupt(signum: int, frame: object) -> None:
    """SIGTERM handler: stop as Ctrl-C does (the branches in flight are not recorded)."""
    raise KeyboardInterrupt


def main(a: Args) -> int:
    check_args(a)
    out = Path(a.out)
    wall = None
    load: list[float] = []
    if not a.report_only:
        cmd = collect_command(a)
        print("collecting:", " ".join(cmd[1:]), flush=True)
        sampler = LoadSampler()
        sampler.start()
        t0 = time.monotonic()
        # SIGTERM stops the collection like Ctrl-C: the invocation is still recorded
        signal.signal(signal.SIGTERM, interrupt)
        try:
            if a.interleave and (out / "plan.json").exists():
                try:
                    rc = collect_interleaved(a)
                except Exception as exc:  # recorded below like a failed command
                    print(f"collection failed: {exc!r}", flush=True)
                    rc = 1
            else:
                rc = subprocess.run(cmd, cwd=ROOT).returncode
        except KeyboardInterrupt:
            print("collection stopped (resume: rerun the same command)", flush=True)
            rc = 130
        finally:
            sampler.stop()
        runs = _invocations(out)  # a resumed collection adds to the earlier invocations
        runs.append({"wall_s": time.monotonic() - t0, "load": sampler.samples,
                     "command": cmd[1:], "exit_status": rc})
        (out / "bench_collect.json").write_text(json.dumps(runs, indent=1))
        if rc != 0:
            raise RuntimeError(f"the collection exited with status {rc}")
    runs = _invocations(out)
    if runs:
        wall = sum(r["wall_s"] for r in runs)
        load = [x for r in runs for x in r["load"]]
        if len(runs) > 1:
            print(f"{len(runs)} invocations (a resumed collection): wall times "
                  + ", ".join(f"{r['wall_s'] / 60:.1f} min" for r in runs))
    print_report(report(out / "study"), wall, load)
    if a.completed_only:
        completed_label_set(out)
    if a.ship:
        ship(out, SHIP_TO.parent / a.ship_as)
    return 0


if __name__ == "__main__":
    sys.exit(run(main, Args, prog="python benchmarks/bench_collect.py", description=__doc__))
