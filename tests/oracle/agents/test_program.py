"""The shared child of the LLM-free agent programs: step loop, boundaries, resume, granularity,
and the step mode a program brain runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from oracle.agents.program import STEP_END, program_agent, sha
from oracle.protocol import RestorePoint, TaskSpec, WallClock

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


def _step(script: Path, ws: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    return subprocess.run([sys.executable, str(script), "--workspace", str(ws), "--task-json",
                           json.dumps({"task_id": "t"}), "--seed", "1", "step", *args],
                          capture_output=True, text=True, env=env)


def test_step_mode_runs_one_step_with_the_given_facts_and_prints_them_all(tmp_path: Path) -> None:
    """What a program brain runs (oracle.agents.model_server.program): one step, the facts carried
    in on the command line and out on the STEP_END line; the same output in any workspace."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    outs = []
    for name in ("ws", "elsewhere"):
        ws = tmp_path / name
        ws.mkdir()
        p = _step(script, ws, "--step", "2", "--facts", json.dumps({"found1": 1}))
        assert p.returncode == 0, p.stderr
        outs.append(p.stdout)
        assert (ws / "out2.txt").read_text() == "xx" and not (ws / "out1.txt").exists()
    assert outs[0] == outs[1]  # no durations, no workspace path: a rerun's digest is the same
    first, fact, written, end = outs[0].splitlines()
    assert (first, written) == ("[a2] command: true -> exit 0", "[b2] file_change: out2.txt")
    assert json.loads(fact) == {"type": "fact", "key": "found2", "value": 2}
    assert json.loads(end) == {"type": STEP_END, "step": 2, "name": "work", "last": False,
                               "facts": {"found1": 1, "found2": 2}}
    last = _step(script, tmp_path / "ws", "--step", "3")
    assert json.loads(last.stdout.splitlines()[-1])["last"] is True
    bad = _step(script, tmp_path / "ws", "--step", "4")
    assert bad.returncode != 0 and "--step 4: the task has steps 1..3" in bad.stderr
    assert "--step K goes with the step mode" in _step(script, tmp_path / "ws").stderr
