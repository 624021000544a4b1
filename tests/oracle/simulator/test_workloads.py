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


# -- the controls ------------------------------------------------------------------------


def test_controls_are_registered_families_every_study_gets() -> None:
    from oracle.simulator.workloads import (
        NULL_CONTROL,
        POSITIVE_CONTROL,
        control_families,
        with_controls,
    )

    assert control_families() == {"null": "long-horizon", "positive": "positive-control"}
    assert {POSITIVE_CONTROL, NULL_CONTROL} <= set(family_names())
    assert with_controls(("dependency-resolution",)) == (
        "dependency-resolution", "long-horizon", "positive-control")
    assert with_controls(("positive-control", "long-horizon")) == ("positive-control", "long-horizon")
    with pytest.raises(ValueError, match="exactly_once 5"):
        replace(FAMILIES["positive-control"], exactly_once=5).validate()
    with pytest.raises(ValueError, match="control must be"):
        replace(FAMILIES["positive-control"], control="maybe").validate()


def test_positive_control_one_decisive_step_at_a_uniform_position() -> None:
    """Exactly one decisive step per task, every position about equally often, and no test
    anywhere: nothing positional or test-based can find it."""
    tasks = family_tasks("positive-control", n_repos=12, tasks_per_repo=8, seed=0)
    positions = [t.templates.index(0) for t in tasks]
    assert all(t.templates.count(0) == 1 and t.n_steps == 6 for t in tasks)
    counts = np.bincount(positions, minlength=6)
    assert counts.min() >= 0.6 * len(tasks) / 6, counts
    assert not any(e.kind.value == "test" for t in tasks for e in t.trajectory.events)
    # the decisive pin costs ~300 s to rediscover; routine steps hold no fact
    scales = [t.fact_scale[t.fact_scale > 0] for t in tasks]
    assert all(len(s) == 1 for s in scales)
    assert 200 < np.median(np.concatenate(scales)) < 400


def test_positive_control_value_is_seen_through_retries_not_elapsed_work() -> None:
    """Measured as a study would: segment value (additional stratum) ranks with failing
    attempts and the pin's provenance, not with elapsed work or bytes; and the clairvoyant
    single checkpoint beats the best fixed position by tens of seconds."""
    ls = simulate_label_set("positive-control", tasks_per_repo=4, design="full", repetitions=2, seed=0)
    lab = ls.labels[ls.labels["stratum"] == "additional"]
    v = lab.groupby(["task_id", "candidate"])["advantage"].mean().reset_index()
    feats = {}
    for tid, traj in ls.trajectories.items():
        B = len(traj.boundaries("turn"))
        feats[tid] = boundary_features(traj, "turn", checkpoints=range(1, B + 1)).set_index("boundary")

    def rho(col: str) -> float:
        x = np.nan_to_num(np.array([feats[t].at[b, col] for t, b in zip(v["task_id"], v["candidate"], strict=True)],
                                   dtype=float))
        return float(spearmanr(x, v["advantage"]).statistic)

    retries, busy, nbytes = rho("cost__retries_since_cp"), rho("cost__busy_s_since_cp"), rho(BYTES)
    assert retries > 0.5 and busy < 0.25 and nbytes < 0.25, (retries, busy, nbytes)
    assert rho("ripple__edges_from_past") > 0.3

    from ripplecp_policy.evaluation import evaluator_for
    from ripplecp_policy.policy import Budget
    from ripplecp_policy.pricing import placement_objective

    ev = evaluator_for(ls)
    one = Budget("count", 1.0)
    opt = np.mean([ev.optimum(t, one)[1] for t in ls.task_ids])
    fixed = min(np.mean([placement_objective(ev.costs(t), [q]) for t in ls.task_ids]) for q in range(1, 7))
    first = np.mean([placement_objective(ev.costs(t), [1]) for t in ls.task_ids])
    assert fixed - opt > 25 and first - opt > 60, (opt, fixed, first)


# -- scale: generated repository variants ------------------------------------------------


def test_repository_variants_beyond_the_declared_have_their_own_parameters() -> None:
    from oracle.simulator.workloads import repo_at

    fam = FAMILIES["dependency-resolution"]
    assert repo_at(fam, 3, seed=0) is fam.repos[3]
    variants = [repo_at(fam, i, seed=0) for i in range(8, 24)]
    names = [r.name for r in (*fam.repos, *variants)]
    assert len(set(names)) == len(names)
    declared = {(r.workspace_mb, r.workspace_cv, r.work_scale) for r in fam.repos}
    params = {(r.workspace_mb, r.workspace_cv, r.work_scale) for r in variants}
    assert len(params) == len(variants) and not params & declared  # not copies
    assert repo_at(fam, 9, seed=0) == repo_at(fam, 9, seed=0)  # deterministic
    assert repo_at(fam, 9, seed=1) != repo_at(fam, 9, seed=0)  # from the seed
    ws = [r.work_scale for r in variants]
    assert 0.5 < min(ws) and max(ws) < 2.0  # the family's spread, not anything
    with pytest.raises(ValueError, match="repository index"):
        repo_at(fam, -1, seed=0)


def test_a_study_may_hold_more_repositories_than_the_family_declares() -> None:
    small = family_tasks("dependency-resolution", n_repos=8, tasks_per_repo=2, seed=0)
    big = family_tasks("dependency-resolution", n_repos=24, tasks_per_repo=2, seed=0)
    assert len({t.repo for t in big}) == 24 and len(big) == 48
    # the declared repositories' tasks are the same ones: variants only add
    assert [t.task_id for t in big[:16]] == [t.task_id for t in small]
    assert [t.nominal_s for t in big[:16]] == [t.nominal_s for t in small]
    ls = simulate_label_set("dependency-resolution", n_repos=10, tasks_per_repo=1, seed=0)
    assert ls.tasks["repo"].nunique() == 10


def test_each_family_sizes_its_default_study() -> None:
    """``study_repos`` x ``tasks_per_repo`` is the default study; None keeps the declared 8."""
    pos = FAMILIES["positive-control"]
    assert (pos.n_study_repos, pos.tasks_per_repo) == (12, 4)
    assert FAMILIES["swe-pilot"].n_study_repos == len(FAMILIES["swe-pilot"].repos) == 8
    tasks = family_tasks("positive-control", seed=0)
    assert len(tasks) == 48 and len({t.repo for t in tasks}) == 12
    with pytest.raises(ValueError, match="study_repos"):
        replace(pos, study_repos=0).validate()
