"""How stable are a matched-budget study's verdicts across seeds? Read from the studies' own outputs.

    python -m experiments.matched_budget --seed 0 --out runs/mb_s0     # ... one per seed
    python -m experiments.stability runs/mb_s0 runs/mb_s1 runs/mb_s2 runs/mb_s3 runs/mb_s4

Each folder is the ``--out`` of one ``python -m experiments.matched_budget`` run
(``verdicts.csv``, ``summary.csv``); the runs must study the same families, budgets and
policies under different seeds. It prints, per bar ((a) beats first-boundary, (b) beats the
best simple baseline chosen on the training folds) and over both:

- the verdicts per seed (how many "yes", "no", "refused");
- the **fraction of verdicts identical across seeds**: of the (family, budget, learned
  policy, bar) cells present in every run, the share whose verdict is the same in all;
- per learned policy, the **cross-fitted regret** (TotalFailureCost minus the cross-fitted
  limit, ``xfit_regret`` in ``summary.csv``), mean over families and budgets, per seed and
  over seeds, and per family (mean over budgets and seeds).

Nothing is recomputed: it reads what each study wrote, so it cannot disagree with them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ripplecp_cli import CommandLineError, opt, run

if TYPE_CHECKING:  # type names only: these load where they are used, so --help stays fast
    import pandas as pd

PROG = "python -m experiments.stability"
CELL = ["family", "budget", "policy", "bar"]


def _read(folder: Path, name: str, need: list[str]) -> pd.DataFrame:
    import pandas as pd

    path = folder / name
    if not path.is_file():
        raise CommandLineError(f"{path}: no such file (is {folder} the --out of a matched-budget run?)")
    df = pd.read_csv(path)
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise CommandLineError(f"{path}: no column {missing[0]!r}")
    return df


def check_runs(values: tuple[str, ...]) -> None:
    if len(values) < 2:
        raise ValueError("needs the output folders of at least 2 runs")


@dataclass(frozen=True)
class Args:
    """Verdict stability and cross-fitted regret across the seeds of matched-budget runs."""

    runs: tuple[str, ...] = opt((), positional=True, check=check_runs, metavar="DIR")
    """the --out folders of matched-budget runs that differ only in --seed"""


def load(runs: list[Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The learned policies' verdicts and summary rows of every run (the policies that face
    bar (b); the baselines' own verdicts against first-boundary are left out), with a
    ``run`` column (the folder name)."""
    import pandas as pd

    from ripplecp_policy.verdicts import BEST_SIMPLE

    verdicts, summaries = [], []
    for folder in runs:
        v = _read(folder, "verdicts.csv", [*CELL, "status"])
        learned = set(v.loc[v["bar"] == BEST_SIMPLE, "policy"])  # only learned policies face bar (b)
        verdicts.append(v[v["policy"].isin(learned)].assign(run=folder.name))
        s = _read(folder, "summary.csv", ["family", "policy", "budget", "role", "xfit_regret"])
        summaries.append(s[s["policy"].isin(learned)].assign(run=folder.name))
    return pd.concat(verdicts, ignore_index=True), pd.concat(summaries, ignore_index=True)


def stability(verdicts: pd.DataFrame) -> pd.DataFrame:
    """Per bar and over both: cells present in every run, and the share identical in all."""
    import pandas as pd

    n_runs = verdicts["run"].nunique()
    per_cell = verdicts.groupby(CELL)["status"].agg(["count", "nunique"]).reset_index()
    full = per_cell[per_cell["count"] == n_runs]
    rows = []
    for bar, g in [*full.groupby("bar"), ("both", full)]:
        same = int((g["nunique"] == 1).sum())
        rows.append({"bar": bar, "cells": len(g), "identical": same,
                     "fraction identical": same / len(g) if len(g) else float("nan")})
    return pd.DataFrame(rows)


def study(a: Args) -> int:
    runs = [Path(r) for r in a.runs]
    verdicts, learned = load(runs)
    counts = (verdicts.groupby(["bar", "run"])["status"].value_counts().unstack(fill_value=0)
              .reset_index())
    print("verdicts per seed (run) and bar:")
    print(counts.to_string(index=False))
    print()
    print("verdicts identical across every run:")
    print(stability(verdicts).to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print()
    regret = learned.pivot_table(index="policy", columns="run", values="xfit_regret", aggfunc="mean")
    regret["mean over runs"] = regret.mean(axis=1)
    print("cross-fitted regret, s (mean over families and budgets):")
    print(regret.to_string(float_format=lambda x: f"{x:.2f}"))
    print()
    by_family = learned.pivot_table(index="policy", columns="family", values="xfit_regret",
                                    aggfunc="mean")
    print("cross-fitted regret per family, s (mean over budgets and runs):")
    print(by_family.to_string(float_format=lambda x: f"{x:.2f}"))
    return 0


def main(argv: list[str] | None = None) -> int:
    return run(study, Args, argv, prog=PROG)


if __name__ == "__main__":
    raise SystemExit(main())
