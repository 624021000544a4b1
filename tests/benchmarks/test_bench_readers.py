"""benchmarks/bench_readers.py, run small: every form in a process of its own, from a seed of
its own (the same log whichever forms are measured with it)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "bench_readers.py"


def _rows(*formats: str) -> dict[str, list[str]]:
    p = subprocess.run([sys.executable, str(SCRIPT), "--mb", "0.1", "--repeats", "1",
                        "--no-fixtures", "--formats", *formats], cwd=REPO, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode in (0, 1), p.stderr[-2000:]  # 1: some form below the target
    return {m[1].strip(): m[2].split() for m in re.finditer(
        r"^(openhands-v1(?: \(directory\))?|swe-agent)\s+(.*)$", p.stdout, re.M)}


def test_each_form_measured_alone_from_its_own_seed() -> None:
    both = _rows("openhands-v1", "swe-agent")
    assert set(both) == {"openhands-v1", "openhands-v1 (directory)", "swe-agent"}
    alone = _rows("swe-agent")
    # MB and events: the same generated log with or without the other forms before it
    assert alone["swe-agent"][:2] == both["swe-agent"][:2]
