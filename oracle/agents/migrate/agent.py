"""The API-migration agent program (a long-horizon task: several dependent subtasks).

Steps (turns): one per application module, in order, each ending with a candidate
boundary after the module's tests pass, then **final** (remove ``vendor/oldapi.py``, run
every test; no boundary). Porting module ``k``:

1. ``grep`` its legacy calls, and the definitions of both APIs;
2. for every legacy function without a known mapping: try candidate calls of the new API
   (a documented successor if one names it, else every new function of the same arity
   not known to replace another; every argument order; the first argument in units or
   milli-units) in a seeded order, one ``tools/probe.py`` subprocess each, until one
   agrees on the probe's inputs: the fact ``map:<old>`` (a few bytes);
3. rewrite the module, regenerate its golden data (``tools/golden.py``: large, cheap),
   run its tests.

Mappings found while porting one module are reused by the later ones (the subtasks
depend on each other through them and through the imports). A resumed run keeps the
mappings its restore point preserved and finds the others again.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import sys

from oracle.agents.program import ProgramChild

_CALL = re.compile(r"oldapi\.(f\d+)\(([^()]*)\)")
SCALE = 1000


class MigrateChild(ProgramChild):
    prog = "oracle/agents/migrate/agent.py"

    def steps(self) -> list[str]:
        return ["port"] * int(self.params["modules"]) + ["final"]

    def env(self) -> dict[str, str]:
        return {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(self.ws)}

    def apis(self, step: int) -> tuple[dict[str, int], dict[str, tuple[int, str]]]:
        """Old function -> arity; new function -> (arity, docstring), read with grep."""
        old = self.tool(step, ["grep", "-n", "^def ", "vendor/oldapi.py"], phase="read_api",
                        paths_read=["vendor/oldapi.py"])
        arity_old = {m.group(1): len(m.group(2).split(", ")) for m in
                     re.finditer(r"def (f\d+)\(([^)]*)\)", old.out)}
        new = self.tool(step, ["grep", "-n", "-A1", "^def ", "vendor/newapi.py"], phase="read_api",
                        paths_read=["vendor/newapi.py"])
        funcs: dict[str, tuple[int, str]] = {}
        for m in re.finditer(r"def (\w+)\(([^)]*)\):\n\d+-\s+\"\"\"([^\"]*)\"\"\"", new.out):
            funcs[m.group(1)] = (len(m.group(2).split(", ")), m.group(3))
        return arity_old, funcs

    def candidates(self, old: str, arity: int, funcs: dict[str, tuple[int, str]]) -> list[tuple]:
        mapped = {v[0] for k, v in self.facts.items() if k.startswith("map:")}
        named = [n for n, (_, doc) in funcs.items() if f"oldapi.{old}." in doc]
        if named:
            names = named
        else:
            names = [n for n, (a, doc) in sorted(funcs.items())
                     if a == arity and "Replaces oldapi." not in doc and n not in mapped]
        cands = [(n, list(p), s) for n in names for p in itertools.permutations(range(arity))
                 for s in (1, SCALE)]
        self.rng.shuffle(cands)
        return cands

    def discover(self, step: int, old: str, arity: int, funcs: dict[str, tuple[int, str]]) -> list:
        for name, perm, scale in self.candidates(old, arity, funcs):
            argv = [sys.executable, "-S", "tools/probe.py", old, name, json.dumps(perm), str(scale)]
            res = self.tool(step, argv, kind="test", phase="probe", env=self.env(),
                            source="probe", paths_read=["vendor"],
                            tests_passed=0, tests_failed=0,
                            shown=["python", "tools/probe.py", old, name, json.dumps(perm), str(scale)])
            if res.code == 0:
                self.fact(f"map:{old}", [name, perm, scale])
                return [name, perm, scale]
        raise SystemExit(f"migrate agent: no call of the new API replaces oldapi.{old}")

    def step_port(self, step: int) -> None:
        rel = f"app/mod{step}.py"
        src = self.tool(step, ["cat", rel], phase="read", paths_read=[rel]).out
        calls = _CALL.findall(src)
        todo = [f for f in dict.fromkeys(name for name, _ in calls) if f"map:{f}" not in self.facts]
        if todo:
            arity_old, funcs = self.apis(step)
            for f in todo:
                self.discover(step, f, arity_old[f], funcs)

        def port(m: re.Match) -> str:
            name, perm, scale = self.facts[f"map:{m.group(1)}"]
            args = [a.strip() for a in m.group(2).split(",")]
            new = [args[j] for j in perm]
            if scale != 1:
                new[0] = f"({new[0]}) * {scale}"
            return f"newapi.{name}({', '.join(new)})"

        ported = _CALL.sub(port, src).replace("from vendor import oldapi", "from vendor import newapi")
        self.write_file(step, rel, ported, phase="rewrite")
        self.tool(step, [sys.executable, "-S", "tools/golden.py", str(step),
                         str(self.params.get("golden_rows", 20000))], phase="golden", env=self.env(),
                  paths_written=[f"data/golden_mod{step}.json"],
                  shown=["python", "tools/golden.py", str(step)])
        argv = [sys.executable, "-S", f"tests/test_mod{step}.py"]
        res = self.run_cmd(argv, env=self.env())
        if res.code != 0:
            raise SystemExit(f"migrate agent: tests of mod{step} fail after porting:\n{res.err[-2000:]}")
        self.record(step, ["python", f"tests/test_mod{step}.py"], res, kind="test", last=True,
                    done=True, phase="test", source="tests", tests_passed=2, tests_failed=0)

    def step_final(self, step: int) -> None:
        self.tool(step, ["rm", "-f", "vendor/oldapi.py"], phase="remove_legacy",
                  paths_written=["vendor/oldapi.py"], boundary=False)
        argv = [sys.executable, "-S", "-m", "unittest", "discover", "-s", "tests", "-q"]
        res = self.run_cmd(argv, env=self.env())
        self.record(step, ["python", "-m", "unittest", "discover", "-s", "tests"], res, kind="test",
                    last=True, boundary=False, phase="verify", source="tests",
                    tests_passed=int(res.code == 0), tests_failed=int(res.code != 0))


if __name__ == "__main__":
    sys.exit(MigrateChild.main())
