"""Codex CLI behind the command-line adapter (:class:`~oracle.agents.command_line.CommandLineAgent`).

``codex_agent()``: ``codex exec --json`` JSONL events map to reports with a
minimal per-line mapping written here (``features.readers.codex_exec`` reads whole files
only): a completed ``command_execution``/``file_change``/``mcp_tool_call``/``web_search``
is an event followed by a boundary (tool-call granularity); ``turn.completed`` is a
``model_call`` event carrying the turn's token delta, with ``turn_end``. Resume restores
the session rollout file captured at the boundary into a private ``CODEX_HOME`` and runs
``codex exec --json resume <session_id> <prompt>``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from features.readers.common import (
    apply_test_counts,
    classify_command,
    mark_tool_return,
)
from features.schema import Event, EventKind
from features.shell import split_command
from oracle.agents.command_line import CommandLineAgent
from oracle.agents.protocol import AgentReport, RestorePoint

__all__ = ["CODEX_CONFIG", "CodexLineParser", "codex_agent", "codex_capture_state", "codex_update_state"]

_TOOL_ITEMS = {"command_execution", "file_change", "mcp_tool_call", "web_search", "collab_tool_call"}
_USAGE_KEYS = ("input_tokens", "cached_input_tokens", "output_tokens")


class CodexLineParser:
    """Map ``codex exec --json`` lines to reports, one line at a time (stateful per run).

    Items become one event at ``item.completed`` (``start`` = arrival of the item's first
    line when it had an ``item.started``); tool items are safe boundaries followed by a
    boundary report; ``turn.completed`` → a ``model_call`` event with the token delta of
    the running total and ``turn_end``; ``error``/``turn.failed`` → ``other`` with
    ``is_error``. The thread id is kept as ``self.thread_id`` (the resume session id).
    """

    def __init__(self) -> None:
        self.started: dict[str, float] = {}
        self.prev_total = dict.fromkeys(_USAGE_KEYS, 0)
        self.thread_id: str | None = None

    def __call__(self, obj: dict, arrival: float) -> list[AgentReport]:
        t = obj.get("type")
        if t == "thread.started":
            self.thread_id = obj.get("thread_id")
            return []
        if t in ("turn.started", "item.plan.delta"):
            return []
        if t == "turn.completed":
            usage = obj.get("usage") or {}
            total = {k: int(usage.get(k, 0) or 0) for k in _USAGE_KEYS}
            delta = {k: max(0, total[k] - self.prev_total[k]) for k in _USAGE_KEYS}
            self.prev_total = total
            ev = Event(index=0, kind=EventKind.MODEL_CALL, end=arrival, turn_end=True,
                       input_tokens=delta["input_tokens"], cached_tokens=delta["cached_input_tokens"],
                       output_tokens=delta["output_tokens"],
                       extra={"event_type": t, "usage_total": usage})
            return [AgentReport("event", event=ev)]
        if t in ("error", "turn.failed"):
            err = obj.get("message") if t == "error" else obj.get("error")
            msg = err.get("message") if isinstance(err, dict) else err
            ev = Event(index=0, kind=EventKind.OTHER, end=arrival, is_error=True,
                       text=None if msg is None else str(msg), extra={"event_type": t})
            return [AgentReport("event", event=ev)]
        if t in ("item.started", "item.updated", "item.completed"):
            item = obj.get("item") or {}
            iid = str(item.get("id"))
            if t != "item.completed":
                self.started.setdefault(iid, arrival)
                return []
            itype = item.get("type", item.get("item_type"))
            ev = self._item_event(str(itype), item)
            ev.start = self.started.pop(iid, None)
            ev.end = arrival
            out = [AgentReport("event", event=ev)]
            if itype in _TOOL_ITEMS and not ev.is_error:
                mark_tool_return(ev)
                out.append(AgentReport("boundary", boundary=None))
            return out
        ev = Event(index=0, kind=EventKind.OTHER, end=arrival, extra={"event_type": str(t)})
        return [AgentReport("event", event=ev)]

    @staticmethod
    def _item_event(itype: str, item: dict) -> Event:
        extra = {"item_type": itype, "item_id": item.get("id")}
        if itype == "command_execution":
            cmd = item.get("command")
            argv = split_command(cmd) if isinstance(cmd, str) else None
            out = item.get("aggregated_output")
            ev = Event(index=0, kind=classify_command(cmd, argv), command=cmd, argv=argv,
                       exit_code=item.get("exit_code"), is_error=item.get("status") == "declined",
                       extra={**extra, "output": out, "status": item.get("status"),
                              "source": "command",
                              "payload_digest": hashlib.sha256(str(out).encode()).hexdigest()})
            apply_test_counts(ev, out)
            return ev
        if itype == "file_change":
            changes = item.get("changes") or []
            failed = item.get("status") in ("failed", "declined")
            paths = [str(c.get("path")) for c in changes if isinstance(c, dict)]
            return Event(index=0, kind=EventKind.FILE_CHANGE, is_error=failed,
                         paths_written=[] if failed else paths,
                         extra={**extra, "changes": changes, "status": item.get("status")})
        if itype in ("agent_message", "assistant_message", "reasoning"):
            return Event(index=0, kind=EventKind.MESSAGE, text=item.get("text"), extra=extra)
        if itype == "error":
            return Event(index=0, kind=EventKind.OTHER, is_error=True, text=item.get("message"),
                         extra=extra)
        is_err = bool(item.get("error")) or item.get("status") == "failed"
        payload = {k: v for k, v in item.items() if k not in ("id", "type", "item_type")}
        return Event(index=0, kind=EventKind.OTHER, is_error=is_err, extra={**extra, **payload})


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
