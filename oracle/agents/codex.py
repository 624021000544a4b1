"""Codex CLI behind the command-line adapter (:class:`~oracle.agents.command_line.CommandLineAgent`).

``codex_agent()``: ``codex exec --json`` JSONL lines map to reports through the streaming
parser of :mod:`features.readers.codex_exec` (the same mapping as reading the file): a
completed ``command_execution``/``file_change``/``mcp_tool_call``/``web_search`` is an event
followed by a boundary (tool-call granularity); ``turn.completed`` is a ``model_call`` event
carrying the turn's token delta, with ``turn_end``. Resume restores
the session rollout file captured at the boundary into a private ``CODEX_HOME`` and runs
``codex exec --json resume <session_id> <prompt>``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from features.readers.codex_exec import CodexExecParser
from oracle.agents.command_line import CommandLineAgent
from oracle.agents.stream_reports import StreamReports
from oracle.protocol import RestorePoint

__all__ = ["CODEX_CONFIG", "CodexLineParser", "codex_agent", "codex_capture_state", "codex_update_state"]

class CodexLineParser(StreamReports):
    """``codex exec --json`` lines to reports, one line at a time (stateful per run): a thin
    adapter over :class:`~features.readers.codex_exec.CodexExecParser`, the one mapping.

    Every event the parser makes final becomes an event report; a safe boundary (a completed
    command, file change, MCP call or web search) is followed by a boundary report. Command
    events carry ``extra["source"] = "command"`` and ``extra["payload_digest"]`` (SHA-256 of
    the output) for the harness's replay check. ``usage_base``: the thread's token total
    before this run (a resumed thread reports its running total); see the parser.
    """

    def __init__(self, usage_base: Mapping[str, Any] | None = None) -> None:
        super().__init__(CodexExecParser(source="codex exec --json", usage_base=usage_base))

    @property
    def thread_id(self) -> str | None:
        """The thread id (the resume session id), once ``thread.started`` was seen."""
        return self._parser.thread_id


def codex_update_state(obj: dict, transcript: list[dict], facts: dict[str, Any]) -> None:
    """Codex preserved state: the stream joins the transcript; the thread id is a fact."""
    if obj.get("type") == "thread.started" and obj.get("thread_id"):
        facts["codex.session_id"] = obj["thread_id"]
    transcript.append(obj)


def codex_capture_state(run_dir: Path, facts: dict[str, Any]) -> None:
    """At a boundary, keep Codex's session rollout files (its own transcript) as facts."""
    sessions = run_dir / "codex_home" / "sessions"
    if sessions.is_dir():
        facts["codex.rollout"] = {
            str(p.relative_to(sessions)): p.read_text(errors="replace")
            for p in sorted(sessions.rglob("rollout-*.jsonl"))
        }


def _codex_prepare(base_home: Path | None) -> Callable[[Path, dict[str, str]], None]:
    def prepare(run_dir: Path, env: dict[str, str]) -> None:
        home = run_dir / "codex_home"
        home.mkdir(exist_ok=True)
        if base_home is not None:
            for name in ("auth.json", "config.toml"):
                src = base_home / name
                if src.is_file():
                    shutil.copy2(src, home / name)
        env["CODEX_HOME"] = str(home)
    return prepare


def _codex_restore(restore: RestorePoint, run_dir: Path) -> dict[str, str]:
    """Write the preserved rollout back under the run's CODEX_HOME/sessions/..."""
    sessions = run_dir / "codex_home" / "sessions"
    for rel, text in (restore.facts.get("codex.rollout") or {}).items():
        dest = (sessions / rel).resolve()
        if not str(dest).startswith(str(sessions.resolve()) + os.sep):
            raise ValueError(f"codex rollout path {rel!r} escapes CODEX_HOME/sessions")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
    sid = restore.facts.get("codex.session_id")
    if not sid:
        raise ValueError(f"restore point {restore.boundary}: no codex.session_id in preserved facts")
    return {"session_id": str(sid)}


CODEX_CONFIG: dict[str, Any] = {
    "start_argv": ["codex", "exec", "--json", "--skip-git-repo-check", "--sandbox",
                   "workspace-write", "--cd", "{workspace}", "{prompt}"],
    "resume_argv": ["codex", "exec", "--json", "--skip-git-repo-check", "--sandbox",
                    "workspace-write", "--cd", "{workspace}", "resume", "{session_id}",
                    "{resume_prompt}"],
}


def codex_agent(
    codex_bin: str = "codex",
    *,
    model: str | None = None,
    extra_args: Sequence[str] = (),
    base_codex_home: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> CommandLineAgent:
    """A ready :class:`CommandLineAgent` for Codex CLI (``codex exec --json``).

    Each run gets a private ``CODEX_HOME`` (auth/config copied from ``base_codex_home``,
    default ``$CODEX_HOME`` or ``~/.codex``) so session rollouts of parallel branches never
    mix. The task prompt comes from ``task.params["prompt"]`` (``resume_prompt`` for
    resumes) and is passed as one argv element.
    """
    opts = list(extra_args) + (["--model", model] if model else [])

    def build(t: list[str]) -> list[str]:
        i = t.index("--cd")
        return [codex_bin, *t[1:i], *opts, *t[i:]]

    if base_codex_home is None:
        base_codex_home = os.environ.get("CODEX_HOME") or Path.home() / ".codex"
    return CommandLineAgent(
        build(CODEX_CONFIG["start_argv"]), build(CODEX_CONFIG["resume_argv"]), CodexLineParser,
        env=env, restore_files=_codex_restore, name="codex", parser_is_factory=True,
        update_state=codex_update_state, capture_state=codex_capture_state,
        prepare_run=_codex_prepare(Path(base_codex_home)),
    )


if __name__ == "__main__":  # pragma: no cover - convenience: print the Codex argv templates
    json.dump(CODEX_CONFIG, sys.stdout, indent=2)
