"""``python -m experiments.matched_budget``'s command line: help on every option, and one
line with exit 2 for every wrong argument, checked before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.matched_budget import PROG, Args, main

MODULE = "experiments.matched_budget"


def test_help_lists_every_option(check_help) -> None:
    out = check_help(MODULE, Args)
    for text in ("--no-mlflow turns it off", "{uniform, duration}", "count:N (N >= 1)", "--seed N"):
        assert text in " ".join(out.split()), text


@pytest.mark.parametrize("argv, needle", [
    (["--budgets", "count:-1"], "argument --budgets: 'count:-1': a count budget takes a positive integer, got -1"),
    (["--labels", "/nonexistent"], "argument --labels: /nonexistent: no such directory"),
    (["--families", "swe-pilto"], "argument --families: invalid choice 'swe-pilto' (did you mean 'swe-pilot'?)"),
])
def test_wrong_arguments_for_real(run_command, failed_in_one_line, argv, needle) -> None:
    failed_in_one_line(run_command(MODULE, *argv, "--no-mlflow", timeout=120), PROG, needle)


@pytest.mark.parametrize("argv, needle", [
    (["--budgets", "count:0"], "'count:0': a count budget takes a positive integer, got 0"),
    (["--budgets", "count:1.5"], "'count:1.5': a count budget takes a positive integer, got 1.5"),
    (["--budgets", "count:1", "seconds:0x"], "'seconds:0x': K in Kx must be a finite number > 0, got 0"),
    (["--budgets", "seconds:-3"], "'seconds:-3': the amount must be a finite number > 0"),
    (["--budgets", "bytes:abc"], "'bytes:abc': the amount must be a number"),
    (["--budgets", "joules:3"], "'joules:3': the kind must be count, seconds or bytes"),
    (["--budgets", "count:2x"], "'count:2x': a count budget takes a positive integer"),
    (["--n-resamples", "0"], "argument --n-resamples: must be >= 1, got 0"),
    (["--tolerance", "-1"], "argument --tolerance: must be >= 0, got -1"),
    (["--tolerance", "nan"], "argument --tolerance: expected a finite number"),
    (["--hazard", "unifrom"], "argument --hazard: invalid choice 'unifrom' (did you mean 'uniform'?)"),
    (["--seed", "-1"], "argument --seed: must be >= 0, got -1"),
    (["--seed", "1.5"], "argument --seed: expected an integer, got '1.5'"),
    (["--jobs", "0"], "argument --jobs: must be >= 1, got 0"),
    (["--random-seeds", "0"], "argument --random-seeds: must be >= 1, got 0"),
    (["--repetitions", "0"], "argument --repetitions: must be >= 1, got 0"),
    (["--tasks-per-repo", "0"], "argument --tasks-per-repo: must be >= 1, got 0"),
    (["--experiment", "a/b"], "argument --experiment: experiment name must be a plain, non-empty name"),
    (["--no-mlfow"], "unrecognized arguments: --no-mlfow (did you mean '--no-mlflow'?)"),
    (["--workers", "2"], "unrecognized arguments: --workers 2"),
    (["--families", "long-horizon", "dependency-resolutoin"], "did you mean 'dependency-resolution'?"),
])
def test_wrong_arguments(one_line_error, argv, needle) -> None:
    one_line_error(main, [*argv, "--no-mlflow"], needle)


def test_wrong_label_sets_and_their_families(tmp_path: Path, one_line_error, make_label_set) -> None:
    """A folder that is no label set, and a family the set lacks (checked right after
    loading, before the study runs), are one line; the nearest family is suggested."""
    (tmp_path / "empty").mkdir()
    out = tmp_path / "out"
    one_line_error(main, ["--labels", str(tmp_path / "empty"), "--no-mlflow", "--out", str(out)],
                   f"argument --labels: {tmp_path / 'empty'}: not a label set (no label_set.json)")
    make_label_set(n_repos=2, tasks_per_repo=1, seed=4).save(tmp_path / "labels")
    one_line_error(main, ["--labels", str(tmp_path / "labels"), "--families", "synthtic",
                          "--no-mlflow", "--out", str(out)],
                   "argument --families: invalid choice 'synthtic' (did you mean 'synthetic'?); "
                   "choose from synthetic")
    assert not out.exists()  # nothing written before the inputs are known good
