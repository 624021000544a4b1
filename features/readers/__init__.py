"""Readers for real agent logs → the canonical :class:`~features.schema.Trajectory`.

``read_trajectory(path)`` detects the format from the file's content (not only its name)
and dispatches to one reader per format:

=================  ==========================================================
``codex-exec``     ``codex exec --json`` JSONL (:mod:`.codex_exec`)
``codex-rollout``  Codex session rollout JSONL (:mod:`.codex_rollout`)
``mini-swe-agent`` mini-SWE-agent ``.traj.json`` v1 and v1.1 (:mod:`.mini_swe_agent`)
``swe-agent``      SWE-agent ``.traj`` v1 and 0.x (:mod:`.swe_agent`)
``openhands``      OpenHands V0 event list (:mod:`.openhands`)
=================  ==========================================================

Bad input (empty, binary, non-JSON or torn lines, wrong field types, unknown format)
raises :class:`TrajectoryFormatError` naming the file and the line or field. Unknown
event types are kept as ``other`` events with an :class:`UnknownEventWarning`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from features.readers import codex_exec, codex_rollout, mini_swe_agent, openhands, swe_agent
from features.readers.common import (
    TrajectoryFormatError,
    UnknownEventWarning,
    parse_test_counts,
    read_text,
)
from features.schema import Trajectory
from features.shell import is_git_commit, is_test_command

FORMATS: tuple[str, ...] = (
    codex_exec.FORMAT,
    codex_rollout.FORMAT,
    mini_swe_agent.FORMAT,
    swe_agent.FORMAT,
    openhands.FORMAT,
)
_ALIASES = {
    "codex": codex_exec.FORMAT,
    "codex-exec-json": codex_exec.FORMAT,
    "rollout": codex_rollout.FORMAT,
    "mini-swe-agent-1": mini_swe_agent.FORMAT,
    "mini-swe-agent-1.1": mini_swe_agent.FORMAT,
    "sweagent": swe_agent.FORMAT,
}

__all__ = [
    "FORMATS",
    "TrajectoryFormatError",
    "UnknownEventWarning",
    "detect_format",
    "is_git_commit",
    "is_test_command",
    "parse_test_counts",
    "read_trajectory",
]


def detect_format(path: str | Path) -> str:
    """The format name of a log, decided from its content.

    A file that parses as one JSON document is matched on its shape (mini-SWE-agent's
    ``trajectory_format``/``messages``+``info``, SWE-agent's ``trajectory``, OpenHands'
    list of events with ``id`` and ``action``/``observation``); otherwise the first line
    of a JSONL stream decides (codex-exec ``type`` names, possibly arrival-wrapped;
    rollout ``timestamp``+``type``+``payload``). Anything else is a
    :class:`TrajectoryFormatError`.
    """
    path = Path(path)
    text = read_text(path)
    doc: Any = None
    werr: json.JSONDecodeError | None = None
    try:
        doc = json.loads(text)
        whole = True
    except json.JSONDecodeError as exc:
        whole, werr = False, exc
    if whole:
        if mini_swe_agent.looks_like(doc):
            return mini_swe_agent.FORMAT
        if swe_agent.looks_like(doc):
            return swe_agent.FORMAT
        if openhands.looks_like(doc):
            return openhands.FORMAT
        if isinstance(doc, dict):  # a one-line JSONL stream
            if codex_rollout.looks_like(doc):
                return codex_rollout.FORMAT
            if codex_exec.looks_like(doc):
                return codex_exec.FORMAT
        shape = type(doc).__name__ if not isinstance(doc, dict) else f"keys {sorted(doc)[:8]}"
        raise TrajectoryFormatError(
            f"{path}: unknown trajectory format (a JSON {shape}); known formats: "
            f"{', '.join(FORMATS)}"
        )
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            first = json.loads(line)
        except json.JSONDecodeError as exc:
            if werr is not None and werr.lineno > lineno:  # a multi-line JSON document
                raise TrajectoryFormatError(
                    f"{path}: line {werr.lineno} column {werr.colno}: invalid JSON "
                    f"({werr.msg})"
                ) from werr
            raise TrajectoryFormatError(
                f"{path}: line {lineno}: not valid JSON ({exc.msg}); cannot detect the format"
            ) from exc
        if isinstance(first, dict):
            if codex_rollout.looks_like(first):
                return codex_rollout.FORMAT
            if codex_exec.looks_like(first):
                return codex_exec.FORMAT
        raise TrajectoryFormatError(
            f"{path}: line {lineno}: unknown trajectory format (first record "
            f"{str(first)[:80]!r}); known formats: {', '.join(FORMATS)}"
        )
    raise TrajectoryFormatError(f"{path}: empty file")


def read_trajectory(
    path: str | Path,
    format: str | None = None,
    *,
    task_id: str | None = None,
    repo: str | None = None,
    arrival_times: Sequence[float] | None = None,
    allow_truncated_tail: bool = False,
) -> Trajectory:
    """Read one agent log into a :class:`Trajectory`.

    ``format`` is one of :data:`FORMATS` (or None to detect it from the content).
    ``task_id`` defaults to the log's own id (thread/session/instance id) else the file
    stem; ``repo`` to the repository named in the log, else ``"unknown"``.
    ``arrival_times`` (codex-exec only): one epoch-seconds float per non-blank line, the
    times the harness received each line; streams stamped as
    ``{"arrival": t, "line": {...}}`` carry them inline instead.
    ``allow_truncated_tail`` (JSONL formats): skip a torn last line (stream cut
    mid-write) with a warning instead of raising.
    """
    path = Path(path)
    if format is None:
        fmt = detect_format(path)
    else:
        fmt = _ALIASES.get(format, format)
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {format!r}; expected one of {', '.join(FORMATS)}")
    if arrival_times is not None and fmt != codex_exec.FORMAT:
        raise ValueError(
            f"arrival_times applies to the codex-exec format only ({path} is {fmt}, "
            "which records its own times)"
        )
    if fmt == codex_exec.FORMAT:
        return codex_exec.read_codex_exec(path, task_id=task_id, repo=repo,
                                          arrival_times=arrival_times,
                                          allow_truncated_tail=allow_truncated_tail)
    if fmt == codex_rollout.FORMAT:
        return codex_rollout.read_codex_rollout(path, task_id=task_id, repo=repo,
                                                allow_truncated_tail=allow_truncated_tail)
    if fmt == mini_swe_agent.FORMAT:
        return mini_swe_agent.read_mini_swe_agent(path, task_id=task_id, repo=repo)
    if fmt == swe_agent.FORMAT:
        return swe_agent.read_swe_agent(path, task_id=task_id, repo=repo)
    return openhands.read_openhands(path, task_id=task_id, repo=repo)
