"""Command line: ``python -m oracle plan|run|audit``.

``plan``  builds tasks for an agent (agents that can generate tasks, e.g. ``scripted``),
          runs their nominal runs into the study directory (checkpoint at every boundary),
          then freezes the cells and seeds of a design into a hashed plan file.
``run``   executes a plan (resumable): ``--executor local|inline|dask``, ``--workers N``;
          progress bar with branches done/total, ETA and the quarantined count.
``audit`` summarises an audit log: counts, quarantined branches/pairs with reasons,
          sign-unstable cells.

The study directory defaults to ``<plan file without .json>.study`` next to the plan.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from oracle.labels import DESIGNS, advantage, charged_cp, sign_unstable


def _kv(items: list[str] | None, what: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for it in items or []:
        if "=" not in it:
            raise SystemExit(f"{what}: expected KEY=VALUE, got {it!r}")
        k, v = it.split("=", 1)
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out



def default_study_dir(plan_path: Path) -> Path:
    """``plan.json`` -> ``plan.study`` next to it."""
    plan_path = Path(plan_path)
    return plan_path.with_name(plan_path.stem + ".study")


def cmd_plan(a: argparse.Namespace) -> int:
    from oracle.agents import get_agent
    from oracle.agents.protocol import clock_kind, make_tasks
    from oracle.executors import close_executor, make_executor
    from oracle.harness import HarnessConfig, StudyContext
    from oracle.study import freeze_plan

    out = Path(a.out).resolve()
    study = Path(a.study).resolve() if a.study else default_study_dir(out)
    gran = "tool_call" if a.design == "tool_call" else a.granularity
    agent_opts = _kv(a.agent_opt, "--agent-opt")
    try:
        agent = get_agent(a.agent, **agent_opts)
    except KeyError as exc:
        raise SystemExit(f"--agent: {exc.args[0]}") from None
    if getattr(agent, "granularity", gran) != gran:
        agent_opts["granularity"] = gran
        agent = get_agent(a.agent, **agent_opts)
    try:
        tasks = make_tasks(agent, a.tasks, a.seed, study / "tasks", **_kv(a.task_opt, "--task-opt"))
    except ValueError as exc:
        raise SystemExit(f"--tasks {a.tasks}: {exc}") from None
    config = HarnessConfig(granularity=gran, branch_cap_s=a.cap,
                           require_obs_determinism=not a.no_determinism,
                           clock=clock_kind(agent))
    ctx = StudyContext(a.agent, agent_opts, {t.task_id: t for t in tasks}, config, study)
    ex = make_executor(a.executor, a.workers)
    try:
        plan = freeze_plan(ctx, tasks, a.design, seed=a.seed, repetitions=a.repetitions,
                           executor=ex, stride=a.stride, include_final=a.include_final)
    finally:
        close_executor(ex)
    plan.save(out)
    print(f"plan {out} (sha256 {plan.hash[:16]}): {len(tasks)} tasks, {len(plan.cells)} cells, "
          f"{plan.n_branches()} branches before third repetitions; study dir {study}")
    return 0


def cmd_run(a: argparse.Namespace) -> int:
    from oracle.executors import close_executor, make_executor
    from oracle.plan import Plan
    from oracle.study import run_study

    plan_path = Path(a.plan).resolve()
    plan = Plan.load(plan_path)
    study = Path(a.study).resolve() if a.study else default_study_dir(plan_path)
    ex = make_executor(a.executor, a.workers, a.address)
    try:
        ls = run_study(plan, study, executor=ex, out=a.out, progress=not a.no_progress)
    finally:
        close_executor(ex)
    n_q = int(ls.recovery["quarantined"].fillna(False).sum())
    print(f"label set: {len(ls.tasks)} tasks, {len(ls.recovery)} branches ({n_q} quarantined), "
          f"{len(ls.labels)} pairs -> {Path(a.out) if a.out else study / 'labelset'}")
    return 0


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
    }


def cmd_audit(a: argparse.Namespace) -> int:
    from oracle.audit import AuditLog

    path = Path(a.path)
    if path.is_dir():
        path = path / "audit.jsonl"
    if not path.exists():
        raise SystemExit(f"{path}: no audit log")
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
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m oracle", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan", help="generate tasks, run nominal runs, freeze a plan")
    p.add_argument("--agent", default="scripted")
    p.add_argument("--tasks", type=int, required=True)
    p.add_argument("--design", choices=DESIGNS, default="pilot")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--study", help="study directory (default: <out stem>.study)")
    p.add_argument("--granularity", choices=["turn", "tool_call"], default="turn")
    p.add_argument("--repetitions", type=int, default=2)
    p.add_argument("--cap", type=float, default=1800.0, help="per-branch cap, seconds")
    p.add_argument("--stride", type=int, default=1)
    p.add_argument("--include-final", action="store_true")
    p.add_argument("--no-determinism", action="store_true",
                   help="do not quarantine on observation divergence (only record it)")
    p.add_argument("--agent-opt", action="append", metavar="KEY=VALUE")
    p.add_argument("--task-opt", action="append", metavar="KEY=VALUE")
    p.add_argument("--executor", choices=["local", "inline", "dask"], default="inline")
    p.add_argument("--workers", type=int, default=2)
    p.set_defaults(fn=cmd_plan)
    r = sub.add_parser("run", help="execute a plan (resumable)")
    r.add_argument("plan")
    r.add_argument("--out", help="label set directory (default: <study>/labelset)")
    r.add_argument("--study")
    r.add_argument("--workers", type=int, default=2)
    r.add_argument("--executor", choices=["local", "inline", "dask"], default="local")
    r.add_argument("--address", help="dask scheduler address")
    r.add_argument("--no-progress", action="store_true")
    r.set_defaults(fn=cmd_run)
    u = sub.add_parser("audit", help="summarise an audit log")
    u.add_argument("path", help="audit.jsonl or a study directory")
    u.add_argument("--json", action="store_true")
    u.set_defaults(fn=cmd_audit)
    a = ap.parse_args(argv)
    return int(a.fn(a))


if __name__ == "__main__":
    sys.exit(main())
