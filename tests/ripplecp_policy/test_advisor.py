"""The advisor following recorded sessions of the real runtimes: the features it keeps are
the batch walk's, the budget holds, every checkpoint restores and matches the log, and every
failure is a logged SKIP (fail-open)."""

from __future__ import annotations

import io
import json
import math
import shutil
from pathlib import Path

import pytest

from features.online import FEATURE_NAMES, boundary_features
from features.readers import read_trajectory
from oracle.store.checkpoint import CheckpointStore, state_digest
from ripplecp_policy.advisor import (
    CP,
    SKIP,
    Advisor,
    detect_line_format,
    features_digest,
    load_model,
    read_decisions,
    resolve_budget,
    store_for,
)
from ripplecp_policy.datasets import replays
from ripplecp_policy.export import example_frame, log_policy_model
from ripplecp_policy.learned import AdvantageRegressorPolicy
from ripplecp_policy.policy import Budget, BudgetSpec, Setting

RECORDINGS = Path(__file__).resolve().parents[1] / "data" / "recordings"
LOGS = [RECORDINGS / "claude-code-2.1.197" / "task.stream.jsonl",
        RECORDINGS / "claude-code-2.1.197" / "task.session.jsonl",
        RECORDINGS / "codex-0.171.0" / "task.exec.jsonl",
        RECORDINGS / "codex-0.171.0" / "task.rollout.jsonl"]
BUDGET = Budget("count", 2)


def export(policy, budget: Budget, data, path: Path) -> Path:
    obs: list = []
    for task in list(replays(data).values())[:2]:
        policy.reset(task.task_id, 0)
        task.replay(policy.decide, budget, trace=obs)
    return log_policy_model(policy, budget, example_frame(obs).head(3), path=path)


@pytest.fixture(scope="module")
def eager(toy_label_set, tmp_path_factory) -> Path:
    """A policy that wants a checkpoint at every boundary (the budget decides), exported."""
    ls = toy_label_set(n_repos=3, tasks_per_repo=2, seed=3)
    pol = AdvantageRegressorPolicy("xgboost", n_estimators=20, threshold=-1e9).fit(ls, Setting(BUDGET))
    return export(pol, BUDGET, ls, tmp_path_factory.mktemp("eager") / "model")


def _follow(adv: Advisor, log: Path) -> Advisor:
    with open(log, "rb") as f:
        for line in f:
            adv.feed(line)
    adv.finish()
    return adv


@pytest.mark.parametrize("log", LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_features_are_the_batch_walks_under_the_taken_placement(eager: Path, log: Path,
                                                                tmp_path: Path) -> None:
    model = load_model(eager)
    _follow(Advisor(model, BUDGET, log=tmp_path / "d.jsonl", source=log), log)
    traj = read_trajectory(log)
    assert detect_line_format(json.loads(log.read_text().splitlines()[0])) == traj.source_format
    bounds = traj.boundaries("tool_call")
    recs = read_decisions(tmp_path / "d.jsonl")
    assert [r["boundary"] for r in recs] == list(range(1, len(bounds) + 1))
    assert [r["event_index"] for r in recs] == bounds
    taken = [r["boundary"] for r in recs if r["decision"] == CP]
    assert taken == [1, 2]  # an eager policy, a 2-checkpoint budget
    assert [r["remaining_budget"] for r in recs] == [1.0] + [0.0] * (len(bounds) - 1)
    rows = boundary_features(traj, "tool_call", checkpoints=taken)
    assert [r["features_sha256"] for r in recs] == [
        features_digest(row) for row in rows[FEATURE_NAMES].to_numpy()]
    assert all(r["session"] == traj.task_id for r in recs)
    assert all(r["reason"].startswith("policy") for r in recs)


def test_checkpoints_restore_and_match_the_log(eager: Path, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("one\n")
    store = store_for(ws / ".store", ws)  # inside the workspace: excluded from its checkpoints
    log = LOGS[2]
    adv = Advisor(load_model(eager), BUDGET, log=tmp_path / "d.jsonl", store=store, workspace=ws,
                  source=log)
    lines = log.read_bytes().splitlines()
    for i, line in enumerate(lines):
        (ws / "b.txt").write_text(f"line {i}\n")  # the agent keeps working between lines
        adv.feed(line)
    adv.finish()
    cps = [r for r in read_decisions(tmp_path / "d.jsonl") if r["decision"] == CP]
    assert len(cps) == 2 and sorted(r["checkpoint_id"] for r in cps) == store.ids()
    fresh = CheckpointStore(ws / ".store")
    for r in cps:
        dest = tmp_path / f"restored-{r['boundary']}"
        info = fresh.restore(r["checkpoint_id"], dest)
        assert info.state_digest == r["state_digest"] == state_digest(dest)
        assert not (dest / ".store").exists() and (dest / "a.txt").read_text() == "one\n"
        assert fresh.manifest(r["checkpoint_id"])["facts"]["advisor"]["boundary"] == r["boundary"]
        assert r["size_bytes"] > 0 and r["creation_s"] > 0


def test_a_seconds_budget_is_charged_the_measured_cost(eager: Path, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f.txt").write_text("x" * 1000)
    store = store_for(tmp_path / "store", ws)
    budget = Budget("seconds", 10.0)
    adv = _follow(Advisor(load_model(eager), budget, store=store, workspace=ws, source=LOGS[0]),
                  LOGS[0])
    cps = adv.checkpoints
    assert len(cps) == len(adv.decisions)  # 10 s buys every checkpoint of this session
    assert all(d.charge == d.creation_s for d in cps)
    assert adv.remaining == pytest.approx(10.0 - sum(d.creation_s for d in cps))
    assert resolve_budget(BudgetSpec.parse("count:3"), {}) == Budget("count", 3)
    with pytest.raises(ValueError, match="relative seconds budget"):
        resolve_budget(BudgetSpec.parse("seconds:2x"), {"budget_kind": "count"})
    assert resolve_budget(BudgetSpec.parse("seconds:2x"), {
        "budget_kind": "seconds", "default_checkpoint_cost": 1.5}) == Budget("seconds", 3.0)


def test_fail_open_every_error_is_a_logged_skip(eager: Path, tmp_path: Path) -> None:
    model = load_model(eager)
    lines = LOGS[2].read_bytes().splitlines()
    # a line that is not JSON, mid-stream: logged, and the session goes on
    adv = Advisor(model, BUDGET, source="x")
    for i, line in enumerate(lines):
        adv.feed(line)
        if i == 1:
            assert adv.feed(b"{not json")[0].reason.startswith("error: ")
    adv.finish()
    assert [d.boundary for d in adv.decisions if d.boundary] == [1, 2, 3, 4]
    assert sum(d.decision == CP for d in adv.decisions) == 2
    # no model: every boundary SKIP, saying why
    adv = _follow(Advisor(None, BUDGET, load_error="model m did not load: boom"), LOGS[2])
    assert {(d.decision, d.reason) for d in adv.decisions} == {
        (SKIP, "advisor disabled: model m did not load: boom")}
    # a policy that raises
    broken = load_model(eager)
    broken.policy.decide = lambda obs: 1 / 0  # type: ignore[method-assign]
    adv = _follow(Advisor(broken, BUDGET), LOGS[2])
    assert all(d.decision == SKIP and "ZeroDivisionError" in d.reason for d in adv.decisions)
    # a checkpoint that fails: SKIP, nothing charged, the next boundary can still take one
    ws = tmp_path / "gone"
    adv = Advisor(model, BUDGET, store=CheckpointStore(tmp_path / "s"), workspace=ws)
    for line in lines:
        if adv.feed(line):  # the first decision failed: the workspace appears only now
            ws.mkdir(exist_ok=True)
    adv.finish()
    assert adv.decisions[0].decision == SKIP and "error: checkpoint" in adv.decisions[0].reason
    assert adv.decisions[0].remaining_budget == 2.0
    assert [d.decision for d in adv.decisions[1:]] == [CP, CP, SKIP]
    # an unknown format: one logged reason, nothing else
    adv = Advisor(model, BUDGET)
    adv.feed('{"what": 1}')
    adv.feed('{"what": 2}')
    assert [d.reason.split(":")[0] for d in adv.finish() + adv.decisions] == ["error"]


def test_catch_up_decides_the_newest_boundary_and_replays_earlier_calls(eager: Path,
                                                                       tmp_path: Path) -> None:
    """The hook's way: each call re-reads the transcript so far; boundaries an earlier call
    decided are taken from the log, older undecided ones are SKIP (past)."""
    model = load_model(eager)
    log = tmp_path / "d.jsonl"
    lines = LOGS[1].read_bytes().splitlines(keepends=True)
    traj = read_trajectory(LOGS[1])
    session = traj.task_id
    for cut in (4, 5, 9, 12, len(lines)):
        adv = Advisor(model, BUDGET, log=log, session=session, catch_up=True,
                      prior=read_decisions(log, session), format="claude-code-session")
        for line in lines[:cut]:
            adv.feed(line)
        adv.finish()
    recs = read_decisions(log, session)
    bs = [r["boundary"] for r in recs]
    assert sorted(bs) == bs == list(range(1, len(traj.boundaries("tool_call")) + 1))
    assert sum(r["decision"] == CP for r in recs) == 2
    assert any(r["reason"].startswith("past") for r in recs)
    assert read_decisions(tmp_path / "absent.jsonl") == []


def test_a_live_stream_with_arrival_times(eager: Path) -> None:
    adv = Advisor(load_model(eager), BUDGET, format="codex")
    for t, line in enumerate(LOGS[2].read_bytes().splitlines()):
        adv.feed(line, arrival_s=1000.0 + t)
    adv.finish()
    assert len(adv.checkpoints) == 2 and all(math.isfinite(d.decide_ms) for d in adv.decisions)
    out = io.StringIO()
    adv = Advisor(load_model(eager), BUDGET, log=out)
    _follow(adv, LOGS[0])
    assert len(out.getvalue().splitlines()) == len(adv.decisions)


def test_store_for_excludes_a_store_inside_the_workspace(tmp_path: Path) -> None:
    store = store_for(tmp_path / "ws" / "deep" / "store", tmp_path / "ws")
    assert "deep/store/" in store.exclude
    assert store_for(tmp_path / "elsewhere", tmp_path / "ws").exclude == CheckpointStore(
        tmp_path / "x").exclude
    shutil.rmtree(tmp_path / "x")


def test_a_policy_following_another_runtime_warns_once(tmp_path: Path) -> None:
    """A model whose config says it was trained on codex logs, following Claude Code: one
    warning, and the mismatch named for `advise status`; the same runtime: none."""
    import warnings

    from baselines import EveryBoundary
    from ripplecp_policy.advisor import AdvisorModel, ProvenanceWarning

    cfg = {"budget_kind": "count", "budget_amount": 2.0, "training_runtime": ["codex"],
           "log_format": ["codex-exec"]}
    model = AdvisorModel(EveryBoundary(), cfg, "every")
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        adv = _follow(Advisor(model, BUDGET, source=LOGS[1]), LOGS[1])
    assert sum(issubclass(w.category, ProvenanceWarning) for w in got) == 1
    assert adv.mismatch and "claude-code" in adv.mismatch and "codex" in adv.mismatch
    with warnings.catch_warnings():
        warnings.simplefilter("error", ProvenanceWarning)
        adv = _follow(Advisor(model, BUDGET, source=LOGS[2]), LOGS[2])
    assert adv.mismatch is None
