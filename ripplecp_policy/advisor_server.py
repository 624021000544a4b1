"""One long-lived advisor for every session: ``python -m ripplecp_policy.advise serve``.

A hook that starts Python, imports the policy stack and loads the model on every tool call
costs seconds per call. The server pays that once: it holds the model and, per session, an
:class:`~ripplecp_policy.advisor.Advisor` (its own budget, decision log, checkpoint store and
workspace) and the place it has read the session's transcript up to
(:class:`~ripplecp_policy.advisor.TranscriptTail`), so a hook call costs one request and the
transcript's new lines.

Where it listens: a Unix socket (its folder private to the user) and, for runtimes whose
hooks speak HTTP (Claude Code's ``http`` hooks), ``127.0.0.1`` on a port — never another
interface; a TCP request must carry the token of the state folder (``X-Ripplecp-Token``).

The state folder (``--state``): ``server.json`` (the server's configuration, written by
``advise install`` or the first wrapper call), ``token``, ``server.lock`` (held by the one
running server), ``server.log``, and ``sessions/<session>.jsonl``, each session's decision
log unless the caller names another.

Requests (HTTP/1.1, JSON):

- ``POST /v1/hook/<runtime>``: a hook's payload as the runtime sends it (``session_id``,
  ``transcript_path``, ``cwd``, ``hook_event_name``); the query may name ``budget``,
  ``log``, ``store``, ``workspace`` for the session. The answer is ``200`` with an empty
  body (Claude Code: success, nothing to add), whatever happened: every failure is a logged
  SKIP (fail-open).
- ``POST /v1/stream?session=…&format=…``: log lines of a session the caller follows itself
  (the ``codex exec`` wrapper; ``long=N`` / ``behind=N``: lines it did not send before these,
  over the line limit or while it fell behind, logged SKIP with the reason);
  ``POST /v1/finish?session=…`` ends it.
- ``GET /v1/status``: every session's decisions, checkpoints, budget left and out-of-range
  share; ``GET /v1/ping``; ``POST /v1/shutdown``.

Bounds: a request body of at most 32 MiB read within 10 s, a transcript of at most
``max_transcript_mb`` followed, at most 8 MiB of new transcript and 5 s of work per call
(the rest waits for the next call), one call at a time per session (a boundary is decided
once), and the server exits after ``idle_s`` without a request.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import http.server
import json
import os
import re
import secrets
import socket
import socketserver
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ripplecp_policy.advisor import (
    CP,
    Advisor,
    AdvisorModel,
    TranscriptError,
    TranscriptTail,
    load_model,
    read_decisions,
    resolve_budget,
    session_lock,
    store_for,
)
from ripplecp_policy.advisor_lines import MAX_BODY, MAX_LINE_BYTES
from ripplecp_policy.advisor_state import ServerConfig, token_of
from ripplecp_policy.budget import BudgetSpec
from ripplecp_policy.hook_client import socket_path

__all__ = ["HOOK_RUNTIMES", "AdvisorServer", "ServerConfig", "serve", "socket_path"]

#: the runtimes whose hook payload names a transcript the advisor reads, and its log format
HOOK_RUNTIMES: dict[str, str | None] = {
    "claude-code": "claude-code-session",
    "codex": "codex-rollout",
    # same command-hook contract (JSON on stdin, exit 0), but no line reader for their
    # transcripts yet: each call is logged SKIP saying so
    "gemini": None,
    "openhands": None,
}
#: hook events at which the runtime can checkpoint now (a tool returned, a turn ended)
DECIDE_EVENTS = frozenset({"PostToolUse", "PostToolUseFailure", "Stop", "SubagentStop", "AfterTool"})
END_EVENTS = frozenset({"SessionEnd"})
CALL_BYTES = 8 * 2**20
CALL_SECONDS = 5.0
REQUEST_TIMEOUT_S = 10.0
#: lines of a stream its caller did not send (``/v1/stream?long=N&behind=M``), and why
STREAM_SKIPS = {"long": f"over the {MAX_LINE_BYTES / 2**20:g} MiB line limit",
                "behind": "the advisor fell behind the command's output"}
#: a session without a call for this long is ended (memory stays bounded by the live ones)
SESSION_IDLE_S = 3600.0


def _count(text: str | None) -> int:
    """A count from the query (absent or not a count: 0)."""
    return int(text) if text and text.isdigit() and len(text) < 19 else 0


def _safe_name(session: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,100}", session):
        return session
    return "s-" + hashlib.sha256(session.encode()).hexdigest()[:24]


@dataclass
class Session:
    """One followed session: its advisor, its transcript tail, its lock."""

    key: str
    runtime: str
    log: Path
    advisor: Advisor
    tail: TranscriptTail | None
    lock: threading.Lock
    backlog: list[bytes] = dataclasses.field(default_factory=list)
    calls: int = 0
    last_seen: float = dataclasses.field(default_factory=time.time)


class AdvisorServer:
    """The sessions of one model, and what each request does to them (see the module doc)."""

    def __init__(self, state: Path, config: ServerConfig, model: AdvisorModel) -> None:
        self.state = Path(state)
        self.config = config
        self.model = model
        self.sessions: dict[str, Session] = {}
        self.ended: dict[str, dict[str, Any]] = {}  # summaries of ended sessions
        self._lock = threading.Lock()
        self.last_request = time.monotonic()
        self.started = time.time()
        self.requests = 0

    # -- sessions ---------------------------------------------------------------------------
    def _session(self, runtime: str, session: str, params: Mapping[str, str], *, cwd: str | None,
                 source: str, fmt: str | None, catch_up: bool, name: str | None = None) -> Session:
        key = f"{runtime}:{session}"
        with self._lock:
            sess = self.sessions.get(key)
            if sess is not None:
                sess.last_seen = time.time()
                return sess
            log = Path(params.get("log") or self.state / "sessions" / f"{_safe_name(session)}.jsonl")
            spec = params.get("budget") or self.config.budget
            budget = resolve_budget(BudgetSpec.parse(spec) if spec else None, self.model.config)
            workspace = Path(params.get("workspace") or cwd or Path.cwd()).resolve()
            store_root = params.get("store") or self.config.store
            store = store_for(store_root, workspace) if store_root else None
            adv = Advisor(self.model, budget, format=fmt, log=log, store=store, workspace=workspace,
                          session=name, source=source,
                          prior=read_decisions(log, name) if name else (),
                          catch_up=catch_up, runtime=runtime)
            tail = TranscriptTail(source, max_bytes=int(self.config.max_transcript_mb * 2**20)) \
                if catch_up else None
            sess = self.sessions[key] = Session(key, runtime, log, adv, tail, threading.Lock())
            return sess

    def hook(self, runtime: str, payload: Mapping[str, Any], params: Mapping[str, str]) -> None:
        """One hook call: read the transcript's new lines, decide the newest boundary."""
        fmt = HOOK_RUNTIMES[runtime]
        session = str(payload.get("session_id") or "")
        transcript = payload.get("transcript_path")
        event = str(payload.get("hook_event_name") or "PostToolUse")
        if not session:
            raise ValueError("hook payload without session_id")
        sess = self._session(runtime, session, params, cwd=payload.get("cwd"),
                             source=str(transcript or "<none>"), fmt=fmt, catch_up=True, name=session)
        with sess.lock, session_lock(sess.log):
            sess.calls += 1
            adv = sess.advisor
            if fmt is None:
                adv.error(f"error: {runtime}: no line reader for its transcripts; not followed")
                return
            if not transcript:
                adv.error("error: hook payload without transcript_path")
                return
            if str(sess.tail.path) != str(transcript):  # type: ignore[union-attr]
                adv.error(f"error: transcript changed from {sess.tail.path} to {transcript}")  # type: ignore[union-attr]
                return
            try:
                sess.backlog += sess.tail.read(limit=CALL_BYTES)  # type: ignore[union-attr]
            except TranscriptError as exc:
                adv.error(f"error: {exc}")
                return
            deadline = time.monotonic() + CALL_SECONDS
            fed = 0
            for line in sess.backlog:
                adv.feed(line)
                fed += 1
                if time.monotonic() > deadline:
                    break
            del sess.backlog[:fed]
            if sess.tail.dropped:  # type: ignore[union-attr]
                adv.error(f"error: transcript {transcript}: {sess.tail.dropped} line(s) over "  # type: ignore[union-attr]
                          "the line limit dropped")
                sess.tail.dropped = 0  # type: ignore[union-attr]
            if event in DECIDE_EVENTS and not sess.backlog:
                adv.decide_pending()
            if event in END_EVENTS:
                self._end(sess)

    def stream(self, params: Mapping[str, str], body: bytes) -> dict[str, Any]:
        """Lines of a session the caller follows live (the exec wrapper): every boundary is
        decided as it arrives; lines sent ``late=1`` (they came while no server was up) are
        logged SKIP, ``past``: the runtime is no longer at those boundaries."""
        key = params.get("session") or ""
        if not key:
            raise ValueError("stream without session")
        sess = self._session("stream", key, params, cwd=params.get("workspace"),
                             source=params.get("source") or "stream", fmt=params.get("format"),
                             catch_up=False, name=params.get("name"))
        late = params.get("late") == "1"
        made = []
        with sess.lock, session_lock(sess.log):
            sess.calls += 1
            adv = sess.advisor
            adv.catch_up = late
            for why, n in ((STREAM_SKIPS[k], _count(params.get(k))) for k in STREAM_SKIPS):
                if n:
                    adv.error(f"error: stream: {n} line(s) not followed: {why}")
            for line in body.splitlines():
                made += adv.feed(line, arrival_s=time.time())
            if late:
                made += adv.skip_pending("past: the line came before the advisor server was up")
                adv.catch_up = False
        return {"decisions": len(made), "checkpoints": sum(d.decision == CP for d in made)}

    def finish(self, params: Mapping[str, str]) -> dict[str, Any]:
        key = f"stream:{params.get('session') or ''}"
        with self._lock:
            sess = self.sessions.get(key)
        if sess is None:
            return {"decisions": 0}
        with sess.lock:
            self._end(sess)
        return self._summary(sess)

    def _end(self, sess: Session) -> None:
        sess.advisor.finish()
        summary = dict(self._summary(sess), ended=True)
        with self._lock:
            self.sessions.pop(sess.key, None)
            self.ended[sess.key] = summary
            while len(self.ended) > 1000:  # the oldest ended sessions leave the status
                self.ended.pop(next(iter(self.ended)))

    def _summary(self, sess: Session) -> dict[str, Any]:
        adv = sess.advisor
        decided = [d for d in adv.decisions if d.boundary is not None]
        ood = [d.out_of_range for d in decided if d.out_of_range is not None]
        share = sum(ood) / len(ood) if ood else None
        return {"session": adv.session, "runtime": sess.runtime, "log": str(sess.log),
                "calls": sess.calls, "decisions": len(decided),
                "checkpoints": len(adv.checkpoints),
                "errors": sum(d.boundary is None for d in adv.decisions),
                "budget": adv.budget.label(), "remaining": adv.remaining,
                "out_of_range": share,
                "flagged": share is not None and share > self.config.ood_flag,
                "mismatch": adv.mismatch, "last_seen": sess.last_seen}

    def status(self) -> dict[str, Any]:
        with self._lock:
            sessions = list(self.sessions.values())
            ended = [s for k, s in self.ended.items() if k not in self.sessions]
        return {"pid": os.getpid(), "model": self.model.uri, "started": self.started,
                "requests": self.requests, "ood_flag": self.config.ood_flag,
                "sessions": ended + [dict(self._summary(s), ended=False) for s in sessions]}

    def evict_idle(self, max_idle_s: float) -> int:
        """End the sessions without a call for ``max_idle_s`` (their state is in their logs: a
        later call rebuilds it); how many ended."""
        now = time.time()
        with self._lock:
            idle = [s for s in self.sessions.values() if now - s.last_seen > max_idle_s]
        for sess in idle:
            if sess.lock.acquire(blocking=False):
                try:
                    self._end(sess)
                finally:
                    sess.lock.release()
        return len(idle)

    def close(self) -> None:
        with self._lock:
            sessions = list(self.sessions.values())
        for sess in sessions:
            with sess.lock:
                sess.advisor.finish()


class _Handler(http.server.BaseHTTPRequestHandler):
    """One request; errors are answered 200 (fail-open) except malformed requests (4xx)."""

    protocol_version = "HTTP/1.1"
    timeout = REQUEST_TIMEOUT_S
    server: Any

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass

    def _reply(self, code: int, body: bytes = b"", ctype: str = "application/json") -> None:
        self.send_response(code)
        if body:
            self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _body(self) -> bytes | None:
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            n = -1
        if n < 0 or n > MAX_BODY:
            self.close_connection = True
            self._reply(413 if n > MAX_BODY else 400)
            return None
        return self.rfile.read(n) if n else b""

    def _allowed(self) -> bool:
        token = getattr(self.server, "token", None)
        if token is None:  # the Unix socket: its folder is private to the user
            return True
        if secrets.compare_digest(self.headers.get("X-Ripplecp-Token") or "", token):
            return True
        self.close_connection = True
        self._reply(403)
        return False

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        app: AdvisorServer = self.server.app
        app.last_request = time.monotonic()
        if not self._allowed():
            return
        path = urllib.parse.urlsplit(self.path).path
        if path == "/v1/status":
            self._reply(200, json.dumps(app.status()).encode())
        elif path == "/v1/ping":
            self._reply(200, json.dumps({"ok": True, "pid": os.getpid(), "model": app.model.uri}).encode())
        else:
            self._reply(404)

    def do_POST(self) -> None:  # noqa: N802
        app: AdvisorServer = self.server.app
        app.last_request = time.monotonic()
        app.requests += 1
        body = self._body()
        if body is None or not self._allowed():
            return
        url = urllib.parse.urlsplit(self.path)
        params = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        parts = url.path.strip("/").split("/")
        try:
            if parts[:2] == ["v1", "hook"] and len(parts) == 3 and parts[2] in HOOK_RUNTIMES:
                try:
                    payload = json.loads(body)
                    if not isinstance(payload, dict):
                        raise ValueError("not a JSON object")
                except ValueError as exc:
                    raise ValueError(f"hook payload: {exc}") from None
                app.hook(parts[2], payload, params)
                self._reply(200)
            elif parts == ["v1", "stream"]:
                self._reply(200, json.dumps(app.stream(params, body)).encode())
            elif parts == ["v1", "finish"]:
                self._reply(200, json.dumps(app.finish(params)).encode())
            elif parts == ["v1", "shutdown"]:
                self._reply(200)
                threading.Thread(target=self.server.stop_all, daemon=True).start()
            else:
                self._reply(404)
        except Exception as exc:  # fail-open: the agent goes on; the reason goes to the server log
            print(f"advisor server: {self.path.split('?')[0]}: {type(exc).__name__}: "
                  f"{' '.join(str(exc).split())[:300]}", file=sys.stderr, flush=True)
            self._reply(200)


class _TCPServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self) -> tuple[socket.socket, Any]:
        request, _ = super().get_request()
        return request, ("unix", 0)  # http.server expects a (host, port) address


def _kept(state: Path, config: ServerConfig) -> Path | None:
    """Where the server keeps its model out of the store (None: always read from it)."""
    from ripplecp_policy.export import STORE_SCHEMES, cached_model
    from ripplecp_policy.tracking import mlruns_root

    if not config.model.startswith(STORE_SCHEMES):
        return None
    store = Path(config.mlruns).expanduser() if config.mlruns else mlruns_root()
    return cached_model(config.model, store, state / "models")


def _recheck(app: AdvisorServer, stop: threading.Event, kept: Path, before: str) -> None:
    """A server started from its kept model reads the store again: the same files keep
    serving; changed ones serve the sessions that start from now on; a model gone from the
    store (or no longer loading) stops the server, saying why in its log — the next start
    then refuses it in one line, as a start from the store would have.

    The store is read by a child process at nice 19 (the agent is starting beside it): in
    a thread of this process MLflow's imports would hold the GIL the hooks' calls need,
    and a thread niced by the OS while holding it would stall them."""
    import subprocess

    config = app.config
    code = ("import os, sys; os.nice(19)\n"
            "from ripplecp_policy.advisor import load_model\n"
            "try:\n"
            "    load_model(sys.argv[1], mlruns=sys.argv[2] or None, allow_pickle=sys.argv[3] == '1',"
            " cache=sys.argv[4], refresh=True)\n"
            "except Exception as exc:\n"
            "    sys.exit(f'{type(exc).__name__}: ' + ' '.join(str(exc).split())[:300])\n")
    try:
        p = subprocess.run([sys.executable, "-c", code, config.model, config.mlruns or "",
                            "1" if config.allow_pickle else "0", str(app.state / "models")],
                           capture_output=True, text=True, timeout=600,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:  # not known either way: serve on
        print(f"advisor server: {config.model}: its store was not read again: {exc}",
              file=sys.stderr, flush=True)
        return
    if p.returncode != 0:
        why = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
        print(f"advisor server: {config.model} no longer loads from its store: {why}; "
              "stopping", file=sys.stderr, flush=True)
        stop.set()
        return
    if _folder_digest(kept) != before:
        try:  # the kept copy is the store's new files now: read without MLflow
            app.model = load_model(config.model, mlruns=config.mlruns,
                                   allow_pickle=config.allow_pickle, cache=app.state / "models")
        except Exception as exc:  # noqa: BLE001 - the new files do not load here: stop
            print(f"advisor server: {config.model} changed in its store and does not load: "
                  f"{type(exc).__name__}: {exc}; stopping", file=sys.stderr, flush=True)
            stop.set()
            return
        print(f"advisor server: {config.model} changed in its store; sessions from now on "
              "follow the new files", file=sys.stderr, flush=True)


def _folder_digest(folder: Path) -> str:
    """The names and bytes of a model folder's files, as one digest ("" when it is gone)."""
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else ():
        h.update(f"{f.relative_to(folder)}\0{f.stat().st_size}\0".encode())
        h.update(f.read_bytes())
    return h.hexdigest()


@contextlib.contextmanager
def _single(state: Path) -> Iterator[bool]:
    """Hold ``server.lock``: True when this process is the state's one server."""
    fd = os.open(state / "server.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield True
    finally:
        os.close(fd)


def serve(state: Path, config: ServerConfig, *, ready: threading.Event | None = None,
          write_config: bool = False) -> int:
    """Load the model, listen on the state's socket (and 127.0.0.1:``config.port``), serve
    until ``idle_s`` without a request or a shutdown request. 0 when it ran or another server
    already holds the state; a model that does not load is a ValueError in one line, with
    nothing created (``write_config``: ``config`` is written to the state once it loaded).

    A model named by a URI that always means the same files is kept in the state once read
    from its store (``models/``), and the next start serves that copy at once — MLflow's
    imports and store queries took 1.8 s of a 3.5 s start — while the store is read again
    in the background (:func:`_recheck`)."""
    state = Path(state).resolve()
    kept = _kept(state, config)
    before = _folder_digest(kept) if kept is not None and kept.is_dir() else None
    try:  # (a state not made yet keeps nothing: it is made private to the user, below)
        model = load_model(config.model, mlruns=config.mlruns, allow_pickle=config.allow_pickle,
                           cache=state / "models" if state.is_dir() else None)
    except Exception as exc:
        raise ValueError(f"model {config.model} does not load: "
                         f"{' '.join(str(exc).split())[:300]}") from None
    if write_config:
        config.write(state)
    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    with _single(state) as mine:
        if not mine:
            return 0
        app = AdvisorServer(state, config, model)
        stop = threading.Event()
        if before is not None:  # served from the kept copy: the store is asked again
            threading.Thread(target=_recheck, args=(app, stop, kept, before), daemon=True).start()
        sock = Path(socket_path(state))
        with contextlib.suppress(FileNotFoundError):
            sock.unlink()
        old = os.umask(0o077)
        try:
            servers: list[Any] = [_UnixServer(str(sock), _Handler)]
        finally:
            os.umask(old)
        if config.port is not None:
            tcp = _TCPServer(("127.0.0.1", int(config.port)), _Handler)
            tcp.token = token_of(state)
            servers.append(tcp)

        def stop_all() -> None:
            stop.set()

        for srv in servers:
            srv.app = app
            srv.stop_all = stop_all
            threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.2},
                             daemon=True).start()
        if ready is not None:
            ready.set()
        try:
            while not stop.wait(1.0):
                if time.monotonic() - app.last_request > config.idle_s:
                    break
                app.evict_idle(SESSION_IDLE_S)
        except KeyboardInterrupt:
            pass
        for srv in servers:
            srv.shutdown()
            srv.server_close()
        with contextlib.suppress(FileNotFoundError):
            sock.unlink()
        with contextlib.suppress(FileNotFoundError):
            (state / "spawned").unlink()  # the next client starts a new one at once
        app.close()
    return 0
