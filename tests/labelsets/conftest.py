"""Shared fixtures of the ``labelsets`` tests: a tiny, fully measured label set."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
import pytest

from features.schema import Event, Trajectory
from labelsets.tables import LabelSet, labels_from_recovery


def _recovery_row(r, f, role="table", pair=None, bid=None, cost=None, rep=0, q=False):
    return dict(
        task_id="a", restore_point=r, failure=f, repetition=rep, branch_id=bid or f"b{r}{f}{rep}{role}",
        pair_id=pair, role=role, cost_s=cost if cost is not None else 10.0 * (f - r),
        restore_latency_s=0.1, tokens=None, tool_calls=3, verified=True, capped=False, seed=7,
        state_digest="d", obs_digest="o", quarantined=q, quarantine_reason="diverged" if q else None,
    )


def _label_set(extra_rows=()):
    tasks = pd.DataFrame([dict(task_id="a", repo="r", family="x", verified=True, nominal_s=100.0,
                               n_boundaries=2, granularity="turn")])
    cps = pd.DataFrame([dict(task_id="a", boundary=b, event_index=b, step=b, nominal_t_s=40.0 * b,
                             creation_s=1.5, size_bytes=100 * b, restore_latency_s=0.5) for b in (1, 2)])
    rows = [_recovery_row(r, f) for f in (1, 2, 3) for r in range(f)]
    rows += [_recovery_row(1, 2, "cp", "p1", "p1/1", cost=12.0), _recovery_row(0, 2, "skip", "p1", "p1/0", cost=30.0)]
    rows += list(extra_rows)
    rec = pd.DataFrame(rows)
    labels = labels_from_recovery(tasks, cps, rec)
    traj = Trajectory("a", "r", "test", [Event(i, "command", step=i + 1, safe_boundary=True,
                                              boundary_kind="tool_return") for i in range(2)])
    return LabelSet(tasks, cps, rec, labels, {"a": traj}, {"seed": 1})


@pytest.fixture
def recovery_row() -> Callable[..., dict]:
    """A recovery-table row of task ``a`` (J = 10 s per segment unless ``cost`` is given)."""
    return _recovery_row


@pytest.fixture
def tiny_label_set() -> Callable[..., LabelSet]:
    """One task, two boundaries, every (r, f) measured, one CP/SKIP pair; ``extra_rows``
    are appended to the recovery table."""
    return _label_set
