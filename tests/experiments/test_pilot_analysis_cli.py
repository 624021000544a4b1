"""``python -m experiments.pilot_analysis``'s command line: help on every option, one line
with exit 2 for every wrong argument (before any work)."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.pilot_analysis import PROG, Args, main

MODULE = "experiments.pilot_analysis"


def test_help_lists_every_option(check_help) -> None:
    out = check_help(MODULE, Args)
    assert "{percentile, bca}" in out


@pytest.mark.parametrize("argv, needle", [
    ([], "give exactly one of --labels PATH or --pilot"),
    (["--pilot", "--method", "bcaa"], "argument --method: invalid choice 'bcaa' (did you mean 'bca'?)"),
])
def test_wrong_arguments_for_real(run_command, failed_in_one_line, argv, needle) -> None:
    failed_in_one_line(run_command(MODULE, *argv, "--no-mlflow", timeout=120), PROG, needle)


@pytest.mark.parametrize("argv, needle", [
    (["--pilot", "--labels", "."], "give exactly one of --labels PATH or --pilot"),
    (["--pilot", "--n-resamples", "0"], "argument --n-resamples: must be >= 1, got 0"),
    (["--pilot", "--n-permutations", "-5"], "argument --n-permutations: must be >= 1, got -5"),
    (["--pilot", "--minutes-per-label", "0"], "argument --minutes-per-label: must be > 0, got 0"),
    (["--pilot", "--seed", "x"], "argument --seed: expected an integer, got 'x'"),
    (["--pilot", "--experiment", "a/b"], "argument --experiment: experiment name must be a plain"),
    (["--pilot", "--proxies", "tool_calls"], "--features and --proxies need --labels"),
    (["--labels", "/nonexistent"], "argument --labels: /nonexistent: no such file or directory"),
    (["--labels", ".", "--features", "/nonexistent.parquet"], "argument --features: /nonexistent.parquet: no such file"),
    (["--pilot", "--no-mlfow"], "(did you mean '--no-mlflow'?)"),
])
def test_wrong_arguments(one_line_error, argv, needle) -> None:
    one_line_error(main, [*argv, "--no-mlflow"], needle)


def test_wrong_inputs_checked_right_after_loading(tmp_path: Path, one_line_error, synthetic_labels,
                                                  seal_labels) -> None:
    """A folder without labels, a --features file that is no parquet or lacks the keys, and a
    --proxies column the cells lack: one line, before any table is computed."""
    (tmp_path / "empty").mkdir()
    one_line_error(main, ["--labels", str(tmp_path / "empty"), "--no-mlflow", "--out", str(tmp_path / "o")],
                   "argument --labels: ")
    labels = synthetic_labels(n_tasks=4, reps=2, seed=5)
    lset = seal_labels(labels, tmp_path / "labelset")  # a bare labels.parquet is refused now
    base = ["--labels", str(lset), "--no-mlflow", "--out", str(tmp_path / "o")]
    one_line_error(main, [*base, "--proxies", "protected_work", "tool_callz"],
                   "argument --proxies: invalid choice 'protected_work' (did you mean 'protected_work_s'?)")
    (tmp_path / "junk.parquet").write_text("not parquet")
    one_line_error(main, [*base, "--features", str(tmp_path / "junk.parquet")],
                   f"argument --features: {tmp_path / 'junk.parquet'}: ")
    labels[["task_id"]].to_parquet(tmp_path / "nokeys.parquet")
    one_line_error(main, [*base, "--features", str(tmp_path / "nokeys.parquet")],
                   "needs cell_id or task_id + candidate, missing ['candidate']")
    assert not (tmp_path / "o").exists()  # nothing written before the inputs are known good
