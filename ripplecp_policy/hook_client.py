"""The advisor's command hook: the standard library's socket module only, so a call costs
a bare interpreter.

Runtimes whose hooks are commands (Codex, the OpenHands SDK, Gemini CLI; Claude Code's
``SessionStart``) run this file by its path, with the interpreter's isolated and no-site
switches (``python -I -S …/hook_client.py``, what ``advise install`` writes): it imports
nothing of the project (and on the hot path nothing but ``os``, ``sys`` and ``_socket``:
every other module is tens of milliseconds on a loaded machine), forwards the hook's JSON
from stdin to the advisor server of ``--state`` over its Unix socket, and exits 0 whatever
happens (fail-open: the agent never stops for the advisor). When no server answers, it
starts one in the background (``python -m ripplecp_policy.advise serve --state …``, the
interpreter and ``PYTHONPATH`` that ``server.json`` names) and the call is skipped; the
server logs the boundaries it missed as ``past`` at the next call.

The server, the ``codex exec`` wrapper and ``advise status`` import :func:`socket_path` and
:func:`request` from here, so every side agrees on them.

    python -I -S hook_client.py --state DIR --runtime claude-code|codex|gemini|openhands
                                [--query 'budget=count:2&store=/abs/store'] [--start] [--wait-s S]
"""

from __future__ import annotations

import os
import sys

try:  # the C module alone: socket.py adds enum and selectors, tens of ms under load
    import _socket as socket
except ImportError:  # pragma: no cover - every CPython has it
    import socket  # type: ignore[no-redef]

__all__ = ["ensure_server", "main", "request", "socket_path"]

#: how long a call waits for the server's answer (a checkpoint is taken before it answers)
ANSWER_TIMEOUT_S = 60.0
#: a spawn younger than this is not repeated (the server needs seconds to load the model)
SPAWN_GRACE_S = 60.0


def socket_path(state: str | os.PathLike[str]) -> str:
    """The server's Unix socket: in the state folder when its path fits a socket address,
    else in a private per-user folder under /tmp named by the state's digest."""
    state = os.path.abspath(os.fspath(state))
    here = os.path.join(state, "advisor.sock")
    if len(here) < 100:
        return here
    import hashlib

    private = f"/tmp/ripplecp-advisor-{os.getuid()}"
    try:
        os.mkdir(private, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(private)
    if st.st_uid != os.getuid() or st.st_mode & 0o077 or not os.path.isdir(private) or os.path.islink(private):
        raise PermissionError(f"{private}: not a private folder of this user")
    return os.path.join(private, hashlib.sha256(state.encode()).hexdigest()[:16] + ".sock")


def request(state: str | os.PathLike[str], method: str, path: str, body: bytes = b"",
            timeout: float = ANSWER_TIMEOUT_S) -> tuple[int, bytes]:
    """One HTTP/1.1 request to the server of ``state`` over its Unix socket: (status, body).
    OSError when no server listens."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        s.connect(socket_path(state))
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


_SPAWNED: dict[int, object] = {}


def _alive(pid: int) -> bool:
    proc = _SPAWNED.get(pid)
    if proc is not None:  # our child: a dead one is a zombie until polled
        return proc.poll() is None  # type: ignore[attr-defined]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _spawn(state: str) -> int | None:
    """Start the state's server in the background, unless one was started less than
    :data:`SPAWN_GRACE_S` ago: the pid of the server starting, or None (one started recently
    and died: its reason is in ``server.log``)."""
    import json
    import subprocess
    import time

    marker = os.path.join(state, "spawned")
    try:
        with open(marker) as f:
            pid_text, _, when = f.read().partition(" ")
        if time.time() - float(when) < SPAWN_GRACE_S:
            pid = int(pid_text)
            return pid if _alive(pid) else None
    except (FileNotFoundError, ValueError):
        pass
    with open(os.path.join(state, "server.json")) as f:
        conf = json.load(f)
    env = dict(os.environ)
    if conf.get("pythonpath"):
        env["PYTHONPATH"] = conf["pythonpath"]
    with open(os.path.join(state, "server.log"), "ab") as log:
        proc = subprocess.Popen([conf.get("python") or sys.executable, "-m", "ripplecp_policy.advise",
                                 "serve", "--state", state], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log, env=env, start_new_session=True,
                                close_fds=True)
    _SPAWNED[proc.pid] = proc
    tmp = os.path.join(state, f".spawned.{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(f"{proc.pid} {time.time()}")
    os.replace(tmp, marker)
    return proc.pid


def _ping(state: str) -> bool:
    try:
        return request(state, "GET", "/v1/ping", timeout=5.0)[0] == 200
    except OSError:
        return False


def ensure_server(state: str | os.PathLike[str], wait_s: float = 0.0) -> bool:
    """True when the server of ``state`` answers (started when it does not, waiting up to
    ``wait_s`` seconds for it; False at once when the one starting dies)."""
    import time

    state = os.path.abspath(os.fspath(state))
    if _ping(state):
        return True
    try:
        pid = _spawn(state)
    except (OSError, ValueError):
        return False
    end = time.monotonic() + wait_s
    while pid is not None and time.monotonic() < end:
        if _ping(state):
            return True
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
        state = os.path.abspath(args["state"])
        payload = sys.stdin.buffer.read(32 * 2**20) if not sys.stdin.isatty() else b""
        if "start" in args:
            ensure_server(state, float(args["wait-s"]))
            return 0
        query = f"?{args['query']}" if args["query"] else ""
        try:
            status, _ = request(state, "POST", f"/v1/hook/{args['runtime']}{query}", payload)
        except (FileNotFoundError, ConnectionRefusedError):  # no server: start one, skip this call
            if ensure_server(state, float(args["wait-s"])):
                status, _ = request(state, "POST", f"/v1/hook/{args['runtime']}{query}", payload)
            else:
                return 0
        if status != 200:
            print(f"ripplecp advisor: server answered {status}", file=sys.stderr)
    except Exception as exc:  # fail-open: say why on stderr, never fail the hook
        print(f"ripplecp advisor: skipped: {type(exc).__name__}: {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
