"""Leave-one-repository-out splits and the separation audit."""

from __future__ import annotations

import pytest

from labelsets.tables import LabelSet
from ripplecp_policy.splits import LeakageError, SplitAudit, inner_splits, leave_one_repo_out


@pytest.fixture(scope="module")
def toy(toy_label_set) -> LabelSet:
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
