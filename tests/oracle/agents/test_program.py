"""The shared child of the LLM-free agent programs: step loop, boundaries, resume, granularity."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from oracle.agents.program import program_agent, sha
from oracle.agents.protocol import RestorePoint, TaskSpec, WallClock

CHILD = textwrap.dedent('''
    import sys
    from oracle.agents.program import ProgramChild

    class Child(ProgramChild):
        def steps(self):
            return ["work", "work", "final"]

        def step_work(self, k):
            self.tool(k, ["true"], phase=f"a{k}")
            self.fact(f"found{k}", k)
            self.write_file(k, f"out{k}.txt", "x" * k, last=True, done=True, phase=f"b{k}")

        def step_final(self, k):
            self.tool(k, ["cat", "out1.txt"], phase="final_read", last=True, boundary=False)

    sys.exit(Child.main())
''')


@pytest.fixture
def child(tmp_path: Path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    task = TaskSpec("t", "r", "f", None, None, {})

    def make(granularity: str = "turn"):
        return program_agent("toy", script, lambda *a, **k: [], granularity=granularity)

    return make, task


def test_steps_end_in_one_boundary_each_and_a_resume_continues_from_the_restore_point(
        child, tmp_path: Path, finish) -> None:
    make, task = child
    agent = make()
    ws = tmp_path / "ws"
    ws.mkdir()
    done = finish(agent.start(task, ws, 1, WallClock()), tmp_path / "snaps", ws)
    assert done.rc == 0 and done.boundaries == [1, 2]
    assert done.phases == ["a1", "b1", "a2", "b2", "final_read", "final"]
    assert [e.safe_boundary for e in done.events] == [False, True, False, True, False, False]
    snap, transcript, facts = done.snapshots[1]
    assert facts["found1"] == 1 and "found2" not in facts
    assert {"type": "step_done", "step": 1} in transcript  # marked done before its boundary
    ws2 = tmp_path / "ws2"
    snap.rename(ws2)
    again = finish(agent.resume(task, RestorePoint(1, ws2, transcript, facts), ws2, 2, WallClock()))
    assert again.rc == 0 and again.boundaries == [2]
    assert again.phases == ["orient", "a2", "b2", "final_read", "final"]


def test_tool_call_granularity_makes_every_tool_return_a_boundary(child, tmp_path: Path, finish) -> None:
    make, task = child
    ws = tmp_path / "ws"
    ws.mkdir()
    done = finish(make("tool_call").start(task, ws, 1, WallClock()))
    assert done.rc == 0 and done.boundaries == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="granularity"):
        make("step")


def test_payload_digest_is_the_sha256_of_the_output() -> None:
    assert sha("abc") == sha(b"abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
