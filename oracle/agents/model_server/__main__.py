"""``python -m oracle.agents.model_server --brain scripted --plan P.json --port 0``: serve until ended.

Prints the port it listens on (one line on stdout, flushed) as soon as it is bound, then
serves until ``--max-requests`` model requests were answered, ``--idle-s`` passed without a
request, or it receives SIGTERM / SIGINT.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from oracle.agents.model_server import BRAINS, LatencyModel, ModelServer, ServerConfig, make_brain
from ripplecp_cli import opt, run


@dataclass(frozen=True)
class Args:
    """Serve a model API on loopback for agent runtimes, driven by a brain."""

    brain: str = opt("scripted", choices=tuple(BRAINS))
    """who decides the answers"""
    plan: Path | None = None
    """the scripted brain's plan (JSON)"""
    url: str | None = None
    """the proxy brain's endpoint, e.g. https://api.example.com (request paths are appended)"""
    key_env: str | None = None
    """NAME of the environment variable holding the proxy endpoint's key (never the key)"""
    host: str = "127.0.0.1"
    """loopback address to bind (any other is refused)"""
    port: int = opt(0, min=0, max=65535)
    """port to bind; 0 picks a free one"""
    audit: Path | None = None
    """append-only audit log (JSONL), one checksummed record per exchange"""
    max_requests: int | None = opt(None, min=1)
    """end after this many model requests"""
    idle_s: float | None = opt(None, min=0.001)
    """end after this many seconds without a request"""
    latency_per_token_s: float = opt(0.0, min=0.0)
    """mean emulated model latency per output token, seconds (0: off)"""
    latency_first_token_s: float = opt(0.0, min=0.0)
    """emulated time to first token, seconds (with --latency-per-token-s)"""
    latency_seed: int = 0
    """seed of the latency emulation"""
    run_id: str | None = None
    """prefix of every audit record's key (default: random)"""
    request_timeout_s: float = opt(60.0, min=0.001)
    """seconds a client has to send one request (headers and body); a connection idle
    this long between requests is closed too"""
    max_body_mb: float = opt(32.0, min=0.001)
    """largest request body read, in MiB after decompression (larger: 413)"""
    max_connections: int = opt(256, min=1)
    """connections served at once (more: 503 at once)"""


def serve(a: Args) -> int:
    latency = None
    if a.latency_per_token_s > 0 or a.latency_first_token_s > 0:
        latency = LatencyModel(a.latency_per_token_s, a.latency_seed, a.latency_first_token_s)
    config = ServerConfig(host=a.host, port=a.port, audit=a.audit, max_requests=a.max_requests,
                          idle_timeout_s=a.idle_s, latency=latency, run_id=a.run_id,
                          request_timeout_s=a.request_timeout_s,
                          max_body_bytes=max(1, int(a.max_body_mb * (1 << 20))),
                          max_connections=a.max_connections)
    server = ModelServer(make_brain(a.brain, plan=a.plan, url=a.url, key_env=a.key_env), config)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: server.end())
    server.start()
    print(server.port, flush=True)
    print(f"model server ({a.brain}) on {server.url}", file=sys.stderr, flush=True)
    while not server.wait(0.5):
        pass
    server.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(serve, Args, argv, prog="python -m oracle.agents.model_server")


if __name__ == "__main__":
    sys.exit(main())
