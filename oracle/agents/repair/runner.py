"""Test runner the repair agent executes in a subprocess (standard library only).

Run as a script so the workspace is never on ``sys.path`` before the stdlib has loaded:

    python runner.py suite WORKSPACE MODULE [TEST_ID ...]   -> {"run", "failed", "ids"}
    python runner.py cover WORKSPACE MODULE TEST_ID         -> {"ok", "lines"}
    python runner.py candidates WORKSPACE MODULE LINE ...   -> {"candidates": [{line, col, old, new}]}
    python runner.py edit WORKSPACE MODULE LINE COL OLD NEW -> {"ok", "line", "text"} (or "error")

``candidates`` lists the single-token edits (the mutation operators read backwards) on the
given lines; ``edit`` replaces token OLD at (LINE, COL) by NEW, atomically. They are the tools
the repair brain's runtime calls (:mod:`oracle.agents.model_server.repair`), which cannot edit by
token otherwise; the standalone agent applies the same operators in process.

The module under repair may already be imported by ``unittest`` itself; it is dropped from
``sys.modules`` after unittest has loaded, so the test module imports the workspace copy
while unittest keeps its own references. It is compiled from its source on every run, never
from a cached ``.pyc``, and no bytecode is written: a single-token edit keeps the file's size
and may keep its mtime second, which is all a ``.pyc`` is checked against, so a run could
otherwise test the module as it was before the edit (timing-dependent, likelier under load).
Exit status: 0 when every selected test passed.
"""

import importlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import unittest


class _SourceOnly(importlib.machinery.SourceFileLoader):
    """Compiles the module from its source, never from (or into) a cached ``.pyc``."""

    def get_code(self, fullname):
        return self.source_to_code(self.get_data(self.path), self.path)


def _load(ws: str, name: str):
    ws = os.path.abspath(ws)
    sys.dont_write_bytecode = True  # nothing of the workspace is cached for a later run
    sys.modules.pop(name, None)
    sys.path.insert(0, ws)
    path = os.path.join(ws, name + ".py")
    if os.path.isfile(path):
        spec = importlib.util.spec_from_file_location(name, path, loader=_SourceOnly(name, path))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    else:
        mod = importlib.import_module(name)
    if not os.path.abspath(mod.__file__).startswith(ws + os.sep):
        raise SystemExit(f"runner: {name} not shadowed by the workspace copy ({mod.__file__})")
    return mod, importlib.import_module("test.test_" + name)


def _ids(suite) -> list:
    out = []
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            out.extend(_ids(t))
        else:
            out.append(t.id())
    return out


def _source_tools(cmd: str, ws: str, name: str, args: list) -> int:
    """``candidates`` and ``edit``: token edits of WORKSPACE/MODULE.py (never imported)."""
    from mutants import Mutation, candidate_mutations  # the sibling module (sys.path[0])

    path = os.path.join(os.path.abspath(ws), name + ".py")
    with open(path, encoding="utf-8") as f:
        src = f.read()
    if cmd == "candidates":
        lines = {int(x) for x in args}
        found = [m.to_dict() for m in candidate_mutations(src, lines)]
        print(json.dumps({"candidates": found}))
        return 0
    line, col, old, new = int(args[0]), int(args[1]), args[2], args[3]
    try:
        out = Mutation(line, col, old, new).apply(src)
    except (ValueError, IndexError) as exc:
        print(json.dumps({"ok": False, "error": str(exc)}))
        return 1
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(out)
    os.replace(tmp, path)
    print(json.dumps({"ok": True, "line": line, "text": out.splitlines()[line - 1]}))
    return 0


def main(argv: list) -> int:
    cmd, ws, name, *ids = argv
    if cmd in ("candidates", "edit"):
        return _source_tools(cmd, ws, name, ids)
    lines = set()
    target = os.path.join(os.path.abspath(ws), name + ".py")

    def tracer(frame, event, arg):
        if frame.f_code.co_filename != target:
            return None
        if event == "line":
            lines.add(frame.f_lineno)
        return tracer

    if cmd == "cover":  # trace the import too: a fault in a class body runs at import time
        sys.settrace(tracer)
    try:
        mod, tmod = _load(ws, name)
    finally:
        sys.settrace(None)
    loader = unittest.TestLoader()
    prefix = tmod.__name__ + "."
    if ids:
        suite = loader.loadTestsFromNames([i[len(prefix):] if i.startswith(prefix) else i for i in ids], tmod)
    else:
        suite = loader.loadTestsFromModule(tmod)
    if cmd == "suite":
        all_ids = _ids(suite)
        with open(os.devnull, "w") as devnull:
            r = unittest.TextTestRunner(stream=devnull, verbosity=0).run(suite)
        bad = sorted({t.id() for t, _ in r.failures + r.errors})
        print(json.dumps({"run": r.testsRun, "failed": bad, "ids": all_ids}))
        return 0 if r.wasSuccessful() else 1
    if cmd == "cover":
        sys.settrace(tracer)
        try:
            with open(os.devnull, "w") as devnull:
                r = unittest.TextTestRunner(stream=devnull, verbosity=0).run(suite)
        finally:
            sys.settrace(None)
        print(json.dumps({"ok": r.wasSuccessful(), "lines": sorted(lines)}))
        return 0 if r.wasSuccessful() else 1
    raise SystemExit(f"runner: unknown command {cmd!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
