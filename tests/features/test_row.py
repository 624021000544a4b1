"""The feature row declared once (``features.row``): names, layout and values by name."""

from __future__ import annotations

import math

import numpy as np
import pytest

from features.online import OnlineFeatureExtractor, boundary_features
from features.row import (
    CP_PAIRS,
    FAMILIES,
    FEATURE_NAMES,
    FEATURES,
    RAW_FIELDS,
    RAW_INDEX,
    feature_row,
    feature_rows,
    initial_raw,
)
from features.schema import BoundaryKind, Event, EventKind, Trajectory

NAN = math.nan


def _trajectory() -> Trajectory:
    """Two steps: a model call, a read, a write; then a failing test run and a commit."""
    tool = dict(safe_boundary=True, boundary_kind=BoundaryKind.TOOL_RETURN, exit_code=0)
    events = [
        Event(0, EventKind.MODEL_CALL, 1, start=0.0, end=2.0, input_tokens=100, cached_tokens=40,
              output_tokens=10),
        Event(1, EventKind.COMMAND, 1, start=2.0, end=3.0, command="cat a.py", **tool),
        Event(2, EventKind.COMMAND, 1, start=3.0, end=5.0, command="echo x > b.py", bytes_written=6,
              turn_end=True, **tool),
        Event(3, EventKind.TEST, 2, start=5.0, end=9.0, command="python -m pytest -q", exit_code=1,
              tests_passed=3, tests_failed=1, safe_boundary=True, boundary_kind=BoundaryKind.TEST),
        Event(4, EventKind.COMMAND, 2, start=9.0, end=10.0, command="git commit -m x", exit_code=0,
              safe_boundary=True, boundary_kind=BoundaryKind.COMMIT, turn_end=True),
    ]
    return Trajectory("known", "acme/app", "test", events)


# every feature after the last event, with a checkpoint after event 2 (tool-call boundary 2),
# worked out by hand from the definitions in features.online's docstring
EXPECTED_AT_END = {
    "cost__wall_s_total": 10.0, "cost__wall_s_since_cp": 5.0,
    "cost__busy_s_total": 10.0, "cost__busy_s_since_cp": 5.0,
    "cost__tokens_total": 110.0, "cost__tokens_since_cp": 0.0,
    "cost__input_tokens_since_cp": 0.0, "cost__cached_tokens_since_cp": 0.0,
    "cost__output_tokens_since_cp": 0.0,
    "cost__tool_calls_total": 4.0, "cost__tool_calls_since_cp": 2.0,
    "cost__model_calls_since_cp": 0.0, "cost__retries_total": 0.0, "cost__retries_since_cp": 0.0,
    "cost__errors_total": 1.0, "cost__errors_since_cp": 1.0,
    "cost__expensive_tool_calls_since_cp": 0.0, "cost__test_build_calls_since_cp": 1.0,
    "cost__uninterpreted_commands_since_cp": 0.0,
    "state__files_touched_total": 1.0, "state__files_touched_since_cp": 0.0,
    "state__files_read_since_cp": 0.0, "state__files_deleted_since_cp": 0.0,
    "state__bytes_modified_total": 6.0, "state__bytes_modified_since_cp": 0.0,
    "state__live_files": 1.0, "state__artifact_bytes": 6.0,
    "progress__tests_passed_latest": 3.0, "progress__tests_failed_latest": 1.0,
    "progress__newly_passing_since_cp": 3.0, "progress__verifier_events_total": 1.0,
    "progress__verifier_events_since_cp": 1.0, "progress__verifier_passes_since_cp": 0.0,
    "progress__last_verifier_passed": 0.0, "progress__validated_artifacts_since_cp": 0.0,
    "progress__commits_since_cp": 1.0,
    # frontier: live b.py + the latest test result; the test result is new
    "ripple__frontier_size": 2.0, "ripple__frontier_new": 1.0, "ripple__frontier_new_frac": 0.5,
    "ripple__live_versions_new": 0.0, "ripple__latest_tests_new": 1.0,
    # segment: the test and the commit; the commit consumes the test's result
    "ripple__segment_nodes": 2.0, "ripple__new_descendant_count": 1.0,
    "ripple__descendant_frac": 0.5,
    # edges into the segment: b.py -> test (build_io, from the past), test -> commit
    "ripple__segment_edges": 2.0, "ripple__edges_from_past": 1.0, "ripple__fanout_mean": 0.5,
    "ripple__fanout_max": 1.0, "ripple__downstream_verified": 0.0,
    "ripple__downstream_verified_passed": 0.0, "ripple__affected_artifacts": 0.0,
    "ripple__from_prev_segment": 2.0,
    # model->cat, a.py v0->cat, cat->echo, echo->b.py, b.py->test, test->commit
    "ripple__edges_total": 6.0,
    "context__has_checkpoint": 1.0, "context__checkpoints": 1.0, "context__events_since_cp": 2.0,
    "context__steps_since_cp": 1.0, "context__seconds_since_cp": 5.0,
    "context__work_since_cp_s": 5.0, "context__events_since_progress": 5.0,
    "context__seconds_since_progress": 10.0, "context__error_rate_recent": 0.2,
    "context__error_trend": NAN, "context__step": 2.0, "context__events_seen": 5.0,
    "context__safe_boundaries_seen": 4.0, "context__turns_completed": 2.0,
}


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_known_trajectory_values_by_name() -> None:
    """Each column holds its own quantity: a name attached to another feature's computation
    (or two columns swapped) changes a value here."""
    assert sorted(EXPECTED_AT_END) == sorted(FEATURE_NAMES)
    df = boundary_features(_trajectory(), "tool_call", checkpoints=[2])
    last = df.iloc[-1]
    wrong = {k: (float(last[k]), v) for k, v in EXPECTED_AT_END.items() if not _same(float(last[k]), v)}
    assert not wrong, f"feature (got, expected): {wrong}"
    # the online path, by name too
    ex = OnlineFeatureExtractor()
    for e in _trajectory().events:
        ex.observe(e)
        if e.index == 2:
            ex.mark_checkpoint()
    online = ex.features()
    assert all(_same(online[k], v) for k, v in EXPECTED_AT_END.items())


def test_before_any_event_and_first_boundary() -> None:
    row = dict(zip(FEATURE_NAMES, feature_row(initial_raw(), 10), strict=True))
    assert row["context__events_seen"] == 0.0 and row["context__has_checkpoint"] == 0.0
    assert all(math.isnan(row[k]) for k in ("cost__wall_s_total", "cost__tokens_total",
                                            "ripple__from_prev_segment", "context__error_trend"))
    first = boundary_features(_trajectory(), "tool_call").iloc[0]
    assert (first["cost__wall_s_total"], first["cost__tokens_total"]) == (3.0, 110.0)
    assert (first["state__files_read_since_cp"], first["ripple__edges_total"]) == (1.0, 2.0)


def test_declaration_generates_names_and_layout() -> None:
    assert FEATURE_NAMES == [f"{f.family}__{f.quantity}" for f in FEATURES]
    assert len(set(FEATURE_NAMES)) == len(FEATURE_NAMES)
    assert [f.family for f in FEATURES] == sorted((f.family for f in FEATURES), key=FAMILIES.index)
    assert len(set(RAW_FIELDS)) == len(RAW_FIELDS) == len(initial_raw())
    assert all(RAW_FIELDS[cp] == RAW_FIELDS[total] + "_at_cp" for total, cp in CP_PAIRS)
    assert RAW_INDEX == {n: i for i, n in enumerate(RAW_FIELDS)}


@pytest.mark.parametrize("seed", range(3))
def test_scalar_and_vector_builders_agree_bitwise_on_random_states(seed: int) -> None:
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 7, size=(200, len(RAW_FIELDS))).astype(np.float64)
    raw[rng.random(raw.shape) < 0.2] = np.nan
    batch = feature_rows(raw, 3)
    scalar = np.array([feature_row([x if x != x else int(x) for x in r], 3) for r in raw.tolist()])
    assert np.array_equal(batch.view(np.int64), scalar.view(np.int64))
