"""Issue 32 (items 2, 5, 6): a restore that a process of the same user races, checkpoints
that could never be restored, and hostile or corrupt stores that hang or exhaust the machine.

Everything is real: a racing process, FIFOs, forged packs and manifests, memory limits set
with ``setrlimit`` in a child process, and restores killed with SIGKILL.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import zstandard

from oracle.store.checkpoint import (
    CheckpointError,
    CheckpointStore,
    UnrestorableMemberError,
    UnsafeArchiveError,
    encode_manifest,
    state_digest,
    write_pack,
)
from tests.oracle.workspaces import make_ws

REPO = Path(__file__).resolve().parents[3]


@contextlib.contextmanager
def _no_hang(seconds: float, what: str) -> Iterator[None]:
    def alarm(signum: int, frame: object) -> None:
        raise TimeoutError(f"{what} blocked for more than {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# --------------------------------------------------------------------------- item 2
_TEMP_SWAPPER = r"""
import os, sys
parent, outside, stage, stop = sys.argv[1:5]
n = 0
while not os.path.exists(stop):
    for name in os.listdir(parent):
        if ".restore-" not in name:
            continue
        d = os.path.join(parent, name, "d")
        try:
            os.rename(d, os.path.join(stage, f"away{n}"))
            os.symlink(outside, d)
            n += 1
        except OSError:
            pass
print(n)
"""


def test_restore_never_writes_outside_when_its_temp_directory_is_raced(tmp_path: Path) -> None:
    """Another process of the same user swaps a directory inside the restore's temp
    directory for a symlink to an outside directory, again and again: every restore ends
    restored or refused, and not one file lands outside."""
    ws = tmp_path / "ws"
    (ws / "d").mkdir(parents=True)
    for i in range(400):
        (ws / "d" / f"f{i:03d}.txt").write_text(f"file {i}\n" * 20)
    store = CheckpointStore(tmp_path / "store", threads=2)
    store.create(ws, [], {}, checkpoint_id="c")
    parent, outside, stage = tmp_path / "dests", tmp_path / "outside", tmp_path / "stage"
    for p in (parent, outside, stage):
        p.mkdir()
    stop = tmp_path / "stop"
    racer = subprocess.Popen([sys.executable, "-c", _TEMP_SWAPPER, str(parent), str(outside),
                              str(stage), str(stop)], stdout=subprocess.PIPE, text=True)
    outcomes = []
    try:
        time.sleep(0.2)
        for i in range(12):
            try:
                r = store.restore("c", parent / f"r{i}")
                outcomes.append(r.state_digest == state_digest(parent / f"r{i}"))
            except CheckpointError:
                outcomes.append("refused")
    finally:
        stop.touch()
        swaps = int(racer.communicate(timeout=30)[0])
    assert swaps > 0
    assert os.listdir(outside) == [], f"{len(os.listdir(outside))} files written outside"
    assert False not in outcomes  # a restore that completed restored its checkpoint


# --------------------------------------------------------------------------- item 5
@pytest.mark.parametrize("target", ["/etc/passwd", "../../outside", "../x/../../y"])
def test_a_link_restore_would_refuse_is_refused_at_create(tmp_path: Path, target: str) -> None:
    """A symlink whose target leaves the workspace: create refuses the checkpoint (naming
    the link), so no checkpoint is ever reported that restore then refuses."""
    ws = make_ws(tmp_path)
    (ws / "sub").mkdir()
    os.symlink(target, ws / "sub" / "esc")
    store = CheckpointStore(tmp_path / "store")
    with pytest.raises(UnrestorableMemberError, match="sub/esc"):
        store.create(ws, [], {}, checkpoint_id="c")
    assert store.ids() == []
    assert os.listdir(tmp_path / "store" / "tmp") == []


def test_every_checkpoint_create_reports_restores(tmp_path: Path) -> None:
    """Links inside the workspace (relative, through other links, dangling into excluded
    folders) are kept: each reported checkpoint restores to its own digest."""
    ws = make_ws(tmp_path)
    os.symlink("link_to_pkg/sub/data.bin", ws / "via_link")
    os.symlink(".venv/lib", ws / "into_excluded")
    os.symlink("pkg/../run.sh", ws / "dotdot_inside")
    store = CheckpointStore(tmp_path / "store")
    info = store.create(ws, [], {}, checkpoint_id="c")
    r = store.restore("c", tmp_path / "dest")
    assert r.state_digest == info.state_digest == state_digest(tmp_path / "dest")


def test_a_path_restore_would_refuse_as_too_long_is_refused_at_create(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(20):  # 20 x 250 bytes: a path of more than 4095 bytes below ws
        os.mkdir("p" * 249, dir_fd=fd)
        nxt = os.open("p" * 249, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    os.close(fd)
    store = CheckpointStore(tmp_path / "store")
    with pytest.raises(UnrestorableMemberError, match="too long"):
        store.create(ws, [], {}, checkpoint_id="c")
    assert store.ids() == []


# --------------------------------------------------------------------------- item 6
def _small(tmp_path: Path) -> CheckpointStore:
    ws = make_ws(tmp_path)
    store = CheckpointStore(tmp_path / "store", threads=1)
    store.create(ws, [{"role": "user", "content": "fix"}], {}, checkpoint_id="c")
    return store


def test_a_fifo_in_packs_or_manifests_hangs_nothing(tmp_path: Path) -> None:
    _small(tmp_path)
    os.mkfifo(tmp_path / "store" / "packs" / "evil.pack")
    os.mkfifo(tmp_path / "store" / "manifests" / "fifo.zst")
    with _no_hang(10, "a store with a FIFO"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the FIFO is warned about as an unreadable pack
        fresh = CheckpointStore(tmp_path / "store")
        fresh.create(tmp_path / "ws", [], {}, checkpoint_id="c2")
        fresh.restore("c", tmp_path / "dest")
        with pytest.raises(CheckpointError, match="fifo.zst"):
            fresh.info("fifo")
        with pytest.raises(CheckpointError, match="fifo.zst"):
            fresh.restore("fifo", tmp_path / "dest2")


_UNDER_MEMORY_LIMIT = r"""
import resource, sys, warnings
sys.path.insert(0, sys.argv[3])
limit = 1 << 30
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from oracle.store.checkpoint import CheckpointStore
warnings.simplefilter("error")
try:
    CheckpointStore(sys.argv[1]).restore("c", sys.argv[2])
    print("restored")
except Exception as exc:
    print(type(exc).__name__, str(exc)[:300])
"""


def _dense(prefix: bytes, unit: bytes, nbytes: int, suffix: bytes) -> bytes:
    """A zstd frame of ``prefix + unit * n + suffix`` of about ``nbytes``: tiny on disk."""
    obj = zstandard.ZstdCompressor(level=1).compressobj()
    block = unit * ((1 << 20) // len(unit))
    parts = [obj.compress(prefix)]
    parts += [obj.compress(block) for _ in range(nbytes // len(block))]
    parts += [obj.compress(suffix), obj.flush()]
    return b"".join(parts)


def _restore_under_1gib(store_root: Path, dest: Path) -> str:
    res = subprocess.run([sys.executable, "-c", _UNDER_MEMORY_LIMIT, str(store_root),
                          str(dest), str(REPO)], capture_output=True, text=True, timeout=120)
    return res.stdout.strip() + res.stderr[-500:]


def _sealed_dense(head: bytes, unit: bytes, nbytes: int, tail: bytes) -> bytes:
    """A sealed manifest ``head + unit * n + tail`` (``head`` starts with ``{``) of about
    ``nbytes``, digest and zstd frame made in one streaming pass each: tiny on disk."""
    block = unit * ((1 << 20) // len(unit))
    n = nbytes // len(block)
    seal = hashlib.sha256(b"ripplecp-manifest-v2\n" + head)
    for _ in range(n):
        seal.update(block)
    seal.update(tail)
    return _dense(b'{"digest":"' + seal.hexdigest().encode() + b'",' + head[1:], unit,
                  n * len(block), tail)


def test_a_small_manifest_that_parses_into_gigabytes_is_refused_within_1_gib(
        tmp_path: Path) -> None:
    """A manifest of ~100 KB inflating to 200 MB of tiny JSON values (each a Python
    object of 50+ bytes): refused as the store's own error in a process limited to 1 GiB."""
    _small(tmp_path)
    frame = _sealed_dense(b'{"format":2,"checkpoint_id":"c","transcript":[],"facts":{},'
                          b'"members":[', b"{},", 200 << 20, b"{}]}")
    assert len(frame) < 200_000
    (tmp_path / "store" / "manifests" / "c.zst").write_bytes(frame)
    out = _restore_under_1gib(tmp_path / "store", tmp_path / "dest")
    assert out.startswith("UnsafeArchiveError") and "JSON values" in out, out
    assert not (tmp_path / "dest").exists()


def test_a_small_pack_index_that_parses_into_gigabytes_is_ignored_within_1_gib(
        tmp_path: Path) -> None:
    store = _small(tmp_path)
    idx = _dense(b"[", b"[],", 200 << 20, b"[]]")
    data = b"RCPPACK1" + idx + __import__("struct").pack("<QQ8s", 8, len(idx), b"RCPPACK1")
    (tmp_path / "store" / "packs" / "evil.pack").write_bytes(data)
    del store
    out = _restore_under_1gib(tmp_path / "store", tmp_path / "dest")
    assert out.startswith("UserWarning") and "evil.pack" in out and "JSON values" in out, out


def test_restore_is_bounded_before_anything_is_written(tmp_path: Path) -> None:
    """A 9 KB pack that inflates (honestly: its hash is right) to 256 MiB, and a small
    manifest of 120,004 files: refused by the store's bounds before a byte is written."""
    store = _small(tmp_path)
    big = 256 << 20
    frame = _dense(b"", b"\0", big, b"")
    h = hashlib.sha256()
    for _ in range(big >> 20):
        h.update(bytes(1 << 20))
    write_pack(tmp_path / "store" / "packs" / "big.pack", [(h.hexdigest(), frame, big)])
    man = store.manifest("c")
    man["members"].append({"path": "zeros.bin", "kind": "file", "mode": 0o644,
                           "mtime_ns": 0, "size": big, "blob": h.hexdigest()})
    (tmp_path / "store" / "manifests" / "c.zst").write_bytes(encode_manifest(man))
    bounded = CheckpointStore(tmp_path / "store", max_restore_bytes=16 << 20)
    t = time.perf_counter()
    with pytest.raises(UnsafeArchiveError, match="max_restore_bytes"):
        bounded.restore("c", tmp_path / "dest")
    assert time.perf_counter() - t < 5
    assert not (tmp_path / "dest").exists()
    assert [p for p in os.listdir(tmp_path) if ".restore-" in p] == []

    man = store.manifest("c")
    man["members"] = [m for m in man["members"] if m["path"] != "zeros.bin"]
    blob = next(m["blob"] for m in man["members"] if m["kind"] == "file")
    man["members"] += [{"path": f"many/{i:06d}", "kind": "file", "mode": 0o644, "mtime_ns": 0,
                        "size": next(m["size"] for m in man["members"]
                                     if m.get("blob") == blob), "blob": blob}
                       for i in range(120_004)]
    man["members"].append({"path": "many", "kind": "dir", "mode": 0o755, "mtime_ns": 0})
    (tmp_path / "store" / "manifests" / "c.zst").write_bytes(encode_manifest(man))
    assert (tmp_path / "store" / "manifests" / "c.zst").stat().st_size < 2_000_000
    bounded = CheckpointStore(tmp_path / "store", max_restore_files=100_000)
    with pytest.raises(UnsafeArchiveError, match="max_restore_files"):
        bounded.restore("c", tmp_path / "dest")
    assert not (tmp_path / "dest").exists()


def test_restore_refuses_what_the_disk_cannot_hold_before_writing(tmp_path: Path) -> None:
    store = _small(tmp_path)
    man = store.manifest("c")
    h = hashlib.sha256(b"never").hexdigest()
    huge = 1 << 55
    write_pack(tmp_path / "store" / "packs" / "huge.pack",
               [(h, zstandard.ZstdCompressor().compress(b"x"), huge)])
    man["members"].append({"path": "huge.bin", "kind": "file", "mode": 0o644, "mtime_ns": 0,
                           "size": huge, "blob": h})
    (tmp_path / "store" / "manifests" / "c.zst").write_bytes(encode_manifest(man))
    with pytest.raises(UnsafeArchiveError, match="free"):
        CheckpointStore(tmp_path / "store").restore("c", tmp_path / "dest")
    assert not (tmp_path / "dest").exists()


_SLOW_RESTORE = r"""
import sys
sys.path.insert(0, sys.argv[3])
from oracle.store.checkpoint import CheckpointStore
CheckpointStore(sys.argv[1], threads=1).restore("c", sys.argv[2])
"""


def test_a_killed_restore_leaves_nothing_the_next_restore_does_not_clean(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(40):
        (ws / f"f{i}.bin").write_bytes(os.urandom(1 << 20))
    store = CheckpointStore(tmp_path / "store")
    store.create(ws, [], {}, checkpoint_id="c")
    dests = tmp_path / "dests"
    dests.mkdir()
    killed = 0
    for k in range(3):
        proc = subprocess.Popen([sys.executable, "-c", _SLOW_RESTORE, str(tmp_path / "store"),
                                 str(dests / f"r{k}"), str(REPO)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(
                ".restore-" in n and os.listdir(dests / n) for n in os.listdir(dests)):
            time.sleep(0.005)
        proc.kill()
        proc.wait()
        killed += 1
        # what a SIGKILL leaves, the next restore next to it removes: one at a time
        assert len([n for n in os.listdir(dests) if ".restore-" in n]) == 1
    store.restore("c", dests / "next")
    assert sorted(os.listdir(dests)) == ["next"]
    assert killed == 3
