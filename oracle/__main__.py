"""Command line: ``python -m oracle plan|run|audit|agents``.

``plan``   builds tasks for an agent (agents that can generate tasks: ``scripted``,
           ``repair``, the real runtimes ``codex`` / ``claude-code`` / ``mini-swe-agent``
           with ``--brain repair`` or a program brain ``depres`` / ``cbuild`` / ``migrate``,
           the simulated agents), runs their nominal runs into the study directory
           (checkpoint at every boundary), then freezes the cells and seeds of a design into
           a hashed plan file.
``run``    executes a plan (resumable): ``--executor local|inline|dask``, ``--jobs N``;
           progress with branches done/total, ETA and the quarantined count.
``audit``  summarises an audit log: counts, quarantined branches/pairs with reasons,
           sign-unstable cells.
``agents install [NAME ...]`` installs the pinned runtimes into the project's git-ignored
           ``.runtimes/`` (idempotent); ``agents list`` shows what is installed and usable.

The study directory defaults to ``<plan file without .json>.study`` next to the plan.
"""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from labelsets.definitions import DESIGNS, advantage, charged_cp, sign_unstable
from oracle.agents.runtimes import runtime_names
from ripplecp_cli import opt, run_subcommands, suggest

PROG = "python -m oracle"
EXECUTORS = ("inline", "local", "dask")
#: brains a real runtime can be driven by (oracle.agents.runtime.RUNTIME_BRAINS)
BRAINS = ("repair", "depres", "cbuild", "migrate", "bisect", "scripted", "proxy")
#: the pinned runtimes, read from their records (a standard-library module: parsing stays light)
RUNTIME_NAMES = runtime_names()


def _kv_pairs(items: Sequence[str]) -> tuple[str, ...]:
    """Check ``KEY=VALUE`` words (a value is read as JSON where it parses).

    The builder splits list values at commas; a piece without ``=`` can only be the rest of
    the previous value (a JSON list or object), so it is joined back to it.
    """
    out: list[str] = []
    for it in items:
        if "=" not in it and out:
            out[-1] += "," + it
        elif "=" not in it or not it.split("=", 1)[0]:
            raise ValueError(f"expected KEY=VALUE, got {it!r}")
        else:
            out.append(it)
    return tuple(out)


def _kv(items: Sequence[str], flag: str = "--agent-opt") -> dict[str, Any]:
    """``KEY=VALUE`` words as a dict, each value read as JSON where it parses; a value that
    starts like a JSON list, object or string must parse (one-line error naming it)."""
    out: dict[str, Any] = {}
    for it in items:
        k, v = it.split("=", 1)
        try:
            out[k] = json.loads(v)
        except RecursionError:
            raise ValueError(f"{flag} {k}: value nested too deeply") from None
        except json.JSONDecodeError as exc:
            if v.lstrip()[:1] in ("{", "[", '"'):
                raise ValueError(f"{flag} {k}={v[:60]}: not valid JSON ({exc})") from None
            out[k] = v
    return out


def _agent_name(name: str) -> str:
    """A registered agent name, else the one-line error listing them."""
    from oracle.agents import agent_names

    known = agent_names()
    if name not in known:
        raise ValueError(f"unknown agent {name!r}{suggest(name, known)}; known agents: "
                         + ", ".join(known))
    return name


def default_study_dir(plan_path: Path) -> Path:
    """``plan.json`` -> ``plan.study`` next to it."""
    plan_path = Path(plan_path)
    return plan_path.with_name(plan_path.stem + ".study")


# ---------------------------------------------------------------------------------------
# plan
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanArgs:
    """Generate tasks, run their nominal runs, freeze a plan of a design."""

    tasks: int = opt(min=1)
    """how many tasks (an agent that cannot make this many is an error)"""
    seed: int = opt(min=0)
    """study seed: tasks, nominal runs, pair seeds, branch order"""
    out: Path = opt()
    """the plan file to write (JSON)"""
    agent: str = opt("scripted", check=_agent_name)
    """the agent to drive (see python -m oracle agents list for the real runtimes)"""
    brain: Literal["repair", "depres", "cbuild", "migrate", "bisect", "scripted", "proxy"] | None = None
    """who answers a real runtime's model calls (codex, claude-code, mini-swe-agent; default
    repair): an LLM-free agent's decisions (repair; depres, cbuild, migrate, bisect: the family's
    step program), a scripted plan, or a proxy to a real endpoint"""
    design: Literal["pilot", "tool_call", "full", "sparse"] = opt("pilot", choices=DESIGNS)
    """pilot: an early and a late cell per task; tool_call: every adjacent cell; full: every
    restore point x failure; sparse: --branches (or --branches-per-task) of them, priced by
    the recovery model"""
    branches: int | None = opt(None, min=1)
    """sparse design: the branch budget in total"""
    branches_per_task: int | None = opt(None, min=1)
    """sparse design: the branch budget per task (times the number of tasks)"""
    shares: tuple[float, ...] = opt((0.5, 0.25, 0.25), metavar="S")
    """sparse design: the budget's shares of pristine (r=0), adjacent (r=f-1) and longer
    cells"""
    study: Path | None = None
    """study directory (default: <out without .json>.study)"""
    granularity: Literal["turn", "tool_call"] | None = None
    """candidate boundaries (default: the agent's own, else turn; tool_call for that design)"""
    repetitions: int | None = opt(None, min=1)
    """repetitions per cell (default 2, sparse 1; pair cells: plus the predeclared third when
    signs differ)"""
    cap: float = opt(1800.0, min=0.001)
    """per-branch cap, seconds"""
    stride: int = opt(1, min=1)
    """tool_call design: every stride-th candidate"""
    include_final: bool = False
    """full design: also the segment after the last boundary"""
    determinism: bool = True
    """quarantine a branch whose observations diverge from the nominal run's (off: only
    record the divergence)"""
    agent_opt: tuple[str, ...] = opt((), check=_kv_pairs, metavar="KEY=VALUE")
    """agent options (JSON values; the flag may repeat), e.g. plan=P.json for the scripted
    brain, seeds=run for a sampling model"""
    task_opt: tuple[str, ...] = opt((), check=_kv_pairs, metavar="KEY=VALUE")
    """options of the agent's task maker (JSON values; the flag may repeat)"""
    executor: Literal["inline", "local", "dask"] = "inline"
    """where the nominal runs execute"""
    jobs: int = opt(2, min=1)
    """parallel processes (local and dask executors)"""
    scheduler: str | None = None
    """dask scheduler address (default: a local cluster)"""
    dashboard: str | None = opt(None, metavar="HOST:PORT")
    """where a local Dask cluster serves its dashboard (default: 127.0.0.1, a free port;
    name another address to reach it from elsewhere)"""
    progress: bool = True
    """show progress (a bar on a terminal, else one line per nominal run)"""

    def __post_init__(self) -> None:
        sized = (self.branches is not None) + (self.branches_per_task is not None)
        if self.design == "sparse" and sized != 1:
            raise ValueError("argument --design sparse: give exactly one of --branches and "
                             "--branches-per-task")
        if self.design != "sparse" and sized:
            raise ValueError(f"argument --branches/--branches-per-task: only for --design sparse, "
                             f"not {self.design}")
        if len(self.shares) != 3 or any(x < 0 for x in self.shares) or sum(self.shares) <= 0:
            raise ValueError(f"argument --shares: three numbers >= 0, not all 0, got {list(self.shares)}")


def cmd_plan(a: PlanArgs) -> int:
    from labelsets.integrity import signing_key
    from oracle.agents import get_agent
    from oracle.harness.branch import HarnessConfig, StudyContext
    from oracle.harness.executors import close_executor, make_executor
    from oracle.harness.study import freeze_plan
    from oracle.protocol import clock_kind, make_tasks

    signing_key()  # a bad key is refused before any nominal run, not at the end
    out = a.out.resolve()
    study = a.study.resolve() if a.study else default_study_dir(out)
    agent_opts = _kv(a.agent_opt)
    if a.brain is not None:
        agent_opts["brain"] = a.brain
    try:
        agent = get_agent(a.agent, **agent_opts)
    except TypeError as exc:
        what = "--brain" if a.brain is not None and "brain" in str(exc) else "--agent-opt"
        raise ValueError(f"{what}: agent {a.agent!r} does not take it ({exc})") from None
    own = getattr(agent, "granularity", None)
    gran = "tool_call" if a.design == "tool_call" else \
        a.granularity or (own if own in ("turn", "tool_call") else "turn")
    if getattr(agent, "granularity", gran) != gran:
        agent_opts["granularity"] = gran
        agent = get_agent(a.agent, **agent_opts)
    check = getattr(agent, "check_installed", None)
    if check is not None:
        check()
    task_opts = _kv(a.task_opt, "--task-opt")
    try:
        tasks = make_tasks(agent, a.tasks, a.seed, study / "tasks", **task_opts)
    except TypeError as exc:  # an option the task maker does not take, or a value of a wrong type
        raise ValueError(f"--task-opt {' '.join(a.task_opt)}: the {a.agent} task maker "
                         f"refused it: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"--tasks {a.tasks}: {exc}") from None
    config = HarnessConfig(granularity=gran, branch_cap_s=a.cap,
                           require_obs_determinism=a.determinism, clock=clock_kind(agent))
    ctx = StudyContext(a.agent, agent_opts, {t.task_id: t for t in tasks}, config, study)
    ex = make_executor(a.executor, a.jobs, a.scheduler, a.dashboard)
    try:
        reps = a.repetitions if a.repetitions is not None else (1 if a.design == "sparse" else 2)
        plan = freeze_plan(ctx, tasks, a.design, seed=a.seed, repetitions=reps,
                           executor=ex, stride=a.stride, include_final=a.include_final,
                           progress=a.progress, branches=a.branches,
                           branches_per_task=a.branches_per_task,
                           shares=tuple(a.shares))  # type: ignore[arg-type]
    except BaseException:
        close_executor(ex, wait=False)  # Ctrl-C or an error: do not wait for running work
        raise
    close_executor(ex)
    plan.save(out)
    print(f"plan {out} (sha256 {plan.hash[:16]}): {len(tasks)} tasks, {len(plan.cells)} cells, "
          f"{plan.n_branches()} branches before third repetitions; study dir {study}")
    return 0


# ---------------------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunArgs:
    """Execute a frozen plan (resumable: finished branches are kept)."""

    plan: Path = opt(positional=True)
    """the plan file (from python -m oracle plan)"""
    out: Path | None = None
    """label set directory (default: <study>/labelset)"""
    study: Path | None = None
    """study directory (default: <plan without .json>.study)"""
    executor: Literal["inline", "local", "dask"] = "local"
    """where branches execute"""
    jobs: int = opt(2, min=1)
    """parallel processes (local and dask executors)"""
    scheduler: str | None = None
    """dask scheduler address (default: a local cluster)"""
    dashboard: str | None = opt(None, metavar="HOST:PORT")
    """where a local Dask cluster serves its dashboard (default: 127.0.0.1, a free port;
    name another address to reach it from elsewhere)"""
    progress: bool = True
    """show progress (a bar on a terminal, else one line per branch)"""
    adaptive_branches: int = opt(0, min=0)
    """sparse plans: after the plan's branches, spend up to this many more on the cells that
    most reduce the uncertainty of the confirmatory comparison (each round's choice is
    recorded in the audit log; a resumed run reruns it, never re-chooses)"""
    adaptive_batch: int | None = opt(None, min=1)
    """branches per adaptive round (default: the whole adaptive budget in one round)"""


def cmd_run(a: RunArgs) -> int:
    from oracle.harness.executors import close_executor, make_executor
    from oracle.harness.plan import Plan
    from oracle.harness.study import run_study

    plan_path = a.plan.resolve()
    plan = Plan.load(plan_path)
    study = a.study.resolve() if a.study else default_study_dir(plan_path)
    ex = make_executor(a.executor, a.jobs, a.scheduler, a.dashboard)
    try:
        ls = run_study(plan, study, executor=ex, out=a.out, progress=a.progress,
                       adaptive_branches=a.adaptive_branches, adaptive_batch=a.adaptive_batch)
    except BaseException:
        close_executor(ex, wait=False)  # Ctrl-C or an error: finished branches are in the
        raise  # audit log; running ones are stopped, not waited for (a rerun resumes)
    close_executor(ex)
    n_q = int(ls.recovery["quarantined"].fillna(False).sum())
    print(f"label set: {len(ls.tasks)} tasks, {len(ls.recovery)} branches ({n_q} quarantined), "
          f"{len(ls.labels)} pairs -> {a.out if a.out else study / 'labelset'}")
    return 0


# ---------------------------------------------------------------------------------------
# audit
# ---------------------------------------------------------------------------------------


def audit_summary(records: list[dict]) -> dict[str, Any]:
    """Counts, quarantined branches/pairs with reasons, and sign-unstable cells."""
    noms = {r["task_id"]: r for r in records if r.get("kind") == "nominal"}
    br = [r for r in records if r.get("kind") == "branch"]
    pairs: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in br:
        if r.get("pair_id"):
            pairs[r["pair_id"]][r["role"]] = r
    by_cell: dict[str, dict[int, float]] = defaultdict(dict)
    q_pairs = []
    no_creation: list[str] = []
    for pid, roles in sorted(pairs.items()):
        if set(roles) != {"cp", "skip"}:
            continue
        cp, sk = roles["cp"], roles["skip"]
        if cp["quarantined"] or sk["quarantined"]:
            q_pairs.append({"pair_id": pid, "reasons": [x["quarantine_reason"] for x in (cp, sk)
                                                        if x["quarantined"]]})
        creation = next((float(c["creation_s"]) for c in noms.get(cp["task_id"], {}).get("checkpoints", [])
                         if int(c["boundary"]) == int(cp["restore_point"])), None)
        if creation is None:  # no nominal record of the candidate: its advantage is unknown, not 0-charged
            no_creation.append(pid)
            continue
        by_cell[cp["cell_id"]][int(cp["repetition"])] = advantage(
            float(sk["cost_s"]), charged_cp(float(cp["cost_s"]), creation))
    unstable = []
    for cell, advs in sorted(by_cell.items()):
        if 1 in advs and 2 in advs and sign_unstable([advs[1], advs[2]]):
            unstable.append({"cell_id": cell, "advantages": [advs[k] for k in sorted(advs)],
                             "third_repetition": 3 in advs})
    return {
        "nominal_runs": len(noms), "branches": len(br),
        "by_role": dict(Counter(r["role"] for r in br)),
        "complete_pairs": sum(1 for p in pairs.values() if set(p) == {"cp", "skip"}),
        "quarantined_branches": sum(1 for r in br if r["quarantined"]),
        "quarantined_pairs": q_pairs, "sign_unstable_cells": unstable,
        "verified_branches": sum(1 for r in br if r["verified"]),
        "capped_branches": sum(1 for r in br if r["capped"]),
        "plan_hashes": sorted({str(r.get("plan_hash")) for r in br}),
        "pairs_without_creation_cost": no_creation,
        "adaptive_rounds": [{"round": r["round"], "cells": len(r["cells"]),
                             "budget_branches": r["budget_branches"]}
                            for r in sorted((r for r in records if r.get("kind") == "adaptive"),
                                            key=lambda r: r["round"])],
    }


@dataclass(frozen=True)
class AuditArgs:
    """Summarise a study's audit log: counts, quarantined pairs, sign-unstable cells."""

    path: Path = opt(positional=True)
    """audit.jsonl or a study directory"""
    json: bool = False
    """print the summary as JSON"""


def cmd_audit(a: AuditArgs) -> int:
    from oracle.store.audit import AuditLog

    path = a.path
    if path.is_dir():
        path = path / "audit.jsonl"
    if not path.exists():
        raise FileNotFoundError(2, "no audit log", str(path))
    s = audit_summary(AuditLog(path).records())
    if a.json:
        print(json.dumps(s, indent=2, sort_keys=True))
        return 0
    print(f"audit log {path}")
    print(f"  nominal runs: {s['nominal_runs']}   branches: {s['branches']} {s['by_role']}")
    print(f"  complete pairs: {s['complete_pairs']}   verified branches: {s['verified_branches']}"
          f"   capped: {s['capped_branches']}   quarantined branches: {s['quarantined_branches']}")
    print(f"  quarantined pairs: {len(s['quarantined_pairs'])}")
    for q in s["quarantined_pairs"]:
        print(f"    {q['pair_id']}: {' | '.join(q['reasons'])}")
    if s["pairs_without_creation_cost"]:
        print(f"  pairs without a nominal creation cost (advantage unknown): "
              f"{len(s['pairs_without_creation_cost'])}")
    print(f"  sign-unstable cells: {len(s['sign_unstable_cells'])}")
    for u in s["sign_unstable_cells"]:
        advs = ", ".join(f"{x:+.3f}" for x in u["advantages"])
        print(f"    {u['cell_id']}: advantages [{advs}] third repetition "
              f"{'run' if u['third_repetition'] else 'MISSING'}")
    if s["adaptive_rounds"]:
        rounds = s["adaptive_rounds"]
        print(f"  adaptive rounds: {len(rounds)} ({sum(r['cells'] for r in rounds)} cells chosen, "
              f"budget {rounds[-1]['budget_branches']} branches)")
    return 0


# ---------------------------------------------------------------------------------------
# agents
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InstallArgs:
    """Install the pinned agent runtimes into the project's .runtimes/ (idempotent)."""

    names: tuple[str, ...] = opt(RUNTIME_NAMES, choices=RUNTIME_NAMES, positional=True)
    """runtimes to install (default: all)"""


def cmd_install(a: InstallArgs) -> int:
    from oracle.agents.runtimes import get_runtime, install, runtimes_root

    for name in a.names:  # a RuntimeInstallError is one line saying why (npm missing, ...)
        had = get_runtime(name).probe(runtimes_root()).usable
        if not had:
            print(f"{name}: installing into {runtimes_root()} ...", file=sys.stderr, flush=True)
        found = install(name)
        print(f"{name} {found.version}: {'already installed, ' if had else ''}usable "
              f"({found.executable})")
    return 0


@dataclass(frozen=True)
class ListArgs:
    """Show the pinned agent runtimes: installed version, usable or why not."""

    json: bool = False
    """print the list as JSON"""


def cmd_list(a: ListArgs) -> int:
    from oracle.agents.registry import BUILTIN_AGENTS
    from oracle.agents.runtimes import RUNTIMES, installed, runtimes_root

    agents = {name: name for name in RUNTIMES if name in BUILTIN_AGENTS}  # every runtime is one
    rows = [{"runtime": i.name, "pinned": i.pinned, "installed": i.version, "usable": i.usable,
             "detail": i.detail, "executable": None if i.executable is None else str(i.executable),
             "licence": RUNTIMES[i.name].spec.licence, "agent": agents.get(i.name)}
            for i in installed()]
    if a.json:
        print(json.dumps({"root": str(runtimes_root()), "runtimes": rows}, indent=2))
        return 0
    print(f"runtimes in {runtimes_root()}")
    for r in rows:
        state = "usable" if r["usable"] else f"not usable: {r['detail']}"
        agent = f"--agent {r['agent']}" if r["agent"] else "no harness adapter"
        print(f"  {r['runtime']:<15} pinned {r['pinned']:<9} installed {r['installed'] or '-':<9}"
              f" {state}  ({agent})")
    return 0


COMMANDS = {
    "plan": (PlanArgs, cmd_plan),
    "run": (RunArgs, cmd_run),
    "audit": (AuditArgs, cmd_audit),
    "agents": {"install": (InstallArgs, cmd_install), "list": (ListArgs, cmd_list)},
}


#: list options whose repeated flags are merged into one (``--task-opt a=1 --task-opt b=2``)
MERGED = ("--agent-opt", "--task-opt")


def merge_repeated(argv: Sequence[str]) -> list[str]:
    """``argv`` with every repeated :data:`MERGED` flag's values gathered after one flag, so a
    repeated flag adds to the list (the builder would keep only the last one)."""
    rest: list[str] = []
    values: dict[str, list[str]] = {}
    words = list(argv)
    i = 0
    while i < len(words):
        flag, eq, inline = words[i].partition("=")
        i += 1
        if flag not in MERGED:
            rest.append(words[i - 1])
            continue
        got = values.setdefault(flag, [])
        if eq:
            got.append(inline)
            continue
        while i < len(words) and not words[i].startswith("-"):
            got.append(words[i])
            i += 1
    for flag, vals in values.items():
        rest += [flag, *vals]
    return rest


def main(argv: Sequence[str] | None = None) -> int:
    args = merge_repeated(sys.argv[1:] if argv is None else argv)
    return run_subcommands(COMMANDS, args, prog=PROG, description=__doc__)


if __name__ == "__main__":
    sys.exit(main())
