"""Issue 28, "how we will know": a positive control built by someone else through the public
API (``oracle.simulator``, ``oracle.simulator.workloads``, ``LabelSet``), saved and studied
with ``--labels``, is judged "yes" on both bars by the main job's confirmatory verdicts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest

from oracle.simulator import simulate_label_set
from oracle.simulator.workloads import POSITIVE, RepoConfig


def their_positive_control() -> object:
    """Not the project's positive control: its own repositories, five steps a task, a dearer
    decisive step and no declared control role (nothing the study could read it from)."""
    repos = tuple(RepoConfig(f"theirs/r{i}", workspace_mb=3.0 + i, workspace_cv=0.1,
                             work_scale=0.9 + 0.03 * i) for i in range(8))
    decisive, routine = POSITIVE.steps
    return dataclasses.replace(
        POSITIVE, name="their-positive", control="", repos=repos, study_repos=None,
        steps=(dataclasses.replace(decisive, name="their-decisive", fact_mult=6.0),
               dataclasses.replace(routine, name="their-routine")),
        steps_pattern=(5,), notes="a positive control built outside the project")


@pytest.mark.slow
def test_someone_elses_positive_control_is_judged_yes(tmp_path: Path) -> None:
    from experiments.matched_budget import main

    labels = tmp_path / "labels"
    simulate_label_set(their_positive_control(), n_repos=8, tasks_per_repo=4, seed=3).save(labels)
    out = tmp_path / "out"
    rc = main(["--labels", str(labels), "--budgets", "count:1", "--no-mlflow", "--out", str(out),
               "--n-resamples", "2000", "--random-seeds", "2"])
    assert rc == 0
    v = pd.read_csv(out / "verdicts.csv")
    conf = v[v["scope"] == "confirmatory"]
    assert set(conf["family"]) == {"their-positive"} and len(conf) == 2  # one per bar
    assert set(conf["status"]) == {"yes"}, conf[["bar", "status", "diff", "mde"]].to_string()
    head = pd.read_csv(out / "headline.csv")
    assert list(head["verdict_a"]) == ["yes"] and list(head["verdict_b"]) == ["yes"]
