"""``python -m experiments.design_check`` runs small (the real script, --quick) and prints its
table: price error, verdict agreement and coverage per family and budget."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from experiments.design_check import Args, main


def test_design_check_quick_prints_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quick", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "verdicts agree" in out and "at <= 25% of the branches" in out
    table = pd.read_csv(tmp_path / "design_check.csv")
    row = table[(table["family"] == "long-horizon") & (table["fraction"] == 0.2)].iloc[0]
    assert 0.15 < row["branch_share"] <= 0.2 + 1e-9
    assert 0 <= row["coverage"] <= 1 and row["n_intervals"] > 0 and row["n_vs_first"] > 0
    assert row["price_mae_s"] >= 0
    assert (tmp_path / "design_check_draws.csv").exists() and (tmp_path / "design_check.txt").exists()


def test_a_fraction_outside_0_1_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--fractions", "0.2", "1.5"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "(0, 1], got 1.5" in err


def test_the_shipped_ground_truth_is_the_full_set_not_the_default_sparse_one() -> None:
    """The shipped families are checked against llm-free's executed full tables; the default
    shipped set became the sparse llm-free-sparse, and the check had drawn sparse sets from
    it (10-14 % of 'full' branches, repair's coverage 0.17)."""
    from experiments.design_check import label_sets
    from labelsets.recovery_model import is_sparse

    sets = label_sets(Args(families=("long-horizon",), repos=3, tasks_per_repo=2))
    real = {f: ls for f, ls in sets.items() if f != "long-horizon"}
    assert real and not any(is_sparse(ls) for ls in real.values())
    assert {"cbuild", "depres", "migrate", "repair"} <= set(real)
