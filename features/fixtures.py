"""Where the shared public fixtures are: the one lookup of ``shared/fixtures`` that tests and
benchmarks use.

The public agent logs the project is tested on are never copied into it: they sit in a
``shared/fixtures`` folder beside the checkout or above it (a worktree of the checkout sits
one or more levels deeper), or where ``RIPPLECP_FIXTURES`` points. A caller that needs them
skips (tests) or says so (benchmarks) when the folder is absent, as in a user's clone.
Standard library only.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["fixtures_root", "trajectories"]

_CHECKOUT = Path(__file__).resolve().parents[1]


def fixtures_root(checkout: Path | None = None) -> Path:
    """``$RIPPLECP_FIXTURES``, else the first ``shared/fixtures`` folder in the checkout's
    parent or any folder above it, else where it would be beside the checkout (absent)."""
    env = os.environ.get("RIPPLECP_FIXTURES")
    if env:
        return Path(env)
    repo = (checkout or _CHECKOUT).resolve()
    for up in repo.parents:
        cand = up / "shared" / "fixtures"
        if cand.is_dir():
            return cand
    return repo.parent / "shared" / "fixtures"


def trajectories(checkout: Path | None = None) -> Path:
    """The public agent logs: ``<fixtures_root>/trajectories``."""
    return fixtures_root(checkout) / "trajectories"
