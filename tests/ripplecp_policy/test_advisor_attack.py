"""The advisor under attack (issue 32, item 7): a torn decision log, a transcript that is a
FIFO, an endless device or huge, and concurrent hook calls. Fail-open holds: every call
returns in bounded time and memory, a torn tail is recovered, one decision per boundary."""

from __future__ import annotations

import io
import json
import os
import resource
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ripplecp_policy.advise import Args, hook
from ripplecp_policy.advisor import CP, DecisionLog, read_decisions
from ripplecp_policy.datasets import replays
from ripplecp_policy.export import example_frame, log_policy_model
from ripplecp_policy.learned import AdvantageRegressorPolicy
from ripplecp_policy.policy import Budget, Setting

REPO = Path(__file__).resolve().parents[2]
SESSION = REPO / "tests" / "data" / "recordings" / "claude-code-2.1.197" / "task.session.jsonl"
BUDGET = Budget("count", 2)


@pytest.fixture(scope="module")
def model(toy_label_set, tmp_path_factory) -> Path:
    ls = toy_label_set(n_repos=3, tasks_per_repo=2, seed=3)
    pol = AdvantageRegressorPolicy("xgboost", n_estimators=10, threshold=-1e9).fit(ls, Setting(BUDGET))
    obs: list = []
    for task in list(replays(ls).values())[:2]:
        pol.reset(task.task_id, 0)
        task.replay(pol.decide, BUDGET, trace=obs)
    return log_policy_model(pol, BUDGET, example_frame(obs).head(3),
                            path=tmp_path_factory.mktemp("attack") / "model")


def _hook_payload(transcript: Path | str, session: str, cwd: Path) -> str:
    return json.dumps({"session_id": session, "transcript_path": str(transcript), "cwd": str(cwd),
                       "hook_event_name": "PostToolUse"})


def _hook_proc(model: Path, log: Path, payload: str, timeout: float = 120,
               limit_as: int | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))

    def limit() -> None:
        if limit_as:
            resource.setrlimit(resource.RLIMIT_DATA, (limit_as, limit_as))

    return subprocess.run([sys.executable, "-m", "ripplecp_policy.advise", "--model", str(model),
                           "--budget", "count:2", "--hook", "claude-code", "--log", str(log)],
                          input=payload, env=env, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=limit)


def test_a_torn_line_in_the_log_does_not_disable_later_sessions(model: Path, tmp_path: Path) -> None:
    log = tmp_path / "d.jsonl"
    good = json.dumps({"session": "old", "boundary": 1, "decision": "SKIP", "reason": "policy"})
    log.write_text(good + "\n" + good[:25])  # the disk filled up mid-line
    args = Args(model=str(model), hook="claude-code", log=log, budget=None)
    assert hook(args, io.StringIO(_hook_payload(SESSION, "new", tmp_path))) == 0
    lines = log.read_text().splitlines()
    assert all(json.loads(x) for x in lines)  # the torn tail is gone, every line a record
    recs = read_decisions(log, "new")
    assert recs and recs[-1]["decision"] == CP and recs[-1]["reason"].startswith("policy")


def test_the_log_reader_skips_a_torn_or_corrupt_line(tmp_path: Path) -> None:
    log = tmp_path / "d.jsonl"
    a = json.dumps({"session": "s", "boundary": 1, "decision": "CP"})
    log.write_bytes((a + "\n{not json\n" + a.replace("1", "2") + "\n" + a[:9]).encode())
    assert [r["boundary"] for r in read_decisions(log)] == [1, 2]
    with DecisionLog(log) as out:
        out.append(a.replace("1", "3"))
    assert log.read_text().endswith(a.replace("1", "3") + "\n")
    assert [r["boundary"] for r in read_decisions(log)] == [1, 2, 3]


@pytest.mark.parametrize("kind", ["fifo", "urandom", "zero", "sparse-200MB", "directory"])
def test_a_hostile_transcript_returns_at_once_in_bounded_memory(kind: str, model: Path,
                                                                 tmp_path: Path) -> None:
    path: Path | str
    if kind == "fifo":
        path = tmp_path / "fifo"
        os.mkfifo(path)
    elif kind == "urandom":
        path = "/dev/urandom"
    elif kind == "zero":
        path = "/dev/zero"
    elif kind == "directory":
        path = tmp_path
    else:
        path = tmp_path / "big.jsonl"
        with open(path, "wb") as f:
            f.truncate(200 * 2**20)
    log = tmp_path / "d.jsonl"
    p = _hook_proc(model, log, _hook_payload(path, "s", tmp_path), timeout=120,
                   limit_as=3 * 2**30)
    assert p.returncode == 0, p.stderr[-2000:]
    assert log.stat().st_size < 10_000
    recs = read_decisions(log)
    assert all(r["decision"] == "SKIP" for r in recs)
    assert any("transcript" in r["reason"] for r in recs) or "transcript" in p.stderr


def test_concurrent_hook_calls_decide_each_boundary_once(model: Path, tmp_path: Path) -> None:
    """Bursts of hook calls on one session (Claude Code runs hooks in parallel): never two
    decisions of one boundary, never more checkpoints than the budget."""
    lines = SESSION.read_bytes().splitlines(keepends=True)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f.txt").write_text("x\n")
    for burst in range(6):
        transcript = tmp_path / f"t{burst}.jsonl"
        log = tmp_path / f"d{burst}.jsonl"
        args = Args(model=str(model), hook="claude-code", log=log, store=tmp_path / f"s{burst}",
                    budget=None)
        for cut in (len(lines) // 2, len(lines)):
            transcript.write_bytes(b"".join(lines[:cut]))
            threads = [threading.Thread(target=hook, args=(args, io.StringIO(
                _hook_payload(transcript, "sess", ws)))) for _ in range(6)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
        recs = read_decisions(log, "sess")
        bounds = [r["boundary"] for r in recs if r["boundary"] is not None]
        assert len(bounds) == len(set(bounds)), f"burst {burst}: {bounds}"
        assert sum(r["decision"] == CP for r in recs) <= 2
