"""The sparse design validated where the truth is known: full tables sub-sampled.

    python -m experiments.design_check                  # every simulated family + the shipped set
    python -m experiments.design_check --quick          # CI-sized

For every simulated family (full tables from the simulator) and every family of the shipped
real set (``llm-free``, executed full tables), and for budgets of 10 %, 20 % and 30 % of the
full design's branches, the sparse design's rule (:class:`labelsets.recovery_model.
SparseDesign`) draws cells from the executed table, keeping one repetition each
(:func:`labelsets.recovery_model.subsample`); the matched-budget study
(:func:`experiments.matched_budget.run_fold`: every baseline and learned policy, leave one
repository out) then runs on the sparse set - priced by the cross-fitted recovery model with
the doubly-robust correction - and on the full set. Per family and budget it prints:

- **price error**: per (policy, budget), the sparse study's mean priced cost (objective,
  seconds) against the full table's price of the *same placements*; the mean absolute error
  over policies, in seconds and as a share of the mean cost;
- **verdict agreement**: the share of the study's verdicts (both bars of every learned
  policy, Holm across the study, as ``experiments.matched_budget`` prints them; and every
  online policy against first-boundary) that say the same as the full design's;
- **coverage**: the share of the sparse study's 95 % intervals of (policy - first-boundary)
  that contain the full table's difference of the same placements.

Target (issue 29): at <= 25 % of the branches, verdicts agree on >= 95 % of cells and
coverage >= 0.93. Several draws per budget (``--draws``) average over the design's randomness.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from experiments import matched_budget as mb
from experiments.study import check_families, load_label_sets, sized
from features.files import write_text_atomic
from labelsets.definitions import table_cell_id
from ripplecp_cli import opt, progress, run
from ripplecp_policy.budget import check_budget_specs

if TYPE_CHECKING:
    import pandas as pd

    from labelsets.tables import LabelSet

PROG = "python -m experiments.design_check"
REFERENCE = mb.REFERENCE
TARGET_AGREEMENT, TARGET_COVERAGE, TARGET_SHARE = 0.95, 0.93, 0.25


def check_fractions(xs: tuple[float, ...]) -> None:
    """``check=`` of ``--fractions``: each in (0, 1]."""
    for x in xs:
        if not 0 < x <= 1:
            raise ValueError(f"a fraction of the full design's branches must be in (0, 1], got {x}")


@dataclass(frozen=True)
class Args:
    """The sparse design validated against full tables (module docstring)."""

    fractions: tuple[float, ...] = opt((0.1, 0.2, 0.3), check=check_fractions, metavar="X")
    """sparse budgets as fractions of the full design's branches"""
    families: tuple[str, ...] = opt(mb.FAMILIES, metavar="F")
    """simulated families (full tables from the simulator)"""
    shipped: bool = True
    """also the shipped real label set's families (llm-free)"""
    draws: int = opt(2, min=1)
    """sparse draws per family and fraction (the design's randomness)"""
    budgets: tuple[str, ...] = opt(("count:1", "count:2"), check=check_budget_specs, metavar="SPEC")
    """checkpoint budgets of the matched-budget study"""
    repos: int | None = opt(None, min=2)
    """simulated repositories per family (default: the family's own)"""
    tasks_per_repo: int | None = opt(None, min=1)
    """simulated tasks per repository (default: the family's own)"""
    learned: bool = True
    """include the learned policies (their verdicts are the study's)"""
    full_models: bool = False
    """the learned policies at the main job's sizes (default: matched_budget --quick's
    smaller models; the full and sparse studies always use the same)"""
    shares: tuple[float, ...] = opt((0.5, 0.25, 0.25), metavar="S")
    """the sparse design's shares of pristine, adjacent and longer cells"""
    seed: int = opt(0, min=0)
    """seed of the simulator, the policies and the first draw"""
    n_resamples: int = opt(2_000, min=1)
    """bootstrap resamples of every interval"""
    quick: bool = False
    """CI-sized: one small family, one fraction and draw, no shipped set, no learned policies"""
    adaptive_share: float = opt(0.0, min=0.0, max=0.9)
    """share of each budget spent in one adaptive round after the first pass (the cells
    labelsets.recovery_model.next_cells chooses, their measurement read from the full table)"""
    jobs: int = opt(1, min=1)
    """worker processes for the folds (results do not depend on it)"""
    out: str = opt("out/design_check", metavar="PATH")
    """where the table (CSV, text) goes"""

    #: --quick: one small family, one fraction and draw, no shipped set, no learned policies
    QUICK: ClassVar[Mapping[str, Any]] = dict(
        families=("long-horizon",), fractions=(0.2,), draws=1, shipped=False, learned=False,
        repos=3, tasks_per_repo=3, n_resamples=300)

    def __post_init__(self) -> None:
        check_families(self.families)
        if len(self.shares) != 3 or any(s < 0 for s in self.shares) or sum(self.shares) <= 0:
            raise ValueError(f"argument --shares: three numbers >= 0, not all 0, got {list(self.shares)}")


#: --quick's sizes (tests read them here)
QUICK = Args.QUICK


#: the shipped real set whose executed full tables are the ground truth (the default shipped
#: set, llm-free-sparse, is itself sparse: checked against it, a sparse draw of a sparse set)
GROUND_TRUTH = "llm-free"


def label_sets(args: Args) -> dict[str, LabelSet]:
    """Full label sets (:func:`experiments.study.load_label_sets`, 2 repetitions per cell):
    the simulated families, then the families of the shipped full set :data:`GROUND_TRUTH`.
    A sparse one is refused: it has no full table to be the truth."""
    from labelsets.recovery_model import is_sparse

    sets = load_label_sets(args, repetitions=2, shipped=args.shipped,  # type: ignore[arg-type]
                           shipped_set=GROUND_TRUTH)
    for fam, ls in sets.items():
        if is_sparse(ls):
            raise ValueError(f"{fam}: a sparse label set is no ground truth for the design check "
                             "(it needs every cell executed)")
    return sets


def study(data: dict[str, LabelSet], args: Args, mb_args: mb.Args, desc: str) -> pd.DataFrame:
    """The matched-budget study's per-task rows (every family, every fold), best-simple rows
    included (``experiments.matched_budget.run_fold``)."""
    import pandas as pd

    from ripplecp_policy.policy import fold_settings
    from ripplecp_policy.splits import leave_one_repo_out

    protos, _ = mb.policies_for(mb_args)
    jobs = [(fam, fold) for fam, ls in data.items() for fold in leave_one_repo_out(ls)]
    calls = [(fam, data[fam], fold, protos,
              fold_settings(args.budgets, data[fam].subset(fold.train_tasks), mb_args.hazard), mb_args)
             for fam, fold in jobs]
    if args.jobs <= 1:
        results = (mb.run_fold(*c) for c in calls)
    else:
        from joblib import Parallel, delayed

        results = Parallel(n_jobs=args.jobs, return_as="generator")(delayed(mb.run_fold)(*c) for c in calls)
    rows = [res for res, _ in progress(results, total=len(calls), desc=desc, leave=False)]
    return pd.concat(rows, ignore_index=True)


def verdict_words(res: pd.DataFrame, learned: list[str], n_resamples: int) -> dict[tuple, tuple[str, float, float, float]]:
    """(kind, family, policy, budget, bar) -> (word, diff, low, high): both bars of every
    learned policy (Holm across the study) and every online policy against first-boundary."""
    from ripplecp_policy.verdicts import BEST_SIMPLE, compare, two_bar_verdicts

    out: dict[tuple, tuple[str, float, float, float]] = {}
    if learned:
        for v in two_bar_verdicts(res, learned, n_resamples=n_resamples):
            out[("two-bar", v.family, v.policy, v.budget, v.bar)] = (v.status, v.diff, v.low, v.high)
    plain = res[res["policy"] != BEST_SIMPLE].drop(columns="chosen", errors="ignore")
    for fam, r in plain.groupby("family", sort=False):
        for v in compare(r, REFERENCE, n_resamples=n_resamples):
            out[("vs-first", str(fam), v.policy, v.budget, REFERENCE)] = (v.status, v.diff, v.low, v.high)
    return out


def truth_prices(res: pd.DataFrame, full: dict[str, LabelSet]) -> pd.DataFrame:
    """``res`` with each placement re-priced on the full table (``true_objective_s``,
    ``true_total_failure_cost``)."""
    from ripplecp_policy.evaluation import Evaluator
    from ripplecp_policy.pricing import placement_metrics

    evs = {fam: Evaluator(ls) for fam, ls in full.items()}
    obj, tfc = [], []
    for fam, tid, cps in zip(res["family"], res["task_id"], res["checkpoints"], strict=True):
        tc = evs[fam].costs(tid)
        m = placement_metrics(tc, [int(x) for x in str(cps).split()] if str(cps).strip() else [])
        obj.append(m["objective_s"])
        tfc.append(m["total_failure_cost"])
    return res.assign(true_objective_s=obj, true_total_failure_cost=tfc)


def adaptive_round(sparse: LabelSet, full: LabelSet, n_cells: int) -> LabelSet:
    """One adaptive round replayed on an executed full table: ``next_cells`` chooses
    ``n_cells`` cells on the sparse set, each adds its first executed repetition."""
    import pandas as pd

    from labelsets.recovery_model import next_cells
    from labelsets.tables import LabelSet

    cells = next_cells(sparse, n_cells)
    keep = pd.DataFrame(cells, columns=["task_id", "restore_point", "failure"])
    rec = full.recovery[full.recovery["role"] == "table"].merge(keep)
    rec = rec.sort_values(["task_id", "restore_point", "failure", "repetition"], kind="stable")
    rec = rec[rec.groupby(["task_id", "restore_point", "failure"]).cumcount() < 1]
    prov = {**sparse.provenance, "sparse": {**sparse.provenance["sparse"], "adaptive": sorted(
        table_cell_id(t, r, f) for t, r, f in cells)}}
    return LabelSet(sparse.tasks, sparse.checkpoints,
                    pd.concat([sparse.recovery, rec], ignore_index=True), sparse.labels,
                    sparse.trajectories, prov)


def main(argv: list[str] | None = None) -> int:
    return run(check, Args, argv, prog=PROG)


def check(args: Args) -> int:
    import pandas as pd

    from labelsets.recovery_model import SparseDesign, subsample
    from ripplecp_policy.verdicts import BEST_SIMPLE, paired_contrast

    args = sized(args)
    t0 = time.perf_counter()
    out = Path(args.out)
    mb_args = mb.sized(mb.Args(quick=not args.full_models, learned=args.learned, random_seeds=1, mlflow=False,
                               seed=args.seed, n_resamples=args.n_resamples, jobs=1))
    _, learned = mb.policies_for(mb_args)
    design = SparseDesign(shares=tuple(args.shares), repetitions=1)  # type: ignore[arg-type]

    # 1. Full tables and the full design's study (the truth).
    full = label_sets(args)
    res_full = study(full, args, mb_args, "full design")
    words_full = verdict_words(res_full, learned, args.n_resamples)
    rows: list[dict] = []
    verdict_rows: list[dict] = []
    # 2. Sparse draws at every fraction, each studied the same way.
    for frac in args.fractions:
        for draw in range(args.draws):
            sparse = {}
            for i, (fam, ls) in enumerate(full.items()):
                n_cells = max(1, round(frac * len(ls.recovery)))
                n_adaptive = round(args.adaptive_share * n_cells)
                sparse[fam] = subsample(ls, n_cells - n_adaptive, seed=args.seed + 1000 * draw + i,
                                        design=design)
                if n_adaptive:
                    sparse[fam] = adaptive_round(sparse[fam], ls, n_adaptive)
            res = truth_prices(study(sparse, args, mb_args, f"sparse {frac:.0%} draw {draw}"), full)
            words = verdict_words(res, learned, args.n_resamples)
            verdict_rows += [dict(kind=k[0], family=k[1], policy=k[2], budget=k[3], bar=k[4],
                                  fraction=frac, draw=draw, sparse=w[0], full=words_full[k][0])
                             for k, w in words.items() if k in words_full]
            plain = res[res["policy"] != BEST_SIMPLE]
            for fam in full:
                r = plain[plain["family"] == fam]
                g = r.groupby(["policy", "budget"], sort=False)[["objective_s", "true_objective_s"]].mean()
                err = (g["objective_s"] - g["true_objective_s"]).abs()
                # coverage: the sparse interval of (policy - first-boundary) against the truth
                covered, n_int = 0, 0
                for (kind, f, pol, budget, _bar), (_w, _d, low, high) in words.items():
                    if kind != "vs-first" or f != fam or not math.isfinite(low):
                        continue
                    rr = r[r["budget"] == budget]
                    truth = paired_contrast(
                        rr[rr["policy"] == pol].assign(total_failure_cost=rr["true_total_failure_cost"]),
                        rr[rr["policy"] == REFERENCE].assign(total_failure_cost=rr["true_total_failure_cost"]),
                        n_resamples=1)
                    if truth is None:
                        continue
                    n_int += 1
                    covered += int(low - 1e-9 <= truth["diff"] <= high + 1e-9)
                agree = {k: [] for k in ("two-bar", "vs-first")}
                for key, (w, *_rest) in words.items():
                    if key[1] == fam and key in words_full:
                        agree[key[0]].append(w == words_full[key][0])
                rows.append(dict(
                    family=fam, fraction=frac, draw=draw,
                    branches=len(sparse[fam].recovery), full_branches=len(full[fam].recovery),
                    price_mae_s=float(err.mean()),
                    price_rel=float(err.mean() / g["true_objective_s"].abs().mean()),
                    agree_two_bar_n=len(agree["two-bar"]), agree_two_bar=sum(agree["two-bar"]),
                    agree_vs_first_n=len(agree["vs-first"]), agree_vs_first=sum(agree["vs-first"]),
                    covered=covered, intervals=n_int,
                ))
            out.mkdir(parents=True, exist_ok=True)  # every finished draw is kept
            write_text_atomic(out / "design_check_draws.csv", pd.DataFrame(rows).to_csv(index=False))
            write_text_atomic(out / "design_check_verdicts.csv",
                              pd.DataFrame(verdict_rows).to_csv(index=False))
    table = pd.DataFrame(rows)
    report = summarise(table)
    write_text_atomic(out / "design_check.csv", report.to_csv(index=False))
    text = format_report(report, table)
    v = pd.DataFrame(verdict_rows)
    if len(v):
        differ = v[v["sparse"] != v["full"]]
        text += (f"\nverdicts that differ: {len(differ)} of {len(v)}; full 'yes' -> sparse 'no': "
                 f"{int(((differ['full'] == 'yes') & (differ['sparse'] == 'no')).sum())}, full 'no' -> "
                 f"sparse 'yes': {int(((differ['full'] == 'no') & (differ['sparse'] == 'yes')).sum())}, "
                 f"other (refused): {int((~differ['full'].isin(['yes', 'no']) | ~differ['sparse'].isin(['yes', 'no'])).sum())}")
    write_text_atomic(out / "design_check.txt", text + "\n")
    print(text)
    print(f"outputs in {out}/ ; took {time.perf_counter() - t0:.1f} s wall")
    return 0


def summarise(table: pd.DataFrame) -> pd.DataFrame:
    """Per family and fraction (draws pooled), and over every family per fraction."""
    import pandas as pd

    def agg(g: pd.DataFrame) -> pd.Series:
        def share(k: str, n: str) -> float:
            return float(g[k].sum() / g[n].sum()) if g[n].sum() else math.nan
        return pd.Series(dtype=object, data={
            "branch_share": float(g["branches"].sum() / g["full_branches"].sum()),
            "price_mae_s": float(g["price_mae_s"].mean()), "price_rel": float(g["price_rel"].mean()),
            "agree_two_bar": share("agree_two_bar", "agree_two_bar_n"),
            "n_two_bar": g["agree_two_bar_n"].sum(),
            "agree_vs_first": share("agree_vs_first", "agree_vs_first_n"),
            "n_vs_first": int(g["agree_vs_first_n"].sum()),
            "coverage": share("covered", "intervals"), "n_intervals": int(g["intervals"].sum()),
        })
    per = table.groupby(["family", "fraction"], sort=False).apply(agg, include_groups=False).reset_index()
    every = table.groupby("fraction", sort=True).apply(agg, include_groups=False).reset_index()
    every.insert(0, "family", "all")
    return pd.concat([per, every], ignore_index=True)


def format_report(report: pd.DataFrame, table: pd.DataFrame) -> str:
    lines = ["family                  budget  branches  price error (s, rel)  verdicts agree "
             "(two-bar; vs first-boundary)   coverage"]
    for r in report.itertuples():
        tb = "-" if not r.n_two_bar else f"{r.agree_two_bar:.3f} of {int(r.n_two_bar)}"
        lines.append(f"{r.family:<22} {r.fraction:>6.0%}  {r.branch_share:>7.1%}  "
                     f"{r.price_mae_s:>9.2f} ({r.price_rel:>5.1%})   {tb:>16}; "
                     f"{r.agree_vs_first:.3f} of {int(r.n_vs_first):<5}   {r.coverage:.3f} of {int(r.n_intervals)}")
    low = table[table["fraction"] <= TARGET_SHARE]
    if len(low):
        n_v = low["agree_two_bar_n"].sum() + low["agree_vs_first_n"].sum()
        agree = (low["agree_two_bar"].sum() + low["agree_vs_first"].sum()) / n_v if n_v else math.nan
        cov = low["covered"].sum() / low["intervals"].sum() if low["intervals"].sum() else math.nan
        ok = agree >= TARGET_AGREEMENT and cov >= TARGET_COVERAGE
        lines.append(f"at <= {TARGET_SHARE:.0%} of the branches: verdicts agree on {agree:.3f} of {n_v} "
                     f"(target >= {TARGET_AGREEMENT}), coverage {cov:.3f} "
                     f"(target >= {TARGET_COVERAGE}): {'met' if ok else 'NOT met'}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
