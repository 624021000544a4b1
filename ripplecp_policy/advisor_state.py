"""Where an advisor server keeps its state, and its configuration (``server.json``).

The state folder holds ``server.json`` (:class:`ServerConfig`), ``token`` (what a TCP
request must carry), ``server.lock`` / ``server.log`` / ``spawned`` (the one running server),
``installed.json`` (the hooks ``advise install`` wrote) and ``sessions/`` (the decision logs).
The standard library only: the ``codex exec`` wrapper reads it before anything heavy.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ServerConfig", "default_state", "token_of"]


@dataclass
class ServerConfig:
    """What a server serves: the model (and the MLflow store its URI is read from), the
    defaults of its sessions, and how it listens; ``server.json`` in the state folder.
    ``python`` / ``pythonpath``: the interpreter and import path a client starts it with."""

    model: str
    mlruns: str | None = None
    allow_pickle: bool = False
    budget: str | None = None
    store: str | None = None
    port: int | None = None
    idle_s: float = 1800.0
    max_transcript_mb: float = 64.0
    ood_flag: float = 0.25
    python: str = sys.executable
    pythonpath: str = ""

    @classmethod
    def read(cls, state: str | Path) -> ServerConfig:
        """The configuration of ``state``; FileNotFoundError / ValueError in one line."""
        path = Path(state) / "server.json"
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"{path}: no advisor configured here (run `advise install` "
                                    "or give --model)") from None
        except ValueError as exc:
            raise ValueError(f"{path}: not JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: not a JSON object")
        unknown = sorted(set(raw) - {f.name for f in dataclasses.fields(cls)})
        if unknown or "model" not in raw:
            raise ValueError(f"{path}: " + (f"unknown field {unknown[0]!r}" if unknown else "no model"))
        return cls(**raw)

    def write(self, state: str | Path) -> None:
        """Save as ``server.json`` (atomically; the state folder private to the user)."""
        state = Path(state)
        state.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = state / f".server.json.{os.getpid()}"
        tmp.write_text(json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True) + "\n")
        os.replace(tmp, state / "server.json")


def default_state(key: str) -> Path:
    """The state folder of a server named by ``key`` (a project folder, or a model): under
    ``$XDG_CACHE_HOME`` (default ``~/.cache``) ``/ripplecp/advisor/<digest>``, outside any
    workspace so its logs never enter a checkpoint."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "ripplecp" / "advisor" / hashlib.sha256(key.encode()).hexdigest()[:16]


def token_of(state: str | Path) -> str:
    """The state folder's token for TCP requests (made on first use, private to the user)."""
    path = Path(state) / "token"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(16))
    return path.read_text().strip()


