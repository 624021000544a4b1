"""The loopback model server: real agent runtimes talk to it as to their model API, offline.

It binds a loopback address only (any other is refused), answers

* ``POST /v1/responses``         OpenAI Responses with SSE (Codex CLI),
* ``POST /v1/messages``          Anthropic Messages with SSE (Claude Code; ``HEAD /`` too),
* ``POST /v1/chat/completions``  OpenAI chat completions, plain or streamed (litellm,
  mini-swe-agent), and ``GET /v1/models``,
* ``POST /v1beta/models/{model}:streamGenerateContent`` (and ``:generateContent``)  the
  Gemini API, streamed by SSE or not (Gemini CLI),

by reading each request into one normalized conversation, asking the brain for the next step
and rendering it in the request's protocol. It ends itself after ``max_requests`` model
requests, after ``idle_timeout_s`` without a request, or on :meth:`ModelServer.close`.

Bounded against any client (issue 32): a request body is read to at most
``max_body_bytes``, compressed or not (decompressed in bounded steps; 413 past it) and of
at most ``MAX_JSON_VALUES`` JSON values, all bodies in flight together to at most
``max_inflight_bytes`` (503 past it); headers and body must arrive within
``request_timeout_s`` (a half-sent request is closed, so ``idle_timeout_s`` still ends the
server); at most ``max_connections`` connections are served at once (the others get 503
at once), from a listen backlog of ``LISTEN_BACKLOG``. Every malformed request (a bad chunk
size, a negative or huge ``Content-Length``, JSON nested too deeply) gets one 4xx reply,
never a traceback.

Every exchange is written to an append-only audit log (:class:`oracle.store.audit.AuditLog`: one
fsync'd JSONL record with its own sha256 checksum) *before* the answer is sent, so the log
holds every answer a runtime can have consumed. A record carries the sha256 of the request
body and of the response body, and of the normalized transcript; the response digests of a
conversation, in order, are the branch's *observations* for replay validation (the
``(step, source, payload_digest)`` sequence of ``paper/003``: step = the record's ``step``,
source = this server, digest = ``response_sha256``). Headers, and so any key, are never
recorded.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import socket
import sys
import threading
import time
import traceback
import uuid
import zlib
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import zstandard

from oracle.agents.model_server.anthropic_messages import MessagesProtocol
from oracle.agents.model_server.brain import Brain, BrainError, ModelRequest
from oracle.agents.model_server.conversation import Step
from oracle.agents.model_server.gemini import GeminiProtocol
from oracle.agents.model_server.latency import LatencyModel
from oracle.agents.model_server.openai_chat import ChatProtocol
from oracle.agents.model_server.openai_responses import ResponsesProtocol
from oracle.agents.model_server.wire import BadRequest, Reply, WireProtocol, json_reply
from oracle.store.audit import AuditLog

__all__ = ["LISTEN_BACKLOG", "MAX_JSON_VALUES", "PROTOCOLS", "ModelServer", "ServerConfig",
           "check_loopback"]

LISTEN_BACKLOG = 1024
"""Connections the kernel queues before the server accepts them (the stdlib default is 5:
a burst of clients past it is reset)."""
MAX_JSON_VALUES = 2_000_000
"""Most JSON values (an upper bound: its ``{``, ``[`` and ``,`` bytes) a request body may
hold, checked before parsing, so parsing one takes a bounded multiple of its size."""
_LINE_MAX = 8192  # bytes of one chunk-size or trailer line

#: every protocol the server speaks, each on its own paths
PROTOCOLS: tuple[WireProtocol, ...] = (ResponsesProtocol(), MessagesProtocol(), ChatProtocol(),
                                       GeminiProtocol())


def check_loopback(host: str) -> str:
    """``host`` if it is a loopback IP address (``localhost`` reads as 127.0.0.1), else a
    one-line ``ValueError``: the server never listens where another machine can reach it."""
    if host == "localhost":
        return "127.0.0.1"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"model server: host {host!r} is not an IP address; it binds "
                         "loopback only (127.0.0.1 or ::1)") from None
    if not ip.is_loopback:
        raise ValueError(f"model server binds loopback only: {host!r} is not a loopback "
                         "address (use 127.0.0.1 or ::1)")
    return host


@dataclass(frozen=True)
class ServerConfig:
    """How the server listens, logs and ends.

    ``port`` 0 picks a free port. ``audit`` is the audit log's path (none: records are kept
    in memory only). ``max_requests`` counts model requests (not ``HEAD``/``GET`` probes).
    ``latency`` turns on model-latency emulation (off by default). ``run_id`` prefixes every
    record's key (default: a random id). ``models`` are listed by ``GET /v1/models``.
    Bounds (module doc): ``max_body_bytes`` per request body (decompressed),
    ``max_inflight_bytes`` for all bodies being read at once, ``request_timeout_s`` to
    receive one request (and to keep an idle connection), ``max_connections`` at once.
    """

    host: str = "127.0.0.1"
    port: int = 0
    audit: Path | None = None
    max_requests: int | None = None
    idle_timeout_s: float | None = None
    latency: LatencyModel | None = None
    run_id: str | None = None
    models: tuple[str, ...] = ("loopback",)
    max_body_bytes: int = 32 << 20
    max_inflight_bytes: int = 256 << 20
    request_timeout_s: float = 60.0
    max_connections: int = 256

    def __post_init__(self) -> None:
        object.__setattr__(self, "host", check_loopback(self.host))
        if not 0 <= self.port <= 65535:
            raise ValueError(f"model server: port must be 0..65535, got {self.port}")
        if self.max_requests is not None and self.max_requests < 1:
            raise ValueError(f"model server: max_requests must be >= 1, got {self.max_requests}")
        if self.idle_timeout_s is not None and not self.idle_timeout_s > 0:
            raise ValueError("model server: idle_timeout_s must be > 0, got "
                             f"{self.idle_timeout_s}")
        for name in ("max_body_bytes", "max_inflight_bytes", "max_connections"):
            if not (type(getattr(self, name)) is int and getattr(self, name) >= 1):
                raise ValueError(f"model server: {name} must be an integer >= 1, got "
                                 f"{getattr(self, name)!r}")
        if not self.request_timeout_s > 0:
            raise ValueError("model server: request_timeout_s must be > 0, got "
                             f"{self.request_timeout_s}")


class TooLarge(BadRequest):
    """A request body past the server's bounds (answered with HTTP 413)."""


class _Busy(BadRequest):
    """Bodies in flight hold the whole memory budget (answered with HTTP 503)."""


_BUSY_BODY = (b'{"type":"error","error":{"type":"overloaded","message":'
              b'"too many connections at once; retry"}}')
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
         b"Retry-After: 1\r\nConnection: close\r\nContent-Length: "
         + str(len(_BUSY_BODY)).encode() + b"\r\n\r\n" + _BUSY_BODY)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, address: tuple[str, int], owner: ModelServer) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.owner = owner
        self.active = 0  # connections being served (guarded by owner._lock)
        # socket -> monotonic deadline by which its request must have been received
        self.deadlines: dict[socket.socket, float] = {}
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve the connection in a thread, or answer 503 at once when
        ``max_connections`` are being served (a thread per connection, bounded)."""
        with self.owner._lock:
            full = self.active >= self.owner.config.max_connections
            if not full:
                self.active += 1
                self.deadlines[request] = time.monotonic() + self.owner.config.request_timeout_s
        if full:
            with contextlib.suppress(OSError):
                request.settimeout(1.0)
                request.sendall(_BUSY)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(request)

    def _release(self, request: Any) -> None:
        with self.owner._lock:
            self.active -= 1
            self.deadlines.pop(request, None)

    def reap(self) -> None:
        """Close the connections whose request did not arrive in time (a client that sends
        headers or a body byte by byte, or never finishes: its thread ends)."""
        now = time.monotonic()
        with self.owner._lock:
            late = [s for s, t in self.deadlines.items() if t < now]
            for s in late:
                del self.deadlines[s]
        for s in late:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A runtime that went away mid-request (killed: a fail-stop), or a connection
        closed for its timeout, is not an error."""
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ripplecp-model-server"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        """Quiet: the audit log is the record."""

    def setup(self) -> None:
        self.timeout = self.server.owner.config.request_timeout_s  # each read and write
        super().setup()

    def arm(self, armed: bool) -> None:
        """Start (or stop, while the brain answers) this connection's receive deadline."""
        with self.server.owner._lock:
            if armed:
                self.server.deadlines[self.connection] = (
                    time.monotonic() + self.server.owner.config.request_timeout_s)
            else:
                self.server.deadlines.pop(self.connection, None)

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        self.server.owner.handle(self)

    do_GET = do_HEAD = do_POST


def _line(h: BaseHTTPRequestHandler, what: str) -> bytes:
    line = h.rfile.readline(_LINE_MAX + 1)
    if len(line) > _LINE_MAX:
        raise BadRequest(f"chunked body: {what} line longer than {_LINE_MAX} bytes")
    return line


def _read_exactly(h: BaseHTTPRequestHandler, n: int, what: str) -> bytes:
    data = h.rfile.read(n)
    if len(data) < n:
        raise BadRequest(f"{what}: the connection ended {n - len(data)} bytes early")
    return data


def _read_body(h: BaseHTTPRequestHandler, limit: int, take: Any) -> bytes:
    """The request body, decoded, of at most ``limit`` bytes (TooLarge past it); ``take(n)``
    reserves ``n`` more bytes of the server's in-flight budget (_Busy when it is spent)."""
    te = h.headers.get("Transfer-Encoding", "").lower()
    if te == "chunked":
        parts, total = [], 0
        while True:
            line = _line(h, "chunk size")
            try:
                size = int(line.split(b";")[0].strip() or b"0", 16)
            except ValueError:
                raise BadRequest(f"chunked body: bad chunk size {line[:40]!r}") from None
            if size < 0:
                raise BadRequest(f"chunked body: negative chunk size {line[:40]!r}")
            if size == 0:
                for _ in range(100):  # trailers, up to the blank line
                    if _line(h, "trailer") in (b"\r\n", b"\n", b""):
                        break
                else:
                    raise BadRequest("chunked body: more than 100 trailer lines")
                break
            total += size
            if total > limit:
                raise TooLarge(f"request body: more than {limit} bytes (chunked)")
            take(size)
            parts.append(_read_exactly(h, size, "chunked body"))
            _line(h, "chunk end")
        raw = b"".join(parts)
    elif te not in ("", "identity"):
        raise BadRequest(f"header Transfer-Encoding: unsupported {te!r}")
    else:
        text = h.headers.get("Content-Length") or "0"
        try:
            length = int(text)
        except ValueError:
            raise BadRequest("header Content-Length: not a number") from None
        if length < 0:
            raise BadRequest(f"header Content-Length: negative ({length})")
        if length > limit:
            raise TooLarge(f"header Content-Length: {length} bytes, more than the {limit} "
                           "this server reads")
        take(length)
        raw = _read_exactly(h, length, "request body") if length else b""
    encoding = h.headers.get("Content-Encoding", "").lower()
    if encoding in ("", "identity"):
        return raw
    if encoding not in ("gzip", "deflate", "zstd"):
        raise BadRequest(f"header Content-Encoding: unsupported encoding {encoding!r}")
    out = bytearray()
    try:  # inflated in bounded steps: refused at the first byte past the limit
        if encoding == "zstd":
            reader = zstandard.ZstdDecompressor().stream_reader(raw)
            while chunk := reader.read(min(1 << 20, limit + 1 - len(out))):
                take(len(chunk))
                out += chunk
                if len(out) > limit:
                    break
        else:
            d = zlib.decompressobj(31 if encoding == "gzip" else 15)
            chunk = d.decompress(raw, 1 << 20)
            while chunk:
                take(len(chunk))
                out += chunk
                if len(out) > limit:
                    break
                chunk = d.decompress(d.unconsumed_tail, 1 << 20)
            if len(out) <= limit and not d.eof:
                raise BadRequest(f"header Content-Encoding: body is not valid {encoding}: "
                                 "truncated")
    except (zstandard.ZstdError, zlib.error) as exc:
        raise BadRequest(f"header Content-Encoding: body is not valid {encoding}: {exc}") from None
    if len(out) > limit:
        raise TooLarge(f"request body: inflates to more than the {limit} bytes this server "
                       f"reads ({encoding})")
    return bytes(out)


def _error(status: int, kind: str, message: str) -> Reply:
    # one shape both OpenAI and Anthropic clients read: {"error": {"type", "message"}}
    return json_reply({"type": "error", "error": {"type": kind, "message": message}},
                      status=status)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _send(h: BaseHTTPRequestHandler, reply: Reply) -> None:
    """Write the reply (no body for HEAD); a runtime that went away is not an error."""
    try:
        h.send_response(reply.status)
        h.send_header("Content-Type", reply.content_type)
        h.send_header("Content-Length", str(len(reply.body)))
        if reply.content_type.startswith("text/event-stream"):
            h.send_header("Cache-Control", "no-cache")
        if h.close_connection:
            h.send_header("Connection", "close")
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(reply.body)
        h.wfile.flush()
    except (BrokenPipeError, ConnectionResetError):
        h.close_connection = True  # the runtime went away (killed): nothing to answer


class ModelServer:
    """A loopback model server around a brain; a thread in this process once started.

    Use as a context manager, or :meth:`start` / :meth:`close`. :attr:`url` is the base URL
    (``http://127.0.0.1:PORT``); runtimes want ``url + "/v1"`` (OpenAI) or ``url``
    (Anthropic). :attr:`exchanges` holds every audit record of this server, also when no
    audit file is configured.
    """

    def __init__(self, brain: Brain, config: ServerConfig | None = None) -> None:
        config = config or ServerConfig()
        self.brain = brain
        self.config = config
        self.run_id = config.run_id or uuid.uuid4().hex[:12]
        self.exchanges: list[dict[str, Any]] = []
        self._audit = AuditLog(Path(config.audit)) if config.audit is not None else None
        self._lock = threading.Lock()
        # a server that reuses a run id on the same log continues its numbering
        self._seq = sum(1 for r in self._audit.records() if r.get("server") == self.run_id) \
            if self._audit is not None else 0
        self._served = 0
        self._inflight = 0
        self._last = time.monotonic()
        self._ending = False
        self._quota_reached = False
        self._ended = threading.Event()
        self._thread: threading.Thread | None = None
        self._watchdog: threading.Thread | None = None
        self._inflight_bytes = 0  # body bytes being read or held now (max_inflight_bytes)
        self._httpd = _HTTPServer((config.host, config.port), self)

    # ------------------------------------------------------------------ lifetime
    @property
    def host(self) -> str:
        return str(self._httpd.server_address[0])

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def requests_served(self) -> int:
        """Model requests answered so far."""
        return self._served

    @property
    def ended(self) -> bool:
        return self._ended.is_set()

    def start(self) -> ModelServer:
        """Serve in a background thread; returns self."""
        if self._thread is not None:
            raise RuntimeError("model server already started")
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05},
                                        name=f"model-server-{self.port}", daemon=True)
        self._thread.start()
        self._watchdog = threading.Thread(target=self._watch, daemon=True,
                                          name=f"model-server-watch-{self.port}")
        self._watchdog.start()
        return self

    def close(self) -> None:
        """Stop serving and release the port (idempotent)."""
        self._stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the server has ended; False if ``timeout`` passed first."""
        return self._ended.wait(timeout)

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _stop(self) -> None:
        with self._lock:
            if self._ending:
                started = False
            else:
                self._ending = started = True
        if not started:
            self._ended.wait()
            return
        if self._thread is not None:
            self._httpd.shutdown()
        self._httpd.server_close()
        self._ended.set()

    def end(self) -> None:
        """Ask the server to end, without waiting (safe from a signal handler or a request)."""
        threading.Thread(target=self._stop, daemon=True).start()

    def _watch(self) -> None:
        """Close connections past their receive deadline; end the server once idle."""
        idle = self.config.idle_timeout_s
        step = min(0.05, idle / 4) if idle is not None else 0.05
        while not self._ended.wait(step):
            self._httpd.reap()
            if idle is None:
                continue
            with self._lock:
                quiet = self._inflight == 0 and time.monotonic() - self._last >= idle
            if quiet:
                self._stop()
                return

    def _take(self, taken: list[int]) -> Any:
        """``take(n)``: reserve ``n`` more bytes of the in-flight budget (``taken[0]`` counts
        this request's), else _Busy."""
        def take(n: int) -> None:
            with self._lock:
                if self._inflight_bytes + n > self.config.max_inflight_bytes:
                    raise _Busy("the server is reading other large requests; retry")
                self._inflight_bytes += n
                taken[0] += n
        return take

    # ------------------------------------------------------------------ exchanges
    def handle(self, h: BaseHTTPRequestHandler) -> None:
        """Answer one HTTP request (called by the handler thread)."""
        with self._lock:
            self._inflight += 1
            self._last = time.monotonic()
            seq = self._seq
            self._seq += 1
        try:
            self._exchange(h, seq)
        finally:
            with self._lock:
                self._inflight -= 1
                self._last = time.monotonic()

    def _exchange(self, h: BaseHTTPRequestHandler, seq: int) -> None:
        t0 = time.monotonic()
        record: dict[str, Any] = {
            "key": f"{self.run_id}/{seq:06d}", "server": self.run_id, "seq": seq,
            "received_unix_s": round(time.time(), 6), "method": h.command, "path": h.path,
            "brain": self.brain.name,
        }
        path = urlsplit(h.path).path
        protocol = next((p for p in PROTOCOLS if p.matches(path)), None)
        raw = b""
        is_model = h.command == "POST" and protocol is not None
        if self._ending or (is_model and self._quota_reached):
            reply = _error(503, "server_ended", "the model server has ended")
            is_model = False
            h.close_connection = True
        else:
            taken = [0]
            try:
                try:
                    raw = _read_body(h, self.config.max_body_bytes, self._take(taken))
                except BadRequest:
                    h.close_connection = True  # what is left of the body is not read
                    raise
                finally:
                    h.arm(False)  # received (or refused): the brain's time is not a client's
                if is_model:
                    assert protocol is not None
                    reply = self._model(protocol, h, raw, record)
                elif h.command in ("HEAD", "GET") and path in ("", "/"):
                    reply = Reply(b"", "text/plain")
                elif h.command == "GET" and path in ("/v1/models", "/models"):
                    reply = json_reply({"object": "list", "data": [
                        {"id": m, "object": "model", "created": 0, "owned_by": "ripplecp"}
                        for m in self.config.models]})
                else:
                    reply = _error(404, "not_found", f"no route for {h.command} {path}")
            except _Busy as exc:
                reply = _error(503, "overloaded", str(exc))
                record["error"] = str(exc)
            except TooLarge as exc:
                reply = _error(413, "request_too_large", str(exc))
                record["error"] = str(exc)
            except BadRequest as exc:
                reply = _error(400, "invalid_request_error", str(exc))
                record["error"] = str(exc)
            finally:
                with self._lock:
                    self._inflight_bytes -= taken[0]
        delay = None
        if is_model and self.config.latency is not None and reply.status == 200:
            delay = self.config.latency.delay(reply.output_tokens or 0,
                                              record.get("transcript_sha256", ""))
            record["emulated_latency_s"] = round(delay, 6)
        record.update({"status": reply.status, "request_sha256": _sha256(raw),
                       "response_sha256": _sha256(reply.body),
                       "input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens,
                       "duration_s": round(time.monotonic() - t0 + (delay or 0.0), 6)})
        done = False
        with self._lock:
            if is_model:
                self._served += 1
                done = self.config.max_requests is not None and \
                    self._served >= self.config.max_requests
                self._quota_reached = self._quota_reached or done
        self._record(record)
        if done:
            h.close_connection = True
        if delay:
            time.sleep(delay)
        _send(h, reply)
        if not h.close_connection:
            h.arm(True)  # the next request on this connection: within the timeout again
        if done:
            self.end()

    def _model(self, protocol: WireProtocol, h: BaseHTTPRequestHandler, raw: bytes,
               record: dict[str, Any]) -> Reply:
        record["protocol"] = protocol.name
        n = raw.count(b"{") + raw.count(b"[") + raw.count(b",") + 1
        if n > MAX_JSON_VALUES:
            raise TooLarge(f"request body: up to {n} JSON values, more than the "
                           f"{MAX_JSON_VALUES} this server parses")
        try:
            body = json.loads(raw)
        except RecursionError:
            raise BadRequest("request body: JSON nested too deeply") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadRequest(f"request body: not JSON ({exc})") from None
        if not isinstance(body, dict):
            raise BadRequest("request body: expected a JSON object")
        headers = {k.lower(): v for k, v in h.headers.items()}
        try:
            conversation = protocol.read_at(urlsplit(h.path).path, body, headers)
        except BadRequest:
            raise
        except RecursionError:
            raise BadRequest("request body: nested too deeply") from None
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise BadRequest(f"request body: not a {protocol.name} request "
                             f"({type(exc).__name__}: {exc})") from None
        record.update({"conversation": conversation.id, "model": conversation.model,
                       "step": conversation.assistant_turns,
                       "n_messages": len(conversation.messages),
                       "transcript_sha256": conversation.digest()})
        request = ModelRequest(protocol.name, h.path, headers, body, raw, conversation)
        try:
            answer = self.brain.respond(request)
        except BrainError as exc:
            record["error"] = str(exc)
            return _error(502, "brain_error", str(exc))
        except Exception as exc:  # a defect in a brain: answer, record, and show it
            traceback.print_exc(file=sys.stderr)
            record["error"] = f"{type(exc).__name__}: {exc}"
            return _error(500, "brain_error", record["error"])
        if isinstance(answer, Step):
            record["decision"] = answer.label
            return protocol.render_at(urlsplit(h.path).path, answer, conversation, body)
        return answer

    def _record(self, record: dict[str, Any]) -> None:
        with self._lock:
            if self._audit is not None:
                self._audit.append(record)
            self.exchanges.append(record)
