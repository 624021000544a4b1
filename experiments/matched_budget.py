"""Every placement policy at matched budgets, against first-boundary and the clairvoyant optimum.

    python -m experiments.matched_budget            # the embedded default study
    python -m experiments.matched_budget --quick    # a CI-sized version of the same study
    python -m experiments.matched_budget --labels path/to/label_set --budgets count:1 seconds:2x

The study (paper, Section 6 and Appendices D and F): the simulated workload families are
run through the fast path of the harness (full recovery tables, every J(r, f)); each
family is split leave-one-repository-out; every baseline and every learned policy is
fitted (tuned) on the training repositories at the budget it will be evaluated at, then
walked online over the held-out repository's tasks; every placement is priced exactly from
the recovery table. Budgets (default): 1 checkpoint, the primary budget, and the creation
seconds of 2 average checkpoints (``--budgets count:2 count:3 ...`` adds more). Per family it prints a table (policy x budget: TotalFailureCost with a task
bootstrap interval, regret to the in-sample optimum and to the cross-fitted limit — the
optimum chosen on one half of the repetitions and scored on the other —, difference to
first-boundary with interval, spend). Once every family is in, it prints the verdict table:
for every learned policy, family and budget, both bars fixed in advance — (a) does it beat
first-boundary, (b) does it beat the best simple baseline, chosen per held-out fold as the
online simple baseline with the lowest mean training objective at that budget — in plain
words (yes / no / refused: why), Holm-corrected across the study
(ripplecp_policy.verdicts.two_bar_verdicts). It writes budget-cost curves (PNG) and per-task
results (CSV) into ``--out`` and
logs the study to MLflow: one parent run, one child run per (family, policy, budget, fold).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import clone

from baselines import BASELINES, all_baselines
from baselines.grid import training_objective
from labelsets.tables import LabelSet
from oracle.simulator.workloads import NULL_CONTROL, POSITIVE_CONTROL, family_names, with_controls
from ripplecp_cli import CommandLineError, choice_error, existing_dir, opt, parse, progress, run
from ripplecp_policy.data import resolve_labels
from ripplecp_policy.evaluation import evaluator_for
from ripplecp_policy.export import default_checkpoint_cost, policy_example
from ripplecp_policy.learned import LEARNED
from ripplecp_policy.policy import (
    HAZARDS,
    Budget,
    BudgetSpec,
    PlacementPolicy,
    Role,
    Setting,
    check_budget_specs,
    fold_settings,
)
from ripplecp_policy.registry import entry
from ripplecp_policy.splits import leave_one_repo_out
from ripplecp_policy.stats import task_bootstrap
from ripplecp_policy.tracking import check_experiment_name, policy_params
from ripplecp_policy.verdicts import (
    BEST_SIMPLE,
    CHOSEN_LEARNED,
    Confirmatory,
    Verdict,
    VerdictClass,
    choose_learned,
    compare,
    paired_contrast,
    two_bar_verdicts,
)

PROG = "python -m experiments.matched_budget"
#: the simulated families the default study runs (every registered one is accepted); the
#: last two are the controls every simulated study runs (--no-controls leaves them out
#: when not named): the null (long-horizon) and the positive control
FAMILIES = ("swe-pilot", "dependency-resolution", "multi-stage-build", NULL_CONTROL, POSITIVE_CONTROL)
REFERENCE = "first-boundary"
#: the candidates for bar (b): every online simple baseline (baselines.BASELINES)
SIMPLE = tuple(e.name for e in BASELINES if e.role is Role.ONLINE)


def check_labels(spec: str) -> None:
    """``check=`` of ``--labels``: a shipped label set's name or an existing directory."""
    try:
        path = resolve_labels(spec)
    except LookupError as exc:
        raise ValueError(str(exc)) from None
    existing_dir(path)


@dataclass(frozen=True)
class Args:
    """Every placement policy at matched budgets, against first-boundary and the clairvoyant
    optimum (paper, Section 6 and Appendices D and F)."""

    labels: str | None = opt(None, check=check_labels, metavar="DIR|NAME")
    """an existing label-set directory (e.g. from a real agent), or a label set shipped with
    the toolkit by name (``shipped`` = llm-free), instead of the simulator"""
    families: tuple[str, ...] = opt(FAMILIES, metavar="F")
    """workload families to simulate; with --labels, the set's families to study (left at
    the default: every family of the set)"""
    controls: bool = True
    """also simulate the control families (the positive control and the null) when
    --families leaves them out (simulated studies only)"""
    shipped: bool = True
    """also study the real label set shipped with the toolkit (ripplecp_policy.data: the
    LLM-free families, by family) beside the simulated ones; ignored with --labels"""
    budgets: tuple[str, ...] = opt(("count:1", "seconds:2x"), check=check_budget_specs, metavar="SPEC")
    """budgets: count:N (N >= 1), seconds:S or seconds:Kx (K x mean creation s), bytes:B or
    bytes:Kx (S, B, K > 0)"""
    seed: int = opt(0, min=0)
    """one seed for the simulator, the policies and the random baseline's seeds"""
    quick: bool = False
    """a CI-sized study: fewer tasks, families, budgets, resamples and smaller learned models
    (options given explicitly win)"""
    out: str = opt("out/matched_budget", metavar="PATH")
    """where the PNG curves, per-task CSV and summary go"""
    mlruns: str | None = opt(None, metavar="DIR")
    """MLflow store root (default: $RIPPLECP_MLRUNS or ./mlruns)"""
    mlflow: bool = True
    """log the study to MLflow"""
    repos: int | None = opt(None, min=2)
    """simulated repositories per family, one fold each (default: the family's own, 8;
    --quick: 3)"""
    tasks_per_repo: int | None = opt(None, min=1)
    """simulated tasks per repository (default: the family's own; --quick: 2)"""
    repetitions: int = opt(2, min=1)
    """repetitions of every recovery branch in the simulated tables"""
    hazard: str = opt("uniform", choices=HAZARDS)
    """failure distribution: uniform over measured failures, or duration (per nominal second)"""
    random_seeds: int = opt(10, min=1)
    """seeds the random baseline is averaged over (>= 10 in a full study)"""
    tolerance: float = opt(0.05, min=0.0)
    """a verdict is refused when a mean spend exceeds the cap by more than this x the cap"""
    n_resamples: int = opt(10_000, min=1)
    """task-bootstrap resamples for every interval"""
    learned: bool = True
    """include the learned policies (those of --learners)"""
    learners: tuple[str, ...] = opt(tuple(e.key for e in LEARNED if e.in_study),
                                    choices=tuple(e.key for e in LEARNED), metavar="KIND")
    """the registered learned policies to study (default: those marked for the study)"""
    experiment: str = opt("matched-budget", check=check_experiment_name)
    """MLflow experiment name"""
    jobs: int = opt(2, min=1)
    """worker processes for the folds (results do not depend on it)"""

    def __post_init__(self) -> None:
        if self.labels is None:  # simulated: registered names (a label set's are checked on loading)
            known = family_names()
            for fam in self.families:
                if fam not in known:
                    raise choice_error(fam, known, "--families")


#: --quick: the same study on the two controls (the null has the most boundaries), 3 of
#: their repositories with 2 tasks each, two count budgets and the seconds budget, fewer
#: bootstrap resamples, no shipped set.
QUICK = dict(
    families=(NULL_CONTROL, POSITIVE_CONTROL), budgets=("count:1", "count:2", "seconds:2x"),
    repos=3, tasks_per_repo=2, n_resamples=2_000, shipped=False,
)


def sized(args: Args) -> Args:
    """``args`` with --quick's sizes for every option left at its default (with --labels the
    families stay the set's own)."""
    if not args.quick:
        return args
    default = Args()
    return dataclasses.replace(args, **{
        k: v for k, v in QUICK.items()
        if getattr(args, k) == getattr(default, k) and not (k == "families" and args.labels)
    })


def parse_args(argv: list[str] | None = None) -> Args:
    """The study's arguments from ``argv`` (checked; errors exit 2 in one line), sized."""
    return sized(parse(Args, argv, prog=PROG))


def safe_key(s: str) -> str:
    """An MLflow-legal metric/param key (alphanumerics, _ - . / and space)."""
    return re.sub(r"[^A-Za-z0-9_\-./ ]", "_", s)


def load_label_sets(args: Args) -> dict[str, LabelSet]:
    """One label set per family: simulated, or the tasks of --labels grouped by family (every
    family of the set unless --families names some; a name the set lacks is an error)."""
    out: dict[str, LabelSet] = {}
    if args.labels:
        try:
            full = LabelSet.load(resolve_labels(args.labels))
        except (ValueError, OSError) as exc:
            raise CommandLineError(f"argument --labels: {exc}") from None
        present = sorted(str(f) for f in full.tasks["family"].unique())
        if args.families == FAMILIES:  # left at the default: the whole set
            fams = present
        else:
            for fam in args.families:
                if fam not in present:
                    raise choice_error(fam, present, "--families")
            fams = [f for f in present if f in args.families]
        for fam in fams:
            ids = full.tasks.loc[full.tasks["family"] == fam, "task_id"]
            out[str(fam)] = full.subset(ids)
        return out
    from oracle.simulator import simulate_label_set

    families = with_controls(args.families) if args.controls else args.families
    for fam in progress(families, desc="simulate", leave=False):
        out[fam] = simulate_label_set(
            fam, n_repos=args.repos, tasks_per_repo=args.tasks_per_repo, design="full",
            repetitions=args.repetitions, seed=args.seed,
        )
    if args.shipped:  # the real families beside the simulated ones, under their own names
        try:
            real = LabelSet.load(resolve_labels("shipped"))
        except (ValueError, OSError) as exc:
            raise CommandLineError(f"the shipped label set: {exc} (--no-shipped leaves it out)") from None
        for fam in sorted(str(f) for f in real.tasks["family"].unique()):
            if fam in out:
                raise CommandLineError(f"the shipped label set's family {fam!r} is also simulated")
            out[fam] = real.subset(real.tasks.loc[real.tasks["family"] == fam, "task_id"])
    return out


def priceable(data: LabelSet, hazard: str) -> tuple[LabelSet, list[str]]:
    """Keep the tasks whose recovery table prices every placement; name the dropped ones."""
    ev = evaluator_for(data)
    keep = [t for t in data.task_ids if ev.costs(t, hazard).is_full() and ev.costs(t, hazard).n_boundaries > 0]
    dropped = sorted(set(data.task_ids) - set(keep))
    return (data if not dropped else data.subset(keep)), dropped


def policies_for(args: Args) -> tuple[list[PlacementPolicy], list[str]]:
    """Every registered baseline and (unless ``--no-learned``) the registered learned policies
    marked for the study, unfitted; and the learned ones' names."""
    pols = list(all_baselines(args.seed))
    learned: list[str] = []
    if args.learned:
        extra = [e.make(seed=args.seed, quick=args.quick) for e in LEARNED if e.key in args.learners]
        pols += extra
        learned = [p.name for p in extra]
    return pols, learned


def summarise(res: pd.DataFrame, verdicts: list[Verdict], args: Args) -> pd.DataFrame:
    """One row per (policy, budget): metrics side by side, never folded into one scalar.

    Online policies carry their verdict; an offline limit carries its paired difference to
    the reference beside the verdicts (how far the limit lies) and is marked as the limit it
    is; an unmatched reference is marked as such (no difference: its budget is not matched).
    """
    vmap = {(v.policy, v.budget): v for v in verdicts}
    rows = []
    for (budget, policy), g in res.groupby(["budget", "policy"], sort=False):
        role = Role(g["role"].iloc[0])
        v = vmap.get((policy, budget))
        c: dict[str, float] | None = None
        if v is not None and v.status != "refused":
            c = dict(diff=v.diff, low=v.low, high=v.high, iqm_repo_diff=v.iqm_repo_diff,
                     p_improvement=v.p_improvement)
        elif role is Role.OFFLINE:
            ref = res[(res["budget"] == budget) & (res["policy"] == REFERENCE)]
            c = paired_contrast(g, ref, n_resamples=args.n_resamples) if len(ref) else None
        tfc = g["total_failure_cost"].astype(float)
        if len(g) >= 2 and np.isfinite(tfc).all():
            iv = task_bootstrap(tfc.to_numpy(), g["task_id"].to_numpy(), weighting="task",
                                n_resamples=args.n_resamples, seed=20260818)
            low, high = iv.low, iv.high
        else:
            low = high = math.nan
        over = g["checkpoint_latency_s"].sum()
        rows.append(dict(
            policy=policy, budget=budget, budget_matched=bool(g["budget_matched"].all()), role=str(role),
            n_tasks=len(g), tfc=tfc.mean(), tfc_low=low, tfc_high=high,
            regret=g["regret_s"].mean(), lost_work=g["lost_work_s"].mean(),
            xfit_regret=g["xfit_regret_s"].mean(),
            xfit_limit=(g["total_failure_cost"] - g["objective_s"] + g["xfit_optimum_objective_s"]).mean(),
            limit_in_sample=bool((g["limit_in_sample"] > 0).any()),
            recovery_efficiency=g["redo_avoided_s"].sum() / over if over > 0 else math.nan,
            completion=g["completion"].mean(), tokens=g["tokens"].mean(),
            tool_calls=g["tool_calls"].mean(), bytes_written=g["bytes_written"].mean(),
            checkpoint_latency=g["checkpoint_latency_s"].mean(),
            restore_latency=g["restore_latency_s"].mean(), spend=g["spend"].mean(),
            n_checkpoints=g["n_checkpoints"].mean(),
            diff=c["diff"] if c else (0.0 if policy == REFERENCE else math.nan),
            diff_low=c["low"] if c else math.nan, diff_high=c["high"] if c else math.nan,
            iqm_repo_diff=c["iqm_repo_diff"] if c else math.nan,
            p_improvement=c["p_improvement"] if c else math.nan,
            verdict=(v.status if v else "reference" if policy == REFERENCE
                     else str(role) if role is not Role.ONLINE else ""),
        ))
    return pd.DataFrame(rows)


def format_table(summary: pd.DataFrame) -> str:
    """The per-family table: one block per budget, one row per policy."""
    def iv(m: float, lo: float, hi: float) -> str:
        if not math.isfinite(m):
            return "-"
        return f"{m:8.1f} [{lo:7.1f}, {hi:7.1f}]" if math.isfinite(lo) else f"{m:8.1f}"

    lines = []
    for budget, g in summary.groupby("budget", sort=False):
        table = pd.DataFrame({
            "policy": [marked(p, r) for p, r in zip(g["policy"], g["role"], strict=True)],
            "TotalFailureCost s [95% CI]": [iv(*x) for x in zip(g["tfc"], g["tfc_low"], g["tfc_high"], strict=True)],
            "regret s": g["regret"].map(lambda x: f"{0.0 if abs(x) < 0.05 else x:7.1f}"),
            "regret x-fit s": g["xfit_regret"].map(lambda x: f"{0.0 if abs(x) < 0.05 else x:7.1f}"),
            f"vs {REFERENCE} s [95% CI]": [
                ("refused" if vd == "refused" else iv(d, lo, hi)) if p != REFERENCE else "reference"
                for p, d, lo, hi, vd in zip(g["policy"], g["diff"], g["diff_low"], g["diff_high"], g["verdict"], strict=True)
            ],
            "IQM repos": g["iqm_repo_diff"].map(lambda x: "-" if not math.isfinite(x) else f"{x:+.1f}"),
            "P(impr)": g["p_improvement"].map(lambda x: "-" if not math.isfinite(x) else f"{x:.2f}"),
            "spend": g["spend"].map(lambda x: f"{x:.3g}"),
            "lost work s": g["lost_work"].map(lambda x: f"{x:.1f}"),
            "completion": g["completion"].map(lambda x: f"{x:.2f}"),
        })
        opt = g[g["policy"] == "optimum"]["tfc"]
        limit = (f"limit: in-sample optimum {float(opt.iloc[0]):.1f} s, " if len(opt) else "limit: ") + (
            f"cross-fitted {float(g['xfit_limit'].iloc[0]):.1f} s (chosen on one half of the "
            "repetitions, scored on the other)" if not g["limit_in_sample"].any()
            else "in-sample only (a recovery cell has one repetition: no halves to cross-fit)")
        lines.append(f"  budget {budget} (per task; {int(g['n_tasks'].max())} held-out tasks; {limit})")
        lines.append("    " + table.to_string(index=False).replace("\n", "\n    "))
    return "\n".join(lines)


def marked(policy: str, role: str) -> str:
    """The policy's name as printed: offline limits and unmatched references say so."""
    return policy if role == Role.ONLINE else f"{policy} ({role})"


def verdict_line(policy: str, verdicts: list[Verdict], bar: str = REFERENCE) -> str:
    """One line: does ``policy`` beat the bar (first-boundary, or the best simple baseline)
    at matched budgets? Plainly. Verdicts of no named bar count as first-boundary's."""
    mine = [v for v in verdicts if v.policy == policy and (v.bar or REFERENCE) == bar]
    parts = []
    for v in mine:
        if v.status == "refused":
            parts.append(f"{v.budget}: refused ({v.reason})")
        else:
            parts.append(f"{v.budget}: {v.word()}, {v.diff:+.1f} s, interval [{v.low:+.1f}, {v.high:+.1f}]"
                         + (f", {v.explain()}" if v.verdict_class else ""))
    yes = [v for v in mine if v.status == "yes"]
    decided = [v for v in mine if v.status != "refused"]
    powered_no = [v for v in decided if v.verdict_class == VerdictClass.POWERED_NO]
    if decided and len(yes) == len(decided):
        head = "yes"
    elif yes:
        head = "yes at " + ", ".join(v.budget for v in yes) + " only"
    elif decided and len(powered_no) == len(decided):
        head = "no — powered"
    else:
        head = "no"
    what = REFERENCE if bar == REFERENCE else "the best simple baseline"
    line = f"  {policy}: beats {what} at matched budget: {head} — " + "; ".join(parts)
    if head == "no — powered":  # "keep the simple baseline" only after a powered no
        keep = REFERENCE if bar == REFERENCE else "the simple baseline chosen on the training folds"
        line += (f". It does not beat the simpler rule, and gains above the margin are excluded: "
                 f"keep {keep} (Appendix D: a model that does not beat it has not shown learning "
                 "is necessary).")
    elif head == "no" and any(v.verdict_class == VerdictClass.UNDERPOWERED for v in decided):
        line += ". Not decided where inconclusive: the study is under-powered there (see the MDEs)."
    return line


def primary_budget(args: Args) -> str:
    """The confirmatory family's budget, declared before the run: the first of --budgets
    (its report label)."""
    spec = BudgetSpec.parse(args.budgets[0])
    return args.budgets[0] if spec.relative else Budget(spec.kind, spec.amount).label()


def chosen_line(best: pd.DataFrame) -> str:
    """Which simple baseline each fold chose as bar (b), per budget (on training tasks)."""
    parts = []
    for budget, g in best.groupby("budget", sort=False):
        per_fold = g.groupby("fold", sort=False)["chosen"].first()
        parts.append(f"{budget}: " + ", ".join(f"{n} x{c}" for n, c in per_fold.value_counts().items()))
    return ("best simple baseline per held-out fold (lowest mean training objective, chosen "
            "before any held-out result): " + "; ".join(parts))


def verdict_table(verdicts: list[Verdict], *, learned: bool = True) -> str:
    """The study's verdicts: one row per (family, policy, budget), both bars in plain words
    ("yes" / "no" / "refused: why"), each with its difference, interval and raw and
    Holm-adjusted p-values."""
    def cell(v: Verdict | None) -> str:
        if v is None:
            return "-"
        if v.status == "refused":
            return v.word()
        return (f"{v.word()} ({v.diff:+.1f} [{v.low:+.1f}, {v.high:+.1f}], p {v.p_value:.2g}, "
                f"adj {v.p_adjusted:.2g}, MDE {v.mde:.3g} at a {v.alpha:.2g}, limit "
                f"{v.limit_diff:+.1f} {v.limit_class or '-'})")

    by = {(v.family, v.policy, v.budget, v.bar): v for v in verdicts}
    keys = list(dict.fromkeys((v.family, v.policy, v.budget) for v in verdicts))
    table = pd.DataFrame({
        "family": [k[0] for k in keys], "policy": [k[1] for k in keys], "budget": [k[2] for k in keys],
        f"(a) beats {REFERENCE}": [cell(by.get((*k, REFERENCE))) for k in keys],
        **({"(b) beats the best simple baseline": [cell(by.get((*k, BEST_SIMPLE))) for k in keys]}
           if learned else {}),
    })
    conf = [v for v in verdicts if v.scope == "confirmatory" and v.status != "refused"]
    groups = {g: sum(1 for v in conf if v.group == g) for g in dict.fromkeys(v.group for v in conf)}
    head = ("== verdicts, fixed in advance (difference = policy - bar, s, negative favours the policy; "
            "confirmatory family declared before the run: "
            + (", ".join(f"{g or 'all'} {n} tests (Holm)" for g, n in groups.items()) or "none")
            + "; every other verdict exploratory, at alpha 0.05 alone; MDE at 80 % power at the "
            "alpha applied; limit = the cross-fitted limit's difference to the same bar and its "
            "class) ==")
    if not learned:
        head += ("\n  (no learned policies: the verdict is for the best simple baseline chosen on the "
                 "training folds)")
    lines = [head, "  " + table.to_string(index=False).replace("\n", "\n  ")]
    if conf:
        lines.append("  confirmatory verdicts (the only ones a headline may cite):")
        lines += [f"    {v.family} {v.budget} {v.policy} ({v.chosen}) vs {v.reference}: {v.word()}, "
                  f"{v.diff:+.1f} s [{v.low:+.1f}, {v.high:+.1f}] — {v.explain()}" for v in conf]
    for fam in dict.fromkeys(v.family for v in verdicts):
        mine = [v for v in verdicts if v.family == fam]
        lines.append(f"  {fam}:")
        for policy in dict.fromkeys(v.policy for v in mine):
            lines += ["  " + verdict_line(policy, mine, bar) for bar in (REFERENCE, BEST_SIMPLE)
                      if any(v.bar == bar and v.policy == policy for v in mine)]
    return "\n".join(lines)


def plot_curves(summary: pd.DataFrame, family: str, out: Path) -> Path:
    """Left: budget-cost curves (mean TotalFailureCost per policy over the count budgets).
    Right: paired difference to first-boundary with its interval, at every budget."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = summary[summary["budget"].str.endswith("ckpt")].copy()
    counts["k"] = counts["budget"].str.replace("ckpt", "").astype(float)
    policies = list(dict.fromkeys(summary["policy"]))
    cmap = plt.get_cmap("tab20")
    colour = {p: cmap(i % 20) for i, p in enumerate(policies)}
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2), gridspec_kw={"width_ratios": [1.2, 1]})
    ax = axes[0]
    for policy in policies:
        g = counts[counts["policy"] == policy].sort_values("k")
        if g.empty:
            continue
        registered = entry(policy)
        style: dict[str, Any] = dict(color=colour[policy], marker="o", lw=1.4)
        if policy == REFERENCE:
            style.update(color="black", lw=2.8)
        elif registered.role is Role.OFFLINE:
            style.update(ls="--", lw=2, marker="")
            if policy == "optimum":
                style.update(color="grey")
        elif registered.role is Role.REFERENCE:
            style.update(ls=":", marker="")
        elif registered.learned:
            style.update(ls="-.", lw=2, marker="s")
        ax.plot(g["k"], g["tfc"], label=marked(policy, registered.role), **style)
    if len(counts):
        ax.set_xticks(sorted(counts["k"].unique()))
    ax.set_xlabel("budget (checkpoints per task)")
    ax.set_ylabel("expected TotalFailureCost per task (s)")
    ax.set_title(f"{family}: budget-cost curves (held-out repositories)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    ax = axes[1]
    d = summary[summary["budget_matched"] & (summary["policy"] != REFERENCE)
                & np.isfinite(summary["diff"].astype(float))]
    budgets = list(dict.fromkeys(summary["budget"]))
    step = 1.0 / (len(budgets) + 1)
    for j, budget in enumerate(budgets):
        g = d[d["budget"] == budget]
        y = np.array([policies.index(p) for p in g["policy"]]) + j * step
        ax.errorbar(g["diff"], y, xerr=[g["diff"] - g["diff_low"], g["diff_high"] - g["diff"]],
                    fmt="o", ms=3, capsize=2, label=budget)
    ax.axvline(0, color="black", lw=1)
    shown = [p for p in policies if p in set(d["policy"])]
    ax.set_yticks([policies.index(p) + step for p in shown], [marked(p, entry(p).role) for p in shown],
                  fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(f"policy - {REFERENCE} (s), 95% task-bootstrap interval")
    ax.set_title("difference at matched budget (left of 0: policy cheaper)", fontsize=10)
    ax.grid(alpha=0.3, axis="x")
    ax.legend(fontsize=7, title="budget", title_fontsize=7)
    fig.tight_layout()
    path = out / f"budget_cost_{safe_key(family).replace('/', '_')}.png"
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)
    return path


def _atomic_csv(df: pd.DataFrame, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    df.to_csv(tmp, index=False)
    tmp.replace(path)


def _fast_sqlite() -> None:
    """Let the MLflow SQLite store commit without an fsync per statement (synchronous=OFF).

    Hundreds of child runs otherwise spend most of the study in fsync. Registered after the
    store exists (its creation and migrations run with SQLite's defaults), on every pool
    checkout of an SQLite connection. A crash of this process cannot corrupt the store;
    only an OS crash mid-study could (then rerun the study)."""
    from sqlalchemy import event
    from sqlalchemy.pool import Pool

    @event.listens_for(Pool, "checkout")
    def _pragma(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:  # pragma: no cover
        if type(dbapi_conn).__module__.startswith("sqlite3"):
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA synchronous=OFF")
            cur.close()


# ---------------------------------------------------------------------------------------
# The study
# ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments.matched_budget``: check every argument, then run the study."""
    return run(study, Args, argv, prog=PROG)


def study(args: Args) -> int:
    """The study (the module docstring) for checked arguments; --quick sizes apply here."""
    args = sized(args)
    t0 = time.perf_counter()
    warnings.filterwarnings("ignore", category=FutureWarning)
    out = Path(args.out)

    # 1. Label sets (simulated families or --labels), restricted to priceable tasks.
    data = load_label_sets(args)
    out.mkdir(parents=True, exist_ok=True)  # once the inputs are known good
    hashes: dict[str, str] = {}
    for fam in list(data):
        data[fam], dropped = priceable(data[fam], args.hazard)
        if dropped:
            print(f"note: {fam}: {len(dropped)} task(s) without a full recovery table left out: {dropped[:5]}")
        if data[fam].tasks["repo"].nunique() < 2:
            print(f"note: {fam}: fewer than 2 repositories, no leave-one-repository-out; skipped")
            del data[fam]
            continue
        hashes[fam] = data[fam].content_hash()
    if not data:
        raise ValueError(
            "no family has >= 2 repositories whose tasks have full recovery tables (every J(r, f), "
            "r < f); a pilot-design label set prices only some placements"
        )

    # 2. Policies: every baseline and every learned policy that exists.
    protos, learned = policies_for(args)

    # 3. Leave-one-repository-out: one job per (family, fold), run on --jobs processes; each
    #    job fits every policy on the training repositories at every budget and walks the
    #    held-out repository's tasks. Results come back in order, so the report and the
    #    MLflow log are deterministic; a family is reported once its last fold is back.
    #    Each budget is one setting (budget, failure model, default features), given once to
    #    every fit and to the evaluation.
    jobs = [(fam, fold) for fam, ls in data.items() for fold in leave_one_repo_out(ls)]
    settings = {(fam, fold.held_out): fold_settings(args.budgets, data[fam].subset(fold.train_tasks), args.hazard)
                for fam, fold in jobs}
    results_iter = _run_jobs(jobs, data, protos, settings, args)  # workers start now

    # 4. MLflow (initialised while the workers run): one parent run for the study.
    client = parent_id = None
    exp_id = ""
    if args.mlflow:
        from mlflow.tracking import MlflowClient

        from ripplecp_policy.tracking import ensure_experiment, tracking_uri

        exp_id = ensure_experiment(args.experiment, args.mlruns)
        _fast_sqlite()
        client = MlflowClient(tracking_uri=tracking_uri(args.mlruns))
        parent = client.create_run(
            exp_id, run_name=f"matched-budget {time.strftime('%Y-%m-%d %H:%M:%S')}",
            tags={
                "ripplecp.kind": "study", "ripplecp.study": "matched_budget",
                "ripplecp.families": ",".join(data), "ripplecp.quick": str(args.quick),
                "ripplecp.label_set_hash": ";".join(f"{f}={h[:16]}" for f, h in hashes.items()),
                **{f"ripplecp.label_set_hash.{safe_key(f)}": h for f, h in hashes.items()},
            },
        )
        parent_id = parent.info.run_id
        from mlflow.entities import Param

        client.log_batch(parent_id, params=[
            Param(k, json.dumps(v) if not isinstance(v, str) else v)
            for k, v in dataclasses.asdict(args).items()
        ])

    try:
        return _study(args, data, hashes, learned, client, exp_id, parent_id, jobs,
                      results_iter, t0, out)
    except BaseException:
        if client is not None:
            client.set_terminated(parent_id, status="FAILED")
        raise


def _study(
    args: Args, data: dict[str, LabelSet], hashes: dict[str, str], learned: list[str],
    client: Any, exp_id: str, parent_id: str | None, jobs: list[tuple[str, Any]],
    results_iter: Any, t0: float, out: Path,
) -> int:
    """Collect the folds, report and log each family (split out of :func:`main` so a
    failure marks the parent run FAILED)."""
    n_folds = {fam: sum(1 for f, _ in jobs if f == fam) for fam in data}
    done: dict[str, list[pd.DataFrame]] = {fam: [] for fam in data}
    fitted: dict[str, dict[str, FoldFits]] = {fam: {} for fam in data}  # family -> fold -> fits
    all_results, all_summaries, all_verdicts, lines = [], [], [], []
    all_best: list[pd.DataFrame] = []
    for (fam, fold), (fold_res, fits) in progress(zip(jobs, results_iter, strict=True),
                                                  total=len(jobs), desc="folds (family x held-out repo)"):
        done[fam].append(fold_res)
        fitted[fam][fold.held_out] = fits
        if len(done[fam]) < n_folds[fam]:
            continue
        ls = data[fam]
        res = pd.concat(done.pop(fam), ignore_index=True)
        is_best = res["policy"] == BEST_SIMPLE
        all_best.append(res[is_best])
        res = res[~is_best].drop(columns="chosen")
        verdicts = compare(res, REFERENCE, tolerance=args.tolerance, n_resamples=args.n_resamples)
        summary = summarise(res, verdicts, args)
        summary.insert(0, "family", fam)
        all_results.append(res)
        all_summaries.append(summary)
        all_verdicts += [dict(v.as_dict(), family=fam, bar=REFERENCE) for v in verdicts
                         if v.policy not in learned]
        png = plot_curves(summary, fam, out)

        # 5. Report the family.
        n_tasks, n_repos = len(ls.tasks), ls.tasks["repo"].nunique()
        block = [
            "",
            f"== {fam}: {n_tasks} tasks, {n_repos} repositories, leave-one-repository-out "
            f"(label set {hashes[fam][:12]}, hazard {args.hazard}) ==",
            format_table(summary),
            "  " + chosen_line(all_best[-1]),
            f"  curves: {png}",
        ]
        text = "\n".join(block)
        print(text)
        lines.append(text)

        # 6. MLflow: a child run per (policy, budget, fold) of this family.
        if client is not None:
            _log_children(client, exp_id, parent_id, res, fam, hashes[fam], fitted.pop(fam), args)
            _log_summary(client, parent_id, summary, fam)
            client.log_artifact(parent_id, str(png), artifact_path="curves")

    results = pd.concat(all_results, ignore_index=True)
    summary = pd.concat(all_summaries, ignore_index=True)
    best = pd.concat(all_best, ignore_index=True)
    # 7. The verdicts, both bars fixed in advance, Holm-corrected across the study.
    judged = learned or [BEST_SIMPLE]
    chosen = choose_learned(results, learned) if learned else results.iloc[:0]
    if learned:  # the confirmatory policy: per fold, the learner chosen on the other folds
        judged = [CHOSEN_LEARNED, *learned]
    simulated = set() if args.labels else set(args.families)  # real and simulated corrected apart
    confirmatory = Confirmatory(primary_budget(args), policy=judged[0],
                                groups={f: "simulated" if f in simulated else "real" for f in data})
    two_bar = two_bar_verdicts(pd.concat([results, best, chosen], ignore_index=True), judged,
                               tolerance=args.tolerance, confirmatory=confirmatory)
    if not learned:  # bar (b) would compare best-simple with itself
        two_bar = [v for v in two_bar if v.bar == REFERENCE]
    text = verdict_table(two_bar, learned=bool(learned))
    print("\n" + text)
    lines.append(text)
    _atomic_csv(results, out / "per_task.csv")
    _atomic_csv(summary, out / "summary.csv")
    _atomic_csv(best, out / "best_simple.csv")
    _atomic_csv(pd.DataFrame([v.as_dict() for v in two_bar] + all_verdicts), out / "verdicts.csv")
    report = out / "report.txt"
    tmp = report.with_name("report.txt.tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(report)
    elapsed = time.perf_counter() - t0
    if client is not None:
        from mlflow.entities import Metric

        client.log_batch(parent_id, metrics=[Metric("study_seconds", elapsed, int(time.time() * 1000), 0)])
        for p in ("per_task.csv", "summary.csv", "best_simple.csv", "verdicts.csv", "report.txt"):
            client.log_artifact(parent_id, str(out / p))
        client.set_terminated(parent_id)
        from ripplecp_policy.tracking import runs_url, tracking_uri, ui_command

        print(f"\nMLflow: parent run {parent_id} in experiment {args.experiment!r} "
              f"({tracking_uri(args.mlruns)}); compare with `python -m experiments.compare`; "
              f"browse with `{ui_command(args.mlruns)}` then {runs_url(exp_id)}")
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"outputs in {out}/ ; study took {elapsed:.1f} s wall, "
          f"{own.ru_utime + own.ru_stime:.1f} s CPU here + {kids.ru_utime + kids.ru_stime:.1f} s in workers")
    return 0


@dataclass
class FoldFits:
    """What one fold fitted, for the MLflow log: per (policy, budget label) the policy's
    params (:func:`ripplecp_policy.tracking.policy_params`), and for the fold that carries
    the models (the first of its family) each learned policy with its budget, an input
    example and its default checkpoint charge."""

    params: dict[tuple[str, str], dict[str, str]]
    models: dict[tuple[str, str], tuple[PlacementPolicy, Budget, pd.DataFrame, float]]


def run_fold(
    fam: str, ls: LabelSet, fold: Any, protos: list[PlacementPolicy],
    settings: list[tuple[str, Setting]], args: Args, keep_models: bool = False,
) -> tuple[pd.DataFrame, FoldFits]:
    """One fold: fit every policy on the training repositories under every setting (tuning
    sees only them), then evaluate it on the held-out repository's tasks under the same.
    Returns the per-task results and what was fitted (``keep_models``: the learned policies
    themselves too).

    Each online simple baseline (:data:`SIMPLE`) also records its mean training objective
    (``train_objective``); the one with the lowest at a budget (ties: report order) is the
    fold's best simple baseline, bar (b) of the verdicts, chosen before any held-out result
    is looked at: its held-out rows come back again as :data:`BEST_SIMPLE` rows naming it
    in ``chosen``."""
    ev = evaluator_for(ls)
    train = ls.subset(fold.train_tasks)  # one object per fold: fits share its caches
    rows = []
    fits = FoldFits({}, {})
    best: dict[Setting, tuple[float, pd.DataFrame]] = {}
    for proto in protos:
        for label, setting in settings:
            t_fit = time.perf_counter()
            pol = clone(proto).fit(train, setting)
            fit_s = time.perf_counter() - t_fit
            audit = getattr(pol, "audit_", None)
            if audit is not None and hasattr(audit, "check"):
                audit.check([fold.held_out])  # the held-out repository was never seen
            seeds = (range(args.seed, args.seed + args.random_seeds)
                     if pol.name == "random" else (args.seed,))
            train_obj = training_objective(pol, train, setting) if pol.name in SIMPLE else math.nan
            df = ev.evaluate(pol, list(fold.test_tasks), setting, seeds=seeds)
            df["family"], df["fold"], df["fit_s"] = fam, fold.held_out, fit_s
            df["budget"], df["train_objective"] = label, train_obj
            rows.append(df)
            key = (pol.name, label)
            fits.params[key] = policy_params(pol)
            if keep_models and entry(pol.name).learned:
                fits.models[key] = (pol, setting.budget, policy_example(pol, train, setting),
                                    default_checkpoint_cost(train, setting.budget))
            if pol.name in SIMPLE and (setting not in best or train_obj < best[setting][0] - 1e-9):
                best[setting] = (train_obj, df)
    for _, df in best.values():
        rows.append(df.assign(chosen=df["policy"], policy=BEST_SIMPLE))
    return pd.concat(rows, ignore_index=True), fits


def _run_jobs(
    jobs: list[tuple[str, Any]], data: dict[str, LabelSet], protos: list[PlacementPolicy],
    settings: dict[tuple[str, str], list[tuple[str, Setting]]], args: Args,
) -> Any:
    """Results of :func:`run_fold` per job, in job order (a generator). The first fold of
    each family keeps its learned policies, to be logged as models (none without MLflow)."""
    n = min(max(1, args.jobs), len(jobs))
    first = {fam: fold.held_out for fam, fold in reversed(jobs)}
    calls = [(fam, data[fam], fold, protos, settings[fam, fold.held_out], args,
              args.mlflow and first[fam] == fold.held_out) for fam, fold in jobs]
    if n == 1:
        return (run_fold(*c) for c in calls)
    from joblib import Parallel, delayed

    return Parallel(n_jobs=n, return_as="generator")(delayed(run_fold)(*c) for c in calls)


_CHILD_METRICS = [
    "total_failure_cost", "lost_work_s", "regret_s", "redo_avoided_s", "checkpoint_latency_s",
    "restore_latency_s", "completion", "tokens", "tool_calls", "bytes_written", "n_checkpoints",
    "spend", "spend_count", "spend_seconds", "spend_bytes", "n_refused", "objective_s",
    "xfit_regret_s",
]


def _log_children(client: Any, exp_id: str, parent_id: str, res: pd.DataFrame, fam: str, h: str,
                  fitted: dict[str, FoldFits], args: Args) -> None:
    """One child run per (policy, budget): tags, the mean metrics over every held-out task,
    each fold's mean as that metric's history (step = the fold's position in
    ``ripplecp.splits``), and the policy's params and fitted values: a value the folds
    share under its own name, one that differs under its own name as the first fold has it
    (the fold whose models are logged) and as ``name/<fold>`` for every fold. Each learned
    policy is logged as an MLflow model (``policy``) in its child run, from the first fold:
    the folds' models differ only in the repository held out, and logging each costs ~0.2 s.
    One run per fold would be 8x the runs, and MLflow's SQLite store spends ~0.1 s on each."""
    import mlflow
    from mlflow.entities import Metric, Param

    from ripplecp_policy.export import log_policy_model
    from ripplecp_policy.tracking import using_store

    groups = list(res.groupby(["policy", "budget"], sort=False))
    for (policy, budget), g in progress(groups, desc=f"mlflow {fam}", leave=False):
        folds = list(dict.fromkeys(g["fold"]))
        tags = {
            "mlflow.parentRunId": parent_id, "ripplecp.kind": "policy-budget",
            "ripplecp.family": fam, "ripplecp.policy": str(policy), "ripplecp.budget": str(budget),
            "ripplecp.budget_kind": str(g["budget_kind"].iloc[0]),
            "ripplecp.splits": ",".join(map(str, folds))[:4000], "ripplecp.label_set_hash": h,
            "ripplecp.budget_matched": str(bool(g["budget_matched"].all())),
            "ripplecp.role": str(g["role"].iloc[0]),
            "ripplecp.budget_amount": f"{g['budget_amount'].iloc[0]:g}",
        }
        run = client.create_run(exp_id, run_name=f"{fam}/{policy}/{budget}", tags=tags)
        ts = int(time.time() * 1000)
        cols = [k for k in _CHILD_METRICS if k in g]
        values = g[cols].astype(float)  # once: per-metric frame lookups were ~5 % of the study
        means = values.mean()
        metrics = [Metric(k, float(means[k]), ts, 0) for k in cols if np.isfinite(means[k])]
        metrics.append(Metric("n_tasks", float(len(g)), ts, 0))
        metrics.append(Metric("n_folds", float(len(folds)), ts, 0))
        fold_of = g["fold"].to_numpy()
        for i, fold in enumerate(folds):
            rows = fold_of == fold
            fm = values[rows].mean()
            metrics += [Metric(f"fold/{k}", float(fm[k]), ts, i) for k in cols if np.isfinite(fm[k])]
            metrics.append(Metric("fold/fit_seconds", float(g["fit_s"].to_numpy()[rows][0]), ts, i))
        per_fold = [fitted[f].params.get((policy, budget), {}) for f in folds]
        params = dict(per_fold[0]) if per_fold else {}
        for name in sorted({k for d in per_fold for k in d}):
            values = [d.get(name) for d in per_fold]
            if len(set(values)) > 1:
                params.update({f"{name}/{f}": str(v) for f, v in zip(folds, values, strict=True)})
        plist = [Param(k, v) for k, v in params.items()]
        n_batches = max(1, -(-len(plist) // 100), -(-len(metrics) // 1000))
        for i in range(n_batches):  # MLflow takes <= 100 params and <= 1000 metrics a batch
            client.log_batch(run.info.run_id, metrics=metrics[i * 1000:(i + 1) * 1000],
                             params=plist[i * 100:(i + 1) * 100])
        model = next((fitted[f].models[(policy, budget)] for f in folds
                      if (policy, budget) in fitted[f].models), None)
        if model is None:
            client.set_terminated(run.info.run_id)
            continue
        pol, bud, example, charge = model
        with using_store(args.mlruns), mlflow.start_run(run_id=run.info.run_id):  # ends FINISHED
            log_policy_model(pol, bud, example, name="policy", default_checkpoint_cost=charge,
                             seed=args.seed, params=params,
                             tags={k: v for k, v in tags.items() if k.startswith("ripplecp.")
                                   and k != "ripplecp.splits"})


def _log_summary(client: Any, parent_id: str, summary: pd.DataFrame, fam: str) -> None:
    from mlflow.entities import Metric

    ts = int(time.time() * 1000)
    metrics = []
    for r in summary.itertuples():
        base = safe_key(f"{fam}/{r.policy}/{r.budget}")
        for name in ("tfc", "tfc_low", "tfc_high", "regret", "xfit_regret", "xfit_limit",
                     "diff", "diff_low", "diff_high",
                     "p_improvement", "iqm_repo_diff", "spend", "completion", "lost_work"):
            v = float(getattr(r, name))
            if math.isfinite(v):
                metrics.append(Metric(f"{base}/{name}", v, ts, 0))
    for i in range(0, len(metrics), 900):
        client.log_batch(parent_id, metrics=metrics[i : i + 900])


if __name__ == "__main__":
    sys.exit(main())
