"""benchmarks/verdict_size.py: the size and coverage check of the verdicts' test, run small."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "verdict_size.py"


def _bench():
    if "verdict_size" not in sys.modules:  # dataclasses look their module up by name
        spec = importlib.util.spec_from_file_location("verdict_size", SCRIPT)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["verdict_size"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["verdict_size"]


def test_world_studies_cover_and_hold_their_size():
    """A synthetic world: the truth is covered about 95 % of the time; its zero-shift keeps
    the tasks where the policies agree at exactly 0, and a world of zeros is degenerate."""
    vs = _bench()
    rng = np.random.default_rng(0)
    repo = np.repeat([f"r{i}" for i in range(8)], 24)
    diff = np.where(rng.random(repo.size) < 0.4, 0.0, -20 + rng.normal(0, 5, 8).repeat(24)
                    + rng.normal(0, 10, repo.size))
    ref = 100 + rng.exponential(20, repo.size)
    w = pd.DataFrame(dict(repo=repo, diff=diff, ref_cost=ref, cost=np.maximum(ref + diff, 0.0)))
    args = vs.Args(world_studies=300)
    r = vs.world_studies(w, args, seed=1)
    assert r["truth"] == pytest.approx(np.mean([g.mean() for _, g in w.groupby("repo")["diff"]]))
    assert 0.9 <= r["coverage"] <= 0.99 and r["false_yes"] <= 0.06 and r["degenerate"] == 0
    assert r["share_zero"] == pytest.approx(np.mean(diff == 0))
    zeros = vs.world_studies(w.assign(diff=0.0), vs.Args(world_studies=20), seed=1)
    assert zeros["degenerate"] == 1.0 and zeros["coverage"] == 1.0 and zeros["false_yes"] == 0.0


def test_a_nearly_degenerate_world_is_covered():
    """2 % of tasks differ (by -30 s), the rest are exactly 0: about half the studies draw
    only zeros. Their interval was the point 0, which missed the truth (-0.6 s): coverage
    ~0.5. Bounded by the unseen share of the repositories times the larger cost, they cover."""
    vs = _bench()
    rng = np.random.default_rng(3)
    repo = np.repeat([f"r{i}" for i in range(8)], 50)
    diff = np.where(rng.random(repo.size) < 0.02, -30.0, 0.0)
    ref = 100 + rng.exponential(20, repo.size)
    w = pd.DataFrame(dict(repo=repo, diff=diff, ref_cost=ref, cost=ref + diff))
    r = vs.world_studies(w, vs.Args(world_studies=300), seed=2)
    assert r["truth"] < 0 and r["degenerate"] > 0.3
    assert r["coverage"] >= 0.93 and r["false_yes"] <= 0.05


def test_quick_run_of_the_real_script(tmp_path: Path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--aa-studies", "2", "--world-studies",
                           "30", "--jobs", "1", "--out", str(tmp_path)], cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "1. a policy against an identical copy of itself: 2 studies" in out
    assert "2. bootstrap worlds: 30 studies per (family, kind, budget)" in out and "overall:" in out
    aa = pd.read_csv(tmp_path / "aa.csv")
    world = pd.read_csv(tmp_path / "world.csv")
    assert len(aa) == 2 and set(aa["family"]) == {"long-horizon"}
    assert set(world["kind"]) >= {"no-checkpoint - first-boundary", "optimum - first-boundary"}
    assert world["coverage"].between(0, 1).all() and world["false_yes"].between(0, 1).all()


def test_wrong_arguments_are_one_line_errors():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--families", "long-horizn"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "did you mean 'long-horizon'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
