"""The streaming-parser interface (``features.readers.stream``): for every line-oriented
format, feeding a recorded file line by line gives exactly what ``read_trajectory`` gives,
events handed out are final, and the interface's bad-input and end-of-stream rules hold.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from features.readers import (
    READERS,
    ReaderSpec,
    TrajectoryFormatError,
    detect_format,
    read_trajectory,
    stream_parser,
)
from features.readers.codex_exec import CodexExecParser
from features.readers.stream import StreamParser, TextStreamParser
from features.schema import Event, EventKind

RECORDINGS = Path(__file__).resolve().parents[2] / "data" / "recordings"
CODEX = RECORDINGS / "codex-0.171.0"
CLAUDE = RECORDINGS / "claude-code-2.1.197"
GEMINI = RECORDINGS / "gemini-cli-0.61.0"
RUNS = ("task", "killed", "resumed", "forked")

HANDMADE = Path(__file__).resolve().parents[2] / "data" / "readers"

# every recorded live stdout and session file (model_server.audit.jsonl is the server's
# log), and every hand-made log of the readers' tests
RECORDED = sorted(
    [CODEX / f"{r}.{kind}.jsonl" for r in RUNS for kind in ("exec", "rollout")]
    + [CLAUDE / f"{r}.{kind}.jsonl" for r in RUNS for kind in ("stream", "session")]
    + [GEMINI / f"{r}.stream.jsonl" for r in ("task", "failing")]
    + list(HANDMADE.rglob("*.jsonl")))
PUBLIC = ["codex_rollout/agentcmd_rollout-2025-09-24T19-22-20-01997e76.jsonl",
          "codex_exec_jsonl/agentcmd_stream-output-1.jsonl",
          "codex_exec_jsonl/agentcmd_stream-output-2.jsonl",
          "codex_exec_jsonl/agentcmd_stream-output-3.jsonl",
          "codex_exec_jsonl/tielec_issue-119_00_planning_execute.jsonl",
          "codex_exec_jsonl/tielec_issue-119_03_test_scenario_execute.jsonl"]


def _stream(path: Path, times: list[float] | None = None) -> tuple[list[Event], list[Event],
                                                                     object]:
    """Feed ``path`` line by line (as a harness reads stdout): the events as handed out
    (deep copies taken at once), the flushed tail, and the finished trajectory."""
    fmt = detect_format(path)
    p = stream_parser(fmt, source=path)
    handed: list[Event] = []
    lines = path.read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    nonblank = iter(times) if times is not None else None
    for line in lines:
        t = next(nonblank) if nonblank is not None and line.strip() else None
        handed += copy.deepcopy(p.feed(line, arrival_s=t))
    tail = copy.deepcopy(p.flush())
    return handed, tail, p.finish()


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: str(p.relative_to(p.parents[2])))
def test_stream_equals_file_and_events_are_final(path: Path) -> None:
    try:
        read_trajectory(path)
    except TrajectoryFormatError as exc:  # an adversarial log: fed, it is refused alike
        with pytest.raises(TrajectoryFormatError, match=f"^{re.escape(str(exc))}$"):
            _stream(path)
        return
    handed, tail, traj = _stream(path)
    assert traj == read_trajectory(path)  # the stream-vs-file identity, meta included
    # every event handed out is exactly the event the trajectory holds at the end
    assert handed + tail == traj.events
    assert [e.index for e in traj.events] == list(range(len(traj.events)))


@pytest.mark.parametrize("rel", PUBLIC)
def test_stream_equals_file_on_public_logs(rel: str, fixture_path: Callable[[str], Path]) -> None:
    path = fixture_path(rel)
    handed, tail, traj = _stream(path)
    assert traj == read_trajectory(path)
    assert handed + tail == traj.events


def test_arrival_times_fed_per_line_equal_the_file_option(fixture_path: Callable[[str], Path]) -> None:
    path = fixture_path("codex_exec_jsonl/agentcmd_stream-output-2.jsonl")
    n = sum(1 for x in path.read_text(encoding="utf-8").splitlines() if x.strip())
    times = [100.0 + 0.5 * i for i in range(n)]
    handed, tail, traj = _stream(path, times)
    assert traj == read_trajectory(path, arrival_times=times)
    assert handed + tail == traj.events
    assert traj.meta["has_arrival_times"]
    (cmd,) = [e for e in traj.events if e.kind == EventKind.COMMAND]
    assert (cmd.start, cmd.end) == (times[3], times[4])  # item.started line 4, completed line 5


def test_codex_exec_releases_an_item_on_its_completing_line() -> None:
    p = CodexExecParser(source="live")
    assert p.feed('{"type":"thread.started","thread_id":"t"}') == []
    assert p.feed('{"type":"turn.started"}', 1.0) == []
    assert p.feed({"type": "item.started", "item": {"id": "i0", "type": "command_execution",
                                                   "command": "ls", "status": "in_progress"}},
                  2.0) == []
    (ev,) = p.feed({"type": "item.completed", "item": {
        "id": "i0", "type": "command_execution", "command": "ls", "exit_code": 0,
        "aggregated_output": "a\n", "status": "completed"}}, 3.0)
    # final at once: boundary, times, index and turn_end are set on the completing line
    assert (ev.index, ev.safe_boundary, ev.start, ev.end, ev.turn_end) == (0, True, 2.0, 3.0,
                                                                          False)
    (mc,) = p.feed({"type": "turn.completed", "usage": {"input_tokens": 5,
                                                        "output_tokens": 1}}, 4.0)
    assert mc.turn_end and mc.input_tokens == 5
    assert p.thread_id == "t"
    assert p.finish().events == [ev, mc]


def test_bad_lines_name_the_source_and_line() -> None:
    p = stream_parser("codex-exec", source="run-7")
    p.feed("")  # blank lines are skipped but counted
    with pytest.raises(TrajectoryFormatError, match=r"run-7: line 2: not valid JSON"):
        p.feed('{"type": "turn.started"')
    with pytest.raises(TrajectoryFormatError, match=r"run-7: line 3: expected a JSON object"):
        p.feed("[1, 2]")
    with pytest.raises(TrajectoryFormatError, match=r"run-7: line 4: field type: missing"):
        p.feed("{}")
    with pytest.raises(TrajectoryFormatError, match=r"run-7: line 5: not UTF-8 text"):
        p.feed(b'{"type": "\xff"}')


def test_end_of_stream_rules() -> None:
    p = stream_parser("claude-code-stream")
    p.flush()
    with pytest.raises(RuntimeError, match="after the end of the stream"):
        p.feed('{"type": "result", "session_id": "s"}')
    p.finish()
    with pytest.raises(RuntimeError, match="finish"):
        p.finish()
    with pytest.raises(ValueError, match="one JSON document"):
        stream_parser("openhands")
    with pytest.raises(ValueError, match="unknown format"):
        stream_parser("nope")


def test_stamped_lines_and_arrival_times_are_exclusive() -> None:
    p = stream_parser("codex-exec")
    p.feed(json.dumps({"arrival": 1.0, "line": {"type": "turn.started"}}))
    with pytest.raises(ValueError, match="do not also pass"):
        p.feed('{"type": "turn.started"}', arrival_s=2.0)


def test_every_line_oriented_format_has_its_parser() -> None:
    for spec in READERS:
        if spec.layout in ("jsonl", "text"):  # text: lines of text, not JSON
            assert spec.parser is not None and issubclass(spec.parser, StreamParser), spec.name
            assert issubclass(spec.parser, TextStreamParser) == (spec.layout == "text")
            assert spec.parser.FORMAT == spec.name
        else:
            assert spec.parser is None, spec.name


def test_an_event_whose_turn_end_needs_the_next_line_is_held_until_it() -> None:
    """Session file: a step ends only where the next prompt arrives, so the event before
    each prompt is held one line and handed out then, with its flag set."""
    path = CLAUDE / "resumed.session.jsonl"
    p = stream_parser("claude-code-session", source=path)
    released_at: dict[int, int] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        for ev in p.feed(line):
            released_at[ev.index] = n
    t = p.finish()
    (syn,) = [e for e in t.events if e.extra.get("synthetic")]  # line 12, before the prompt
    assert syn.extra["line"] == 12 and released_at[syn.index] == 13 and syn.turn_end
    # held one event, no longer: each event comes out on the line that makes the next known
    # (its own line, or its result's; pending calls released at a fork are made known there)
    for ev, nxt in zip(t.events, t.events[1:], strict=False):
        if not nxt.extra.get("incomplete"):
            assert released_at[ev.index] == nxt.extra.get("result_line", nxt.extra["line"])
    assert t.events[-1].index not in released_at  # the last one: at the end of the stream


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: str(p.relative_to(p.parents[2])))
def test_exactly_one_detector_claims_each_log(path: Path) -> None:
    first = json.loads(path.read_text(encoding="utf-8").split("\n")[0])

    def claims_it(r: ReaderSpec) -> bool:  # as detection asks: an odd shape is not a claim
        try:
            return bool(r.detect(first))
        except (TypeError, ValueError, AttributeError, KeyError, IndexError):
            return False

    claims = [r.name for r in READERS if r.layout == "jsonl" and claims_it(r)]
    try:
        detected = [detect_format(path)]
    except TrajectoryFormatError:
        detected = []  # an adversarial log no format claims
    assert claims == detected
