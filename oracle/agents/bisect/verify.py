"""Verifier of a bisect task, run in the workspace (standard library only).

Verified when the workspace is synced to the last upstream release (its ``VERSION`` and
``tests/expected.txt`` are the last tag's), the build is up to date (``make -q``) and every
unit of ``tests/expected.txt`` prints its checksum.
"""

import os
import subprocess
import sys
from pathlib import Path

GIT_ENV = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}


def _git(*args: str) -> str:
    return subprocess.run(["git", "--git-dir=upstream.git", *args], capture_output=True,
                          text=True, check=True, stdin=subprocess.DEVNULL, env=GIT_ENV).stdout


def main() -> int:
    tags = [t for t in _git("tag", "--list", "v*").split() if t[1:].isdigit()]
    last = max(tags, key=lambda t: int(t[1:]))
    if Path("VERSION").read_text().strip() != last[1:]:
        return 1
    want = Path("tests/expected.txt").read_text()
    if want != _git("show", f"{last}:tests/expected.txt"):
        return 1
    if subprocess.run(["make", "-q", "bin/selftest"], stdin=subprocess.DEVNULL,
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
        return 1
    try:
        out = subprocess.run(["./bin/selftest"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 1
    return 0 if sorted(out.split("\n")) == sorted(want.split("\n")) else 1


if __name__ == "__main__":
    sys.exit(main())
