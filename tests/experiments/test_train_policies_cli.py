"""``python -m experiments.train_policies``'s command line: help on every option, one line
with exit 2 for every wrong argument (before any work), and a device that is not there."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.train_policies import PROG, Args, main, parse_args, studies

MODULE = "experiments.train_policies"
NO_GPU = not Path("/dev/nvidia0").exists()


def test_help_lists_every_option(check_help) -> None:
    out = check_help(MODULE, Args)
    assert "--no-mlflow turns it off" in " ".join(out.split())


@pytest.mark.parametrize("argv, needle", [
    (["--budgets", "cnt:2"], "argument --budgets: 'cnt:2': the kind must be count, seconds or bytes"),
    (["--budgets", "count:1.5"], "argument --budgets: 'count:1.5': a count budget takes a positive integer, got 1.5"),
    (["--budgets", "count:1", "count:2"], "argument --budgets: one budget per study, got 2 (count:1 count:2)"),
])
def test_wrong_arguments_for_real(run_command, failed_in_one_line, argv, needle) -> None:
    failed_in_one_line(run_command(MODULE, *argv, timeout=120), PROG, needle)


@pytest.mark.skipif(not NO_GPU, reason="this machine has a GPU: --device cuda is valid here")
def test_cuda_without_a_gpu_is_an_error_for_real(run_command, failed_in_one_line) -> None:
    failed_in_one_line(run_command(MODULE, "--device", "cuda", timeout=120), PROG,
                       "argument --device: cuda: xgboost")


@pytest.mark.parametrize("argv, needle", [
    (["--budgets", "count:0"], "'count:0': a count budget takes a positive integer, got 0"),
    (["--budgets", "seconds:-2"], "'seconds:-2': the amount must be a finite number > 0"),
    (["--budgets", "seconds:nan"], "'seconds:nan': the amount must be a finite number > 0"),
    (["--budget-kind", "count"], "unrecognized arguments: --budget-kind count"),
    (["--device", "gpu"], "argument --device: invalid choice 'gpu'"),
    (["--kinds", "xgboost,deep-q"], "argument --kinds: invalid choice 'deep-q'; choose from xgboost"),
    (["--kinds", "ridg"], "argument --kinds: invalid choice 'ridg' (did you mean 'ridge'?)"),
    (["--families", "long-horizn"], "argument --families: invalid choice 'long-horizn' (did you mean 'long-horizon'?)"),
    (["--family", "long-horizon"], "unrecognized arguments: --family long-horizon (did you mean '--families'?)"),
    (["--workers", "2"], "unrecognized arguments: --workers 2"),
    (["--n-trials", "0"], "argument --n-trials: must be >= 1, got 0"),
    (["--tasks-per-repo", "0"], "argument --tasks-per-repo: must be >= 1, got 0"),
    (["--repetitions", "0"], "argument --repetitions: must be >= 1, got 0"),
    (["--seed", "-3"], "argument --seed: must be >= 0, got -3"),
    (["--labels", "/nonexistent"], "argument --labels: /nonexistent: no such directory"),
    (["--experiment", ""], "argument --experiment: experiment name must be a plain, non-empty name"),
])
def test_wrong_arguments(one_line_error, argv, needle) -> None:
    one_line_error(main, [*argv, "--no-mlflow"], needle)


def test_wrong_label_sets_and_their_families(tmp_path: Path, one_line_error, toy_label_set) -> None:
    (tmp_path / "empty").mkdir()
    one_line_error(main, ["--labels", str(tmp_path / "empty"), "--no-mlflow"],
                   "argument --labels: ")
    toy_label_set(n_repos=3, tasks_per_repo=2, seed=5).save(tmp_path / "toy")
    fams = sorted(set(toy_label_set(n_repos=3, tasks_per_repo=2, seed=5).tasks["family"]))
    typo = fams[0][:-1] + "x"
    one_line_error(main, ["--labels", str(tmp_path / "toy"), "--families", typo, "--no-mlflow"],
                   f"argument --families: invalid choice {typo!r}")


def test_families_are_one_study_each() -> None:
    assert studies(parse_args([])) == ["long-horizon"]
    assert studies(parse_args(["--families", "swe-pilot,long-horizon"])) == ["swe-pilot", "long-horizon"]
    assert studies(parse_args(["--labels", "."])) == [None]  # the whole set
    assert studies(parse_args(["--labels", ".", "--families", "a"])) == ["a"]
    assert parse_args(["--no-mlflow"]).mlflow is False
