"""``advise … -- COMMAND`` under a signal and a huge output line (issue 32, item 10): the
wrapper exits 128+signal (130 on Ctrl-C, 143 on SIGTERM) whatever status the command chose,
leaves no command process behind and its decision log whole; a line of hundreds of MB is
copied through, skipped for the advisor with its reason (a SKIP record), never held whole,
and the command's own status comes back. Real processes throughout: the wrapper, a Python
command, the advisor server."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ripplecp_policy.advisor import read_decisions
from ripplecp_policy.advisor_lines import MAX_LINE_BYTES
from ripplecp_policy.advisor_state import ServerConfig
from ripplecp_policy.datasets import replays
from ripplecp_policy.export import example_frame, log_policy_model
from ripplecp_policy.hook_client import ensure_server, request
from ripplecp_policy.learned import AdvantageRegressorPolicy
from ripplecp_policy.policy import Budget, Setting

REPO = Path(__file__).resolve().parents[2]
RECORDING = REPO / "tests" / "data" / "recordings" / "codex-0.171.0" / "task.exec.jsonl"
BUDGET = Budget("count", 2)
#: si_code of a signal the kernel made (a terminal's Ctrl-C), as against kill()'s SI_USER (0)
SI_KERNEL = 0x80

#: the command: the recording's lines (long lines after its second one), its pid in a file,
#: then, per ``mode``: exit with ``code`` / sleep until a signal ends it (``plain``), exit 254
#: on SIGINT or SIGTERM (``own-status``, a CLI that cleans up), ignore both (``stubborn``),
#: or note the sender of each SIGINT (``si_code si_pid``) in ``PIDFILE.sigint`` and exit 254
#: 1 s after the first (``count``)
COMMAND = r'''
import hashlib, os, signal, sys, time
recording, pidfile, mode, code, longs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:]
if mode == "own-status":
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda *_: os._exit(254))
elif mode == "stubborn":
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)
elif mode == "count":  # SIGINT blocked: taken by sigtimedwait below, its sender noted
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
out, digest, size = sys.stdout.buffer, hashlib.sha256(), 0
def put(b):
    global size
    out.write(b); digest.update(b); size += len(b)
lines = open(recording, "rb").readlines()
for i, line in enumerate(lines):
    put(line)
    if i == 1:
        for n in map(int, longs):  # an agent message of n bytes, its newline included
            head = b'{"type":"item.completed","item":{"id":"long","type":"agent_message","text":"'
            put(head)
            left, block = n - len(head) - 4, b"x" * (1 << 20)
            while left > 0:
                put(block[:left]); left -= len(block)
            put(b'"}}\n')
out.flush()
with open(pidfile + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {size} {digest.hexdigest()}")
os.replace(pidfile + ".tmp", pidfile)
if mode == "exit":
    sys.exit(code)
if mode == "count":  # each SIGINT's sender ("si_code si_pid") in PIDFILE.sigint; 254 1 s after the first
    got, end = [], None
    while end is None or time.monotonic() < end:
        info = signal.sigtimedwait({signal.SIGINT}, 0.05)
        if info is not None:
            got.append(f"{info.si_code} {info.si_pid}\n")
            end = end or time.monotonic() + 1.0
    with open(pidfile + ".sigint", "w") as f:
        f.write("".join(got))
    os._exit(254)
time.sleep(120)
'''


@pytest.fixture(scope="module")
def model(toy_label_set, tmp_path_factory) -> Path:
    """An eager xgboost policy: it wants a checkpoint at every boundary, the budget decides."""
    ls = toy_label_set(n_repos=3, tasks_per_repo=2, seed=3)
    pol = AdvantageRegressorPolicy("xgboost", n_estimators=10, threshold=-1e9).fit(ls, Setting(BUDGET))
    obs: list = []
    for task in list(replays(ls).values())[:2]:
        pol.reset(task.task_id, 0)
        task.replay(pol.decide, BUDGET, trace=obs)
    return log_policy_model(pol, BUDGET, example_frame(obs).head(3),
                            path=tmp_path_factory.mktemp("wrapper") / "model")


@pytest.fixture(scope="module")
def state(model: Path, tmp_path_factory):
    """The advisor server every wrapper here streams to (started once, shut down after)."""
    state = tmp_path_factory.mktemp("wrapper-state") / "state"
    ServerConfig(model=str(model.resolve()), idle_s=600, pythonpath=str(REPO)).write(state)
    assert ensure_server(state, wait_s=180), (state / "server.log").read_text()[-2000:]
    yield state
    try:
        request(state, "POST", "/v1/shutdown", timeout=5)
    except OSError:
        pass


def _wrapper(model: Path, state: Path, log: Path, pidfile: Path, mode: str, code: int = 0,
             longs: tuple[int, ...] = (), measure: Path | None = None,
             terminal: int | None = None) -> subprocess.Popen:
    """The wrapper around :data:`COMMAND`, in a process group of its own (a terminal's
    foreground job; with ``terminal``, a pty's slave, the session's controlling terminal
    and its stdin); with ``measure``, run under a parent that writes the peak memory of
    its children (the wrapper and what it waited for) there."""
    argv = [sys.executable, "-m", "ripplecp_policy.advise", "--model", str(model), "--budget",
            "count:2", "--log", str(log), "--state", str(state), "--",
            sys.executable, "-c", COMMAND, str(RECORDING), str(pidfile), mode, str(code),
            *map(str, longs)]
    if measure is not None:
        argv = [sys.executable, "-c",
                "import resource, subprocess, sys; rc = subprocess.call(sys.argv[2:]); "
                "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN)"
                ".ru_maxrss * 1024)); sys.exit(rc)", str(measure), *argv]
    def controlling_terminal() -> None:
        os.setsid()
        fcntl.ioctl(terminal, termios.TIOCSCTTY, 0)

    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL if terminal is None else terminal,
                            start_new_session=terminal is None,
                            preexec_fn=None if terminal is None else controlling_terminal,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))


def _gone(pid: int, within: float = 5.0) -> bool:
    """The process has ended (a zombie counts as ended: nothing of it runs)."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.05)
    return False


@contextlib.contextmanager
def _reaped(p: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """The wrapper ``p`` for the block; its process group killed if it still runs after."""
    try:
        yield p
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _whole(log: Path) -> list[dict]:
    """The decision log's records, every line of it a whole record."""
    data = log.read_bytes()
    assert data.endswith(b"\n")
    return [json.loads(x) for x in data.splitlines()]


@pytest.fixture(scope="module")
def plain_decisions(model: Path, state: Path, tmp_path_factory) -> list[str]:
    """The decisions the recording gets when nothing goes wrong."""
    tmp = tmp_path_factory.mktemp("plain")
    p = _wrapper(model, state, tmp / "d.jsonl", tmp / "pid", "exit")
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err.decode()[-2000:]
    recs = _whole(tmp / "d.jsonl")
    assert all(r["boundary"] is not None for r in recs) and len(recs) >= 3
    return [r["decision"] for r in recs]


@pytest.mark.parametrize(("mode", "target", "sig", "expect"), [
    ("own-status", "group", signal.SIGINT, 130),  # a terminal's Ctrl-C; the command exits 254
    ("own-status", "wrapper", signal.SIGINT, 130),
    ("plain", "wrapper", signal.SIGTERM, 143),
    ("stubborn", "wrapper", signal.SIGINT, 130),  # the command ignores signals: killed
])
def test_a_signal_ends_the_wrapper_with_128_plus_it_and_no_command_left(
        mode: str, target: str, sig: int, expect: int, model: Path, state: Path,
        plain_decisions: list[str], tmp_path: Path) -> None:
    log, pidfile = tmp_path / "d.jsonl", tmp_path / "pid"
    p = _wrapper(model, state, log, pidfile, mode)
    with _reaped(p):
        n = sum(1 for _ in RECORDING.open("rb"))
        for _ in range(n):  # every line of the command copied through: it sleeps now
            assert p.stdout.readline()
        end = time.monotonic() + 30
        while not pidfile.exists() and time.monotonic() < end:
            time.sleep(0.02)
        pid = int(pidfile.read_text().split()[0])
        time.sleep(0.5)
        t0 = time.monotonic()
        if target == "group":
            os.killpg(p.pid, sig)
        else:
            os.kill(p.pid, sig)
        out, err = p.communicate(timeout=60)
        took = time.monotonic() - t0
    assert p.returncode == expect, err.decode()[-2000:]
    assert took < 15, took
    assert _gone(pid), f"the command {pid} was left running"
    recs = _whole(log)  # whole lines only, and the lines read before the signal all decided
    assert [r["decision"] for r in recs if r["boundary"] is not None] == plain_decisions


def test_ctrl_c_at_a_terminal(model: Path, state: Path, tmp_path: Path) -> None:
    """Ctrl-C typed at the wrapper's controlling terminal (a pty): the command gets its
    SIGINT once — from the terminal; the wrapper had forwarded a second, "force quit" to
    many CLIs — and ends with a status of its own (254), the wrapper exits 130."""
    master, slave = os.openpty()
    log, pidfile = tmp_path / "d.jsonl", tmp_path / "pid"
    try:
        p = _wrapper(model, state, log, pidfile, "count", terminal=slave)
        os.close(slave)
        with _reaped(p):
            end = time.monotonic() + 60
            while not pidfile.exists() and time.monotonic() < end:
                time.sleep(0.02)
            pid = int(pidfile.read_text().split()[0])
            time.sleep(0.5)
            os.write(master, b"\x03")  # Ctrl-C
            out, err = p.communicate(timeout=60)
    finally:
        os.close(master)
    assert p.returncode == 130, err.decode()[-2000:]
    assert _gone(pid)
    senders = [tuple(map(int, x.split())) for x in Path(str(pidfile) + ".sigint").read_text().splitlines()]
    assert senders and senders[0] == (SI_KERNEL, 0), senders  # the terminal's
    assert all(pid != p.pid for _, pid in senders), f"the wrapper forwarded a second SIGINT: {senders}"


def test_a_huge_line_is_copied_skipped_for_the_advisor_and_the_status_kept(
        model: Path, state: Path, plain_decisions: list[str], tmp_path: Path) -> None:
    """Lines of exactly the line limit, one byte over it and 400 MB: all copied through
    unchanged; the first followed, the two others logged SKIP with the reason, the session
    still followed after them; the wrapper's memory far below one such line; status 3."""
    log, pidfile, peak = tmp_path / "d.jsonl", tmp_path / "pid", tmp_path / "peak"
    longs = (MAX_LINE_BYTES, MAX_LINE_BYTES + 1, 400 * 10**6)
    p = _wrapper(model, state, log, pidfile, "exit", code=3, longs=longs, measure=peak)
    digest, size = hashlib.sha256(), 0
    with _reaped(p):
        while chunk := p.stdout.read1(1 << 20):
            digest.update(chunk)
            size += len(chunk)
        err = p.stderr.read()
        p.wait(timeout=120)
    assert p.returncode == 3, err.decode()[-2000:]
    _, want_size, want_digest = pidfile.read_text().split()
    assert (size, digest.hexdigest()) == (int(want_size), want_digest)  # copied unchanged
    assert b"skipped this session" not in err, err.decode()[-2000:]
    recs = _whole(log)
    assert [r["decision"] for r in recs if r["boundary"] is not None] == plain_decisions
    over = [r for r in recs if r["boundary"] is None]  # the lines over the limit, counted
    assert over and all(r["decision"] == "SKIP" and "MiB line limit" in r["reason"]
                        for r in over), over
    assert sum(int(re.search(r"(\d+) line\(s\) not followed", r["reason"])[1]) for r in over) == 2
    assert int(peak.read_text()) < 200 * 2**20, f"peak {int(peak.read_text()) / 2**20:.0f} MiB"
    assert read_decisions(log) == recs


def test_a_closed_stdout_stops_the_echo_not_the_following(
        model: Path, state: Path, plain_decisions: list[str], tmp_path: Path) -> None:
    """The wrapper's own output closed early (``advise … -- codex exec … | head -1``): the
    echo stops, the session is still followed to its end — every boundary decided as
    when nothing goes wrong — and the wrapper exits with the command's status (3), no
    traceback. It had died on the broken pipe with status 1, the rest of the session not
    followed."""
    log, pidfile = tmp_path / "d.jsonl", tmp_path / "pid"
    p = _wrapper(model, state, log, pidfile, "exit", code=3, longs=(4 << 20,))
    with _reaped(p):
        assert p.stdout.readline()
        p.stdout.close()  # the reader goes away while the 4 MiB line is on its way
        err = p.stderr.read()
        p.wait(timeout=120)
    assert p.returncode == 3, err.decode()[-2000:]
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()[-2000:]
    recs = _whole(log)
    assert [r["decision"] for r in recs if r["boundary"] is not None] == plain_decisions
