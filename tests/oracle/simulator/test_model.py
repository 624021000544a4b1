"""The generative model: emitted trajectories conform and hide the latent state; bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from features.schema import read_parquet, write_parquet
from oracle.simulator import (
    branch_costs,
    family_tasks,
)

_HIDDEN = ("dead_end", "dead end", "fact_scale", "rediscovery", "redo_s", "decision", "latent")


@pytest.mark.parametrize("family", ["swe-pilot", "dependency-resolution", "multi-stage-build", "long-horizon"])
def test_emitted_trajectories_conform_and_hide_latent_state(tmp_path: Path, family: str) -> None:
    tasks = family_tasks(family, tasks_per_repo=1, seed=5)
    trajs = [lt.trajectory for lt in tasks]
    for lt, t in zip(tasks, trajs, strict=True):
        t.validate()
        assert len(t.boundaries("turn")) == lt.n_steps
        assert len(t.boundaries("tool_call")) == lt.n_units
        assert set(t.meta) <= {"family", "simulated", "seed"}
        for e in t.events:
            assert e.extra == {}
            blob = json.dumps([e.command, e.text, e.argv, e.paths_read, e.paths_written]).lower()
            assert not any(h in blob for h in _HIDDEN), blob
            assert e.duration is not None and e.duration >= 0
    write_parquet(trajs, tmp_path / "t.parquet")
    back = read_parquet(tmp_path / "t.parquet")
    assert [len(t.events) for t in back] == [len(t.events) for t in trajs]
    assert back[0].events[3] == trajs[0].events[3]


def test_bad_model_inputs_name_the_problem() -> None:
    lt = family_tasks("swe-pilot", n_repos=1, tasks_per_repo=1, seed=0)[0]
    with pytest.raises(ValueError, match=r"need 0 <= r < f"):
        branch_costs(lt, [2], [2], [0])
    with pytest.raises(ValueError, match="n_repos"):
        family_tasks("swe-pilot", n_repos=0)  # more than the 8 declared is fine (variants)
