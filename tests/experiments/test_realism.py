"""experiments.realism: a simulated family fitted to real labels, judged on held-out repositories."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from experiments.realism import COUNTERPART, QUANTITIES, fit_scales, format_report, realism_report
from labelsets.tables import LabelSet
from oracle.simulator import simulate_label_set

REPO = Path(__file__).resolve().parents[2]


def _as_real(ls: LabelSet, family: str, factor: float = 1.0) -> LabelSet:
    """The simulated set relabelled as the real family, its seconds times ``factor``."""
    tasks = ls.tasks.assign(family=family, nominal_s=ls.tasks["nominal_s"] * factor)
    rec = ls.recovery.assign(cost_s=ls.recovery["cost_s"] * factor)
    return LabelSet(tasks, ls.checkpoints, rec, ls.labels, ls.trajectories, {})


def test_a_family_fitted_to_itself_predicts_itself() -> None:
    sim = simulate_label_set("long-horizon", tasks_per_repo=3, design="full", seed=0)
    real = _as_real(sim, "migrate", factor=0.01)  # real seconds are a hundredth
    assert fit_scales(real, sim)["recovery"] == pytest.approx(0.01)
    df = realism_report(real, seed=0, tasks_per_repo=3, n_resamples=300)
    assert set(df["family"]) == {"migrate"} and set(df["simulated"]) == {COUNTERPART["migrate"]}
    n_repos = sim.tasks["repo"].nunique()  # one held-out fold per repository
    assert set(df["quantity"]) == set(QUANTITIES) and df["held_out"].nunique() == n_repos
    scratch = df[df["quantity"] == "j_scratch_s"]
    assert (scratch["predicted"] - scratch["real"]).abs().max() < 0.5 * scratch["real"].max()
    assert df["inside"].mean() > 0.5
    one_repo = real.subset(real.tasks.loc[real.tasks["repo"] == real.repos[0], "task_id"])
    assert realism_report(one_repo, seed=0, tasks_per_repo=3, n_resamples=300).empty
    text = format_report(df)
    assert f"== migrate (real, {n_repos} held-out repositories) <- long-horizon" in text
    assert all(q in text for q in QUANTITIES)


def test_the_command_lists_its_options_and_rejects_bad_ones(tmp_path: Path) -> None:
    help_ = subprocess.run([sys.executable, "-m", "experiments.realism", "--help"], cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    assert help_.returncode == 0
    for flag in ("--labels", "--seed", "--tasks-per-repo", "--n-resamples", "--out"):
        assert flag in help_.stdout
    for bad, msg in ((["--seed", "-1"], "--seed"), (["--n-resamples", "5"], "--n-resamples"),
                     (["--labels", str(tmp_path / "none")], "argument --labels: "),
                     (["--labels", str(tmp_path)], "argument --labels: ")):  # no label set in it
        p = subprocess.run([sys.executable, "-m", "experiments.realism", *bad], cwd=REPO,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and msg in p.stderr, p.stderr
