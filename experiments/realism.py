"""How well each simulated workload family, fitted to a real one, predicts held-out real labels.

    python -m experiments.realism                       # the shipped real label set
    python -m experiments.realism --labels runs/llm-free/labelset --seed 1

Each real family of the label set is paired with the simulated family meant to stand for it
(:data:`COUNTERPART`: repair -> swe-pilot, depres -> dependency-resolution, cbuild ->
multi-stage-build, migrate -> long-horizon). Leave-one-repository-out over the real
family (a family needs two repositories): the simulated family is *fitted* to the training
repositories by three scales (recovery seconds by the ratio of mean nominal seconds, creation and restore seconds by
the ratios of their means), then both are summarised by what the matched-budget study
depends on, per task, from the recovery tables:

``j_scratch_s``      mean recovery from the pristine start, J(0, f)
``first_adv_s``      mean advantage of the first checkpoint, A(1, 0, f), f >= 2
``additional_adv_s`` mean advantage of an additional one, A(t, t-1, f), 2 <= t < f
``first_optimal``    share of tasks whose best single checkpoint is the first boundary
``regret_first_s``   what first-boundary loses to the best single checkpoint

The fitted simulation predicts each quantity: its mean over simulated tasks, and the
interval in which the mean of a repository of as many tasks drawn from the simulation falls
(:func:`repository_interval`); the held-out repository's real tasks give the observed value.
The report prints, per family and quantity, the real value and the prediction (means over
folds), the mean absolute error and in how many folds the real value fell inside the
prediction's interval. :func:`realism_report` returns the per-fold table.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from experiments.study import check_labels, read_label_set
from ripplecp_cli import opt, run
from ripplecp_policy.budget import Budget

if TYPE_CHECKING:  # type names only: these load where they are used, so --help stays fast
    import numpy as np
    import pandas as pd

    from labelsets.tables import LabelSet
    from ripplecp_policy.pricing import TaskCosts

__all__ = ["COUNTERPART", "QUANTITIES", "fit_scales", "format_report", "realism_report",
           "repository_interval", "task_quantities"]

#: real family -> the simulated family meant to stand for it
COUNTERPART: dict[str, str] = {"repair": "swe-pilot", "depres": "dependency-resolution",
                               "cbuild": "multi-stage-build", "migrate": "long-horizon"}
QUANTITIES = ("j_scratch_s", "first_adv_s", "additional_adv_s", "first_optimal", "regret_first_s")


@dataclass(frozen=True)
class Args:
    labels: str = opt("shipped", check=check_labels, metavar="DIR|NAME")
    """the real label set: a shipped name (shipped = llm-free) or a label-set directory"""
    seed: int = opt(0, min=0)
    """seed of the simulated label sets"""
    tasks_per_repo: int = opt(4, min=1)
    """simulated tasks per repository"""
    n_resamples: int = opt(2000, min=100)
    """task-bootstrap resamples of every prediction interval"""
    out: str | None = None
    """optional CSV of the per-fold table"""


def _costs(ls: LabelSet, task_id: str) -> TaskCosts:
    from ripplecp_policy.pricing import TaskCosts

    rt = ls.recovery_table(task_id)
    return TaskCosts.build(task_id, rt.recovery, rt.checkpoints)


def task_quantities(tc: TaskCosts, scale: Mapping[str, float] | None = None) -> dict[str, float]:
    """The quantities of one task, its recovery seconds, creation and restore seconds
    multiplied by ``scale`` (``recovery``, ``creation``, ``restore``; 1 when absent)."""
    import numpy as np

    from labelsets.definitions import advantage, charged_cp
    from ripplecp_policy.pricing import optimal_placement, placement_objective

    s = {"recovery": 1.0, "creation": 1.0, "restore": 1.0, **(scale or {})}
    tc.J = tc.J * s["recovery"]
    tc.creation_s = tc.creation_s * s["creation"]
    tc.restore_latency = tc.restore_latency * s["restore"]
    fails = [int(f) for f in tc.failures]
    col = {f: k for k, f in enumerate(fails)}

    def adv(t: int, c: int, f: int) -> float:
        return advantage(tc.J[c, col[f]], charged_cp(tc.J[t, col[f]], tc.creation_s[t]))

    first = [adv(1, 0, f) for f in fails if f >= 2]
    extra = [adv(t, t - 1, f) for f in fails for t in range(2, f)]
    b = tc.n_boundaries
    single = [placement_objective(tc, [k]) for k in range(1, b + 1)] if b else []
    best = optimal_placement(tc, Budget("count", 1))[1] if b else math.nan
    return {
        "j_scratch_s": float(np.mean([tc.J[0, col[f]] for f in fails])),
        "first_adv_s": float(np.mean(first)) if first else math.nan,
        "additional_adv_s": float(np.mean(extra)) if extra else math.nan,
        "first_optimal": float(bool(single) and int(np.argmin(single)) == 0),
        "regret_first_s": float(single[0] - best) if single else math.nan,
    }


def fit_scales(real: LabelSet, sim: LabelSet) -> dict[str, float]:
    """The three scales that fit ``sim`` to ``real`` (ratios of means; see module docstring)."""
    def ratio(a: pd.Series, b: pd.Series) -> float:
        a, b = a.astype(float), b.astype(float)
        return float(a.mean() / b.mean()) if len(b) and b.mean() > 0 else 1.0

    return {"recovery": ratio(real.tasks["nominal_s"], sim.tasks["nominal_s"]),
            "creation": ratio(real.checkpoints["creation_s"], sim.checkpoints["creation_s"]),
            "restore": ratio(real.checkpoints["restore_latency_s"].dropna(),
                             sim.checkpoints["restore_latency_s"].dropna())}


def _frame(ls: LabelSet, scale: Mapping[str, float] | None = None) -> pd.DataFrame:
    import pandas as pd

    rows = []
    for t in ls.task_ids:
        tc = _costs(ls, t)
        if tc.n_boundaries and tc.is_full():
            rows.append({"task_id": t, **task_quantities(tc, scale)})
    return pd.DataFrame(rows)


def repository_interval(values: np.ndarray, n: int, n_resamples: int, seed: int,
                        level: float = 0.95) -> tuple[float, float]:
    """Where the mean of a repository of ``n`` tasks drawn from ``values`` falls (percentile
    interval of ``n_resamples`` resampled means): the prediction a held-out repository meets."""
    import numpy as np

    if len(values) < 2 or n < 1:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(n_resamples, n))].mean(axis=1)
    a = (1 - level) / 2
    return float(np.quantile(means, a)), float(np.quantile(means, 1 - a))


def realism_report(real: LabelSet, *, seed: int = 0, tasks_per_repo: int = 4,
                   n_resamples: int = 2000) -> pd.DataFrame:
    """One row per (real family, held-out repository, quantity): the real value, the fitted
    simulation's prediction and its interval, and the scales fitted on the other repositories."""
    import pandas as pd

    from oracle.simulator import simulate_label_set

    rows = []
    for fam in sorted(set(real.tasks["family"]) & set(COUNTERPART)):
        data = real.subset(real.tasks.loc[real.tasks["family"] == fam, "task_id"])
        if len(data.repos) < 2:  # nothing left to fit on when the only repository is held out
            continue
        sim = simulate_label_set(COUNTERPART[fam], tasks_per_repo=tasks_per_repo, design="full",
                                 seed=seed)
        for held in data.repos:
            train = data.subset(data.tasks.loc[data.tasks["repo"] != held, "task_id"])
            test = data.subset(data.tasks.loc[data.tasks["repo"] == held, "task_id"])
            scale = fit_scales(train, sim)
            pred, obs = _frame(sim, scale), _frame(test)
            for q in QUANTITIES:
                p = pred[q].dropna().to_numpy()
                o = obs[q].dropna()
                low, high = repository_interval(p, len(o), n_resamples, seed)
                rows.append(dict(
                    family=fam, simulated=COUNTERPART[fam], held_out=held, quantity=q,
                    real=float(o.mean()) if len(o) else math.nan, n_real=len(o),
                    predicted=float(p.mean()) if len(p) else math.nan, low=low, high=high,
                    **{f"scale_{k}": v for k, v in scale.items()}))
    out = pd.DataFrame(rows)
    if len(out):
        out["abs_error"] = (out["predicted"] - out["real"]).abs()
        out["inside"] = (out["real"] >= out["low"]) & (out["real"] <= out["high"])
    return out


def format_report(df: pd.DataFrame) -> str:
    """Per family and quantity: real and predicted (means over folds), |error|, folds inside."""
    import pandas as pd

    lines = []
    for (fam, simf), g in df.groupby(["family", "simulated"], sort=True):
        sc = g.groupby("held_out")[["scale_recovery", "scale_creation", "scale_restore"]].first().mean()
        lines.append(f"== {fam} (real, {g['held_out'].nunique()} held-out repositories) <- {simf} "
                     f"(simulated, fitted: recovery x{sc['scale_recovery']:.3g}, creation "
                     f"x{sc['scale_creation']:.3g}, restore x{sc['scale_restore']:.3g}) ==")
        table = []
        for q in QUANTITIES:
            h = g[g["quantity"] == q]
            table.append({"quantity": q, "real": f"{h['real'].mean():.3g}",
                          "predicted": f"{h['predicted'].mean():.3g}",
                          "mean |error|": f"{h['abs_error'].mean():.3g}",
                          "inside interval": f"{int(h['inside'].sum())}/{len(h)} folds"})
        lines.append("  " + pd.DataFrame(table).to_string(index=False).replace("\n", "\n  "))
    return "\n".join(lines)


def main(args: Args) -> int:
    real = read_label_set(args.labels)
    df = realism_report(real, seed=args.seed, tasks_per_repo=args.tasks_per_repo,
                        n_resamples=args.n_resamples)
    if df.empty:
        raise ValueError(f"{args.labels}: no family of the label set has a simulated counterpart "
                         f"({', '.join(COUNTERPART)})")
    print(format_report(df))
    if args.out:
        df.to_csv(args.out, index=False)
        print(f"per-fold table: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main, Args, prog="python -m experiments.realism", description=__doc__))
