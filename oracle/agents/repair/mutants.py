"""Mutation operators on real stdlib modules, and the filter that keeps detected mutants.

A mutant replaces one token of a module's source: a comparison or arithmetic operator,
``and``/``or``, ``True``/``False``, or a small integer constant (off by one). Working on
tokens rather than on an unparsed AST keeps every other byte of the file (comments,
layout, line numbers) as published, so a patch is a one-line diff. A mutant is kept only
when the module's own test suite detects it (``test.test_<module>``, run in a subprocess
against the mutated copy).

Standard library only at top level (numpy is imported where mutants are sampled), so the
repair tools (:mod:`oracle.agents.repair.runner`) can use the operators in a fast child.
"""

from __future__ import annotations

import io
import subprocess
import sys
import tokenize
from dataclasses import asdict, dataclass
from pathlib import Path

#: token -> the tokens it may be mutated into (and, read backwards, repaired from)
OPERATOR_SWAPS: dict[str, tuple[str, ...]] = {
    "<": ("<=", ">"),
    "<=": ("<", ">="),
    ">": (">=", "<"),
    ">=": (">", "<="),
    "==": ("!=",),
    "!=": ("==",),
    "+": ("-",),
    "-": ("+",),
    "*": ("//",),
    "//": ("*",),
    "and": ("or",),
    "or": ("and",),
    "True": ("False",),
    "False": ("True",),
    "is": ("is not",),
}


@dataclass(frozen=True)
class Mutation:
    """One token replaced at (line, col) of a module (1-based line, 0-based column)."""

    line: int
    col: int
    old: str
    new: str

    def apply(self, source: str) -> str:
        lines = source.splitlines(keepends=True)
        text = lines[self.line - 1]
        if text[self.col : self.col + len(self.old)] != self.old:
            raise ValueError(f"mutation {self}: line {self.line} does not hold {self.old!r} at col {self.col}")
        lines[self.line - 1] = text[: self.col] + self.new + text[self.col + len(self.old) :]
        return "".join(lines)

    def inverse(self) -> Mutation:
        return Mutation(self.line, self.col, self.new, self.old)

    def to_dict(self) -> dict:
        return asdict(self)


def _number_swaps(tok: str) -> tuple[str, ...]:
    try:
        v = int(tok, 0)
    except ValueError:
        return ()
    if v > 64:
        return ()
    return tuple(str(x) for x in (v + 1, v - 1) if x >= 0)


def candidate_mutations(source: str, lines: set[int] | None = None) -> list[Mutation]:
    """Every single-token mutation of ``source`` (restricted to ``lines`` when given)."""
    out: list[Mutation] = []
    toks = tokenize.generate_tokens(io.StringIO(source).readline)
    for tok in toks:
        (line, col), string = tok.start, tok.string
        if lines is not None and line not in lines:
            continue
        if tok.type == tokenize.OP or (tok.type == tokenize.NAME and string in OPERATOR_SWAPS):
            for new in OPERATOR_SWAPS.get(string, ()):
                out.append(Mutation(line, col, string, new))
        elif tok.type == tokenize.NUMBER:
            for new in _number_swaps(string):
                out.append(Mutation(line, col, string, new))
    return out


def run_suite_cmd(module: str, workspace: Path, tests: list[str] | None = None) -> list[str]:
    """argv that runs ``test.test_<module>`` (or the named test ids) against the workspace copy.

    The stdlib copy may already be imported by ``unittest`` itself; it is dropped from
    ``sys.modules`` after unittest loads, so the test module imports the workspace copy and
    unittest keeps its own references.
    """
    code = (
        "import sys, unittest, importlib\n"
        f"ws = {str(workspace)!r}; name = {module!r}\n"
        "sys.modules.pop(name, None); sys.path.insert(0, ws)\n"
        "m = importlib.import_module(name)\n"
        "assert m.__file__.startswith(ws), f'{name} not shadowed: {m.__file__}'\n"
        f"t = importlib.import_module('test.test_' + name)\n"
        f"ids = {tests!r}\n"
        "loader = unittest.TestLoader()\n"
        "suite = loader.loadTestsFromNames(ids, t) if ids else loader.loadTestsFromModule(t)\n"
        "r = unittest.TextTestRunner(stream=sys.stderr, verbosity=0).run(suite)\n"
        "import json\n"
        "bad = [t.id() for t, _ in r.failures + r.errors]\n"
        "print(json.dumps({'run': r.testsRun, 'failed': bad}))\n"
        "sys.exit(0 if r.wasSuccessful() else 1)\n"
    )
    return [sys.executable, "-B", "-X", "faulthandler", "-c", code]  # -B: see runner.py


def run_suite(module: str, workspace: Path, tests: list[str] | None = None, timeout: float = 60.0) -> tuple[int, list[str], int]:
    """Run the suite; returns (tests run, failing test ids, exit code). A crash counts as detected."""
    import json

    try:
        p = subprocess.run(run_suite_cmd(module, workspace, tests), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 0, ["<suite timed out>"], -9
    last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
    try:
        res = json.loads(last)
        return int(res["run"]), list(res["failed"]), p.returncode
    except (ValueError, KeyError):
        return 0, ["<suite crashed>"], p.returncode or 1


def stdlib_source(module: str) -> Path:
    """Path of the pure-Python stdlib module ``module`` (raises if it is not a .py file)."""
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        raise ValueError(f"{module}: not a pure-Python stdlib module")
    if spec.submodule_search_locations:
        raise ValueError(f"{module}: packages are not supported as subjects")
    return Path(spec.origin)


def require_module_tests(module: str) -> None:
    """ValueError naming the python and the package when CPython's own tests of ``module``
    (``test.test_<module>``) are not installed: without them every suite run 'crashes', and
    no mutant could be told detected (Debian's system python ships them apart)."""
    import importlib.util

    try:
        found = importlib.util.find_spec(f"test.test_{module}") is not None
    except ImportError:  # no ``test`` package at all
        found = False
    if not found:
        v = f"{sys.version_info.major}.{sys.version_info.minor}"
        raise ValueError(
            f"{module}: the repair agent runs CPython's own tests of it, and test.test_{module} "
            f"is not installed for {sys.executable} (Debian and Ubuntu ship them in "
            f"libpython{v}-testsuite; pyenv and python.org builds include them)")


def detected_mutants(
    module: str, scratch: Path, n: int, seed: int, max_tries: int = 60, timeout: float = 10.0
) -> list[Mutation]:
    """Up to ``n`` mutants of ``module`` that its test suite detects, sampled from ``seed``.

    A mutant whose suite times out (an infinite loop) is not kept: the repair agent's own
    test runs would hang on it too, which measures the timeout rather than the agent.
    """
    import numpy as np

    src = stdlib_source(module).read_text()
    require_module_tests(module)
    cands = candidate_mutations(src)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(cands))
    scratch.mkdir(parents=True, exist_ok=True)
    kept: list[Mutation] = []
    for i in order[:max_tries]:
        m = cands[int(i)]
        (scratch / f"{module}.py").write_text(m.apply(src))
        _, failed, code = run_suite(module, scratch, timeout=timeout)
        if code > 0 and failed and not failed[0].startswith("<"):
            kept.append(m)
            if len(kept) == n:
                break
    return kept
