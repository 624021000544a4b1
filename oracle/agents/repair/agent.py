"""A real, LLM-free program-repair agent: executed labels from this machine.

The agent repairs a copy of a pure-Python stdlib module carrying an injected bug
(:mod:`oracle.agents.repair.mutants`), using real subprocesses, real files and real elapsed
time. It is a program (``python -m oracle.agents.repair.agent start|resume ...``) that speaks
the scripted agent's JSON-line protocol (:func:`oracle.agents.scripted.scripted_parse_line`),
driven through :class:`oracle.agents.command_line.CommandLineAgent`, so a fail-stop is a real
SIGKILL and the harness measures it exactly like any command-line agent.

Logical steps (turns):

1. **reproduce**: run the module's whole test suite; the failing test ids become the
   fact ``failing_tests``; write ``cache/test_index.json`` (every test id plus a token
   table of the module: large state that is cheap to regenerate).
2. **localise** (expensive discovery, tiny fact): run each failing test and a seeded
   sample of passing tests in its own subprocess under line tracing, rank lines by the
   Ochiai score, and keep the top lines as the fact ``suspicious_lines`` (a few hundred
   bytes).
3. **patch**: walk the suspicious lines in rank order; at each, try single-token edits
   (the mutation operators read backwards) in a seeded order; after each edit run the
   failing tests; keep the first edit that makes them pass, revert the others and record
   them in the fact ``rejected``.
4. **verify**: run the whole suite again.

Recovery is a re-derivation: a resumed run re-orients (lists the workspace, re-reads the
preserved transcript), then continues from the first step not marked done; preserved
facts let it skip work (with ``suspicious_lines`` it does not localise again; rejected
edits are not retried; a missing cache is regenerated). Every boundary falls after a tool
returns; with ``granularity="turn"`` only the last tool call of each step is a candidate.
This module imports only the standard library at top level, so the child starts fast.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

RUNNER = str(Path(__file__).with_name("runner.py"))
STEPS = ("reproduce", "localise", "patch", "verify")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", errors="replace")).hexdigest()


class RepairChild:
    """The agent program's state: workspace, transcript, facts, seeded choices."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.ws = Path(args.workspace).resolve()
        task = json.loads(Path(args.task_file).read_text())
        self.task_id = task["task_id"]
        p = task.get("params", {})
        self.module = p["module"]
        self.n_passing = int(p.get("passing_sample", 12))
        self.top_lines = int(p.get("top_lines", 10))
        self.max_edits = int(p.get("max_edits", 60))
        self.gran = args.granularity
        self.rng = random.Random(int(args.seed))
        self.boundary = 0
        self.transcript: list[dict] = []
        self.facts: dict[str, Any] = {}
        self.resumed = args.mode == "resume"
        if self.resumed:
            rdir = Path(args.restore_dir)
            self.transcript = json.loads((rdir / "transcript.json").read_text())
            self.facts = json.loads((rdir / "facts.json").read_text())
            self.boundary = int((rdir / "boundary").read_text())

    # -- protocol ---------------------------------------------------------------------
    def emit(self, obj: dict) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    def fact(self, key: str, value: Any) -> None:
        self.facts[key] = value
        self.emit({"type": "fact", "key": key, "value": value})

    def boundary_passed(self) -> None:
        self.boundary += 1
        self.emit({"type": "boundary", "n": self.boundary})

    def step_done(self, step: int) -> None:
        self.emit({"type": "step_done", "step": step})

    def event(self, step: int, kind: str, *, last: bool, duration: float, boundary: bool = True,
              **fields: Any) -> None:
        """Emit one tool event; it is a candidate boundary at tool-call granularity, or last."""
        safe = boundary and (self.gran == "tool_call" or last)
        ev = {"type": "event", "kind": kind, "agent_step": step, "duration": duration,
              "safe_boundary": safe, "boundary_kind": ("test" if kind == "test" else "tool_return") if safe else None,
              "turn_end": last, **fields}
        self.emit(ev)
        if safe:
            self.boundary_passed()

    def run_cmd(self, argv: list[str], timeout: float = 60.0) -> tuple[int, str, float]:
        t0 = time.monotonic()
        try:
            p = subprocess.run(argv, cwd=self.ws, capture_output=True, text=True, timeout=timeout)
            code, out = p.returncode, p.stdout
        except subprocess.TimeoutExpired:
            code, out = -9, ""
        return code, out, time.monotonic() - t0

    def runner(self, cmd: str, ids: list[str]) -> list[str]:
        return [sys.executable, RUNNER, cmd, ".", self.module, *ids]

    @staticmethod
    def _json_tail(out: str) -> dict:
        from oracle.agents.repair.strategy import json_tail

        return json_tail(out)

    # -- steps ------------------------------------------------------------------------
    def orient(self, step: int) -> None:
        """Re-orientation of a resumed run: list the workspace, re-read the transcript."""
        code, out, dur = self.run_cmd(["ls", "-la", "."])
        self.event(step, "command", last=False, duration=dur, boundary=False, command="ls -la .",
                   argv=["ls", "-la", "."], exit_code=code, paths_read=["."], phase="orient")

    def step_reproduce(self, step: int) -> None:
        argv = self.runner("suite", [])
        code, out, dur = self.run_cmd(argv)
        res = self._json_tail(out)
        failed = list(res.get("failed", []))
        self.event(step, "test", last=False, duration=dur, command=" ".join(argv), argv=argv,
                   exit_code=code, paths_read=[f"{self.module}.py"], tests_passed=res.get("run", 0) - len(failed),
                   tests_failed=len(failed), payload_digest=_sha(out), source="tests", phase="reproduce")
        self.fact("failing_tests", failed)
        self.write_cache(step, res.get("ids", []), last=True)
        self.step_done(step)

    def write_cache(self, step: int, ids: list[str], *, last: bool) -> None:
        """The test index: large, derived, cheap to regenerate."""
        import io
        import tokenize

        t0 = time.monotonic()
        src = (self.ws / f"{self.module}.py").read_text()
        toks = [[t.type, t.string, t.start[0], t.start[1]] for t in tokenize.generate_tokens(io.StringIO(src).readline)]
        data = json.dumps({"ids": ids, "tokens": toks})
        (self.ws / "cache").mkdir(exist_ok=True)
        tmp = self.ws / "cache" / "test_index.json.tmp"
        tmp.write_text(data)
        tmp.replace(self.ws / "cache" / "test_index.json")
        self.event(step, "file_change", last=last, duration=time.monotonic() - t0,
                   paths_written=["cache/test_index.json"], bytes_written=len(data), phase="cache")

    def test_ids(self) -> list[str]:
        path = self.ws / "cache" / "test_index.json"
        if not path.exists():  # lost with the run: regenerate (cheap)
            argv = self.runner("suite", [])
            code, out, dur = self.run_cmd(argv)
            res = self._json_tail(out)
            self.event(2, "test", last=False, duration=dur, boundary=False, command=" ".join(argv),
                       argv=argv, exit_code=code, payload_digest=_sha(out), source="tests", phase="reindex")
            self.write_cache(2, res.get("ids", []), last=False)
        return json.loads(path.read_text())["ids"]

    def step_localise(self, step: int) -> None:
        from oracle.agents.repair.strategy import localisation_runs, ochiai_ranking

        failing = list(self.facts["failing_tests"])
        passing = [i for i in self.test_ids() if i not in set(failing)]
        self.rng.shuffle(passing)
        runs = localisation_runs(failing, passing, self.n_passing)
        cover: list[tuple[set[int], bool]] = []
        for k, (tid, _) in enumerate(runs):
            argv = self.runner("cover", [tid])
            code, out, dur = self.run_cmd(argv)
            res = self._json_tail(out)
            ok = bool(res.get("ok", False))
            cover.append((set(res.get("lines", [])), ok))
            self.event(step, "test", last=False, duration=dur, command=" ".join(argv), argv=argv,
                       exit_code=code, paths_read=[f"{self.module}.py"], tests_passed=int(ok),
                       tests_failed=int(not ok), payload_digest=_sha(out), source="coverage",
                       phase="localise", boundary=k < len(runs) - 1)
        ranked = ochiai_ranking(cover, self.top_lines)
        self.fact("suspicious_lines", [[ln, round(score, 4)] for ln, score in ranked])
        t0 = time.monotonic()
        self.event(step, "message", last=True, duration=time.monotonic() - t0,
                   text=f"suspicious lines: {[ln for ln, _ in ranked]}", phase="localised")
        self.step_done(step)

    def _candidates(self, line: int, src: str) -> list[dict]:
        from oracle.agents.repair.mutants import candidate_mutations

        cands = [m.to_dict() for m in candidate_mutations(src, {line})]
        self.rng.shuffle(cands)
        return cands

    def _write_module(self, src: str) -> float:
        t0 = time.monotonic()
        tmp = self.ws / f"{self.module}.py.tmp"
        tmp.write_text(src)
        tmp.replace(self.ws / f"{self.module}.py")
        return time.monotonic() - t0

    def step_patch(self, step: int) -> None:
        from oracle.agents.repair.mutants import Mutation

        path = self.ws / f"{self.module}.py"
        pending = self.facts.get("pending")
        if pending:  # an edit applied but never judged before the failure: undo it
            src = Mutation(**pending).inverse().apply(path.read_text())
            dur = self._write_module(src)
            self.event(step, "file_change", last=False, duration=dur, paths_written=[path.name],
                       bytes_written=len(src), phase="undo_pending")
            self.fact("pending", None)
        rejected = {json.dumps(r, sort_keys=True) for r in self.facts.get("rejected", [])}
        failing = list(self.facts["failing_tests"])
        tries = 0
        for line, _ in self.facts["suspicious_lines"]:
            for cand in self._candidates(int(line), path.read_text()):
                key = json.dumps(cand, sort_keys=True)
                if key in rejected:
                    continue
                if tries >= self.max_edits:
                    break
                tries += 1
                m = Mutation(**cand)
                orig = path.read_text()
                src = m.apply(orig)
                self.fact("pending", cand)
                dur = self._write_module(src)
                self.event(step, "file_change", last=False, duration=dur, paths_written=[path.name],
                           bytes_written=len(src), phase="edit", text=f"line {m.line}: {m.old} -> {m.new}")
                argv = self.runner("suite", failing)
                code, out, dur = self.run_cmd(argv, timeout=20)
                res = self._json_tail(out)
                n_bad = len(res.get("failed", failing)) if res else len(failing)
                self.event(step, "test", last=code == 0, duration=dur, command=" ".join(argv), argv=argv,
                           exit_code=code, paths_read=[path.name], tests_passed=res.get("run", 0) - n_bad if res else 0,
                           tests_failed=n_bad, payload_digest=_sha(out), source="tests", phase="try")
                if code == 0:
                    self.fact("pending", None)
                    self.fact("patch", cand)
                    self.step_done(step)
                    return
                dur = self._write_module(orig)
                self.fact("pending", None)
                rejected.add(key)
                self.fact("rejected", [json.loads(k) for k in sorted(rejected)])
                self.event(step, "file_change", last=False, duration=dur, paths_written=[path.name],
                           bytes_written=len(orig), phase="revert", boundary=False)
        self.emit({"type": "event", "kind": "message", "agent_step": step, "text": "no patch found",
                   "turn_end": True, "safe_boundary": False})
        self.step_done(step)

    def step_verify(self, step: int) -> None:
        argv = self.runner("suite", [])
        code, out, dur = self.run_cmd(argv)
        res = self._json_tail(out)
        failed = res.get("failed", [])
        self.event(step, "test", last=False, duration=dur, boundary=False, command=" ".join(argv),
                   argv=argv, exit_code=code, paths_read=[f"{self.module}.py"],
                   tests_passed=res.get("run", 0) - len(failed), tests_failed=len(failed),
                   payload_digest=_sha(out), source="tests", phase="verify")
        self.step_done(step)

    def run(self) -> int:
        done = {int(e["step"]) for e in self.transcript if e.get("type") == "step_done"}
        if self.resumed:
            self.orient(min(len(done) + 1, len(STEPS)))
        for i, name in enumerate(STEPS):
            step = i + 1
            if step in done:
                continue
            if name == "localise" and self.facts.get("suspicious_lines"):
                self.step_done(step)
                continue
            if name == "reproduce" and self.facts.get("failing_tests"):
                self.step_done(step)
                continue
            getattr(self, f"step_{name}")(step)
        self.emit({"type": "event", "kind": "message", "agent_step": len(STEPS), "text": "done",
                   "turn_end": True})
        return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the agent program (``python -m oracle.agents.repair.agent``)."""
    ap = argparse.ArgumentParser(prog="python -m oracle.agents.repair.agent")
    ap.add_argument("--workspace", required=True)
    ap.add_argument("--task-file", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--granularity", choices=["turn", "tool_call"], default="turn")
    ap.add_argument("mode", choices=["start", "resume"])
    ap.add_argument("--restore-dir")
    args = ap.parse_args(argv)
    if args.mode == "resume" and not args.restore_dir:
        ap.error("resume needs --restore-dir")
    return RepairChild(args).run()


if __name__ == "__main__":
    sys.exit(main())
