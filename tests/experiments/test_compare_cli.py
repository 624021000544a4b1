"""``python -m experiments.compare``'s command line: help on every option, one line with exit
2 for every wrong argument, and a missing store is an error (never created)."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.compare import PROG, Args, main

MODULE = "experiments.compare"


def test_help_lists_every_option(check_help) -> None:
    out = check_help(MODULE, Args)
    assert "[RUN ...]" in out


def test_a_missing_store_is_an_error_and_is_not_created(tmp_path: Path, run_command,
                                                        failed_in_one_line) -> None:
    gone = tmp_path / "nonexistent"
    failed_in_one_line(run_command(MODULE, "--mlruns", str(gone), timeout=120), PROG,
                       f"argument --mlruns: no MLflow store at {gone} (no mlflow.db)")
    assert not gone.exists()
    # the default store (./mlruns) absent: the same, and ./mlruns is not made either
    failed_in_one_line(run_command(MODULE, cwd=tmp_path, timeout=120), PROG,
                       f"no MLflow store at {(tmp_path / 'mlruns').resolve()}")
    assert not (tmp_path / "mlruns").exists()


def test_one_run_id_is_an_error_for_real(run_command, failed_in_one_line) -> None:
    failed_in_one_line(run_command(MODULE, "abc", timeout=120), PROG,
                       "argument runs: give zero run ids (list studies) or exactly two (compare them), got 1")


@pytest.mark.parametrize("argv, needle", [
    (["a", "b", "c"], "argument runs: give zero run ids (list studies) or exactly two (compare them), got 3"),
    (["--limit", "0"], "argument --limit: must be >= 1, got 0"),
    (["--limt", "3"], "(did you mean '--limit'?)"),
])
def test_wrong_arguments(one_line_error, argv, needle) -> None:
    one_line_error(main, argv, needle)


def test_unknown_runs_are_one_line(tmp_path: Path, one_line_error) -> None:
    from ripplecp_policy.tracking import ensure_experiment

    ensure_experiment("matched-budget", tmp_path)
    one_line_error(main, ["zzzz", "yyyy", "--mlruns", str(tmp_path)], "run 'zzzz': 0 runs match (found: none)")
