"""Dependency-resolution tasks: generated projects against a generated local package index.

A repository is one generated package universe (``<prefix>-core``, three libraries that
need a sliding window of the core's API, two pure libraries, a legacy CLI that breaks with
core API >= :data:`LEGACY_BREAK`, a C-extension package shipped only as an sdist), written
once as wheels and sdists into ``root/_index/<prefix>/`` and shared by the repository's
tasks, as a company's private index is. A task is a change request on the project: a
``requirements.in`` whose specifiers the generator chooses (seeded), so that tasks differ in

* whether ``pip`` reports ``ResolutionImpossible`` (a top-level library pinned above what
  the legacy CLI tolerates), which the agent resolves by relaxing specifiers;
* whether the newest version of a pure library that ``pip`` picks carries a regression its
  metadata does not declare (found only by running the smoke test), which the agent
  bisects over the library's versions;
* how many sdists ``pip`` must build with the compiler (through the task's wheel cache).

The task's wheel cache, ``root/<task>/pip-cache``, lies outside the workspace, as a user's
``~/.cache/pip`` does: a failure does not erase it, so re-creating an environment after the
nominal run built the sdists costs an unzip, not a compile.
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

from oracle.agents.depres.wheels import build_sdist, build_wheel, module_name
from oracle.agents.program import repository_names, seeded
from oracle.protocol import TaskSpec

__all__ = ["LEGACY_BREAK", "PREFIXES", "Release", "Universe", "make_depres_tasks", "make_universe"]

#: repository prefixes (a repository is ``depres/<prefix>-stack``)
PREFIXES: tuple[str, ...] = ("geo", "ml", "web", "etl", "iot", "doc")
#: the legacy CLI's versions >= 2 need a core API below this
LEGACY_BREAK = 3
MODULUS = 1_000_003
VERIFY = Path(__file__).with_name("verify.py")
SMOKE_INPUTS = (3, 7, 12, 30)


@dataclass(frozen=True)
class Release:
    """One distribution file of the index."""

    name: str
    major: int
    requires: tuple[str, ...] = ()
    sdist: bool = False
    regressed: bool = False
    core_window: tuple[int, int] | None = None  # core API range [lo, hi] checked at import
    payload_kb: int = 100

    @property
    def version(self) -> str:
        return f"{self.major}.0"


@dataclass
class Universe:
    """A repository's package universe (see the module docstring)."""

    prefix: str
    releases: list[Release]
    coeffs: dict[str, tuple[int, int]]  # distribution -> (a, b) of process(x) = (a x + b) mod M
    c_functions: dict[int, int] = field(default_factory=dict)  # fast major -> C functions

    def versions(self, name: str) -> list[int]:
        return sorted(r.major for r in self.releases if r.name == name)

    def release(self, name: str, major: int) -> Release:
        return next(r for r in self.releases if r.name == name and r.major == major)

    @property
    def core(self) -> str:
        return f"{self.prefix}-core"

    @property
    def stack(self) -> list[str]:
        return [f"{self.prefix}-{s}" for s in ("io", "model", "plot")]

    @property
    def pure(self) -> list[str]:
        return [f"{self.prefix}-{s}" for s in ("util", "text")]

    @property
    def legacy(self) -> str:
        return f"{self.prefix}-cli"

    @property
    def fast(self) -> str:
        return f"{self.prefix}-fast"

    def tolerant_max(self, name: str) -> int:
        """Newest version of a stack library whose core window starts below LEGACY_BREAK."""
        return max(r.major for r in self.releases if r.name == name and r.core_window
                   and r.core_window[0] < LEGACY_BREAK)


def make_universe(prefix: str, rng: random.Random) -> Universe:
    """Draw a repository's universe (release graph, regressions, sizes)."""
    rel: list[Release] = []
    coeffs: dict[str, tuple[int, int]] = {}
    n_core = rng.randint(4, 6)
    core = f"{prefix}-core"
    for j in range(1, n_core + 1):
        rel.append(Release(core, j, payload_kb=rng.randint(800, 2400)))
    fast = f"{prefix}-fast"
    c_funcs = {}
    for j in range(1, rng.randint(2, 3) + 1):
        rel.append(Release(fast, j, sdist=True, payload_kb=rng.randint(20, 80)))
        c_funcs[j] = rng.randint(10, 22)
    accelerated = rng.randrange(3)
    for i, s in enumerate(("io", "model", "plot")):
        name = f"{prefix}-{s}"
        n = rng.randint(5, 9)
        for j in range(1, n + 1):
            lo = 1 + round((j - 1) * (n_core - 1) / (n - 1))
            hi = min(n_core, lo + 1)
            req = [f"{core}>={lo},<{hi + 1}"]
            if i == accelerated and j >= n - 1:
                req.append(f"{fast}>=1")
            rel.append(Release(name, j, tuple(req), core_window=(lo, hi),
                               payload_kb=rng.randint(300, 2500)))
    for i, s in enumerate(("util", "text")):
        name = f"{prefix}-{s}"
        n = rng.randint(7, 10)
        m = rng.randint(3, n - 3) if i == 0 else 1  # util: a long regression; text: the newest
        for j in range(1, n + 1):
            rel.append(Release(name, j, regressed=j > n - m, payload_kb=rng.randint(200, 1200)))
    legacy = f"{prefix}-cli"
    for j in range(1, rng.randint(3, 5) + 1):
        req = () if j == 1 else (f"{core}<{LEGACY_BREAK}",)
        rel.append(Release(legacy, j, req, payload_kb=rng.randint(100, 400)))
    for name in sorted({r.name for r in rel}):
        coeffs[name] = (rng.randrange(3, MODULUS), rng.randrange(MODULUS))
    return Universe(prefix, rel, coeffs, c_funcs)


# ---------------------------------------------------------------------------------------
# files of the index
# ---------------------------------------------------------------------------------------


def _payload(rng: random.Random, kb: int) -> bytes:
    """Package data of ``kb`` KiB: hex text, compressible about 2x (like shipped tables)."""
    raw = rng.randbytes(kb * 512).hex()
    return "\n".join(raw[i:i + 64] for i in range(0, len(raw), 64)).encode()


def _module_source(u: Universe, r: Release) -> str:
    a, b = u.coeffs[r.name]
    mod = module_name(r.name)
    lines = [f'"""{r.name} {r.version} (generated by ripplecp depres)."""', "",
             f"VERSION = {r.version!r}", f"API = {r.major}", ""]
    if r.core_window is not None:
        cmod = module_name(u.core)
        lo, hi = r.core_window
        lines += [f"import {cmod} as _core", "",
                  f"if not {lo} <= _core.API <= {hi}:",
                  f"    raise ImportError(f\"{r.name} {r.version} needs {u.core} API in [{lo}, {hi}], "
                  f"found {{_core.API}}\")", ""]
    if any(q.startswith(u.fast) for q in r.requires):
        lines += [f"import {module_name(u.fast)} as _fast  # noqa: F401", ""]
    lines += ["", "def process(x):", f'    """{mod}.process: the stable API of every version."""']
    if r.regressed:
        lines.append(f"    return (x * {a} + {b} + (1 if x % 3 == 0 else 0)) % {MODULUS}")
    else:
        lines.append(f"    return (x * {a} + {b}) % {MODULUS}")
    return "\n".join(lines) + "\n"


def _fast_module(u: Universe, r: Release) -> str:
    return (f'"""{r.name} {r.version}: a C extension (compiled when the sdist is built)."""\n'
            "import ctypes\nimport os\n\n"
            f"VERSION = {r.version!r}\nAPI = {r.major}\n"
            "_lib = ctypes.CDLL(os.path.join(os.path.dirname(os.path.abspath(__file__)), '_ext.so'))\n"
            "_lib.process.restype = ctypes.c_longlong\n_lib.process.argtypes = [ctypes.c_longlong]\n\n\n"
            "def process(x):\n    return int(_lib.process(x))\n")


def _c_source(u: Universe, r: Release, rng: random.Random) -> str:
    """The extension: ``process`` plus table-driven kernels (the compile cost)."""
    a, b = u.coeffs[r.name]
    out = ["#include <stdint.h>", ""]
    for i in range(u.c_functions[r.major]):
        tab = ", ".join(str(rng.getrandbits(31)) for _ in range(64))
        out.append(f"static const uint32_t T{i}[64] = {{{tab}}};")
        out.append(f"uint32_t kernel{i}(const uint32_t *v, int n) {{")
        out.append(f"  uint32_t acc = {rng.getrandbits(31)}u;")
        out.append("  for (int k = 0; k < n; k++) {")
        for j in range(6):
            out.append(f"    acc = (acc ^ T{i}[(v[k] + {j}) & 63]) * {rng.getrandbits(31) | 1}u"
                       f" + (acc >> {rng.randint(1, 31)});")
        out.append("  }\n  return acc;\n}")
    out.append(f"long long process(long long x) {{ return (x * {a}LL + {b}LL) % {MODULUS}LL; }}")
    return "\n".join(out) + "\n"


def write_index(u: Universe, dest: Path, seed: int) -> Path:
    """Write the universe's wheels and sdists into ``dest`` (deterministic in ``seed``)."""
    dest.mkdir(parents=True, exist_ok=True)
    for r in u.releases:
        rng = seeded("depres-files", seed, r.name, r.major)
        mod = module_name(r.name)
        data = _payload(rng, r.payload_kb)
        if r.sdist:
            files = {f"{mod}/__init__.py": _fast_module(u, r).encode(), f"{mod}/tables.dat": data}
            build_sdist(dest, r.name, r.version, r.requires, files,
                        {"ext.c": _c_source(u, r, rng)})
        else:
            files = {f"{mod}/__init__.py": _module_source(u, r).encode(), f"{mod}/tables.dat": data}
            build_wheel(dest, r.name, r.version, r.requires, files)
    return dest


# ---------------------------------------------------------------------------------------
# tasks
# ---------------------------------------------------------------------------------------

_SMOKE = '''"""Smoke test: every module the project uses gives the documented results."""
import importlib
import json
import pathlib
import sys

expected = json.loads((pathlib.Path(__file__).parent / "expected.json").read_text())
failed = []
for mod, cases in sorted(expected.items()):
    try:
        m = importlib.import_module(mod)
    except ImportError as exc:
        print(f"FAIL {mod}: import error: {exc}")
        failed.append(mod)
        continue
    for x, want in cases:
        got = m.process(x)
        if got != want:
            print(f"FAIL {mod}: process({x}) returned {got}, expected {want}")
            failed.append(mod)
            break
print(json.dumps({"failed": failed, "checked": len(expected)}))
sys.exit(1 if failed else 0)
'''

_TEST_APP = '''"""The project's test: the smoke test, and the lock file describes the environment."""
import pathlib
import runpy
import sys

lock = [line.split("==") for line in pathlib.Path("requirements.lock").read_text().split()]
for name, version in lock:
    mod = __import__(name.replace("-", "_").replace(".", "_").lower())
    if mod.VERSION != version:
        sys.exit(f"FAIL {name}: installed {mod.VERSION}, locked {version}")
runpy.run_path(str(pathlib.Path(__file__).with_name("smoke.py")), run_name="__main__")
'''


def _scenario(u: Universe, rng: random.Random) -> tuple[list[str], dict[str, bool]]:
    """A task's requirements.in lines and what it holds (conflict, regression, sdist)."""
    conflict = rng.random() < 0.5
    regression = rng.random() < 0.55
    stack = rng.sample(u.stack, rng.randint(1, 2))
    lines: list[str] = []
    for i, s in enumerate(stack):
        ok = u.tolerant_max(s)
        if conflict and i == 0:
            lines.append(f"{s}>={rng.randint(ok + 1, max(u.versions(s)))}")
        else:
            lines.append(f"{s}>={rng.randint(1, ok)}" if rng.random() < 0.7 else s)
    if conflict:
        lines.append(f"{u.legacy}>=2")
    elif rng.random() < 0.35:
        lines.append(u.legacy)  # the CLI's newest needs an old core: pip backtracks, succeeds
    util, text = u.pure
    n_good = sum(1 for r in u.releases if r.name == util and not r.regressed)
    if regression:
        lines.append(util if rng.random() < 0.6 else f"{util}>={rng.randint(1, n_good)}")
    else:
        lines.append(f"{util}<={n_good}.0" if rng.random() < 0.5 else f"{text}<={max(u.versions(text)) - 1}.0")
    if rng.random() < 0.3:
        lines.append(u.fast)
    return lines, {"conflict": conflict, "regression": regression}


def _expected(u: Universe, lines: list[str]) -> dict[str, list[list[int]]]:
    names = {line.split(">")[0].split("<")[0].split("=")[0] for line in lines}
    out = {}
    for name in sorted(names):
        a, b = u.coeffs[name]
        out[module_name(name)] = [[x, (x * a + b) % MODULUS] for x in SMOKE_INPUTS]
    return out


def make_depres_tasks(n_tasks: int, seed: int, root: str | Path, *, repos: int = 4) -> list[TaskSpec]:
    """Write ``n_tasks`` dependency-resolution tasks over ``repos`` repositories under ``root``.

    Tasks are dealt round-robin over the repositories; each repository's index is written
    once into ``root/_index/<prefix>``; ``root/<task>/scenario.json`` records what the
    generator put in the task (hidden from the agent, for tests and the datasheet).
    """
    if repos < 1:
        raise ValueError(f"repos must be >= 1 for depres, got {repos}")
    root = Path(root)
    prefixes = repository_names(PREFIXES, repos)  # beyond the declared: generated variants
    universes = {}
    for p in prefixes:
        u = make_universe(p, seeded("depres", seed, p))
        write_index(u, root / "_index" / p, seed)
        universes[p] = u
    tasks = []
    for k in range(n_tasks):
        p = prefixes[k % repos]
        u = universes[p]
        j = k // repos
        tid = f"depres-{p}-{j:02d}"
        lines, scen = _scenario(u, seeded("depres-task", seed, p, j))
        tdir = root / tid
        tmpl = tdir / "template"
        (tmpl / "tests").mkdir(parents=True, exist_ok=True)
        (tmpl / "requirements.in").write_text("\n".join(lines) + "\n")
        (tmpl / "README.md").write_text(
            f"# {tid}\n\nInstall this project's requirements (requirements.in) into `pylib/` from "
            "the local index, pin them in requirements.lock, and make tests/test_app.py pass.\n")
        (tmpl / "tests" / "expected.json").write_text(json.dumps(_expected(u, lines), indent=1))
        (tmpl / "tests" / "smoke.py").write_text(_SMOKE)
        (tmpl / "tests" / "test_app.py").write_text(_TEST_APP)
        cache = tdir / "pip-cache"
        cache.mkdir(exist_ok=True)
        (tdir / "scenario.json").write_text(json.dumps({**scen, "requirements": lines}, indent=1))
        tasks.append(TaskSpec(
            task_id=tid, repo=f"depres/{p}-stack", family="depres", workspace_template=tmpl,
            verifier=[sys.executable, str(VERIFY)],
            params={"index": str((root / "_index" / p).resolve()), "cache": str(cache.resolve())},
        ))
    return tasks
