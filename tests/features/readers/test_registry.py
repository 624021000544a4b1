"""The reader registry (``features.readers``): detection by content, dispatch, ``format``
choices; every fixture read and round-tripped through the trajectory schema.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from features.readers import (
    FORMATS,
    READERS,
    TrajectoryFormatError,
    detect_format,
    format_names,
    read_trajectory,
)
from features.schema import Trajectory, from_frame, read_parquet, to_frame, write_parquet

OH_BASIC = "openhands/basic.json"

ALL_FIXTURES = {
    "codex_exec_jsonl/agentcmd_stream-output-1.jsonl": "codex-exec",
    "codex_exec_jsonl/agentcmd_stream-output-2.jsonl": "codex-exec",
    "codex_exec_jsonl/agentcmd_stream-output-3.jsonl": "codex-exec",
    "codex_exec_jsonl/tielec_issue-119_00_planning_execute.jsonl": "codex-exec",
    "codex_exec_jsonl/tielec_issue-119_03_test_scenario_execute.jsonl": "codex-exec",
    "codex_rollout/agentcmd_rollout-2025-09-24T19-22-20-01997e76.jsonl": "codex-rollout",
    "mini_swe_agent/django__django-16255.traj.json": "mini-swe-agent",
    "swe_agent/demo_function_calling_replace_marshmallow-1867.traj": "swe-agent",
    "swe_agent/testdata_gpt4_swe-agent__test-repo-i1.traj": "swe-agent",
    OH_BASIC: "openhands",
    "openhands/wrong_initial_state.json": "openhands",
}



def test_every_fixture_is_listed(fixture_logs: list[Path]) -> None:
    """Every public log in the fixtures folder is read by its reader's tests against counts
    checked by hand (test_<format>.py); a new one fails here until it is counted."""
    root = fixture_logs[0].parents[1]
    assert sorted(str(p.relative_to(root)) for p in fixture_logs) == sorted(ALL_FIXTURES)


def test_every_recording_is_listed() -> None:
    """The same rule for the recorded live logs (tests/data/recordings, hand counts in its
    README): each is read by its reader's tests against hand-checked counts (Claude Code:
    test_claude_code.STREAM / SESSION; Codex: test_codex_exec.EXEC_RECORDED,
    test_codex_rollout.ROLLOUT_RECORDED); a new recording fails here until it is counted.
    (No Claude Code log is among the public fixtures.)"""
    from tests.features.readers import test_claude_code, test_codex_exec, test_codex_rollout
    root = Path(__file__).resolve().parents[2] / "data" / "recordings"
    listed = {
        **{f"claude-code-2.1.197/{r}.stream.jsonl": "claude-code-stream"
           for r in test_claude_code.STREAM},
        **{f"claude-code-2.1.197/{r}.session.jsonl": "claude-code-session"
           for r in test_claude_code.SESSION},
        **{f"codex-0.171.0/{r}.exec.jsonl": "codex-exec" for r in test_codex_exec.EXEC_RECORDED},
        **{f"codex-0.171.0/{r}.rollout.jsonl": "codex-rollout"
           for r in test_codex_rollout.ROLLOUT_RECORDED},
        **{f"gemini-cli-0.61.0/{r}.stream.jsonl": "gemini-cli-stream"
           for r in ("task", "failing")},
    }
    # the model server's own log, and Gemini CLI's chat files (no reader for them yet)
    found = sorted(str(p.relative_to(root)) for p in root.glob("*/*.jsonl")
                   if p.name != "model_server.audit.jsonl"
                   and not (p.parent.name.startswith("gemini-cli-")
                            and p.name.endswith(".session.jsonl")))
    assert found == sorted(listed)
    for rel, fmt in listed.items():
        assert detect_format(root / rel) == fmt, rel


@pytest.mark.parametrize("rel", sorted(ALL_FIXTURES))
def test_detect_format_by_content(rel: str, tmp_path: Path, fixture_path: Callable[[str], Path]) -> None:
    p = fixture_path(rel)
    assert detect_format(p) == ALL_FIXTURES[rel]
    # a misleading name does not fool detection
    q = tmp_path / "renamed.txt"
    shutil.copyfile(p, q)
    assert detect_format(q) == ALL_FIXTURES[rel]
    assert ALL_FIXTURES[rel] in FORMATS


@pytest.mark.parametrize("rel", sorted(ALL_FIXTURES))
def test_frame_and_parquet_round_trip(rel: str, tmp_path: Path, read_fixture: Callable[[str], Trajectory]) -> None:
    t = read_fixture(rel)
    assert t.events, rel
    (back,) = from_frame(to_frame(t))
    assert back == t
    out = tmp_path / "t.parquet"
    write_parquet([t], out)
    (back2,) = read_parquet(out)
    assert back2 == t


def test_overrides_and_format_argument(fixture_path: Callable[[str], Path]) -> None:
    p = fixture_path(OH_BASIC)
    t = read_trajectory(p, "openhands", task_id="T1", repo="acme/widgets")
    assert (t.task_id, t.repo) == ("T1", "acme/widgets")
    with pytest.raises(ValueError, match="unknown format 'nope'"):
        read_trajectory(p, "nope")
    # forcing the wrong reader is a format error naming the file
    with pytest.raises(TrajectoryFormatError, match="basic.json"):
        read_trajectory(p, "mini-swe-agent")


def test_bad_unknown_format(write_file: Callable[..., Path]) -> None:
    p = write_file("what.json", json.dumps({"hello": "world"}))
    with pytest.raises(TrajectoryFormatError, match=r"what\.json: unknown trajectory format"):
        read_trajectory(p)
    q = write_file("what.jsonl", '{"a": 1}\n{"b": 2}\n')
    with pytest.raises(TrajectoryFormatError, match=r"what\.jsonl: line 1: unknown"):
        read_trajectory(q)
    r = write_file("list.json", "[1, 2, 3]")
    with pytest.raises(TrajectoryFormatError, match="unknown trajectory format"):
        read_trajectory(r)


def test_one_table_names_every_format_once() -> None:
    assert FORMATS == tuple(r.name for r in READERS)
    names = format_names()
    assert len(names) == len(set(names))  # no alias shadows a format or another alias
    assert names[: len(FORMATS)] == list(FORMATS)
    assert {r.layout for r in READERS} == {"json", "jsonl", "text"}


@pytest.mark.parametrize("rel", sorted(ALL_FIXTURES))
def test_detection_is_the_table_detector(rel: str, fixture_path: Callable[[str], Path],
                                         read_fixture: Callable[[str], Trajectory]) -> None:
    p = fixture_path(rel)
    (spec,) = [r for r in READERS if r.name == ALL_FIXTURES[rel]]
    text = p.read_text(encoding="utf-8")
    doc = json.loads(text) if spec.layout == "json" else json.loads(text.splitlines()[0])
    assert spec.detect(doc)
    # no other detector of its layout claims it
    assert not any(r.detect(doc) for r in READERS if r.layout == spec.layout and r is not spec)
    for alias in spec.aliases:  # every alias reads the same trajectory
        assert read_trajectory(p, alias) == read_fixture(rel)


def test_a_read_keeps_nothing_of_the_file_once_it_returns(tmp_path: Path) -> None:
    """A read must leave no reference cycle behind. One did: detection's failed
    whole-document parse of a JSONL log kept the caught error, whose traceback held the
    frames that held the text and the bytes, all alive until the next full collection
    (100 MB for a 50 MB log, and the next reads of the process ran slower). Every
    hand-made log of every format is read with the collector off; no frame of the
    package may be left alive."""
    import gc
    import types

    data = Path(__file__).parents[2] / "data" / "readers"
    logs = sorted(p for p in data.glob("*/*") if p.parent.name != "adversarial"
                  and p.name != "README.md" and (p.is_file() or (p / "events").is_dir()))
    assert len(logs) > 10
    # a JSONL log whose bytes do not show it is one (a blank first line): detection then
    # tries the whole-document parse, whose failure once made the cycle
    odd = tmp_path / "blank-first.jsonl"
    odd.write_text("\n" + (data / "codex" / "shell-command.rollout.jsonl").read_text())
    logs.append(odd)
    package = str(Path(__import__("features").__file__).parent)

    def frames() -> dict[int, str]:  # the package's frames alive now
        return {id(o): f"{o.f_code.co_name} ({o.f_code.co_filename})" for o in gc.get_objects()
                if isinstance(o, types.FrameType) and o.f_code.co_filename.startswith(package)}

    was = gc.isenabled()
    gc.collect()  # what earlier tests left behind
    gc.disable()
    try:
        for path in logs:
            before = frames()
            read_trajectory(path)
            alive = [name for key, name in frames().items() if key not in before]
            assert not alive, f"{path.name}: frames kept alive after the read: {alive}"
    finally:
        if was:
            gc.enable()
