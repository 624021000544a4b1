"""A small, real, scripted coding agent for tests and benchmarks.

It is a program (``python -m oracle.agents.scripted start|resume ...``) driven through the
generic :class:`~oracle.agents.command_line.CommandLineAgent`, so running it exercises the whole
wall-clock path: real files, real subprocesses, real elapsed time, a real process group
to SIGKILL, JSON event lines read live from stdout.

The task (built by :func:`make_scripted_tasks`): a workspace holds ``n_files`` data
chunks, one of which contains ``MAGIC=<token>``; the agent must write
``solution.txt`` = the format string read from an external config file (outside the
workspace, like a config service) filled with the token, run a test, and write notes.

Logical steps (turns), each a few tool calls with a "model call" (think time) before:

1. **search** (expensive): probe chunk files one by one in a seed-dependent order with
   ``grep`` until the token is found; the token becomes the *discovered fact* ``magic``.
2. **edit**: read the external config (an external observation), write ``solution.txt``.
3. **test**: run a tiny test in a subprocess (``python -c``), emit an effect (a
   notification) for the effect log.
4. **notes** (when ``n_steps`` = 4): write ``NOTES.md``.

then a final agent message. Recovery is a re-derivation: a resumed run re-orients
(lists the workspace, re-reads the transcript) and continues from the first step not
marked done in the preserved transcript; when the fact ``magic`` is preserved it skips
the search, otherwise it searches again (skipping files the transcript says were already
probed). So a checkpoint after step 1 is worth much more than one after step 2.

Candidate boundaries: ``granularity="turn"`` (one per step, after its last tool call) or
``"tool_call"`` (after every tool call). Time scales with ``params["time_scale"]``;
everything random comes from the run seed (order of probes, think times, tokens).

Options for tests of replay validation: ``params["clock_read_step"] = k`` makes step k
read the wall clock without pinning it (an unpinned nondeterministic read).

This module imports only the standard library at top level, so the child program starts
fast; the adapter pieces are imported lazily by :func:`ScriptedAgent`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from oracle.agents.command_line import CommandLineAgent
    from oracle.protocol import AgentReport, TaskSpec

STEPS = ("search", "edit", "test", "notes")

# ---------------------------------------------------------------------------------------
# Task construction (parent side)
# ---------------------------------------------------------------------------------------

_VERIFIER = """\
import json, pathlib, sys
exp = json.loads(pathlib.Path(sys.argv[1]).read_text())
sol = pathlib.Path("solution.txt")
ok = sol.exists() and sol.read_text() == exp["solution"]
ok = ok and (not exp["tested"] or pathlib.Path("test_log.txt").read_text() == "1 passed\\n")
sys.exit(0 if ok else 1)
"""


def make_scripted_tasks(
    n: int, seed: int, root: str | Path, *, n_steps: int = 3, n_files: int = 6,
    time_scale: float = 1.0, repos: int = 2, chunk_bytes: int = 2048,
) -> list[TaskSpec]:
    """Write ``n`` scripted tasks (templates, external configs, verifiers) under ``root``.

    Deterministic in ``seed``; the repo label cycles over ``repos`` names so
    leave-one-repository-out splits have something to split.
    """
    from oracle.protocol import TaskSpec

    if not 2 <= n_steps <= 4:
        raise ValueError(f"n_steps must be 2..4, got {n_steps}")
    if n_files < 1:
        raise ValueError(f"n_files must be >= 1, got {n_files}")
    root = Path(root)
    rng = random.Random(seed)
    tasks = []
    for i in range(n):
        tid = f"scripted-{i:03d}"
        tdir = root / tid
        tmpl = tdir / "template"
        (tmpl / "data").mkdir(parents=True, exist_ok=True)
        magic = f"{rng.getrandbits(48):012x}"
        target = rng.randrange(n_files)
        for j in range(n_files):
            filler = "".join(rng.choice("abcdefgh \n") for _ in range(chunk_bytes))
            body = filler + (f"\nMAGIC={magic}\n" if j == target else "\n")
            (tmpl / "data" / f"chunk_{j:02d}.txt").write_text(body)
        (tmpl / "README.md").write_text(f"Task {tid}: find MAGIC and write solution.txt\n")
        fmt = f"ANSWER[{tid}]={{magic}}\n"
        (tdir / "external_config.json").write_text(json.dumps({"format": fmt}))
        (tdir / "expected.json").write_text(json.dumps({"solution": fmt.format(magic=magic),
                                                        "tested": n_steps >= 3}))
        (tdir / "verify.py").write_text(_VERIFIER)
        tasks.append(TaskSpec(
            task_id=tid, repo=f"scripted/repo{i % max(1, repos)}", family="scripted",
            workspace_template=tmpl,
            verifier=[sys.executable, str(tdir / "verify.py"), str(tdir / "expected.json")],
            params={"n_steps": n_steps, "time_scale": time_scale,
                    "external_config": str(tdir / "external_config.json")},
        ))
    return tasks


# ---------------------------------------------------------------------------------------
# Line parser (parent side)
# ---------------------------------------------------------------------------------------


def scripted_parse_line(obj: dict, arrival: float) -> list[AgentReport]:
    """Map one scripted-agent JSON line to reports (facts/transcript are adapter state)."""
    from features.schema import Event
    from oracle.protocol import AgentReport

    t = obj.get("type")
    if t == "event":
        dur = obj.get("duration")
        ev = Event(
            index=0, kind=obj["kind"],
            start=None if dur is None else arrival - float(dur), end=arrival,
            duration=None if dur is None else float(dur),
            input_tokens=obj.get("input_tokens"), output_tokens=obj.get("output_tokens"),
            command=obj.get("command"), argv=obj.get("argv"), exit_code=obj.get("exit_code"),
            paths_read=obj.get("paths_read", []), paths_written=obj.get("paths_written", []),
            bytes_written=obj.get("bytes_written"), tests_passed=obj.get("tests_passed"),
            tests_failed=obj.get("tests_failed"), safe_boundary=bool(obj.get("safe_boundary")),
            boundary_kind=obj.get("boundary_kind"), turn_end=bool(obj.get("turn_end")),
            text=obj.get("text"),
            extra={k: obj[k] for k in ("phase", "source", "payload_digest", "nondeterministic",
                                       "pinned", "agent_step") if k in obj},
        )
        return [AgentReport("event", event=ev)]
    if t == "boundary":
        return [AgentReport("boundary", boundary=int(obj["n"]))]
    if t == "effect":
        return [AgentReport("effect", effect=dict(obj["effect"]))]
    if t in _STATE_LINES:
        return []  # preserved state only (facts/transcript), consumed by the adapter
    # never dropped: an unknown line type is kept as an ``other`` event, with a warning
    warnings.warn(f"scripted agent protocol: unknown line type {t!r} kept as an 'other' "
                  f"event: {json.dumps(obj, default=str)[:120]}", stacklevel=2)
    return [AgentReport("event", event=Event(index=0, kind="other", end=arrival,
                                             extra={"unknown_line": obj}))]


_STATE_LINES = frozenset({"fact", "step_done"})


def ScriptedAgent(granularity: str = "turn", python: str | None = None) -> CommandLineAgent:  # noqa: N802 - factory named like the agent
    """The scripted agent as a :class:`~oracle.agents.command_line.CommandLineAgent` (a real program)."""
    from oracle.agents.command_line import CommandLineAgent

    if granularity not in ("turn", "tool_call"):
        raise ValueError(f"granularity must be 'turn' or 'tool_call', got {granularity!r}")
    exe = python or sys.executable
    base = [exe, "-S", "-m", "oracle.agents.scripted", "--workspace", "{workspace}", "--task-file",
            "{task_file}", "--seed", "{seed}", "--granularity", granularity]
    agent = CommandLineAgent(
        [*base, "start"], [*base, "resume", "--restore-dir", "{restore_dir}"],
        scripted_parse_line, name="scripted",
        env={"PYTHONPATH": os.pathsep.join(p for p in [str(Path(__file__).resolve().parents[2]),
                                                         os.environ.get("PYTHONPATH", "")] if p)},
    )
    agent.granularity = granularity  # type: ignore[attr-defined]
    agent.make_tasks = make_scripted_tasks  # type: ignore[attr-defined]
    return agent


# ---------------------------------------------------------------------------------------
# The agent program (child side; standard library only)
# ---------------------------------------------------------------------------------------


class _Child:
    def __init__(self, args: argparse.Namespace) -> None:
        self.ws = Path(args.workspace)
        task = json.loads(Path(args.task_file).read_text())
        self.task_id = task["task_id"]
        self.p: dict[str, Any] = task.get("params", {})
        self.n_steps = int(self.p.get("n_steps", 3))
        self.scale = float(self.p.get("time_scale", 1.0))
        self.gran = args.granularity
        self.rng = random.Random(int(args.seed))
        self.boundary = 0
        self.transcript: list[dict] = []
        self.facts: dict[str, Any] = {}
        if args.mode == "resume":
            rdir = Path(args.restore_dir)
            self.transcript = json.loads((rdir / "transcript.json").read_text())
            self.facts = json.loads((rdir / "facts.json").read_text())
            self.boundary = int((rdir / "boundary").read_text())
        self.resumed = args.mode == "resume"

    # -- output ------------------------------------------------------------------------
    def emit(self, obj: dict) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    def think(self, step: int, lo: float = 0.02, hi: float = 0.04) -> None:
        d = self.rng.uniform(lo, hi) * self.scale
        t0 = time.monotonic()
        time.sleep(d)
        self.emit({"type": "event", "kind": "model_call", "agent_step": step,
                   "duration": time.monotonic() - t0,
                   "input_tokens": self.rng.randint(800, 1600), "output_tokens": self.rng.randint(20, 120)})

    def run_cmd(self, argv: list[str]) -> tuple[str, int, float]:
        t0 = time.monotonic()
        proc = subprocess.run(argv, cwd=self.ws, capture_output=True, text=True, check=False)
        return proc.stdout, proc.returncode, time.monotonic() - t0

    def tool(self, step: int, kind: str, argv: list[str] | None, *, phase: str,
             end_of_step: bool, turn_end: bool = False, output: str | None = None,
             exit_code: int | None = None, duration: float | None = None,
             safe: bool = True, execute: bool = True, **fields: Any) -> dict:
        """Emit a tool event (running ``argv`` first if given), then a boundary if it is one.

        Every tool return is a safe boundary in the trajectory; the agent *reports* a
        candidate boundary after each one (tool_call granularity) or after the last tool
        call of a step (turn granularity).
        """
        if argv is not None and execute:
            output, exit_code, duration = self.run_cmd(argv)
        ev = {"type": "event", "kind": kind, "agent_step": step, "phase": phase,
              "command": None if argv is None else " ".join(argv), "argv": argv,
              "exit_code": exit_code, "duration": duration, "safe_boundary": safe,
              "boundary_kind": ("test" if kind == "test" else "tool_return") if safe else None,
              "turn_end": turn_end, **fields}
        if output is not None:
            ev["payload_digest"] = _sha(output)
        if end_of_step:
            self.emit({"type": "step_done", "step": step})
        self.emit(ev)
        if safe and (self.gran == "tool_call" or end_of_step):
            self.boundary_passed()
        ev["output"] = output
        return ev

    def boundary_passed(self) -> None:
        self.boundary += 1
        self.emit({"type": "boundary", "n": self.boundary})

    def fact(self, key: str, value: Any) -> None:
        self.facts[key] = value
        self.emit({"type": "fact", "key": key, "value": value})

    # -- steps ---------------------------------------------------------------------------
    def done_steps(self) -> set[int]:
        return {int(e["step"]) for e in self.transcript if e.get("type") == "step_done"}

    def maybe_clock_read(self, step: int) -> None:
        if int(self.p.get("clock_read_step", -1)) == step:
            self.tool(step, "other", None, phase="clock", end_of_step=False, safe=False,
                      output=repr(time.time()), source="clock", nondeterministic=True,
                      pinned=False)

    def step_search(self, step: int, turn_end: bool) -> None:
        probed = {e.get("path") for e in self.transcript if e.get("phase") == "probe"}
        files = sorted(p.name for p in (self.ws / "data").glob("chunk_*.txt"))
        self.rng.shuffle(files)
        todo = [f for f in files if f"data/{f}" not in probed]
        if not todo:
            raise SystemExit(f"scripted agent: MAGIC not found in {self.ws}")
        for i, name in enumerate(todo):
            self.think(step, 0.06, 0.12)  # reading a chunk and deciding is the costly part
            rel = f"data/{name}"
            argv = ["grep", "-o", "MAGIC=[0-9a-f]*", rel]
            out, rc, dur = self.run_cmd(argv)
            hit = out.strip() if rc == 0 else ""
            if hit:
                self.fact("magic", hit.split("=", 1)[1])
                self.fact("magic_file", rel)
            end = bool(hit) or i == len(todo) - 1
            self.tool(step, "command", argv, phase="probe", end_of_step=end, execute=False,
                      turn_end=end and turn_end, output=out, exit_code=rc, duration=dur,
                      paths_read=[rel], path=rel)
            if hit:
                return
        raise SystemExit(f"scripted agent: MAGIC not found in {self.ws}")

    def step_edit(self, step: int, turn_end: bool) -> None:
        self.think(step)
        cfg = self.p["external_config"]
        ev = self.tool(step, "command", ["cat", cfg], phase="read_config", end_of_step=False,
                       source="config", nondeterministic=False, paths_read=[cfg])
        fmt = json.loads(ev["output"])["format"]
        text = fmt.format(magic=self.facts["magic"])
        self.think(step)
        t0 = time.monotonic()
        tmp = self.ws / "solution.txt.tmp"
        tmp.write_text(text)
        tmp.replace(self.ws / "solution.txt")
        self.tool(step, "file_change", None, phase="write", end_of_step=True, turn_end=turn_end,
                  duration=time.monotonic() - t0, paths_written=["solution.txt"],
                  bytes_written=len(text.encode()))

    def step_test(self, step: int, turn_end: bool) -> None:
        self.think(step)
        code = ("import pathlib,sys; s=pathlib.Path('solution.txt').read_text(); "
                f"ok=s.startswith('ANSWER[{self.task_id}]='); "
                "pathlib.Path('test_log.txt').write_text('1 passed\\n' if ok else '1 failed\\n'); "
                "print('1 passed' if ok else '1 failed'); sys.exit(0 if ok else 1)")
        argv = [sys.executable, "-S", "-c", code]
        out, rc, dur = self.run_cmd(argv)
        self.emit({"type": "effect", "effect": {"kind": "notify", "task": self.task_id,
                                                 "message": "tests passed" if rc == 0 else "tests failed"}})
        self.tool(step, "test", ["python", "-c", "<test>"], phase="test", end_of_step=True,
                  turn_end=turn_end, execute=False, output=out, exit_code=rc, duration=dur,
                  paths_written=["test_log.txt"],
                  tests_passed=1 if rc == 0 else 0, tests_failed=0 if rc == 0 else 1)

    def step_notes(self, step: int, turn_end: bool) -> None:
        self.think(step)
        text = f"# Notes\nmagic from {self.facts.get('magic_file')}\n"
        t0 = time.monotonic()
        (self.ws / "NOTES.md").write_text(text)
        self.tool(step, "file_change", None, phase="notes", end_of_step=True, turn_end=turn_end,
                  duration=time.monotonic() - t0, paths_written=["NOTES.md"],
                  bytes_written=len(text))

    def run(self) -> int:
        done = self.done_steps()
        if self.resumed:
            # re-orientation: a resumed agent re-reads its context and the workspace
            self.think(min(len(done) + 1, self.n_steps), 0.02, 0.04)
            self.tool(min(len(done) + 1, self.n_steps), "command", ["ls", "-R", "."],
                      phase="orient", end_of_step=False, safe=False)
        for i, name in enumerate(STEPS[: self.n_steps]):
            step = i + 1
            if step in done:
                continue
            if name == "search" and "magic" in self.facts:
                continue  # the discovered fact was preserved: no need to search again
            self.maybe_clock_read(step)
            # the final step's last tool call is not its last event (the message follows)
            getattr(self, f"step_{name}")(step, step < self.n_steps)
        self.emit({"type": "event", "kind": "message", "agent_step": self.n_steps,
                   "phase": "final", "text": "done", "turn_end": True})
        return 0


def _sha(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8", errors="replace")).hexdigest()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the agent program (``python -m oracle.agents.scripted``)."""
    ap = argparse.ArgumentParser(prog="python -m oracle.agents.scripted")
    ap.add_argument("--workspace", required=True)
    ap.add_argument("--task-file", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--granularity", choices=["turn", "tool_call"], default="turn")
    ap.add_argument("mode", choices=["start", "resume"])
    ap.add_argument("--restore-dir")
    args = ap.parse_args(argv)
    if args.mode == "resume" and not args.restore_dir:
        ap.error("resume needs --restore-dir")
    return _Child(args).run()


if __name__ == "__main__":
    sys.exit(main())
