"""Process lifetimes: a fail-stop that ends every descendant, and no process outliving its study.

**The fail-stop.** Agent runtimes (Codex CLI, Claude Code, mini-swe-agent) start each tool
command in a new session, so a SIGKILL of the agent's process group leaves a running tool
(``bash -c``, ``sleep 30``) alive and still writing into the workspace. The harness runs every
agent program under :func:`fail_stop_prefix`, ``unshare --pid --fork --kill-child``: the
program is PID 1 of its own PID namespace, and when the ``unshare`` process is killed its
child is killed with it (``--kill-child``), upon which the kernel kills every process left in
the namespace, whatever sessions or process groups they made. :func:`popen` starts a program
that way, and with a parent-death signal, so it also dies when the harness process that
started it dies (a SIGKILLed worker takes its agent's whole tree with it).

Chosen over the alternatives because it is the only one that is both complete and free of a
live supervisor:

* **PID namespace** (chosen): every descendant, synchronously, by the kernel; ~2 ms per launch
  here. Needs ``unshare`` with CAP_SYS_ADMIN (root, or unprivileged user namespaces), and the
  agent is PID 1 inside (signals it installed no handler for are ignored from within; orphans
  are reaped only if it reaps them: harmless for one run).
* **cgroup v2** (``cgroup.kill``): as complete, plus resource accounting, but needs a delegated
  writable cgroup subtree, which containers rarely give (this machine has a v1 hierarchy).
* **child subreaper** (``PR_SET_CHILD_SUBREAPER``): no privileges, but the subreaper must stay
  alive to collect and kill the orphans; when the harness itself is SIGKILLed they go to init
  and keep running, and killing them races with their forks.

Where ``unshare --pid`` is unavailable, :func:`popen` tags the program's environment with a
fail-stop token and :func:`kill_tree` also kills every process that carries it (tools inherit
the environment); this fallback misses a process that clears its environment.

**Workers that never outlive their parent.** A process-pool worker of the study runner calls
:func:`guard_worker` at start-up: it dies by a parent-death signal when its own parent (the
forkserver) dies, and a watcher thread kills the forkserver and the worker the moment the
study runner's process ends (``pidfd``), so a SIGKILLed ``python -m oracle run`` leaves neither
pool workers, the forkserver, nor — once those are gone — the resource tracker, and no worker
picks up a queued branch after its parent is gone (:func:`ensure_parent` refuses it as well).

A parent-death signal fires when the *thread* that started the child ends; the harness starts
agents from the thread that runs the branch (a worker's main thread), which lives as long as
the worker.
"""

from __future__ import annotations

import ctypes
import functools
import os
import select
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "FAIL_STOP_ENV",
    "StudyParentGone",
    "alive",
    "descendants",
    "ensure_parent",
    "fail_stop_prefix",
    "guard_worker",
    "kill_tree",
    "popen",
    "processes_with_env",
    "set_parent_death_signal",
    "signal_all",
]

#: environment variable carrying a run's fail-stop token (the fallback sweep looks for it)
FAIL_STOP_ENV = "RIPPLECP_FAIL_STOP"
_PR_SET_PDEATHSIG = 1


class StudyParentGone(RuntimeError):
    """The study runner that started this worker is gone: nothing new may start."""


@functools.cache
def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Have the kernel send ``sig`` to this process when its parent (thread) ends."""
    if _libc().prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_PDEATHSIG): {os.strerror(err)}")


@functools.cache
def fail_stop_prefix() -> tuple[str, ...]:
    """argv prefix that makes SIGKILL of the launched process a fail-stop of its whole tree.

    ``unshare --pid --fork --kill-child``: see the module docstring. Empty where ``unshare``
    is missing or not permitted (then :func:`kill_tree` falls back to the environment sweep).
    """
    exe = shutil.which("unshare")
    if exe is None:
        return ()
    prefix = (exe, "--pid", "--fork", "--kill-child")
    try:
        ok = subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return prefix if ok else ()


def _child_setup() -> None:  # runs in the child between fork and exec: no allocation-heavy work
    _libc().prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


def popen(argv: Sequence[str], *, env: Mapping[str, str] | None, cwd: Path | str,
          fail_stop: bool = True, **kwargs: Any) -> subprocess.Popen:
    """Start ``argv`` in its own session, under the fail-stop (see the module docstring).

    The child dies with the calling thread's process (parent-death signal); with
    ``fail_stop`` it runs under :func:`fail_stop_prefix`, and its environment carries a
    fresh :data:`FAIL_STOP_ENV` token for the fallback sweep of :func:`kill_tree`. Other
    keyword arguments go to :class:`subprocess.Popen` (stdin defaults to ``/dev/null``).
    """
    ensure_parent()
    full_env = dict(os.environ if env is None else env)
    prefix: tuple[str, ...] = ()
    if fail_stop:
        prefix = fail_stop_prefix()
        full_env[FAIL_STOP_ENV] = uuid.uuid4().hex
    kwargs.setdefault("stdin", subprocess.DEVNULL)
    _libc()  # resolve before forking: the child only calls it
    proc = subprocess.Popen([*prefix, *argv], env=full_env, cwd=cwd, start_new_session=True,
                            preexec_fn=_child_setup, **kwargs)
    proc.fail_stop_token = full_env.get(FAIL_STOP_ENV)  # type: ignore[attr-defined]
    proc.fail_stop_namespace = bool(prefix)  # type: ignore[attr-defined]
    return proc


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2: stat.rfind(b")") + 3] not in (b"Z", b"X")


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (children first), from ``/proc``'s parent links."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_bytes()
        except OSError:
            continue
        rest = stat[stat.rfind(b")") + 2:].split()
        if rest and rest[0] not in (b"Z", b"X"):
            children.setdefault(int(rest[1]), []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        out.extend(kids)
        todo.extend(kids)
    return out


def signal_all(pids: list[int], sig: int) -> None:
    """Send ``sig`` to each of ``pids``, ignoring those already gone."""
    for p in pids:
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            pass


def processes_with_env(name: str, value: str) -> list[int]:
    """Live processes whose environment holds ``name=value`` (readable ones only)."""
    needle = f"{name}={value}".encode()
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0") and alive(int(d.name)):
            found.append(int(d.name))
    return found


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL a process started by :func:`popen` and everything it started; reap it.

    Under the PID namespace killing the ``unshare`` process is enough (the kernel does the
    rest); its process group is killed too, and without a namespace every process carrying
    the run's fail-stop token is swept until none is left.
    """
    namespace = bool(getattr(proc, "fail_stop_namespace", False))
    init = descendants(proc.pid)[:1] if namespace and proc.poll() is None else []
    for kill in (lambda: os.killpg(proc.pid, signal.SIGKILL), proc.kill):
        try:
            kill()
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait()
    # the namespace's PID 1 finishes dying (its parent-death signal) after unshare is reaped;
    # the kernel ends the namespace's other processes before PID 1 has exited
    deadline = time.monotonic() + 5.0
    while init and alive(init[0]) and time.monotonic() < deadline:
        time.sleep(0.002)
    token = getattr(proc, "fail_stop_token", None)
    if token and not getattr(proc, "fail_stop_namespace", False):
        for _ in range(50):
            left = processes_with_env(FAIL_STOP_ENV, token)
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.01)


# --------------------------------------------------------------------------- workers

_study_parent: int | None = None


def ensure_parent() -> None:
    """Raise :class:`StudyParentGone` when this worker's study runner has ended."""
    if _study_parent is not None and not alive(_study_parent):
        raise StudyParentGone(f"the study runner (pid {_study_parent}) is gone")


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _watch(pid: int, middleman: int | None) -> None:
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        fd = None
    except OSError:  # no pidfd here: poll instead
        while alive(pid):
            time.sleep(0.05)
        fd = None
    if fd is not None:
        select.select([fd], [], [])
    if middleman is not None and middleman != pid:
        try:
            os.kill(middleman, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    _die()


def guard_worker(study_pid: int) -> None:
    """Pool-worker initializer: die with the parent process, and with the study runner.

    The parent-death signal covers the worker's direct parent (the forkserver); a watcher
    thread covers the study runner ``study_pid`` and then also kills the forkserver, which
    would otherwise outlive it. A worker whose runner is already gone dies at once.
    """
    global _study_parent
    _study_parent = int(study_pid)
    set_parent_death_signal(signal.SIGKILL)
    parent = os.getppid()
    if not alive(study_pid):
        _die()
    threading.Thread(target=_watch, args=(int(study_pid), parent if parent != study_pid else None),
                     name="study-runner-watch", daemon=True).start()
