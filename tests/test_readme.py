"""The front door stays a front door: the README is short, its links resolve, and every
command it shows runs as written (the quick ones run whole, the long ones answer --help)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = [README, ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").glob("*.md")),
        ROOT / "benchmarks" / "README.md"]


def _commands(text: str) -> list[str]:
    """The indented command lines of a markdown text (4-space code lines starting ``python``)."""
    return [ln.strip() for ln in text.splitlines()
            if ln.startswith("    python ") and not ln.startswith("    python3 -m venv")]


def test_readme_is_short() -> None:
    assert len(README.read_text().splitlines()) <= 200


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path) -> None:
    missing = []
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", doc.read_text()):
        if not (doc.parent / target).exists():
            missing.append(target)
    assert not missing, f"{doc.name}: links to missing files {missing}"


def _modules() -> list[str]:
    mods = []
    for cmd in _commands(README.read_text()):
        argv = shlex.split(cmd.split("#")[0])
        if argv[:2] == ["python", "-m"] and argv[2] not in mods:
            mods.append(argv[2])
    return mods


@pytest.mark.parametrize("module", _modules())
def test_every_readme_entry_point_answers_help(module: str) -> None:
    p = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "usage" in p.stdout.lower()


def test_the_readme_harness_commands_run_as_written(tmp_path: Path) -> None:
    """plan → run → audit, exactly as the README shows them, in an empty folder."""
    cmds = [c for c in _commands(README.read_text()) if c.startswith("python -m oracle ")]
    assert [shlex.split(c)[3] for c in cmds] == ["plan", "run", "audit"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for cmd in cmds:
        argv = [sys.executable, *shlex.split(cmd.split("#")[0])[1:]]
        p = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env,
                           timeout=600)
        assert p.returncode == 0, f"{cmd}: {p.stderr[-2000:]}"
    assert (tmp_path / "plan.study").is_dir()
