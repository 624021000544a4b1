"""``python -m ripplecp_policy.advise``: a learned placement policy following live agent sessions.

One long-lived advisor server (:mod:`ripplecp_policy.advisor_server`) holds the model and
every followed session; the hooks reach it for nothing:

- ``advise install --runtime claude-code|codex [--scope project|user] --model URI …`` writes
  the hooks (Claude Code: ``http`` hooks to 127.0.0.1; Codex: the standard-library command
  client) and the server's configuration; ``advise uninstall`` removes exactly that;
- ``advise serve`` runs the server (the hooks start it on demand; it exits when idle);
- ``advise check`` refuses, in one line and exit 2, a model that does not load, a store that
  does not exist, hooks that are not installed — and creates nothing;
- ``advise status``: each session's decisions, budget left and out-of-range share;
- ``advise … -- COMMAND`` (``codex exec --json …``): runs the command, copies its output,
  streams it to the server (started when none runs, and waited for at most ``--wait`` s,
  default 0: the command starts at once; lines it writes before the server is up are
  logged SKIP, past, every later one is decided live) and exits with the
  command's status — or, when a signal ends it, 128 + the signal (passed on to the command
  first); a line over the advisor's line limit is copied but not followed (logged SKIP);
- ``advise --input LOGFILE``: replays a recorded log in this process;
- ``advise --hook claude-code``: the older in-process command hook (loads the model on every
  call; the server's hooks are the fast way).

Fail-open at run time: a model that does not load, a line that does not parse, a checkpoint
that fails — the boundary is SKIP with the reason in the log; the agent never stops for the
advisor. Loud at set-up: arguments, ``check``, ``serve`` and ``--input`` refuse bad input in
one line (exit 2). Heavy imports (the policy stack, MLflow) happen only where used, so every
``--help`` and the wrapper's start are fast.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ripplecp_cli import (
    CommandLineError,
    existing_dir,
    existing_file,
    opt,
    progress,
    run,
    run_subcommands,
)
from ripplecp_policy.advisor_lines import MAX_BODY, MAX_LINE_BYTES, LineSplitter
from ripplecp_policy.advisor_state import ServerConfig, default_state
from ripplecp_policy.hook_client import ensure_server, request

PROG = "python -m ripplecp_policy.advise"
URI_SCHEMES = ("runs:/", "models:/", "file:", "s3:", "gs:", "http:", "https:", "dbfs:", "mlflow-artifacts:")
SUBCOMMANDS = ("serve", "check", "status", "install", "uninstall")


def model_uri(text: str) -> None:
    """``check=``: an MLflow model URI, or a local model folder that exists."""
    if not text.startswith(URI_SCHEMES):
        existing_dir(text)
        if not (Path(text) / "MLmodel").is_file():
            raise ValueError(f"{text}: not an MLflow model folder (no MLmodel file)")


def budget_spec(text: str) -> None:
    """``check=``: a budget spec (``count:2``, ``seconds:30``, ``bytes:1e6``, ``seconds:2x``)."""
    from ripplecp_policy.budget import BudgetSpec

    BudgetSpec.parse(text)


def stream_format(text: str) -> None:
    """``check=``: a line-oriented log format of :data:`features.readers.READERS`."""
    from features.readers import READERS

    names = [n for r in READERS if r.parser is not None for n in (r.name, *r.aliases)]
    if text not in names:
        from ripplecp_cli import choice_error

        raise choice_error(text, names)


@dataclass(frozen=True)
class Args:
    """Follow one agent session with a learned placement policy: CP or SKIP at every safe
    boundary under a budget, checkpoints taken with the toolkit's store, every decision
    logged. Give exactly one of: --input LOGFILE, --hook claude-code, or -- COMMAND ...
    (the command to run and follow, after a lone --). Subcommands: serve, check, status,
    install, uninstall (python -m ripplecp_policy.advise install --help)."""

    model: str = opt(check=model_uri, metavar="URI")
    """the policy: an MLflow model URI (runs:/RUN/policy, models:/NAME/VERSION) or a local
    model folder"""
    budget: str | None = opt(None, check=budget_spec, metavar="SPEC")
    """the budget per session: count:N, seconds:S, bytes:B, or seconds:Kx / bytes:Kx (K times
    the model's mean training checkpoint cost); default: the model's own budget"""
    log: Path = Path("decisions.jsonl")
    """the decision log (JSON lines, appended)"""
    input: Path | None = opt(None, check=existing_file, metavar="LOGFILE")
    """replay this recorded session as a stream"""
    hook: Literal["claude-code"] | None = None
    """run as this runtime's hook (reads the hook's JSON on stdin)"""
    format: str | None = opt(None, check=stream_format)
    """the log's format, a line-oriented format of features.readers (default: detected from
    its first line)"""
    store: Path | None = opt(None, metavar="DIR")
    """the checkpoint store a CP writes to (created if absent); without it, decisions only"""
    workspace: Path | None = opt(None, check=existing_dir, metavar="DIR")
    """the folder a CP checkpoints (default: the hook's cwd, else the current directory)"""
    mlruns: Path | None = opt(None, metavar="DIR")
    """the MLflow store runs:/ and models:/ URIs are read from (default: $RIPPLECP_MLRUNS or
    ./mlruns)"""
    seed: int = opt(0, min=0)
    """the seed a stochastic policy is reset with"""
    echo: bool = True
    """with a command: copy its standard output to ours"""
    state: Path | None = opt(None, metavar="DIR")
    """with a command: the advisor server's state folder (default: one per model, under
    ~/.cache/ripplecp/advisor)"""
    wait: float = opt(0.0, min=0)
    """with a command: seconds to wait for a server that is not up yet before starting the
    command (then it starts; boundaries before the server is up are logged SKIP, past: give
    more, or start the server first with 'advise serve', to follow every one)"""
    allow_pickle_code_execution: bool = False
    """load a pickled policy (format joblib) although loading it runs any code inside it"""


def _check_modes(args: Args, command: Sequence[str]) -> None:
    given = [m for m, on in (("--input", args.input is not None), ("--hook", args.hook is not None),
                              ("-- COMMAND", bool(command))) if on]
    if len(given) != 1:
        what = "none" if not given else " and ".join(given)
        raise CommandLineError(f"give exactly one of --input LOGFILE, --hook claude-code or "
                               f"-- COMMAND ..., got {what}")
    if args.hook is not None and args.format not in (None, "claude-code-session", "claude-code",
                                                     "claude-session"):
        raise CommandLineError(f"argument --format: a Claude Code hook follows the session "
                               f"file (claude-code-session), not {args.format}")


def _load(args: Args, *, loud: bool = False) -> tuple[Any, str | None, Any]:
    """The model (fail-open: None and why; ``loud``: raise) and the budget to follow under."""
    from ripplecp_policy.advisor import load_model, resolve_budget
    from ripplecp_policy.budget import Budget, BudgetSpec

    spec = BudgetSpec.parse(args.budget) if args.budget else None
    try:
        model = load_model(args.model, mlruns=args.mlruns,
                           allow_pickle=args.allow_pickle_code_execution)
    except Exception as exc:  # fail-open: the session runs, every boundary is SKIP
        if loud:
            raise ValueError(f"model {args.model} did not load: {' '.join(str(exc).split())[:300]}") from None
        reason = f"model {args.model} did not load: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        print(f"{PROG}: warning: {reason}; every boundary is SKIP", file=sys.stderr)
        budget = Budget(spec.kind, spec.amount) if spec is not None and not spec.relative \
            else Budget("count", 0)
        return None, reason, budget
    return model, None, resolve_budget(spec, model.config)


def _summary(adv: Any) -> None:
    cps = adv.checkpoints
    ids = ", ".join(d.checkpoint_id or f"boundary {d.boundary}" for d in cps) or "none"
    ood = [d.out_of_range for d in adv.decisions if d.out_of_range is not None]
    share = sum(ood) / len(ood) if ood else 0.0
    flag = " (FLAGGED: the policy was not trained on runs like this one)" if share > 0.25 else ""
    print(f"{PROG}: {len(adv.decisions)} decisions, {len(cps)} checkpoints ({ids}), budget "
          f"left {adv.remaining:g} of {adv.budget.label()}, {share:.0%} of features out of the "
          f"training range{flag}", file=sys.stderr)


def replay(args: Args) -> int:
    """``--input``: the recorded session, line by line (a model that does not load is refused)."""
    from ripplecp_policy.advisor import Advisor, store_for

    workspace = (args.workspace or Path.cwd()).resolve()
    model, _, budget = _load(args, loud=True)
    store = store_for(args.store, workspace) if args.store is not None else None
    adv = Advisor(model, budget, format=args.format, log=args.log, store=store, workspace=workspace,
                  source=args.input, seed=args.seed)
    with open(args.input, "rb") as f:
        for line in progress(f, desc=f"following {args.input.name}", unit="line"):
            adv.feed(line)
    adv.finish()
    _summary(adv)
    return 0


def hook(args: Args, stdin: Any = None) -> int:
    """``--hook claude-code``: one call of the in-process command hook; never fails the
    session (exit 0). Calls on one log take turns (a boundary is decided once); the
    transcript is read within bounds (:class:`ripplecp_policy.advisor.TranscriptTail`)."""
    try:
        from ripplecp_policy.advisor import (
            Advisor,
            TranscriptError,
            TranscriptTail,
            read_decisions,
            session_lock,
            store_for,
        )

        event = json.load(stdin or sys.stdin)
        transcript = Path(event["transcript_path"])
        workspace = (args.workspace or Path(event.get("cwd") or Path.cwd())).resolve()
        session = str(event.get("session_id") or transcript.stem)
        model, error, budget = _load(args)
        store = store_for(args.store, workspace) if args.store is not None else None
        with session_lock(args.log):
            adv = Advisor(model, budget, format="claude-code-session", log=args.log, store=store,
                          workspace=workspace, session=session, source=transcript, seed=args.seed,
                          load_error=error, prior=read_decisions(args.log, session), catch_up=True,
                          runtime="claude-code")
            try:
                lines = TranscriptTail(transcript).read()
            except TranscriptError as exc:
                adv.error(f"error: {exc}")
                adv.close()
                raise
            deadline = time.monotonic() + 30.0
            for line in lines:
                adv.feed(line)
                if time.monotonic() > deadline:
                    adv.error(f"error: transcript {transcript}: not read within 30 s")
                    break
            adv.finish()
    except Exception as exc:  # fail-open, said on stderr (Claude Code shows it, goes on)
        print(f"{PROG}: advisor skipped this boundary: {type(exc).__name__}: {exc}",
              file=sys.stderr)
    return 0


def _wrapper_state(args: Args) -> Path:
    """The server state the wrapper streams to; its configuration written when absent."""
    model = str(args.model)
    if "://" not in model and not model.startswith(URI_SCHEMES):
        model = str(Path(model).resolve())
    mlruns = str(args.mlruns.resolve()) if args.mlruns is not None else None
    state = (args.state or default_state(f"model\0{model}\0{mlruns}\0{args.allow_pickle_code_execution}")).resolve()
    try:
        conf = ServerConfig.read(state)
    except FileNotFoundError:
        conf = ServerConfig(model=model, mlruns=mlruns, allow_pickle=args.allow_pickle_code_execution,
                            pythonpath=os.environ.get("PYTHONPATH", ""))
        conf.write(state)
    if conf.model != model:
        raise CommandLineError(f"argument --state: {state} serves {conf.model}, not {model}")
    return state


#: lines the wrapper holds for the server at most (more, while it is slow or not up yet, are
#: not followed: logged SKIP, ``behind``); the command's output is never held back
MAX_QUEUE_BYTES = 4 * MAX_BODY
#: after a signal, seconds the command has to end before SIGTERM, then as long before SIGKILL
KILL_AFTER_S = 3.0
#: the signals the wrapper forwards to its command (it then exits 128 + the signal)
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
LONG, BEHIND = "long", "behind"  # queued in place of a line that is not followed


class _Stream:
    """Lines of the followed command, sent to the server in order by one thread; the lines
    that came before the server answered go ``late`` (decided SKIP, past), every later one
    live. A line over the line
    limit (``LONG``) or past :data:`MAX_QUEUE_BYTES` (``BEHIND``) goes as a count, which
    the server logs as a SKIP with that reason where the line was."""

    def __init__(self, state: Path, params: dict[str, str], up: bool) -> None:
        self.state = state
        self.params = params
        self.lines: list[bytes | str] = []
        self.queued = 0
        self.n_late = 0  # the first lines queued: those that came before the server was up
        self.cond = threading.Condition()
        self.done = False
        self.up = up
        self.failed: str | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def put(self, line: bytes | None) -> None:
        """Queue a line (None: one over the line limit, dropped by the reader)."""
        with self.cond:
            if line is None:
                self.lines.append(LONG)
            elif self.queued + len(line) > MAX_QUEUE_BYTES:
                self.lines.append(BEHIND)
            else:
                self.lines.append(line)
                self.queued += len(line)
            self.cond.notify()

    def close(self, timeout: Callable[[], float]) -> None:
        """Wait for the lines queued to be sent, at most ``timeout()`` seconds (asked again
        as it waits: a signal shortens it)."""
        with self.cond:
            self.done = True
            self.cond.notify()
        start = time.monotonic()
        while self.thread.is_alive() and time.monotonic() - start < timeout():
            self.thread.join(0.2)

    def _send(self, batch: list[bytes], skipped: dict[str, int], late: bool) -> None:
        import urllib.parse

        q = dict(self.params, late="1" if late else "0", **{k: str(n) for k, n in skipped.items() if n})
        status, body = request(self.state, "POST", "/v1/stream?" + urllib.parse.urlencode(q),
                               b"".join(x if x.endswith(b"\n") else x + b"\n" for x in batch))
        if status != 200:
            raise OSError(f"server answered {status}: {body[:200]!r}")

    def _batches(self, items: list[bytes | str]) -> Iterator[tuple[list[bytes], dict[str, int]]]:
        """Requests of at most :data:`MAX_BODY` bytes, in order: the counts of lines not
        followed that come before each request's lines."""
        batch: list[bytes] = []
        skipped = {LONG: 0, BEHIND: 0}
        size = 0
        for x in items:
            if isinstance(x, str) or size + len(x) + 1 > MAX_BODY:
                if batch:
                    yield batch, skipped
                    batch, skipped, size = [], {LONG: 0, BEHIND: 0}, 0
            if isinstance(x, str):
                skipped[x] += 1
            else:
                batch.append(x)
                size += len(x) + 1
        if batch or any(skipped.values()):
            yield batch, skipped

    def _run(self) -> None:
        if not self.up:  # waited for from the start; the command's lines queue meanwhile
            up = ensure_server(self.state, wait_s=120.0)
            with self.cond:
                self.n_late, self.up = len(self.lines), up  # those came while none answered
                if not up:
                    self.failed = (f"no advisor server answered (its log: "
                                   f"{self.state / 'server.log'})")
        while True:
            with self.cond:
                while not self.lines and not self.done:
                    self.cond.wait()
                items, self.lines, self.queued = self.lines, [], 0
                n_late, self.n_late = self.n_late, 0
                done = self.done
            if items and self.failed is None:
                try:  # late lines are logged SKIP, past; every later one is decided live
                    for part, late in ((items[:n_late], True), (items[n_late:], False)):
                        for batch, skipped in self._batches(part) if part else ():
                            self._send(batch, skipped, late)
                except OSError as exc:
                    self.failed = str(exc)
            if done and not self.lines:
                return


class _Signals:
    """While the command runs: SIGINT, SIGTERM and SIGHUP are caught (no KeyboardInterrupt
    half-way through) and the first is forwarded to the command — except a SIGINT while the
    command shares our process group and that group is our terminal's foreground one: a
    Ctrl-C typed there reached the command already, and a second SIGINT is "force quit" to
    many CLIs (a SIGINT sent to the wrapper alone in that state reaches the command as the
    SIGTERM below). The command has :data:`KILL_AFTER_S` to end, then gets SIGTERM, then as
    long again before SIGKILL; a second signal kills it at once. Outside the main thread
    nothing changes."""

    def __init__(self) -> None:
        self.got: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.deadline = 0.0
        self.stage = 0  # 0: forwarded, 1: SIGTERM sent, 2: SIGKILL sent
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for sig in FORWARDED:
                self._old[sig] = signal.signal(sig, self._on)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)

    def attach(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        if self.got is not None:  # it came while the command was starting
            self._send(self.got)

    def _on(self, sig: int, frame: object) -> None:
        if self.got is None:
            self.got = sig
            self.deadline = time.monotonic() + KILL_AFTER_S
            if not (sig == signal.SIGINT and self._terminal_reached_it()):
                self._send(sig)
        else:  # a second signal: no more waiting
            self.stage = 1
            self.deadline = 0.0
            self.escalate()

    def _terminal_reached_it(self) -> bool:
        """Would a SIGINT typed at our terminal have reached the command too? It is in our
        process group, and that group is the foreground one of our controlling terminal."""
        if self.proc is None:
            return False
        try:
            if os.getpgid(self.proc.pid) != os.getpgrp():
                return False
            fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
            try:
                return os.tcgetpgrp(fd) == os.getpgrp()
            finally:
                os.close(fd)
        except OSError:  # no controlling terminal, or the command is gone
            return False

    def _send(self, sig: int) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)

    def escalate(self) -> None:
        """The command did not end in time: SIGTERM, then SIGKILL."""
        if self.proc is None or self.got is None or time.monotonic() < self.deadline:
            return
        if self.stage == 0:
            self.stage, self.deadline = 1, time.monotonic() + KILL_AFTER_S
            self._send(signal.SIGTERM)
        elif self.stage == 1:
            self.stage = 2
            self._send(signal.SIGKILL)


def _copy(proc: subprocess.Popen[bytes], sig: _Signals, stream: _Stream, echo: bool) -> None:
    """Copy the command's output as it comes and queue its lines, each bounded
    (:class:`~ripplecp_policy.advisor_lines.LineSplitter`: a longer line is never held
    whole); once our own output is closed, only queue them. Until the output ends; after a signal, until the command has ended and no
    more output waits (a process it left behind may hold the pipe open)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    out = sys.stdout.buffer
    lines = LineSplitter(MAX_LINE_BYTES)
    while True:
        ready = select.select([fd], [], [], 0.2 if sig.got else 1.0)[0]
        if sig.got:
            sig.escalate()
            if not ready and proc.poll() is not None:
                break
        if not ready:
            continue
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        if echo:
            try:
                out.write(chunk)
                out.flush()
            except BrokenPipeError:  # our reader went away (`| head`): stop echoing, follow on
                echo = False
                _discard_stdout()
        for line in lines.split(chunk):
            stream.put(line)
    last = lines.end()
    if last is not None:
        stream.put(last)


def _discard_stdout() -> None:
    """Point the closed standard output at /dev/null, so that what is still buffered and the
    interpreter's last flush go nowhere instead of raising (Python's advice for SIGPIPE)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def _reap(proc: subprocess.Popen[bytes], sig: _Signals) -> int:
    """The command's status (killed by signal N: 128 + N, as a shell says it)."""
    while True:
        try:
            code = proc.wait(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            sig.escalate()
    return 128 - code if code < 0 else code


def follow(args: Args, command: Sequence[str]) -> int:
    """``-- COMMAND``: run it, copy its output, stream it to the advisor server; its status,
    or 128 + the signal that ended the wrapper (130: Ctrl-C)."""
    import urllib.parse

    workspace = (args.workspace or Path.cwd()).resolve()
    state = _wrapper_state(args)
    up = ensure_server(state, wait_s=args.wait)
    params = {"session": f"exec-{uuid.uuid4().hex[:12]}", "source": Path(command[0]).name,
              "workspace": str(workspace), "log": str(args.log.resolve()),
              **({"budget": args.budget} if args.budget else {}),
              **({"store": str(args.store.resolve())} if args.store is not None else {}),
              **({"format": args.format} if args.format else {})}
    if not up:
        print(f"{PROG}: warning: the advisor server of {state} is not up yet (see "
              f"{state / 'server.log'}); boundaries before it is are SKIP", file=sys.stderr)
    stream = _Stream(state, params, up)
    with _Signals() as sig:
        proc = subprocess.Popen(list(command), stdout=subprocess.PIPE, cwd=workspace)
        sig.attach(proc)
        try:
            _copy(proc, sig, stream, args.echo)
        except BaseException:
            proc.kill()  # nothing reads its output any more
            proc.wait()
            raise
        code = _reap(proc, sig)
        # what the command wrote is followed to its end, in bounded time after a signal
        stream.close(timeout=lambda: 10.0 if sig.got else 120.0)
        summary = None
        if stream.up and stream.failed is None:
            try:
                status, body = request(state, "POST", "/v1/finish?" + urllib.parse.urlencode(
                    {"session": params["session"]}), timeout=10.0 if sig.got else 60.0)
                summary = json.loads(body) if status == 200 and body else None
            except (OSError, ValueError) as exc:
                stream.failed = str(exc)
    if summary:
        flag = " (FLAGGED: out of the training range)" if summary.get("flagged") else ""
        print(f"{PROG}: {summary['decisions']} decisions, {summary['checkpoints']} checkpoints, "
              f"budget left {summary['remaining']:g} of {summary['budget']}{flag}; log "
              f"{summary['log']}", file=sys.stderr)
    elif stream.failed:
        print(f"{PROG}: warning: advisor skipped this session: {stream.failed}", file=sys.stderr)
    if sig.got is not None:
        print(f"{PROG}: {signal.Signals(sig.got).name}: the command was stopped", file=sys.stderr)
        return 128 + sig.got
    return code


# -- subcommands -----------------------------------------------------------------------------


def _project_state(project: Path, scope: str) -> Path:
    return default_state(f"user\0{Path.home()}" if scope == "user" else f"project\0{project.resolve()}")


@dataclass(frozen=True)
class ServeArgs:
    """Run the advisor server of a state folder: load the model once, follow every session the
    hooks report, exit after --idle-s without a request. Refuses at start (one line, exit 2) a
    model that does not load or a store that does not exist."""

    state: Path = opt(metavar="DIR")
    """the state folder (server.json, the socket, the session logs)"""
    model: str | None = opt(None, check=model_uri, metavar="URI")
    """the policy (default: server.json's); given, it is written to server.json"""
    mlruns: Path | None = opt(None, metavar="DIR")
    """the MLflow store of runs:/ and models:/ URIs"""
    budget: str | None = opt(None, check=budget_spec, metavar="SPEC")
    """the budget of a session that names none (default: the model's own)"""
    store: Path | None = opt(None, metavar="DIR")
    """the checkpoint store of a session that names none (without one: decisions only)"""
    port: int | None = opt(None, min=1, max=65535)
    """also listen on 127.0.0.1:PORT (for http hooks)"""
    idle_s: float | None = opt(None, min=1)
    """exit after this many seconds without a request (default: server.json's, 1800)"""
    allow_pickle_code_execution: bool = False
    """load a pickled policy although loading it runs any code inside it"""


def _config(args: Any, state: Path) -> ServerConfig:
    """``state``'s server.json with the options given on the command line over it."""
    try:
        conf = ServerConfig.read(state)
    except FileNotFoundError:
        if args.model is None:
            raise
        conf = ServerConfig(model=args.model, pythonpath=os.environ.get("PYTHONPATH", ""))
    for name in ("model", "budget", "port", "idle_s"):
        if getattr(args, name, None) is not None:
            setattr(conf, name, getattr(args, name))
    for name in ("mlruns", "store"):
        if getattr(args, name, None) is not None:
            setattr(conf, name, str(Path(getattr(args, name)).resolve()))
    if getattr(args, "allow_pickle_code_execution", False):
        conf.allow_pickle = True
    return conf


def _check_config(conf: ServerConfig, *, load: bool = True, state: Path | None = None) -> Any:
    """The stores checked and the model loaded from its store, or ValueError in one line
    (nothing created); ``state``: the model's kept copy there is brought up to date too
    (what a server of that state serves at its next start)."""
    from ripplecp_policy.advisor import load_model

    if conf.mlruns is not None and not Path(conf.mlruns).is_dir():
        raise ValueError(f"MLflow store {conf.mlruns}: no such directory")
    if conf.store is not None and not Path(conf.store).parent.is_dir():
        raise ValueError(f"checkpoint store {conf.store}: its folder {Path(conf.store).parent} "
                         "does not exist")
    if not load:
        return None
    try:
        return load_model(conf.model, mlruns=conf.mlruns, allow_pickle=conf.allow_pickle,
                          cache=None if state is None else Path(state).resolve() / "models",
                          refresh=True)
    except Exception as exc:
        raise ValueError(f"model {conf.model} does not load: {' '.join(str(exc).split())[:300]}") from None


def serve_main(args: ServeArgs) -> int:
    from ripplecp_policy.advisor_server import serve

    conf = _config(args, args.state)
    _check_config(conf, load=False)  # the model: loaded once, by the server
    return serve(args.state, conf, write_config=True)


@dataclass(frozen=True)
class InstallArgs:
    """Install the advisor's hooks for a runtime (idempotent) and configure its server."""

    runtime: Literal["claude-code", "codex"] = opt()
    """the runtime whose hooks to write"""
    model: str = opt(check=model_uri, metavar="URI")
    """the policy the server follows sessions with"""
    scope: Literal["project", "user"] = "project"
    """project: this project's settings (Claude Code: .claude/settings.local.json; Codex:
    .codex/hooks.json); user: the user's (~/.claude/settings.json, ~/.codex/hooks.json)"""
    project: Path = opt(Path("."), check=existing_dir, metavar="DIR")
    """the project folder (scope project)"""
    mlruns: Path | None = opt(None, metavar="DIR")
    """the MLflow store of runs:/ and models:/ URIs"""
    budget: str | None = opt(None, check=budget_spec, metavar="SPEC")
    """the budget per session (default: the model's own)"""
    store: Path | None = opt(None, metavar="DIR")
    """the checkpoint store (without one: decisions only)"""
    state: Path | None = opt(None, metavar="DIR")
    """the server's state folder (default: one per project or user, under ~/.cache)"""
    port: int | None = opt(None, min=1, max=65535)
    """the server's 127.0.0.1 port for http hooks (default: one free now)"""
    idle_s: float = opt(1800.0, min=1)
    """the server exits after this many seconds without a request"""
    allow_pickle_code_execution: bool = False
    """load a pickled policy although loading it runs any code inside it"""


def install_main(args: InstallArgs) -> int:
    import socket

    from ripplecp_policy import hook_install

    state = (args.state or _project_state(args.project, args.scope)).resolve()
    conf = _config(args, state)
    _check_config(conf)
    if conf.port is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            conf.port = s.getsockname()[1]
    conf.idle_s = args.idle_s
    conf.write(state)
    _check_config(conf, state=state)  # the model kept in the state: the server's first start
    added = hook_install.install(args.runtime, args.scope, state, args.project.resolve(),
                                 port=conf.port, python=conf.python)
    where = hook_install.config_file(args.runtime, args.scope, args.project.resolve())
    print(f"{PROG}: {'installed ' + ', '.join(added) if added else 'already installed'} "
          f"({args.runtime}, {where}); server state {state}")
    return 0


@dataclass(frozen=True)
class UninstallArgs:
    """Remove exactly the hooks `advise install` wrote (and stop the server)."""

    runtime: Literal["claude-code", "codex"] | None = None
    """only this runtime's hooks (default: all)"""
    scope: Literal["project", "user"] = "project"
    """the scope they were installed at"""
    project: Path = opt(Path("."), check=existing_dir, metavar="DIR")
    """the project folder (scope project)"""
    state: Path | None = opt(None, metavar="DIR")
    """the server's state folder (default: the scope's)"""


def uninstall_main(args: UninstallArgs) -> int:
    from ripplecp_policy import hook_install

    state = (args.state or _project_state(args.project, args.scope)).resolve()
    removed = hook_install.uninstall(state, args.runtime)
    try:
        request(state, "POST", "/v1/shutdown", timeout=5.0)
    except OSError:
        pass
    print(f"{PROG}: removed {len(removed)} hook(s)" + "".join(f"\n  {r}" for r in removed))
    return 0


@dataclass(frozen=True)
class CheckArgs:
    """Check an advisor set-up without changing anything: the model loads, the stores exist,
    the hooks are installed. Exit 2 with one line naming the first problem."""

    state: Path | None = opt(None, metavar="DIR")
    """the server's state folder (default: the scope's)"""
    runtime: Literal["claude-code", "codex"] | None = None
    """check this runtime's hooks (default: every one recorded)"""
    scope: Literal["project", "user"] = "project"
    """the scope of the default state folder"""
    project: Path = opt(Path("."), check=existing_dir, metavar="DIR")
    """the project folder (scope project)"""
    model: str | None = opt(None, metavar="URI")
    """check this model instead of server.json's"""
    mlruns: Path | None = opt(None, metavar="DIR")
    """the MLflow store of runs:/ and models:/ URIs"""
    store: Path | None = opt(None, metavar="DIR")
    """the checkpoint store"""
    hooks: bool = True
    """check that the hooks are installed (--no-hooks: the model and stores only)"""


def check_main(args: CheckArgs) -> int:
    from ripplecp_policy import hook_install

    state = (args.state or _project_state(args.project, args.scope)).resolve()
    if args.model is not None:
        conf = ServerConfig(model=args.model)
        conf.mlruns = str(args.mlruns) if args.mlruns is not None else None
        conf.store = str(args.store) if args.store is not None else None
    else:
        conf = ServerConfig.read(state)
        if args.mlruns is not None:
            conf.mlruns = str(args.mlruns)
        if args.store is not None:
            conf.store = str(args.store)
    if conf.model.startswith(("runs:/", "models:/")) and conf.mlruns is None:
        from ripplecp_policy.tracking import mlruns_root

        if not (mlruns_root() / "mlflow.db").is_file():
            raise ValueError(f"model {conf.model}: no MLflow store at {mlruns_root()} (no mlflow.db); "
                             "give --mlruns")
    # the state's own model: its kept copy is brought up to date as well
    model = _check_config(conf, state=state if args.model is None and state.is_dir() else None)
    if args.hooks:
        missing = hook_install.missing(state, args.runtime)
        if missing:
            raise ValueError(f"hooks not installed: {missing[0]}")
    print(f"{PROG}: ok: model {model.uri} ({model.policy.name}), budget "
          f"{model.config.get('budget_kind')}:{model.config.get('budget_amount'):g}"
          + (f", store {conf.store}" if conf.store else "")
          + ("" if not args.hooks else f", hooks installed ({state})"))
    return 0


@dataclass(frozen=True)
class StatusArgs:
    """Each session the server follows (or, with no server up, each session log of the state):
    decisions, checkpoints, budget left, out-of-range share, flagged above --flag."""

    state: Path | None = opt(None, metavar="DIR")
    """the server's state folder (default: the scope's)"""
    scope: Literal["project", "user"] = "project"
    """the scope of the default state folder"""
    project: Path = opt(Path("."), check=existing_dir, metavar="DIR")
    """the project folder (scope project)"""
    flag: float | None = opt(None, min=0, max=1)
    """flag a session whose features are out of the training range more than this share
    (default: server.json's, 0.25)"""
    json: bool = False
    """print the status as JSON"""


def _status_from_logs(state: Path, flag: float) -> list[dict[str, Any]]:
    from ripplecp_policy.advisor import read_decisions

    rows = []
    for log in sorted((state / "sessions").glob("*.jsonl")):
        recs = read_decisions(log)
        decided = [r for r in recs if r.get("boundary") is not None]
        ood = [r["out_of_range"] for r in decided if r.get("out_of_range") is not None]
        share = sum(ood) / len(ood) if ood else None
        rows.append({"session": recs[-1]["session"] if recs else log.stem, "runtime": "-",
                     "log": str(log), "decisions": len(decided),
                     "checkpoints": sum(r.get("decision") == "CP" for r in decided),
                     "errors": len(recs) - len(decided),
                     "remaining": decided[-1]["remaining_budget"] if decided else None,
                     "budget": "-", "out_of_range": share,
                     "flagged": share is not None and share > flag, "mismatch": None})
    return rows


def status_main(args: StatusArgs) -> int:
    state = (args.state or _project_state(args.project, args.scope)).resolve()
    try:
        conf_flag = ServerConfig.read(state).ood_flag
    except (FileNotFoundError, ValueError):
        conf_flag = 0.25
    flag = args.flag if args.flag is not None else conf_flag
    try:
        status, body = request(state, "GET", "/v1/status", timeout=10.0)
        info = json.loads(body) if status == 200 else {}
        rows = info.get("sessions", [])
        for r in rows:
            r["flagged"] = r.get("out_of_range") is not None and r["out_of_range"] > flag
        head = f"server pid {info.get('pid')} up, model {info.get('model')}"
    except OSError:
        rows = _status_from_logs(state, flag)
        head = f"no server up for {state}; from the session logs"
    if args.json:
        print(json.dumps({"state": str(state), "sessions": rows}, indent=1))
        return 0
    print(f"{PROG}: {head}")
    print(f"{'session':<38} {'runtime':<12} {'decided':>7} {'CP':>3} {'left':>7} {'out of range':>12}")
    for r in rows:
        left = "-" if r.get("remaining") is None else f"{r['remaining']:g}"
        ood = "-" if r.get("out_of_range") is None else f"{r['out_of_range']:.0%}"
        mark = "  FLAGGED" if r.get("flagged") else ""
        print(f"{str(r['session'])[:38]:<38} {r['runtime']:<12} {r['decisions']:>7} "
              f"{r['checkpoints']:>3} {left:>7} {ood:>12}{mark}"
              + (f"  ({r['mismatch']})" if r.get("mismatch") else ""))
    if not rows:
        print("(no sessions)")
    return 0


COMMANDS = {"serve": (ServeArgs, serve_main), "check": (CheckArgs, check_main),
            "status": (StatusArgs, status_main), "install": (InstallArgs, install_main),
            "uninstall": (UninstallArgs, uninstall_main)}


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the options (everything after a lone ``--`` is the command to follow) and run."""
    words = list(sys.argv[1:] if argv is None else argv)
    if words and words[0] in SUBCOMMANDS:
        return run_subcommands(COMMANDS, words, prog=PROG)
    command: list[str] = []
    if "--" in words:
        cut = words.index("--")
        words, command = words[:cut], words[cut + 1:]

    def start(args: Args) -> int:
        _check_modes(args, command)
        if args.hook is not None:
            return hook(args)
        if args.input is not None:
            return replay(args)
        return follow(args, command)

    return run(start, Args, words, prog=PROG)


if __name__ == "__main__":
    sys.exit(main())
