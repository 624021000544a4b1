"""Real agent runtimes under the harness: Codex CLI, Claude Code and mini-swe-agent driven by a
brain, offline.

:class:`RuntimeAgent` runs a pinned runtime (:mod:`oracle.agents.runtimes`: installed into
``.runtimes/``, a private home per run with every network feature off) against a loopback
model server (:mod:`oracle.agents.model_server`) started in this process for the run, whose brain
(``repair``; ``depres``, ``cbuild``, ``migrate``, ``bisect``; ``scripted`` or ``proxy``) decides every
model answer. Per run:

* **Start**: a fresh private home, the task's prompt (``task.params["prompt"]``).
* **Resume** from a restore point: the session file captured at that boundary (Codex's
  rollout, Claude Code's session file, mini-swe-agent's trajectory — preserved agent state,
  part of the checkpoint, in the facts under ``runtime.session``) is put into a fresh private
  home and the runtime *forks* it — ``codex exec fork <thread>`` / ``claude --resume <id>
  --fork-session`` / mini-swe-agent's resume entry point (:mod:`oracle.agents.mini_resume`, which
  writes a new trajectory) — so every branch continues the captured conversation under its
  own thread/session id and the captured one is never appended to. Restore point 0 (no
  session) starts afresh.
* **Reports**: the runtime's live stdout (``codex exec --json`` / Claude's ``stream-json``)
  is read line by line (:class:`~oracle.agents.command_line.CliRun`) and mapped to events
  and boundaries by the runtime's streaming parser (every tool that returned is a boundary:
  tool-call granularity); tokens come from the same lines. mini-swe-agent prints no such
  stream: its lines come from watching its trajectory file and process tree
  (:mod:`oracle.agents.mini_swe_agent`, ``StreamRules.watch``). The run also reports
  *activity* (:data:`oracle.protocol.ACTIVITIES`): ``tool`` when a tool call starts,
  ``model`` when the runtime's model request reaches the server.
* **The gate**: each model request is held until the harness has taken every report before
  it — the results of the tools the request answers, and the request's own ``model``
  activity. So when the harness sees a boundary the runtime is idle (all tools of the step
  returned, its next request not answered), which makes the checkpoint exact, and a
  fail-stop at a ``model`` activity strikes while the model call is in flight. A run whose
  reports are not consumed stalls; :meth:`RuntimeRun.wait` opens the gate.
* **Preserved state** (:meth:`RuntimeRun.preserved`, taken by the harness at the boundary):
  the runtime's session files, once they hold the boundary's tool results (Claude Code
  appends to its file lazily — over a second late under load — so this waits for the
  boundary's tool-result ids to be on disk, bounded by ``settle_s``; Codex's rollout is
  counted the same way).
* **Fail-stop**: the runtime runs under :func:`oracle.processes.popen` (its own PID
  namespace), so a kill also ends the tools it started in sessions of their own.

Tasks: the ``repair`` brain's tasks are the repair agent's (:mod:`oracle.agents.repair.tasks`)
with a prompt carrying the brain's header (:func:`oracle.agents.model_server.repair.task_prompt`); a
program brain's (``depres``, ``cbuild``, ``migrate``, ``bisect``) are its family agent's, with the header
of :func:`oracle.agents.model_server.program.task_prompt`.

Codex's ``exec_command`` returns a command that outlives its wait (30 s at most) as ``Process
running with session ID N``, and the brain polls it (``write_stdin``): such a result finishes
no tool — the poll that sees the process exit does, as the one ``item.completed`` of the
stream says — so neither the gate nor the session-file count counts it
(:func:`oracle.agents.model_server.program.running_session`).
"""

from __future__ import annotations

import collections
import functools
import hashlib
import importlib
import json
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oracle.agents.claude_code import ClaudeLineParser, tool_result_ids
from oracle.agents.codex import CodexLineParser
from oracle.agents.command_line import CliRun, ParseLine, run_dir_for, run_verifier
from oracle.agents.mini_swe_agent import MiniLineParser, trajectory_results, watch_trajectory
from oracle.agents.model_server import (
    BRAINS,
    Brain,
    BrainError,
    ModelRequest,
    ModelServer,
    ServerConfig,
    make_brain,
)
from oracle.agents.model_server.conversation import Step
from oracle.agents.model_server.program import PROGRAM_FAMILIES, running_session
from oracle.agents.model_server.program import task_prompt as program_prompt
from oracle.agents.model_server.wire import Reply
from oracle.agents.runtimes import (
    DEFAULT_MODEL,
    RUNTIMES,
    MiniSweAgent,
    Runtime,
    RuntimeInstallError,
    get_runtime,
)
from oracle.processes import descendants, signal_all
from oracle.protocol import AgentReport, Clock, RestorePoint, TaskSpec

__all__ = ["CLAUDE_RULES", "CODEX_RULES", "MINI_RULES", "RESUME_PROMPT", "Gate", "RuntimeAgent",
           "RuntimeRun", "StreamRules", "stream_rules"]

#: the prompt of a resumed run (the repair brain decides from the transcript, not from it)
RESUME_PROMPT = ("The previous session was cut off by a machine failure. Continue the task "
                 "from where the transcript ends.")
#: the brains a runtime agent can be driven by: every registered one
RUNTIME_BRAINS = tuple(BRAINS)


# --------------------------------------------------------------------------- stream rules


@dataclass(frozen=True)
class StreamRules:
    """How one runtime's live stdout and session files are read.

    ``parser()`` makes the per-run line parser (it keeps the run's ``session_id`` /
    ``thread_id``); ``tool_started(line)``: the line says a tool call started;
    ``tool_results(line)``: ids of the tool results the line carries (one placeholder each
    where the format has no id); ``saved(files, baseline, ids)``: the session files hold
    ``baseline`` earlier results plus the results ``ids``; ``count(files)``: results saved;
    ``read(path)``: a session file's text as far as it is whole (default: up to its last
    newline); ``watch(run)``: where the run's lines come from when not its stdout (the
    runtime prints no stream; its stdout then goes to ``stdout.log``).
    """

    parser: Callable[[], ParseLine]
    session_id: Callable[[Any], str | None]
    tool_started: Callable[[dict], bool]
    tool_results: Callable[[dict], list[str]]
    saved: Callable[[list[str], int, list[str]], bool]
    count: Callable[[list[str]], int]
    read: Callable[[Path], str] = lambda path: _whole_lines(path)
    watch: Callable[[RuntimeRun], Iterator[dict]] | None = None


_CODEX_TOOLS = ("command_execution", "file_change", "mcp_tool_call", "web_search",
                "collab_tool_call")
_CODEX_OUTPUTS = ('"type":"function_call_output"', '"type":"custom_tool_call_output"')


def _codex_item(obj: dict, kind: str) -> bool:
    return obj.get("type") == kind and (obj.get("item") or {}).get("type") in _CODEX_TOOLS


def _codex_count(texts: list[str]) -> int:
    """Tool outputs in rollout texts that finished a tool (a still-running yield did not)."""
    n = 0
    for t in texts:
        for line in t.splitlines():
            k = sum(line.count(o) for o in _CODEX_OUTPUTS)
            if k and "Process running with session ID" in line:
                payload = json.loads(line).get("payload") or {}
                k -= running_session(str(payload.get("output", ""))) is not None
            n += k
    return n


CODEX_RULES = StreamRules(
    parser=CodexLineParser,
    session_id=lambda p: p.thread_id,
    tool_started=lambda o: _codex_item(o, "item.started"),
    tool_results=lambda o: ["?"] if _codex_item(o, "item.completed") else [],
    saved=lambda texts, baseline, ids: _codex_count(texts) >= baseline + len(ids),
    count=_codex_count,
)


def _claude_started(obj: dict) -> bool:
    content = (obj.get("message") or {}).get("content") if obj.get("type") == "assistant" else None
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_use"
                                             for b in content)


def _claude_saved(texts: list[str], baseline: int, ids: list[str]) -> bool:
    return all(any(f'"tool_use_id":"{i}"' in t for t in texts) for i in ids)


CLAUDE_RULES = StreamRules(
    parser=ClaudeLineParser,
    session_id=lambda p: p.session_id,
    tool_started=_claude_started,
    tool_results=tool_result_ids,
    saved=_claude_saved,
    count=lambda texts: sum(t.count('"type":"tool_result"') for t in texts),
)


def _mini_saved(texts: list[str], baseline: int, ids: list[str]) -> bool:
    found = [trajectory_results(t) for t in texts]
    return all(f is not None for f in found) and set(ids) <= {i for f in found for i in f or ()}


def _mini_watch(run: RuntimeRun) -> Iterator[dict]:
    restored = run.home / "resume" / MiniSweAgent.trajectory
    return watch_trajectory(run.home / MiniSweAgent.trajectory, run.run_dir / "snapshots",
                            running=lambda: run.proc.poll() is None, tools=run.tools,
                            answers=lambda: run.gate.answered, clock=run.clock.now,
                            restored=restored if restored.exists() else None)


MINI_RULES = StreamRules(
    parser=MiniLineParser,
    session_id=lambda p: p.session_id,
    tool_started=lambda o: o.get("type") == "tool.started",
    tool_results=lambda o: list(o.get("tool_results", [])) if o.get("type") == "trajectory"
    else [],
    saved=_mini_saved,
    count=lambda texts: sum(len(trajectory_results(t) or ()) for t in texts),
    read=lambda path: path.read_text(errors="replace"),  # rewritten whole, not appended
    watch=_mini_watch,
)



def stream_rules(runtime: Runtime) -> StreamRules:
    """The stream rules a runtime's record names (``Runtime.rules``, ``"module:attribute"``)."""
    module, _, attr = runtime.rules.partition(":")
    rules = getattr(importlib.import_module(module), attr)
    if not isinstance(rules, StreamRules):
        raise TypeError(f"runtime {runtime.spec.name!r}: {runtime.rules} is not StreamRules")
    return rules


# --------------------------------------------------------------------------- the gate


class Gate(Brain):
    """The run's brain behind a gate: a request waits until the harness took every report
    before it (see the module docstring); ``open`` stops gating, ``close`` refuses."""

    def __init__(self, inner: Brain, timeout_s: float) -> None:
        """``inner`` answers; a request waits at most ``timeout_s`` (then counted, and let go)."""
        self.inner = inner
        self.name = inner.name  # type: ignore[misc] - the audit log names the real brain
        self.timeout_s = timeout_s
        self.cond = threading.Condition()
        self.baseline: int | None = None
        self.results_acked = 0
        self.requests = 0
        self.requests_acked = 0
        self.answered = 0  # answers sent back (a tool the runtime runs follows one)
        self.timeouts = 0
        self.gating = True
        self.closed = False
        self.on_request: Callable[[int], None] = lambda k: None
        # timing (seconds, monotonic): when the first request came, how long requests were
        # held for the harness, how long the brain took to answer
        self.first_request_at: float | None = None
        self.held_s = 0.0
        self.brain_s = 0.0

    def respond(self, request: ModelRequest) -> Step | Reply:
        # results that finished a tool (a Codex yield whose process runs on finished none)
        n = sum(running_session(r.output) is None for r in request.conversation.results().values())
        t0 = time.monotonic()
        with self.cond:
            if self.first_request_at is None:
                self.first_request_at = t0
            if self.closed:
                raise BrainError("the run has ended")
            if self.baseline is None:
                self.baseline = n  # results the run's first request resends are history
            need = n - self.baseline
            self.requests += 1
            k = self.requests
            # first the results this request answers (their boundaries come first), then the
            # request itself, so its ``model`` activity is reported in its own segment
            ok = self._wait(lambda: self.results_acked >= need)
        self.on_request(k)
        with self.cond:
            ok = self._wait(lambda: self.requests_acked >= k) and ok
            if not ok:
                self.timeouts += 1
            t1 = time.monotonic()
            self.held_s += t1 - t0
        try:
            answer = self.inner.respond(request)
        finally:
            with self.cond:
                self.brain_s += time.monotonic() - t1
        with self.cond:
            self.answered += 1
        return answer

    def _wait(self, cond: Callable[[], bool]) -> bool:
        """Wait (holding ``self.cond``) for ``cond``, an open gate or the timeout."""
        ok = self.cond.wait_for(lambda: self.closed or not self.gating or cond(), self.timeout_s)
        if self.closed:
            raise BrainError("the run has ended")
        return ok

    def ack_results(self, n: int) -> None:
        with self.cond:
            self.results_acked += n
            self.cond.notify_all()

    def ack_request(self, k: int) -> None:
        with self.cond:
            self.requests_acked = max(self.requests_acked, k)
            self.cond.notify_all()

    def open(self) -> None:
        with self.cond:
            self.gating = False
            self.cond.notify_all()

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()


# --------------------------------------------------------------------------- the run


def _whole_lines(path: Path) -> str:
    """A session file's text up to its last newline: a line being appended is left out."""
    text = path.read_text(errors="replace")
    return text[: text.rfind("\n") + 1]


def _no_state(obj: dict, transcript: list[dict], facts: dict[str, Any]) -> None:
    """Runtime runs keep no line transcript: the session file is the preserved transcript."""


class RuntimeRun(CliRun):
    """One run of a real runtime (see the module docstring): reports, gate, session capture."""

    def __init__(self, agent: RuntimeAgent, argv: list[str], env: dict[str, str], cwd: Path, *,
                 clock: Clock, run_dir: Path, home: Path, server: ModelServer, gate: Gate,
                 start_boundary: int, start_step: int, facts: dict[str, Any],
                 baseline: int) -> None:
        self.runtime: Runtime = agent.runtime
        self.rules = agent.rules
        self.home = home
        self.server = server
        self.gate = gate
        self.settle_s = agent.settle_s
        self.baseline = baseline
        self.wrapped = bool(agent.wrap)
        self.timing_dir = agent.timing_dir
        self.result_ids: list[str] = []
        self._pending: collections.deque[int] = collections.deque()
        self._lock = threading.Lock()
        self._captured: tuple[int, dict] | None = None
        gate.on_request = self._model_request
        self.launched_at = time.monotonic()
        super().__init__(argv, cwd=cwd, env=env, clock=clock, parse_line=self.rules.parser(),
                         run_dir=run_dir, start_boundary=start_boundary, start_step=start_step,
                         transcript=[], facts=facts, update_state=_no_state)
        self.usage.update(model_requests=0, gate_timeouts=0)

    @property
    def session_id(self) -> str | None:
        """The runtime's thread/session id of this run (a fork has its own), once it said it."""
        return self.rules.session_id(self._parse)

    # -- reports -----------------------------------------------------------------------
    def _model_request(self, k: int) -> None:
        with self._lock:
            self._pending.append(k)
        self.inject(AgentReport("activity", activity="model"))

    def _after_injected(self, report: AgentReport) -> None:
        with self._lock:
            k = self._pending.popleft()
        self.usage["model_requests"] = k
        self.gate.ack_request(k)

    def _line_reports(self, obj: dict, arrival: float) -> Any:
        if self.rules.tool_started(obj):
            yield AgentReport("activity", activity="tool")
        ids = self.rules.tool_results(obj)
        self.result_ids.extend(ids)  # the boundary's session must hold these
        yield from super()._line_reports(obj, arrival)
        if ids:  # the harness has taken this line's reports: its requests may go on
            self.gate.ack_results(len(ids))

    def _read(self) -> None:
        """The reader thread: the runtime's stdout lines, or the rules' watch (stdout then
        copied to ``stdout.log``)."""
        if self.rules.watch is None:
            super()._read()
            return
        drain = threading.Thread(target=self._drain, name=f"stdout-{self.pid}", daemon=True)
        drain.start()
        try:
            for obj in self.rules.watch(self):
                self._queue.put((self.clock.now(), json.dumps(obj).encode()))
        finally:
            drain.join(5)
            self._queue.put(None)

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        with open(self.run_dir / "stdout.log", "wb") as log:
            for chunk in iter(lambda: self.proc.stdout.read1(65536), b""):  # type: ignore[union-attr]
                log.write(chunk)

    # -- preserved state ---------------------------------------------------------------
    def _session(self) -> dict[str, Any]:
        files = self.runtime.sessions(self.home)
        deadline = time.monotonic() + self.settle_s
        while True:
            texts = [self.rules.read(p) for p in files]
            if self.rules.saved(texts, self.baseline, self.result_ids):
                complete = True
                break
            if time.monotonic() > deadline:
                complete = False
                break
            time.sleep(0.01)
            files = self.runtime.sessions(self.home)
        sid = self.session_id
        return {"runtime": self.runtime.spec.name, "version": self.runtime.spec.version,
                "resume_id": sid, "complete": complete,
                "files": {str(p.relative_to(self.home)): t for p, t in zip(files, texts, strict=True)}}

    def preserved(self) -> tuple[list[dict], dict[str, Any]]:
        """Transcript and facts as of the last boundary, the runtime's session files among the
        facts (``runtime.session``). Take it at the boundary — the gate holds the runtime
        there — as the harness does: the files are read when this is called."""
        transcript, facts = super().preserved()
        if self.boundary > self.start_boundary:
            if self._captured is None or self._captured[0] != self.boundary:
                self._captured = (self.boundary, self._session())
            facts["runtime.session"] = self._captured[1]
        return transcript, facts

    # -- lifetime ----------------------------------------------------------------------
    def tools(self) -> list[int]:
        """The live processes the runtime started (its tools), not the runtime itself."""
        # under the namespace, [0] is its PID 1: the runtime, or the wrapper that runs the
        # runtime as its one child ([1]); neither is a tool
        tree = descendants(self.pid)
        top = 1 if getattr(self.proc, "fail_stop_namespace", False) else 0
        return tree[top + self.wrapped:]

    def pause(self) -> None:
        """Stop the tools still running (parallel calls) while the harness checkpoints; the
        runtime itself keeps running — the gate holds it, and it must write its session."""
        self._stopped = self.tools()
        signal_all(self._stopped, signal.SIGSTOP)

    def cont(self) -> None:
        """Continue the tools :meth:`pause` stopped."""
        signal_all(getattr(self, "_stopped", []), signal.SIGCONT)
        self._stopped = []

    def kill(self) -> None:
        """Fail-stop: the runtime and every tool it started; a held model request is refused."""
        self.gate.close()
        super().kill()

    def wait(self) -> int:
        """Exit status; stops gating first, and closes the run's model server."""
        self.gate.open()
        try:
            return super().wait()
        finally:
            self.server.close()
            self.usage["gate_timeouts"] = self.gate.timeouts
            self._write_timing()

    def _write_timing(self) -> None:
        """``timing.json`` in the run's directory: where the run's wall time went (seconds) —
        ``startup_s`` (launch to the runtime's first model request), ``brain_s`` (the brain
        answering), ``gate_held_s`` (requests held until the harness took the reports before
        them: harness time) — for benchmarks/bench_harness.py."""
        g = self.gate
        timing = {"wall_s": time.monotonic() - self.launched_at,
                  "startup_s": None if g.first_request_at is None
                  else g.first_request_at - self.launched_at,
                  "brain_s": g.brain_s, "gate_held_s": g.held_s,
                  "model_requests": g.requests, "killed": self.killed}
        self.usage.update({k: timing[k] for k in ("startup_s", "brain_s", "gate_held_s")})
        line = json.dumps(timing)
        (self.run_dir / "timing.json").write_text(line)
        if self.timing_dir is not None:
            self.timing_dir.mkdir(parents=True, exist_ok=True)
            with open(self.timing_dir / "timings.jsonl", "a") as f:
                f.write(line + "\n")


# --------------------------------------------------------------------------- the agent


def _brain_seed(seed: int, task_id: str) -> int:
    return int(hashlib.sha256(f"{seed}:{task_id}".encode()).hexdigest()[:15], 16)


class RuntimeAgent:
    """A real runtime (``codex``, ``claude-code``, ``mini-swe-agent``) driven by a brain; see the module docstring.

    ``brain``: ``repair`` (default), a program brain (``depres``, ``cbuild``, ``migrate``, ``bisect``),
    ``scripted`` (``plan``: a plan file) or ``proxy`` (``url``, ``key_env``). ``seeds``:
    ``task`` (default; the repair and program brains make the same seeded choices in every
    run of a task, a deterministic model) or ``run`` (each run's own
    seed, so branches diverge as a sampling model's would). ``settle_s`` bounds the wait for
    a session file to hold a boundary's results; ``gate_s`` a model request's wait for the
    harness; ``fork`` (default) forks a restored session instead of resuming it in place.
    ``wrap``: an argv prefix for the runtime program inside its fail-stop (e.g. ``strace``), a
    program that runs the runtime as its one child; ``{run}`` in it is replaced by a fresh id
    per run. ``timing_dir``: where each run also appends its ``timing.json`` record (one line of
    ``timings.jsonl``; run directories go with their branch), for benchmarks.
    """

    granularity = "tool_call"
    clock_kind = "wall"
    reports_activity = True

    def __init__(self, runtime: str, brain: str = "repair", *, granularity: str = "tool_call",
                 plan: str | None = None, url: str | None = None, key_env: str | None = None,
                 model: str = DEFAULT_MODEL, seeds: str = "task", fork: bool = True,
                 settle_s: float = 10.0, gate_s: float = 300.0,
                 wrap: Sequence[str] = (), timing_dir: str | None = None) -> None:
        if runtime not in RUNTIMES:
            raise ValueError(f"unknown runtime {runtime!r}; choose from {', '.join(RUNTIMES)}")
        if brain not in RUNTIME_BRAINS:
            raise ValueError(f"unknown brain {brain!r}; choose from {', '.join(RUNTIME_BRAINS)}")
        if granularity != "tool_call":
            raise ValueError(f"agent {runtime!r} reports tool-call boundaries only, "
                             f"got granularity {granularity!r}")
        if seeds not in ("task", "run"):
            raise ValueError(f"seeds must be 'task' or 'run', got {seeds!r}")
        self.name = runtime
        self.runtime = get_runtime(runtime)
        self.rules = stream_rules(self.runtime)
        self.brain, self.plan, self.url, self.key_env = brain, plan, url, key_env
        self.model, self.seeds, self.fork = model, seeds, fork
        self.settle_s, self.gate_s = float(settle_s), float(gate_s)
        self.wrap = tuple(str(w) for w in wrap)
        self.timing_dir = None if timing_dir is None else Path(timing_dir)
        make_brain(brain, plan=plan, url=url, key_env=key_env) if brain != "repair" else None

    # -- tasks and provenance ----------------------------------------------------------
    def make_tasks(self, n: int, seed: int, root: Path, **options: Any) -> list[TaskSpec]:
        """``n`` tasks for the brain: the repair brain's are repair tasks (``options``: the
        search bounds of :data:`oracle.agents.model_server.repair.SEARCH` for the brain, the rest to
        :func:`oracle.agents.repair.tasks.make_repair_tasks`); a program brain's are its
        family agent's (``options`` to its task maker, e.g. ``repos``)."""
        if self.brain in PROGRAM_FAMILIES:
            from oracle.agents.registry import get_agent

            tasks = get_agent(self.brain).make_tasks(n, seed, root, **options)  # type: ignore[attr-defined]
            for t in tasks:
                t.params.update(brain_seed=_brain_seed(seed, t.task_id), resume_prompt=RESUME_PROMPT)
                t.params["prompt"] = program_prompt(t, seed=t.params["brain_seed"],
                                                    python=sys.executable)
            return tasks
        if self.brain != "repair":
            raise ValueError(f"brain {self.brain!r} cannot generate tasks; only the repair "
                             f"and program brains ({', '.join(PROGRAM_FAMILIES)}) can (or "
                             "build TaskSpecs with oracle.harness.plan)")
        from oracle.agents.model_server.repair import SEARCH, task_prompt
        from oracle.agents.repair.tasks import RUNNER, make_repair_tasks

        search = {k: int(options.pop(k)) for k in SEARCH if k in options}
        tasks = make_repair_tasks(n, seed, root, **options)
        for t in tasks:
            t.params.update(search, brain_seed=_brain_seed(seed, t.task_id),
                            resume_prompt=RESUME_PROMPT)
            t.params["prompt"] = task_prompt(t.params, runner=str(RUNNER),
                                             python=sys.executable, seed=seed)
        return tasks

    @functools.cached_property
    def installed_version(self) -> str | None:
        """The runtime's version as its program prints it (None when not installed)."""
        return self.runtime.probe().version

    def describe(self) -> dict[str, Any]:
        """What a label set records about the runtime behind its labels."""
        spec = self.runtime.spec
        return {"runtime": spec.name, "package": spec.package, "pinned_version": spec.version,
                "version": self.installed_version, "brain": self.brain, "seeds": self.seeds,
                "model": self.model}

    def check_installed(self) -> None:
        """A one-line error when the runtime is not installed and usable."""
        found = self.runtime.probe()
        if not found.usable:
            raise RuntimeInstallError(f"{self.name} is not usable ({found.detail}); install it "
                                      f"with python -m oracle agents install {self.name}")

    # -- protocol ----------------------------------------------------------------------
    def _brain(self, task: TaskSpec, seed: int) -> Brain:
        return make_brain(self.brain, plan=self.plan, url=self.url, key_env=self.key_env)

    def _prompt(self, task: TaskSpec, seed: int, key: str) -> str:
        prompt = task.params.get(key) or task.params.get("prompt")
        if not prompt:
            raise ValueError(f"task {task.task_id}: no params['prompt'] for {self.name}")
        if self.seeds == "run" and "brain_seed" in task.params and self.brain in PROGRAM_FAMILIES:
            return program_prompt(task, seed=seed, python=sys.executable)
        if self.seeds == "run" and "brain_seed" in task.params:
            from oracle.agents.model_server.repair import task_prompt
            from oracle.agents.repair.tasks import RUNNER

            params = {k: v for k, v in task.params.items() if k != "brain_seed"}
            prompt = task_prompt(params, runner=str(RUNNER), python=sys.executable, seed=seed)
        return str(prompt)

    def _launch(self, task: TaskSpec, workspace: Path, seed: int, clock: Clock,
                restore: RestorePoint | None) -> RuntimeRun:
        if not self.runtime.executable().exists():
            self.check_installed()
        workspace = Path(workspace).resolve()
        run_dir = run_dir_for(workspace)
        home = run_dir / "home"
        facts = dict(restore.facts) if restore is not None else {}
        session = facts.get("runtime.session") if restore is not None and restore.boundary else None
        resume_id = None
        if session:
            for rel, text in session["files"].items():
                src = run_dir / "restore" / rel
                src.parent.mkdir(parents=True, exist_ok=True)
                src.write_text(text)
                self.runtime.seed_home(home, src, workspace)
            resume_id = session["resume_id"]
        prompt = self._prompt(task, seed, "resume_prompt" if session else "prompt")
        gate = Gate(self._brain(task, seed), self.gate_s)
        server = ModelServer(gate, ServerConfig(audit=run_dir / "model_server.audit.jsonl",
                                                run_id=f"{task.task_id}-{uuid.uuid4().hex[:8]}"))
        server.start()
        try:
            launch = self.runtime.launch(prompt, home=home, cwd=workspace, base_url=server.url,
                                         model=self.model, resume=resume_id,
                                         fork=self.fork and resume_id is not None)
            texts = [self.rules.read(p) for p in self.runtime.sessions(home)]
            start_b = restore.boundary if restore is not None else 0
            step = int(facts.get("cli.step", 1)) if start_b else 1
            run_id = uuid.uuid4().hex[:12]
            argv = [w.replace("{run}", run_id) for w in self.wrap] + list(launch.argv)
            return RuntimeRun(self, argv, dict(launch.env), launch.cwd, clock=clock,
                              run_dir=run_dir, home=home, server=server, gate=gate,
                              start_boundary=start_b, start_step=step, facts=facts,
                              baseline=self.rules.count(texts))
        except BaseException:
            server.close()
            raise

    def start(self, task: TaskSpec, workspace: Path, seed: int, clock: Clock) -> RuntimeRun:
        """A fresh session on a pristine workspace."""
        return self._launch(task, workspace, seed, clock, None)

    def resume(self, task: TaskSpec, restore: RestorePoint, workspace: Path, seed: int,
               clock: Clock) -> RuntimeRun:
        """Fork the session captured at ``restore`` (a fresh session at restore point 0)."""
        return self._launch(task, workspace, seed, clock, restore)

    def verify(self, task: TaskSpec, workspace: Path) -> bool:
        """The task's verifier (exit 0)."""
        return bool(task.verifier) and run_verifier(task.verifier, workspace)
