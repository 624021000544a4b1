"""The regression-bisect agent program (real ``git``, ``make`` and ``gcc``).

Steps (turns): **build** (``make``, then the tests: ``python tools/check.py``), one
**sync** per upstream release ``v1``..``vR``, each with a candidate boundary at its end,
then **final** (``make`` and the tests again; no boundary). A sync of release ``k``:

1. read the release's log and diff (``git --git-dir=upstream.git log/diff v(k-1) vk``),
   write the diff to ``patches/upstream-vk.patch`` and apply it (``git apply``; the
   workspace's own changes, earlier reverts, stay), ``make``, test;
2. when a unit fails: bisect the release's commits for it in a scratch clone
   (``git clone upstream.git .bisect``; ``git bisect start vk v(k-1)``; ``git bisect run
   python tools/check.py UNIT...``, a real build and test per step); the first bad commit
   is the fact ``culprit:vk``; the scratch clone is removed;
3. revert the culprit in the workspace (its diff to ``patches/revert-<sha>.patch``,
   ``git apply -R``), rebuild, test.

The bisect is one unit of work: no candidate boundary falls between the clone and the
scratch's removal (a checkpoint there would hold a clone without its ``.git``, which
checkpoints exclude), so at either granularity a failure during it loses it all.

A resumed run re-derives what its restore point lacks, from the workspace: a release whose
``VERSION`` is already there is not applied again, a known culprit is not bisected again, a
revert already in the files is not applied again, and make rebuilds only what the restored
workspace lacks or holds stale (checkpoints keep mtimes); a leftover scratch clone is removed.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from oracle.agents.program import CmdResult, ProgramChild

_FIRST_BAD = re.compile(r"^([0-9a-f]{40}) is the first bad commit", re.M)
_FAIL = re.compile(r"^FAIL (\S+)$", re.M)
_OK = re.compile(r"^ok ", re.M)
SCRATCH = ".bisect"
#: git reads only the task's repositories' own configuration: a user's global settings
#: (``diff.noprefix``, ``color.diff``, an external diff) would change the patches it writes
GIT_ENV = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
           "GIT_TERMINAL_PROMPT": "0"}


def _size(paths: list[Path]) -> int:
    total = 0
    for p in paths:
        if p.is_dir():
            total += sum(q.stat().st_size for q in p.rglob("*") if q.is_file())
        elif p.is_file():
            total += p.stat().st_size
    return total


class BisectChild(ProgramChild):
    prog = "oracle/agents/bisect/agent.py"

    def __init__(self, args) -> None:  # noqa: ANN001 - argparse namespace
        super().__init__(args)
        self.releases = int(self.params["releases"])

    def steps(self) -> list[str]:
        return ["build", *["sync"] * self.releases, "final"]

    # -- tools ------------------------------------------------------------------------
    def run_cmd(self, argv: Sequence[str], *, timeout: float = 120.0,
                env: dict[str, str] | None = None, cwd: Path | None = None) -> CmdResult:
        """Every git command runs with :data:`GIT_ENV`."""
        if env is None and argv and argv[0] == "git":
            env = GIT_ENV
        return super().run_cmd(argv, timeout=timeout, env=env, cwd=cwd)

    def git(self, *args: str) -> list[str]:
        """A git command on the upstream mirror, the workspace as its work tree."""
        return ["git", "--git-dir=upstream.git", "--work-tree=.", *args]

    def make(self, step: int, phase: str, *, boundary: bool = True) -> None:
        argv = ["make", "-s"]
        res = self.run_cmd(argv, timeout=900)
        if res.code != 0:
            raise SystemExit(f"bisect agent: make failed:\n{res.err[-2000:]}")
        self.record(step, argv, res, phase=phase, boundary=boundary, paths_read=["src", "Makefile"],
                    paths_written=["obj", "bin"],
                    bytes_written=_size([self.ws / "obj", self.ws / "bin"]))

    def test(self, step: int, *, last_if_ok: bool, boundary: bool = True,
             last: bool = False) -> list[str]:
        """Run the tests; the failing units (none: it passed, and with ``last_if_ok`` that
        was the step's last tool return; ``last``: the step's last either way)."""
        argv = [sys.executable, "tools/check.py"]
        res = self.run_cmd(argv, timeout=900)
        failed = _FAIL.findall(res.out)
        if res.code not in (0, 1) or (res.code == 1) != bool(failed):
            raise SystemExit(f"bisect agent: tools/check.py exit {res.code}:\n{res.err[-2000:]}")
        ok = not failed
        self.record(step, argv, res, kind="test", last=last or (ok and last_if_ok),
                    done=ok and last_if_ok, boundary=boundary, phase="test", source="tests",
                    tests_passed=len(_OK.findall(res.out)),
                    tests_failed=len(failed), text=f"failing: {' '.join(failed) or 'none'}")
        return failed

    def version(self) -> int:
        return int((self.ws / "VERSION").read_text().strip())

    # -- steps ------------------------------------------------------------------------
    def step_build(self, step: int) -> None:
        self.make(step, "build")
        if self.test(step, last_if_ok=True):
            raise SystemExit("bisect agent: the project as shipped fails its tests")

    def step_sync(self, step: int) -> None:
        rel = step - 1
        tag, prev = f"v{rel}", f"v{rel - 1}"
        if self.version() < rel:
            self.tool(step, self.git("log", "--oneline", f"{prev}..{tag}"), phase="read",
                      paths_read=["upstream.git"])
            diff = self.tool(step, self.git("diff", "--binary", prev, tag), phase="read",
                             paths_read=["upstream.git"])
            patch = f"patches/upstream-{tag}.patch"
            self.write_file(step, patch, diff.out, phase="sync", text=f"upstream {prev}..{tag}")
            res = self.tool(step, self.git("apply", patch), phase="sync", paths_read=[patch],
                            paths_written=["src", "tests", "VERSION", "CHANGES.md"])
            if res.code != 0:
                raise SystemExit(f"bisect agent: {tag} does not apply:\n{res.err[-2000:]}")
        self.make(step, "build")
        failed = self.test(step, last_if_ok=True)
        if not failed:
            return
        culprit = self.facts.get(f"culprit:{tag}")
        if culprit is None:
            culprit = self.bisect(step, prev, tag, failed)
        self.revert(step, culprit)
        self.make(step, "rebuild")
        if self.test(step, last_if_ok=True):
            raise SystemExit(f"bisect agent: reverting {culprit[:10]} does not fix {tag}")

    def bisect(self, step: int, good: str, bad: str, units: list[str]) -> str:
        """The first bad commit of ``good..bad`` for ``units`` (``git bisect run``)."""
        scratch = self.ws / SCRATCH
        if scratch.exists():  # a restored workspace never holds one; a killed run's might
            shutil.rmtree(scratch)
        clone = self.tool(step, ["git", "clone", "-q", "upstream.git", SCRATCH], phase="bisect",
                          boundary=False, paths_read=["upstream.git"], paths_written=[SCRATCH])
        if clone.code != 0:
            raise SystemExit(f"bisect agent: git clone failed:\n{clone.err[-2000:]}")
        g = ["git", "-C", SCRATCH]
        self.tool(step, [*g, "bisect", "start", bad, good], phase="bisect", boundary=False)
        run = self.tool(step, [*g, "bisect", "run", sys.executable, "tools/check.py", *units],
                        phase="bisect", boundary=False, timeout=3600, paths_written=[SCRATCH],
                        text=f"bisect {good}..{bad} for {' '.join(units)}")
        m = _FIRST_BAD.search(run.out)
        if run.code != 0 or m is None:
            raise SystemExit(f"bisect agent: git bisect run found no culprit:\n{run.out[-2000:]}")
        self.tool(step, [*g, "bisect", "reset"], phase="bisect", boundary=False)
        self.fact(f"culprit:{bad}", m.group(1))
        self.tool(step, ["rm", "-rf", SCRATCH], phase="bisect", paths_written=[SCRATCH])
        return m.group(1)

    def revert(self, step: int, culprit: str) -> None:
        """Revert ``culprit``'s change in the workspace (unless its files already are)."""
        patch = f"patches/revert-{culprit[:10]}.patch"
        if not (self.ws / patch).exists():
            diff = self.tool(step, self.git("show", "--format=", "--binary", culprit),
                             phase="read", paths_read=["upstream.git"])
            self.write_file(step, patch, diff.out, phase="edit", text=f"revert {culprit[:10]}")
        check = self.tool(step, self.git("apply", "-R", "--check", patch), phase="edit",
                          paths_read=[patch])
        if check.code == 0:
            self.tool(step, self.git("apply", "-R", patch), phase="edit", paths_read=[patch],
                      paths_written=["src"])

    def step_final(self, step: int) -> None:
        self.make(step, "make_all", boundary=False)
        self.test(step, last_if_ok=False, boundary=False, last=True)


if __name__ == "__main__":
    sys.exit(BisectChild.main())
