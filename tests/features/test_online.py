"""Online features: prefix causality, incremental = recompute, NaN semantics, checkpoints."""

from __future__ import annotations

import math
import random
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from features.graph import EdgeFamily
from features.online import (
    FEATURE_NAMES,
    FeatureConfig,
    OnlineFeatureExtractor,
    boundary_features,
    hindsight_descendants,
    reference_ripple,
)
from features.schema import Event, EventKind, Trajectory
from features.synthetic import generate_trajectory

FAMILIES = ("cost__", "state__", "progress__", "ripple__", "context__")


@st.composite
def trajectories(draw: st.DrawFn) -> Trajectory:
    """Schema-valid random trajectories: commands, file changes, tests, model calls."""
    n = draw(st.integers(0, 50))
    rng = draw(st.randoms(use_true_random=False))
    traj = generate_trajectory(
        n,
        rng=rng,
        n_files=draw(st.integers(1, 6)),
        timestamps=draw(st.booleans()),
        tokens=draw(st.booleans()),
        turn_length=(1, draw(st.integers(1, 10))),
    )
    traj.validate()
    return traj


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def assert_rows_equal(full: dict[str, float], cut: dict[str, float], where: str) -> None:
    diff = {k: (full[k], cut[k]) for k in FEATURE_NAMES if not same(full[k], cut[k])}
    assert not diff, f"{where}: features differ between whole and cut trajectory: {diff}"


def check_prefix_causal(traj: Trajectory, granularity: str, cps: set[int], picks: list[int]) -> None:
    full = boundary_features(traj, granularity, cps)
    bounds = traj.boundaries(granularity)  # type: ignore[arg-type]
    for b in picks:
        cut = traj.cut(bounds[b - 1])
        part = boundary_features(cut, granularity, {c for c in cps if c <= b})
        assert len(part) == b
        assert_rows_equal(full.iloc[b - 1].to_dict(), part.iloc[-1].to_dict(),
                          f"{traj.task_id} {granularity} boundary {b} checkpoints {sorted(cps)}")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traj=trajectories(), granularity=st.sampled_from(["turn", "tool_call"]), data=st.data())
def test_prefix_causal_on_generated(traj: Trajectory, granularity: str, data: st.DataObject) -> None:
    n_b = len(traj.boundaries(granularity))  # type: ignore[arg-type]
    if n_b == 0:
        assert boundary_features(traj, granularity).empty
        return
    cps = data.draw(st.sets(st.integers(1, n_b)), label="checkpoints")
    picks = data.draw(st.lists(st.integers(1, n_b), min_size=1, max_size=4, unique=True), label="t")
    check_prefix_causal(traj, granularity, cps, picks)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traj=trajectories(), data=st.data())
def test_incremental_ripple_equals_nx_recompute(traj: Trajectory, data: st.DataObject) -> None:
    """The bitset counters equal a from-scratch nx.descendants recompute at every boundary."""
    ex = OnlineFeatureExtractor()
    cps = data.draw(st.sets(st.integers(0, max(len(traj.events) - 1, 0))), label="cp after event")
    for e in traj.events:
        ex.observe(e)
        inc, ref = ex.ripple_state(), reference_ripple(ex)
        assert all(same(inc[k], ref[k]) for k in inc), (e.index, inc, ref)
        if e.index in cps:
            ex.mark_checkpoint()


def test_incremental_equals_recompute_small_case() -> None:
    events = [
        Event(index=0, kind=EventKind.COMMAND, step=1, command="echo a > a.py"),
        Event(index=1, kind=EventKind.COMMAND, step=1, command="cat a.py > b.py"),
        Event(index=2, kind=EventKind.TEST, step=2, command="pytest -q", exit_code=0),
        Event(index=3, kind=EventKind.COMMAND, step=3, command="sed -i s/a/b/ b.py"),
        Event(index=4, kind=EventKind.TEST, step=3, command="pytest -q", exit_code=0),
    ]
    ex = OnlineFeatureExtractor()
    seen = []
    for e in events:
        ex.observe(e)
        if e.index == 2:
            ex.mark_checkpoint()
        seen.append((ex.ripple_state(), reference_ripple(ex)))
    for inc, ref in seen:
        assert all(same(inc[k], ref[k]) for k in inc), (inc, ref)
    final = seen[-1][0]
    # after the checkpoint: b.py v2 (written) and the second test (depends on it) are new
    assert final["frontier_new"] == 2.0
    assert final["downstream_verified"] == 1.0
    assert final["from_prev_segment"] == 3.0  # event 3, b.py v2, event 4 descend from epoch 0


def test_feature_names_stable_and_prefixed() -> None:
    ex = OnlineFeatureExtractor()
    assert ex.feature_names == FEATURE_NAMES
    assert len(set(FEATURE_NAMES)) == len(FEATURE_NAMES)
    assert all(n.startswith(FAMILIES) for n in FEATURE_NAMES)
    assert {n.split("__")[0] + "__" for n in FEATURE_NAMES} == set(FAMILIES)
    assert list(ex.features()) == FEATURE_NAMES
    assert "context__has_checkpoint" in FEATURE_NAMES


def test_context_features_react_to_mark_checkpoint() -> None:
    traj = generate_trajectory(40, seed=3, turn_length=(5, 5))
    ex = OnlineFeatureExtractor()
    for e in traj.events[:20]:
        ex.observe(e)
    before = ex.features()
    assert before["context__has_checkpoint"] == 0.0
    assert before["context__events_since_cp"] == 20.0
    ex.mark_checkpoint()
    after = ex.features()
    assert after["context__has_checkpoint"] == 1.0 and after["context__checkpoints"] == 1.0
    assert after["context__events_since_cp"] == 0.0
    assert after["context__steps_since_cp"] == 0.0
    assert after["context__seconds_since_cp"] == 0.0
    assert after["cost__tool_calls_since_cp"] == 0.0
    assert after["ripple__frontier_new"] == 0.0 and after["ripple__segment_nodes"] == 0.0
    assert after["cost__tool_calls_total"] == before["cost__tool_calls_total"]
    ex.observe(traj.events[20])
    assert ex.features()["context__events_since_cp"] == 1.0


def test_nan_not_zero_without_timestamps_or_tokens() -> None:
    bare = generate_trajectory(60, seed=5, timestamps=False, tokens=False)
    df = boundary_features(bare, "tool_call", checkpoints=[3])
    for col in ("cost__wall_s_total", "cost__wall_s_since_cp", "cost__busy_s_total",
                "context__seconds_since_cp", "context__seconds_since_progress",
                "context__work_since_cp_s", "cost__tokens_since_cp",
                "cost__expensive_tool_calls_since_cp"):
        assert df[col].isna().all(), col
    timed = boundary_features(generate_trajectory(60, seed=5), "tool_call", checkpoints=[3])
    for col in ("cost__wall_s_total", "cost__busy_s_total", "context__seconds_since_cp"):
        assert timed[col].notna().all(), col
    # tokens are unknown until the first model call shows a count, then known
    first = next(e.index for e in generate_trajectory(60, seed=5).events if e.input_tokens is not None)
    known = timed[timed["event_index"] >= first]
    assert len(known) and known["cost__tokens_total"].notna().all()
    assert timed[timed["event_index"] < first]["cost__tokens_total"].isna().all()
    assert (timed["cost__wall_s_total"].diff().dropna() >= 0).all()


def test_token_parts_a_log_never_reports_are_nan_not_zero() -> None:
    # a mini-SWE-agent/OpenHands call without prompt_tokens_details: no cached count
    ev = [
        Event(index=0, kind=EventKind.MODEL_CALL, step=1, input_tokens=100, output_tokens=7),
        Event(index=1, kind=EventKind.COMMAND, step=1, command="ls"),
        Event(index=2, kind=EventKind.MODEL_CALL, step=2, output_tokens=5),
    ]
    ex = OnlineFeatureExtractor()
    for e in ev:
        ex.observe(e)
    f = ex.features()
    assert f["cost__input_tokens_since_cp"] == 100.0 and f["cost__output_tokens_since_cp"] == 12.0
    assert math.isnan(f["cost__cached_tokens_since_cp"])
    assert f["cost__tokens_total"] == 112.0
    only_out = OnlineFeatureExtractor()
    only_out.observe(Event(index=0, kind=EventKind.MODEL_CALL, step=1, output_tokens=3))
    g = only_out.features()
    assert g["cost__output_tokens_since_cp"] == 3.0
    assert math.isnan(g["cost__input_tokens_since_cp"]) and math.isnan(g["cost__cached_tokens_since_cp"])
    # once reported, a part stays known: zero since a new checkpoint, not NaN
    ex.observe(Event(index=3, kind=EventKind.MODEL_CALL, step=3, input_tokens=1, cached_tokens=0,
                     output_tokens=1))
    ex.mark_checkpoint()
    h = ex.features()
    assert (h["cost__input_tokens_since_cp"], h["cost__cached_tokens_since_cp"]) == (0.0, 0.0)


def test_boundary_features_checkpoint_semantics() -> None:
    traj = generate_trajectory(120, seed=11, turn_length=(8, 12))
    df = boundary_features(traj, "turn", checkpoints=[2, 4])
    assert list(df["boundary"]) == list(range(1, len(df) + 1))
    assert list(df["event_index"]) == traj.boundaries("turn")
    assert list(df.columns[:5]) == ["task_id", "repo", "boundary", "event_index", "step"]
    has = list(df["context__has_checkpoint"])
    assert has[:2] == [0.0, 0.0] and has[2] == 1.0  # row 2 does not see its own checkpoint
    assert list(df["context__checkpoints"])[:5] == [0.0, 0.0, 1.0, 1.0, 2.0]
    assert df.loc[2, "context__steps_since_cp"] == 1.0
    with pytest.raises(ValueError, match="outside"):
        boundary_features(traj, "turn", checkpoints=[len(df) + 1])


def test_ablation_config_changes_graph_features() -> None:
    traj = generate_trajectory(300, seed=2)
    ex_all, ex_abl = OnlineFeatureExtractor(), OnlineFeatureExtractor(
        FeatureConfig().without(EdgeFamily.UNINTERPRETED))
    boundary_features(traj, "turn", extractor=ex_all)
    boundary_features(traj, "turn", extractor=ex_abl)
    assert ex_all.graph.edge_counts["uninterpreted"] > 0
    assert ex_abl.graph.edge_counts["uninterpreted"] == 0
    assert EdgeFamily.NL_INFERRED not in FeatureConfig().edge_families
    with pytest.raises(ValueError):
        FeatureConfig(error_trend_window=0)


def test_errors_retries_and_progress() -> None:
    ev = [
        Event(index=0, kind=EventKind.TEST, step=1, command="pytest -q", exit_code=1,
              tests_passed=3, tests_failed=2, is_error=True),
        Event(index=1, kind=EventKind.COMMAND, step=1, command="echo x > a.py"),
        Event(index=2, kind=EventKind.TEST, step=1, command="pytest -q", exit_code=0,
              tests_passed=5, tests_failed=0),
    ]
    ex = OnlineFeatureExtractor()
    for e in ev:
        ex.observe(e)
    f = ex.features()
    assert f["cost__errors_total"] == 1.0 and f["cost__retries_total"] == 1.0
    assert f["progress__newly_passing_since_cp"] == 5.0
    assert f["progress__last_verifier_passed"] == 1.0
    assert f["progress__validated_artifacts_since_cp"] == 1.0
    assert f["context__events_since_progress"] == 0.0
    ex.mark_checkpoint()
    assert ex.features()["progress__newly_passing_since_cp"] == 0.0


def test_observe_out_of_order_raises() -> None:
    ex = OnlineFeatureExtractor()
    with pytest.raises(ValueError, match="out of order"):
        ex.observe(Event(index=3, kind=EventKind.MESSAGE))


def test_hindsight_descendants_uses_the_future() -> None:
    events = [
        Event(index=0, kind=EventKind.COMMAND, step=1, command="echo a > a.py",
              safe_boundary=True, boundary_kind="tool_return"),
        Event(index=1, kind=EventKind.COMMAND, step=2, command="cat a.py",
              safe_boundary=True, boundary_kind="tool_return"),
        Event(index=2, kind=EventKind.COMMAND, step=3, command="ls other",
              safe_boundary=True, boundary_kind="tool_return"),
    ]
    traj = Trajectory("t", "r", "test", events)
    df = hindsight_descendants(traj, "turn")
    assert all(c.startswith("hindsight__") for c in df.columns[4:])
    # boundary 1 (echo): event 1 descends from a.py v1, event 2 does not
    assert df.loc[0, "hindsight__future_events_descending"] == 1
    assert df.loc[2, "hindsight__future_nodes"] == 0


def test_prefix_causal_on_real_fixtures(fixture_logs: list[Path]) -> None:
    readers = pytest.importorskip("features.readers")
    files = fixture_logs
    assert files
    rng = random.Random(20260818)
    checked = 0
    for path in files:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            traj = readers.read_trajectory(path)
        for granularity in ("turn", "tool_call"):
            n_b = len(traj.boundaries(granularity))
            if n_b == 0:
                continue
            cps = {b for b in range(1, n_b + 1) if rng.random() < 0.3}
            picks = sorted(rng.sample(range(1, n_b + 1), min(n_b, 4)))
            check_prefix_causal(traj, granularity, cps, picks)
            checked += 1
    assert checked >= 5


def _online_rows(traj: Trajectory, granularity: str, cps: set[int], config: FeatureConfig) -> list[list[float]]:
    """feature_vector() at each boundary, walking the trajectory as a runtime would."""
    ex = OnlineFeatureExtractor(config)
    rows = []
    events = iter(traj.events)
    for b, idx in enumerate(traj.boundaries(granularity), start=1):  # type: ignore[arg-type]
        for e in events:
            ex.observe(e)
            if e.index == idx:
                break
        rows.append(ex.feature_vector())
        if b in cps:
            ex.mark_checkpoint()
    return rows


def assert_bitwise_equal(batch: np.ndarray, online: list[list[float]], where: str) -> None:
    got = np.asarray(online, dtype=np.float64).reshape(batch.shape)
    bad = np.argwhere(got.view(np.int64) != batch.view(np.int64))
    assert not len(bad), (
        f"{where}: online feature_vector() differs from boundary_features at "
        f"{[(int(r) + 1, FEATURE_NAMES[c], got[r, c], batch[r, c]) for r, c in bad[:5]]}"
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traj=trajectories(), granularity=st.sampled_from(["turn", "tool_call"]), data=st.data(),
       window=st.integers(1, 6), expensive=st.sampled_from([0.5, 30.0]))
def test_online_vector_equals_batch_rows_bitwise(traj: Trajectory, granularity: str, data: st.DataObject,
                                                 window: int, expensive: float) -> None:
    """The scalar online row and the vectorised batch rows are two codings of the same
    definitions: they must agree to the bit, NaN for NaN, at every boundary."""
    n_b = len(traj.boundaries(granularity))  # type: ignore[arg-type]
    cps = data.draw(st.sets(st.integers(1, max(n_b, 1))), label="checkpoints") if n_b else set()
    config = FeatureConfig(error_trend_window=window, expensive_tool_seconds=expensive)
    batch = boundary_features(traj, granularity, cps, config)[FEATURE_NAMES].to_numpy(np.float64)
    assert_bitwise_equal(batch, _online_rows(traj, granularity, cps, config), traj.task_id)


def test_online_vector_equals_batch_rows_on_real_fixtures(fixture_logs: list[Path]) -> None:
    readers = pytest.importorskip("features.readers")
    from features.online import config_for

    checked = 0
    for path in fixture_logs:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            traj = readers.read_trajectory(path)
        for granularity in ("turn", "tool_call"):
            n_b = len(traj.boundaries(granularity))
            cps = set(range(2, n_b + 1, 3))
            config = config_for(traj)
            batch = boundary_features(traj, granularity, cps, config)[FEATURE_NAMES].to_numpy(np.float64)
            assert_bitwise_equal(batch, _online_rows(traj, granularity, cps, config), f"{path.name} {granularity}")
            checked += n_b
    assert checked > 100
