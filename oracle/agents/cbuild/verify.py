"""Verifier of a cbuild task, run in the workspace (standard library only).

Verified when every stage listed in ``stages.txt`` is built and up to date (``make -q``)
and its test prints the checksum in ``spec/<stage>.sum``.
"""

import subprocess
import sys
from pathlib import Path


def main() -> int:
    stages = Path("stages.txt").read_text().split()
    if subprocess.run(["make", "-q", *stages], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode != 0:
        return 1
    for st in stages:
        try:
            out = subprocess.run([f"bin/test_{st}"], capture_output=True, text=True, timeout=60).stdout
        except OSError:
            return 1
        if out.strip() != Path(f"spec/{st}.sum").read_text().strip():
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
