"""How long every ``python -m`` entry point takes to answer ``--help`` (target: < 1 s wall).

    python benchmarks/bench_help.py [--repeats 3]

Each entry point (the same list ``tests/test_help_imports.py`` checks for heavy imports: the
commands, their subcommands and every experiment script) runs ``--help`` in a fresh
interpreter ``--repeats`` times; the table shows the best wall seconds and the best CPU
seconds (user + sys of the child) beside the 1 s target, with ``uptime`` above it: on a shared
2-core machine the load is part of the figure. The structural rule behind the target (no
pandas, scikit-learn, SciPy, … imported to print the help) is the test's, not this script's.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 1.0


def entry_points() -> list[str]:
    """The commands, their subcommands, and every experiment with a ``__main__`` guard."""
    experiments = sorted(f"experiments.{p.stem}" for p in (ROOT / "experiments").glob("*.py")
                         if 'if __name__ == "__main__":' in p.read_text())
    return ["features", "oracle", "oracle plan", "oracle run", "oracle audit", "oracle agents",
            "oracle.agents.model_server", "ripplecp_policy.advise", "ripplecp_policy.advise serve",
            "ripplecp_policy.advise check", "ripplecp_policy.advise status",
            "ripplecp_policy.advise install", "ripplecp_policy.advise uninstall", *experiments]


def time_help(entry: str) -> tuple[float, float, int]:
    """Wall and CPU seconds (user + sys) of one ``python -m ENTRY --help``, and its exit status."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", *entry.split(), "--help"], cwd=ROOT, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.returncode


def uptime() -> str:
    with open("/proc/loadavg") as f:
        return "load average " + " ".join(f.read().split()[:3])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="runs per entry point (best is shown)")
    args = ap.parse_args(argv)
    print(f"--help of every entry point, best of {args.repeats} (target < {TARGET_S:g} s wall)")
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, {uptime()}")
    print(f"{'entry point':40s} {'wall s':>7s} {'cpu s':>7s}  status")
    slow = 0
    for entry in entry_points():
        runs = [time_help(entry) for _ in range(args.repeats)]
        wall, cpu = min(r[0] for r in runs), min(r[1] for r in runs)
        failed = [r[2] for r in runs if r[2] != 0]
        status = f"exit {failed[0]}" if failed else ("met" if wall < TARGET_S else "SLOW")
        slow += status != "met"
        print(f"python -m {entry:30s} {wall:7.2f} {cpu:7.2f}  {status}")
    print(f"after: {uptime()}; {slow} of {len(entry_points())} not met")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
