"""experiments.power: the real script run small (a simulated pilot and the shipped real set),
its help and one-line errors."""

from __future__ import annotations

import pandas as pd

from experiments.power import Args, main


def test_power_plans_from_a_small_simulated_pilot(run_command, tmp_path) -> None:
    proc = run_command("experiments.power", "--families", "positive-control", "--repos", "3",
                       "--tasks-per-repo", "2", "--tasks-options", "2", "4", "--repetition-options", "1", "2",
                       "--out", str(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "== positive-control: pilot 3 repositories x 6 tasks x 2 repetitions" in out
    assert "limit gain over first-boundary" in out and "alpha 0.05/2 = 0.025" in out
    assert "positive-control: effect" in out and "needs" in out
    pilot = pd.read_csv(tmp_path / "pilot.csv")
    plan = pd.read_csv(tmp_path / "plan.csv")
    assert list(pilot["family"]) == ["positive-control"] and pilot["gain"].iloc[0] > 0
    assert set(plan["tasks_per_repo"]) == {2, 4} and set(plan["repetitions"]) == {1, 2}
    assert (plan["n_repos"] >= 0).all()


def test_power_says_what_the_shipped_real_set_needs(run_command, tmp_path) -> None:
    proc = run_command("experiments.power", "--labels", "shipped", "--families", "bisect",
                       "--tests", "8", "--out", str(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "== bisect: pilot 8 repositories x 58 tasks x 1 repetitions (label set shipped)" in proc.stdout
    assert "bisect: effect" in proc.stdout and "alpha 0.05/8" in proc.stdout
    pilot = pd.read_csv(tmp_path / "pilot.csv")
    assert pilot["gain"].iloc[0] > 0  # bisect's limit gains over first-boundary
    assert pilot["own_n_tasks"].iloc[0] > 58  # the set has 58 of them: too few for that gain


def test_help_and_one_line_errors(check_help, one_line_error) -> None:
    check_help("experiments.power", Args)
    one_line_error(main, ["--families", "nope"], "--families")
    one_line_error(main, ["--repos", "1"], "--repos")
    one_line_error(main, ["--repetitions", "1"], "--repetitions")
    one_line_error(main, ["--reference", "optimum"], "--reference")
    one_line_error(main, ["--budget", "count:0"], "--budget")
    one_line_error(main, ["--labels", "/nonexistent/x"], "--labels")


def test_a_sparse_one_repetition_pilot_says_what_it_cannot_measure(run_command, tmp_path) -> None:
    """A sparse label set (one repetition per executed cell) cannot separate one repetition's
    noise from the task-level spread: the plan printed "noise 0" and offered 2 and 4
    repetitions as if they helped. It says so, plans at the pilot's own repetitions, and
    names how the recovery model prices the limit."""
    from labelsets.recovery_model import SparseDesign, subsample
    from oracle.simulator import simulate_label_set

    full = simulate_label_set("positive-control", n_repos=3, tasks_per_repo=2, seed=1)
    n_cells = int(0.5 * (full.recovery["role"] == "table").sum() / 2)
    subsample(full, n_cells, seed=1, design=SparseDesign(repetitions=1)).save(tmp_path / "sparse")
    proc = run_command("experiments.power", "--labels", str(tmp_path / "sparse"),
                       "--tasks-options", "2", "--out", str(tmp_path / "out"), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "one repetition's noise: not measured" in proc.stdout
    assert "sparse design" in proc.stdout and "recovery model" in proc.stdout
    plan = pd.read_csv(tmp_path / "out" / "plan.csv")
    assert set(plan["repetitions"]) == {1}
