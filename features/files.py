"""Files written whole or not at all: the project's one home for an atomic write.

Every table, report, figure, plan and manifest the toolkit writes goes through here, so a
crash, a full disk or a signal never leaves half a file under the name a reader trusts, and
never leaves a temp file behind. It sits on the lowest floor that writes files (the readers'
command line writes Parquet), so every package above can use it. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["atomic_path", "write_atomic", "write_text_atomic"]


def _fsync_dir(directory: Path) -> None:
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A hidden temp path beside ``path`` (same file system) for a writer that wants a path
    (``savefig``, ``to_csv``, ``pq.write_table``); on a clean exit it is fsync'd and renamed
    over ``path`` (its directory fsync'd too). On any failure, interrupt or signal that
    raises, the temp file is removed and ``path`` is left as it was. A directory as ``path``
    is refused before anything is written."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path}: is a directory; give the path of a file to write")
    path.parent.mkdir(parents=True, exist_ok=True)
    # the real suffix last, so a writer that infers the format from it (savefig) still can
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}")
    os.close(fd)
    try:
        yield Path(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def write_atomic(path: str | Path, write: Callable[[BinaryIO], object]) -> None:
    """Write a file whole or not at all: ``write(f)`` fills the temp file of
    :func:`atomic_path` through a binary file object."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        write(f)


def write_text_atomic(path: str | Path, text: str) -> None:
    """:func:`write_atomic` for a text (UTF-8)."""
    write_atomic(path, lambda f: f.write(text.encode("utf-8")))
