"""The recorded runtime outputs in tests/data/recordings stay whole and as their README says."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from oracle.store.audit import AuditLog

RECORDINGS = Path(__file__).resolve().parents[3] / "data" / "recordings"
RUNS = ("task", "killed", "resumed", "forked")


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("folder, stream, session", [
    ("codex-0.171.0", "exec", "rollout"), ("claude-code-2.1.197", "stream", "session")])
def test_recordings_are_whole(folder: str, stream: str, session: str) -> None:
    root = RECORDINGS / folder
    files = {p.name for p in root.iterdir()}
    assert files == {f"{r}.{k}.jsonl" for r in RUNS for k in (stream, session)} | {
        "model_server.audit.jsonl"}
    for name in files:
        _lines(root / name)  # every line is JSON
    audit = AuditLog(root / "model_server.audit.jsonl").records()  # checksums verified
    model = Counter(r["key"].split("/")[0] for r in audit if r.get("protocol"))
    assert model == {"task": 4, "chain": 6}
    assert all(r["status"] == 200 and len(r["response_sha256"]) == 64 for r in audit)


def test_codex_thread_ids_across_kill_resume_and_fork() -> None:
    root = RECORDINGS / "codex-0.171.0"
    ids = {r: _lines(root / f"{r}.exec.jsonl")[0]["thread_id"] for r in RUNS}
    assert ids["killed"] == ids["resumed"] != ids["forked"]
    meta = _lines(root / "forked.rollout.jsonl")[0]["payload"]
    assert meta["forked_from_id"] == ids["resumed"]
    assert _lines(root / "killed.exec.jsonl")[-1]["type"] == "item.started"  # cut mid-tool


def test_claude_session_ids_across_kill_resume_and_fork() -> None:
    root = RECORDINGS / "claude-code-2.1.197"
    ids = {r: _lines(root / f"{r}.stream.jsonl")[0]["session_id"] for r in RUNS}
    assert ids["killed"] == ids["resumed"] != ids["forked"]
    assert _lines(root / "killed.stream.jsonl")[-1]["type"] == "assistant"  # no result line
    results = [e for e in _lines(root / "task.stream.jsonl") if e["type"] == "result"]
    assert results[0]["subtype"] == "success" and results[0]["num_turns"] == 6


def test_gemini_recording_is_whole() -> None:
    """Gemini CLI 0.61.0 through the Gemini protocol: two runs, every request streamed."""
    root = RECORDINGS / "gemini-cli-0.61.0"
    runs = ("task", "failing")
    files = {p.name for p in root.iterdir()}
    assert files == {f"{r}.{k}.jsonl" for r in runs for k in ("stream", "session")} | {
        "model_server.audit.jsonl", "README.md"}
    for name in files - {"README.md"}:
        _lines(root / name)
    audit = AuditLog(root / "model_server.audit.jsonl").records()
    assert Counter(r["key"].split("/")[0] for r in audit) == {"task": 4, "failing": 3}
    assert all(r["protocol"] == "gemini" and r["status"] == 200 and r["model"] ==
               "gemini-2.5-flash" and r["path"].endswith(":streamGenerateContent?alt=sse")
               for r in audit)
    for run in runs:
        steps = [r["decision"] for r in audit if r["key"].startswith(f"{run}/")]
        assert steps == [f"turn0/step{k}" for k in range(len(steps))]
