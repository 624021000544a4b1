"""Generic command-line agent adapter, plus a ready configuration for Codex CLI.

The agent is a program. ``start_argv`` and ``resume_argv`` are argv templates whose
arguments may contain placeholders ``{workspace}``, ``{task_id}``, ``{seed}``,
``{restore_dir}``, ``{run_dir}``, ``{task_file}``, ``{prompt}`` (plus any a
``restore_files`` hook returns, e.g. ``{session_id}``). They are substituted per
argument, never through a shell, so task text cannot inject commands.

The program's stdout is read live, line by line, by a reader thread; each line is
stamped with its arrival time from the run's clock. Every JSON line is handed to
``parse_line(obj, arrival) -> list[AgentReport]``. The adapter then:

* numbers events (``index`` = position in this run) and their logical ``step`` (a step
  ends after an event with ``turn_end``); an event without times gets ``end = arrival``;
* numbers boundaries itself: the k-th boundary a run reports is ``start_boundary + k``
  (0 for a start, the restore point for a resume), so parsers only say "a boundary
  passed"; a parser that states a number that disagrees raises an error;
* keeps the preserved agent state: ``update_state(obj, transcript, facts)`` (default:
  every line joins the transcript; ``{"type": "fact", "key", "value"}`` lines set a fact)
  and, at each boundary, ``capture_state(run_dir, facts)`` may add files the agent keeps
  outside the workspace (Codex: its session rollout). ``preserved()`` returns a copy as
  of the last boundary passed.

The process runs in its own session/process group (``start_new_session=True``), so
:meth:`CliRun.kill` is a real fail-stop: SIGKILL to the whole group.

Codex CLI (``codex_agent``): ``codex exec --json`` JSONL events map to reports with a
minimal per-line mapping written here (``features.readers.codex_exec`` reads whole files
only): a completed ``command_execution``/``file_change``/``mcp_tool_call``/``web_search``
is an event followed by a boundary (tool-call granularity); ``turn.completed`` is a
``model_call`` event carrying the turn's token delta, with ``turn_end``. Resume restores
the session rollout file captured at the boundary into a private ``CODEX_HOME`` and runs
``codex exec --json resume <session_id> <prompt>``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from features.readers.common import (
    apply_test_counts,
    classify_command,
    mark_tool_return,
)
from features.schema import Event, EventKind
from features.shell import split_command
from oracle.agent import AgentReport, Clock, RestorePoint, TaskSpec, register_agent

__all__ = [
    "CODEX_CONFIG",
    "CliRun",
    "CodexLineParser",
    "CommandLineAgent",
    "codex_agent",
    "default_update_state",
    "run_verifier",
    "substitute",
]

ParseLine = Callable[[dict, float], list[AgentReport]]
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def substitute(template: Sequence[str], values: Mapping[str, str]) -> list[str]:
    """Replace ``{name}`` in each argument by ``values[name]``; unknown names stay as typed.

    Pure string substitution per argument: no shell, no splitting, no re-evaluation of
    the substituted text (a value containing ``{x}`` is not expanded again).
    """
    out = []
    for arg in template:
        if not isinstance(arg, str):
            raise TypeError(f"argv template element {arg!r} is not a string")
        out.append(_PLACEHOLDER.sub(lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(0), arg))
    return out


def default_update_state(obj: dict, transcript: list[dict], facts: dict[str, Any]) -> None:
    """Default preserved-state rule: every line joins the transcript; fact lines set facts."""
    if obj.get("type") == "fact" and "key" in obj:
        facts[str(obj["key"])] = obj.get("value")
    else:
        transcript.append(obj)


def run_verifier(argv: Sequence[str], workspace: Path, timeout: float = 600.0) -> bool:
    """Run a task verifier in the workspace; exit status 0 means verified."""
    try:
        proc = subprocess.run(
            list(argv), cwd=workspace, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, timeout=timeout, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


class CliRun:
    """A running agent program (see module docstring for the numbering rules)."""

    def __init__(
        self,
        argv: list[str],
        *,
        cwd: Path,
        env: dict[str, str] | None,
        clock: Clock,
        parse_line: ParseLine,
        run_dir: Path,
        start_boundary: int = 0,
        start_step: int = 1,
        transcript: list[dict] | None = None,
        facts: dict[str, Any] | None = None,
        update_state: Callable[[dict, list[dict], dict[str, Any]], None] = default_update_state,
        capture_state: Callable[[Path, dict[str, Any]], None] | None = None,
    ) -> None:
        self.argv = argv
        self.clock = clock
        self.run_dir = run_dir
        self._parse = parse_line
        self._update_state = update_state
        self._capture = capture_state
        self.start_boundary = start_boundary
        self.boundary = start_boundary
        self.step = start_step
        self._index = 0
        self._transcript: list[dict] = list(transcript or [])
        self._facts: dict[str, Any] = dict(facts or {})
        self._preserved = (copy.deepcopy(self._transcript), copy.deepcopy(self._facts))
        self.usage: dict = {"tokens": 0, "tool_calls": 0, "lines": 0, "non_json_lines": 0}
        self.killed = False
        self.started_at = clock.now()
        self._stderr = open(run_dir / "stderr.log", "wb")  # noqa: SIM115 - closed in wait()
        try:
            self.proc = subprocess.Popen(
                argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=self._stderr, start_new_session=True,
            )
        except OSError as exc:
            self._stderr.close()
            raise RuntimeError(f"cannot start agent program {argv[0]!r}: {exc}") from exc
        self.pid = self.proc.pid
        self._lines: queue.Queue[tuple[float, bytes] | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name=f"cli-reader-{self.pid}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        try:
            for raw in iter(self.proc.stdout.readline, b""):
                self._lines.put((self.clock.now(), raw))
        finally:
            self._lines.put(None)

    def reports(self) -> Iterator[AgentReport]:
        """Yield reports as lines arrive; ends at the program's EOF (exit or kill)."""
        while True:
            item = self._lines.get()
            if item is None:
                return
            arrival, raw = item
            text = raw.decode("utf-8", errors="replace").strip()
            if not text:
                continue
            self.usage["lines"] += 1
            try:
                obj = json.loads(text)
            except json.JSONDecodeError:
                obj = None
            if not isinstance(obj, dict):
                self._skip_line(text)
                continue
            self._update_state(obj, self._transcript, self._facts)
            for rep in self._parse(obj, arrival):
                yield from self._finish(rep, arrival)

    def _skip_line(self, text: str) -> None:
        """Count a stdout line that is not a JSON object; warn on the first, naming it."""
        self.usage["non_json_lines"] += 1
        if self.usage["non_json_lines"] == 1:
            warnings.warn(
                f"agent {self.argv[0]!r} (run dir {self.run_dir}): stdout line "
                f"{self.usage['lines']} is not a JSON object, ignored: {text[:120]!r} "
                "(later ones are only counted in usage['non_json_lines'])",
                stacklevel=3,
            )

    def _finish(self, rep: AgentReport, arrival: float) -> Iterator[AgentReport]:
        if rep.kind == "event":
            ev = rep.event
            assert ev is not None
            ev.index = self._index
            self._index += 1
            ev.step = self.step
            if ev.start is None and ev.end is None:
                ev.end = arrival
            ev.extra.setdefault("arrival", arrival)
            self.usage["tokens"] += (ev.input_tokens or 0) + (ev.output_tokens or 0)
            if ev.kind in (EventKind.COMMAND, EventKind.TEST, EventKind.FILE_CHANGE) or (
                ev.safe_boundary and ev.kind != EventKind.MODEL_CALL
            ):
                self.usage["tool_calls"] += 1
            if ev.turn_end:
                self.step += 1
            yield rep
        elif rep.kind == "boundary":
            self.boundary += 1
            if rep.boundary is not None and rep.boundary != self.boundary:
                raise RuntimeError(
                    f"agent {self.argv[0]!r} reported boundary {rep.boundary} but the adapter "
                    f"counts {self.boundary} (start boundary {self.start_boundary})"
                )
            self._facts["cli.step"] = self.step
            if self._capture is not None:
                self._capture(self.run_dir, self._facts)
            self._preserved = (copy.deepcopy(self._transcript), copy.deepcopy(self._facts))
            yield AgentReport("boundary", boundary=self.boundary)
        else:
            yield rep

    def preserved(self) -> tuple[list[dict], dict[str, Any]]:
        """Transcript and facts as of the last boundary passed (the restore point's state)."""
        return copy.deepcopy(self._preserved[0]), copy.deepcopy(self._preserved[1])

    def kill(self) -> None:
        """Fail-stop: SIGKILL the agent's whole process group, then reap it."""
        self.killed = True
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()

    def pause(self) -> None:
        """Stop the whole process group (SIGSTOP) while the harness checkpoints the workspace."""
        try:
            os.killpg(self.pid, signal.SIGSTOP)
        except (ProcessLookupError, PermissionError):
            pass

    def cont(self) -> None:
        """Continue a paused process group (SIGCONT)."""
        try:
            os.killpg(self.pid, signal.SIGCONT)
        except (ProcessLookupError, PermissionError):
            pass

    def wait(self) -> int:
        """Exit status (negative signal number after a kill); closes pipes."""
        rc = self.proc.wait()
        self._reader.join(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        if not self._stderr.closed:
            self._stderr.close()
        return rc

    def stderr_text(self, limit: int = 4000) -> str:
        """The last ``limit`` characters of the program's stderr (for error messages)."""
        p = self.run_dir / "stderr.log"
        return p.read_text(errors="replace")[-limit:] if p.exists() else ""


class CommandLineAgent:
    """An agent that is a program; see the module docstring for templates and parsing."""

    def __init__(
        self,
        start_argv: list[str],
        resume_argv: list[str],
        parse_line: ParseLine | Callable[[], ParseLine],
        env: Mapping[str, str] | None = None,
        cwd_is_workspace: bool = True,
        restore_files: Callable[[RestorePoint, Path], Mapping[str, str]] | None = None,
        *,
        name: str = "cli",
        parser_is_factory: bool = False,
        update_state: Callable[[dict, list[dict], dict[str, Any]], None] = default_update_state,
        capture_state: Callable[[Path, dict[str, Any]], None] | None = None,
        prepare_run: Callable[[Path, dict[str, str]], None] | None = None,
        verify_default: Callable[[TaskSpec, Path], bool] | None = None,
    ) -> None:
        if not start_argv or not resume_argv:
            raise ValueError("CommandLineAgent: start_argv and resume_argv must be non-empty")
        self.name = name
        self.start_argv = list(start_argv)
        self.resume_argv = list(resume_argv)
        self._parse_line = parse_line
        self._parser_is_factory = parser_is_factory
        self.env = dict(env) if env is not None else None
        self.cwd_is_workspace = cwd_is_workspace
        self.restore_files = restore_files
        self.update_state = update_state
        self.capture_state = capture_state
        self.prepare_run = prepare_run
        self.verify_default = verify_default

    # -- helpers ---------------------------------------------------------------------
    def _parser(self) -> ParseLine:
        return self._parse_line() if self._parser_is_factory else self._parse_line  # type: ignore[call-arg,return-value]

    def _run_dir(self, workspace: Path) -> Path:
        base = workspace.parent / f".{workspace.name}.agent"
        n = 0
        while (base / f"run{n}").exists():
            n += 1
        d = base / f"run{n}"
        d.mkdir(parents=True)
        return d

    def _values(self, task: TaskSpec, workspace: Path, seed: int, run_dir: Path) -> dict[str, str]:
        task_file = run_dir / "task.json"
        task_file.write_text(json.dumps(
            {"task_id": task.task_id, "repo": task.repo, "family": task.family,
             "params": task.params}, default=str))
        return {
            "workspace": str(workspace), "task_id": task.task_id, "seed": str(int(seed)),
            "run_dir": str(run_dir), "restore_dir": str(run_dir / "restore"),
            "task_file": str(task_file), "prompt": str(task.params.get("prompt", "")),
            "resume_prompt": str(task.params.get("resume_prompt", task.params.get("prompt", ""))),
        }

    def _env(self, values: dict[str, str], extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        if self.env is not None:
            env.update({k: substitute([v], values)[0] for k, v in self.env.items()})
        if extra:
            env.update(extra)
        return env

    def _launch(self, argv_t: list[str], values: dict[str, str], workspace: Path, clock: Clock,
                run_dir: Path, start_boundary: int, start_step: int,
                transcript: list[dict] | None, facts: dict[str, Any] | None) -> CliRun:
        env = self._env(values)
        if self.prepare_run is not None:
            self.prepare_run(run_dir, env)
        return CliRun(
            substitute(argv_t, values), cwd=workspace if self.cwd_is_workspace else run_dir,
            env=env, clock=clock, parse_line=self._parser(), run_dir=run_dir,
            start_boundary=start_boundary, start_step=start_step, transcript=transcript,
            facts=facts, update_state=self.update_state, capture_state=self.capture_state,
        )

    # -- protocol --------------------------------------------------------------------
    def start(self, task: TaskSpec, workspace: Path, seed: int, clock: Clock) -> CliRun:
        """Start the program on a pristine workspace."""
        run_dir = self._run_dir(workspace)
        values = self._values(task, workspace, seed, run_dir)
        return self._launch(self.start_argv, values, workspace, clock, run_dir, 0, 1, [], {})

    def resume(self, task: TaskSpec, restore: RestorePoint, workspace: Path, seed: int,
               clock: Clock) -> CliRun:
        """Resume from a restore point: preserved state goes to ``{restore_dir}`` (or the hook)."""
        run_dir = self._run_dir(workspace)
        values = self._values(task, workspace, seed, run_dir)
        rdir = Path(values["restore_dir"])
        rdir.mkdir()
        (rdir / "transcript.json").write_text(json.dumps(restore.transcript, default=str))
        (rdir / "facts.json").write_text(json.dumps(restore.facts, default=str))
        (rdir / "boundary").write_text(str(restore.boundary))
        values["boundary"] = str(restore.boundary)
        if self.restore_files is not None:
            values.update({k: str(v) for k, v in self.restore_files(restore, run_dir).items()})
        step = int(restore.facts.get("cli.step", 1)) if isinstance(restore.facts, dict) else 1
        return self._launch(self.resume_argv, values, workspace, clock, run_dir, restore.boundary,
                            step, restore.transcript, restore.facts)

    def verify(self, task: TaskSpec, workspace: Path) -> bool:
        """The task's verifier argv (exit 0), else ``verify_default``, else False."""
        if task.verifier:
            return run_verifier(task.verifier, workspace)
        if self.verify_default is not None:
            return self.verify_default(task, workspace)
        return False


# ---------------------------------------------------------------------------------------
# Codex CLI
# ---------------------------------------------------------------------------------------

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


register_agent("codex", codex_agent)
register_agent("cli", CommandLineAgent)

if __name__ == "__main__":  # pragma: no cover - convenience: print the Codex argv templates
    json.dump(CODEX_CONFIG, sys.stdout, indent=2)
