"""Repair tasks: stdlib modules with detected injected bugs, grouped into "repositories".

A repository is a family of modules (text, numeric, encoding, utilities), so
leave-one-repository-out holds out whole families. Tasks are deterministic in the seed:
the same seed samples the same mutants.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from oracle.agents.protocol import TaskSpec
from oracle.agents.repair.mutants import Mutation, detected_mutants, stdlib_source

#: module families used as repositories (suites that run in well under a second here)
FAMILIES: dict[str, tuple[str, ...]] = {
    "stdlib/text": ("textwrap", "shlex", "string"),
    "stdlib/numeric": ("fractions", "colorsys", "heapq"),
    "stdlib/encoding": ("base64", "quopri", "csv"),
    "stdlib/utilities": ("fnmatch", "glob", "graphlib"),
}

RUNNER = Path(__file__).with_name("runner.py")


def make_repair_tasks(
    n_tasks: int, seed: int, root: str | Path, *, n_repos: int = 4,
    families: dict[str, tuple[str, ...]] | None = None,
) -> list[TaskSpec]:
    """Write ``n_tasks`` repair tasks spread over ``n_repos`` families under ``root``.

    Tasks are dealt round-robin over the repositories, and within one over its modules;
    each gets a mutant its module's tests detect. ``root/<task>/mutation.json`` records
    the injected bug (hidden from the agent, used only by tests and reports).
    """
    fams = dict(list((families or FAMILIES).items())[:n_repos])
    if len(fams) < n_repos:
        raise ValueError(f"only {len(fams)} repair families exist, asked for {n_repos}")
    root = Path(root)
    slots: list[tuple[str, str, int]] = []
    counters: dict[str, int] = {}
    repos = list(fams)
    for i in range(n_tasks):
        repo = repos[i % len(repos)]
        k = counters.get(repo, 0)
        counters[repo] = k + 1
        mods = fams[repo]
        slots.append((repo, mods[k % len(mods)], k // len(mods)))
    need: dict[str, int] = {}
    for _, mod, j in slots:
        need[mod] = max(need.get(mod, 0), j + 1)
    mutants = {
        mod: detected_mutants(mod, root / ".scratch" / mod, n, seed=seed + sum(map(ord, mod)))
        for mod, n in need.items()
    }
    tasks = []
    for repo, mod, j in slots:
        if j >= len(mutants[mod]):
            raise ValueError(f"{mod}: only {len(mutants[mod])} detected mutants found, need {j + 1}")
        m: Mutation = mutants[mod][j]
        tid = f"{mod}-m{j}"
        tdir = root / tid
        tmpl = tdir / "template"
        tmpl.mkdir(parents=True, exist_ok=True)
        src = stdlib_source(mod).read_text()
        (tmpl / f"{mod}.py").write_text(m.apply(src))
        (tdir / "mutation.json").write_text(json.dumps(m.to_dict()))
        tasks.append(TaskSpec(
            task_id=tid, repo=repo, family="repair", workspace_template=tmpl,
            verifier=[sys.executable, str(RUNNER), "suite", ".", mod],
            params={"module": mod},
        ))
    shutil.rmtree(root / ".scratch", ignore_errors=True)
    return tasks
