"""Where each simulated family's value lies, measured on the default study's label sets.

    python -m experiments.family_structure [--seeds 0 1 2 3 4] [--families ...] [--out DIR]

For every family and seed it simulates the label set the default matched-budget study uses
(``oracle.simulator.simulate_label_set``, full design at turn boundaries, the family's own
size) and reports, from the label set alone:

- **optimum concentration**: per task, the boundary of the clairvoyant one-checkpoint
  optimum (:func:`ripplecp_policy.pricing.optimal_placement`, uniform failures; 0 when no
  checkpoint pays); the family's most common such boundary and the share of tasks whose
  optimum lies there. A position-only rule can match the optimum on at most that share.
- **elapsed work as a guide**: Spearman correlation, over first-stratum cells (candidate t,
  fallback 0, failure f; advantage averaged over repetitions), between the advantage and
  ``cost__busy_s_since_cp`` at t - near 1 when recovery cost tracks elapsed work by
  construction (the simulator the paper's Appendix E warns about).
- **the signals that carry value**: the online features (``features.online``, no
  checkpoint before t) with the largest absolute Spearman correlation with first-stratum
  advantage, near copies of a listed one left out - a reader's check of what each family's
  docstring claims a policy could learn.

Per family the table pools the seeds (shares over all tasks of all seeds; Spearman over all
cells), with the per-seed range beside it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm.auto import tqdm

from features.row import FEATURE_NAMES
from labelsets.definitions import FIRST
from oracle.simulator.workloads import family_names
from ripplecp_cli import opt, run
from ripplecp_policy.budget import Budget

if TYPE_CHECKING:  # type names only: these load where they are used, so --help stays fast
    import pandas as pd

    from labelsets.tables import LabelSet

FAMILIES = tuple(family_names())
ELAPSED = "cost__busy_s_since_cp"


@dataclass(frozen=True)
class Args:
    """Where each simulated family's value lies: optimum concentration and elapsed work."""

    seeds: tuple[int, ...] = opt((0, 1, 2, 3, 4), min=0)
    """study seeds (each: the default study's label set of every family)"""
    families: tuple[str, ...] = opt(FAMILIES, choices=FAMILIES)
    """workload families to measure"""
    tasks_per_repo: int | None = opt(None, min=1)
    """simulated tasks per repository (default: the family's own, as the default study)"""
    top: int = opt(5, min=0, max=len(FEATURE_NAMES))
    """how many of the most value-correlated online features to list per family"""
    out: Path | None = None
    """optional folder for structure.csv and optima.csv"""


def one_checkpoint_optima(ls: LabelSet) -> pd.Series:
    """Per task, the boundary of the clairvoyant one-checkpoint optimum (0: none pays)."""
    import pandas as pd

    from ripplecp_policy.evaluation import evaluator_for

    ev = evaluator_for(ls)
    out = {}
    for t in ls.task_ids:
        placement, _ = ev.optimum(t, Budget("count", 1), "uniform")
        out[t] = int(placement[0]) if placement else 0
    return pd.Series(out, name="optimum_boundary")


def first_stratum_cells(ls: LabelSet) -> pd.DataFrame:
    """First-stratum cells (mean advantage over repetitions) with the online features at
    the candidate, computed with no checkpoint before it."""
    import pandas as pd

    from features.online import boundary_features

    lab = ls.labels[ls.labels["stratum"] == FIRST]
    cells = lab.groupby(["task_id", "candidate", "failure"], sort=True)["advantage"].mean().reset_index()
    gran = ls.tasks.set_index("task_id")["granularity"]
    feats = pd.concat([boundary_features(ls.trajectories[t], str(gran[t])) for t in cells["task_id"].unique()],
                      ignore_index=True)
    return cells.merge(feats.rename(columns={"boundary": "candidate"}), on=["task_id", "candidate"], how="left")


def spearman(x: pd.Series, y: pd.Series) -> float:
    """Spearman's rho of the finite pairs (NaN with fewer than 3 or a constant side)."""
    import numpy as np
    from scipy.stats import spearmanr

    ok = np.isfinite(x.to_numpy(float)) & np.isfinite(y.to_numpy(float))
    if ok.sum() < 3 or x[ok].nunique() < 2 or y[ok].nunique() < 2:
        return float("nan")
    return float(spearmanr(x[ok], y[ok]).statistic)


def signals(cells: pd.DataFrame, top: int, redundant: float = 0.95) -> list[tuple[str, float]]:
    """The ``top`` online features by |Spearman| with first-stratum advantage, each one
    not a near copy (|Spearman| > ``redundant`` across the cells) of one listed before it."""
    import numpy as np

    rhos = {f: spearman(cells[f], cells["advantage"]) for f in FEATURE_NAMES}
    ranked = sorted(((f, r) for f, r in rhos.items() if np.isfinite(r)), key=lambda x: -abs(x[1]))
    out: list[tuple[str, float]] = []
    for f, r in ranked:
        if len(out) == top:
            break
        if all(not abs(spearman(cells[f], cells[g])) > redundant for g, _ in out):
            out.append((f, r))
    return out


@dataclass(frozen=True)
class Structure:
    """What :func:`measure` finds: per (family, seed) rows, per-task optima, and per family
    (seeds pooled) the elapsed-work Spearman and the strongest signals."""

    per_seed: pd.DataFrame
    optima: pd.DataFrame
    pooled_rho: dict[str, float]
    strongest: dict[str, list[tuple[str, float]]]


def measure(args: Args) -> Structure:
    """Simulate each family's default label set per seed and measure it (module docstring)."""
    import pandas as pd

    from oracle.simulator import simulate_label_set

    rows, optima, strongest, pooled_rho = [], [], {}, {}
    for fam in args.families:
        pooled = []
        for seed in tqdm(args.seeds, desc=f"{fam}", leave=False):
            ls = simulate_label_set(fam, tasks_per_repo=args.tasks_per_repo, design="full",
                                    repetitions=2, seed=seed)
            opt_b = one_checkpoint_optima(ls)
            mode, count = Counter(opt_b.tolist()).most_common(1)[0]
            cells = first_stratum_cells(ls)
            pooled.append(cells.assign(seed=seed))
            rows.append(dict(family=fam, seed=seed, tasks=len(opt_b), repositories=ls.tasks["repo"].nunique(),
                             modal_boundary=mode, modal_share=count / len(opt_b),
                             spearman_elapsed=spearman(cells[ELAPSED], cells["advantage"])))
            optima.append(pd.DataFrame({"family": fam, "seed": seed, "task_id": opt_b.index,
                                        "optimum_boundary": opt_b.to_numpy()}))
        both = pd.concat(pooled, ignore_index=True)
        pooled_rho[fam] = spearman(both[ELAPSED], both["advantage"])
        strongest[fam] = signals(both, args.top)
    return Structure(pd.DataFrame(rows), pd.concat(optima, ignore_index=True), pooled_rho, strongest)


def report(m: Structure) -> str:
    """The family table (seeds pooled, per-seed range) and each family's strongest signals."""
    per_seed, optima = m.per_seed, m.optima
    lines = ["family                  tasks  modal boundary  share at it [per-seed range]   "
             f"Spearman(first-stratum advantage, {ELAPSED}) [per-seed range]"]
    for fam, g in per_seed.groupby("family", sort=False):
        o = optima[optima["family"] == fam]["optimum_boundary"]
        mode, count = Counter(o.tolist()).most_common(1)[0]
        lines.append(
            f"{fam:22s} {len(o):6d}  {mode:14d}  {count / len(o):5.2f} [{g['modal_share'].min():.2f}, "
            f"{g['modal_share'].max():.2f}]{'':14s}{m.pooled_rho[fam]:+.2f} "
            f"[{g['spearman_elapsed'].min():+.2f}, {g['spearman_elapsed'].max():+.2f}]")
    lines.append("")
    lines.append("strongest online signals of first-stratum advantage (Spearman, seeds pooled):")
    for fam, sig in m.strongest.items():
        lines.append(f"  {fam}: " + ", ".join(f"{f} {r:+.2f}" for f, r in sig))
    return "\n".join(lines)


def study(args: Args) -> int:
    m = measure(args)
    text = report(m)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        m.per_seed.to_csv(args.out / "structure.csv", index=False)
        m.optima.to_csv(args.out / "optima.csv", index=False)
        (args.out / "report.txt").write_text(text + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run(study, Args, argv, prog="python -m experiments.family_structure")


if __name__ == "__main__":
    raise SystemExit(main())
