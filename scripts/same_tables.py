"""Check that two study output folders hold the same result tables.

    python scripts/same_tables.py BEFORE_DIR AFTER_DIR [--tables summary per_task] [--rtol 1e-9]

Used to show that a refactoring keeps ``python -m experiments.matched_budget`` figures:
run the study before and after into two folders and compare. Numeric columns are
compared with a relative tolerance (floating-point sums may reorder), every other column
exactly; the first differing rows are printed. Exit status 0 when every table matches,
1 otherwise, 2 on a missing file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

#: columns that time the run itself, so differ between any two runs
TIMING_COLUMNS = ("fit_s",)


def compare(a: pd.DataFrame, b: pd.DataFrame, rtol: float) -> list[str]:
    """Human-readable differences between two tables ('' list when they match); timing
    columns (:data:`TIMING_COLUMNS`) are left out."""
    out = []
    a = a.drop(columns=[c for c in TIMING_COLUMNS if c in a.columns])
    b = b.drop(columns=[c for c in TIMING_COLUMNS if c in b.columns])
    if list(a.columns) != list(b.columns):
        out.append(f"columns differ: {list(a.columns)} vs {list(b.columns)}")
        return out
    if len(a) != len(b):
        out.append(f"row counts differ: {len(a)} vs {len(b)}")
        return out
    for col in a.columns:
        x, y = a[col], b[col]
        xn, yn = pd.to_numeric(x, errors="coerce"), pd.to_numeric(y, errors="coerce")
        textual = (xn.isna() & (x != "")) | (yn.isna() & (y != ""))
        same = (x == y).to_numpy().copy()
        num = ~textual.to_numpy()
        same[num] = np.isclose(xn.to_numpy(float)[num], yn.to_numpy(float)[num], rtol=rtol,
                               atol=0.0, equal_nan=True)
        for i in np.flatnonzero(~same)[:5]:
            key = ", ".join(f"{k}={a.at[i, k]}" for k in ("family", "policy", "budget", "task_id")
                            if k in a.columns)
            out.append(f"row {i} ({key}) {col}: {x.iloc[i]!r} vs {y.iloc[i]!r}")
        if (~same).sum() > 5:
            out.append(f"... {int((~same).sum()) - 5} more rows differ in {col}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python scripts/same_tables.py", description=__doc__.split("\n")[0])
    p.add_argument("before", type=Path, help="folder of the reference run")
    p.add_argument("after", type=Path, help="folder of the run to check")
    p.add_argument("--tables", nargs="+", default=["summary", "per_task"],
                   help="CSV tables to compare (default: summary per_task)")
    p.add_argument("--rtol", type=float, default=1e-9, help="relative tolerance for numbers")
    a = p.parse_args(argv)
    bad = 0
    for name in a.tables:
        fa, fb = a.before / f"{name}.csv", a.after / f"{name}.csv"
        for f in (fa, fb):
            if not f.is_file():
                print(f"same_tables: {f}: no such file", file=sys.stderr)
                return 2
        diffs = compare(*(pd.read_csv(f, dtype=str, keep_default_na=False) for f in (fa, fb)), a.rtol)
        print(f"{name}: {'same' if not diffs else f'{len(diffs)} difference(s)'}")
        for d in diffs:
            print(f"  {d}")
        bad += bool(diffs)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
