"""The multi-stage build agent program (real ``make`` and ``gcc`` on a generated C project).

Steps (turns): one per stage listed in ``stages.txt``, in order, each with a candidate
boundary at its end, then **final** (every stage's target up to date, the top stage's test
again; no boundary). A stage step:

1. ``python tools/configure.py`` (config.ini -> config headers), ``make <stage>``;
2. run ``bin/test_<stage>`` and compare with ``spec/<stage>.sum``;
3. on a mismatch, a configuration fault: try single-option changes of this stage's
   section of ``config.ini`` (values from ``config.options``, in a seeded order): edit,
   configure, rebuild the stage (every file of the stage includes its config header),
   test. The option that fixes it is the fact ``config:<stage>``; rejected changes are
   the fact ``rejected:<stage>``.

A resumed run re-derives what its restore point lacks: make rebuilds only targets the
restored workspace lacks or holds stale (checkpoints keep mtimes), a fixed option is in
the restored ``config.ini``, and rejected changes are not retried.
"""

from __future__ import annotations

import configparser
import json
import sys
from pathlib import Path

from oracle.agents.program import ProgramChild


def _size(paths: list[Path]) -> int:
    total = 0
    for p in paths:
        if p.is_file():
            total += p.stat().st_size
        elif p.is_dir():
            total += sum(q.stat().st_size for q in p.rglob("*") if q.is_file())
    return total


class CbuildChild(ProgramChild):
    prog = "oracle/agents/cbuild/agent.py"

    def __init__(self, args) -> None:  # noqa: ANN001 - argparse namespace
        super().__init__(args)
        self.stages: list[str] = list(self.params["stages"])

    def steps(self) -> list[str]:
        return ["stage"] * len(self.stages) + ["final"]

    def artifacts(self, st: str) -> list[Path]:
        ws = self.ws
        return [ws / "obj" / st, ws / "lib" / f"lib{st}.a", ws / "bin" / f"test_{st}",
                ws / "out" / f"tables_{st}.bin"]

    def configure(self, step: int) -> None:
        self.tool(step, [sys.executable, "tools/configure.py"], phase="configure",
                  paths_read=["config.ini"], paths_written=["config"])

    def make(self, step: int, st: str, phase: str) -> None:
        argv = ["make", "-s", st]
        res = self.run_cmd(argv, timeout=600)
        if res.code != 0:
            raise SystemExit(f"cbuild agent: make {st} failed:\n{res.err[-2000:]}")
        self.record(step, argv, res, phase=phase, paths_read=[f"src/{st}", "config"],
                    paths_written=["obj", "lib", "bin", "out"],
                    bytes_written=_size(self.artifacts(st)))

    def test(self, step: int, st: str, *, last_if_ok: bool, fact: tuple | None = None) -> bool:
        """Run the stage's test; when it passes, set ``fact`` (key, value) first and, with
        ``last_if_ok``, make it the step's last tool return (its boundary)."""
        want = (self.ws / "spec" / f"{st}.sum").read_text().strip()
        argv = [f"bin/test_{st}"]
        res = self.run_cmd(argv)
        ok = res.code == 0 and res.out.strip() == want
        if ok and fact is not None:
            self.fact(*fact)
        self.record(step, argv, res, kind="test", last=ok and last_if_ok, done=ok and last_if_ok,
                    phase="test", source="tests", tests_passed=int(ok), tests_failed=int(not ok),
                    text=f"checksum {res.out.strip()} (spec {want})")
        return ok

    def write_ini(self, step: int, ini: configparser.ConfigParser, text: str) -> None:
        lines = []
        for sec in ini.sections():
            lines.append(f"[{sec}]")
            lines += [f"{k} = {v}" for k, v in sorted(ini[sec].items())]
            lines.append("")
        self.write_file(step, "config.ini", "\n".join(lines) + "\n", phase="edit_config", text=text)

    def step_stage(self, step: int) -> None:
        st = self.stages[step - 1]
        self.tool(step, ["cat", f"spec/{st}.sum"], phase="read", paths_read=[f"spec/{st}.sum"])
        self.configure(step)
        self.make(step, st, "build")
        if self.test(step, st, last_if_ok=True):
            return
        # a configuration fault: search single-option changes of this stage's section
        opts = json.loads(self.tool(step, ["cat", "config.options"], phase="read",
                                    paths_read=["config.options"]).out)
        ini = configparser.ConfigParser()
        ini.read(self.ws / "config.ini")
        base = {k: int(v) for k, v in ini[st].items()}
        rejected = {tuple(x) for x in self.facts.get(f"rejected:{st}", [])}
        cands = [(k, v) for k in sorted(base) for v in opts[k] if v != base[k]
                 and (k, v) not in rejected]
        self.rng.shuffle(cands)
        for key, value in cands:
            for k, v in base.items():
                ini[st][k] = str(v)
            ini[st][key] = str(value)
            self.write_ini(step, ini, f"try {st}.{key} = {value}")
            self.configure(step)
            self.make(step, st, "rebuild")
            if self.test(step, st, last_if_ok=True, fact=(f"config:{st}", {key: value})):
                return
            rejected.add((key, value))
            self.fact(f"rejected:{st}", sorted([list(r) for r in rejected]))
        raise SystemExit(f"cbuild agent: no single-option change fixes stage {st}")

    def step_final(self, step: int) -> None:
        argv = ["make", "-s", *self.stages]
        res = self.run_cmd(argv, timeout=600)
        self.record(step, argv, res, phase="make_all", boundary=False,
                    paths_written=["obj", "lib", "bin", "out"])
        top = self.stages[-1]
        want = (self.ws / "spec" / f"{top}.sum").read_text().strip()
        r = self.run_cmd([f"bin/test_{top}"])
        ok = r.out.strip() == want
        self.record(step, [f"bin/test_{top}"], r, kind="test", last=True, boundary=False,
                    phase="verify", source="tests", tests_passed=int(ok), tests_failed=int(not ok))


if __name__ == "__main__":
    sys.exit(CbuildChild.main())
