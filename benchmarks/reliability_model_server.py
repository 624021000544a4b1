"""Reliability of the loopback model server under hostile clients (issue 32 item 8), for real.

The server runs as its own process (``python -m oracle.agents.model_server``, the scripted
brain); its peak memory and threads are read from ``/proc/<pid>/status``. Cases, each drawn
afresh from ``--seed`` (default: a fresh seed, printed first):

* compression bombs: zstd, gzip or deflate bodies of a random size (100-600 MB inflated,
  well under 1 MB on the wire). Right: a 413 reply and the server's peak memory grown by
  less than 200 MB;
* malformed requests: a random non-hex or negative chunk size, an overlong chunk line, a
  Content-Length negative, not a number or huge, JSON nested 10^4-10^6 deep (bare or inside
  a field), an unsupported encoding. Right: one 4xx reply, no traceback on stderr;
* half-open connections: a random number (200-1500) that send part of their headers or
  body and then nothing. Right: the server's threads stay under its connection bound plus
  a few, every one is closed within the request timeout, then a normal request is served;
* a half-sent body to a server with ``--idle-s``: right when the server still ends;
* bursts of concurrent clients (100-400 at once). Right: every one answered 200 (no reset).

It prints one line per case, then tried / right / wrong; exit status 0 when nothing is wrong.

Run::

    python benchmarks/reliability_model_server.py
    python benchmarks/reliability_model_server.py --bombs 2 --malformed 6 --half-open 1 --bursts 1
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the code next to this script

import zstandard  # noqa: E402

from ripplecp_cli import opt, run  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 2.0  # --request-timeout-s of the servers under test
MAX_CONNECTIONS = 256  # the server's default bound


@dataclass(frozen=True)
class Args:
    """Attack a real loopback model server every known way and count what went wrong."""

    bombs: int = opt(4, min=0)
    """compression bombs"""
    malformed: int = opt(24, min=0)
    """malformed requests"""
    half_open: int = opt(2, min=0)
    """rounds of half-open connections"""
    idle: int = opt(1, min=0)
    """half-sent bodies to a server with --idle-s"""
    bursts: int = opt(2, min=0)
    """bursts of concurrent clients"""
    seed: int | None = opt(None, min=0)
    """seed of every generated case (default: a fresh one, printed)"""


class Server:
    """``python -m oracle.agents.model_server`` in its own process."""

    def __init__(self, workdir: Path, *extra: str) -> None:
        plan = workdir / "plan.json"
        plan.write_text(json.dumps([{"finish": "done"}] * 100_000))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "oracle.agents.model_server", "--brain", "scripted",
             "--plan", str(plan), "--request-timeout-s", str(TIMEOUT_S), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)})
        self.port = int(self.proc.stdout.readline())

    def status(self, field: str) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise KeyError(field)

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.terminate()
        return self.proc.communicate(timeout=60)[1]


def _raw(port: int, data: bytes, timeout: float = 30) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data)
        except OSError:
            pass
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except OSError:
            pass
        return out


def _post(body: bytes, headers: dict[str, str] | None = None) -> bytes:
    head = {"Content-Type": "application/json", "Content-Length": str(len(body)),
            "Connection": "close", **(headers or {})}
    lines = "".join(f"{k}: {v}\r\n" for k, v in head.items())
    return f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n{lines}\r\n".encode() + body


def _bomb(encoding: str, size: int) -> bytes:
    obj = zstandard.ZstdCompressor(level=1).compressobj() if encoding == "zstd" else \
        zlib.compressobj(9, zlib.DEFLATED, 31 if encoding == "gzip" else 15)
    block = b" " * (1 << 20)
    return b"".join([obj.compress(block) for _ in range(size >> 20)] + [obj.flush()])


def _malformed(rng: random.Random) -> tuple[str, bytes]:
    kind = rng.choice(["chunk size", "negative chunk", "long chunk line", "length negative",
                       "length not a number", "length huge", "nested bare", "nested field",
                       "encoding"])
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    if kind == "chunk size":
        bad = rng.choice([b"zz", b"0x1g", b"\xff\xfe", b"1 2", b"--"])
        return kind, head + b"Transfer-Encoding: chunked\r\n\r\n" + bad + b"\r\nabc\r\n0\r\n\r\n"
    if kind == "negative chunk":
        return kind, head + b"Transfer-Encoding: chunked\r\n\r\n-%x\r\nabc\r\n0\r\n\r\n" % (
            rng.randint(1, 1 << 40))
    if kind == "long chunk line":
        return kind, head + b"Transfer-Encoding: chunked\r\n\r\n" + b"0" * rng.randint(
            9000, 200_000) + b"1\r\na\r\n0\r\n\r\n"
    if kind == "length negative":
        return kind, head + b"Content-Length: -%d\r\n\r\n{}" % rng.randint(1, 1 << 40)
    if kind == "length not a number":
        return kind, head + b"Content-Length: " + rng.choice([b"ten", b"1e9", b"0x10", b""]) \
            + b"\r\n\r\n{}"
    if kind == "length huge":
        return kind, head + b"Content-Length: %d\r\n\r\n{}" % rng.randint(1 << 26, 1 << 62)
    if kind == "encoding":
        return kind, head + b"Content-Encoding: " + rng.choice([b"br", b"compress", b"x"]) \
            + b"\r\nContent-Length: 2\r\n\r\n{}"
    depth = rng.choice([10_000, 100_000, 1_000_000])
    nested = b"[" * depth + b"]" * depth
    body = nested if kind == "nested bare" else b'{"messages":' + nested + b"}"
    return kind, head + b"Content-Length: %d\r\n\r\n" % len(body) + body


def _burst(port: int, n: int) -> list[bytes]:
    """``n`` clients released at once, each asking ``GET /v1/models``: their replies."""
    got: list[bytes] = []
    lock = threading.Lock()
    barrier = threading.Barrier(n)

    def client() -> None:
        barrier.wait()
        try:
            o = _raw(port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        except OSError as exc:
            o = repr(exc).encode()
        with lock:
            got.append(o)

    threads = [threading.Thread(target=client) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return got


def study(args: Args) -> int:
    if args.seed is None:
        args = dataclasses.replace(args, seed=random.SystemRandom().randrange(1 << 31))
    print(f"seed {args.seed}", flush=True)
    rng = random.Random(args.seed)
    rows: list[tuple[str, bool, str]] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="reliability_ms_") as tmp:
        work = Path(tmp)
        server = Server(work, "--idle-s", "600")
        try:
            for _ in range(args.bombs):
                enc = rng.choice(["zstd", "gzip", "deflate"])
                size = rng.randint(100, 600) << 20
                body = _bomb(enc, size)
                before = server.status("VmHWM")
                out = _raw(server.port, _post(body, {"Content-Encoding": enc}))
                grown = (server.status("VmHWM") - before) >> 10
                ok = out.startswith(b"HTTP/1.1 413") and grown < 200
                rows.append((f"bomb {enc} {len(body) >> 10} KB -> {size >> 20} MB", ok,
                             f"{out[:12].decode(errors='replace')} peak +{grown} MB"))
            for _ in range(args.malformed):
                kind, data = _malformed(rng)
                out = _raw(server.port, data)
                ok = out[:10] in (b"HTTP/1.1 4", b"HTTP/1.0 4") or out.startswith(b"HTTP/1.1 4")
                rows.append((f"malformed: {kind}", ok, out[:12].decode(errors="replace") or
                             "no reply"))
            for _ in range(args.half_open):
                n = rng.randint(200, 1500)
                socks = []
                for _ in range(n):
                    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
                    part = rng.choice([b"POST /v1/chat/", b"POST /v1/chat/completions HTTP/1.1"
                                       b"\r\nHost: x\r\nContent-Length: 999\r\n\r\n{", b""])
                    with_part = part[:rng.randint(0, len(part))]
                    if with_part:
                        s.sendall(with_part)
                    socks.append(s)
                time.sleep(0.5)
                peak = server.status("Threads")
                time.sleep(TIMEOUT_S + 1.5)
                after = server.status("Threads")
                for s in socks:
                    s.close()
                out = _raw(server.port, _post(json.dumps({"model": "m", "messages": [
                    {"role": "user", "content": "hi"}]}).encode()))
                ok = peak <= MAX_CONNECTIONS + 8 and after < 16 and out.startswith(b"HTTP/1.1 200")
                rows.append((f"{n} half-open connections", ok, f"threads {peak} while open, "
                             f"{after} after {TIMEOUT_S + 2:.1f} s; then {out[:12].decode()}"))
            for _ in range(args.bursts):
                n = rng.randint(100, 400)
                got = _burst(server.port, n)
                bad = sum(not g.startswith(b"HTTP/1.1 200") for g in got) + n - len(got)
                rows.append((f"{n} concurrent clients", bad == 0, f"{bad} not answered"))
        finally:
            err = server.stop()
        rows.append(("no traceback on the server's stderr", "Traceback" not in err,
                     err.strip().splitlines()[-1][:100] if "Traceback" in err else "none"))
        for _ in range(args.idle):
            idle = rng.uniform(0.5, 2.0)
            srv = Server(work, "--idle-s", f"{idle:.2f}")
            s = socket.create_connection(("127.0.0.1", srv.port))
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                      b"%d\r\n\r\n{" % rng.randint(2, 1 << 20))
            t = time.perf_counter()
            try:
                srv.proc.wait(timeout=TIMEOUT_S + idle + 15)
                ended = True
            except subprocess.TimeoutExpired:
                ended = False
            s.close()
            srv.stop()
            rows.append((f"half-sent body, --idle-s {idle:.2f}", ended,
                         f"ended after {time.perf_counter() - t:.1f} s" if ended else "NEVER ended"))
    wrong = sum(not ok for _, ok, _ in rows)
    for case, ok, note in rows:
        print(f"{'right' if ok else 'WRONG':5}  {case:48} {note}")
    print(f"\n{len(rows)} tried (seed {args.seed}) in {time.perf_counter() - t0:.0f} s; "
          f"right: {len(rows) - wrong}; wrong: {wrong}")
    return 0 if wrong == 0 else 1


def main(argv: list[str] | None = None) -> int:
    return run(study, Args, argv, prog="python benchmarks/reliability_model_server.py")


if __name__ == "__main__":
    raise SystemExit(main())
