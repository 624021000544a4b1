"""Issue 32 item 8: the loopback model server under hostile clients, run for real.

The server runs as its own process (``python -m oracle.agents.model_server``); its memory
and threads are read from ``/proc/<pid>/status``. Every hostile request must get one HTTP
reply (or its connection closed by the server's timeout), no traceback, and the server
must stay bounded in memory and threads and still end on ``--idle-s``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import zstandard

REPO = Path(__file__).resolve().parents[4]
TIMEOUT = ["--request-timeout-s", "2"] if os.environ.get("PRE_FIX") is None else []


def _status(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen, int]]:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps([{"finish": "done"}] * 1000))
    proc = subprocess.Popen(
        [sys.executable, "-m", "oracle.agents.model_server", "--brain", "scripted", "--plan",
         str(plan), "--idle-s", "60"] + TIMEOUT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    port = int(proc.stdout.readline())
    yield proc, port
    if proc.poll() is None:
        proc.terminate()
    _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err, err[-2000:]


def _raw(port: int, data: bytes, timeout: float = 20) -> bytes:
    """Send ``data`` on a fresh connection; what the server answers before it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except (ConnectionResetError, TimeoutError):
            pass
        return out


def _post(port: int, body: bytes, headers: dict[str, str] | None = None) -> bytes:
    head = {"Content-Type": "application/json", "Content-Length": str(len(body)),
            "Connection": "close", **(headers or {})}
    lines = "".join(f"{k}: {v}\r\n" for k, v in head.items())
    return _raw(port, f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n{lines}\r\n".encode()
                + body)


def _bomb(kind: str, size: int) -> bytes:
    obj = zstandard.ZstdCompressor(level=1).compressobj() if kind == "zstd" else \
        zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b" " * (1 << 20)
    return b"".join([obj.compress(block) for _ in range(size >> 20)] + [obj.flush()])


@pytest.mark.parametrize("kind", ["zstd", "gzip"])
def test_a_compression_bomb_is_refused_in_bounded_memory(server: tuple, kind: str) -> None:
    proc, port = server
    before = _status(proc.pid, "VmRSS")
    body = _bomb(kind, 400 << 20)
    assert len(body) < 1 << 20
    out = _post(port, body, {"Content-Encoding": kind})
    assert out.startswith(b"HTTP/1.1 413"), out[:200]
    assert (_status(proc.pid, "VmHWM") - before) < 200_000, "kB of peak memory grown"


@pytest.mark.parametrize("request_bytes, status", [
    (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"zz\r\nabc\r\n0\r\n\r\n", b"400"),
    (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999\r\n\r\n"
     b"{}", b"413"),
    (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", b"400"),
    (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n"
     + b"[" * 100_000 + b"]" * 100_000, b"400"),
    (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 200013\r\n\r\n"
     b'{"messages":' + b"[" * 100_000 + b"]" * 100_000 + b"}", b"400"),
])
def test_malformed_requests_get_one_reply_and_no_traceback(server: tuple, request_bytes: bytes,
                                                           status: bytes) -> None:
    _, port = server
    out = _raw(port, request_bytes)
    assert out.startswith(b"HTTP/1.1 " + status), out[:300]


def test_half_open_requests_hold_bounded_threads_and_are_timed_out(server: tuple) -> None:
    proc, port = server
    socks = []
    for i in range(600):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        if i % 2:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Length: 1000\r\n\r\n{")  # a body that never ends
        else:
            s.sendall(b"POST /v1/chat/")  # headers that never end
        socks.append(s)
    time.sleep(1.0)
    assert _status(proc.pid, "Threads") < 300
    time.sleep(3.5)  # past --request-timeout-s 2: every connection closed by the server
    assert _status(proc.pid, "Threads") < 20
    for s in socks:
        s.close()
    out = _post(port, json.dumps({"model": "m", "messages": [
        {"role": "user", "content": "hi"}]}).encode())
    assert out.startswith(b"HTTP/1.1 200"), out[:200]


def test_a_half_sent_body_does_not_keep_the_server_alive(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps([{"finish": "done"}]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "oracle.agents.model_server", "--brain", "scripted", "--plan",
         str(plan), "--idle-s", "1"] + TIMEOUT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    port = int(proc.stdout.readline())
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    try:
        assert proc.wait(timeout=15) == 0
    finally:
        s.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_300_concurrent_clients_all_get_an_answer(server: tuple) -> None:
    _, port = server
    results: list[bytes] = []
    lock = threading.Lock()
    start = threading.Barrier(300)

    def client() -> None:
        start.wait()
        try:
            out = _raw(port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        except OSError as exc:
            out = repr(exc).encode()
        with lock:
            results.append(out)

    threads = [threading.Thread(target=client) for _ in range(300)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 300
    bad = [r[:80] for r in results if not r.startswith(b"HTTP/1.1 200")]
    assert bad == [], f"{len(bad)} of 300 not answered: {bad[:3]}"
