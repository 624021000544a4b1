"""Every ``python -m …`` entry point answers ``--help`` without importing the heavy libraries.

A structural check, not a timed one (the time itself is measured by
``benchmarks/bench_help.py``): ``--help`` builds the argument parser from the ``Args``
dataclass, so the entry point and what it imports to build that parser must leave pandas,
scikit-learn, xgboost, MLflow, Matplotlib, Optuna, SciPy, Dask and torch to the functions that
use them. Each entry point runs in a fresh interpreter under ``-X importtime``, whose report
lists every module imported.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: the libraries ``--help`` must not import (each costs 0.1–3 s of CPU on the 2-core machine)
HEAVY = frozenset({"pandas", "sklearn", "xgboost", "mlflow", "matplotlib", "optuna", "scipy",
                   "dask", "torch"})


def _experiments() -> list[str]:
    """Every experiment script with a ``__main__`` guard (a new one is checked without a line here)."""
    return sorted(f"experiments.{p.stem}" for p in (ROOT / "experiments").glob("*.py")
                  if 'if __name__ == "__main__":' in p.read_text())


#: every entry point, with the subcommands of those that have them
ENTRY_POINTS = [
    "features",
    "oracle", "oracle plan", "oracle run", "oracle audit", "oracle agents",
    "oracle.agents.model_server",
    "ripplecp_policy.advise", "ripplecp_policy.advise serve", "ripplecp_policy.advise check",
    "ripplecp_policy.advise status", "ripplecp_policy.advise install",
    "ripplecp_policy.advise uninstall",
    *_experiments(),
]


#: still heavy: their ``Args`` read the policy registries (learned policies' keys, online
#: baselines' names), which instantiate every policy (scikit-learn) on import; each must still
#: answer --help, and fails here once it is light (then drop it)
STILL_HEAVY = {"experiments.matched_budget", "experiments.train_policies", "experiments.power",
               "experiments.design_check"}


def _imported(argv: list[str]) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", *argv, "--help"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    modules = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
               if line.startswith("import time:") and "|" in line}
    return proc, modules


def test_the_experiments_are_found() -> None:
    assert "experiments.matched_budget" in ENTRY_POINTS and len(_experiments()) >= 10


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_help_imports_no_heavy_library(entry: str) -> None:
    proc, modules = _imported(entry.split())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("usage:"), proc.stdout[:500]
    heavy = sorted(m for m in modules if m.partition(".")[0] in HEAVY)
    roots = sorted({m.partition(".")[0] for m in heavy})
    if entry in STILL_HEAVY:
        assert heavy, f"python -m {entry} --help is light now: drop it from STILL_HEAVY"
        pytest.xfail(f"still imports {roots}: its Args reads a policy registry")
    assert not heavy, f"python -m {entry} --help imports {roots} (first: {heavy[:5]})"
