"""Aider's chat history (``.aider.chat.history.md``) and LLM history: a hand-made log of
each mirroring the formats of ``aider/io.py`` (counts below checked with grep, see each
test), the real recording of Aider 0.86.2 against the loopback model server, the stream-vs-
file identity and the one-line refusals."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from features.readers import TrajectoryFormatError, detect_format, read_trajectory, stream_parser
from features.schema import BoundaryKind, EventKind

DATA = Path(__file__).resolve().parents[2] / "data"
CHAT = DATA / "readers" / "aider" / "chat.history.md"
LLM = DATA / "readers" / "aider" / "llm.history"
RECORDED = DATA / "recordings" / "aider-0.86.2"


def _kinds(t) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in t.events:
        out[e.kind.value] = out.get(e.kind.value, 0) + 1
    return out


def test_hand_made_chat_history_counts() -> None:
    """Counted in the file with grep: ``^> Tokens: \\|prompt tokens, .* completion`` 3
    usage reports (+ 1 reply cut by ^C, no report: 4 model calls); ``^> Applied edit to``
    4; ``^> Running`` 2 and ``^#### /run \\|^#### !\\|^#### /test`` 3 (2 of them pytest:
    tests); ``^> Commit [0-9a-f]{7}`` 2; tokens 2.4k + 12k + 1,204 sent = 15,604, 9.8k cache
    hit, 153 + 1.1k + 87 = 1,340 received."""
    t = read_trajectory(CHAT)
    assert t.source_format == "aider-chat" and detect_format(CHAT) == "aider-chat"
    kinds = _kinds(t)
    assert kinds["model_call"] == 4
    assert kinds["file_change"] == 4
    assert kinds["command"] + kinds["test"] == 5 and kinds["test"] == 2
    commits = [e for e in t.events if e.boundary_kind is BoundaryKind.COMMIT]
    assert [e.extra["commit"] for e in commits] == ["3f9a2c1", "77d01be"]
    tot = t.meta["totals"]
    assert (tot["input_tokens"], tot["cached_tokens"], tot["output_tokens"]) == (15604, 9800, 1340)
    calls = [e for e in t.events if e.kind is EventKind.MODEL_CALL]
    assert [c.extra.get("cost_usd") for c in calls] == [0.0083, 0.02, None, 0.000912]
    assert [c.extra.get("tokens_rounded") for c in calls] == [True, True, None, False]
    assert calls[1].extra["cache_write_tokens"] == 1500  # "Cost:" on Aider's second line
    # the reply's own markdown (a heading, a quote, a README quoted in a fence) stays in it
    assert "#### Plan" in calls[0].text and "> Note:" in calls[0].text
    assert "#### Usage" in calls[1].text
    assert calls[0].extra["shell_blocks"] == ["python -m pytest -q"]
    assert calls[2].text.endswith("def partial(")  # cut inside a fence, ended by the input
    # nothing the log lacks is invented: no times, no exit codes
    assert all(e.start is None and e.end is None for e in t.events)
    assert all(e.exit_code is None for e in t.events)
    cmds = {e.command: e for e in t.events if e.command}
    assert cmds["ls -la"].extra == {"line": 56, "by": "user", "slash": "run", "add_output": "n"}
    assert cmds["git status --short"].extra["slash"] == "run"  # "!cmd"
    test = [e for e in t.events if e.extra.get("slash") == "test"][0]
    assert test.extra["exit_nonzero"] and test.extra["output_lines"] == 12
    prompts = [e.text for e in t.events if e.extra.get("prompt")]
    assert prompts[0].startswith("add a greet()") and len(prompts) == 4  # 3 + /ask
    assert t.meta["aider_version"] == "0.83.0" and len(t.meta["sessions"]) == 2
    assert t.meta["totals"]["steps"] == 4
    assert t.task_id == "chat.history"


def test_llm_history_counts() -> None:
    """``grep -c '^TO LLM'`` 3 requests, ``grep -c '^LLM RESPONSE'`` 2 answers: the third
    was cut (no response)."""
    t = read_trajectory(LLM)
    assert t.source_format == "aider-llm-history"
    assert [e.kind for e in t.events] == [EventKind.MODEL_CALL] * 3
    a, b, c = t.events
    assert (a.end - a.start, b.end - b.start) == (11.0, 7.0)
    assert a.text == "I'll add `greet()`.\n\nhello.py" and a.extra["n_messages"] == 4
    assert c.extra["incomplete"] and c.text is None and c.end is None
    assert all(e.input_tokens is None for e in t.events)


@pytest.mark.parametrize("path", [CHAT, LLM, RECORDED / ".aider.chat.history.md",
                                  RECORDED / ".aider.llm.history"], ids=lambda p: p.name)
def test_stream_equals_file(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"{path} not recorded")
    p = stream_parser(detect_format(path), source=path)
    handed = []
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        handed += copy.deepcopy(p.feed(line))
    handed += copy.deepcopy(p.flush())
    traj = p.finish()
    assert traj == read_trajectory(path)
    assert handed == traj.events


def test_bad_input_is_refused_naming_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "notes.md"
    p.write_text("# Notes\n\nsome text\n")
    with pytest.raises(TrajectoryFormatError, match=r"notes\.md: line 1: unknown trajectory format"):
        read_trajectory(p)
    with pytest.raises(TrajectoryFormatError,
                       match=r"notes\.md: line 1: not an Aider chat history"):
        read_trajectory(p, "aider")
    q = tmp_path / "h.md"
    q.write_text("# aider chat started at 2025-01-01 00:00:00\n\n#### hi  \n\nreply\n\n"
                 "> Tokens: lots sent, 3 received.  \n")
    with pytest.raises(TrajectoryFormatError, match=r"h\.md: line 7: an Aider usage report"):
        read_trajectory(q)
    r = tmp_path / "llm.history"
    r.write_text("TO LLM 2025-01-01T00:00:00\nUSER x\nLLM RESPONSE yesterday\n")
    with pytest.raises(TrajectoryFormatError, match=r"llm\.history: line 3: invalid ISO"):
        read_trajectory(r)
    s = tmp_path / "bin.md"
    s.write_bytes(b"# aider chat started at 2025-01-01 00:00:00\n\n\xff\xfe\n")
    with pytest.raises(TrajectoryFormatError, match=r"bin\.md: line 3: not UTF-8"):
        read_trajectory(s)


def test_recorded_aider_session() -> None:
    """Aider 0.86.2 driven by the loopback server (scripts/record_aider.py; counts in
    tests/data/recordings/README.md, checked there with grep)."""
    path = RECORDED / ".aider.chat.history.md"
    if not path.exists():
        pytest.skip("no Aider recording")
    t = read_trajectory(path)
    kinds = _kinds(t)
    assert kinds["model_call"] == 2
    assert kinds["file_change"] == 3
    assert kinds["test"] == 3 and kinds["command"] == 1  # /run, /test, /test pytest; !git log
    assert len([e for e in t.events if e.boundary_kind is BoundaryKind.COMMIT]) == 2
    tot = t.meta["totals"]
    assert (tot["input_tokens"], tot["cached_tokens"], tot["output_tokens"]) == (6000, None, 158)
    assert [e.extra.get("exit_nonzero") for e in t.events if e.extra.get("slash") == "test"] == [
        True, None]  # the first /test failed (its output was added), the second passed
    assert all(e.exit_code is None and e.start is None for e in t.events)
    llm = read_trajectory(RECORDED / ".aider.llm.history")
    assert len(llm.events) == 2  # the replies; commit messages are not logged there
    assert all(e.start is not None and e.end >= e.start for e in llm.events)
