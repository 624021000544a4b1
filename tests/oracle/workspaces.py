"""Workspaces and helpers shared by the checkpoint-store tests (tests/oracle/test_checkpoint*.py)."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import oracle.store.checkpoint as ckpt
from oracle.store.checkpoint import CheckpointStore


def make_ws(root: Path) -> Path:
    """A small repository-like workspace: packages, a duplicate file, an executable, an
    empty directory, symlinks, and excluded junk (.git, caches, a virtualenv, egg-info)."""
    ws = root / "ws"
    (ws / "pkg" / "sub").mkdir(parents=True)
    (ws / "pkg" / "__init__.py").write_text("")
    (ws / "pkg" / "mod.py").write_text("def f(x):\n    return x + 1\n" * 50)
    (ws / "pkg" / "sub" / "data.bin").write_bytes(bytes(range(256)) * 40)
    (ws / "pkg" / "copy.py").write_text("def f(x):\n    return x + 1\n" * 50)  # same content
    (ws / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(ws / "run.sh", 0o755)
    (ws / "empty_dir").mkdir()
    os.symlink("pkg/mod.py", ws / "link_to_mod")
    os.symlink("pkg", ws / "link_to_pkg")
    for junk in (".git", "__pycache__", ".venv/lib", "pkg/__pycache__", "thing.egg-info"):
        (ws / junk).mkdir(parents=True, exist_ok=True)
        (ws / junk / "junk").write_text("should not be stored")
    return ws


def tree(root: Path) -> dict[str, tuple]:
    """Every member below ``root``: kind, mode and content (or link target)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = ("dir", p.stat().st_mode & 0o777)
            else:
                out[rel] = ("file", p.stat().st_mode & 0o777, p.read_bytes())
    return out


def age(ws: Path, seconds: float = 5.0) -> None:
    """Backdate every file so stat-cache entries are not 'racy'."""
    t = time.time() - seconds
    for dirpath, _, filenames in os.walk(ws):
        for name in filenames:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                os.utime(p, (t, t))


def age_all(ws: Path, seconds: float = 5.0) -> None:
    """Backdate files *and directories*, so cached listings are trusted too.

    Backdating sets a directory's ctime to now, and a directory's listing is trusted only
    once its ctime is older than RACY_SLACK_NS too: wait that long.
    """
    age(ws, seconds)
    t = time.time() - seconds
    for dirpath, _, _ in os.walk(ws, topdown=False):
        os.utime(dirpath, (t, t))
    time.sleep(ckpt.RACY_SLACK_NS / 1e9 + 0.01)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def stored_blobs(store: CheckpointStore, checkpoint_id: str) -> dict[str, bytes]:
    """path -> stored content of every file member, read from the store (no restore: a
    checkpoint holding an escaping symlink is refused by restore)."""
    return {m["path"]: store.blob(m["blob"])
            for m in store.manifest(checkpoint_id)["members"] if m["kind"] == "file"}
