"""Synthetic, schema-valid agent trajectories for tests and benchmarks.

:func:`generate_trajectory` draws a run that looks like a coding agent's log: turns made of
model calls, shell commands (reads, edits through redirections/heredocs/``sed -i``/``cp``/
``mv``/``rm``/``apply_patch``, some ``bash -lc`` wrapped, some uninterpretable inline
scripts), file-change events, test runs with pass/fail counts, messages and commits.
Deterministic: one seed (or one ``random.Random``) gives the same trajectory.
"""

from __future__ import annotations

import random
import shlex

from features.schema import BoundaryKind, Event, EventKind, Trajectory

__all__ = ["generate_trajectory"]

_WORDS = ["parse", "config", "token", "cache", "route", "model", "field", "query", "lexer", "node"]


def _files(n_files: int) -> list[str]:
    dirs = ["src", "src/core", "src/util", "lib", "tests"]
    out = []
    for k in range(n_files):
        d = dirs[k % len(dirs)]
        stem = f"test_mod{k}" if d == "tests" else f"mod{k}"
        out.append(f"{d}/{stem}.py")
    return out


def _command(rng: random.Random, files: list[str]) -> tuple[str, bool]:
    """A shell command string and whether it is a test/build-ish verifier run."""
    # a few hot files take most of the traffic (Pareto rank), the rest uniformly
    hot = min(rng.paretovariate(1.2), float(len(files)))
    f = files[int(hot) - 1] if rng.random() < 0.7 else rng.choice(files)
    g = rng.choice(files)
    w = rng.choice(_WORDS)
    d = f.rsplit("/", 1)[0]
    r = rng.random()
    if r < 0.16:
        cmd = f"sed -n '{rng.randint(1, 5) * 40 - 39},{rng.randint(1, 5) * 40}p' {f}"
    elif r < 0.26:
        cmd = f"cat {f}"
    elif r < 0.32:
        cmd = f"nl -ba {f} | sed -n '1,80p'"
    elif r < 0.40:
        cmd = f"grep -rn {w} {d}"
    elif r < 0.44:
        cmd = f"rg -n {w}"
    elif r < 0.47:
        cmd = f"ls {d}"
    elif r < 0.50:
        cmd = "git diff" if rng.random() < 0.5 else "git status --short"
    elif r < 0.58:
        cmd = f"sed -i 's/{w}/{w}_v2/g' {f}"
    elif r < 0.63:
        cmd = f"cat > {f} <<'EOF'\n# {w}\ndef {w}():\n    return {rng.randint(0, 9)}\nEOF"
    elif r < 0.66:
        cmd = f"echo '# {w}' >> {f}"
    elif r < 0.68:
        cmd = f"cp {f} {g}"
    elif r < 0.69:
        cmd = f"mv {f} {g}"
    elif r < 0.70:
        cmd = f"rm -f {f}"
    elif r < 0.72:
        cmd = f"git checkout -- {f}"
    elif r < 0.74:
        cmd = f"printf '%s\\n' {w} | tee {f}"
    elif r < 0.79:
        cmd = f"python - <<'PY'\nfrom pathlib import Path\nPath('{f}').write_text('{w}')\nPY"
    elif r < 0.81:
        cmd = f"cd {d} && ls"
    elif r < 0.83:
        cmd = "git add -A && git commit -qm wip"
    elif r < 0.86:
        cmd = "pip install -e ." if rng.random() < 0.5 else "make"
        return cmd, True
    else:
        t = rng.choice([x for x in files if x.startswith("tests/")] or files)
        cmd = f"python -m pytest -q {t}" if rng.random() < 0.5 else f"pytest -x {t}"
        return cmd, True
    return cmd, False


def generate_trajectory(
    n_events: int,
    seed: int = 0,
    *,
    n_files: int = 40,
    timestamps: bool = True,
    tokens: bool = True,
    turn_length: tuple[int, int] = (5, 60),
    task_id: str | None = None,
    repo: str = "synthetic/repo",
    rng: random.Random | None = None,
) -> Trajectory:
    """A deterministic synthetic trajectory of exactly ``n_events`` events.

    ``timestamps=False`` leaves every time field None (like a ``codex exec --json`` log);
    ``tokens=False`` leaves every token count None. ``rng`` overrides ``seed``.
    """
    if n_events < 0:
        raise ValueError(f"n_events must be >= 0, got {n_events}")
    if n_files < 1:
        raise ValueError(f"n_files must be >= 1, got {n_files}")
    rng = rng if rng is not None else random.Random(seed)
    files = _files(n_files)
    events: list[Event] = []
    step = 1
    left_in_turn = rng.randint(*turn_length)
    t = 1_000.0
    for i in range(n_events):
        r = rng.random()
        dur = round(min(rng.expovariate(1 / 4.0), 600.0), 3) if timestamps else None
        kw: dict = {}
        if r < 0.22:
            kind = EventKind.MODEL_CALL
            if tokens:
                inp = rng.randint(500, 20_000)
                kw.update(input_tokens=inp, cached_tokens=rng.randint(0, inp), output_tokens=rng.randint(10, 2_000))
            kw["text"] = "thinking"
        elif r < 0.80:
            cmd, verifier = _command(rng, files)
            wrapped = rng.random() < 0.5
            command = f"bash -lc {shlex.quote(cmd)}" if wrapped else cmd
            fail = rng.random() < (0.3 if verifier else 0.08)
            kind = EventKind.TEST if verifier and "pytest" in cmd else EventKind.COMMAND
            kw.update(command=command, exit_code=1 if fail else 0, is_error=fail)
            if kind == EventKind.TEST:
                passed = rng.randint(0, 40)
                kw.update(tests_passed=passed, tests_failed=rng.randint(1, 5) if fail else 0)
            if ">" in cmd or "sed -i" in cmd or "tee" in cmd:
                kw["bytes_written"] = rng.randint(20, 5_000)
        elif r < 0.90:
            kind = EventKind.FILE_CHANGE
            f = rng.choice(files)
            kw.update(paths_written=[f], bytes_written=rng.randint(20, 8_000))
            if rng.random() < 0.3:
                kw["argv"] = ["apply_patch", f"*** Begin Patch\n*** Update File: {f}\n@@\n-a\n+b\n*** End Patch"]
                kw["paths_written"] = []
        elif r < 0.96:
            kind = EventKind.MESSAGE
            kw["text"] = "update"
        else:
            kind = EventKind.OTHER
            kw["text"] = "web_search"
        safe = kind in (EventKind.COMMAND, EventKind.FILE_CHANGE, EventKind.TEST, EventKind.OTHER)
        if safe:
            bk = BoundaryKind.TEST if kind == EventKind.TEST else BoundaryKind.TOOL_RETURN
            if kind == EventKind.COMMAND and "git commit" in (kw.get("command") or ""):
                bk = BoundaryKind.COMMIT
            kw.update(safe_boundary=True, boundary_kind=bk)
        left_in_turn -= 1
        turn_end = left_in_turn <= 0 or i == n_events - 1
        if timestamps:
            kw.update(start=round(t, 3), end=round(t + dur, 3), duration=dur)
            t += dur + round(min(rng.expovariate(1.0), 60.0), 3)
        events.append(Event(index=i, kind=kind, step=step, turn_end=turn_end, **kw))
        if turn_end:
            step += 1
            left_in_turn = rng.randint(*turn_length)
    return Trajectory(task_id or f"synthetic-{seed}", repo, "synthetic", events, {"seed": seed})
