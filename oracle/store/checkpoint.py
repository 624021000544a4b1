"""Archive-backed logical checkpoints: content-addressed, zstd-compressed, restored safely.

A checkpoint is what the pilot stored (paper, Appendix A "Checkpoint contents"): the task
workspace, minus ``.git``, virtual environments and build/cache folders (configurable),
plus the agent's preserved transcript and discovered facts. Creation latency, compressed
size and restore latency are recorded for every checkpoint.

Store layout under ``root``::

    packs/<uuid>.pack    the blobs a ``create`` added: one zstandard frame per distinct file
                         content, addressed by the sha256 of the *uncompressed* content,
                         then the pack's own index (sha256 -> offset, length, size)
    manifests/<id>.zst   zstd-compressed JSON, sealed by a digest (see below): path -> blob
                         sha256, mode, mtime, size, or symlink target; transcript; facts;
                         the effect seq it covers; costs
    tmp/                 files being written, renamed into place when complete

Why packs rather than one file per blob: creating a file is the dominant cost of a
checkpoint on many filesystems (about 1-2 ms per file on the ext4 volume this was built
on, against ~0.03 ms to compress a 14 KB source file), so one pack per checkpoint instead
of one file per new blob is what makes a full checkpoint several times faster than
``tar czf``. Addressing is still by content: a blob is stored once, in whichever pack got
it first, and :meth:`CheckpointStore.locate` finds it.

Content addressing makes a checkpoint after a small change cheap: unchanged contents are
not stored again. Unchanged *files* are not even re-read: the store caches, per workspace
and path, ``(size, mtime_ns, ctime_ns, inode, device) -> sha256``. **Assumption** (the same
one git and rsync make): a regular file whose size, mtime, ctime, inode and device are all
unchanged has unchanged content. ctime cannot be set from user space, so ``touch -d``
tricks do not defeat it; to rule out "racy" modifications inside one timestamp tick, an
entry is trusted only if the file's mtime was already older than ``RACY_SLACK_NS`` when it
was hashed (otherwise the file is simply re-hashed next time). The cache lives in memory,
per store object; restore seeds it (restored files get their checkpointed mtimes), so a
checkpoint right after a restore is cheap too.

**Reading a workspace that changes underneath (the consistency rule).** The workspace is
walked through directory descriptors: every directory below the root is opened by name
relative to its parent's descriptor with ``O_NOFOLLOW | O_DIRECTORY`` and its device and
inode are checked against what the listing reported; every file is opened the same way
(``O_NOFOLLOW | O_NONBLOCK``, so neither a symlink nor a FIFO can be opened through) and
``fstat`` must show a regular file with the device and inode the scan saw. A file is
recorded as it was at one instant between the scan and the end of its read: its size,
mtime and ctime must not move while it is read. A member that vanishes, is replaced (by a
symlink, a FIFO, another file or directory) or is modified while read is a *changed
member*: the attempt is discarded (nothing is published, its partial pack is deleted) and
``create`` starts over with a fresh scan, at most ``retries`` more times; if the workspace
is still changing, :class:`WorkspaceChangedError` names the member. Nothing outside the
workspace is ever read, and no content is stored for a path that did not hold it.
:func:`state_digest` reads by the same rule. (Only the root itself may be a symlink: it is
the caller's own path.) A scan that holds a member restore would refuse (a symlink that
resolves outside the workspace, a path of 4096 bytes or more) is refused by ``create``
with :class:`UnrestorableMemberError`: every checkpoint ``create`` reports can be restored.

Crash safety: the pack and the manifest are written to ``tmp/`` and renamed (the manifest
hard-linked, which also refuses to overwrite an existing id) into place, the manifest
last, so a crash mid-``create`` leaves no visible checkpoint, at worst a temp file or an
unreferenced pack. A writer holds an exclusive ``flock`` on its temp file from creation
until it is published, and opening a store removes every temp file nobody holds a lock on
(:meth:`CheckpointStore.clean_tmp`): those of writers that were killed, never those of a
live writer in another process. By default (``durable=True``) the pack and the manifest
are also fsync'd (with their directories) before ``create`` returns, which survives power
loss too.

Manifests are sealed: the first field of the JSON text is ``"digest"``, the sha256 of the
rest of the text exactly as stored, so the transcript, the facts, every member and every
cost are covered, and a manifest edited in any byte is refused by ``restore`` and
``info``. (The digest detects edits and corruption, not a forger who recomputes it: the
checks below do not rely on it.)

Every file of the store is opened with ``O_NOFOLLOW | O_NONBLOCK`` and must be a regular
file (a FIFO or device planted in ``packs/`` or ``manifests/`` blocks nothing; the pack is
ignored with a warning, the manifest refused). A manifest or pack index is inflated to at
most ``MAX_MANIFEST_BYTES`` and holds at most ``MAX_JSON_VALUES`` values, counted before
it is parsed, so reading one takes at most about a gigabyte whatever its compression ratio.

Restore is safe and bounded: the manifest is inflated to at most ``MAX_MANIFEST_BYTES``
and validated whole first (types and ranges of every field, names of at most 255 bytes,
paths and link targets of at most 4095, no absolute path, no ``..`` or empty component, no
member below a symlink or file member, no symlink that resolves outside the workspace,
following the manifest's own symlinks; each blob's size in its pack index must equal the
member's); its members and their bytes are checked against the store's bounds
(``max_restore_files``, default ``DEFAULT_MAX_RESTORE_FILES``; ``max_restore_bytes``) and
against the free space (less ``RESTORE_RESERVE_BYTES``) and inodes of ``dest``'s
filesystem, all before anything is written. Then files are written into a temporary
directory next to ``dest``, each blob inflated to at most its declared size (refused at
the first byte over, so the total is bounded by the manifest's sum of sizes) and its
content hash checked, and the directory is renamed onto ``dest`` only when complete. Every
write is relative to a directory descriptor opened component by component with
``O_NOFOLLOW`` (files with ``O_EXCL | O_NOFOLLOW``): another process that swaps a directory
of the temp directory for a symlink gets the restore refused, never a file written
outside it. A restore ``flock``s its temp directory until the rename, so one left by a
killed restore (nobody holds its lock) is removed by the next restore next to it
(:meth:`CheckpointStore.clean_restores`). Any malformed, corrupt, unsafe or too large
manifest or pack raises :class:`UnsafeArchiveError` naming the file and field, and
``dest`` is untouched.

Durable fork points (``../shared/paper/002_*.txt``): given an :class:`~oracle.store.effects.EffectLog`,
``create`` first checks that the log is drained up to the point the checkpoint covers
(else :class:`~oracle.store.effects.ForkBarrierError`) and records that sequence number.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import fnmatch
import hashlib
import json
import math
import operator
import os
import re
import shutil
import stat
import struct
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import zstandard

from features.schema import INT64_MAX
from oracle.store.effects import EffectLog, ForkBarrierError

__all__ = [
    "DEFAULT_EXCLUDES",
    "MAX_MANIFEST_BYTES",
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointStore",
    "ForkBarrierError",
    "RestoreInfo",
    "UnrestorableMemberError",
    "UnsafeArchiveError",
    "WorkspaceChangedError",
    "decode_manifest",
    "encode_manifest",
    "state_digest",
    "write_pack",
]

DEFAULT_EXCLUDES: tuple[str, ...] = (
    ".git",
    ".venv",
    "venv",
    "env",
    "__pycache__",
    "build",
    "dist",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    "node_modules",
    ".tox",
    "*.egg-info",
)
"""Names (fnmatch patterns) excluded at any depth; a pattern containing ``/`` is matched
against the whole relative path instead."""

MANIFEST_FORMAT = 2  # 2: sealed by a digest; every file member carries its size
MAX_MANIFEST_BYTES = 256 << 20
"""Largest manifest (or pack index) the store writes or inflates, in uncompressed bytes."""
MAX_JSON_VALUES = 4_000_000
"""Most JSON values (counted as the ``{``, ``[`` and ``,`` bytes of its text, an upper
bound) a manifest or pack index may hold, checked before it is parsed: each value is a
Python object of up to ~100 bytes, so parsing one costs at most ~1 GB whatever its
compression ratio (a 300,000-file workspace's manifest holds ~2.1 million)."""
DEFAULT_MAX_RESTORE_FILES = 1_000_000
"""Members a restore writes at most unless the store is told otherwise."""
RESTORE_RESERVE_BYTES = 256 << 20
"""Free space a restore leaves on the destination's filesystem (checked before writing)."""
DEFAULT_RETRIES = 2  # fresh scans after a changed member (see the consistency rule)
RACY_SLACK_NS = 100_000_000  # 100 ms: generous against coarse (jiffy) filesystem clocks
STREAM_THRESHOLD = 32 * 1024 * 1024  # files larger than this are hashed/compressed in chunks
_CHUNK = 1024 * 1024
_PARALLEL_MIN_BYTES = 4 * 1024 * 1024  # below this, starting worker threads costs more
_HEX64 = re.compile(r"[0-9a-f]{64}")
_ID_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")
_MAX_LINK_HOPS = 40
_NAME_MAX = 255  # bytes in one path component (Linux, every common filesystem)
_PATH_MAX = 4096  # bytes in a path or link target, including the terminating NUL
_MAX_DIR_FDS = 64  # directory descriptors one scan keeps open for the reads that follow
_MAX_CHAIN_FDS = 64  # descriptors held along the path being walked (deeper ones reopen)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_OPEN = os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC
_SUBDIR_OPEN = _DIR_OPEN | os.O_NOFOLLOW
_FILE_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | _CLOEXEC
# open() errors that mean "this name no longer is what the scan saw"
_GONE = {errno.ENOENT: "vanished", errno.ELOOP: "became a symlink",
         errno.ENOTDIR: "lost a parent directory", errno.ENXIO: "became a socket or device",
         errno.EMLINK: "became a symlink"}
_SEAL_HEAD = b'{"digest":"'
_SEAL_TAG = b"ripplecp-manifest-v2\n"
_T = TypeVar("_T")


class CheckpointError(RuntimeError):
    """A checkpoint is missing, or could not be taken or read."""


class UnrestorableMemberError(CheckpointError):
    """The workspace holds a member no checkpoint of it could be restored with (a symlink
    leading outside the workspace, a path too long): ``create`` refuses it rather than
    report a checkpoint that ``restore`` would refuse."""


class WorkspaceChangedError(CheckpointError):
    """The workspace kept changing while it was checkpointed (see the consistency rule)."""


class UnsafeArchiveError(CheckpointError, ValueError):
    """The one error for a malformed, corrupt, edited or unsafe manifest or pack.

    ``file``: the manifest or pack; ``field``: what in it is wrong (``member 'a/b' mode``,
    ``digest``, ``index[3]``, ...); ``problem``: how. Raised before anything is written.
    """

    def __init__(self, file: str | Path, field: str, problem: str) -> None:
        super().__init__(str(file), field, problem)  # args kept: the error pickles
        self.file, self.field, self.problem = str(file), field, problem

    def __str__(self) -> str:
        return f"{self.file}: {self.field}: {self.problem}"


@dataclass(frozen=True)
class CheckpointInfo:
    """Cost and identity of one stored checkpoint.

    ``creation_s``: wall seconds from the call to the manifest being serialised (the
    final write of the manifest, well under a millisecond, is not included);
    ``size_bytes``: compressed bytes newly stored by this checkpoint (new blobs + its
    manifest; the pack's own index, ~40 bytes per new blob, is not counted);
    ``total_bytes``: compressed bytes it references in all (distinct blobs + manifest);
    ``n_files``: regular files in it; ``n_new_blobs``: contents it stored for the first
    time; ``state_digest``: :func:`state_digest` of the checkpointed workspace;
    ``effect_seq``: last effect-log sequence number it covers (None: no log given).
    """

    checkpoint_id: str
    creation_s: float
    size_bytes: int
    total_bytes: int
    n_files: int
    n_new_blobs: int
    state_digest: str
    effect_seq: int | None = None


@dataclass(frozen=True)
class RestoreInfo:
    """Result of a restore: latency, the digest of the restored state, preserved agent state."""

    checkpoint_id: str
    restore_latency_s: float
    state_digest: str
    transcript: list[dict]
    facts: dict


# --------------------------------------------------------------------------- scanning
_CacheEntry = tuple[tuple[int, int, int, int, int], str, str, str]
# A scanned member: (relpath, kind, permission bits, stat result, extra) where extra is a
# symlink's target, "" for a directory, and for a file its still-valid stat-cache entry or
# None (see ``_scan``'s ``cache``).
_Scanned = tuple[str, str, int, os.stat_result, Any]


class _Changed(Exception):
    """A member is no longer what the scan saw (internal: ``create`` retries on it)."""

    def __init__(self, rel: str, why: str) -> None:
        super().__init__(rel, why)
        self.rel, self.why = rel, why


def _retrying(workspace: Path, retries: int, attempt: Callable[[], _T]) -> _T:
    """Run ``attempt`` (a scan and its reads) until no member changed under it."""
    for _ in range(retries):
        try:
            return attempt()
        except _Changed:
            continue
    try:
        return attempt()
    except _Changed as exc:
        raise WorkspaceChangedError(
            f"workspace {workspace}: {exc.rel!r} {exc.why} while it was being read, "
            f"{retries + 1} attempts in a row; checkpoint it once it is quiet") from None


def _kind_of(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symlink"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "another file"


def _open_at(name: str, flags: int, dir_fd: int, rel: str) -> int:
    """``os.open`` relative to ``dir_fd``; a name that is no longer what the scan saw at
    ``rel`` (gone, now a symlink, ...) raises _Changed."""
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        why = _GONE.get(exc.errno)
        if why is None:
            raise
        raise _Changed(rel, why) from None


class _Tree:
    """The directory descriptors of one scan of a workspace.

    Members are opened by name relative to the descriptor of the very directory the scan
    listed, never through a path a concurrent rename or symlink could redirect. Up to
    ``_MAX_DIR_FDS`` directories that hold files to read stay open; any other directory
    is reopened from the nearest open ancestor, one verified component at a time.
    """

    def __init__(self, workspace: Path) -> None:
        self.path = os.fspath(workspace)
        try:
            fd = os.open(self.path, _DIR_OPEN)  # the root may be a symlink: the caller's path
        except (FileNotFoundError, NotADirectoryError):
            raise NotADirectoryError(f"workspace {self.path} is not a directory") from None
        st = os.fstat(fd)
        self.ids: dict[str, tuple[int, int]] = {"": (st.st_dev, st.st_ino)}
        self.fds: dict[str, int] = {"": fd}  # kept open; read-only once the scan is done
        self._walked: dict[int, tuple[str, int]] = {}  # thread -> last directory reopened

    def __enter__(self) -> _Tree:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in [*self.fds.values(), *(fd for _, fd in self._walked.values())]:
            os.close(fd)
        self.fds, self._walked = {}, {}

    def open_dir(self, parent_fd: int, name: str, rel: str) -> int:
        """Open subdirectory ``name`` of ``parent_fd``: the one the scan saw at ``rel``."""
        fd = _open_at(name, _SUBDIR_OPEN, parent_fd, rel)
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != self.ids[rel]:
            os.close(fd)
            raise _Changed(rel, "was replaced by another directory")
        return fd

    def dir_fd(self, rel: str) -> tuple[int, bool]:
        """A descriptor of scanned directory ``rel``, and whether the caller must close it."""
        fd = self.fds.get(rel)
        if fd is not None:
            return fd, False
        parts = rel.split("/")
        i = len(parts) - 1
        while i > 0 and "/".join(parts[:i]) not in self.fds:
            i -= 1
        cur, owned = self.fds["/".join(parts[:i])], False
        try:
            for j in range(i, len(parts)):
                nxt = self.open_dir(cur, parts[j], "/".join(parts[:j + 1]))
                if owned:
                    os.close(cur)
                cur, owned = nxt, True
        except BaseException:
            if owned:
                os.close(cur)
            raise
        return cur, True

    def _reading_dir_fd(self, rel: str) -> int:
        """A descriptor of directory ``rel`` for reading its files: a kept one, or the one
        this thread reopened last (files are read grouped by directory), else reopened."""
        fd = self.fds.get(rel)
        if fd is not None:
            return fd
        me = threading.get_ident()
        last = self._walked.get(me)
        if last is not None and last[0] == rel:
            return last[1]
        fd, _ = self.dir_fd(rel)
        self._walked[me] = (rel, fd)  # each thread touches its own key only
        if last is not None:
            os.close(last[1])
        return fd

    def open_file(self, rel: str, scanned: os.stat_result) -> tuple[int, os.stat_result]:
        """Open file member ``rel`` for reading: the regular file the scan saw, or _Changed."""
        parent, _, name = rel.rpartition("/")
        fd = _open_at(name, _FILE_OPEN, self._reading_dir_fd(parent), rel)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_ino, st.st_dev) != (scanned.st_ino,
                                                                         scanned.st_dev):
            os.close(fd)
            raise _Changed(rel, f"was replaced by {_kind_of(st.st_mode)}")
        return fd, st


class _Excluder:
    """Compiled exclusion rule: literal names, name globs, and whole-path globs."""

    def __init__(self, exclude: Sequence[str]) -> None:
        if isinstance(exclude, str):
            raise TypeError("exclude must be a sequence of patterns, not one string")
        names = [p for p in exclude if "/" not in p]
        paths = [p.strip("/") for p in exclude if "/" in p]
        self.literal = {p for p in names if not any(c in p for c in "*?[")}
        # "*<literal>" globs (e.g. *.egg-info) are a plain suffix test: cheaper than a regex
        self.suffixes = tuple(p[1:] for p in names if p.startswith("*")
                              and not any(c in p[1:] for c in "*?["))
        globs = [fnmatch.translate(p) for p in names
                 if p not in self.literal and p[1:] not in self.suffixes]
        self.name_re = re.compile("|".join(globs)) if globs else None
        self.path_re = re.compile("|".join(fnmatch.translate(p) for p in paths)) if paths else None

    def __call__(self, name: str, rel: str) -> bool:
        return (name in self.literal
                or (self.suffixes != () and name.endswith(self.suffixes))
                or (self.name_re is not None and self.name_re.match(name) is not None)
                or (self.path_re is not None and self.path_re.match(rel) is not None))


def _scan(tree: _Tree, exclude: Sequence[str], cache: dict[str, _CacheEntry] | None = None,
          index: dict[str, Any] | None = None) -> list[_Scanned]:
    """All non-excluded members of ``tree``'s workspace (not following symlinks), by path.

    With ``cache`` (relpath -> stat-cache entry) and ``index`` (stored blobs), a file whose
    cache entry matches its (size, mtime_ns, ctime_ns, inode, device) and whose blob is
    stored carries that entry; done here, in the one pass that stats every member.
    Directories are entered through descriptors (see :class:`_Tree`); a member that
    vanishes or changes type meanwhile raises :class:`_Changed`.
    """
    ex = _Excluder(exclude)
    literal, suffixes, name_re, path_re = ex.literal, ex.suffixes, ex.name_re, ex.path_re
    out: list[_Scanned] = []
    isreg, isdir, islnk = stat.S_ISREG, stat.S_ISDIR, stat.S_ISLNK
    append = out.append
    name_match = name_re.match if name_re is not None else None
    path_match = path_re.match if path_re is not None else None
    cget = cache.get if cache is not None else None
    blobs = index if index is not None else {}
    ids = tree.ids

    def listing(dfd: int, reldir: str) -> tuple[bool, list[tuple[str, str]]]:
        """Append the members of one directory; return (has files to read, subdirs)."""
        prefix = reldir + "/" if reldir else ""
        todo = False
        subdirs: list[tuple[str, str]] = []
        with os.scandir(dfd) as it:  # each lstat is an fstatat() of one name on dfd
            for de in it:
                name = de.name
                if name in literal or (suffixes and name.endswith(suffixes)) or (
                        name_match is not None and name_match(name)):
                    continue
                rel = prefix + name
                if path_match is not None and path_match(rel):
                    continue
                try:
                    st = de.stat(follow_symlinks=False)  # one lstat per member, none elsewhere
                except FileNotFoundError:
                    raise _Changed(rel, "vanished") from None
                m = st.st_mode
                if isreg(m):
                    hit = cget(rel) if cget is not None else None
                    if hit is not None and (hit[0] != (st.st_size, st.st_mtime_ns,
                                                       st.st_ctime_ns, st.st_ino, st.st_dev)
                                            or hit[1] not in blobs):
                        hit = None
                    todo = todo or hit is None
                    append((rel, "file", m & 0o777, st, hit))
                elif isdir(m):
                    append((rel, "dir", m & 0o777, st, ""))
                    ids[rel] = (st.st_dev, st.st_ino)
                    subdirs.append((name, rel))
                elif islnk(m):
                    try:
                        target = os.readlink(name, dir_fd=dfd)
                    except OSError as exc:  # ENOENT: gone; EINVAL: not a symlink now
                        if exc.errno not in (errno.ENOENT, errno.EINVAL):
                            raise
                        raise _Changed(rel, "vanished or stopped being a symlink") from None
                    append((rel, "symlink", 0, st, target))
                else:
                    warnings.warn(
                        f"checkpoint: skipping {tree.path}/{rel}: not a regular file, "
                        "directory or symlink",
                        stacklevel=7,  # the caller of create() or state_digest()
                    )
        return todo, subdirs

    # Depth first; a frame is [reldir, descriptor or None, pending subdirs, kept in tree].
    frames: list[list[Any]] = []
    try:
        _, subs = listing(tree.fds[""], "")
        frames.append(["", tree.fds[""], iter(subs), True])
        while frames:
            frame = frames[-1]
            nxt = next(frame[2], None)
            if nxt is None:
                frames.pop()
                if frame[1] is not None and not frame[3]:
                    os.close(frame[1])
                continue
            name, rel = nxt
            if frame[1] is None:  # closed to bound the descriptors of a deep path
                frame[1], _ = tree.dir_fd(frame[0])
            fd = tree.open_dir(frame[1], name, rel)
            try:
                todo, subs = listing(fd, rel)
            except BaseException:
                os.close(fd)
                raise
            keep = todo and len(tree.fds) < _MAX_DIR_FDS
            if keep:
                tree.fds[rel] = fd
            frames.append([rel, fd, iter(subs), keep])
            if len(frames) > _MAX_CHAIN_FDS:
                far = frames[-_MAX_CHAIN_FDS - 1]
                if far[1] is not None and not far[3]:
                    os.close(far[1])
                    far[1] = None
    finally:
        for frame in frames:
            if frame[1] is not None and not frame[3]:
                os.close(frame[1])
    out.sort(key=operator.itemgetter(0))
    return out


def _check_restorable(entries: list[_Scanned], workspace: Path) -> None:
    """Refuse (UnrestorableMemberError) a scan that holds a member restore would refuse:
    a path or link target too long, or a symlink that resolves outside the workspace
    (by the manifest's own links, as restore checks it). So every checkpoint ``create``
    reports can be restored."""
    links: dict[str, str] = {}
    for rel, kind, _, _, target in entries:
        n = len(rel.encode("utf-8", "surrogateescape"))
        if n >= _PATH_MAX:
            raise UnrestorableMemberError(
                f"workspace {workspace}: {rel[:60]!r}...: path of {n} bytes is too long for a "
                f"checkpoint (at most {_PATH_MAX - 1}); exclude it to checkpoint the rest")
        if kind == "symlink":
            links[rel] = target
    for rel, target in links.items():
        try:
            if len(target.encode("utf-8", "surrogateescape")) >= _PATH_MAX:
                raise UnsafeArchiveError(workspace, f"symlink {rel!r}",
                                         f"-> {target[:60]!r}...: target too long")
            _resolve_inside(links, rel.split("/")[:-1], target, rel, [0], workspace)
        except UnsafeArchiveError as exc:
            raise UnrestorableMemberError(
                f"workspace {workspace}: symlink {rel!r} {exc.problem}; no "
                "checkpoint of it could be restored (remove the link or exclude it)") from None


def _digest_row(path: str, kind: str, mode: int, ref: str) -> str:
    # No field can contain NUL, so this encoding is unambiguous.
    return f"{path}\0{kind}\0{mode:o}\0{ref}\0"


def _digest_rows(rows: list[str]) -> str:
    """sha256 over the rows of :func:`_digest_row`, in path order."""
    h = hashlib.sha256(b"ripplecp-state-v1\n")
    h.update("".join(sorted(rows)).encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def _digest_entries(entries: Iterable[tuple[str, str, int, str]]) -> str:
    """sha256 over sorted (relpath, kind, mode, content-hash | link target) tuples.

    Undecodable file names contribute their raw bytes (surrogate escapes).
    """
    return _digest_rows([_digest_row(*e) for e in entries])


_member_encoder = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"))
_json_str = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]


def _member_json(member: dict) -> str:
    return _member_encoder.encode(member)


def _file_member_json(rel: str, mode: int, mtime_ns: int, size: int, blob: str) -> str:
    """Same bytes as :func:`_member_json` of a file member, without a dict per file."""
    return (f'{{"path":{_json_str(rel)},"kind":"file","mode":{mode},"mtime_ns":{mtime_ns},'
            f'"size":{size},"blob":"{blob}"}}')


def _unchanged(rel: str, before: os.stat_result, after: os.stat_result, n: int) -> None:
    """Raise _Changed unless the file read (``n`` bytes) held still while it was read."""
    if not (n == before.st_size == after.st_size and before.st_mtime_ns == after.st_mtime_ns
            and before.st_ctime_ns == after.st_ctime_ns):
        raise _Changed(rel, "was modified")


def _digest_once(workspace: Path, exclude: Sequence[str]) -> str:
    rows = []
    with _Tree(workspace) as tree:
        for rel, kind, mode, st, target in _scan(tree, exclude):
            if kind == "file":
                fd, st = tree.open_file(rel, st)
                try:
                    h, n = hashlib.sha256(), 0
                    while chunk := os.read(fd, _CHUNK):
                        h.update(chunk)
                        n += len(chunk)
                    _unchanged(rel, st, os.fstat(fd), n)
                finally:
                    os.close(fd)
                rows.append((rel, kind, st.st_mode & 0o777, h.hexdigest()))
            else:
                rows.append((rel, kind, mode, target))
    return _digest_entries(rows)


def state_digest(workspace: Path, exclude: Sequence[str] = DEFAULT_EXCLUDES) -> str:
    """Digest of a workspace's checkpointed state (same rule and exclusions as a checkpoint).

    sha256 over the sorted (relative path, kind, permission bits, content sha256 or
    symlink target) of every non-excluded member; mtimes and ownership are ignored, so a
    restored workspace has the digest of the state it was checkpointed from. Members are
    read by the consistency rule of the module docstring (WorkspaceChangedError if the
    workspace keeps changing).
    """
    return _retrying(workspace, DEFAULT_RETRIES, lambda: _digest_once(workspace, exclude))


def _json_bytes(obj: Any, what: str) -> bytes:
    try:
        # ASCII escapes keep undecodable (surrogate-escaped) file names round-trippable.
        return json.dumps(obj, ensure_ascii=True, allow_nan=False,
                          separators=(",", ":")).encode("ascii")
    except (TypeError, ValueError) as exc:
        raise TypeError(f"checkpoint {what} is not JSON-serialisable: {exc}") from exc


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _locked_temp(tmpdir: Path) -> tuple[str, int]:
    """A new temp file in ``tmpdir``, open for writing and exclusively ``flock``ed.

    The lock marks a live writer (see :meth:`CheckpointStore.clean_tmp`); a cleaner may
    remove the file between its creation and the lock, which the check after locking
    sees, and then another name is taken.
    """
    while True:
        path = os.path.join(tmpdir, f"{uuid.uuid4().hex}.tmp")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            st, now = os.fstat(fd), os.stat(path, follow_symlinks=False)
            if (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino):
                return path, fd
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


# --------------------------------------------------------------------------- manifests
def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _json_values(data: bytes | bytearray) -> int:
    """An upper bound on the values JSON text ``data`` holds (its ``{``, ``[`` and ``,``
    bytes, plus one): what bounds the memory parsing it takes, before it is parsed."""
    return data.count(b"{") + data.count(b"[") + data.count(b",") + 1


def _parse_json(data: bytes | bytearray, where: str | Path, field: str) -> Any:
    """JSON text -> value; any malformation (deep nesting included) is UnsafeArchiveError,
    and so is text of more than :data:`MAX_JSON_VALUES` values (refused before parsing)."""
    n = _json_values(data)
    if n > MAX_JSON_VALUES:
        raise UnsafeArchiveError(where, field, f"holds up to {n} JSON values, more than the "
                                 f"{MAX_JSON_VALUES} allowed (parsing it would take gigabytes)")
    try:
        return json.loads(data, parse_constant=_reject_constant)
    except RecursionError:
        raise UnsafeArchiveError(where, field, "JSON nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, oversized integers
        raise UnsafeArchiveError(where, field, f"not valid JSON: {exc}") from None


def _inflate(data: bytes, limit: int, where: str | Path, field: str) -> bytearray:
    """Decompress one zstd frame to at most ``limit`` bytes (refused at the first over)."""
    try:
        declared = zstandard.frame_content_size(data)
    except zstandard.ZstdError as exc:
        raise UnsafeArchiveError(where, field, f"not zstd data: {exc}") from None
    if declared > limit:
        raise UnsafeArchiveError(where, field,
                                 f"declares {declared} bytes, more than the {limit} allowed")
    out = bytearray()  # grown in place: no list of chunks and joined copy beside it
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(data)
        while chunk := reader.read(min(_CHUNK, limit + 1 - len(out))):
            out += chunk
            if len(out) > limit:
                raise UnsafeArchiveError(where, field,
                                         f"inflates to more than the {limit} bytes allowed")
    except zstandard.ZstdError as exc:
        raise UnsafeArchiveError(where, field, f"corrupt zstd data: {exc}") from None
    return out


def _seal(body: bytes) -> bytes:
    """Prefix JSON object text ``body`` with its digest as the object's first field."""
    if not (body.startswith(b"{") and body.endswith(b"}") and len(body) > 2):
        raise ValueError("a manifest must be a non-empty JSON object")
    digest = hashlib.sha256(_SEAL_TAG + body).hexdigest().encode("ascii")
    return _SEAL_HEAD + digest + b'",' + body[1:]


def encode_manifest(manifest: dict | bytes) -> bytes:
    """The stored form of a manifest: its JSON text, sealed by its digest, zstd-compressed.

    ``manifest``: a dict (any old ``"digest"`` is dropped) or the JSON text of one, for
    tools that rewrite stores (and for tests that forge them).
    """
    if isinstance(manifest, dict):
        manifest = _json_bytes({k: v for k, v in manifest.items() if k != "digest"},
                               "manifest")
    return zstandard.ZstdCompressor(level=1).compress(_seal(bytes(manifest)))


def decode_manifest(data: bytes, where: str | Path) -> dict:
    """The manifest stored as ``data`` (from file ``where``): inflated to at most
    ``MAX_MANIFEST_BYTES``, its digest checked, parsed; else UnsafeArchiveError."""
    body = _inflate(data, MAX_MANIFEST_BYTES, where, "zstd frame")
    n = len(_SEAL_HEAD) + 64
    if not body.startswith(_SEAL_HEAD) or body[n:n + 2] != b'",':
        raise UnsafeArchiveError(where, "digest", "missing: not a sealed checkpoint "
                                 f"manifest (format {MANIFEST_FORMAT})")
    seal = hashlib.sha256(_SEAL_TAG + b"{")
    seal.update(memoryview(body)[n + 2:])  # no copy of a body of up to MAX_MANIFEST_BYTES
    if seal.hexdigest().encode("ascii") != body[len(_SEAL_HEAD):n]:
        raise UnsafeArchiveError(where, "digest",
                                 "does not match the manifest's content: edited or corrupt")
    man = _parse_json(body, where, "manifest")
    if not isinstance(man, dict):
        raise UnsafeArchiveError(where, "manifest", "not a JSON object")
    return man


# --------------------------------------------------------------------------- validation
def _int_in(value: Any, lo: int, hi: int) -> bool:
    return type(value) is int and lo <= value <= hi


def _check_member_path(p: Any, where: str | Path) -> str:
    if not isinstance(p, str) or not p:
        raise UnsafeArchiveError(where, "member", f"bad path {p!r}")
    field = f"member {p!r}"
    if "\x00" in p:
        raise UnsafeArchiveError(where, field, "NUL byte in path")
    if p.startswith("/"):
        raise UnsafeArchiveError(where, field, "absolute path")
    parts = p.split("/")
    if ".." in parts:
        raise UnsafeArchiveError(where, field, "'..' component")
    if any(part in ("", ".") for part in parts):
        raise UnsafeArchiveError(where, field, "empty or '.' component (not normalised)")
    try:
        raw = p.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raise UnsafeArchiveError(where, field, "not encodable as a file name") from None
    if len(raw) >= _PATH_MAX:
        raise UnsafeArchiveError(where, field, f"path of {len(raw)} bytes is too long "
                                 f"(at most {_PATH_MAX - 1})")
    longest = max(len(part) for part in raw.split(b"/"))
    if longest > _NAME_MAX:
        raise UnsafeArchiveError(where, field, f"a component of {longest} bytes is too "
                                 f"long (at most {_NAME_MAX})")
    return p


def _resolve_inside(links: dict[str, str], start: list[str], target: str, member: str,
                    hops: list[int], where: str | Path) -> list[str]:
    """Resolve ``target`` from directory ``start`` using the manifest's own symlinks.

    Returns the resolved component list (relative to the workspace root) or raises
    :class:`UnsafeArchiveError` if resolution leaves the root at any point. A ``..`` after
    a symlinked component applies to the link's *target*, as the kernel does.
    """
    field = f"symlink {member!r}"
    if target.startswith("/"):
        raise UnsafeArchiveError(where, field, f"-> {target!r}: absolute target")
    cur = list(start)
    for part in target.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not cur:
                raise UnsafeArchiveError(
                    where, field, f"-> {links.get(member, target)!r}: resolves outside "
                    "the workspace")
            cur.pop()
            continue
        cur.append(part)
        key = "/".join(cur)
        if key in links:
            hops[0] += 1
            if hops[0] > _MAX_LINK_HOPS:
                raise UnsafeArchiveError(where, field, "too many levels of links")
            cur = _resolve_inside(links, cur[:-1], links[key], member, hops, where)
    return cur


def _validate_manifest(man: dict, where: str | Path, checkpoint_id: str) -> list[dict]:
    """Check every field restore uses; return the member list. Writes nothing."""
    if man.get("format") != MANIFEST_FORMAT:
        raise UnsafeArchiveError(where, "format", f"{man.get('format')!r}, expected "
                                 f"{MANIFEST_FORMAT}: not a checkpoint manifest")
    if man.get("checkpoint_id") != checkpoint_id:
        raise UnsafeArchiveError(where, "checkpoint_id", f"{man.get('checkpoint_id')!r} in "
                                 f"the manifest of {checkpoint_id!r}")
    if not isinstance(man.get("transcript"), list):
        raise UnsafeArchiveError(where, "transcript", "not a list")
    if not isinstance(man.get("facts"), dict):
        raise UnsafeArchiveError(where, "facts", "not an object")
    members = man.get("members")
    if not isinstance(members, list):
        raise UnsafeArchiveError(where, "members", "missing or not a list")
    kinds: dict[str, str] = {}
    links: dict[str, str] = {}
    for m in members:
        if not isinstance(m, dict):
            raise UnsafeArchiveError(where, "members", f"member {m!r} is not an object")
        p = _check_member_path(m.get("path"), where)
        field = f"member {p!r}"
        if p in kinds:
            raise UnsafeArchiveError(where, field, "duplicate path")
        kind = m.get("kind")
        if kind not in ("file", "dir", "symlink"):
            raise UnsafeArchiveError(where, field, f"unknown kind {kind!r}")
        kinds[p] = kind
        if kind == "symlink":
            t = m.get("target")
            if not isinstance(t, str) or not t or "\x00" in t:
                raise UnsafeArchiveError(where, f"symlink {p!r}", f"bad target {t!r}")
            if len(t.encode("utf-8", "surrogateescape")) >= _PATH_MAX:
                raise UnsafeArchiveError(where, f"symlink {p!r} target", "too long (at most "
                                         f"{_PATH_MAX - 1} bytes)")
            links[p] = t
            continue
        if not _int_in(m.get("mode"), 0, 0o777):
            raise UnsafeArchiveError(where, f"{field} mode", f"bad mode {m.get('mode')!r}")
        if not _int_in(m.get("mtime_ns", 0), -INT64_MAX - 1, INT64_MAX):
            raise UnsafeArchiveError(where, f"{field} mtime_ns",
                                     f"{m.get('mtime_ns')!r} is not a 64-bit integer")
        if kind == "file":
            if not (isinstance(m.get("blob"), str) and _HEX64.fullmatch(m["blob"])):
                raise UnsafeArchiveError(where, f"{field} blob",
                                         f"bad blob hash {m.get('blob')!r}")
            if not _int_in(m.get("size"), 0, INT64_MAX):
                raise UnsafeArchiveError(where, f"{field} size",
                                         f"{m.get('size', 'missing')!r} is not a byte count")
    for p in kinds:
        parts = p.split("/")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            pk = kinds.get(parent)
            if pk is not None and pk != "dir":
                raise UnsafeArchiveError(where, f"member {p!r}",
                                         f"lies below {pk} member {parent!r}")
    for p in links:
        parts = p.split("/")
        _resolve_inside(links, parts[:-1], links[p], p, [0], where)
    return members


# --------------------------------------------------------------------------- packs
_PACK_MAGIC = b"RCPPACK1"
_FOOTER = struct.Struct("<QQ8s")  # index offset, index length, magic


def _pack_tail(rows: list[list[Any]], index_offset: int) -> bytes:
    """A pack's zstd-compressed JSON index of ``rows`` and its footer."""
    idx = zstandard.ZstdCompressor(level=3).compress(_json_bytes(rows, "pack index"))
    return idx + _FOOTER.pack(index_offset, len(idx), _PACK_MAGIC)


def write_pack(path: Path, frames: Iterable[tuple[str, bytes, int]]) -> int:
    """Write a pack file of ready zstd frames, each ``(blob sha256, frame, declared size)``.

    The pack format written by the store itself, for tools that repack a store (and tests
    that forge one); nothing is checked, so it can hold lies for restore to refuse.
    Returns the pack's size in bytes.
    """
    rows: list[list[Any]] = []
    body = [_PACK_MAGIC]
    offset = len(_PACK_MAGIC)
    for h, frame, size in frames:
        rows.append([h, offset, len(frame), size])
        body.append(frame)
        offset += len(frame)
    body.append(_pack_tail(rows, offset))
    data = b"".join(body)
    Path(path).write_bytes(data)
    return len(data)


class _PackWriter:
    """Appends zstd frames to one new pack file in ``tmp/``; published atomically by ``finish``.

    Pack layout: magic, frames (one per blob), zstd-compressed JSON index
    ``[[sha256, offset, compressed_len, size], ...]``, footer (index offset, length, magic).
    The temp file stays locked (a live writer's) until it is renamed into ``packs/``.
    """

    def __init__(self, store: CheckpointStore) -> None:
        self.store = store
        self.name = f"{uuid.uuid4().hex}.pack"
        self.tmp = ""
        self._f: Any = None  # opened on the first blob: a no-change checkpoint creates no file
        self.offset = len(_PACK_MAGIC)
        self.entries: dict[str, tuple[int, int, int]] = {}
        self.claimed: set[str] = set()  # guarded by the store's lock
        self.lock = threading.Lock()

    @property
    def f(self) -> Any:
        """The pack's temp file, created (with its magic) on first use; callers hold ``lock``."""
        if self._f is None:
            self.tmp, fd = _locked_temp(self.store._tmp)
            self._f = open(fd, "wb")  # noqa: SIM115 - closed in finish/abort
            self._f.write(_PACK_MAGIC)
        return self._f

    def add(self, h: str, comp: bytes, size: int) -> None:
        with self.lock:
            self.f.write(comp)
            self.entries[h] = (self.offset, len(comp), size)
            self.offset += len(comp)

    def finish(self, durable: bool) -> tuple[str, int] | None:
        """Publish the pack; return (name, file size), or None if it holds no blob."""
        if not self.entries:
            self.abort()
            return None
        rows = [[h, o, c, s] for h, (o, c, s) in self.entries.items()]
        tail = _pack_tail(rows, self.offset)
        self.f.write(tail)
        total = self.offset + len(tail)
        self.f.flush()
        if durable:
            os.fsync(self.f.fileno())
        os.replace(self.tmp, self.store._packs / self.name)  # still locked: never cleaned
        self.f.close()
        self._f = None
        return self.name, total

    def abort(self) -> None:
        if self._f is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.tmp)
            self._f.close()
            self._f = None


class _Slice:
    """Read-only file-like view of ``length`` bytes at ``offset`` of descriptor ``fd``.

    Bounds the decompressor to exactly one frame of a pack, whatever follows it.
    """

    def __init__(self, fd: int, offset: int, length: int) -> None:
        self.fd, self.pos, self.end = fd, offset, offset + length

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = self.end - self.pos
        data = os.pread(self.fd, min(n, self.end - self.pos), self.pos)
        self.pos += len(data)
        return data


def _read_upto(fd: int, size: int) -> bytes:
    """Read ``size`` bytes from ``fd`` (fewer only at end of file)."""
    data = os.read(fd, size) if size > 0 else b""
    if len(data) < size:  # short read: a shrinking file, or a filesystem that splits reads
        parts = [data]
        got = len(data)
        while got < size and (chunk := os.read(fd, size - got)):
            parts.append(chunk)
            got += len(chunk)
        data = b"".join(parts)
    return data


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _umask() -> int:
    """The process umask (read without a race where the platform allows)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _open_regular(path: str | Path) -> int:
    """A read-only descriptor of store file ``path``, refused (UnsafeArchiveError) unless
    it is a regular file: a FIFO, device or symlink planted in a store never blocks or
    redirects a read (``O_NONBLOCK | O_NOFOLLOW``, then ``fstat``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | _CLOEXEC)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise UnsafeArchiveError(path, "file", "is a symlink, not a regular file") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UnsafeArchiveError(path, "file", f"is {_kind_of(st.st_mode)}, not a regular file")
    return fd


def _read_pack_index(path: Path) -> list[tuple[str, int, int, int]]:
    """The index rows of pack ``path``; any malformation is UnsafeArchiveError."""
    with open(_open_regular(path), "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < len(_PACK_MAGIC) + _FOOTER.size:
            raise UnsafeArchiveError(path, "footer", "too short")
        f.seek(size - _FOOTER.size)
        off, length, magic = _FOOTER.unpack(f.read(_FOOTER.size))
        if magic != _PACK_MAGIC or off + length + _FOOTER.size != size:
            raise UnsafeArchiveError(path, "footer", "bad magic or index bounds")
        f.seek(off)
        if length > MAX_MANIFEST_BYTES:
            raise UnsafeArchiveError(path, "footer", f"index of {length} bytes, more than "
                                     f"the {MAX_MANIFEST_BYTES} allowed")
        rows = _parse_json(_inflate(f.read(length), MAX_MANIFEST_BYTES, path, "index"),
                           path, "index")
    if not isinstance(rows, list):
        raise UnsafeArchiveError(path, "index", "not a list")
    out = []
    for i, row in enumerate(rows):
        if not (isinstance(row, list) and len(row) == 4):
            raise UnsafeArchiveError(path, f"index[{i}]", f"bad row {row!r}")
        h, o, c, s = row
        if not (isinstance(h, str) and _HEX64.fullmatch(h)) or not (
                _int_in(o, len(_PACK_MAGIC), off) and _int_in(c, 1, off - o)
                and _int_in(s, 0, INT64_MAX)):
            raise UnsafeArchiveError(path, f"index[{i}]", f"bad entry {row!r}")
        out.append((h, o, c, s))
    return out


class _DirChain:
    """Descriptors of the directories on one path below a restore's temp directory.

    ``get(rel)`` opens ``rel`` one component at a time, each relative to its parent's
    descriptor with ``O_DIRECTORY | O_NOFOLLOW`` (creating it first with ``create``), and
    keeps the chain, so the next path (members come sorted) reopens only what differs.
    A component that is not a directory of ours (a symlink or file swapped in by another
    process) is refused with UnsafeArchiveError, never followed. Up to ``_MAX_CHAIN_FDS``
    descriptors stay open; deeper ones are closed and reopened from the deepest open one.
    """

    def __init__(self, root_fd: int, where: str | Path) -> None:
        self.root, self.where = root_fd, where
        self.names: list[str] = []
        self.fds: list[int | None] = []

    def __enter__(self) -> _DirChain:
        return self

    def __exit__(self, *exc: object) -> None:
        self._cut(0)

    def _cut(self, n: int) -> None:
        for fd in self.fds[n:]:
            if fd is not None:
                os.close(fd)
        del self.names[n:], self.fds[n:]

    def _open(self, parent: int, name: str, rel: str, create: bool) -> int:
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=parent)
        try:
            return os.open(name, _SUBDIR_OPEN, dir_fd=parent)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT, errno.EMLINK):
                raise
            raise UnsafeArchiveError(self.where, f"member {rel!r}", "a directory of the "
                                     "restore was replaced (by a symlink or another file) "
                                     "while it was written: refused, nothing followed") from None

    def _fd(self, i: int) -> int:
        """Descriptor of chain element ``i`` (-1: the root), reopened if it was closed."""
        if i < 0:
            return self.root
        fd = self.fds[i]
        if fd is not None:
            return fd
        j = i
        while j >= 0 and self.fds[j] is None:
            j -= 1
        cur = self._fd(j) if j >= 0 else self.root
        owned = False
        for k in range(j + 1, i + 1):
            nxt = self._open(cur, self.names[k], "/".join(self.names[:k + 1]), False)
            if owned:
                os.close(cur)
            cur, owned = nxt, True
        self.fds[i] = cur
        return cur

    def get(self, rel: str, create: bool) -> int:
        parts = rel.split("/") if rel else []
        i = 0
        while i < len(self.names) and i < len(parts) and self.names[i] == parts[i]:
            i += 1
        self._cut(i)
        for k in range(i, len(parts)):
            fd = self._open(self._fd(k - 1), parts[k], "/".join(parts[:k + 1]), create)
            self.names.append(parts[k])
            self.fds.append(fd)
            if len(self.fds) > _MAX_CHAIN_FDS:
                far = len(self.fds) - _MAX_CHAIN_FDS - 1
                if self.fds[far] is not None:
                    os.close(self.fds[far])  # type: ignore[arg-type]
                    self.fds[far] = None
        return self._fd(len(parts) - 1)


_RESTORE_TMP = re.compile(r"\..+\.restore-[a-z0-9_]{8}")
_STALE_RESTORE_S = 2.0  # a restore locks its temp directory within microseconds of making it


def _make_writable(root_fd: int) -> None:
    """Give every directory below ``root_fd`` mode 0700 (a checkpointed read-only mode
    must not stop its removal), opening each with ``O_NOFOLLOW``; errors are ignored."""
    stack = [os.dup(root_fd)]
    try:
        while stack:
            fd = stack.pop()
            try:
                os.fchmod(fd, 0o700)
                for name in os.listdir(fd):
                    with contextlib.suppress(OSError):
                        if stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                            os.chmod(name, 0o700, dir_fd=fd)  # to open it (read permission)
                            stack.append(os.open(name, _SUBDIR_OPEN, dir_fd=fd))
            except OSError:
                pass
            finally:
                os.close(fd)
    finally:
        for fd in stack:
            os.close(fd)


def _remove_tree(path: str | Path, fd: int | None = None) -> None:
    """Remove a restore's temp directory ``path`` (open as ``fd`` if given), never
    following a symlink in it (``shutil.rmtree`` works through descriptors on Linux)."""
    own = fd is None
    if own:
        try:
            fd = os.open(path, _SUBDIR_OPEN)
        except OSError:
            return
    try:
        _make_writable(fd)  # type: ignore[arg-type]
    finally:
        if own:
            os.close(fd)  # type: ignore[arg-type]
    shutil.rmtree(path, ignore_errors=True)


# --------------------------------------------------------------------------- the store
class CheckpointStore:
    """Content-addressed, zstd-compressed checkpoint store rooted at ``root`` (see module doc).

    ``exclude``: fnmatch patterns excluded from every checkpoint; ``level``: zstd level
    (1-3 is the sweet spot for speed); ``threads``: worker threads for hashing and
    compression (0 = ``min(8, cpu_count)``; 1 = none); ``durable``: fsync the pack and the
    manifest (and their directories) before ``create`` returns, so a checkpoint the audit
    log refers to survives a machine crash; measured cost is within noise (two fsyncs);
    ``retries``: fresh scans ``create`` makes after a member changed under it before it
    raises WorkspaceChangedError (the consistency rule, module doc); ``rescans`` counts
    the fresh scans this store object made for that reason. ``max_restore_files`` and
    ``max_restore_bytes`` bound what one restore writes (None: no bound of its own; a
    restore is always bounded by the free space and inodes of its destination).
    Thread-safe for concurrent ``create``/``restore``; several processes may share ``root``.
    Opening a store removes the temp files of dead writers (:meth:`clean_tmp`).
    """

    def __init__(self, root: Path, exclude: Sequence[str] = DEFAULT_EXCLUDES, level: int = 3,
                 *, threads: int = 0, durable: bool = True,
                 retries: int = DEFAULT_RETRIES,
                 max_restore_files: int | None = DEFAULT_MAX_RESTORE_FILES,
                 max_restore_bytes: int | None = None) -> None:
        if isinstance(exclude, str):
            raise TypeError("exclude must be a sequence of patterns, not one string")
        if not 1 <= int(level) <= 22:
            raise ValueError(f"zstd level must be in 1..22, got {level}")
        if type(retries) is not int or retries < 0:
            raise ValueError(f"retries must be a non-negative integer, got {retries!r}")
        self.root = Path(root)
        self.exclude = tuple(exclude)
        self.level = int(level)
        self.threads = threads if threads > 0 else max(1, min(8, os.cpu_count() or 1))
        self.durable = durable
        self.retries = retries
        self.rescans = 0  # fresh scans made because a member changed under a create
        for name, bound in (("max_restore_files", max_restore_files),
                            ("max_restore_bytes", max_restore_bytes)):
            if bound is not None and (type(bound) is not int or bound < 0):
                raise ValueError(f"{name} must be a non-negative integer or None, got {bound!r}")
        self.max_restore_files = max_restore_files
        self.max_restore_bytes = max_restore_bytes
        self._packs = self.root / "packs"
        self._manifests = self.root / "manifests"
        self._tmp = self.root / "tmp"
        for d in (self._packs, self._manifests, self._tmp):
            d.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._lock = threading.Lock()
        # abs workspace -> relpath -> ((size, mtime_ns, ctime_ns, ino, dev), sha256,
        # manifest member JSON, digest row); trusted (non-racy) entries only
        self._stat_cache: dict[str, dict[str, _CacheEntry]] = {}
        # sha256 -> (pack name, offset, compressed length, size)
        self._index: dict[str, tuple[str, int, int, int]] = {}
        self._loaded_packs: set[str] = set()
        self._bad_packs: set[str] = set()
        self.clean_tmp(older_than_s=0.0)

    # ------------------------------------------------------------ blob plumbing
    def _cctx(self) -> zstandard.ZstdCompressor:
        c = getattr(self._local, "cctx", None)
        if c is None:
            c = zstandard.ZstdCompressor(level=self.level)
            self._local.cctx = c
        return c

    def _dctx(self) -> zstandard.ZstdDecompressor:
        d = getattr(self._local, "dctx", None)
        if d is None:
            d = zstandard.ZstdDecompressor()
            self._local.dctx = d
        return d

    def _refresh_index(self) -> None:
        """Load the index of every pack published since the last refresh (any process)."""
        with self._lock:
            names = [n for n in os.listdir(self._packs)
                     if n.endswith(".pack") and n not in self._loaded_packs]
            for name in sorted(names):
                try:
                    rows = _read_pack_index(self._packs / name)
                except (OSError, UnsafeArchiveError) as exc:
                    if name not in self._bad_packs:
                        self._bad_packs.add(name)
                        warnings.warn(f"checkpoint store {self.root}: ignoring unreadable "
                                      f"pack {name}: {exc}", stacklevel=3)
                    continue
                for h, o, c, s in rows:
                    self._index.setdefault(h, (name, o, c, s))
                self._loaded_packs.add(name)

    def locate(self, blob: str) -> tuple[Path, int, int] | None:
        """Where blob ``sha256`` is stored: (pack file, offset, compressed length), or None."""
        loc = self._index.get(blob)
        if loc is None:
            self._refresh_index()
            loc = self._index.get(blob)
        return None if loc is None else (self._packs / loc[0], loc[1], loc[2])

    def _claim(self, h: str, pack: _PackWriter) -> bool:
        """True if the caller must store blob ``h`` in ``pack``.

        Dedup is against published packs and this ``pack`` only: a blob another create is
        still writing may never be published (that create may fail), so a concurrent
        create stores its own copy rather than reference it (rare, harmless duplication).
        """
        with self._lock:
            if h in self._index or h in pack.claimed:
                return False
            pack.claimed.add(h)
            return True

    def _store_file(self, tree: _Tree, rel: str, scanned: os.stat_result, pack: _PackWriter
                    ) -> tuple[str, int, os.stat_result]:
        """Hash file member ``rel`` and, if its content is new, compress it into ``pack``.

        Returns (sha256, bytes read, stat before reading). The file must be the one the
        scan saw and hold still while it is read, else _Changed (the consistency rule).
        """
        fd, st = tree.open_file(rel, scanned)
        try:
            if st.st_size <= STREAM_THRESHOLD:
                # One read of the size fstat reported (no buffered-reader copy); a file
                # that grows or shrinks meanwhile is caught by the fstat after reading.
                data = _read_upto(fd, st.st_size)
                n = len(data)
                h = hashlib.sha256(data).hexdigest()
                _unchanged(rel, st, os.fstat(fd), n)
                if self._claim(h, pack):
                    pack.add(h, self._cctx().compress(data), n)
            else:
                # Large file: hash and compress in one pass, straight into the pack. If
                # the content turns out to be stored already, or the file moved while it
                # was read, cut the frame off again.
                hasher = hashlib.sha256()
                with open(fd, "rb", closefd=False) as f, pack.lock:
                    start = pack.offset
                    n = 0
                    w = self._cctx().stream_writer(pack.f, closefd=False)
                    while chunk := f.read(_CHUNK):
                        hasher.update(chunk)
                        w.write(chunk)
                        n += len(chunk)
                    w.flush(zstandard.FLUSH_FRAME)
                    end = pack.f.tell()
                    h = hasher.hexdigest()
                    try:
                        _unchanged(rel, st, os.fstat(fd), n)
                    except _Changed:
                        pack.f.seek(start)
                        pack.f.truncate()
                        raise
                    if self._claim(h, pack):
                        pack.entries[h] = (start, end - start, n)
                        pack.offset = end
                    else:
                        pack.f.seek(start)
                        pack.f.truncate()
        finally:
            os.close(fd)
        return h, n, st

    # ------------------------------------------------------------ create
    def create(self, workspace: Path, transcript: list[dict], facts: dict, *,
               effect_log: EffectLog | None = None, upto: int | None = None,
               checkpoint_id: str | None = None) -> CheckpointInfo:
        """Checkpoint ``workspace`` with the preserved ``transcript`` and ``facts``.

        With ``effect_log``, the checkpoint is a durable fork point: the log must be drained
        up to ``upto`` (default: everything appended so far), else ForkBarrierError; the
        covered seq is recorded. ``checkpoint_id`` defaults to a fresh unique id; an
        existing id raises FileExistsError. A workspace that keeps changing while it is
        read raises WorkspaceChangedError (module doc). Returns the checkpoint's costs.
        """
        t0 = time.perf_counter()
        workspace = Path(workspace)
        effect_seq: int | None = None
        if effect_log is not None:
            effect_seq = effect_log.appended_upto if upto is None else int(upto)
            effect_log.barrier(effect_seq)
        elif upto is not None:
            raise ValueError("checkpoint: 'upto' given without an effect_log")
        cid = checkpoint_id if checkpoint_id is not None else f"cp-{uuid.uuid4().hex[:20]}"
        if not isinstance(cid, str) or not _ID_RE.fullmatch(cid):
            raise ValueError(f"checkpoint id {cid!r}: use letters, digits, '.', '_', '-' "
                             "(max 200, not starting with '.' or '-')")
        man_path = self._manifests / f"{cid}.zst"
        if man_path.exists():
            raise FileExistsError(f"checkpoint {cid!r} already exists in {self.root}")
        if not isinstance(transcript, list):
            raise TypeError(f"checkpoint transcript must be a list, got {type(transcript).__name__}")
        if not isinstance(facts, dict):
            raise TypeError(f"checkpoint facts must be a dict, got {type(facts).__name__}")
        transcript_b = _json_bytes(transcript, "transcript")
        facts_b = _json_bytes(facts, "facts")
        attempts = 0

        def attempt() -> CheckpointInfo:
            nonlocal attempts
            attempts += 1
            return self._create_once(workspace, cid, man_path, transcript_b, facts_b,
                                     effect_log, effect_seq, t0)

        try:
            return _retrying(workspace, self.retries, attempt)
        finally:
            with self._lock:
                self.rescans += attempts - 1

    def _create_once(self, workspace: Path, cid: str, man_path: Path, transcript_b: bytes,
                     facts_b: bytes, effect_log: EffectLog | None, effect_seq: int | None,
                     t0: float) -> CheckpointInfo:
        """One scan of ``workspace`` and the reads after it; _Changed if a member moved."""
        self._refresh_index()
        root_abs = os.path.abspath(workspace)
        with self._lock:
            wcache = self._stat_cache.setdefault(root_abs, {})
        index = self._index
        with _Tree(workspace) as tree:
            # Unchanged files (see module doc) come back with their cache entry: hash,
            # member JSON and digest row are reused as they are.
            entries = _scan(tree, self.exclude, wcache, index)
            _check_restorable(entries, workspace)
            scan_ns = time.time_ns()
            recs, n_files, published, new = self._read_members(tree, entries, wcache,
                                                                scan_ns, cid)
        pack_bytes = 0
        if published is not None:
            name, pack_bytes = published
            with self._lock:
                for h, (o, c, sz) in new.items():
                    self._index.setdefault(h, (name, o, c, sz))
                self._loaded_packs.add(name)
            if self.durable:
                _fsync_dir(self._packs)

        referenced = 0
        for h in {r[1] for r in recs}:
            if h:
                loc = index.get(h)
                if loc is None:  # pragma: no cover - would mean a bug in dedup
                    raise CheckpointError(f"checkpoint {cid}: blob {h} not stored")
                referenced += loc[2]
        digest = _digest_rows([r[3] for r in recs])
        new_bytes = sum(c for _, c, _ in new.values())
        # Seconds until the manifest is serialised; its final small write is not included.
        creation_s = time.perf_counter() - t0
        head = {
            "format": MANIFEST_FORMAT,
            "checkpoint_id": cid,
            "created_unix": time.time(),
            "workspace": root_abs,
            "exclude": list(self.exclude),
            "zstd_level": self.level,
            "state_digest": digest,
            "n_files": n_files,
            "n_new_blobs": len(new),
            "new_blob_bytes": new_bytes,
            "new_pack_bytes": pack_bytes,
            "referenced_blob_bytes": referenced,
            "creation_s": creation_s,
            "effect_seq": effect_seq,
            "effect_log": str(effect_log.path) if effect_log is not None else None,
            "effect_branch": effect_log.branch_id if effect_log is not None else None,
        }
        # Splice pre-serialised transcript/facts in rather than re-encoding them.
        body = (_json_bytes(head, "manifest")[:-1] + b',"transcript":' + transcript_b
                + b',"facts":' + facts_b + b',"members":['
                + ",".join([r[2] for r in recs]).encode("ascii") + b"]}")
        if len(body) > MAX_MANIFEST_BYTES or _json_values(body) > MAX_JSON_VALUES:
            raise ValueError(f"checkpoint {cid}: its manifest would be {len(body)} bytes of up "
                             f"to {_json_values(body)} JSON values, more than restore reads "
                             f"(MAX_MANIFEST_BYTES {MAX_MANIFEST_BYTES}, MAX_JSON_VALUES "
                             f"{MAX_JSON_VALUES}): the workspace, transcript or facts are "
                             "too large")
        mcctx = getattr(self._local, "mcctx", None)
        if mcctx is None:  # manifests: speed over ratio (level 1); one compressor per thread
            mcctx = self._local.mcctx = zstandard.ZstdCompressor(level=1)
        comp = mcctx.compress(_seal(body))
        tmp, fd = _locked_temp(self._tmp)
        try:
            _write_all(fd, comp)
            if self.durable:
                os.fsync(fd)
            try:
                os.link(tmp, man_path)  # atomic, and refuses to clobber a concurrent same id
            except FileExistsError:
                raise FileExistsError(
                    f"checkpoint {cid!r} already exists in {self.root}") from None
            finally:
                os.unlink(tmp)
        finally:
            os.close(fd)
        if self.durable:
            _fsync_dir(self._manifests)
        return CheckpointInfo(
            checkpoint_id=cid,
            creation_s=creation_s,
            size_bytes=new_bytes + len(comp),
            total_bytes=referenced + len(comp),
            n_files=n_files,
            n_new_blobs=len(new),
            state_digest=digest,
            effect_seq=effect_seq,
        )

    def _read_members(self, tree: _Tree, entries: list[_Scanned],
                      wcache: dict[str, _CacheEntry], scan_ns: int, cid: str
                      ) -> tuple[list[Any], int, tuple[str, int] | None,
                                 dict[str, tuple[int, int, int]]]:
        """Manifest records of the scanned ``entries``, reading the files not cached into
        a new pack. Returns (records, files, published pack (name, size) or None, its
        entries)."""
        n = len(entries)
        # Per entry: (cache key or None, blob sha256 or "", member JSON, digest row).
        recs: list[Any] = [None] * n
        todo: list[int] = []
        n_files = 0
        add_todo = todo.append
        for i, (rel, kind, mode, st, target) in enumerate(entries):
            if kind == "file":
                n_files += 1
                if target is not None:
                    recs[i] = target
                else:
                    add_todo(i)
            elif kind == "dir":
                recs[i] = (None, "", f'{{"path":{_json_str(rel)},"kind":"dir","mode":{mode},'
                                     f'"mtime_ns":{st.st_mtime_ns}}}',
                           _digest_row(rel, "dir", mode, ""))
            else:
                recs[i] = (None, "", _member_json({"path": rel, "kind": "symlink",
                                                   "target": target}),
                           _digest_row(rel, "symlink", 0, target))

        pack = _PackWriter(self)

        def work(i: int) -> None:
            rel, _, _, scanned, _ = entries[i]
            h, size, st = self._store_file(tree, rel, scanned, pack)
            mode = st.st_mode & 0o777  # as opened: the same instant as the content
            rec = ((st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev), h,
                   _file_member_json(rel, mode, st.st_mtime_ns, size, h),
                   _digest_row(rel, "file", mode, h))
            recs[i] = rec
            if st.st_mtime_ns + RACY_SLACK_NS < scan_ns:
                wcache[rel] = rec
            else:
                wcache.pop(rel, None)

        # Files are read grouped by directory (a directory whose descriptor was not kept
        # is reopened once per run of its files), the directories with most bytes first.
        parent = {i: entries[i][0].rpartition("/")[0] for i in todo}
        dir_bytes: dict[str, int] = {}
        for i in todo:
            dir_bytes[parent[i]] = dir_bytes.get(parent[i], 0) + entries[i][3].st_size
        todo.sort(key=lambda i: (-dir_bytes[parent[i]], parent[i], -entries[i][3].st_size))
        try:
            todo_bytes = sum(dir_bytes.values())
            nthreads = min(self.threads, len(todo))
            if nthreads > 1 and todo_bytes > _PARALLEL_MIN_BYTES:
                # This thread and nthreads-1 workers drain one shared iterator (largest
                # directories, and in each the largest files, first, for balance): no
                # future per file, and hashing/compression release the GIL. A list
                # iterator's next() is atomic under the GIL.
                shared = iter(todo)
                failed: list[bool] = []

                def drain() -> None:
                    try:
                        for i in shared:
                            if failed:
                                return
                            work(i)
                    except BaseException:
                        failed.append(True)
                        raise

                with ThreadPoolExecutor(nthreads - 1) as pool:
                    futures = [pool.submit(drain) for _ in range(nthreads - 1)]
                    try:
                        drain()
                    finally:  # workers stop early once anyone failed; wait for them
                        futures_wait(futures)
                    for fut in futures:
                        fut.result()  # re-raises a worker's exception
            else:
                for i in todo:
                    work(i)
            published = pack.finish(self.durable)
        except BaseException:
            pack.abort()
            raise
        return recs, n_files, published, pack.entries

    # ------------------------------------------------------------ reading
    def _load(self, checkpoint_id: str) -> tuple[dict, int, Path]:
        """(verified manifest, its stored size, its file) of checkpoint ``checkpoint_id``."""
        if not isinstance(checkpoint_id, str) or not _ID_RE.fullmatch(checkpoint_id):
            raise CheckpointError(f"bad checkpoint id {checkpoint_id!r}")
        p = self._manifests / f"{checkpoint_id}.zst"
        try:
            fd = _open_regular(p)
        except FileNotFoundError:
            raise CheckpointError(f"no checkpoint {checkpoint_id!r} in {self.root}") from None
        with open(fd, "rb") as f:
            comp = f.read(MAX_MANIFEST_BYTES + 1)
        if len(comp) > MAX_MANIFEST_BYTES:
            raise UnsafeArchiveError(p, "zstd frame", f"file larger than the "
                                     f"{MAX_MANIFEST_BYTES} bytes allowed")
        return decode_manifest(comp, p), len(comp), p

    def ids(self) -> list[str]:
        """Ids of all visible checkpoints, sorted."""
        return sorted(p.name[:-4] for p in self._manifests.glob("*.zst"))

    def info(self, checkpoint_id: str) -> CheckpointInfo:
        """Costs and digest of a stored checkpoint (its manifest's digest checked)."""
        man, man_size, where = self._load(checkpoint_id)

        def count(field: str) -> int:
            v = man.get(field)
            if not _int_in(v, 0, INT64_MAX):
                raise UnsafeArchiveError(where, field, f"{v!r} is not a count")
            return v

        creation_s = man.get("creation_s")
        if type(creation_s) not in (int, float) or not math.isfinite(creation_s):
            raise UnsafeArchiveError(where, "creation_s", f"{creation_s!r} is not a duration")
        digest = man.get("state_digest")
        if not (isinstance(digest, str) and _HEX64.fullmatch(digest)):
            raise UnsafeArchiveError(where, "state_digest", f"{digest!r} is not a sha256")
        effect_seq = man.get("effect_seq")
        if effect_seq is not None and not _int_in(effect_seq, -1, INT64_MAX):
            raise UnsafeArchiveError(where, "effect_seq", f"{effect_seq!r} is not a seq")
        return CheckpointInfo(
            checkpoint_id=checkpoint_id,
            creation_s=float(creation_s),
            size_bytes=count("new_blob_bytes") + man_size,
            total_bytes=count("referenced_blob_bytes") + man_size,
            n_files=count("n_files"),
            n_new_blobs=count("n_new_blobs"),
            state_digest=digest,
            effect_seq=effect_seq,
        )

    def manifest(self, checkpoint_id: str) -> dict:
        """The decoded manifest (members, transcript, facts, provenance) of a checkpoint."""
        return self._load(checkpoint_id)[0]

    # ------------------------------------------------------------ restore
    def restore(self, checkpoint_id: str, dest: Path) -> RestoreInfo:
        """Materialise checkpoint ``checkpoint_id`` at ``dest`` (absent or an empty directory).

        Validates the whole manifest first and checks it against the restore bounds (at
        most ``max_restore_files`` members and ``max_restore_bytes`` bytes, and what the
        destination's filesystem can hold), then writes into a temporary directory next to
        ``dest`` (each blob inflated to at most its declared size, its sha256 verified;
        every write relative to a directory descriptor opened with ``O_NOFOLLOW``, so a
        directory swapped for a symlink meanwhile is refused, never followed) and renames
        it onto ``dest``. On any :class:`CheckpointError` nothing is left behind and
        ``dest`` is untouched. The temp directories of restores that were killed next to
        ``dest`` are removed first (:meth:`clean_restores`).
        """
        t0 = time.perf_counter()
        dest = Path(dest)
        man, _, where = self._load(checkpoint_id)
        members = _validate_manifest(man, where, checkpoint_id)
        transcript, facts = man["transcript"], man["facts"]
        dest_mode = None
        if os.path.lexists(dest):
            if dest.is_symlink() or not dest.is_dir():
                raise FileExistsError(f"restore destination {dest} exists and is not a directory")
            with os.scandir(dest) as it:
                if any(True for _ in it):
                    raise FileExistsError(f"restore destination {dest} is not empty")
            dest_mode = stat.S_IMODE(dest.stat().st_mode)
        self._refresh_index()
        total = 0
        for m in members:
            if m["kind"] == "file":
                loc = self._index.get(m["blob"])
                if loc is None:
                    raise UnsafeArchiveError(where, f"member {m['path']!r}",
                                             f"blob {m['blob']} missing from store {self.root}")
                if loc[3] != m["size"]:  # each write is bounded by this size (see _materialise)
                    raise UnsafeArchiveError(
                        where, f"member {m['path']!r} size", f"{m['size']}, but blob "
                        f"{m['blob']} is declared {loc[3]} bytes in pack {loc[0]}")
                total += m["size"]
        self._check_bounds(members, total, dest, where)
        dest.parent.mkdir(parents=True, exist_ok=True)
        self.clean_restores(dest.parent)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.restore-", dir=dest.parent))
        try:
            root_fd = os.open(tmp, _SUBDIR_OPEN)
        except BaseException:
            with contextlib.suppress(OSError):
                os.rmdir(tmp)
            raise
        try:
            fcntl.flock(root_fd, fcntl.LOCK_EX)  # a live restore's: clean_restores skips it
            seeds = self._materialise(members, root_fd, where)
            if dest_mode is None:
                dest_mode = 0o777 & ~_umask()
            os.fchmod(root_fd, dest_mode)
            st, now = os.fstat(root_fd), os.stat(tmp, follow_symlinks=False)
            if (st.st_dev, st.st_ino) != (now.st_dev, now.st_ino):
                raise CheckpointError(f"restore of {checkpoint_id!r}: its temp directory "
                                      f"{tmp} was replaced while it was written")
            os.rename(tmp, dest)  # replaces an empty dest directory atomically
        except BaseException:
            _remove_tree(tmp, root_fd)
            raise
        finally:
            os.close(root_fd)
        with self._lock:
            self._stat_cache[os.path.abspath(dest)] = dict(seeds)
        rows = []
        for m in members:
            if m["kind"] == "symlink":
                rows.append((m["path"], "symlink", 0, m["target"]))
            else:
                rows.append((m["path"], m["kind"], m["mode"], m.get("blob", "")))
        return RestoreInfo(
            checkpoint_id=checkpoint_id,
            restore_latency_s=time.perf_counter() - t0,
            state_digest=_digest_entries(rows),
            transcript=transcript,
            facts=facts,
        )

    def _check_bounds(self, members: list[dict], total: int, dest: Path, where: Path) -> None:
        """Refuse (before anything is written) a restore of more members or bytes than the
        store's bounds, or than ``dest``'s filesystem can hold (its free space less
        :data:`RESTORE_RESERVE_BYTES`; its free inodes)."""
        n = len(members)
        if self.max_restore_files is not None and n > self.max_restore_files:
            raise UnsafeArchiveError(where, "members", f"{n} members, more than this store "
                                     f"restores (max_restore_files={self.max_restore_files})")
        if self.max_restore_bytes is not None and total > self.max_restore_bytes:
            raise UnsafeArchiveError(where, "members", f"{total} bytes of files, more than this "
                                     f"store restores (max_restore_bytes={self.max_restore_bytes})")
        probe = Path(os.path.abspath(dest)).parent
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        try:
            fs = os.statvfs(probe)
        except OSError:  # pragma: no cover - nothing to measure: the writes will tell
            return
        block = fs.f_frsize or 4096
        need = total + n * block  # each member rounds up to a block, at most one more
        free = fs.f_bavail * block - RESTORE_RESERVE_BYTES
        if need > free:
            raise UnsafeArchiveError(where, "members", f"{total} bytes in {n} members, more "
                                     f"than the {max(free, 0)} bytes free on {probe}'s "
                                     f"filesystem (keeping {RESTORE_RESERVE_BYTES} free)")
        if fs.f_files and n + 1 > fs.f_favail:
            raise UnsafeArchiveError(where, "members", f"{n} members, more than the "
                                     f"{fs.f_favail} inodes free on {probe}'s filesystem")

    def _blob_chunks(self, h: str, pack: int, where: str | Path, field: str
                     ) -> Iterator[bytes]:
        """The content of stored blob ``h`` (read from descriptor ``pack``), bounded by the
        size its pack index declares: refused at the first byte over, before it is yielded;
        after the last chunk, its sha256 is checked against ``h``. UnsafeArchiveError
        (naming ``where`` and ``field``) on any lie or corruption."""
        _, off, clen, size = self._index[h]
        hasher = hashlib.sha256()
        try:
            frame = os.pread(pack, clen, off) if size <= STREAM_THRESHOLD else None
            declared = -1 if frame is None else zstandard.frame_content_size(frame)
            if declared > size:  # a forged header must not make us allocate more
                raise UnsafeArchiveError(where, field, f"blob {h} frame declares {declared} "
                                         f"bytes, more than its declared size {size}")
            if frame is not None and declared == size:
                data = self._dctx().decompress(frame)  # zstd checks the declared size
                hasher.update(data)
                yield data
            else:  # large, or a frame not declaring its size: inflate in bounded steps
                reader = self._dctx().stream_reader(
                    frame if frame is not None else _Slice(pack, off, clen))
                left = size
                while chunk := reader.read(min(_CHUNK, left + 1)):
                    if len(chunk) > left:
                        raise UnsafeArchiveError(where, field, f"blob {h} inflates to more "
                                                 f"than its declared size {size}")
                    left -= len(chunk)
                    hasher.update(chunk)
                    yield chunk
                if left:
                    raise UnsafeArchiveError(where, field, f"blob {h} inflates to "
                                             f"{size - left} bytes, not its declared {size}")
        except zstandard.ZstdError as exc:
            raise UnsafeArchiveError(where, field, f"blob {h} is corrupt: {exc}") from exc
        if hasher.hexdigest() != h:
            raise UnsafeArchiveError(where, field, f"blob content hash {hasher.hexdigest()} "
                                     f"does not match its name {h}")

    def blob(self, sha256: str) -> bytes:
        """The content of stored blob ``sha256``, inflated (bounded by its declared size)
        and verified; to inspect a checkpoint's files without restoring it."""
        if self.locate(sha256) is None:
            raise CheckpointError(f"no blob {sha256!r} in store {self.root}")
        name = self._index[sha256][0]
        fd = _open_regular(self._packs / name)
        try:
            return b"".join(self._blob_chunks(sha256, fd, self._packs / name, f"blob {sha256}"))
        finally:
            os.close(fd)

    def _materialise(self, members: list[dict], root_fd: int, where: Path
                     ) -> list[tuple[str, _CacheEntry]]:
        """Write ``members`` below the directory open as ``root_fd``; return the stat-cache
        seeds of the files written (their mtimes are the checkpointed ones).

        Every directory is opened one component at a time relative to its parent's
        descriptor with ``O_NOFOLLOW`` (:class:`_DirChain`), every file created with
        ``O_CREAT | O_EXCL | O_NOFOLLOW`` and every link made relative to its directory's
        descriptor: nothing is ever written through a path, so a directory another process
        swaps for a symlink meanwhile is refused (UnsafeArchiveError), never followed.
        """
        dirs = [m for m in members if m["kind"] == "dir"]
        files = [m for m in members if m["kind"] == "file"]
        links = [m for m in members if m["kind"] == "symlink"]
        with _DirChain(root_fd, where) as chain:
            for m in dirs:  # members are sorted, parents first; writable until the end
                chain.get(m["path"], create=True)
        fds: dict[str, int] = {}
        fd_lock = threading.Lock()

        def pack_fd(name: str) -> int:
            with fd_lock:
                fd = fds.get(name)
                if fd is None:
                    fd = fds[name] = _open_regular(self._packs / name)
                return fd

        umask = _umask()
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
        seeds: list[tuple[str, _CacheEntry]] = []
        now = time.time_ns()

        def write_dir(group: list[dict]) -> None:
            """The files of one directory, through one descriptor chain of its own."""
            with _DirChain(root_fd, where) as chain:
                parent = chain.get(group[0]["path"].rpartition("/")[0], create=True)
                for m in group:
                    h, mode, rel = m["blob"], m["mode"], m["path"]
                    name = self._index[h][0]  # its declared size == m["size"] (restore)
                    try:  # O_EXCL: never write through anything existing
                        out = os.open(rel.rpartition("/")[2], flags, mode, dir_fd=parent)
                    except FileExistsError:
                        raise UnsafeArchiveError(where, f"member {rel!r}", "its path "
                                                 "exists in the restore already") from None
                    try:
                        for chunk in self._blob_chunks(h, pack_fd(name), where,
                                                       f"member {rel!r}"):
                            _write_all(out, chunk)
                        if mode & umask:
                            os.fchmod(out, mode)
                        mt = m.get("mtime_ns")
                        if mt:
                            os.utime(out, ns=(mt, mt))
                        st = os.fstat(out)
                    finally:
                        os.close(out)
                    if st.st_mtime_ns + RACY_SLACK_NS < now:
                        frag = _file_member_json(rel, mode, st.st_mtime_ns, st.st_size, h)
                        seeds.append((rel, ((st.st_size, st.st_mtime_ns, st.st_ctime_ns,
                                             st.st_ino, st.st_dev), h, frag,
                                            _digest_row(rel, "file", mode, h))))

        groups: dict[str, list[dict]] = {}
        for m in files:
            groups.setdefault(m["path"].rpartition("/")[0], []).append(m)
        try:
            if self.threads > 1 and len(files) > 8:
                with ThreadPoolExecutor(self.threads) as pool:
                    for _ in pool.map(write_dir, groups.values()):
                        pass
            else:
                for group in groups.values():
                    write_dir(group)
        finally:
            for fd in fds.values():
                os.close(fd)
        with _DirChain(root_fd, where) as chain:
            for m in links:
                parent_rel, _, name = m["path"].rpartition("/")
                try:
                    os.symlink(m["target"], name, dir_fd=chain.get(parent_rel, create=True))
                except FileExistsError:
                    raise UnsafeArchiveError(where, f"member {m['path']!r}", "its path "
                                             "exists in the restore already") from None
            for m in reversed(dirs):  # children before parents, so parent mtimes stick
                fd = chain.get(m["path"], create=False)
                os.fchmod(fd, m["mode"])
                mt = m.get("mtime_ns")
                if mt:
                    os.utime(fd, ns=(mt, mt))
        return seeds

    # ------------------------------------------------------------ housekeeping
    def clean_tmp(self, older_than_s: float = 3600.0) -> int:
        """Delete the temp files of dead writers; returns how many were removed.

        A writer holds an exclusive ``flock`` on its temp file from creation until it is
        published (any process, any host whose filesystem honours flock), so a temp file
        nobody holds a lock on, last modified more than ``older_than_s`` ago, belongs to a
        writer that is gone. Opening a store runs this with ``older_than_s=0``.
        """
        cutoff_ns = time.time_ns() - int(older_than_s * 1e9)
        n = 0
        for name in os.listdir(self._tmp):
            if not name.endswith(".tmp"):
                continue
            p = os.path.join(self._tmp, name)
            try:
                fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC)
            except OSError:  # gone meanwhile, or not a file of ours
                continue
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or st.st_mtime_ns > cutoff_ns:
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live writer's
                try:
                    now = os.stat(p, follow_symlinks=False)
                except FileNotFoundError:
                    continue  # published (renamed) or removed meanwhile
                if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                    os.unlink(p)  # under our lock: no writer can be using it
                    n += 1
            finally:
                os.close(fd)
        return n

    @staticmethod
    def clean_restores(parent: str | Path) -> int:
        """Remove the temp directories that killed restores left in ``parent``; returns
        how many. A restore holds an exclusive ``flock`` on its temp directory
        (``.<dest>.restore-XXXXXXXX``) from before its first write until it is renamed onto
        its destination, so one nobody holds a lock on (and not both empty and younger
        than a moment) belongs to a restore that is gone.
        :meth:`restore` runs this on its destination's parent first."""
        n = 0
        try:
            names = os.listdir(parent)
        except OSError:
            return 0
        cutoff = time.time_ns() - int(_STALE_RESTORE_S * 1e9)
        for name in names:
            if not _RESTORE_TMP.fullmatch(name):
                continue
            p = os.path.join(parent, name)
            try:
                fd = os.open(p, _SUBDIR_OPEN)
            except OSError:  # gone meanwhile, or not a directory of ours
                continue
            try:
                # A live restore locks its directory before it writes anything into it:
                # one that is young and still empty may be in that moment.
                if os.fstat(fd).st_mtime_ns > cutoff and not os.listdir(fd):
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live restore's
                try:
                    now = os.stat(p, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                st = os.fstat(fd)
                if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                    _remove_tree(p, fd)  # under our lock: no restore can be using it
                    n += 1
            finally:
                os.close(fd)
        return n
