"""Workload families: configs, shapes, and each family's structure *measured* on its tables.

The structure tests compute the online features (``features.online.boundary_features``)
on the emitted nominal trajectories and rank the measured advantage labels with them,
within stratum, exactly as a study would: nothing about the hidden state is read.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from features.online import boundary_features
from oracle.simulator import family_tasks, simulate_label_set
from oracle.simulator.workloads import (
    FAMILIES,
    SWE_PILOT,
    FamilyConfig,
    StepConfig,
    family_names,
    get_family,
)

BYTES = "state__bytes_modified_since_cp"
RIPPLE = "ripple__new_descendant_count"


def test_families_cover_twelve_repositories() -> None:
    assert {"swe-pilot", "dependency-resolution", "multi-stage-build", "long-horizon"} <= set(family_names())
    repos = [r.name for f in FAMILIES.values() for r in f.repos]
    assert len(repos) >= 12 and len(set(repos)) == len(repos)
    for fam in FAMILIES.values():
        fam.validate()
        assert len(fam.repos) >= 3


def test_tasks_per_repository_is_configurable() -> None:
    tasks = family_tasks("long-horizon", tasks_per_repo=3, seed=0)
    assert len(tasks) == 24  # 8 repositories x 3
    assert sorted({t.repo for t in tasks}) == sorted(r.name for r in FAMILIES["long-horizon"].repos)
    assert len(family_tasks("long-horizon", n_repos=2, tasks_per_repo=5, seed=0)) == 10


def test_bad_config_is_refused_with_the_field() -> None:
    bad = replace(SWE_PILOT, steps_pattern=(3, 9))
    with pytest.raises(ValueError, match="steps_pattern value 9"):
        get_family(bad)
    bad_step = replace(SWE_PILOT, steps=(StepConfig(work_s=10.0, mix=(("nonsense", 1.0),)),),
                       steps_pattern=(1,))
    with pytest.raises(ValueError, match="unknown unit kind"):
        bad_step.validate()
    assert isinstance(get_family("swe-pilot"), FamilyConfig)


def test_swe_pilot_shape_matches_the_pilot() -> None:
    assert len(FAMILIES["swe-pilot"].repos) == 8  # the pilot's 3 first, then 5 drawn alike
    tasks = family_tasks("swe-pilot", n_repos=3, seed=0)  # the pilot's shape
    assert len(tasks) == 12 and len({t.repo for t in tasks}) == 3
    assert sorted({t.n_steps for t in tasks}) == [3, 4]
    assert sum(t.verified for t in tasks) == 10
    per_task = [len(t.trajectory.boundaries("tool_call")) for t in tasks]
    first = [sum(e.safe_boundary and e.step == 1 for e in t.trajectory.events) for t in tasks]
    assert 25 <= np.mean(per_task) <= 34  # paper G.5: 29.2 per task
    assert 20 <= np.mean(first) <= 30  # 24.8 inside the first turn


def test_long_horizon_has_30_to_60_tool_call_boundaries() -> None:
    tasks = family_tasks("long-horizon", tasks_per_repo=4, seed=1)
    b = [len(t.trajectory.boundaries("tool_call")) for t in tasks]
    assert 30 <= np.mean(b) <= 60 and min(b) >= 25
    assert min(t.n_steps for t in tasks) >= 5


def _cells_with_features(family: str, seed: int = 0, tasks_per_repo: int = 6) -> pd.DataFrame:
    """Within-stratum cells (mean advantage over repetitions) with the online features at t.

    First stratum: no checkpoint before t (features since the start). Additional stratum
    (fallback t-1): a checkpoint at every earlier boundary, so "since the checkpoint" is
    the candidate's own segment. A segment with no writes has no recorded bytes (NaN in
    ``features.online``); it changed zero bytes, so NaN -> 0 here.
    """
    ls = simulate_label_set(family, tasks_per_repo=tasks_per_repo, design="full", repetitions=2, seed=seed)
    cells = (ls.labels.groupby(["task_id", "candidate", "fallback", "failure", "stratum"])["advantage"]
             .mean().reset_index())
    feats = {}
    for tid, traj in ls.trajectories.items():
        B = len(traj.boundaries("turn"))
        feats["first", tid] = boundary_features(traj, "turn").set_index("boundary")
        feats["additional", tid] = boundary_features(traj, "turn", checkpoints=range(1, B + 1)).set_index("boundary")
    for col in (BYTES, RIPPLE):
        cells[col] = [feats[s, t].at[c, col] for s, t, c in zip(cells["stratum"], cells["task_id"], cells["candidate"], strict=True)]
    cells[BYTES] = cells[BYTES].fillna(0.0)
    return cells


def _rho(cells: pd.DataFrame, stratum: str, col: str) -> float:
    sub = cells[cells["stratum"] == stratum]
    return float(spearmanr(sub[col], sub["advantage"]).statistic)


def test_dependency_resolution_value_is_dense_in_ripple_not_bytes() -> None:
    cells = _cells_with_features("dependency-resolution")
    rb, rr = _rho(cells, "additional", BYTES), _rho(cells, "additional", RIPPLE)
    assert rb < 0 < rr and rr - rb > 0.5, (rb, rr)
    # the tiny decision: the highest-value additional cells changed under a kilobyte, and
    # segments that rewrote >100 kB are worth less than those that changed <1 kB
    add = cells[cells["stratum"] == "additional"]
    top = add.nlargest(len(add) // 4, "advantage")
    assert top[BYTES].median() < 1_000
    big, tiny = add[add[BYTES] > 100_000], add[add[BYTES] < 1_000]
    assert len(big) and len(tiny) and big["advantage"].mean() < tiny["advantage"].mean() / 2


def test_multi_stage_build_bytes_can_rank_better_than_ripple() -> None:
    """Stages are drawn per task (compile, cache hit, smoke tests, configure): bytes written
    track the value of compiled artifacts; cache hits and smoke tests are long, write little
    and are worth little; configure's flag adds some ripple value."""
    cells = _cells_with_features("multi-stage-build")
    rb, rr = _rho(cells, "additional", BYTES), _rho(cells, "additional", RIPPLE)
    assert rb > 0.4 and rb - rr > 0.1, (rb, rr)
    add = cells[cells["stratum"] == "additional"]
    # large artifacts are common (>50 MB in a fifth of the segments), yet a typical segment
    # is worth well under a minute, and the least valuable quarter wrote under a megabyte
    assert (add[BYTES] > 50e6).mean() > 0.2 and add["advantage"].median() < 60
    assert add.nsmallest(len(add) // 4, "advantage")[BYTES].median() < 1e6


def test_additional_checkpoints_pay_on_long_horizon_not_on_the_pilot() -> None:
    lh = simulate_label_set("long-horizon", tasks_per_repo=3, design="full", repetitions=2, seed=3)
    sp = simulate_label_set("swe-pilot", tasks_per_repo=6, design="full", repetitions=2, seed=3)

    def mean_adv(ls, stratum: str) -> float:
        lab = ls.labels
        return float(lab.loc[lab["stratum"] == stratum, "advantage"].mean())

    creation = float(lh.checkpoints["creation_s"].mean())
    assert mean_adv(lh, "additional") > 10 * creation
    # the pilot's regime: additional cells adjacent to their fallback are worth about nothing
    lab = sp.labels
    adj = lab[(lab["stratum"] == "additional") & (lab["failure"] == lab["candidate"] + 1)]
    assert abs(float(adj["advantage"].mean())) < 10
    assert mean_adv(sp, "first") > 60
