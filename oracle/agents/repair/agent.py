"""A real, LLM-free program-repair agent: executed labels from this machine.

The agent repairs a copy of a pure-Python stdlib module carrying injected bugs
(:mod:`oracle.agents.repair.mutants`), using real subprocesses, real files and real elapsed
time. It is a program (``python oracle/agents/repair/agent.py start|resume ...``) on the
shared child of :mod:`oracle.agents.program`, driven through
:class:`oracle.agents.command_line.CommandLineAgent`, so a fail-stop is a real SIGKILL and
the harness measures it exactly like any command-line agent.

Logical steps (turns), for a task with ``bugs`` injected bugs (1 or 2):

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
   them in the fact ``rejected``. With a second bug still to come, an edit that makes
   some of them pass (and no more fail) is kept, and the whole suite is run again: its
   failures are the next round's ``failing_tests:2``.
4. (two bugs) **localise** and **patch** again, the second round's facts keyed ``:2``.
5. **verify**: run the whole suite again.

Recovery is a re-derivation: a resumed run re-orients (lists the workspace, re-reads the
preserved transcript), then continues from the first step not marked done; preserved
facts let it skip work (with ``suspicious_lines`` it does not localise again; rejected
edits are not retried; a missing cache is regenerated). Every boundary falls after a tool
returns; with ``granularity="turn"`` only the last tool call of each step is a candidate.
This module imports only the standard library at top level, so the child starts fast.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from oracle.agents.program import ProgramChild, sha

RUNNER = str(Path(__file__).with_name("runner.py"))
STEPS = ("reproduce", "localise", "patch", "verify")  # the steps of a one-bug task


class RepairChild(ProgramChild):
    """The agent program's state: workspace, transcript, facts, seeded choices."""

    prog = "oracle/agents/repair/agent.py"

    def __init__(self, args) -> None:  # noqa: ANN001 - argparse namespace
        super().__init__(args)
        p = self.params
        self.module = p["module"]
        self.n_passing = int(p.get("passing_sample", 12))
        self.top_lines = int(p.get("top_lines", 10))
        self.max_edits = int(p.get("max_edits", 60))
        self.n_bugs = int(p.get("bugs", 1))

    def steps(self) -> list[str]:
        return ["reproduce", *(["localise", "patch"] * self.n_bugs), "verify"]

    @staticmethod
    def round_of(step: int) -> int:
        """Which bug a localise/patch step works on (1-based)."""
        return max(1, (step - 2) // 2 + 1)

    @staticmethod
    def key(name: str, rnd: int) -> str:
        """The fact ``name`` of round ``rnd`` (round 1 keeps the plain name)."""
        return name if rnd == 1 else f"{name}:{rnd}"

    # -- protocol ---------------------------------------------------------------------
    def run_cmd3(self, argv: list[str], timeout: float = 60.0) -> tuple[int, str, float]:
        res = self.run_cmd(argv, timeout=timeout)
        return res.code, res.out, res.dur

    def runner(self, cmd: str, ids: list[str]) -> list[str]:
        return [sys.executable, RUNNER, cmd, ".", self.module, *ids]

    @staticmethod
    def _json_tail(out: str) -> dict:
        from oracle.agents.repair.strategy import json_tail

        return json_tail(out)

    # -- steps ------------------------------------------------------------------------
    def orient(self, step: int) -> None:
        """Re-orientation of a resumed run: list the workspace, re-read the transcript."""
        code, out, dur = self.run_cmd3(["ls", "-la", "."])
        self.event(step, "command", last=False, duration=dur, boundary=False, command="ls -la .",
                   argv=["ls", "-la", "."], exit_code=code, paths_read=["."], phase="orient")

    def step_reproduce(self, step: int) -> None:
        argv = self.runner("suite", [])
        code, out, dur = self.run_cmd3(argv)
        res = self._json_tail(out)
        failed = list(res.get("failed", []))
        self.event(step, "test", last=False, duration=dur, command=" ".join(argv), argv=argv,
                   exit_code=code, paths_read=[f"{self.module}.py"], tests_passed=res.get("run", 0) - len(failed),
                   tests_failed=len(failed), payload_digest=sha(out), source="tests", phase="reproduce")
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

    def test_ids(self, step: int) -> list[str]:
        path = self.ws / "cache" / "test_index.json"
        if not path.exists():  # lost with the run: regenerate (cheap)
            argv = self.runner("suite", [])
            code, out, dur = self.run_cmd3(argv)
            res = self._json_tail(out)
            self.event(step, "test", last=False, duration=dur, boundary=False, command=" ".join(argv),
                       argv=argv, exit_code=code, payload_digest=sha(out), source="tests", phase="reindex")
            self.write_cache(step, res.get("ids", []), last=False)
        return json.loads(path.read_text())["ids"]

    def step_localise(self, step: int) -> None:
        from oracle.agents.repair.strategy import localisation_runs, ochiai_ranking

        rnd = self.round_of(step)
        failing = list(self.facts.get(self.key("failing_tests", rnd)) or [])
        if not failing or self.facts.get("gave_up"):  # nothing left to repair
            self.step_done(step)
            return
        passing = [i for i in self.test_ids(step) if i not in set(failing)]
        self.rng.shuffle(passing)
        runs = localisation_runs(failing, passing, self.n_passing)
        cover: list[tuple[set[int], bool]] = []
        for k, (tid, _) in enumerate(runs):
            argv = self.runner("cover", [tid])
            code, out, dur = self.run_cmd3(argv)
            res = self._json_tail(out)
            ok = bool(res.get("ok", False))
            cover.append((set(res.get("lines", [])), ok))
            self.event(step, "test", last=False, duration=dur, command=" ".join(argv), argv=argv,
                       exit_code=code, paths_read=[f"{self.module}.py"], tests_passed=int(ok),
                       tests_failed=int(not ok), payload_digest=sha(out), source="coverage",
                       phase="localise", boundary=k < len(runs) - 1)
        ranked = ochiai_ranking(cover, self.top_lines)
        self.fact(self.key("suspicious_lines", rnd), [[ln, round(score, 4)] for ln, score in ranked])
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

        rnd = self.round_of(step)
        k_pending, k_rejected = self.key("pending", rnd), self.key("rejected", rnd)
        if not self.facts.get(self.key("failing_tests", rnd)) or self.facts.get("gave_up"):
            self.step_done(step)
            return
        path = self.ws / f"{self.module}.py"
        pending = self.facts.get(k_pending)
        if pending:  # an edit applied but never judged before the failure: undo it
            src = Mutation(**pending).inverse().apply(path.read_text())
            dur = self._write_module(src)
            self.event(step, "file_change", last=False, duration=dur, paths_written=[path.name],
                       bytes_written=len(src), phase="undo_pending")
            self.fact(k_pending, None)
        rejected = {json.dumps(r, sort_keys=True) for r in self.facts.get(k_rejected, [])}
        failing = list(self.facts[self.key("failing_tests", rnd)])
        more = rnd < self.n_bugs  # another bug follows: a partial repair is progress
        tries = 0
        for line, _ in self.facts[self.key("suspicious_lines", rnd)]:
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
                self.fact(k_pending, cand)
                dur = self._write_module(src)
                self.event(step, "file_change", last=False, duration=dur, paths_written=[path.name],
                           bytes_written=len(src), phase="edit", text=f"line {m.line}: {m.old} -> {m.new}")
                argv = self.runner("suite", failing)
                code, out, dur = self.run_cmd3(argv, timeout=20)
                res = self._json_tail(out)
                n_bad = len(res.get("failed", failing)) if res else len(failing)
                fields = dict(command=" ".join(argv), argv=argv, exit_code=code, paths_read=[path.name],
                              tests_passed=res.get("run", 0) - n_bad if res else 0, tests_failed=n_bad,
                              payload_digest=sha(out), source="tests", phase="try")
                kept = code == 0 or (more and bool(res) and n_bad < len(failing))
                if kept:  # judged before the boundary: the restore point holds the patch
                    self.fact(k_pending, None)
                    self.fact(self.key("patch", rnd), cand)
                    if more:
                        self.event(step, "test", last=False, duration=dur, **fields)
                        self.rerun_suite(step, rnd + 1)
                    else:
                        self.step_done(step)
                        self.event(step, "test", last=True, duration=dur, **fields)
                    return
                self.event(step, "test", last=False, duration=dur, **fields)
                dur = self._write_module(orig)
                self.fact(k_pending, None)
                rejected.add(key)
                self.fact(k_rejected, [json.loads(k) for k in sorted(rejected)])
                self.event(step, "file_change", last=False, duration=dur, paths_written=[path.name],
                           bytes_written=len(orig), phase="revert", boundary=False)
        self.fact("gave_up", True)
        self.emit({"type": "event", "kind": "message", "agent_step": step, "text": "no patch found",
                   "turn_end": True, "safe_boundary": False})
        self.step_done(step)

    def rerun_suite(self, step: int, next_round: int) -> None:
        """After a partial repair: the whole suite again; its failures are the next round's."""
        argv = self.runner("suite", [])
        code, out, dur = self.run_cmd3(argv)
        res = self._json_tail(out)
        failed = list(res.get("failed", []))
        self.fact(self.key("failing_tests", next_round), failed)
        self.step_done(step)
        self.event(step, "test", last=True, duration=dur, command=" ".join(argv), argv=argv,
                   exit_code=code, paths_read=[f"{self.module}.py"],
                   tests_passed=res.get("run", 0) - len(failed), tests_failed=len(failed),
                   payload_digest=sha(out), source="tests", phase="reproduce")

    def step_verify(self, step: int) -> None:
        argv = self.runner("suite", [])
        code, out, dur = self.run_cmd3(argv)
        res = self._json_tail(out)
        failed = res.get("failed", [])
        self.event(step, "test", last=False, duration=dur, boundary=False, command=" ".join(argv),
                   argv=argv, exit_code=code, paths_read=[f"{self.module}.py"],
                   tests_passed=res.get("run", 0) - len(failed), tests_failed=len(failed),
                   payload_digest=sha(out), source="tests", phase="verify")
        self.step_done(step)

    def run(self) -> int:
        names = self.steps()
        done = self.done_steps()
        if self.resumed:
            self.orient(min(len(done) + 1, len(names)))
        for step, name in enumerate(names, 1):
            if step in done:
                continue
            rnd = self.round_of(step)
            if name == "localise" and self.facts.get(self.key("suspicious_lines", rnd)):
                self.step_done(step)
                continue
            if name == "reproduce" and self.facts.get("failing_tests"):
                self.step_done(step)
                continue
            getattr(self, f"step_{name}")(step)
        self.emit({"type": "event", "kind": "message", "agent_step": len(names), "text": "done",
                   "turn_end": True})
        return 0


if __name__ == "__main__":
    sys.exit(RepairChild.main())
