"""Regression-bisect tasks: generated C projects with a real upstream git history.

A repository is one generated C project (``bisect/<name>``): units ``src/u_<unit>.c``, each a
function of a ``uint32_t`` plus table-driven kernels that only weigh on the compiler, a
self-test (``bin/selftest`` prints every unit's checksum), ``tests/expected.txt`` (the
checksums the units must print), ``tools/check.py`` (build, run, compare; exit 125 when the
build fails, so ``git bisect run`` skips) and a Makefile (``make``: ``obj/``, ``bin/``).

A task is an upstream history of that project in a real bare git repository,
``upstream.git`` inside the workspace (written with ``git fast-import``, fixed dates, so one
seed gives the same commits): tags ``v0`` (the workspace as shipped) to ``vR``, each release
some feature commits (a new unit, or another kernel in a unit) and a release commit (it
bumps ``VERSION`` and ``CHANGES.md``). In zero, one or two releases (drawn per task) one
feature commit is a regression: it changes a constant of an existing unit, so that unit's
checksum no longer matches, and no later commit touches that unit. The agent syncs release
by release; the failing release, the position of the culprit in it and the release's
length are all the task's, not the agent's choice. ``root/<task>/scenario.json`` records
the culprits (hidden from the agent).

Checksums are known without a compiler: :func:`unit_checksum` mirrors the generated C.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from oracle.agents.program import repository_names, seeded
from oracle.protocol import TaskSpec

__all__ = ["PROJECTS", "Project", "Unit", "make_bisect_tasks", "make_project", "unit_checksum"]

#: declared repository names (a repository is ``bisect/<name>``); more are generated variants
PROJECTS: tuple[str, ...] = ("ledger", "imaging", "routing", "audio", "parser", "storage",
                             "physics", "vision")
_WORDS = ("scale", "blend", "hash", "pack", "clip", "merge", "round", "warp", "fold", "mix",
          "trim", "shift", "quant", "norm", "pad", "tile", "wrap", "step", "span", "mask")
OPS = ("add", "xor", "mul", "rot")
M32 = 0xFFFFFFFF
VERIFY = Path(__file__).with_name("verify.py")
#: commit dates start here (fixed, so the commits' hashes are the seed's)
EPOCH = 1_700_000_000
AUTHOR = "Upstream Maintainers <upstream@example.org>"


@dataclass(frozen=True)
class Unit:
    """One unit: its function's ops (op, constant) and its kernels' table seeds."""

    name: str
    ops: tuple[tuple[str, int], ...]
    kernels: tuple[int, ...]  # one seed per kernel (compile cost only)


@dataclass(frozen=True)
class Project:
    name: str
    units: tuple[Unit, ...]


def _unit(name: str, rng: random.Random) -> Unit:
    ops = tuple((rng.choice(OPS), rng.getrandbits(32)) for _ in range(rng.randint(4, 8)))
    return Unit(name, ops, tuple(rng.getrandbits(31) for _ in range(rng.randint(1, 3))))


def make_project(name: str, rng: random.Random) -> Project:
    """Draw a repository's base project (its units at ``v0``)."""
    n = rng.randint(5, 8)
    return Project(name, tuple(_unit(f"{rng.choice(_WORDS)}{i:02d}", rng) for i in range(n)))


# ---------------------------------------------------------------------------------------
# the mirror of the generated C, and the sources
# ---------------------------------------------------------------------------------------


def _apply(ops: tuple[tuple[str, int], ...], x: int) -> int:
    for op, c in ops:
        if op == "add":
            x = (x + c) & M32
        elif op == "xor":
            x ^= c
        elif op == "mul":
            x = (x * (c | 1)) & M32
        else:
            r = c % 31 + 1
            x = ((x << r) | (x >> (32 - r))) & M32
    return x


def unit_checksum(u: Unit) -> str:
    """What ``bin/selftest`` prints for unit ``u``."""
    acc = 0
    for i in range(16):
        acc = (acc * 31 + _apply(u.ops, i)) & M32
    return f"{acc:08x}"


def _unit_source(u: Unit) -> str:
    out = [f"/* src/u_{u.name}.c */", "#include <stdint.h>", "",
           "static inline uint32_t rotl(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }",
           ""]
    for j, ks in enumerate(u.kernels):
        rng = random.Random(ks)
        tab = ", ".join(str(rng.getrandbits(31)) for _ in range(64))
        out.append(f"static const uint32_t T{j}[64] = {{{tab}}};")
        out.append(f"uint32_t u_{u.name}_kernel{j}(const uint32_t *v, int n) {{")
        out.append(f"  uint32_t acc = {rng.getrandbits(31)}u;")
        out.append("  for (int k = 0; k < n * 4; k++) {")
        for q in range(6):
            out.append(f"    acc = (acc ^ T{j}[(v[k % n] + {q}) & 63]) * {rng.getrandbits(31) | 1}u"
                       f" + rotl(acc, {rng.randint(1, 31)});")
        out.append("  }\n  return acc;\n}")
    out.append(f"uint32_t u_{u.name}(uint32_t x) {{")
    for op, c in u.ops:
        out.append({"add": f"  x += {c}u;", "xor": f"  x ^= {c}u;", "mul": f"  x *= {c | 1}u;",
                    "rot": f"  x = rotl(x, {c % 31 + 1});"}[op])
    out.append("  return x;\n}")
    return "\n".join(out) + "\n"


_MAIN = r"""/* src/main.c: the self-test, one line per unit of units.def */
#include <stdint.h>
#include <stdio.h>
#define UNIT(n) uint32_t u_##n(uint32_t);
#include "units.def"
#undef UNIT
int main(void) {
#define UNIT(n) { uint32_t acc = 0; \
    for (uint32_t i = 0; i < 16; i++) acc = acc * 31u + u_##n(i); \
    printf("%s %08x\n", #n, acc); }
#include "units.def"
  return 0;
}
"""

_MAKEFILE = """# generated by ripplecp bisect
CC ?= gcc
CFLAGS = -O2 -g
SRC = $(wildcard src/u_*.c)
OBJ = $(patsubst src/%.c,obj/%.o,$(SRC))

.PHONY: all
all: bin/selftest

obj/%.o: src/%.c
\t@mkdir -p obj
\t$(CC) $(CFLAGS) -c $< -o $@

obj/main.o: src/units.def

bin/selftest: obj/main.o $(OBJ)
\t@mkdir -p bin
\t$(CC) $(CFLAGS) $^ -o $@
"""

_CHECK = r'''"""The project's tests: build bin/selftest, compare units' checksums with tests/expected.txt.

    python tools/check.py [UNIT ...]      (no unit: every unit of tests/expected.txt)

Exit status: 0 every unit passes, 1 one fails, 125 the build failed (git bisect run: skip).
"""
import subprocess
import sys

if subprocess.run(["make", "-s", "bin/selftest"], stdin=subprocess.DEVNULL).returncode != 0:
    sys.exit(125)
out = subprocess.run(["./bin/selftest"], capture_output=True, text=True).stdout
got = dict(line.split() for line in out.splitlines() if line.strip())
with open("tests/expected.txt") as f:
    want = dict(line.split() for line in f if line.strip())
units = sys.argv[1:] or list(want)
bad = [u for u in units if got.get(u) != want.get(u)]
for u in units:
    print(("FAIL " if u in bad else "ok   ") + u)
sys.exit(1 if bad else 0)
'''


def _files(units: list[Unit], version: int, changes: str) -> dict[str, str]:
    """The project's tree (path -> text) with ``units`` in order."""
    files = {f"src/u_{u.name}.c": _unit_source(u) for u in units}
    files["src/units.def"] = "".join(f"UNIT({u.name})\n" for u in units)
    files["src/main.c"] = _MAIN
    files["Makefile"] = _MAKEFILE
    files["tools/check.py"] = _CHECK
    files["tests/expected.txt"] = "".join(f"{u.name} {unit_checksum(u)}\n" for u in units)
    files["VERSION"] = f"{version}\n"
    files["CHANGES.md"] = changes
    return files


# ---------------------------------------------------------------------------------------
# the history
# ---------------------------------------------------------------------------------------


@dataclass
class _Commit:
    message: str
    files: dict[str, str]  # the whole tree after the commit
    tag: str | None = None


def _history(p: Project, rng: random.Random, releases: tuple[int, int],
             commits: tuple[int, int]) -> tuple[list[_Commit], list[dict]]:
    """The task's upstream history (``v0`` first) and its regressions."""
    n_rel = rng.randint(*releases)
    sizes = [rng.randint(*commits) for _ in range(n_rel)]  # feature commits per release
    n_reg = min(n_rel, rng.choices((0, 1, 2), weights=(1, 5, 2))[0])
    reg_rel = sorted(rng.sample(range(1, n_rel + 1), n_reg))
    # the units a regression breaks: base units, distinct; no commit touches them otherwise
    broken = rng.sample(range(len(p.units)), n_reg)
    units = list(p.units)
    frozen = {p.units[i].name for i in broken}
    changes = "# Changes\n"
    commits = [_Commit("initial import", _files(units, 0, changes), "v0")]
    regressions = []
    n_new = 0
    for rel in range(1, n_rel + 1):
        culprit = rng.randrange(sizes[rel - 1]) if rel in reg_rel else -1
        notes = []
        for c in range(sizes[rel - 1]):
            if c == culprit:
                i = broken[reg_rel.index(rel)]
                u = units[i]
                k = rng.randrange(len(u.ops))
                op, const = u.ops[k]
                new_const = const
                while True:
                    new_const = (new_const + rng.choice((1, 2, 4, 8, 16))) & M32
                    bad = replace(u, ops=u.ops[:k] + ((op, new_const),) + u.ops[k + 1:])
                    if unit_checksum(bad) != unit_checksum(u):
                        break
                units[i] = bad
                msg = f"{u.name}: fold the constants of the inner step"
                regressions.append({"release": rel, "commit_in_release": c, "unit": u.name,
                                    "commits_in_release": sizes[rel - 1], "message": msg})
            elif rng.random() < 0.55:
                n_new += 1
                u = _unit(f"{rng.choice(_WORDS)}{len(p.units) + n_new - 1:02d}", rng)
                units.append(u)
                msg = f"add unit {u.name}"
            else:
                cands = [j for j, u in enumerate(units) if u.name not in frozen]
                j = rng.choice(cands)
                u = units[j]
                units[j] = replace(u, kernels=(*u.kernels, rng.getrandbits(31)))
                msg = f"{u.name}: add a vectorised kernel"
            notes.append(msg)
            commits.append(_Commit(msg, {**_files(units, rel - 1, changes)}))
        changes += f"\n## v{rel}\n" + "".join(f"- {m}\n" for m in notes)
        commits.append(_Commit(f"release v{rel}", _files(units, rel, changes), f"v{rel}"))
    # a regression's commit keeps the expected checksum: the tests say it broke the unit
    good = {u.name: unit_checksum(u) for u in units if u.name not in frozen}
    good.update({u.name: unit_checksum(u) for u in p.units if u.name in frozen})
    for c in commits:
        names = [line[5:-1] for line in c.files["src/units.def"].splitlines()]
        c.files["tests/expected.txt"] = "".join(f"{n} {good[n]}\n" for n in names)
    return commits, regressions


def _fast_import(commits: list[_Commit]) -> bytes:
    """A ``git fast-import`` stream of ``commits`` on ``refs/heads/main``, tags as lightweight."""
    out: list[bytes] = []

    def data(text: str) -> None:
        raw = text.encode()
        out.append(b"data %d\n" % len(raw) + raw + b"\n")

    prev: dict[str, str] = {}
    for n, c in enumerate(commits, 1):
        when = f"{AUTHOR} {EPOCH + 3600 * n} +0000"
        out.append(f"commit refs/heads/main\nmark :{n}\nauthor {when}\ncommitter {when}\n".encode())
        data(c.message + "\n")
        if n > 1:
            out.append(f"from :{n - 1}\n".encode())
        for path, text in sorted(c.files.items()):
            if prev.get(path) != text:
                mode = "100755" if path == "tools/check.py" else "100644"
                out.append(f"M {mode} inline {path}\n".encode())
                data(text)
        prev = c.files
        if c.tag:
            out.append(f"reset refs/tags/{c.tag}\nfrom :{n}\n\n".encode())
    return b"".join(out) + b"done\n"


def _git(*args: str, cwd: Path, stdin: bytes | None = None) -> None:
    subprocess.run(["git", *args], cwd=cwd, input=stdin, check=True, capture_output=True,
                   env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
                        "LC_ALL": "C"})


def _write_tree(files: dict[str, str], dest: Path) -> None:
    for path, text in files.items():
        f = dest / path
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
        if path == "tools/check.py":
            f.chmod(0o755)


def make_bisect_tasks(n_tasks: int, seed: int, root: str | Path, *, repos: int = 4,
                      releases: tuple[int, int] = (3, 5),
                      commits: tuple[int, int] = (2, 14)) -> list[TaskSpec]:
    """Write ``n_tasks`` regression-bisect tasks over ``repos`` generated C projects.

    Tasks are dealt round-robin over the repositories (the declared :data:`PROJECTS`, then
    generated variants); each task's template is the project at ``v0`` plus ``upstream.git``
    (a bare repository holding the task's history, tags ``v0``..``vR``). Per task (seeded):
    R releases in ``releases`` (inclusive), each of feature commits in ``commits``.
    """
    if repos < 1:
        raise ValueError(f"repos must be >= 1 for bisect, got {repos}")
    for name, (lo, hi) in (("releases", releases), ("commits", commits)):
        if not 1 <= lo <= hi:
            raise ValueError(f"{name} must be a range 1 <= lo <= hi, got {(lo, hi)}")
    root = Path(root)
    names = repository_names(PROJECTS, repos)
    projects = {n: make_project(n, seeded("bisect", seed, n)) for n in names}
    tasks = []
    for t in range(n_tasks):
        name = names[t % repos]
        j = t // repos
        history, regressions = _history(projects[name], seeded("bisect-task", seed, name, j),
                                       releases, commits)
        tid = f"bisect-{name}-{j:02d}"
        tdir = root / tid
        tmpl = tdir / "template"
        tmpl.mkdir(parents=True, exist_ok=True)
        _write_tree(history[0].files, tmpl)
        (tmpl / "README.md").write_text(
            f"# {tid}\n\nSync this project to the latest upstream release (tags v1..vN of "
            "upstream.git), one release at a time, keeping `python tools/check.py` green. "
            "When a release breaks a unit, find the upstream commit that broke it (git bisect) "
            "and revert it locally (patches/).\n")
        bare = tmpl / "upstream.git"
        _git("init", "-q", "--bare", "--template=", str(bare), cwd=tmpl)
        _git("fast-import", "--quiet", cwd=bare, stdin=_fast_import(history))
        _git("symbolic-ref", "HEAD", "refs/heads/main", cwd=bare)
        n_rel = sum(1 for c in history if c.tag) - 1
        (tdir / "scenario.json").write_text(json.dumps(
            {"releases": n_rel, "commits": len(history), "regressions": regressions}, indent=1))
        tasks.append(TaskSpec(
            task_id=tid, repo=f"bisect/{name}", family="bisect", workspace_template=tmpl,
            verifier=[sys.executable, str(VERIFY)], params={"releases": n_rel},
        ))
    return tasks
