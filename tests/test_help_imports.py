"""Every ``python -m …`` entry point answers ``--help`` without importing the heavy libraries.

A structural check, not a timed one (the time itself is measured by
``benchmarks/bench_help.py``): ``--help`` builds the argument parser from the ``Args``
dataclass, so the entry point and what it imports to build that parser must leave pandas,
scikit-learn, xgboost, MLflow, Matplotlib, Optuna, SciPy, Dask and torch to the functions that
use them. Each entry point runs in a fresh interpreter under ``-X importtime``, whose report
lists every module imported.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: the libraries ``--help`` must not import (each costs 0.1–3 s of CPU on the 2-core machine)
HEAVY = frozenset({"pandas", "sklearn", "xgboost", "mlflow", "matplotlib", "optuna", "scipy",
                   "dask", "torch"})


def _bench_help() -> Any:
    """``benchmarks/bench_help.py``, which owns the list of entry points (it times them)."""
    spec = importlib.util.spec_from_file_location("bench_help", ROOT / "benchmarks" / "bench_help.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: every entry point: the commands, their subcommands and every experiment script
ENTRY_POINTS = _bench_help().entry_points()

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


def test_every_experiment_is_checked() -> None:
    """A new experiment script is checked without a line here."""
    scripts = [p.stem for p in (ROOT / "experiments").glob("*.py")
               if 'if __name__ == "__main__":' in p.read_text()]
    assert len(scripts) >= 10
    assert {f"experiments.{s}" for s in scripts} <= set(ENTRY_POINTS)


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
