"""The repair agent's decision rules, shared by the standalone agent and the repair brain.

Standard library only: the standalone agent program imports this in its fast child, the repair
brain (:mod:`oracle.agents.model_server.repair`) in the harness. Both localise with the Ochiai score
over the same runs (every failing test, up to :data:`MAX_FAILING_RUNS`, then a seeded sample of
passing tests) and read a tool's JSON answer the same way.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence

__all__ = ["MAX_FAILING_RUNS", "json_tail", "localisation_runs", "ochiai_ranking"]

#: failing tests traced while localising (the rest add little and cost a run each)
MAX_FAILING_RUNS = 8


def json_tail(out: str) -> dict:
    """The last line of a tool's output that is a JSON object (``{}`` when none is)."""
    for line in reversed(out.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return {}


def localisation_runs(failing: Sequence[str], shuffled_passing: Sequence[str],
                      n_passing: int, n_failing: int = MAX_FAILING_RUNS) -> list[tuple[str, bool]]:
    """``(test id, expected to pass)`` of every run the localisation traces, in order."""
    return [(i, False) for i in failing[:n_failing]] + \
        [(i, True) for i in shuffled_passing[:n_passing]]


def ochiai_ranking(cover: Iterable[tuple[set[int], bool]], top: int) -> list[tuple[int, float]]:
    """The ``top`` lines by Ochiai score ``ef / sqrt(n_fail * (ef + ep))``, best first.

    ``cover``: per traced run, the lines it executed and whether it passed. Ties go to the
    lower line number; lines no failing run executed are not ranked.
    """
    runs = list(cover)
    n_fail = sum(1 for _, ok in runs if not ok)
    scores: dict[int, float] = {}
    for line in set().union(*(c for c, _ in runs)) if runs else set():
        ef = sum(1 for c, ok in runs if not ok and line in c)
        ep = sum(1 for c, ok in runs if ok and line in c)
        if ef:
            scores[line] = ef / math.sqrt(max(n_fail, 1) * (ef + ep))
    ranked = sorted(scores, key=lambda ln: (-scores[ln], ln))[:top]
    return [(ln, scores[ln]) for ln in ranked]
