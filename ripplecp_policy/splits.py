"""Leave-one-repository-out splits, inner validation splits, and the separation audit.

Statistical independence is at the task/repository level (paper, Appendix D): every
candidate of a task and every task of a repository sit on one side of every split. The
outer loop holds one repository out; everything learned or tuned inside a fold (feature
scaling, Optuna trials, thresholds, fitted-Q targets) sees training repositories only,
and each stage records the repositories it saw in a :class:`SplitAudit`, so the
separation can be checked after the fact rather than trusted.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
from sklearn.model_selection import GroupKFold, LeaveOneGroupOut

from labelsets.tables import LabelSet


class LeakageError(AssertionError):
    """A repository appeared on both sides of a split at some stage."""


@dataclass(frozen=True)
class Fold:
    """One outer fold: the held-out repository and the task ids on each side."""

    index: int
    held_out: str
    train_tasks: tuple[str, ...]
    test_tasks: tuple[str, ...]
    train_repos: tuple[str, ...]

    def check(self, data: LabelSet) -> None:
        """Raise :class:`LeakageError` if a task or repository is on both sides."""
        repo = data.tasks.set_index("task_id")["repo"]
        train = {repo[t] for t in self.train_tasks}
        test = {repo[t] for t in self.test_tasks}
        if train & test:
            raise LeakageError(f"fold {self.index}: repos on both sides: {sorted(train & test)}")
        if set(self.train_tasks) & set(self.test_tasks):
            raise LeakageError(f"fold {self.index}: tasks on both sides")


def _task_groups(data: LabelSet) -> tuple[np.ndarray, np.ndarray]:
    tasks = data.tasks.sort_values("task_id", kind="stable")
    return tasks["task_id"].to_numpy(), tasks["repo"].to_numpy()


def leave_one_repo_out(data: LabelSet) -> list[Fold]:
    """Outer folds, one per repository (sorted by name; deterministic)."""
    ids, groups = _task_groups(data)
    if len(set(groups)) < 2:
        raise ValueError(f"leave-one-repository-out needs >= 2 repositories, got {sorted(set(groups))}")
    folds = []
    logo = LeaveOneGroupOut()
    splits = list(logo.split(ids, groups=groups))
    splits.sort(key=lambda s: str(groups[s[1][0]]))
    for i, (tr, te) in enumerate(splits):
        held = str(groups[te[0]])
        fold = Fold(
            i, held, tuple(ids[tr]), tuple(ids[te]), tuple(sorted({str(g) for g in groups[tr]}))
        )
        fold.check(data)
        folds.append(fold)
    return folds


def inner_splits(
    repos: Iterable[str], task_repo: dict[str, str], max_splits: int | None = None
) -> Iterator[tuple[list[str], list[str]]]:
    """Validation splits over training repositories only: (inner-train, validation) task ids.

    Leave-one-repository-out over the training repositories, or ``GroupKFold`` with
    ``max_splits`` folds when there are more repositories than that.
    """
    repos = sorted(set(repos))
    tasks = sorted(t for t, r in task_repo.items() if r in repos)
    groups = np.array([task_repo[t] for t in tasks])
    ids = np.array(tasks)
    if len(repos) < 2:
        return
    if max_splits is not None and len(repos) > max_splits:
        # deterministic GroupKFold (no shuffling): the assignment depends only on the groups
        splitter = GroupKFold(n_splits=max_splits)
    else:
        splitter = LeaveOneGroupOut()
    for tr, va in splitter.split(ids, groups=groups):
        tr_repos, va_repos = set(groups[tr]), set(groups[va])
        if tr_repos & va_repos:  # pragma: no cover - guaranteed by the splitters
            raise LeakageError(f"inner split: repos on both sides: {sorted(tr_repos & va_repos)}")
        yield list(ids[tr]), list(ids[va])


@dataclass
class SplitAudit:
    """Which repositories each stage of a fit saw; ``check`` proves the held-out one did not.

    ``stages`` maps a stage name (e.g. ``"scaler"``, ``"model"``, ``"threshold"``,
    ``"tuning"``, ``"fqi_targets"``) to the set of repositories whose data it used.
    """

    stages: dict[str, set[str]] = field(default_factory=dict)

    def record(self, stage: str, repos: Iterable[str]) -> None:
        self.stages.setdefault(stage, set()).update(str(r) for r in repos)

    def merge(self, other: SplitAudit, prefix: str = "") -> None:
        for k, v in other.stages.items():
            self.record(prefix + k, v)

    def seen(self) -> set[str]:
        return set().union(*self.stages.values()) if self.stages else set()

    def check(self, held_out: Iterable[str]) -> None:
        """Raise :class:`LeakageError` naming the stage if any held-out repo was seen."""
        held = {str(r) for r in held_out}
        for stage, repos in sorted(self.stages.items()):
            both = repos & held
            if both:
                raise LeakageError(f"stage {stage!r} saw held-out repositories {sorted(both)}")

    def to_dict(self) -> dict[str, list[str]]:
        return {k: sorted(v) for k, v in sorted(self.stages.items())}
