"""experiments.stability: verdict stability and cross-fitted regret read from run folders."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from experiments import stability
from ripplecp_policy.verdicts import BEST_SIMPLE


def _run(folder: Path, statuses: dict[tuple[str, str, str, str], str], regret: float) -> Path:
    folder.mkdir()
    rows = [dict(family=f, budget=b, policy=p, bar=bar, status=s)
            for (f, b, p, bar), s in statuses.items()]
    pd.DataFrame(rows).to_csv(folder / "verdicts.csv", index=False)
    pols = sorted({p for _, _, p, _ in statuses})
    summ = [dict(family="fam", policy=p, budget="1ckpt", role="online", xfit_regret=regret)
            for p in pols]
    summ.append(dict(family="fam", policy="first-boundary", budget="1ckpt", role="online",
                     xfit_regret=99.0))  # a baseline: not a learned policy, left out
    pd.DataFrame(summ).to_csv(folder / "summary.csv", index=False)
    return folder


def test_fraction_identical_and_regret_over_seeds(tmp_path: Path, capsys) -> None:
    a = {("fam", "1ckpt", "xgb", "first-boundary"): "yes",
         ("fam", "1ckpt", "xgb", BEST_SIMPLE): "no",
         ("fam", "2ckpt", "xgb", "first-boundary"): "no",
         ("fam", "1ckpt", "time-tuned", "first-boundary"): "yes"}  # a baseline: left out
    b = dict(a)
    b[("fam", "1ckpt", "xgb", "first-boundary")] = "no"  # flips
    r0 = _run(tmp_path / "s0", a, regret=1.0)
    r1 = _run(tmp_path / "s1", b, regret=3.0)
    v, learned = stability.load([r0, r1])
    table = stability.stability(v).set_index("bar")
    assert table.loc["first-boundary", "cells"] == 2 and table.loc["first-boundary", "identical"] == 1
    assert table.loc[BEST_SIMPLE, "fraction identical"] == 1.0
    assert table.loc["both", "fraction identical"] == pytest.approx(2 / 3)
    assert set(learned["policy"]) == {"xgb"}
    assert stability.main([str(r0), str(r1)]) == 0
    out = capsys.readouterr().out
    assert "0.667" in out and "2.00" in out  # mean regret over the two runs


def test_a_folder_that_is_not_a_run_is_one_line(tmp_path: Path, capsys) -> None:
    (tmp_path / "x").mkdir()
    r0 = _run(tmp_path / "s0", {("f", "1ckpt", "p", BEST_SIMPLE): "no"}, 0.0)
    assert stability.main([str(r0), str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "x/verdicts.csv: no such file" in err[0]
    with pytest.raises(SystemExit) as exc:
        stability.main([str(r0)])
    assert exc.value.code == 2 and "at least 2 runs" in capsys.readouterr().err
