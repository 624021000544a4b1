"""Fixtures for the experiments' command-line tests: run the real ``python -m experiments.…``
script, check its ``--help``, and check that a wrong argument gives one line and exit 2.

- ``run_command(module, *argv, cwd=..., timeout=...)``: the real script in a subprocess, with
  this checkout first on ``PYTHONPATH`` (whatever ``cwd``) and no ``RIPPLECP_MLRUNS``.
- ``check_help(module, args_cls)``: ``--help`` of the real script names ``python -m module``,
  lists every option of ``args_cls`` with its help, and exits 0.
- ``one_line_error(main, argv, needle)``: ``main(argv)`` in this process (what the script's
  ``sys.exit(main())`` runs) exits 2 with exactly one line on stderr, ``PROG: error: …``,
  holding ``needle``; returns the line. Subprocesses cost seconds of imports each, so each
  command runs a handful of wrong arguments for real and the rest this way.
- ``failed_in_one_line(proc, prog, needle)``: a real run (``run_command``) exited 2 with one
  stderr line ``PROG: error: …needle…``.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from features.schema import Event, Trajectory
from labelsets.tables import LabelSet
from ripplecp_cli import field_docs

REPO = Path(__file__).resolve().parents[2]


def _run_command(module: str, *argv: str, cwd: Path = REPO,
                 timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("RIPPLECP_MLRUNS", None)
    return subprocess.run([sys.executable, "-m", module, *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _squeeze(text: str) -> str:
    """Text without whitespace: argparse wraps help at spaces and after hyphens."""
    return re.sub(r"\s+", "", text)


def _check_help(module: str, args_cls: type) -> str:
    proc = _run_command(module, "--help", timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert out.startswith(f"usage: python -m {module} "), out[:200]
    flat = _squeeze(out)
    docs = field_docs(args_cls)
    for f in dataclasses.fields(args_cls):
        meta = f.metadata.get("ripplecp_cli") or {}
        name = f.name if meta.get("positional") else "--" + f.name.replace("_", "-")
        assert name in out, f"{name} missing from --help"
        assert docs.get(f.name), f"{args_cls.__qualname__}.{f.name} has no help"
        assert _squeeze(docs[f.name]) in flat, f"help of {name} missing from --help"
        if f.type in ("bool", bool) and f.default is True:
            assert f"--no-{f.name.replace('_', '-')}turnsitoff" in flat, name
    assert "--debug" in out
    return out


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> Callable[..., str]:
    def check(main: Callable[[Sequence[str]], Any], argv: Sequence[str], needle: str) -> str:
        capsys.readouterr()
        try:
            rc = main(list(argv))
        except SystemExit as exc:
            rc = exc.code
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if ": error: " in line]
        assert rc == 2, f"{argv}: exit {rc}, stderr {err[-2000:]}"
        assert len(lines) == 1 and "Traceback" not in err, err[-2000:]
        assert lines[0].startswith("python -m experiments."), lines[0]
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
        return lines[0]

    return check


@pytest.fixture(scope="session")
def run_command() -> Callable[..., subprocess.CompletedProcess[str]]:
    """The real ``python -m MODULE ARGV...`` in a subprocess (see the module docstring)."""
    return _run_command


@pytest.fixture(scope="session")
def check_help() -> Callable[[str, type], str]:
    """Check the real script's ``--help`` against its ``Args`` (see the module docstring)."""
    return _check_help


@pytest.fixture
def one_line_error(capsys: pytest.CaptureFixture[str]) -> Callable[..., str]:
    """Check one wrong argument in this process (see the module docstring)."""
    return _one_line_error(capsys)


def _failed_in_one_line(proc: subprocess.CompletedProcess[str], prog: str, needle: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(f"{prog}: error: "), proc.stderr
    assert needle in proc.stderr, proc.stderr


@pytest.fixture(scope="session")
def failed_in_one_line() -> Callable[..., None]:
    """``(proc, prog, needle)``: a finished real run exited 2 with one stderr line
    ``PROG: error: …needle…``."""
    return _failed_in_one_line


def seal_label_table(labels: pd.DataFrame, path: Path) -> Path:
    """A saved label set around a label table: tasks, three boundaries per task, the pairs'
    CP and SKIP branches and a nominal trajectory each, sealed by ``LabelSet.save``."""
    first = labels.drop_duplicates("task_id")
    tasks = pd.DataFrame(dict(task_id=first["task_id"], repo=first["repo"], family="synthetic",
                              verified=first["verified"], nominal_s=400.0, n_boundaries=3,
                              granularity="turn"))
    creation = labels.groupby(["task_id", "candidate"])["creation_s"].first()
    # a candidate's checkpoint is created once (in the nominal run): every label of it is
    # charged that one creation cost (the loader refuses labels that are not)
    labels = labels.assign(creation_s=[float(creation[(t, c)]) for t, c in
                                       zip(labels["task_id"], labels["candidate"], strict=True)])
    cps = pd.DataFrame([dict(task_id=t, boundary=b, event_index=b - 1, step=b,
                             nominal_t_s=100.0 * b, creation_s=float(creation.get((t, b), 4.0)),
                             size_bytes=1000 * b + i, restore_latency_s=0.5)
                        for i, t in enumerate(tasks["task_id"]) for b in (1, 2, 3)])
    rec = []
    for r in labels.itertuples():
        pair = f"{r.cell_id}:rep{r.repetition}"
        for k, (role, point, cost) in enumerate((("cp", r.candidate, r.j_cp - r.creation_s),
                                                 ("skip", r.fallback, r.j_skip))):
            rec.append(dict(task_id=r.task_id, restore_point=point, failure=r.failure,
                            repetition=r.repetition, branch_id=f"{pair}/{k}", pair_id=pair,
                            role=role, cost_s=cost, restore_latency_s=0.5, tokens=None,
                            tool_calls=None, verified=r.verified, capped=False, seed=r.pair_seed,
                            state_digest=None, obs_digest=None, quarantined=False,
                            quarantine_reason=None))
    trajs = {t: Trajectory(t, repo, "synthetic", [
        Event(i, "command", step=i + 1, safe_boundary=True, boundary_kind="tool_return",
              turn_end=True) for i in range(3)]) for t, repo in zip(tasks["task_id"], tasks["repo"],
                                                                     strict=True)}
    return LabelSet(tasks, cps, pd.DataFrame(rec), labels, trajs, {"source": "test"}).save(path)


@pytest.fixture
def seal_labels() -> Callable[[pd.DataFrame, Path], Path]:
    """:func:`seal_label_table`: a label table saved as a sealed label set (every reader
    verifies it)."""
    return seal_label_table
