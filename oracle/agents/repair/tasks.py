"""Repair tasks: stdlib modules with detected injected bugs, grouped into "repositories".

A repository is a family of modules (text, numeric, encoding, utilities, cli), so
leave-one-repository-out holds out whole families. Tasks are deterministic in the seed:
the same seed samples the same mutants.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from oracle.agents.repair.mutants import Mutation, detected_mutants, run_suite, stdlib_source
from oracle.protocol import TaskSpec

#: module families used as repositories (suites that run in well under a second here)
FAMILIES: dict[str, tuple[str, ...]] = {
    "stdlib/text": ("textwrap", "shlex", "string", "pprint"),
    "stdlib/numeric": ("fractions", "colorsys", "heapq", "ipaddress"),
    "stdlib/encoding": ("base64", "quopri", "csv", "plistlib"),
    "stdlib/utilities": ("fnmatch", "glob", "graphlib", "copy"),
    "stdlib/cli": ("getopt", "optparse", "netrc", "configparser"),
    "stdlib/files": ("linecache", "filecmp", "fileinput", "contextlib"),
    "stdlib/formats": ("wave", "mimetypes", "gettext", "zipapp"),
    "stdlib/language": ("difflib", "reprlib", "codeop", "tabnanny"),
}

RUNNER = Path(__file__).with_name("runner.py")


def make_repair_tasks(
    n_tasks: int, seed: int, root: str | Path, *, n_repos: int = 4,
    families: dict[str, tuple[str, ...]] | None = None, two_bug_every: int = 0,
    params: dict | None = None,
) -> list[TaskSpec]:
    """Write ``n_tasks`` repair tasks spread over ``n_repos`` families under ``root``.

    Tasks are dealt round-robin over the repositories, and within one over its modules;
    each gets a mutant its module's tests detect. With ``two_bug_every = k`` (> 0) every
    k-th task (global index k-1, 2k-1, ...) carries two bugs in sequence instead: two
    detected mutants on different lines, together detected, each repair reducing the
    failures. ``root/<task>/mutation.json`` records the injected bugs (hidden from the
    agent, used only by tests and reports). ``params`` are added to every task's params
    (``passing_sample``, ``top_lines``, ``max_edits``: the agent's search sizes).
    """
    fams = dict(list((families or FAMILIES).items())[:n_repos])
    if len(fams) < n_repos:
        raise ValueError(f"only {len(fams)} repair families exist, asked for {n_repos}")
    root = Path(root)
    slots: list[tuple[str, str, int, int]] = []
    counters: dict[str, int] = {}
    repos = list(fams)
    for i in range(n_tasks):
        repo = repos[i % len(repos)]
        k = counters.get(repo, 0)
        counters[repo] = k + 1
        mods = fams[repo]
        bugs = 2 if two_bug_every > 0 and i % two_bug_every == two_bug_every - 1 else 1
        slots.append((repo, mods[k % len(mods)], k // len(mods), bugs))
    need: dict[str, int] = {}
    for _, mod, _j, bugs in slots:
        need[mod] = need.get(mod, 0) + (1 if bugs == 1 else 12)
    mutants = {
        mod: detected_mutants(mod, root / ".scratch" / mod, n, seed=seed + sum(map(ord, mod)))
        for mod, n in need.items()
    }
    used: dict[str, int] = {}
    tasks = []
    for repo, mod, j, bugs in slots:
        start = used.get(mod, 0)
        if bugs == 1:
            if start >= len(mutants[mod]):
                raise ValueError(f"{mod}: only {len(mutants[mod])} detected mutants found, need {start + 1}")
            chosen = [mutants[mod][start]]
            used[mod] = start + 1
            tid = f"{mod}-m{j}"
        else:
            chosen, nxt = _bug_pair(mod, mutants[mod], start, root / ".scratch" / f"{mod}-pair")
            used[mod] = nxt
            tid = f"{mod}-m{j}x2"
        tdir = root / tid
        tmpl = tdir / "template"
        tmpl.mkdir(parents=True, exist_ok=True)
        src = stdlib_source(mod).read_text()
        for m in sorted(chosen, key=lambda m: (m.line, m.col), reverse=True):
            src = m.apply(src)
        (tmpl / f"{mod}.py").write_text(src)
        (tdir / "mutation.json").write_text(json.dumps(
            chosen[0].to_dict() if bugs == 1 else [m.to_dict() for m in chosen]))
        extra = {"bugs": 2} if bugs == 2 else {}
        tasks.append(TaskSpec(
            task_id=tid, repo=repo, family="repair", workspace_template=tmpl,
            verifier=[sys.executable, str(RUNNER), "suite", ".", mod],
            params={"module": mod, **extra, **(params or {})},
        ))
    shutil.rmtree(root / ".scratch", ignore_errors=True)
    return tasks


def _bug_pair(mod: str, pool: list[Mutation], start: int, scratch: Path) -> tuple[list[Mutation], int]:
    """Two mutants from ``pool[start:]`` on different lines whose combination is detected
    and from which repairing either one leaves fewer failing tests; the next free index."""
    src = stdlib_source(mod).read_text()
    scratch.mkdir(parents=True, exist_ok=True)
    for a in range(start, len(pool)):
        for b in range(a + 1, len(pool)):
            m1, m2 = pool[a], pool[b]
            if abs(m1.line - m2.line) < 3:
                continue
            both = m2.apply(m1.apply(src)) if m2.line < m1.line else m1.apply(m2.apply(src))
            (scratch / f"{mod}.py").write_text(both)
            _, failed, code = run_suite(mod, scratch)
            if code <= 0 or not failed or failed[0].startswith("<"):
                continue
            singles = []
            for m in (m1, m2):
                (scratch / f"{mod}.py").write_text(m.apply(src))
                singles.append(run_suite(mod, scratch)[1])
            if all(0 < len(f) < len(failed) for f in singles):
                return [m1, m2], b + 1
    raise RuntimeError(f"{mod}: no pair of detected mutants makes a two-bug task (from {start})")
