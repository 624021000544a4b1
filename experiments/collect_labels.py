"""Collect a real label set by running an agent through the paired-recovery harness.

    python -m experiments.collect_labels --agent repair --tasks 12 --repos 4 --design pilot --out runs/repair

Phase 1 generates the agent's tasks and runs their nominal trajectories (a checkpoint at
every boundary); phase 2 freezes the study plan (cells and seeds, hashed) before any
paired run; phase 3 executes it. Every finished nominal run and branch is an fsync'd
audit record, so re-running the same command after a crash or Ctrl-C continues where it
stopped, without losing or repeating a branch. The label set lands in ``OUT/labelset``
(``oracle.tables.LabelSet``), ready for ``experiments.matched_budget --labels`` and
``experiments.pilot_analysis --labels``.

The repair agent is stochastic (seeded choices differ between branches), so observation
divergence from the nominal run is recorded but does not quarantine a pair unless
``--require-determinism`` is given; restored-state digest mismatches and unpinned
nondeterministic reads always quarantine.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, fields
from pathlib import Path


@dataclass
class Args:
    agent: str = "repair"
    """registered agent name (repair, scripted, ...)"""
    tasks: int = 12
    """number of tasks"""
    repos: int = 4
    """number of repositories (module families for the repair agent)"""
    design: str = "pilot"
    """pilot (one early and one late cell per task), tool_call, or full (every r x f)"""
    granularity: str = "turn"
    """candidate boundaries: turn or tool_call"""
    repetitions: int = 2
    """repetitions per cell (a predeclared third for sign-unstable cells)"""
    seed: int = 0
    """study seed: tasks, mutants, pair seeds, branch order"""
    out: str = "runs/collect"
    """study directory (plan.json, audit.jsonl, labelset/)"""
    workers: int = 2
    """parallel branches"""
    executor: str = "local"
    """local (process pool), inline, or dask"""
    cap: float = 600.0
    """per-branch cap, seconds"""
    require_determinism: bool = False
    """quarantine pairs whose observations diverge from the nominal run"""
    progress: bool = True
    """show progress bars"""


def parse_args(argv: list[str] | None = None) -> Args:
    ap = argparse.ArgumentParser(prog="python -m experiments.collect_labels", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in fields(Args):
        flag = "--" + f.name.replace("_", "-")
        if f.type == "bool":
            ap.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default)
        else:
            typ = {"int": int, "float": float}.get(str(f.type), str)
            ap.add_argument(flag, type=typ, default=f.default)
    return Args(**vars(ap.parse_args(argv)))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from oracle.agents import get_agent
    from oracle.agents.protocol import clock_kind
    from oracle.executors import close_executor, make_executor
    from oracle.harness import HarnessConfig, StudyContext
    from oracle.plan import Plan
    from oracle.study import freeze_plan, run_study

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    plan_path = out / "plan.json"
    study = out / "study"
    t0 = time.monotonic()
    request = {k: getattr(args, k) for k in ("agent", "tasks", "repos", "design", "granularity",
                                             "repetitions", "seed", "cap", "require_determinism")}
    req_path = out / "request.json"
    if req_path.exists() and json.loads(req_path.read_text()) != request:
        raise SystemExit(f"{out}: holds a study made with other arguments "
                         f"({req_path}); use another --out")
    req_path.write_text(json.dumps(request, indent=2, sort_keys=True))

    gran = "tool_call" if args.design == "tool_call" else args.granularity
    agent_opts = {"granularity": gran}
    agent = get_agent(args.agent, **agent_opts)
    ex = make_executor(args.executor, args.workers)
    try:
        # --- phase 1 and 2: tasks, nominal runs, frozen plan (skipped when already frozen)
        if plan_path.exists():
            plan = Plan.load(plan_path)
            print(f"plan {plan_path} (sha256 {plan.hash[:16]}) already frozen: resuming")
        else:
            task_opts = {"n_repos": args.repos} if args.agent == "repair" else {"repos": args.repos}
            tasks = agent.make_tasks(args.tasks, args.seed, study / "tasks", **task_opts)
            config = HarnessConfig(granularity=gran, branch_cap_s=args.cap,
                                   require_obs_determinism=args.require_determinism,
                                   clock=clock_kind(agent))
            ctx = StudyContext(args.agent, agent_opts, {t.task_id: t for t in tasks}, config, study)
            plan = freeze_plan(ctx, tasks, args.design, seed=args.seed,
                               repetitions=args.repetitions, executor=ex)
            plan.save(plan_path)
            print(f"plan {plan_path} (sha256 {plan.hash[:16]}): {len(tasks)} tasks, "
                  f"{len(plan.cells)} cells, {plan.n_branches()} branches before third repetitions")
        # --- phase 3: paired branches (resumable from the audit log)
        ls = run_study(plan, study, executor=ex, out=out / "labelset", progress=args.progress)
    finally:
        close_executor(ex)
    n_q = int(ls.recovery["quarantined"].fillna(False).sum())
    print(f"label set {out / 'labelset'}: {len(ls.tasks)} tasks in {len(ls.repos)} repositories, "
          f"{len(ls.recovery)} branches ({n_q} quarantined), {len(ls.labels)} pairs; "
          f"{time.monotonic() - t0:.0f} s this invocation")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
