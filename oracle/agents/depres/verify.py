"""Verifier of a depres task, run in the workspace (standard library only).

Verified when ``requirements.lock`` exists, ``pylib/`` holds it, and the project's own test
(``tests/test_app.py``: every locked version installed, the smoke test passing) exits 0
against ``pylib/`` alone (``-S``: no site-packages).
"""

import os
import subprocess
import sys


def main() -> int:
    ws = os.getcwd()
    if not (os.path.isfile("requirements.lock") and os.path.isdir("pylib")):
        return 1
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.path.join(ws, "pylib")}
    p = subprocess.run([sys.executable, "-S", os.path.join("tests", "test_app.py")], env=env,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=120)
    return p.returncode


if __name__ == "__main__":
    sys.exit(main())
