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
import math
import sys
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from baselines import BASELINES, all_baselines
from experiments.study import (
    REFERENCE,
    LabelStudyArgs,
    control_roles,
    load_label_sets,
    sized,
    splittable,
)
from features.files import atomic_path, write_text_atomic
from oracle.simulator.workloads import NULL_CONTROL, POSITIVE_CONTROL, with_controls
from ripplecp_cli import opt, parse, progress, run
from ripplecp_policy.budget import HAZARDS, Budget, BudgetSpec, check_budget_specs
from ripplecp_policy.learned import LEARNED
from ripplecp_policy.registry import entry
from ripplecp_policy.roles import Role
from ripplecp_policy.tracking import (
    TrackedRun,
    check_experiment_name,
    metric_key,
    model_name,
    policy_params,
    save_runs_view,
    study_run,
    ui_command,
)

if TYPE_CHECKING:
    import pandas as pd

    from labelsets.tables import LabelSet
    from ripplecp_policy.controls import ControlsOutcome
    from ripplecp_policy.policy import PlacementPolicy, Setting
    from ripplecp_policy.verdicts import Verdict

PROG = "python -m experiments.matched_budget"
#: the simulated families the main job runs (every registered one is accepted): the
#: study skeleton's with the two controls every simulated study runs (--no-controls leaves
#: them out when not named): the null (long-horizon) and the positive control
FAMILIES = ("swe-pilot", "dependency-resolution", "multi-stage-build", NULL_CONTROL, POSITIVE_CONTROL)
#: the candidates for bar (b): every online simple baseline (baselines.BASELINES)
SIMPLE = tuple(e.name for e in BASELINES if e.role is Role.ONLINE)


@dataclass(frozen=True)
class Args(LabelStudyArgs):
    """Every placement policy at matched budgets, against first-boundary and the clairvoyant
    optimum (paper, Section 6 and Appendices D and F)."""

    #: --quick: the same study on the two controls (the null has the most boundaries), 3 of
    #: their repositories with 2 tasks each, two count budgets and the seconds budget, fewer
    #: bootstrap resamples, no shipped set.
    QUICK: ClassVar[Mapping[str, Any]] = dict(
        families=(NULL_CONTROL, POSITIVE_CONTROL), budgets=("count:1", "count:2", "seconds:2x"),
        repos=3, tasks_per_repo=2, n_resamples=2_000, shipped=False,
    )

    families: tuple[str, ...] = opt(FAMILIES, metavar="F")
    """workload families to simulate; with --labels, the set's families to study (left at
    the default: every family of the set)"""
    controls: bool = True
    """also simulate the control families (the positive control and the null) when
    --families leaves them out (simulated studies only)"""
    budgets: tuple[str, ...] = opt(("count:1", "seconds:2x"), check=check_budget_specs, metavar="SPEC")
    """budgets: count:N (N >= 1), seconds:S or seconds:Kx (K x mean creation s), bytes:B or
    bytes:Kx (S, B, K > 0)"""
    experiment: str = opt("matched-budget", check=check_experiment_name)
    """MLflow experiment name"""
    shipped: bool = True
    """also study the real label set shipped with the toolkit (ripplecp_policy.data: the
    LLM-free families, by family) beside the simulated ones; ignored with --labels"""
    out: str = opt("out/matched_budget", metavar="PATH")
    """where the PNG curves, per-task CSV and summary go"""
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
    jobs: int = opt(2, min=1)
    """worker processes for the folds (results do not depend on it)"""


#: --quick's sizes (tests and the README read them here)
QUICK = Args.QUICK


def parse_args(argv: list[str] | None = None) -> Args:
    """The study's arguments from ``argv`` (checked; errors exit 2 in one line), sized."""
    return sized(parse(Args, argv, prog=PROG))


def label_families(args: Args) -> tuple[str, ...]:
    """The families the study simulates (or, with --labels, names): --families with the
    control families added unless --no-controls or --labels."""
    return with_controls(args.families) if args.controls and not args.labels else args.families


def label_sets(args: Args) -> dict[str, LabelSet]:
    """The study's label sets (:func:`experiments.study.load_label_sets`): the simulated tables
    with --repetitions, with the control families added unless --no-controls, and the
    shipped real families beside them unless --no-shipped."""
    args = dataclasses.replace(args, families=label_families(args))
    return load_label_sets(args, repetitions=args.repetitions, shipped=args.shipped)


def priceable(data: LabelSet, hazard: str) -> tuple[LabelSet, list[str]]:
    """Keep the tasks whose recovery table prices every placement; name the dropped ones."""
    from ripplecp_policy.evaluation import evaluator_for

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
    import numpy as np
    import pandas as pd

    from ripplecp_policy.stats import task_bootstrap
    from ripplecp_policy.verdicts import paired_contrast

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
            limit_model_chosen=bool((g["limit_model_chosen"] > 0).any()),
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
    import pandas as pd

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
            "in-sample only (a recovery cell has one repetition: no halves to cross-fit)"
            if g["limit_in_sample"].any()
            else f"cross-fitted {float(g['xfit_limit'].iloc[0]):.1f} s (chosen on the recovery "
            "model fitted on the other repositories, scored on the task's own prices)"
            if g["limit_model_chosen"].any()
            else f"cross-fitted {float(g['xfit_limit'].iloc[0]):.1f} s (chosen on one half of the "
            "repetitions, scored on the other)")
        lines.append(f"  budget {budget} (per task; {int(g['n_tasks'].max())} held-out tasks; {limit})")
        lines.append("    " + table.to_string(index=False).replace("\n", "\n    "))
    return "\n".join(lines)


def marked(policy: str, role: str) -> str:
    """The policy's name as printed: offline limits and unmatched references say so."""
    return policy if role == Role.ONLINE else f"{policy} ({role})"


def verdict_line(policy: str, verdicts: list[Verdict], bar: str = REFERENCE) -> str:
    """One line: does ``policy`` beat the bar (first-boundary, or the best simple baseline)
    at matched budgets? Plainly. Verdicts of no named bar count as first-boundary's."""
    from ripplecp_policy.verdicts import VerdictClass

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
    import pandas as pd

    from ripplecp_policy.verdicts import BEST_SIMPLE

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
    import numpy as np

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
    path = out / f"budget_cost_{metric_key(family).replace('/', '_')}.png"
    try:
        with atomic_path(path) as tmp:  # a full disk or an interrupt leaves no temp file
            fig.savefig(tmp, dpi=110)
    finally:
        plt.close(fig)
    return path


def _atomic_csv(df: pd.DataFrame, path: Path) -> None:
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False)


# ---------------------------------------------------------------------------------------
# The study
# ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments.matched_budget``: check every argument, then run the study."""
    return run(study, Args, argv, prog=PROG)


def study(args: Args) -> int:
    """The study (the module docstring) for checked arguments; --quick sizes apply here."""
    import pandas as pd

    from ripplecp_policy.controls import mark_uninformative
    from ripplecp_policy.policy import fold_settings
    from ripplecp_policy.splits import leave_one_repo_out
    from ripplecp_policy.verdicts import (
        BEST_SIMPLE,
        CHOSEN_LEARNED,
        Confirmatory,
        choose_learned,
        compare,
        two_bar_verdicts,
    )

    args = sized(args)
    t0 = time.perf_counter()
    warnings.filterwarnings("ignore", category=FutureWarning)
    out = Path(args.out)

    # 1. Label sets (simulated families or --labels), restricted to priceable tasks.
    data = label_sets(args)
    out.mkdir(parents=True, exist_ok=True)  # once the inputs are known good
    for fam in list(data):
        data[fam], dropped = priceable(data[fam], args.hazard)
        if dropped:
            print(f"note: {fam}: {len(dropped)} task(s) without a full recovery table left out: {dropped[:5]}")
    data = splittable(data, "no family has >= 2 repositories whose tasks have full recovery tables "
                            "(every J(r, f), r < f); a pilot-design label set prices only some placements")
    hashes = {fam: ls.content_hash() for fam, ls in data.items()}

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

    # 4. MLflow (opened while the workers run): one parent run for the study, ended FAILED
    #    or KILLED with its children if the study fails or is stopped.
    tags = {"ripplecp.study": "matched_budget", "ripplecp.families": ",".join(data),
            "ripplecp.quick": args.quick,
            "ripplecp.label_set_hash": ";".join(f"{f}={h[:16]}" for f, h in hashes.items()),
            **{f"ripplecp.label_set_hash.{metric_key(f)}": h for f, h in hashes.items()}}
    with study_run(args.experiment, args.mlruns, name=f"matched-budget {time.strftime('%Y-%m-%d %H:%M:%S')}",
                   tags=tags, params=dataclasses.asdict(args), enabled=args.mlflow) as parent:
        n_folds = {fam: sum(1 for f, _ in jobs if f == fam) for fam in data}
        done: dict[str, list[pd.DataFrame]] = {fam: [] for fam in data}
        fitted: dict[str, dict[str, FoldFits]] = {fam: {} for fam in data}  # family -> fold -> fits
        children: dict[tuple[str, str, str], TrackedRun] = {}  # (family, policy, budget) -> child run
        all_results, all_summaries, all_verdicts, lines = [], [], [], []
        all_best: list[pd.DataFrame] = []
        fold_cpu = 0.0  # CPU seconds of the folds, wherever they ran
        for (fam, fold), ((fold_res, fits), cpu) in progress(zip(jobs, results_iter, strict=True),
                                                      total=len(jobs), desc="folds (family x held-out repo)"):
            fold_cpu += cpu
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
            lines.append("\n".join(block))  # the long per-policy text: report.txt

            # 6. MLflow: a child run per (policy, budget) of this family.
            children.update(log_family(parent, res, summary, fam, hashes[fam], fitted.pop(fam), args,
                                       rank=len(all_summaries)))
            parent.log_artifact(png, "curves")

        results = pd.concat(all_results, ignore_index=True)
        summary = pd.concat(all_summaries, ignore_index=True)
        best = pd.concat(all_best, ignore_index=True)
        # 7. The verdicts, both bars fixed in advance, Holm-corrected across the study.
        judged = learned or [BEST_SIMPLE]
        chosen = choose_learned(results, learned) if learned else results.iloc[:0]
        if learned:  # the confirmatory policy: per fold, the learner chosen on the other folds
            judged = [CHOSEN_LEARNED, *learned]
        simulated = set() if args.labels else set(label_families(args))  # real and simulated corrected apart
        confirmatory = Confirmatory(primary_budget(args), policy=judged[0],
                                    groups={f: "simulated" if f in simulated else "real" for f in data})
        two_bar = two_bar_verdicts(pd.concat([results, best, chosen], ignore_index=True), judged,
                                   tolerance=args.tolerance, confirmatory=confirmatory)
        if not learned:  # bar (b) would compare best-simple with itself
            two_bar = [v for v in two_bar if v.bar == REFERENCE]
        # 8. The controls: a positive control that is not yes makes every verdict uninformative.
        roles = control_roles(data)
        outcome = study_controls(two_bar, roles)
        if outcome.positive_yes is False:
            two_bar = mark_uninformative(two_bar, outcome)
        lines.append(verdict_table(two_bar, learned=bool(learned)))
        # 9. The headline first: one table, family x primary budget, and the controls' outcome.
        head = headline(summary, best, two_bar, learned, roles, primary_budget(args))
        text = format_headline(head, outcome)
        print(text)
        print(f"\nper family (every policy at every budget), every verdict and the per-policy lines: "
              f"{out / 'report.txt'}")
        lines.insert(0, text)
        _atomic_csv(head, out / "headline.csv")
        verdict_rows = pd.DataFrame([v.as_dict() for v in two_bar] + all_verdicts)
        _atomic_csv(results, out / "per_task.csv")
        _atomic_csv(summary, out / "summary.csv")
        _atomic_csv(best, out / "best_simple.csv")
        _atomic_csv(verdict_rows, out / "verdicts.csv")
        write_text_atomic(out / "report.txt", "\n\n".join(lines) + "\n")
        elapsed = time.perf_counter() - t0

        # 10. MLflow: the verdicts on the child runs, the headline on the parent, the tables
        #    as artifacts, and the runs table laid out as the comparison.
        for v in two_bar:
            kid = children.get((v.family, v.policy, v.budget))
            if kid is not None:
                kid.log(tags={f"ripplecp.verdict.{'a' if v.bar == REFERENCE else 'b'}": v.word()})
        parent.log(headline_metrics(head, two_bar, elapsed))
        for p in ("headline.csv", "per_task.csv", "summary.csv", "best_simple.csv", "verdicts.csv", "report.txt"):
            parent.log_artifact(out / p)
        url = save_runs_view(parent, "comparison", columns=VIEW_COLUMNS, order_by="tags.`ripplecp.row`")
    if parent.on:
        print(f"\nMLflow: parent run {parent.run_id} in experiment {args.experiment!r}, a child run per "
              f"(family, policy, budget); compare studies with `python -m experiments.compare`; "
              f"browse with `{ui_command(args.mlruns)}` then {url}")
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    where = "within it" if args.jobs == 1 else f"in {args.jobs} fold workers"
    print(f"outputs in {out}/ ; study took {elapsed:.1f} s wall, {own.ru_utime + own.ru_stime:.1f} s CPU "
          f"in this process, the folds {fold_cpu:.1f} s CPU {where}")
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
    import pandas as pd
    from sklearn.base import clone

    from baselines.grid import training_objective
    from ripplecp_policy.evaluation import evaluator_for
    from ripplecp_policy.export import default_checkpoint_cost, policy_example
    from ripplecp_policy.verdicts import BEST_SIMPLE

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
        return (_timed_fold(*c) for c in calls)
    from joblib import Parallel, delayed

    return Parallel(n_jobs=n, return_as="generator")(delayed(_timed_fold)(*c) for c in calls)


def _timed_fold(*call: Any) -> tuple[Any, float]:
    """:func:`run_fold` and the CPU seconds it took in the process that ran it (joblib's
    workers live on after the study, so the operating system's children accounting never
    sees them)."""
    t0 = time.process_time()
    out = run_fold(*call)
    return out, time.process_time() - t0


#: the handful of metrics each child run carries: summary column -> metric name
CHILD_METRICS = {
    "tfc": "total_failure_cost", "diff": "vs_first_boundary", "diff_low": "vs_first_boundary_low",
    "diff_high": "vs_first_boundary_high", "regret": "regret_s", "xfit_regret": "xfit_regret_s",
    "lost_work": "lost_work_s", "spend": "spend", "n_checkpoints": "n_checkpoints", "n_tasks": "n_tasks",
}
#: the columns the saved runs view shows (save_runs_view): what a comparison reads first
VIEW_COLUMNS = (
    "attributes.`Run Name`", "tags.`ripplecp.family`", "tags.`ripplecp.budget`", "tags.`ripplecp.policy`",
    "metrics.`total_failure_cost`", "metrics.`vs_first_boundary`", "metrics.`vs_first_boundary_low`",
    "metrics.`vs_first_boundary_high`", "metrics.`xfit_regret_s`", "metrics.`spend`",
    "tags.`ripplecp.verdict.a`", "tags.`ripplecp.verdict.b`", "attributes.`Models`",
)


def log_family(parent: TrackedRun, res: pd.DataFrame, summary: pd.DataFrame, fam: str, h: str,
               fitted: dict[str, FoldFits], args: Args, rank: int) -> dict[tuple[str, str, str], TrackedRun]:
    """One child run per (policy, budget) of ``fam`` beneath ``parent``: its tags, the
    handful of :data:`CHILD_METRICS` from the family's summary row, the fold history
    (``fold/total_failure_cost``, ``fold/vs_first_boundary``, ``fold/fit_seconds``; step =
    the fold's position in ``ripplecp.splits``), and the policy's params and fitted values
    (a value the folds share under its own name; one that differs as the first fold has it
    and as ``name/<fold>`` for every fold). Each learned policy is logged as a model named
    after what it is (:func:`~ripplecp_policy.tracking.model_name` of family, policy and
    budget) and registered under that name, from the first fold: the folds' models differ
    only in the repository held out. ``rank`` orders the family in the runs view (tag
    ``ripplecp.row``: family, budget, then the reference first and the policies in report
    order). Returns the child runs by (family, policy, budget)."""
    from ripplecp_policy.export import log_policy_model

    rows = summary.set_index(["policy", "budget"])
    budgets = list(dict.fromkeys(summary["budget"]))
    order = [REFERENCE, *(p for p in dict.fromkeys(summary["policy"]) if p != REFERENCE)]
    ref = res[res["policy"] == REFERENCE].groupby(["budget", "fold"], sort=False)["total_failure_cost"].mean()
    out: dict[tuple[str, str, str], TrackedRun] = {}
    groups = list(res.groupby(["policy", "budget"], sort=False))
    for (policy, budget), g in progress(groups, desc=f"mlflow {fam}", leave=False):
        folds = list(dict.fromkeys(g["fold"]))
        row = rows.loc[(policy, budget)]
        tags = {
            "ripplecp.kind": "policy-budget", "ripplecp.family": fam, "ripplecp.policy": policy,
            "ripplecp.budget": budget, "ripplecp.budget_kind": g["budget_kind"].iloc[0],
            "ripplecp.splits": ",".join(map(str, folds))[:4000], "ripplecp.label_set_hash": h,
            "ripplecp.budget_matched": bool(row["budget_matched"]), "ripplecp.role": row["role"],
            "ripplecp.budget_amount": f"{g['budget_amount'].iloc[0]:g}",
            "ripplecp.row": f"{rank:02d} {fam} | {budgets.index(budget):02d} {budget} | "
                            f"{order.index(policy):02d} {policy}",
        }
        by_fold = g.groupby("fold", sort=False)
        tfc = by_fold["total_failure_cost"].mean().reindex(folds)
        history = {"fold/total_failure_cost": list(tfc),
                   "fold/fit_seconds": list(by_fold["fit_s"].first().reindex(folds))}
        if row["budget_matched"]:
            history["fold/vs_first_boundary"] = [tfc[f] - ref.get((budget, f), math.nan) for f in folds]
        per_fold = [fitted[f].params.get((policy, budget), {}) for f in folds]
        params = dict(per_fold[0]) if per_fold else {}
        for name in sorted({k for d in per_fold for k in d}):
            values = [d.get(name) for d in per_fold]
            if len(set(values)) > 1:
                params.update({f"{name}/{f}": str(v) for f, v in zip(folds, values, strict=True)})
        model = next((fitted[f].models[(policy, budget)] for f in folds
                      if (policy, budget) in fitted[f].models), None)
        with parent.child(f"{fam}/{policy}/{budget}", tags=tags) as kid:
            # to the millisecond: what the table shows (the CSVs keep every digit)
            kid.log({name: round(float(row[col]), 3) for col, name in CHILD_METRICS.items()} | {"n_folds": len(folds)},
                    params=params, history={k: [round(float(x), 3) for x in v] for k, v in history.items()})
            if model is not None:
                pol, bud, example, charge = model
                name = model_name(fam, policy, budget)
                with kid.active():  # ends the child run: its last step
                    log_policy_model(pol, bud, example, name=name, registered_model_name=name,
                                     default_checkpoint_cost=charge, seed=args.seed, params=params,
                                     tags={k: str(v) for k, v in tags.items()
                                           if k not in ("ripplecp.splits", "ripplecp.row")})
        out[(fam, policy, budget)] = kid
    return out


def verdict_class(v: Verdict | None) -> str:
    """What a headline prints for a verdict: its class where the verdicts carry one ("yes",
    "no — powered", "inconclusive — under-powered", "refused"; issue 28's power), else its
    plain word ("yes", "no", "refused"). The one place a verdict's class is read."""
    if v is None:
        return "-"
    return str(getattr(v, "verdict_class", "") or v.status)


def verdict_mde(v: Verdict | None) -> float:
    """A verdict's minimum detectable effect at 80 % power at the level applied (s), where
    the verdicts carry it (issue 28's power); NaN otherwise. The one place it is read."""
    return float(getattr(v, "mde", math.nan)) if v is not None else math.nan


def headline_learner(fam: str, budget: str, g: pd.DataFrame, verdicts: list[Verdict], learned: list[str]) -> str:
    """The learned policy a family's headline row reports: the confirmatory one where the
    verdicts name it (scope ``confirmatory``), else the learned policy with the lowest mean
    held-out TotalFailureCost at ``budget`` (an exploratory pick, said in the table)."""
    conf = [v for v in verdicts if v.family == fam and v.budget == budget
            and getattr(v, "scope", "") == "confirmatory"]
    if conf:
        return conf[0].policy
    mine = g[g["policy"].isin(learned)]
    return str(mine.sort_values("tfc")["policy"].iloc[0]) if len(mine) else ""


def headline(summary: pd.DataFrame, best: pd.DataFrame, verdicts: list[Verdict], learned: list[str],
             controls: Mapping[str, str], budget: str) -> pd.DataFrame:
    """One row per family at the primary budget: first-boundary's TotalFailureCost; the best
    simple rule (bar (b): chosen per fold on the training repositories) and the learned
    policy (:func:`headline_learner`), each with its difference to first-boundary; the
    cross-fitted limit and its difference; the learned policy's two verdicts with their
    class and MDE (:func:`verdict_class`, :func:`verdict_mde`); the family's control role.
    ``budget``: the primary budget (:func:`primary_budget`)."""
    import pandas as pd

    from ripplecp_policy.verdicts import BEST_SIMPLE

    by = {(v.family, v.policy, v.budget, v.bar or REFERENCE): v for v in verdicts}
    rows = []
    for fam, g in summary[summary["budget"] == budget].groupby("family", sort=False):
        ref = g[g["policy"] == REFERENCE]
        if ref.empty:
            continue
        ref_tfc = float(ref["tfc"].iloc[0])
        b = best[(best["family"] == fam) & (best["budget"] == budget)]
        rules = b.groupby("fold", sort=False)["chosen"].first().value_counts() if len(b) else pd.Series(dtype=int)
        b_tfc = float(b.groupby("task_id")["total_failure_cost"].mean().mean()) if len(b) else math.nan
        pol = headline_learner(fam, budget, g, verdicts, learned)
        va, vb = by.get((fam, pol, budget, REFERENCE)), by.get((fam, pol, budget, BEST_SIMPLE))
        mine = g[g["policy"] == pol]
        l_diff = va.diff if va is not None else (float(mine["diff"].iloc[0]) if len(mine) else math.nan)
        limit = float(ref["xfit_limit"].iloc[0])
        rows.append(dict(
            family=fam, budget=budget, control=controls.get(fam, ""), first_boundary=ref_tfc,
            learned_chosen=str(getattr(va, "chosen", "") or ""),  # per fold, when the learner is chosen
            best_simple_rule=" / ".join(map(str, rules.index)), best_simple=b_tfc,
            best_simple_diff=b_tfc - ref_tfc, learned=pol,
            learned_pick="confirmatory" if getattr(va, "scope", "") == "confirmatory" else "lowest held-out",
            learned_tfc=ref_tfc + l_diff, learned_diff=l_diff, limit=limit, limit_diff=limit - ref_tfc,
            verdict_a=va.status if va else "-", class_a=verdict_class(va), mde_a=verdict_mde(va),
            verdict_b=vb.status if vb else "-", class_b=verdict_class(vb), mde_b=verdict_mde(vb),
            diff_b=vb.diff if vb is not None else math.nan,
        ))
    return pd.DataFrame(rows)


def study_controls(verdicts: list[Verdict], roles: Mapping[str, str]) -> ControlsOutcome:
    """The controls' outcome of a study (:func:`ripplecp_policy.controls.controls_outcome`)
    from its verdicts and the control role of each studied family (``roles``: family ->
    "positive" / "null", :func:`experiments.study.control_roles`)."""
    from ripplecp_policy.controls import controls_outcome

    names = {role: fam for fam, role in roles.items()}
    return controls_outcome(verdicts, positive=names.get("positive", ""), null=names.get("null", ""))


def controls_line(outcome: ControlsOutcome) -> str:
    """The headline's line on the controls: the outcome's text, or, where the study ran no
    positive control, that its "no" cannot be told apart from a study that cannot say yes."""
    if outcome.positive_yes is None and outcome.null_yes is None:
        return ("controls: none among the studied families — with no positive control, a \"no\" "
                "here cannot be told apart from a study that cannot say yes")
    return outcome.text()


def format_headline(head: pd.DataFrame, outcome: ControlsOutcome) -> str:
    """The headline the main job opens with: the table of :func:`headline` in plain cells,
    then the controls' outcome (:func:`controls_line`)."""
    import pandas as pd

    def s(x: float) -> str:
        return "-" if not math.isfinite(x) else f"{x:.1f}"

    def d(x: float) -> str:
        return "" if not math.isfinite(x) else f" ({x:+.1f})"

    def short(p: str) -> str:
        for e in LEARNED:
            p = p.replace(e.name, e.key)
        return p

    def verdict(cls: str, mde: float, diff: float) -> str:
        return f"{cls}{d(diff)}" + (f", MDE {mde:.0f}" if math.isfinite(mde) else ", MDE n/a")

    if head.empty:
        return "== headline: no family has a first-boundary row at the primary budget =="
    budget = head["budget"].iloc[0]
    table = pd.DataFrame({
        "family": [f"{r.family} ({r.control})" if r.control else r.family for r in head.itertuples()],
        "first-boundary": head["first_boundary"].map(s),
        "best simple rule": [f"{r.best_simple_rule} {s(r.best_simple)}{d(r.best_simple_diff)}"
                             for r in head.itertuples()],
        "learned": [(f"{short(r.learned)}" + (f" ({short(r.learned_chosen)})" if r.learned_chosen else "")
                     + f" {s(r.learned_tfc)}{d(r.learned_diff)}") if r.learned else "-"
                    for r in head.itertuples()],
        "limit": [f"{s(r.limit)}{d(r.limit_diff)}" for r in head.itertuples()],
        "(a) learned vs first-boundary": [verdict(r.class_a, r.mde_a, r.learned_diff) for r in head.itertuples()],
        "(b) learned vs best simple": [verdict(r.class_b, r.mde_b, r.diff_b) for r in head.itertuples()],
    })
    picks = set(head["learned_pick"])
    lines = [f"== headline: TotalFailureCost per task (s) at the primary budget, {budget}, on held-out "
             "repositories ==",
             "  (in brackets: the difference to first-boundary, for (b) to the best simple rule; negative "
             "favours the policy. learned: "
             + ("the confirmatory policy" if picks == {"confirmatory"} else
                "the learned policy with the lowest held-out cost, an exploratory pick")
             + "; limit: the cross-fitted clairvoyant optimum)",
             "  " + table.to_string(index=False).replace("\n", "\n  "),
             "  " + controls_line(outcome)]
    return "\n".join(lines)


def headline_metrics(head: pd.DataFrame, verdicts: list[Verdict], seconds: float) -> dict[str, float]:
    """The parent run's handful of metrics: per family, at the primary budget, how far the
    headline's learned policy and the cross-fitted limit lie from first-boundary (s,
    negative favours them); the number of "yes" verdicts of each bar and of verdicts
    decided; and the study's seconds."""
    from ripplecp_policy.verdicts import BEST_SIMPLE

    out: dict[str, float] = {"study_seconds": seconds}
    for r in head.itertuples():
        out[f"{metric_key(r.family)}/learned_vs_first_boundary"] = r.learned_diff
        out[f"{metric_key(r.family)}/limit_vs_first_boundary"] = r.limit_diff
    for bar, key in ((REFERENCE, "a"), (BEST_SIMPLE, "b")):
        mine = [v for v in verdicts if (v.bar or REFERENCE) == bar]
        out[f"verdicts_yes/{key}"] = float(sum(v.status == "yes" for v in mine))
        out[f"verdicts_decided/{key}"] = float(sum(v.status != "refused" for v in mine))
    return out


if __name__ == "__main__":
    sys.exit(main())
