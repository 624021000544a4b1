"""Leave-one-repository-out splits and the separation audit; also the tiny label-set builder
the other learned-policy tests import (a hand-made workload with a known answer)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from features.schema import Event, EventKind, Trajectory
from oracle.tables import LabelSet
from ripplecp_policy.splits import LeakageError, SplitAudit, inner_splits, leave_one_repo_out


def toy_label_set(
    n_repos: int = 3, tasks_per_repo: int = 3, seed: int = 0, first_conv: float = 0.9,
    later_conv: float = 0.05,
) -> LabelSet:
    """A full-design label set on hand-made trajectories.

    Step k costs w_k seconds of nominal work; recovering from restore point r after a
    failure in segment f re-derives steps r+1..f-1 at conversion ``first_conv`` (step 1)
    or ``later_conv`` (later steps), plus half of step f. So the first checkpoint pays and
    an additional one barely does: the pilot's two regimes, by construction.
    """
    rng = np.random.default_rng(seed)
    tasks, cps, rec, labels, trajs = [], [], [], [], {}
    for r_i in range(n_repos):
        repo = f"org/repo{r_i}"
        for t_i in range(tasks_per_repo):
            tid = f"repo{r_i}-t{t_i}"
            B = int(rng.integers(3, 6))
            work = rng.uniform(20, 200, size=B + 1)
            work[0] = 0.0
            events, idx, clock, t_nom = [], 0, 0.0, [0.0]
            for k in range(1, B + 1):
                n_cmd = int(rng.integers(1, 4))
                for j in range(n_cmd):
                    d = float(work[k] / (n_cmd + 1))
                    events.append(Event(idx, EventKind.COMMAND, step=k, start=clock, end=clock + d,
                                        duration=d, command=f"make step{k}-{j}", argv=["make"],
                                        exit_code=0, safe_boundary=True, boundary_kind="tool_return",
                                        paths_written=[f"src/f{k}_{j}.py"],
                                        bytes_written=int(rng.integers(100, 5000))))
                    idx += 1
                    clock += d
                d = float(work[k] / (n_cmd + 1))
                events.append(Event(idx, EventKind.TEST, step=k, start=clock, end=clock + d,
                                    duration=d, command="pytest", argv=["pytest"], exit_code=0,
                                    tests_passed=k, tests_failed=B - k, safe_boundary=True,
                                    boundary_kind="test", turn_end=True))
                cps.append(dict(task_id=tid, boundary=k, event_index=idx, step=k,
                                nominal_t_s=clock + d, creation_s=float(rng.uniform(2, 6)),
                                size_bytes=int(rng.integers(10**6, 2 * 10**7)), restore_latency_s=0.5))
                idx += 1
                clock += d
                t_nom.append(clock)
            trajs[tid] = Trajectory(tid, repo, "toy", events)
            tasks.append(dict(task_id=tid, repo=repo, family="toy", verified=True, nominal_s=clock,
                              n_boundaries=B, granularity="turn"))
            conv = np.array([0.0, first_conv] + [later_conv] * (B - 1)) * (1 + 0.2 * r_i)
            creation = {c["boundary"]: c["creation_s"] for c in cps if c["task_id"] == tid}

            def J(r: int, f: int, noise: float) -> float:
                return 10.0 + float(sum(conv[k] * work[k] for k in range(r + 1, f))) + 0.5 * work[f] + noise  # noqa: B023

            for f in range(1, B + 1):
                for r in range(f):
                    for rep in range(2):
                        rec.append(dict(task_id=tid, restore_point=r, failure=f, repetition=rep,
                                        branch_id=f"{tid}/r{r}f{f}/{rep}", pair_id=None, role="table",
                                        cost_s=J(r, f, float(rng.normal(0, 2))), restore_latency_s=0.5,
                                        tokens=None, tool_calls=None, verified=True, capped=False,
                                        seed=rep, state_digest=None, obs_digest=None,
                                        quarantined=False, quarantine_reason=None))
            jt = pd.DataFrame([x for x in rec if x["task_id"] == tid]).groupby(
                ["restore_point", "failure"])["cost_s"].mean()
            for f in range(2, B + 1):
                for t in range(1, f):
                    for c in range(t):
                        j_cp = float(jt[(t, f)]) + creation[t]
                        j_skip = float(jt[(c, f)])
                        labels.append(dict(
                            task_id=tid, repo=repo, cell_id=f"{tid}:t{t}:c{c}:f{f}", candidate=t,
                            fallback=c, failure=f, repetition=0,
                            stratum="first" if c == 0 else "additional", branch_order="cp_first",
                            j_cp=j_cp, j_skip=j_skip, advantage=j_skip - j_cp, creation_s=creation[t],
                            protected_work_s=t_nom[t] - t_nom[c], verified=True, verified_cp=True,
                            verified_skip=True, tokens_cp=None, tokens_skip=None, tool_calls_cp=None,
                            tool_calls_skip=None, pair_seed=0, digest_cp=None, digest_skip=None,
                            quarantined=False, quarantine_reason=None))
    return LabelSet(pd.DataFrame(tasks), pd.DataFrame(cps), pd.DataFrame(rec), pd.DataFrame(labels),
                    trajs, {"source": "toy"})


@pytest.fixture(scope="module")
def toy() -> LabelSet:
    return toy_label_set(n_repos=3, tasks_per_repo=2)


def test_loro_holds_each_repo_out_once(toy: LabelSet) -> None:
    folds = leave_one_repo_out(toy)
    assert [f.held_out for f in folds] == toy.repos
    repo = toy.tasks.set_index("task_id")["repo"]
    for f in folds:
        assert {repo[t] for t in f.test_tasks} == {f.held_out}
        assert f.held_out not in {repo[t] for t in f.train_tasks}
        assert set(f.train_tasks) | set(f.test_tasks) == set(toy.task_ids)


def test_loro_is_deterministic_and_needs_two_repos(toy: LabelSet) -> None:
    assert leave_one_repo_out(toy) == leave_one_repo_out(toy)
    one = toy.subset([t for t in toy.task_ids if t.startswith("repo0")])
    with pytest.raises(ValueError, match="2 repositories"):
        leave_one_repo_out(one)


def test_inner_splits_stay_inside_training_repos(toy: LabelSet) -> None:
    task_repo = dict(zip(toy.tasks["task_id"], toy.tasks["repo"], strict=True))
    fold = leave_one_repo_out(toy)[0]
    splits = list(inner_splits(fold.train_repos, task_repo))
    assert len(splits) == len(fold.train_repos)
    for tr, va in splits:
        assert not {task_repo[t] for t in tr} & {task_repo[t] for t in va}
        assert fold.held_out not in {task_repo[t] for t in tr + va}
    # GroupKFold when capped
    assert len(list(inner_splits(toy.repos, task_repo, max_splits=2))) == 2


def test_audit_names_the_leaking_stage() -> None:
    audit = SplitAudit()
    audit.record("scaler", ["a", "b"])
    audit.record("threshold", ["b"])
    audit.check(["c"])
    audit.record("tuning", ["c"])
    with pytest.raises(LeakageError, match="tuning"):
        audit.check(["c"])
    assert audit.to_dict()["scaler"] == ["a", "b"]
