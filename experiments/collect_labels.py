"""Collect a real label set by running an agent through the paired-recovery harness.

    python -m experiments.collect_labels --agent repair --tasks 12 --repos 4 --design pilot --out runs/repair

Phase 1 generates the agent's tasks and runs their nominal trajectories (a checkpoint at
every boundary); phase 2 freezes the study plan (cells and seeds, hashed) before any
paired run; phase 3 executes it. Every finished nominal run and branch is an fsync'd
audit record, so re-running the same command after a crash or Ctrl-C continues where it
stopped, without losing or repeating a branch. The label set lands in ``OUT/labelset``
(``labelsets.tables.LabelSet``), ready for ``experiments.matched_budget --labels`` and
``experiments.pilot_analysis --labels``.

``--runtime codex`` (or ``claude-code``) collects through a real runtime instead: the
LLM-free agents become its brains (``--agent llm-free``: every family, each behind the
runtime; ``--agent repair|depres|cbuild|migrate``: that family), boundaries are tool calls, and
the label set's provenance records the runtime and its version (``provenance["runtime"]``)::

    python -m experiments.collect_labels --agent llm-free --runtime codex --tasks 8 --repos 4 --out runs/codex

The repair agent is stochastic (seeded choices differ between branches), so observation
divergence from the nominal run is recorded but does not quarantine a pair unless
``--require-determinism`` is given; restored-state digest mismatches and unpinned
nondeterministic reads always quarantine.
"""

from __future__ import annotations

import inspect
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from features.schema import Granularity
from labelsets.definitions import DESIGNS
from oracle.agents.llmfree import FAMILY_AGENTS
from oracle.agents.registry import agent_names
from oracle.agents.runtimes import runtime_names
from ripplecp_cli import choice_error, opt, positive, progress, run

PROG = "python -m experiments.collect_labels"
#: where the branches run (oracle.harness.executors.make_executor)
EXECUTORS = ("inline", "local", "dask")
#: the real runtimes the LLM-free agents can be brains behind (their records say so)
RUNTIMES = runtime_names(drives_brains=True)
#: the agents that are brains behind a runtime: the LLM-free families (the brain of each is
#: named like it) and all of them at once
BRAIN_AGENTS = ("llm-free", "repair", "depres", "cbuild", "migrate", "bisect")


def check_agent(name: str) -> None:
    """``check=`` of ``--agent``: a name the agent registry knows."""
    known = agent_names()
    if name not in known:
        raise choice_error(name, known)


@dataclass(frozen=True)
class Args:
    """Collect a real label set by running an agent through the paired-recovery harness
    (resumable: rerun the same command to continue)."""

    agent: str = opt("repair", check=check_agent, metavar="NAME")
    """registered agent name (repair, scripted, simulator, sim:<family>, ...)"""
    tasks: int = opt(12, min=1)
    """number of tasks"""
    repos: int = opt(4, min=1)
    """number of repositories (module families for the repair agent; llm-free: in all,
    dealt evenly over its families)"""
    families: tuple[str, ...] = opt((), choices=tuple(FAMILY_AGENTS), metavar="F")
    """--agent llm-free: the families to collect (default: every one; the shipped llm-free
    set: repair depres cbuild migrate)"""
    design: str = opt("pilot", choices=DESIGNS)
    """pilot (one early and one late cell per task), tool_call, full (every r x f), or sparse
    (--branches of the full table's cells, priced by the recovery model)"""
    branches: int | None = opt(None, min=1)
    """sparse design: the branch budget in total"""
    adaptive_branches: int = opt(0, min=0)
    """sparse design: branches spent afterwards, round by round, where they most reduce the
    uncertainty of the confirmatory comparison (oracle run --adaptive-branches)"""
    granularity: str = opt("turn", choices=get_args(Granularity))
    """candidate boundaries"""
    repetitions: int = opt(2, min=1)
    """repetitions per cell (a predeclared third for sign-unstable cells)"""
    seed: int = opt(0, min=0)
    """study seed: tasks, mutants, pair seeds, branch order"""
    out: str = opt("runs/collect", metavar="PATH")
    """study directory (plan.json, audit.jsonl, labelset/)"""
    jobs: int = opt(2, min=1)
    """parallel branches (worker processes)"""
    executor: str = opt("local", choices=EXECUTORS)
    """local (process pool), inline, or dask"""
    scheduler: str | None = opt(None, metavar="ADDR")
    """a Dask scheduler address (--executor dask; default: a local cluster of --jobs workers)"""
    dashboard: str | None = opt(None, metavar="HOST:PORT")
    """where a local Dask cluster serves its dashboard (default: 127.0.0.1, a free port)"""
    cap: float = opt(600.0, check=positive)
    """per-branch cap, seconds"""
    runtime: str | None = opt(None, choices=RUNTIMES)
    """collect through this real runtime, the agent as its brain (--agent llm-free or a
    family: repair, depres, cbuild, migrate, bisect); boundaries are then tool calls"""
    require_determinism: bool = False
    """quarantine pairs whose observations diverge from the nominal run"""
    progress: bool = True
    """show the progress of every step (tasks, nominal runs, branches)"""

    def __post_init__(self) -> None:
        if (self.design == "sparse") != (self.branches is not None):
            raise ValueError("argument --branches: needed by --design sparse, and only by it")
        if self.adaptive_branches and self.design != "sparse":
            raise ValueError("argument --adaptive-branches: only for --design sparse")
        if self.scheduler is not None and self.executor != "dask":
            raise ValueError(f"argument --scheduler: needs --executor dask, not {self.executor}")
        if self.families and self.agent != "llm-free":
            raise ValueError(f"argument --families: only for --agent llm-free, not {self.agent}")
        if self.runtime is not None and self.agent not in BRAIN_AGENTS:
            raise ValueError(f"argument --runtime: agent {self.agent!r} is no brain; choose "
                             f"--agent {', '.join(BRAIN_AGENTS)}")


def task_options(agent: Any, repos: int) -> dict[str, int]:
    """``--repos`` in the keyword the agent's ``make_tasks`` takes (``n_repos`` or ``repos``);
    ValueError when it takes neither."""
    params = inspect.signature(agent.make_tasks).parameters if hasattr(agent, "make_tasks") else {}
    for key in ("n_repos", "repos"):
        if key in params:
            return {key: repos}
    name = getattr(agent, "name", type(agent).__name__)
    raise ValueError(f"argument --repos: agent {name!r} does not take a repository count")


def runtime_agent(agent: str, runtime: str, granularity: str) -> tuple[str, dict[str, Any]]:
    """The registered name and options of ``agent`` as the brain behind ``runtime``."""
    if agent == "llm-free":
        return agent, {"granularity": granularity, "runtime": runtime}
    return runtime, {"brain": agent, "granularity": granularity}


def _bar(enabled: bool) -> Any:
    """A callback for :func:`oracle.harness.study.run_study`'s ``progress`` that draws the branches
    with :func:`ripplecp_cli.progress` (plain lines where stderr is not a terminal)."""
    state: dict[str, Any] = {}

    def update(info: dict) -> None:
        bar = state.get("bar")
        if bar is None:
            bar = state["bar"] = progress(desc="branches", unit="branch", total=info["total"],
                                          initial=info["done"] - 1, enabled=enabled)
        if info["total"] != bar.total:
            bar.set_total(info["total"])
        bar.set_postfix(quarantined=info["quarantined"])
        bar.update()

    def close() -> None:
        if "bar" in state:
            state["bar"].close()

    update.close = close  # type: ignore[attr-defined]
    return update


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments.collect_labels``: check every argument, then collect."""
    return run(collect, Args, argv, prog=PROG)


def collect(args: Args) -> int:
    """Phases 1-3 (the module docstring) for checked arguments."""
    from oracle.agents import get_agent
    from oracle.harness.branch import HarnessConfig, StudyContext
    from oracle.harness.executors import close_executor, make_executor
    from oracle.harness.plan import Plan
    from oracle.harness.study import freeze_plan, run_study
    from oracle.protocol import clock_kind, make_tasks

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    plan_path = out / "plan.json"
    study = out / "study"
    t0 = time.monotonic()
    request = {k: getattr(args, k) for k in ("agent", "tasks", "repos", "design", "granularity",
                                             "repetitions", "seed", "cap", "require_determinism")}
    if args.runtime is not None:  # absent otherwise: a study made before the option resumes
        request["runtime"] = args.runtime
    if args.design == "sparse":  # likewise
        request["branches"] = args.branches
    if args.families:  # likewise
        request["families"] = list(args.families)
    req_path = out / "request.json"
    if req_path.exists() and json.loads(req_path.read_text()) != request:
        raise ValueError(f"argument --out: {out} holds a study made with other arguments "
                         f"({req_path}); use another --out")
    req_path.write_text(json.dumps(request, indent=2, sort_keys=True))

    # a runtime reports tool-call boundaries only
    gran = "tool_call" if args.design == "tool_call" or args.runtime else args.granularity
    fams = {"families": list(args.families)} if args.families else {}
    name, agent_opts = args.agent, {"granularity": gran, **fams}
    agent = get_agent(args.agent, **agent_opts)
    task_opts = task_options(agent, args.repos)  # the standalone agent's task maker's keyword
    if args.runtime is not None:
        name, agent_opts = runtime_agent(args.agent, args.runtime, gran)
        agent_opts.update(fams)
        agent = get_agent(name, **agent_opts)
        agent.check_installed()
    ex = make_executor(args.executor, args.jobs, args.scheduler, args.dashboard)
    bar = _bar(args.progress)
    try:
        # --- phase 1 and 2: tasks, nominal runs, frozen plan (skipped when already frozen)
        if plan_path.exists():
            plan = Plan.load(plan_path)
            print(f"plan {plan_path} (sha256 {plan.hash[:16]}) already frozen: resuming")
        else:
            with progress(desc=f"tasks ({name})", total=args.tasks, unit="task",
                          enabled=args.progress) as step:
                try:
                    tasks = make_tasks(agent, args.tasks, args.seed, study / "tasks", **task_opts)
                except ValueError as exc:
                    raise ValueError(f"--tasks {args.tasks} --repos {args.repos}: {exc}") from None
                step.update(len(tasks))
            config = HarnessConfig(granularity=gran, branch_cap_s=args.cap,
                                   require_obs_determinism=args.require_determinism,
                                   clock=clock_kind(agent))
            ctx = StudyContext(name, agent_opts, {t.task_id: t for t in tasks}, config, study)
            # oracle.harness.study.freeze_plan reports no progress per run: the step as a whole
            with progress(desc="nominal runs (a checkpoint at every boundary)", total=len(tasks),
                          unit="run", enabled=args.progress) as step:
                plan = freeze_plan(ctx, tasks, args.design, seed=args.seed,
                                   repetitions=args.repetitions, executor=ex,
                                   branches=args.branches)
                step.update(len(tasks))
            plan.save(plan_path)
            print(f"plan {plan_path} (sha256 {plan.hash[:16]}): {len(tasks)} tasks, "
                  f"{len(plan.cells)} cells, {plan.n_branches()} branches before third repetitions")
        # --- phase 3: paired branches (resumable from the audit log)
        ls = run_study(plan, study, executor=ex, out=out / "labelset", progress=bar,
                       adaptive_branches=args.adaptive_branches)
    finally:
        bar.close()
        close_executor(ex)
    n_q = int(ls.recovery["quarantined"].fillna(False).sum())
    print(f"label set {out / 'labelset'}: {len(ls.tasks)} tasks in {len(ls.repos)} repositories, "
          f"{len(ls.recovery)} branches ({n_q} quarantined), {len(ls.labels)} pairs; "
          f"{time.monotonic() - t0:.0f} s this invocation")
    return 0


if __name__ == "__main__":
    sys.exit(main())
