"""Calibration report: the simulated ``swe-pilot`` workload beside the published pilot.

    python -m experiments.calibrate [--seeds 0 1 2 3 4] [--mlruns PATH] [--path harness|fast]

For every seed it runs the paper's design (12 tasks in 3 repositories, one early and one
late cell per task, 2 repetitions plus a third for sign-unstable cells) through the
**harness** (``oracle.harness.run_study``) with the simulated agent on the virtual clock
(``--path fast`` uses the simulator's vectorised path instead: same model, other draws),
then prints the simulated figures beside the published ones (``paper/pilot_tables.json``):
Table 1 rows with task-bootstrap intervals, Tables 4 and 5, checkpoint creation, restore
and size, G.4 noise, G.5 boundary counts; each with its tolerance and a pass/fail mark.

Core checks (the calibration target): Table 1 first, additional and pooled advantages
inside their published 95 % intervals; Table 5 costs within +-15 %; Table 4 shares within
+-5 points. Extra checks (shown, with the tolerance we chose, not part of the verdict):
conversion, creation/restore/size, noise, boundary counts, verified tasks. The report
over several seeds ends with a seed x check pass/fail table and a pass-rate column, and is
logged to MLflow (one run; per-seed metrics at step = seed; report and tables as artifacts).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from oracle.labels import ADDITIONAL, FIRST, POOLED, STRATA
from oracle.simulator import SimulatedAgent, simulate_label_set, task_specs
from oracle.tables import LabelSet
from ripplecp_policy import stats
from ripplecp_policy.tracking import ensure_experiment, tracking_uri


@dataclass
class Args:
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4])
    """study seeds (each: a fresh set of 12 simulated tasks and branch draws)"""
    family: str = "swe-pilot"
    """workload family to calibrate (the published figures are the pilot's)"""
    path: str = "harness"
    """harness (oracle.harness + SimulatedAgent, virtual clock) or fast (vectorised path)"""
    tasks_per_repo: int = 4
    """tasks per repository (the paper's design: 4, i.e. 12 tasks; smaller for smoke runs)"""
    n_resamples: int = stats.N_BOOTSTRAP
    """task-bootstrap replicates for the Table 1 intervals"""
    boot_seed: int = stats.PAPER_SEED
    """seed of the task bootstrap"""
    study_dir: str | None = None
    """where harness studies are written (default: a temporary folder, removed after)"""
    mlruns: str | None = None
    """mlruns folder (SQLite store + artifacts); default $RIPPLECP_MLRUNS or ./mlruns"""
    experiment: str = "calibration"
    """MLflow experiment name"""
    out: str | None = None
    """optional folder for report.txt and checks.csv"""
    no_mlflow: bool = False
    """skip MLflow logging"""


def parse_args(argv: list[str] | None = None) -> Args:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for f in fields(Args):
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool", bool):
            p.add_argument(flag, dest=f.name, action="store_true")
        elif f.name == "seeds":
            p.add_argument(flag, dest=f.name, type=int, nargs="+", default=[0, 1, 2, 3, 4])
        else:
            typ = {"int": int, "float": float}.get(str(f.type), str)
            p.add_argument(flag, dest=f.name, type=typ, default=f.default)
    args = Args(**vars(p.parse_args(argv)))
    if args.path not in ("harness", "fast"):
        p.error(f"--path must be harness or fast, got {args.path!r}")
    if not args.seeds:
        p.error("--seeds needs at least one seed")
    if args.tasks_per_repo < 1:
        p.error(f"--tasks-per-repo must be >= 1, got {args.tasks_per_repo}")
    return args


def run_harness_study(family: str, seed: int, study_dir: Path, tasks_per_repo: int = 4) -> LabelSet:
    """The pilot design through the harness, with the simulated agent on the virtual clock."""
    from oracle.harness import HarnessConfig
    from oracle.plan import pilot_plan
    from oracle.study import run_study

    specs = task_specs(family, tasks_per_repo=tasks_per_repo, seed=seed, granularity="turn")
    agent = SimulatedAgent(family)
    n_b = {t.task_id: len(agent.latent(t).positions("turn")) - 1 for t in specs}
    plan = pilot_plan(
        specs, n_b, seed=seed, agent="simulator", agent_options={"family": family},
        config=HarnessConfig(granularity="turn", clock="virtual"), repetitions=2,
        third_repetition=True)
    return run_study(plan, study_dir / f"seed{seed}")


def _check(rows: list[dict], name: str, sim: float, pub: float, lo: float, hi: float,
           tol: str, core: bool, note: str = "") -> None:
    ok = bool(np.isfinite(sim) and lo <= sim <= hi)
    rows.append(dict(check=name, simulated=float(sim), published=float(pub), low=float(lo),
                     high=float(hi), tolerance=tol, core=core, passed=ok, note=note))


def calibration_checks(ls: LabelSet, pilot: dict[str, Any], n_resamples: int, boot_seed: int) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """Every check of one study against the published figures (see module docstring)."""
    rows: list[dict] = []
    labels, rec, cps = ls.labels, ls.recovery, ls.checkpoints
    ok_rec = rec[~rec["quarantined"].fillna(False).astype(bool)]
    t1 = stats.marginal_value(labels, verified_only=True, n_resamples=n_resamples, seed=boot_seed)
    pub1 = pilot["table1_marginal_value_verified_10_tasks"]
    for stratum, key in ((FIRST, "first_checkpoint_vs_none"), (ADDITIONAL, "additional_one_step_later"),
                         (POOLED, "pooled")):
        p = pub1[key]
        sim = float(t1.at[stratum, "advantage_s"])
        _check(rows, f"T1 {stratum} advantage (s)", sim, p["advantage_s"], *p["ci95"],
               "inside published 95% CI", True,
               f"sim CI [{t1.at[stratum, 'low']:.1f}, {t1.at[stratum, 'high']:.1f}]")
        if "conversion" in p:
            _check(rows, f"T1 {stratum} conversion", float(t1.at[stratum, "conversion"]),
                   p["conversion"], p["conversion"] - 0.15, p["conversion"] + 0.15, "+-0.15", False)
    for row in pilot["table5_recovery_by_restore_depth"]:
        depth = {"pristine": 0, "after_step_1": 1, "after_step_2": 2, "after_step_3": 3}[row["restore"]]
        sub = ok_rec[ok_rec["restore_point"] == depth]
        sim = float(sub["cost_s"].mean()) if len(sub) else float("nan")
        _check(rows, f"T5 {row['restore']} cost (s)", sim, row["cost_s"], row["cost_s"] * 0.85,
               row["cost_s"] * 1.15, "+-15%", True, f"{len(sub)} branches (pilot {row['branches']})")
    by_step = _step_work(ls)
    total = by_step["seconds"].sum()
    for row in pilot["table4_nominal_work_by_step"]:
        s = row["step"]
        share = float(by_step.loc[s, "seconds"] / total) if s in by_step.index else 0.0
        _check(rows, f"T4 step {s} share", share, row["share"], row["share"] - 0.05,
               row["share"] + 0.05, "+-5 points", True)
    cr, rl, sz = pilot["checkpoint_creation_s"], pilot["restore_latency_s"], pilot["checkpoint_size_mb"]
    _check(rows, "creation mean (s)", float(labels["creation_s"].mean()), cr["mean"], cr["mean"] * 0.85,
           cr["mean"] * 1.15, "+-15%", False)
    _check(rows, "restore mean (s)", float(ok_rec["restore_latency_s"].mean()), rl["mean"],
           rl["mean"] * 0.8, rl["mean"] * 1.2, "+-20%", False)
    _check(rows, "size mean (MB)", float(cps["size_bytes"].mean() / 1e6), sz["mean"], sz["mean"] * 0.85,
           sz["mean"] * 1.15, "+-15%", False)
    ns = stats.noise_to_signal(labels)
    for stratum in STRATA:
        pub = pilot["noise"][stratum]["sd"]
        _check(rows, f"G.4 {stratum} within-cell sd (s)", float(ns.at[stratum, "within_cell_sd"]), pub,
               pub * 0.6, pub * 1.4, "+-40%", False,
               f"noise/signal {ns.at[stratum, 'noise_to_signal']:.2f} (pilot {pilot['noise'][stratum]['noise_to_signal']})")
    n_tc = np.mean([sum(e.safe_boundary for e in t.events) for t in ls.trajectories.values()])
    n_first = np.mean([sum(e.safe_boundary and e.step == 1 for e in t.events) for t in ls.trajectories.values()])
    fc = pilot["finer_cut"]
    _check(rows, "G.5 tool-call boundaries / task", float(n_tc), fc["items_per_task"],
           fc["items_per_task"] * 0.85, fc["items_per_task"] * 1.15, "+-15%", False)
    _check(rows, "G.5 boundaries in first turn", float(n_first), fc["items_in_first_turn_mean"],
           fc["items_in_first_turn_mean"] * 0.85, fc["items_in_first_turn_mean"] * 1.15, "+-15%", False)
    n_ver = int(ls.tasks["verified"].astype(bool).sum())
    _check(rows, "verified tasks", n_ver, pilot["trajectories"]["verified"], 10, 10, "exact", False,
           f"of {len(ls.tasks)}")
    return pd.DataFrame(rows), {"table1": t1, "table4": by_step, "noise": ns}


def _step_work(ls: LabelSet) -> pd.DataFrame:
    rows = [(t.task_id, e.step, e.elapsed or 0.0) for t in ls.trajectories.values() for e in t.events]
    df = pd.DataFrame(rows, columns=["task_id", "step", "seconds"]).groupby(["task_id", "step"]).sum()
    out = df.groupby("step")["seconds"].agg(["sum", "mean", "count"])
    return out.rename(columns={"sum": "seconds", "mean": "mean_s", "count": "trajectories"})


def _fmt_checks(df: pd.DataFrame) -> str:
    lines = [f"{'check':38s} {'simulated':>10s} {'published':>10s}  {'accepted range':>20s}  tol{'':16s} ok   note"]
    for r in df.itertuples():
        rng = f"[{r.low:.3g}, {r.high:.3g}]"
        mark = "PASS" if r.passed else "FAIL"
        star = "" if r.core else " (extra)"
        lines.append(f"{r.check + star:38s} {r.simulated:10.3f} {r.published:10.3f}  {rng:>20s}  "
                     f"{r.tolerance:18s} {mark} {r.note}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# the study, straight-line
# ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    pilot = stats.load_pilot_tables()
    own_dir = args.study_dir is None
    study_root = Path(tempfile.mkdtemp(prefix="calibrate-")) if own_dir else Path(args.study_dir)
    per_seed: dict[int, pd.DataFrame] = {}
    report: list[str] = [f"Calibration of {args.family} against the RippleCP pilot "
                         f"(path: {args.path}; {args.tasks_per_repo} tasks per repository; "
                         f"seeds {args.seeds}; bootstrap {args.n_resamples} "
                         f"task resamples, seed {args.boot_seed})"]
    timings = {}
    try:
        for seed in args.seeds:
            t0 = time.perf_counter()
            if args.path == "harness":
                ls = run_harness_study(args.family, seed, study_root, args.tasks_per_repo)
            else:
                ls = simulate_label_set(args.family, tasks_per_repo=args.tasks_per_repo,
                                        design="pilot", repetitions=2, seed=seed)
            checks, tables = calibration_checks(ls, pilot, args.n_resamples, args.boot_seed)
            timings[seed] = time.perf_counter() - t0
            per_seed[seed] = checks
            t1 = tables["table1"][["tasks", "cells", "pairs", "cp_s", "skip_s", "advantage_s", "low",
                                   "high", "protected_work_s", "conversion", "creation_s"]]
            report += [
                "", f"=== seed {seed}: {len(ls.tasks)} tasks, {len(ls.recovery)} branches, "
                f"{len(ls.labels)} pairs, {int(ls.recovery['quarantined'].fillna(False).sum())} "
                f"quarantined ({timings[seed]:.1f} s) ===",
                "Table 1 (simulated, verified tasks):", t1.round(2).to_string(),
                "Table 4 (simulated nominal work by step):", tables["table4"].round(1).to_string(),
                "G.4 noise (simulated):", tables["noise"].round(2).to_string(),
                "Checks:", _fmt_checks(checks),
            ]
    finally:
        if own_dir:
            shutil.rmtree(study_root, ignore_errors=True)

    grid = pd.DataFrame({s: c.set_index("check")["passed"] for s, c in per_seed.items()})
    core = per_seed[args.seeds[0]].set_index("check")["core"]
    summary = pd.DataFrame({"core": core, **{f"seed {s}": grid[s].map({True: "pass", False: "FAIL"})
                                               for s in per_seed}})
    summary["pass rate"] = grid.mean(axis=1).round(2)
    core_ok = grid[core].all(axis=0)
    all_ok = grid.all(axis=0)
    report += [
        "", "=== seed x check ===", summary.to_string(), "",
        "Seeds passing every core check: "
        f"{int(core_ok.sum())}/{len(core_ok)} ({core_ok.mean():.0%}); every check: "
        f"{int(all_ok.sum())}/{len(all_ok)} ({all_ok.mean():.0%}); "
        f"core checks passed: {grid[core].to_numpy().mean():.0%} of seed x check cells.",
    ]
    text = "\n".join(report)
    print(text)
    result = {"core_pass_rate": float(core_ok.mean()), "all_pass_rate": float(all_ok.mean()),
              "check_pass_rate": grid.mean(axis=1).to_dict(), "per_seed": per_seed, "text": text}

    out = Path(args.out) if args.out else None
    tmp_out = None
    if out is None and not args.no_mlflow:
        tmp_out = Path(tempfile.mkdtemp(prefix="calibrate-out-"))
        out = tmp_out
    try:
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            _atomic_text(out / "report.txt", text)
            allc = pd.concat([c.assign(seed=s) for s, c in per_seed.items()], ignore_index=True)
            _atomic_text(out / "checks.csv", allc.to_csv(index=False))
            _atomic_text(out / "summary.csv", summary.to_csv())
        if not args.no_mlflow:
            import mlflow

            exp_id = ensure_experiment(args.experiment, args.mlruns)
            mlflow.set_tracking_uri(tracking_uri(args.mlruns))
            with mlflow.start_run(experiment_id=exp_id, run_name=f"calibrate-{args.family}-{args.path}") as run:
                mlflow.log_params({k: str(v)[:250] for k, v in asdict(args).items() if v is not None})
                mlflow.log_metrics({"core_pass_rate": result["core_pass_rate"],
                                    "all_pass_rate": result["all_pass_rate"]})
                for s, c in per_seed.items():
                    mlflow.log_metrics({_metric_name(r.check): r.simulated for r in c.itertuples()
                                        if np.isfinite(r.simulated)}, step=int(s))
                    mlflow.log_metric("seed_core_pass", float(core_ok[s]), step=int(s))
                mlflow.set_tags({"family": args.family, "path": args.path})
                mlflow.log_artifacts(str(out))
                result["run_id"] = run.info.run_id
    finally:
        if tmp_out is not None:
            shutil.rmtree(tmp_out, ignore_errors=True)
    return result


def _metric_name(check: str) -> str:
    keep = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in check)
    return "_".join(p for p in keep.split("_") if p)


def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


if __name__ == "__main__":
    main(sys.argv[1:])
