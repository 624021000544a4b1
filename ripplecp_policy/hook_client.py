"""The advisor's command hook: the standard library only, so a call costs a bare interpreter.

Runtimes whose hooks are commands (Codex, the OpenHands SDK, Gemini CLI; Claude Code's
``SessionStart``) run this file by its path, with the interpreter's isolated and no-site
switches (``python -I -S …/hook_client.py``, what ``advise install`` writes): it imports
nothing of the project, forwards the hook's JSON from stdin to the advisor server of
``--state`` over its Unix socket, and exits 0 whatever happens (fail-open: the agent never
waits on or stops for the advisor). When no server answers, it starts one in the background
(``python -m ripplecp_policy.advise serve --state …``, the interpreter and ``PYTHONPATH``
that ``server.json`` names) and the call is skipped; the server decides the boundaries it
missed as ``past`` at the next call.

The server imports :func:`socket_path` from here, so client and server agree on it.

    python -I -S hook_client.py --state DIR --runtime claude-code|codex|gemini|openhands
                                [--query 'budget=count:2&store=/abs/store'] [--start] [--wait-s S]
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ServerConfig", "default_state", "ensure_server", "main", "request", "socket_path",
           "token_of"]

#: how long a call waits for the server's answer (a checkpoint is taken before it answers)
ANSWER_TIMEOUT_S = 60.0
#: a spawn younger than this is not repeated (the server needs seconds to load the model)
SPAWN_GRACE_S = 60.0


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


def socket_path(state: str | Path) -> Path:
    """The server's Unix socket: in the state folder when its path fits a socket address,
    else in a private per-user folder under /tmp named by the state's digest."""
    state = Path(state).resolve()
    here = state / "advisor.sock"
    if len(str(here)) < 100:
        return here
    private = Path(f"/tmp/ripplecp-advisor-{os.getuid()}")
    private.mkdir(mode=0o700, exist_ok=True)
    st = os.lstat(private)
    if st.st_uid != os.getuid() or st.st_mode & 0o077 or not os.path.isdir(private) or os.path.islink(private):
        raise PermissionError(f"{private}: not a private folder of this user")
    return private / (hashlib.sha256(str(state).encode()).hexdigest()[:16] + ".sock")


def request(state: str | Path, method: str, path: str, body: bytes = b"",
            timeout: float = ANSWER_TIMEOUT_S) -> tuple[int, bytes]:
    """One HTTP/1.1 request to the server of ``state`` over its Unix socket: (status, body).
    OSError when no server listens."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        s.connect(str(socket_path(state)))
        head = (f"{method} {path} HTTP/1.1\r\nHost: advisor\r\nContent-Length: {len(body)}\r\n"
                "Content-Type: application/json\r\nConnection: close\r\n\r\n").encode()
        s.sendall(head + body)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    finally:
        s.close()
    raw = b"".join(chunks)
    head, _, rest = raw.partition(b"\r\n\r\n")
    try:
        status = int(head.split(b" ", 2)[1])
    except (IndexError, ValueError):
        raise OSError(f"advisor server: not an HTTP answer ({raw[:40]!r})") from None
    return status, rest


_SPAWNED: dict[int, subprocess.Popen] = {}


def _alive(pid: int) -> bool:
    proc = _SPAWNED.get(pid)
    if proc is not None:  # our child: a dead one is a zombie until polled
        return proc.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _spawn(state: Path) -> int | None:
    """Start the state's server in the background, unless one was started less than
    :data:`SPAWN_GRACE_S` ago: the pid of the server starting, or None (one started recently
    and died: its reason is in ``server.log``)."""
    marker = state / "spawned"
    try:
        pid_text, _, when = marker.read_text().partition(" ")
        if time.time() - float(when) < SPAWN_GRACE_S:
            pid = int(pid_text)
            return pid if _alive(pid) else None
    except (FileNotFoundError, ValueError):
        pass
    conf = json.loads((state / "server.json").read_text())
    env = dict(os.environ)
    if conf.get("pythonpath"):
        env["PYTHONPATH"] = conf["pythonpath"]
    with open(state / "server.log", "ab") as log:
        proc = subprocess.Popen([conf.get("python") or sys.executable, "-m", "ripplecp_policy.advise",
                                 "serve", "--state", str(state)], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log, env=env, start_new_session=True,
                                close_fds=True)
    _SPAWNED[proc.pid] = proc
    tmp = state / f".spawned.{os.getpid()}"
    tmp.write_text(f"{proc.pid} {time.time()}")
    os.replace(tmp, marker)
    return proc.pid


def ensure_server(state: str | Path, wait_s: float = 0.0) -> bool:
    """True when the server of ``state`` answers (started when it does not, waiting up to
    ``wait_s`` seconds for it; False at once when the one starting dies)."""
    state = Path(state)
    try:
        return request(state, "GET", "/v1/ping", timeout=5.0)[0] == 200
    except OSError:
        pass
    try:
        pid = _spawn(state)
    except (OSError, ValueError):
        return False
    end = time.monotonic() + wait_s
    while pid is not None and time.monotonic() < end:
        try:
            if request(state, "GET", "/v1/ping", timeout=5.0)[0] == 200:
                return True
        except OSError:
            pass
        if not _alive(pid):
            return False
        time.sleep(0.05)
    return False


def _args(argv: list[str]) -> dict[str, str]:
    out: dict[str, str] = {"query": "", "wait-s": "0"}
    it = iter(argv)
    for word in it:
        if word == "--start":
            out["start"] = "1"
        elif word in ("--state", "--runtime", "--query", "--wait-s"):
            out[word[2:]] = next(it, "")
        else:
            raise ValueError(f"unknown argument {word!r}")
    if not out.get("state") or (not out.get("runtime") and "start" not in out):
        raise ValueError("give --state DIR and --runtime NAME (or --start)")
    return out


def main(argv: list[str] | None = None) -> int:
    """Forward stdin's hook payload; always 0."""
    try:
        args = _args(list(sys.argv[1:] if argv is None else argv))
        state = Path(args["state"])
        payload = sys.stdin.buffer.read(32 * 2**20) if not sys.stdin.isatty() else b""
        up = ensure_server(state, float(args["wait-s"]))
        if "start" in args or not up:
            return 0
        query = f"?{args['query']}" if args["query"] else ""
        status, _ = request(state, "POST", f"/v1/hook/{args['runtime']}{query}", payload)
        if status != 200:
            print(f"ripplecp advisor: server answered {status}", file=sys.stderr)
    except Exception as exc:  # fail-open: say why on stderr, never fail the hook
        print(f"ripplecp advisor: skipped: {type(exc).__name__}: {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
