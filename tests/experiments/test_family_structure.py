"""experiments.family_structure: the measures on a label set, the real command, its help and
one-line errors."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from experiments.family_structure import (
    ELAPSED,
    Args,
    first_stratum_cells,
    one_checkpoint_optima,
    signals,
    spearman,
)
from oracle.simulator import simulate_label_set
from ripplecp_policy.evaluation import evaluator_for
from ripplecp_policy.policy import Budget
from ripplecp_policy.pricing import brute_force_placement

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ls():
    return simulate_label_set("dependency-resolution", n_repos=2, tasks_per_repo=3, design="full", seed=4)


def test_optima_are_the_one_checkpoint_optimum(ls) -> None:
    opt = one_checkpoint_optima(ls)
    ev = evaluator_for(ls)
    assert list(opt.index) == list(ls.task_ids)
    for t, b in opt.items():
        best, _ = brute_force_placement(ev.costs(t), Budget("count", 1))
        assert [b] == best or (b == 0 and best == [])


def test_first_stratum_cells_carry_the_features_at_the_candidate(ls) -> None:
    cells = first_stratum_cells(ls)
    lab = ls.labels[ls.labels["stratum"] == "first"]
    assert len(cells) == lab.groupby(["task_id", "candidate", "failure"]).ngroups
    one = cells.iloc[3]
    mean = lab[(lab["task_id"] == one["task_id"]) & (lab["candidate"] == one["candidate"])
               & (lab["failure"] == one["failure"])]["advantage"].mean()
    assert one["advantage"] == pytest.approx(mean)
    assert np.isfinite(cells[ELAPSED]).all() and (cells[ELAPSED] > 0).all()
    rho = spearman(cells[ELAPSED], cells["advantage"])
    assert -1 <= rho <= 1
    top = signals(cells, 4)
    assert 1 <= len(top) <= 4 and all(abs(r) <= 1 for _, r in top)
    for (f, _), (g, _) in zip(top, top[1:], strict=False):  # no near copies listed
        assert abs(spearman(cells[f], cells[g])) <= 0.95


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "experiments.family_structure", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=240)


def test_command_reports_each_family(tmp_path: Path) -> None:
    proc = _run(["--seeds", "0", "--families", "multi-stage-build", "--tasks-per-repo", "1",
                 "--out", str(tmp_path / "o")], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "multi-stage-build" in proc.stdout and "modal boundary" in proc.stdout
    assert "strongest online signals" in proc.stdout
    assert (tmp_path / "o" / "structure.csv").exists() and (tmp_path / "o" / "optima.csv").exists()


def test_help_lists_every_option(tmp_path: Path) -> None:
    proc = _run(["--help"], tmp_path)
    assert proc.returncode == 0
    out = " ".join(proc.stdout.split())
    for f in dataclasses.fields(Args):
        assert "--" + f.name.replace("_", "-") in out
    assert "most value-correlated online features" in out and "{dependency-resolution," in out


@pytest.mark.parametrize("argv, needle", [
    (["--families", "long-horizn"], "invalid choice 'long-horizn' (did you mean 'long-horizon'?)"),
    (["--seeds", "-2"], "argument --seeds: must be >= 0, got -2"),
    (["--tasks-per-repo", "0"], "argument --tasks-per-repo: must be >= 1, got 0"),
])
def test_wrong_arguments_are_one_line_errors(tmp_path: Path, argv: list[str], needle: str) -> None:
    proc = _run(argv, tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and needle in proc.stderr, proc.stderr
