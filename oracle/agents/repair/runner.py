"""Test runner the repair agent executes in a subprocess (standard library only).

Run as a script so the workspace is never on ``sys.path`` before the stdlib has loaded:

    python runner.py suite WORKSPACE MODULE [TEST_ID ...]   -> {"run", "failed", "ids"}
    python runner.py cover WORKSPACE MODULE TEST_ID         -> {"ok", "lines"}

The module under repair may already be imported by ``unittest`` itself; it is dropped from
``sys.modules`` after unittest has loaded, so the test module imports the workspace copy
while unittest keeps its own references. Exit status: 0 when every selected test passed.
"""

import importlib
import json
import os
import sys
import unittest


def _load(ws: str, name: str):
    ws = os.path.abspath(ws)
    sys.modules.pop(name, None)
    sys.path.insert(0, ws)
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


def main(argv: list) -> int:
    cmd, ws, name, *ids = argv
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
