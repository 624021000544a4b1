"""The RippleCP paper's pilot analysis (Section 4, Appendix G) for any label set.

    python -m experiments.pilot_analysis --labels PATH [--out DIR] [--mlruns DIR]
    python -m experiments.pilot_analysis --pilot       # the paper's Table 7 per-task figures

``PATH`` is a label-set directory or a file in one, read through the one verified loader
(:meth:`labelsets.tables.LabelSet.load`); a full-design set (branches, no pairs) is analysed on
the pilot's cells derived from its recovery tables (:func:`labelsets.tables.labels_from_table`).
Prints Table 1 (marginal value by stratum), Table 2 (within-stratum Spearman of cheap
proxies), the G.1 verified-only vs all-task sensitivity, G.4 noise, sign-unstable cells,
Table 6 and a label-budget plan; writes Figure 2 (marginal value by stratum, dashed line at
the measured creation cost) and Figure 4 (per-task advantage by repository and stratum,
hollow markers for unverified tasks) as PNG; logs tables and figures to MLflow.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from features.files import atomic_path, write_text_atomic
from labelsets.definitions import (
    ADDITIONAL,
    AGENT_MINUTES_PER_LABEL,
    FIRST,
    N_BOOTSTRAP,
    N_PERMUTATIONS,
    PAPER_SEED,
    POOLED,
    STRATA,
)
from ripplecp_cli import (
    CommandLineError,
    choice_error,
    existing_file,
    existing_path,
    opt,
    positive,
    run,
)
from ripplecp_policy.tracking import check_experiment_name

if TYPE_CHECKING:  # type names only: these load where they are used, so --help stays fast
    import pandas as pd

PROG = "python -m experiments.pilot_analysis"


@dataclass(frozen=True)
class Args:
    """The RippleCP paper's pilot analysis (Section 4, Appendix G) for any label set, or for
    the paper's published Table 7 figures (--pilot)."""

    labels: str | None = opt(None, check=existing_path, metavar="PATH")
    """label-set directory (or a file in one); its hash is verified"""
    pilot: bool = False
    """analyse the paper's published Table 7 per-task figures instead of a label set"""
    out: str = opt("out/pilot_analysis", metavar="PATH")
    """folder for the PNG figures and CSV/JSON tables"""
    features: str | None = opt(None, check=existing_file, metavar="PATH")
    """optional parquet of per-cell proxies (keyed by cell_id, or task_id + candidate)"""
    proxies: tuple[str, ...] = opt((), metavar="COLUMN")
    """proxy columns for Table 2 (default: every numeric proxy found)"""
    seed: int = opt(PAPER_SEED, min=0)
    """seed of the task bootstrap and the permutation tests"""
    n_resamples: int = opt(N_BOOTSTRAP, min=1)
    """task-bootstrap replicates"""
    n_permutations: int = opt(N_PERMUTATIONS, min=1)
    """permutation-test relabelings"""
    method: str = opt("percentile", choices=("percentile", "bca"))
    """bootstrap interval method"""
    minutes_per_label: float = opt(AGENT_MINUTES_PER_LABEL, check=positive)
    """agent minutes one label costs, for the budget plan"""
    mlruns: str | None = opt(None, metavar="DIR")
    """mlruns folder (SQLite store + artifacts); default $RIPPLECP_MLRUNS or ./mlruns"""
    experiment: str = opt("pilot_analysis", check=check_experiment_name)
    """MLflow experiment name"""
    mlflow: bool = True
    """log the tables and figures to MLflow"""

    def __post_init__(self) -> None:
        if (self.labels is None) == (not self.pilot):
            raise ValueError("give exactly one of --labels PATH or --pilot")
        if self.pilot and (self.features or self.proxies):
            raise ValueError("--features and --proxies need --labels (Table 7 has no cells)")


def _fmt(df: pd.DataFrame) -> str:
    return df.to_string(float_format=lambda v: f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}")


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments.pilot_analysis``: check every argument, then analyse."""
    def command(args: Args) -> int:
        analyse(args)
        return 0

    return run(command, Args, argv, prog=PROG)


def analyse(args: Args) -> dict[str, Any]:
    """The analysis (the module docstring) for checked arguments; returns the output folder,
    the MLflow run id, the summary and the tables."""
    import matplotlib

    matplotlib.use("Agg")  # before pyplot: figures are files, never a window
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd

    from ripplecp_policy import stats
    from ripplecp_policy.tracking import study_run, tracking_uri

    out = Path(args.out)
    boot = dict(n_resamples=args.n_resamples, seed=args.seed, method=args.method)
    published = stats.load_pilot_tables()
    tables: dict[str, pd.DataFrame] = {}
    summary: dict[str, Any] = {"seed": args.seed, "n_resamples": args.n_resamples,
                               "n_permutations": args.n_permutations, "method": args.method}
    params: dict[str, Any] = {k: v for k, v in asdict(args).items() if v is not None and v != ()}

    # ---- load: a label set, or the paper's Table 7 --------------------------------------
    if args.pilot:
        source = "paper Table 7 (arXiv:2610.09088v1)"
        per_task = stats.pilot_task_frame()
        per_task["stratum"] = POOLED  # Table 7 averages each task's two cells
        labels = None
    else:
        from labelsets.tables import LabelSet, LabelSetError, labels_from_table

        path = Path(args.labels)
        lset = path.parent if path.is_file() else path  # a file of a set names its set
        try:
            data = LabelSet.load(lset)  # the one verified loader: hash, version, schemas
            labels, source = data.labels, str(lset)
            if not len(labels):  # a full-design set holds branches, not pairs: the pilot cells
                labels = labels_from_table(data.tasks, data.checkpoints, data.recovery)
                if not len(labels):
                    raise LabelSetError(f"{lset}: no CP/SKIP pairs, and no recovery-table cells "
                                        "to derive the pilot's cells from: nothing to analyse")
                source += " (pilot cells derived from the recovery tables)"
        except LabelSetError as exc:
            raise CommandLineError(f"argument --labels: {exc}") from None
        params["label_set_hash"] = data.content_hash()
    print(f"# RippleCP pilot analysis: {source}")
    print(f"# task bootstrap: {args.n_resamples} replicates, seed {args.seed}, {args.method}; "
          f"permutations: {args.n_permutations}\n")

    if labels is not None:
        # ---- the per-cell table with its proxies (--features, --proxies checked here) ---
        cells = stats.cell_table(labels)
        cp = data.checkpoints[["task_id", "boundary", "size_bytes"]]
        cp = cp.rename(columns={"boundary": "candidate", "size_bytes": "checkpoint_bytes"})
        cells = cells.merge(cp, on=["task_id", "candidate"], how="left")
        if args.features:
            try:
                feats = pd.read_parquet(args.features)
            except (ValueError, OSError) as exc:
                raise CommandLineError(f"argument --features: {args.features}: {exc}") from None
            keys = ["cell_id"] if "cell_id" in feats else ["task_id", "candidate"]
            missing = [k for k in keys if k not in feats.columns]
            if missing:
                raise CommandLineError(f"argument --features: {args.features}: needs cell_id or "
                                       f"task_id + candidate, missing {missing}")
            new = [c for c in feats.columns if c not in cells.columns or c in keys]
            cells = cells.merge(feats[new], on=keys, how="left")
        core = {"candidate", "fallback", "failure", "n_reps", "j_cp", "j_skip", "advantage",
                "advantage_sd", "creation_s", "tokens_cp", "tokens_skip", "tool_calls_cp",
                "tool_calls_skip", "repetition"}
        if args.proxies:
            proxies = list(args.proxies)
            for c in proxies:
                if c not in cells.columns:
                    raise choice_error(c, sorted(cells.columns), "--proxies")
        else:
            proxies = [c for c in cells.columns if c not in core
                       and pd.api.types.is_numeric_dtype(cells[c]) and not pd.api.types.is_bool_dtype(cells[c])]

        # ---- Table 1: marginal value by stratum (verified-endpoint tasks) --------------
        q = stats.quarantine_summary(labels)
        summary["quarantine"] = q
        print(f"pairs: {q['pairs']}, used: {q['used']}, quarantined (excluded, reported): "
              f"{q['quarantined']} {q['reasons'] or ''}\n")
        t1 = stats.marginal_value(labels, verified_only=True, **boot)
        tables["table1_marginal_value"] = t1
        print("Table 1: marginal value of a checkpoint by stratum (verified-endpoint tasks)")
        print(_fmt(t1[["tasks", "cells", "pairs", "cp_s", "skip_s", "advantage_s", "low", "high",
                       "protected_work_s", "conversion"]]) + "\n")

        # ---- G.1: verified-only vs all tasks -----------------------------------------
        g1 = stats.verified_sensitivity(labels, **boot)
        tables["g1_verified_sensitivity"] = g1
        print("G.1: pooled advantage, verified-endpoint tasks vs all tasks (sensitivity)")
        print(_fmt(g1[["tasks", "cp_s", "skip_s", "advantage_s", "low", "high"]]) + "\n")

        g11 = stats.secondary_costs(labels)
        tables["g11_secondary_costs"] = g11
        print("G.11: re-executed tokens and tool calls saved by CP (verified tasks; not folded "
              "into J)")
        print(_fmt(g11) + "\n")

        # ---- Table 2: within-stratum Spearman of cheap proxies -----------------------
        t2 = stats.spearman_table(cells, proxies, n_permutations=args.n_permutations, seed=args.seed)
        tables["table2_spearman"] = t2
        print("Table 2: Spearman rho of proxy vs advantage, within stratum (verified cells; "
              "never pooled)")
        print((_fmt(t2) if len(t2) else "(no proxy columns)") + "\n")

        # ---- G.4 noise, sign-unstable cells, Table 6, label budget -------------------
        g4 = stats.noise_to_signal(labels)
        tables["g4_noise"] = g4
        print("G.4: within-cell noise vs mean effect (all tasks)")
        print(_fmt(g4) + "\n")
        unstable = stats.sign_unstable_cells(labels)
        summary["sign_unstable_cells"] = unstable
        print(f"sign-unstable cells (first two repetitions differ in sign): {len(unstable)} "
              f"{unstable[:10]}{' ...' if len(unstable) > 10 else ''}\n")
        per_task6, t6 = stats.retrospective_single_checkpoint(labels)
        tables["table6_single_checkpoint"] = t6
        print("Table 6: retrospective single-checkpoint placement (lower is better)")
        print((_fmt(t6) if len(per_task6) else "(no task has the (1,0,2) and (2,1,3) cells)") + "\n")
        noise = g4.loc[list(STRATA)].rename(columns={"within_cell_sd": "sd"})
        noise = noise[noise["sd"].notna() & (noise["mean_effect"] > 0)]
        creation = float(stats.valid_pairs(labels)["creation_s"].mean())
        fig2_rows = t1.loc[list(STRATA), ["advantage_s", "low", "high"]]
        task_level = (cells.groupby(["task_id", "stratum"])
                      .agg(repo=("repo", "first"), verified=("verified", "first"),
                           advantage=("advantage", "mean")).reset_index())
        for s in STRATA:
            if s in t1.index and np.isfinite(t1.at[s, "advantage_s"]):
                summary[f"advantage_{s}_s"] = float(t1.at[s, "advantage_s"])
        summary["advantage_pooled_verified_s"] = float(t1.at[POOLED, "advantage_s"])
        summary["advantage_pooled_all_s"] = float(g1.at["all_tasks", "advantage_s"])
    else:
        # ---- the paper's per-task figures: what Table 7 supports ---------------------
        ours = stats.pilot_pooled_intervals(**boot)
        pub1 = published["table1_marginal_value_verified_10_tasks"][POOLED]
        pub_all = published["all_12_tasks_sensitivity"]
        g1 = pd.DataFrame([
            {"stratum": "verified_only", "tasks": ours["verified_only"].n_tasks,
             "advantage_s": ours["verified_only"].estimate, "low": ours["verified_only"].low,
             "high": ours["verified_only"].high, "paper_advantage_s": pub1["advantage_s"],
             "paper_low": pub1["ci95"][0], "paper_high": pub1["ci95"][1]},
            {"stratum": "all_tasks", "tasks": ours["all_tasks"].n_tasks,
             "advantage_s": ours["all_tasks"].estimate, "low": ours["all_tasks"].low,
             "high": ours["all_tasks"].high, "paper_advantage_s": pub_all["advantage_s"],
             "paper_low": pub_all["ci95"][0], "paper_high": pub_all["ci95"][1]},
        ]).set_index("stratum")
        tables["g1_verified_sensitivity"] = g1
        print("G.1 / Table 1 pooled row, recomputed from Table 7's per-task means "
              "(task bootstrap) beside the published figures")
        print(_fmt(g1) + "\n")
        t1 = pd.DataFrame([
            {"stratum": s, "tasks": r["tasks"], "cp_s": r["cp_s"], "skip_s": r["skip_s"],
             "advantage_s": r["advantage_s"], "low": r["ci95"][0], "high": r["ci95"][1],
             "protected_work_s": r.get("protected_work_s", np.nan), "conversion": r.get("conversion", np.nan)}
            for s, r in zip((*STRATA, POOLED),
                            published["table1_marginal_value_verified_10_tasks"].values(), strict=True)
        ]).set_index("stratum")
        tables["table1_marginal_value_published"] = t1
        print("Table 1 (published; Table 7 has no per-stratum split to recompute it from)")
        print(_fmt(t1) + "\n")
        t2 = pd.DataFrame({k: v for k, v in published["table2_spearman_within_stratum"].items()
                           if isinstance(v, dict)}).T
        tables["table2_spearman_published"] = t2
        print("Table 2 (published; within stratum, verified cells)")
        print(_fmt(t2) + "\n")
        noise = stats.pilot_noise(published)
        creation = float(published["checkpoint_creation_s"]["charged_mean_in_table1"])
        fig2_rows = t1.loc[list(STRATA), ["advantage_s", "low", "high"]]
        task_level = per_task
        summary["advantage_pooled_verified_s"] = ours["verified_only"].estimate
        summary["advantage_pooled_all_s"] = ours["all_tasks"].estimate
        summary["intervals"] = {k: v.as_dict() for k, v in ours.items()}

    # ---- label budget (G.4): repetitions and tasks a study needs ------------------------
    if len(noise):
        plan = stats.plan_label_budget(noise, minutes_per_label=args.minutes_per_label)
        tables["label_budget_plan"] = plan
        print(f"Label budget (resolve each stratum's mean effect per cell, alpha 0.05, power 0.8, "
              f"{args.minutes_per_label} agent-min per label)")
        print(_fmt(plan[["sd", "effect", "noise_to_signal", "reps_exact", "reps_per_cell", "tasks",
                         "labels", "agent_hours"]]))
        if set(STRATA) <= set(plan.index):
            ratio = plan.at[ADDITIONAL, "reps_exact"] / plan.at[FIRST, "reps_exact"]
            summary["reps_ratio_additional_over_first"] = float(ratio)
            print(f"additional/first repetitions needed per cell: {ratio:.1f}x "
                  f"(10^{np.log10(ratio):.2f})\n")

    # ---- Figure 2: marginal value by stratum ------------------------------------------
    out.mkdir(parents=True, exist_ok=True)  # once the inputs are known good
    fig, ax = plt.subplots(figsize=(5.0, 3.6), dpi=120)
    xs = np.arange(len(fig2_rows))
    est = fig2_rows["advantage_s"].to_numpy(float)
    err = np.vstack([est - fig2_rows["low"].to_numpy(float), fig2_rows["high"].to_numpy(float) - est])
    ax.bar(xs, est, color=["#3b75af", "#e1812c"][: len(xs)], width=0.55, alpha=0.85)
    ax.errorbar(xs, est, yerr=np.where(np.isfinite(err), err, 0), fmt="none", ecolor="black", capsize=6, lw=1.2)
    ax.axhline(creation, ls="--", color="gray", lw=1.2, label=f"measured creation cost ({creation:.2f} s)")
    ax.axhline(0, color="black", lw=0.6)
    ax.set_xticks(xs, ["First checkpoint\nvs. none", "One additional\ncheckpoint"][: len(xs)])
    ax.set_ylabel("Marginal value (s, 95% task-bootstrap CI)")
    ax.set_title("Figure 2: marginal value of a checkpoint" + (" (published)" if args.pilot else ""), fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig2 = out / "figure2_marginal_value.png"
    with atomic_path(fig2) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)

    # ---- Figure 4: per-task advantage by repository and stratum ---------------------
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=120)
    repos = sorted(task_level["repo"].unique())
    style = {FIRST: ("#3b75af", "o", -0.15, "Early (first checkpoint)"),
             ADDITIONAL: ("#e1812c", "s", 0.15, "Late (additional checkpoint)"),
             POOLED: ("#555555", "D", 0.0, "Task mean over both cells")}
    rng = np.random.default_rng(args.seed)
    for s in [s for s in style if s in set(task_level["stratum"])]:
        color, marker, off, name = style[s]
        sub = task_level[task_level["stratum"] == s]
        x = sub["repo"].map({r: i for i, r in enumerate(repos)}).to_numpy(float) + off
        x = x + rng.uniform(-0.07, 0.07, len(x))
        ver = sub["verified"].astype(bool).to_numpy()
        y = sub["advantage"].to_numpy(float)
        ax.scatter(x[ver], y[ver], marker=marker, s=36, color=color, label=name)
        ax.scatter(x[~ver], y[~ver], marker=marker, s=36, facecolors="none", edgecolors=color,
                   label=f"{name}, unverified" if (~ver).any() else None)
    ax.axhline(0, color="black", lw=0.6)
    ax.set_xticks(range(len(repos)), repos, fontsize=8)
    ax.set_ylabel("Advantage J(SKIP) - J(CP) (s)")
    ax.set_title("Figure 4: per-task advantage by repository" + (" (Table 7)" if args.pilot else ""), fontsize=10)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, frameon=False)
    fig.tight_layout()
    fig4 = out / "figure4_per_task_advantage.png"
    with atomic_path(fig4) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)

    # ---- tables as artifacts ------------------------------------------------------------
    for name, df in tables.items():
        write_text_atomic(out / f"{name}.csv", df.to_csv())
    write_text_atomic(out / "summary.json", json.dumps(summary, indent=2, default=str) + "\n")
    print(f"figures and tables written to {out.resolve()}")

    # ---- MLflow -------------------------------------------------------------------------
    with study_run(args.experiment, args.mlruns, name="pilot" if args.pilot else lset.name,
                   tags={"ripplecp.study": "pilot_analysis"}, enabled=args.mlflow,
                   params={k: str(v)[:250] for k, v in params.items()}) as run:
        run.log({k: float(v) for k, v in summary.items() if k.startswith(("advantage", "reps"))})
        run.log_artifact(out)
    run_id = run.run_id
    if run.on:
        print(f"logged to MLflow run {run_id} ({tracking_uri(args.mlruns)})")
    return {"out": str(out), "run_id": run_id, "summary": summary, "tables": tables}


if __name__ == "__main__":
    sys.exit(main())
