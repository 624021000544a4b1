"""The dependency-resolution agent program (real ``pip`` against the task's local index).

Steps (turns; a candidate boundary after each but the last):

1. **resolve**: ``pip install --dry-run --report`` on ``requirements.in``. When pip
   reports conflicting requirements, relax one specifier named in the conflict (the
   candidates in a seeded order; each tried relaxation is the fact ``tried_relaxations``)
   and resolve again. The resolution is the fact ``pins``, written to ``requirements.lock``.
2. **install**: ``pip install --target pylib --no-deps -r requirements.lock`` through the
   task's wheel cache (sdists are compiled once, then unzipped from the cache).
3. **smoke**: run ``tests/smoke.py`` against ``pylib``; when a module gives wrong results
   (a regression its metadata does not declare), try the library's other versions in a
   seeded order (``pip install --upgrade ... ==V``, smoke again) until one passes: the fact
   ``runtime_pin``, written into the lock; rejected versions are the fact
   ``rejected_versions``.
4. **verify**: the project's test (final, no boundary).

A resumed run re-derives whatever its restore point lacks: with ``pins`` it does not
resolve again, with ``pylib/`` restored it does not reinstall, tried relaxations and
rejected versions are not retried.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from oracle.agents.program import CmdResult, ProgramChild

_CONFLICT_NAME = re.compile(r"^\s*(?:The user requested )?([A-Za-z0-9][A-Za-z0-9._-]*)(?:[<>=!~ ]|$)")
_REQ = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*)$")
_FAIL = re.compile(r"^FAIL ([A-Za-z0-9_]+):", re.M)


def _name_of(line: str) -> str:
    m = _REQ.match(line.strip())
    return m.group(1).lower() if m else line.strip().lower()


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


class DepresChild(ProgramChild):
    prog = "oracle/agents/depres/agent.py"

    def __init__(self, args) -> None:  # noqa: ANN001 - argparse namespace
        super().__init__(args)
        self.index = self.params["index"]
        self.cache = self.params["cache"]

    def steps(self) -> list[str]:
        return ["resolve", "install", "smoke", "verify"]

    # -- tools ------------------------------------------------------------------------
    def pip(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "pip", *args]

    def pip_env(self) -> dict[str, str]:
        env = dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1",
                   PIP_NO_INPUT="1", PYTHONDONTWRITEBYTECODE="1")
        env.pop("PYTHONPATH", None)
        return env

    def index_args(self) -> list[str]:
        return ["--no-index", "--find-links", self.index]

    def test_env(self) -> dict[str, str]:
        return {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(self.ws / "pylib")}

    def smoke(self, step: int, *, last_if_ok: bool) -> CmdResult:
        argv = [sys.executable, "-S", "tests/smoke.py"]
        res = self.run_cmd(argv, env=self.test_env())
        try:
            summary = json.loads(res.out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            summary = {}
        n_bad = len(summary.get("failed", [])) if summary else 1
        ok = res.code == 0
        self.record(step, argv, res, kind="test", last=ok and last_if_ok, done=ok and last_if_ok,
                    phase="smoke", source="tests", paths_read=["pylib", "tests/expected.json"],
                    tests_passed=int(summary.get("checked", 0)) - n_bad if summary else 0,
                    tests_failed=n_bad)
        return res

    # -- steps ------------------------------------------------------------------------
    def step_resolve(self, step: int) -> None:
        self.tool(step, ["cat", "requirements.in"], phase="read", paths_read=["requirements.in"])
        tried = {tuple(t) for t in self.facts.get("tried_relaxations", [])}
        order: list[tuple[str, int]] | None = None
        report = self.ws / ".resolve" / "report.json"
        report.parent.mkdir(exist_ok=True)
        while True:
            argv = self.pip("install", "--dry-run", "--ignore-installed", *self.index_args(),
                            "--report", str(report), "-r", "requirements.in")
            res = self.tool(step, argv, phase="resolve", env=self.pip_env(), timeout=300,
                            source="index", paths_read=["requirements.in"],
                            paths_written=[".resolve/report.json"])
            if res.code == 0:
                break
            lines = (self.ws / "requirements.in").read_text().split()
            named = {m.group(1).lower() for ln in (res.err + res.out).splitlines()
                     if (m := _CONFLICT_NAME.match(ln))}
            if order is None:  # every lower bound may be lowered; the agent's order is seeded
                order = []
                for ln in lines:
                    m = re.search(r">=\s*(\d+)", ln)
                    if m:
                        order += [(_name_of(ln), b) for b in range(int(m.group(1)) - 1, 0, -1)]
                self.rng.shuffle(order)
            cands = [c for c in order if c not in tried and c[0] in named
                     and any(_name_of(ln) == c[0] for ln in lines)]
            if not cands:
                raise SystemExit(f"depres agent: pip cannot resolve and no relaxation is left:\n{res.err[-2000:]}")
            name, bound = cands[0]
            tried.add((name, bound))
            new = [f"{name}>={bound}" if _name_of(ln) == name else ln for ln in lines]
            self.write_file(step, "requirements.in", "\n".join(new) + "\n", phase="relax",
                            text=f"relax {name} to >={bound}")
            self.fact("tried_relaxations", sorted([list(t) for t in tried]))
        installs = json.loads(report.read_text())["install"]
        pins = sorted(f"{i['metadata']['name'].lower()}=={i['metadata']['version']}" for i in installs)
        self.fact("pins", pins)
        self.write_file(step, "requirements.lock", "\n".join(pins) + "\n", last=True, done=True,
                        phase="lock")

    def pins(self) -> list[str]:
        pins = self.facts.get("pins")
        if pins:
            return list(pins)
        return (self.ws / "requirements.lock").read_text().split()

    def step_install(self, step: int) -> None:
        if (self.ws / "pylib").exists():  # whatever a killed run left: start clean
            self.tool(step, ["rm", "-rf", "pylib"], phase="clean", boundary=False)
        argv = self.pip("install", *self.index_args(), "--cache-dir", self.cache, "--target",
                        "pylib", "--no-deps", "--no-compile", "-r", "requirements.lock")
        res = self.run_cmd(argv, env=self.pip_env(), timeout=600)
        if res.code != 0:
            raise SystemExit(f"depres agent: pip install failed:\n{res.err[-2000:]}")
        self.record(step, argv, res, last=True, done=True, phase="install", source="index",
                    paths_read=["requirements.lock"], paths_written=["pylib"],
                    bytes_written=_du(self.ws / "pylib"))

    def step_smoke(self, step: int) -> None:
        res = self.smoke(step, last_if_ok=True)
        if res.code == 0:
            return
        rejected = set(self.facts.get("rejected_versions", []))
        culprit = _FAIL.search(res.out)
        if culprit is None:
            raise SystemExit(f"depres agent: smoke test failed without a culprit:\n{res.out[-2000:]}")
        mod = culprit.group(1)
        listing = self.tool(step, ["ls", self.index], phase="list_index", source="index",
                            paths_read=[self.index])
        pins = self.pins()
        name = next((p.split("==")[0] for p in pins if p.split("==")[0].replace("-", "_") == mod), mod)
        current = next((p.split("==")[1] for p in pins if p.split("==")[0] == name), None)
        floor = 0
        for ln in (self.ws / "requirements.in").read_text().split():
            m = re.search(r">=\s*(\d+)", ln)
            if _name_of(ln) == name and m:
                floor = int(m.group(1))
        versions = sorted({m.group(1) for m in re.finditer(
            rf"^{re.escape(mod)}-(\d+\.\d+)-py3-none-any\.whl$", listing.out, re.M)},
            key=lambda v: tuple(map(int, v.split("."))))
        cands = [v for v in versions if v != current and f"{name}=={v}" not in rejected
                 and int(v.split(".")[0]) >= floor]
        self.rng.shuffle(cands)
        for v in cands:
            argv = self.pip("install", *self.index_args(), "--target", "pylib", "--no-deps",
                            "--no-compile", "--upgrade", f"{name}=={v}")
            r = self.tool(step, argv, phase="try_version", env=self.pip_env(), timeout=300,
                          source="index", paths_written=["pylib"], text=f"try {name}=={v}")
            if r.code != 0:
                raise SystemExit(f"depres agent: pip install {name}=={v} failed:\n{r.err[-2000:]}")
            if self.smoke(step, last_if_ok=False).code == 0:
                self.fact("runtime_pin", f"{name}=={v}")
                pins = sorted([p for p in pins if p.split("==")[0] != name] + [f"{name}=={v}"])
                self.fact("pins", pins)
                self.write_file(step, "requirements.lock", "\n".join(pins) + "\n", last=True,
                                done=True, phase="lock", text=f"pin {name}=={v}")
                return
            rejected.add(f"{name}=={v}")
            self.fact("rejected_versions", sorted(rejected))
        raise SystemExit(f"depres agent: no version of {name} passes the smoke test")

    def step_verify(self, step: int) -> None:
        argv = [sys.executable, "-S", "tests/test_app.py"]
        res = self.run_cmd(argv, env=self.test_env())
        self.record(step, argv, res, kind="test", last=True, boundary=False, phase="verify",
                    source="tests", paths_read=["pylib", "requirements.lock"],
                    tests_passed=int(res.code == 0), tests_failed=int(res.code != 0))


if __name__ == "__main__":
    sys.exit(DepresChild.main())
