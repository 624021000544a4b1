"""The generic command-line agent adapter: any agent that is a program.

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

The process runs in its own session under the harness's fail-stop
(:func:`oracle.processes.popen`: its own PID namespace, and it dies with the process that
started it), so :meth:`CliRun.kill` is a real fail-stop: SIGKILL to the program and to every
process it started, tools in sessions of their own included.

Ready configurations of real runtimes build on this adapter, one module each beside it
(:mod:`oracle.agents.codex` for Codex CLI).
"""

from __future__ import annotations

import copy
import json
import os
import queue
import re
import signal
import subprocess
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from features.schema import EventKind
from oracle.processes import kill_tree, popen
from oracle.protocol import AgentReport, Clock, RestorePoint, TaskSpec

__all__ = [
    "CliRun",
    "CommandLineAgent",
    "default_update_state",
    "run_dir_for",
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


def run_dir_for(workspace: Path) -> Path:
    """A new directory for one run's own files, beside (never inside) the workspace:
    ``.<workspace>.agent/run<N>``."""
    base = workspace.parent / f".{workspace.name}.agent"
    n = 0
    while (base / f"run{n}").exists():
        n += 1
    d = base / f"run{n}"
    d.mkdir(parents=True)
    return d


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
        self._queue: queue.Queue[tuple[float, bytes | AgentReport] | None] = queue.Queue()
        self._stderr = open(run_dir / "stderr.log", "wb")  # noqa: SIM115 - closed in wait()
        try:
            self.proc = popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                              stderr=self._stderr)
        except OSError as exc:
            self._stderr.close()
            raise RuntimeError(f"cannot start agent program {argv[0]!r}: {exc}") from exc
        self.pid = self.proc.pid
        self._reader = threading.Thread(target=self._read, name=f"cli-reader-{self.pid}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        try:
            for raw in iter(self.proc.stdout.readline, b""):
                self._queue.put((self.clock.now(), raw))
        finally:
            self._queue.put(None)

    def inject(self, report: AgentReport) -> None:
        """Queue a report from another source (e.g. a model server thread) among the lines."""
        self._queue.put((self.clock.now(), report))

    def reports(self) -> Iterator[AgentReport]:
        """Yield reports as lines arrive; ends at the program's EOF (exit or kill)."""
        while True:
            item = self._queue.get()
            if item is None:
                return
            arrival, raw = item
            if isinstance(raw, AgentReport):
                yield raw
                self._after_injected(raw)
                continue
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
            yield from self._line_reports(obj, arrival)

    def _line_reports(self, obj: dict, arrival: float) -> Iterator[AgentReport]:
        """The reports of one JSON line (state update, parser, numbering)."""
        self._update_state(obj, self._transcript, self._facts)
        for rep in self._parse(obj, arrival):
            yield from self._finish(rep, arrival)

    def _after_injected(self, report: AgentReport) -> None:
        """Called once the harness has taken an injected report (a hook; nothing here)."""

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
        """Fail-stop: SIGKILL the agent and every process it started, then reap it."""
        self.killed = True
        kill_tree(self.proc)

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
        return run_dir_for(workspace)

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
