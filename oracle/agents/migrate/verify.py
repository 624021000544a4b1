"""Verifier of a migrate task, run in the workspace (standard library only).

Verified when ``vendor/oldapi.py`` is gone, no application module mentions ``oldapi``, and
every module's tests pass.
"""

import os
import pathlib
import subprocess
import sys


def main() -> int:
    if pathlib.Path("vendor/oldapi.py").exists():
        return 1
    if any("oldapi" in p.read_text() for p in pathlib.Path("app").glob("*.py")):
        return 1
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.getcwd()}
    p = subprocess.run([sys.executable, "-S", "-m", "unittest", "discover", "-s", "tests", "-q"],
                       env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=300)
    return p.returncode


if __name__ == "__main__":
    sys.exit(main())
