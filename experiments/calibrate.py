"""Calibration report: a simulated workload family beside the published pilot.

    python -m experiments.calibrate [--seeds 0 1 ... 19] [--large-sample 1008] [--path harness|fast]

Two checks of ``swe-pilot`` (by default) against the published figures
(``paper/pilot_tables.json``):

- **the population**: one large simulated sample (``--large-sample`` tasks over all of the
  family's repositories, the paper's design: one early and one late cell per task, 2
  repetitions plus a third for sign-unstable cells) through the simulator's vectorised
  path. Its figures estimate the family's population values, which must lie inside the
  published intervals: a population outside them is biased, whatever small samples show.
- **pilot-sized samples**: one sample per seed of ``--seeds``, each the pilot's shape (the
  family's first ``--repos`` repositories x ``--tasks-per-repo`` tasks: 12 tasks in 3
  repositories), through the **harness** (``oracle.harness.branch.run_study``) with the simulated
  agent on the virtual clock (``--path fast``: the vectorised path, the same cost function,
  seeds and branch order, so the same numbers). The pass rate over the seeds says how
  often a 12-task study of the population lands inside the published intervals.

Each check prints the simulated figure beside the published one: Table 1 rows with
task-bootstrap intervals, Tables 4 and 5, checkpoint creation, restore and size, G.4 noise,
G.5 boundary counts; each with its tolerance and a pass/fail mark.

Core checks (the calibration target): Table 1 first, additional and pooled advantages
inside their published 95 % intervals; Table 5 costs within +-15 %; Table 4 shares within
+-5 points. Extra checks (shown, with the tolerance we chose, not part of the verdict):
conversion, creation/restore/size, noise, boundary counts, verified tasks. The report
gives the large sample's checks in full, one line per pilot-sized sample as it finishes,
then a seed x check pass/fail table with a pass-rate column; it is logged to MLflow (one
run per family; per-seed metrics at step = seed, the large sample's under ``large/``;
report and tables as artifacts).
"""

from __future__ import annotations

import math
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from features.files import write_text_atomic
from labelsets.definitions import ADDITIONAL, FIRST, N_BOOTSTRAP, PAPER_SEED, POOLED, STRATA
from oracle.simulator.workloads import family_names, get_family
from ripplecp_cli import opt, run
from ripplecp_policy.tracking import check_experiment_name, study_run

if TYPE_CHECKING:  # type names only: these load where they are used, so --help stays fast
    import pandas as pd

    from labelsets.tables import LabelSet

FAMILIES = tuple(family_names())


@dataclass(frozen=True)
class Args:
    """Calibration report: a simulated workload family beside the published pilot."""

    seeds: tuple[int, ...] = opt(tuple(range(20)), min=0)
    """pilot-sized samples, one per seed (each: fresh tasks and branch draws); the first
    seed also draws the large sample"""
    families: tuple[str, ...] = opt(("swe-pilot",), choices=FAMILIES)
    """workload families to calibrate (the published figures are the pilot's)"""
    path: Literal["harness", "fast"] = "harness"
    """how pilot-sized samples run: oracle.harness.branch with the simulated agent on the virtual
    clock, or the simulator's vectorised path (same costs)"""
    repos: int = opt(3, min=1)
    """repositories of a pilot-sized sample: the family's first N (the pilot: 3)"""
    tasks_per_repo: int = opt(4, min=1)
    """tasks per repository of a pilot-sized sample (the pilot: 4, i.e. 12 tasks)"""
    large_sample: int = opt(1008, min=0)
    """tasks of the large-sample check, over all the family's repositories (0: skip it)"""
    n_resamples: int = opt(N_BOOTSTRAP, min=100)
    """task-bootstrap replicates for the Table 1 intervals"""
    boot_seed: int = opt(PAPER_SEED, min=0)
    """seed of the task bootstrap"""
    study_dir: Path | None = None
    """where harness studies are written (default: a temporary folder, removed after)"""
    out: Path | None = None
    """optional folder for report.txt, checks.csv and summary.csv"""
    mlflow: bool = True
    """log the report to MLflow"""
    mlruns: str | None = opt(None, metavar="DIR")
    """MLflow store root (default: $RIPPLECP_MLRUNS or ./mlruns)"""
    experiment: str = opt("calibration", check=check_experiment_name)
    """MLflow experiment name"""


def run_harness_study(family: str, seed: int, study_dir: Path, tasks_per_repo: int = 4,
                      n_repos: int | None = 3) -> LabelSet:
    """The pilot design through the harness, with the simulated agent on the virtual clock,
    on the family's first ``n_repos`` repositories (None: all of them)."""
    from oracle.harness.branch import HarnessConfig
    from oracle.harness.plan import pilot_plan
    from oracle.harness.study import run_study
    from oracle.simulator import SimulatedAgent, task_specs

    specs = task_specs(family, n_repos, tasks_per_repo=tasks_per_repo, seed=seed, granularity="turn")
    agent = SimulatedAgent(family)
    n_b = {t.task_id: len(agent.latent(t).positions("turn")) - 1 for t in specs}
    plan = pilot_plan(
        specs, n_b, seed=seed, agent="simulator", agent_options={"family": family},
        config=HarnessConfig(granularity="turn", clock="virtual"), repetitions=2,
        third_repetition=True)
    return run_study(plan, study_dir / f"{family}-seed{seed}")


def pilot_sample(args: Args, family: str, seed: int, study_root: Path) -> LabelSet:
    """One pilot-sized sample of ``family`` at ``seed`` through the chosen path."""
    from oracle.simulator import simulate_label_set

    if args.path == "harness":
        return run_harness_study(family, seed, study_root, args.tasks_per_repo, args.repos)
    return simulate_label_set(family, args.repos, args.tasks_per_repo, design="pilot",
                              repetitions=2, seed=seed)


def large_sample(family: str, n_tasks: int, seed: int) -> LabelSet:
    """At least ``n_tasks`` tasks of the paper's design over all of ``family``'s repositories
    (the fast path: the agent's cost function, vectorised)."""
    from oracle.simulator import simulate_label_set

    n_repos = len(get_family(family).repos)
    return simulate_label_set(family, n_repos, math.ceil(n_tasks / n_repos), design="pilot",
                              repetitions=2, seed=seed)


def _check(rows: list[dict], name: str, sim: float, pub: float, lo: float, hi: float,
           tol: str, core: bool, note: str = "") -> None:
    import numpy as np

    ok = bool(np.isfinite(sim) and lo <= sim <= hi)
    rows.append(dict(check=name, simulated=float(sim), published=float(pub), low=float(lo),
                     high=float(hi), tolerance=tol, core=core, passed=ok, note=note))


def calibration_checks(ls: LabelSet, pilot: dict[str, Any], n_resamples: int, boot_seed: int) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """Every check of one study against the published figures (see module docstring)."""
    import numpy as np
    import pandas as pd

    from ripplecp_policy import stats

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
    tr = pilot["trajectories"]
    pub_share = tr["verified"] / tr["tasks"]
    half = 0.5 / tr["tasks"]  # half a task of the pilot's: a pilot-sized sample must match exactly
    _check(rows, "verified share", n_ver / len(ls.tasks), pub_share, pub_share - half,
           pub_share + half, f"+-half a task of {tr['tasks']}", False, f"{n_ver} of {len(ls.tasks)}")
    return pd.DataFrame(rows), {"table1": t1, "table4": by_step, "noise": ns}


def _step_work(ls: LabelSet) -> pd.DataFrame:
    import pandas as pd

    rows = [(t.task_id, e.step, e.elapsed or 0.0) for t in ls.trajectories.values() for e in t.events]
    df = pd.DataFrame(rows, columns=["task_id", "step", "seconds"]).groupby(["task_id", "step"]).sum()
    out = df.groupby("step")["seconds"].agg(["sum", "mean", "count"])
    return out.rename(columns={"sum": "seconds", "mean": "mean_s", "count": "trajectories"})


def _fmt_checks(df: pd.DataFrame) -> str:
    lines = [f"{'check':42s} {'simulated':>10s} {'published':>10s}  {'accepted range':>20s}  tol{'':16s} ok   note"]
    for r in df.itertuples():
        rng = f"[{r.low:.3g}, {r.high:.3g}]"
        mark = "PASS" if r.passed else "FAIL"
        star = "" if r.core else " (extra)"
        lines.append(f"{r.check + star:42s} {r.simulated:10.3f} {r.published:10.3f}  {rng:>20s}  "
                     f"{r.tolerance:18s} {mark} {r.note}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# the study, straight-line
# ---------------------------------------------------------------------------------------


def check_args(args: Args) -> None:
    """Arguments that can only be checked against the families: one-line errors."""
    for fam in args.families:
        n = len(get_family(fam).repos)
        if args.repos > n:
            raise ValueError(f"argument --repos: {fam} has {n} repositories, got --repos {args.repos}")


def _seed_line(family: str, seed: int, ls: LabelSet, checks: pd.DataFrame, seconds: float) -> str:
    c = checks.set_index("check")
    t1 = "  ".join(f"{s} {c.at[f'T1 {s} advantage (s)', 'simulated']:6.1f}" for s in STRATA + (POOLED,)
                   if f"T1 {s} advantage (s)" in c.index)
    core = checks[checks["core"]]
    return (f"  {family} seed {seed:3d}: {len(ls.tasks)} tasks, {len(ls.labels)} pairs; T1 {t1}; "
            f"core checks {int(core['passed'].sum())}/{len(core)} ({seconds:.1f} s)")


def calibrate_family(args: Args, family: str, pilot: dict[str, Any], study_root: Path,
                     report: list[str]) -> dict[str, Any]:
    """The large sample and the pilot-sized samples of one family; lines go to ``report``
    (and stdout) as each step finishes."""
    import pandas as pd


    def say(*lines: str) -> None:
        for line in lines:
            print(line, flush=True)
            report.append(line)

    out: dict[str, Any] = {"family": family}
    if args.large_sample > 0:
        t0 = time.perf_counter()
        ls = large_sample(family, args.large_sample, args.seeds[0])
        checks, tables = calibration_checks(ls, pilot, args.n_resamples, args.boot_seed)
        core = checks[checks["core"]]
        out["large"] = checks
        out["large_core_ok"] = bool(core["passed"].all())
        t1 = tables["table1"][["tasks", "cells", "pairs", "cp_s", "skip_s", "advantage_s", "low",
                               "high", "protected_work_s", "conversion", "creation_s"]]
        say("", f"=== {family}: large sample, {len(ls.tasks)} tasks in {ls.tasks['repo'].nunique()} "
            f"repositories, {len(ls.labels)} pairs (fast path, seed {args.seeds[0]}; "
            f"{time.perf_counter() - t0:.1f} s) ===",
            "Table 1 (simulated population, verified tasks):", t1.round(2).to_string(),
            "Table 4 (simulated nominal work by step):", tables["table4"].round(1).to_string(),
            "G.4 noise (simulated):", tables["noise"].round(2).to_string(),
            "Checks (the population figures against the published intervals):", _fmt_checks(checks),
            f"Population inside the published intervals: {'yes' if out['large_core_ok'] else 'NO'} "
            f"({int(core['passed'].sum())}/{len(core)} core checks)")
    say("", f"=== {family}: pilot-sized samples ({args.repos} repositories x {args.tasks_per_repo} "
        f"tasks, path {args.path}, {len(args.seeds)} seeds) ===")
    per_seed: dict[int, pd.DataFrame] = {}
    for seed in args.seeds:
        t0 = time.perf_counter()
        ls = pilot_sample(args, family, seed, study_root)
        per_seed[seed] = calibration_checks(ls, pilot, args.n_resamples, args.boot_seed)[0]
        say(_seed_line(family, seed, ls, per_seed[seed], time.perf_counter() - t0))
    grid = pd.DataFrame({s: c.set_index("check")["passed"] for s, c in per_seed.items()})
    core = per_seed[args.seeds[0]].set_index("check")["core"]
    summary = pd.DataFrame({"core": core, **{f"seed {s}": grid[s].map({True: "pass", False: "FAIL"})
                                               for s in per_seed}})
    summary["pass rate"] = grid.mean(axis=1).round(2)
    core_ok = grid[core].all(axis=0)
    all_ok = grid.all(axis=0)
    say("", f"=== {family}: seed x check ===", summary.to_string(), "",
        f"{family}: pilot-sized samples passing every core check: "
        f"{int(core_ok.sum())}/{len(core_ok)} ({core_ok.mean():.0%}); every check: "
        f"{int(all_ok.sum())}/{len(all_ok)} ({all_ok.mean():.0%}); "
        f"core checks passed: {grid[core].to_numpy().mean():.0%} of seed x check cells.")
    out.update(per_seed=per_seed, summary=summary, core_ok=core_ok,
               core_pass_rate=float(core_ok.mean()), all_pass_rate=float(all_ok.mean()),
               check_pass_rate=grid.mean(axis=1).to_dict())
    return out


def study(args: Args) -> int:
    """Calibrate every family of ``args``; write and log the report."""
    import pandas as pd

    from ripplecp_policy import stats

    check_args(args)
    pilot = stats.load_pilot_tables()
    own_dir = args.study_dir is None
    study_root = Path(tempfile.mkdtemp(prefix="calibrate-")) if own_dir else Path(args.study_dir)
    report: list[str] = [f"Calibration against the RippleCP pilot (pilot-sized samples: path "
                         f"{args.path}; {args.tasks_per_repo} tasks per repository; seeds "
                         f"{list(args.seeds)}; large sample: {args.large_sample} tasks; bootstrap "
                         f"{args.n_resamples} task resamples, seed {args.boot_seed})"]
    print(report[0], flush=True)
    try:
        results = [calibrate_family(args, fam, pilot, study_root, report) for fam in args.families]
    finally:
        if own_dir:
            shutil.rmtree(study_root, ignore_errors=True)
    text = "\n".join(report)
    out = args.out
    tmp_out = None
    if out is None and args.mlflow:
        tmp_out = Path(tempfile.mkdtemp(prefix="calibrate-out-"))
        out = tmp_out
    try:
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            write_text_atomic(out / "report.txt", text)
            allc = pd.concat([c.assign(family=r["family"], sample=f"seed {s}")
                              for r in results for s, c in r["per_seed"].items()]
                             + [r["large"].assign(family=r["family"], sample="large")
                                for r in results if "large" in r], ignore_index=True)
            write_text_atomic(out / "checks.csv", allc.to_csv(index=False))
            summ = pd.concat([r["summary"].assign(family=r["family"]) for r in results])
            write_text_atomic(out / "summary.csv", summ.to_csv())
        if args.mlflow:
            _log_mlflow(args, results, out)
    finally:
        if tmp_out is not None:
            shutil.rmtree(tmp_out, ignore_errors=True)
    return 0


def _log_mlflow(args: Args, results: list[dict[str, Any]], out: Path | None) -> None:
    """One study run per family: the pass rates, the large sample's figures (``large/``), each
    check's simulated figure per pilot-sized sample as its history (step = seed), the report
    and tables as artifacts."""
    for r in results:
        fam = r["family"]
        with study_run(args.experiment, args.mlruns, name=f"calibrate-{fam}-{args.path}",
                       tags={"ripplecp.study": "calibrate", "ripplecp.families": fam, "family": fam,
                             "path": args.path},
                       params={k: str(v)[:250] for k, v in asdict(args).items() if v is not None}) as run:
            metrics = {"core_pass_rate": r["core_pass_rate"], "all_pass_rate": r["all_pass_rate"]}
            if "large" in r:
                metrics["large_core_pass"] = float(r["large_core_ok"])
                metrics.update({f"large/{_metric_name(c.check)}": c.simulated for c in r["large"].itertuples()})
            history: dict[str, dict[int, float]] = {"seed_core_pass": {}}
            for s, c in r["per_seed"].items():
                for x in c.itertuples():
                    history.setdefault(_metric_name(x.check), {})[int(s)] = x.simulated
                history["seed_core_pass"][int(s)] = float(r["core_ok"][s])
            run.log(metrics, history=history)
            if out is not None:
                run.log_artifact(out)


def main(argv: list[str] | None = None) -> int:
    return run(study, Args, argv, prog="python -m experiments.calibrate")


def _metric_name(check: str) -> str:
    keep = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in check)
    return "_".join(p for p in keep.split("_") if p)


if __name__ == "__main__":
    sys.exit(main())
