"""Checkpoint store: round trip, exclusions, content addressing, stat cache, safe restore."""

from __future__ import annotations

import hashlib
import os
import stat
import time
from pathlib import Path

import pytest
import zstandard

import oracle.store.checkpoint as ckpt
from oracle.store.checkpoint import (
    CheckpointError,
    CheckpointStore,
    UnrestorableMemberError,
    UnsafeArchiveError,
    encode_manifest,
    state_digest,
)
from oracle.store.effects import EffectLog, ForkBarrierError
from tests.oracle.workspaces import age, age_all, make_ws, tree


def test_round_trip_restores_state_transcript_and_facts(tmp_path: Path) -> None:
    ws = make_ws(tmp_path)
    store = CheckpointStore(tmp_path / "store")
    transcript = [{"role": "user", "content": "fix the bug"}, {"role": "assistant", "content": "ok"}]
    facts = {"root_cause": "off by one", "files": ["pkg/mod.py"]}
    info = store.create(ws, transcript, facts, checkpoint_id="b1")
    assert info.checkpoint_id == "b1" and info.creation_s > 0
    assert info.n_files == 5 and info.n_new_blobs == 4  # copy.py shares mod.py's blob
    assert info.size_bytes == info.total_bytes > 0
    assert len(list((tmp_path / "store" / "packs").iterdir())) == 1
    assert info.state_digest == state_digest(ws)
    assert store.info("b1") == info
    assert store.ids() == ["b1"]

    dest = tmp_path / "restored"
    r = store.restore("b1", dest)
    assert r.transcript == transcript and r.facts == facts
    assert r.restore_latency_s > 0
    assert r.state_digest == info.state_digest == state_digest(dest)
    expected = {k: v for k, v in tree(ws).items()
                if not any(j in k for j in (".git", "__pycache__", ".venv", ".egg-info"))}
    assert tree(dest) == expected
    assert (dest / "run.sh").stat().st_mode & 0o777 == 0o755
    assert os.readlink(dest / "link_to_pkg") == "pkg"
    assert (dest / "pkg" / "mod.py").stat().st_mtime_ns == (ws / "pkg" / "mod.py").stat().st_mtime_ns


def test_state_digest_tracks_content_mode_and_links_not_excluded(tmp_path: Path) -> None:
    ws = make_ws(tmp_path)
    d0 = state_digest(ws)
    (ws / ".git" / "junk").write_text("changed")  # excluded: no effect
    assert state_digest(ws) == d0
    (ws / "pkg" / "mod.py").write_text("changed")
    d1 = state_digest(ws)
    assert d1 != d0
    os.chmod(ws / "pkg" / "mod.py", 0o600)
    d2 = state_digest(ws)
    assert d2 != d1
    os.remove(ws / "link_to_pkg")
    os.symlink("pkg/sub", ws / "link_to_pkg")
    assert state_digest(ws) != d2
    assert state_digest(ws, exclude=()) != state_digest(ws)


def test_configurable_excludes_and_path_patterns(tmp_path: Path) -> None:
    ws = make_ws(tmp_path)
    store = CheckpointStore(tmp_path / "store", exclude=(".git", "*.bin", "pkg/sub"))
    store.create(ws, [], {}, checkpoint_id="c")
    paths = {m["path"] for m in store.manifest("c")["members"]}
    assert "__pycache__/junk" in paths and ".venv/lib/junk" in paths
    assert not any(p.startswith(".git") or p.endswith(".bin") or p.startswith("pkg/sub")
                   for p in paths)


def test_incremental_checkpoint_stores_only_the_change(tmp_path: Path) -> None:
    ws = make_ws(tmp_path)
    age(ws)
    store = CheckpointStore(tmp_path / "store")
    full = store.create(ws, [], {}, checkpoint_id="full")
    (ws / "pkg" / "mod.py").write_text("def f(x):\n    return x + 2\n")
    (ws / "new.txt").write_text("hello")
    inc = store.create(ws, [], {}, checkpoint_id="inc")
    assert inc.n_new_blobs == 2
    assert inc.n_files == full.n_files + 1
    man_size = (tmp_path / "store" / "manifests" / "inc.zst").stat().st_size
    locations = [store.locate(hashlib.sha256(c).hexdigest())
                 for c in (b"def f(x):\n    return x + 2\n", b"hello")]
    assert all(loc is not None for loc in locations)
    new_blob_bytes = sum(loc[2] for loc in locations if loc is not None)
    assert inc.size_bytes == new_blob_bytes + man_size
    assert inc.size_bytes < full.size_bytes
    assert inc.total_bytes > inc.size_bytes
    # both checkpoints stay restorable and distinct
    store.restore("full", tmp_path / "r_full")
    store.restore("inc", tmp_path / "r_inc")
    assert state_digest(tmp_path / "r_full") == full.state_digest
    assert state_digest(tmp_path / "r_inc") == inc.state_digest != full.state_digest


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    reads: list[str] = []
    original = CheckpointStore._store_file

    def spy(self: CheckpointStore, tree: object, rel: str, *args: object) -> tuple:
        reads.append(os.path.basename(rel))
        return original(self, tree, rel, *args)

    monkeypatch.setattr(CheckpointStore, "_store_file", spy)
    return reads


def test_stat_cache_skips_unchanged_files_but_sees_same_size_rewrites(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = make_ws(tmp_path)
    age(ws)
    store = CheckpointStore(tmp_path / "store", threads=1)
    reads = _count_reads(monkeypatch)
    store.create(ws, [], {}, checkpoint_id="a")
    assert len(reads) == 5
    reads.clear()
    store.create(ws, [], {}, checkpoint_id="b")
    assert reads == []  # nothing re-read
    # Same size, mtime forced back to the old value: ctime still betrays the change.
    target = ws / "pkg" / "mod.py"
    st = target.stat()
    target.write_text(target.read_text().replace("x + 1", "x - 1"))
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert target.stat().st_size == st.st_size
    info = store.create(ws, [], {}, checkpoint_id="c")
    assert reads == ["mod.py"]
    assert info.state_digest == state_digest(ws) != store.info("b").state_digest


def test_racy_fresh_files_are_rehashed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "fresh.txt").write_text("just written")
    store = CheckpointStore(tmp_path / "store", threads=1)
    reads = _count_reads(monkeypatch)
    store.create(ws, [], {}, checkpoint_id="a")
    store.create(ws, [], {}, checkpoint_id="b")
    assert reads == ["fresh.txt", "fresh.txt"]  # mtime too recent to trust the cache


def test_checkpoint_after_restore_is_incremental(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    ws = make_ws(tmp_path)
    age(ws)
    store = CheckpointStore(tmp_path / "store", threads=1)
    store.create(ws, [], {}, checkpoint_id="a")
    dest = tmp_path / "branch"
    store.restore("a", dest)
    (dest / "run.sh").write_text("#!/bin/sh\necho changed\n")
    reads = _count_reads(monkeypatch)
    info = store.create(dest, [], {}, checkpoint_id="b")
    assert reads == ["run.sh"] and info.n_new_blobs == 1


def test_threaded_and_serial_agree(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    for i in range(40):
        (ws / f"d{i % 4}").mkdir(parents=True, exist_ok=True)
        (ws / f"d{i % 4}" / f"f{i}.py").write_text(f"x = {i}\n" * (i + 1))
    a = CheckpointStore(tmp_path / "s1", threads=1, durable=False).create(
        ws, [], {}, checkpoint_id="x")
    b = CheckpointStore(tmp_path / "s2", threads=4).create(ws, [], {}, checkpoint_id="x")
    assert a.state_digest == b.state_digest and a.n_new_blobs == b.n_new_blobs == 40
    s = CheckpointStore(tmp_path / "s2", threads=4)
    s.restore("x", tmp_path / "out")
    assert state_digest(tmp_path / "out") == a.state_digest


def test_large_files_stream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ckpt, "STREAM_THRESHOLD", 1000)
    monkeypatch.setattr(ckpt, "_CHUNK", 4096)
    ws = tmp_path / "ws"
    ws.mkdir()
    big = os.urandom(50_000) + b"a" * 100_000
    (ws / "big.dat").write_bytes(big)
    (ws / "big2.dat").write_bytes(big)  # same content, streamed twice: stored once
    store = CheckpointStore(tmp_path / "store", threads=1, durable=True)
    info = store.create(ws, [], {}, checkpoint_id="c")
    assert info.n_new_blobs == 1
    assert list((tmp_path / "store" / "tmp").iterdir()) == []
    store.restore("c", tmp_path / "out")
    assert (tmp_path / "out" / "big.dat").read_bytes() == big


def test_ids_and_bad_input(tmp_path: Path) -> None:
    ws = make_ws(tmp_path)
    store = CheckpointStore(tmp_path / "store")
    info = store.create(ws, [], {})
    assert store.ids() == [info.checkpoint_id]
    store.create(ws, [], {}, checkpoint_id="named")
    with pytest.raises(FileExistsError, match="named"):
        store.create(ws, [], {}, checkpoint_id="named")
    for bad in ("../evil", "a/b", ".hidden", ""):
        with pytest.raises(ValueError):
            store.create(ws, [], {}, checkpoint_id=bad)
    with pytest.raises(TypeError, match="facts"):
        store.create(ws, [], {"x": object()})
    with pytest.raises(NotADirectoryError):
        store.create(tmp_path / "missing", [], {})
    with pytest.raises(CheckpointError, match="no checkpoint"):
        store.restore("nope", tmp_path / "d")
    with pytest.raises(ValueError):
        CheckpointStore(tmp_path / "s2", level=0)
    assert sorted(store.ids()) == sorted([info.checkpoint_id, "named"])


def test_restore_refuses_non_empty_dest(tmp_path: Path) -> None:
    ws = make_ws(tmp_path)
    store = CheckpointStore(tmp_path / "store")
    store.create(ws, [], {}, checkpoint_id="c")
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not empty"):
        store.restore("c", dest)
    assert os.listdir(dest) == ["keep.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    store.restore("c", empty)  # an empty existing directory is fine
    assert state_digest(empty) == store.info("c").state_digest
    store.restore("c", tmp_path / "deep" / "new" / "dest")  # parents created


def test_crash_mid_create_leaves_no_checkpoint(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    ws = make_ws(tmp_path)
    store = CheckpointStore(tmp_path / "store", threads=1)
    calls = {"n": 0}
    original = CheckpointStore._store_file

    def dying(self: CheckpointStore, *args: object) -> tuple:
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt("killed mid-create")
        return original(self, *args)

    monkeypatch.setattr(CheckpointStore, "_store_file", dying)
    with pytest.raises(KeyboardInterrupt):
        store.create(ws, [], {}, checkpoint_id="c")
    assert store.ids() == []
    assert list((tmp_path / "store" / "packs").iterdir()) == []  # the pack was never published
    assert list((tmp_path / "store" / "tmp").iterdir()) == []
    monkeypatch.setattr(CheckpointStore, "_store_file", original)
    info = store.create(ws, [], {}, checkpoint_id="c")  # the id is still free
    assert info.n_new_blobs == 4
    store.restore("c", tmp_path / "out")
    assert state_digest(tmp_path / "out") == info.state_digest


# ---------------------------------------------------------------- malicious manifests
def _forge(store_root: Path, cid: str, members: list[dict]) -> None:
    """Write a hand-crafted manifest straight into the store, sealed with a correct digest
    (as a forger who knows the format would): the checks under test must hold anyway."""
    man = {"format": ckpt.MANIFEST_FORMAT, "checkpoint_id": cid, "creation_s": 0.0,
           "new_blob_bytes": 0, "referenced_blob_bytes": 0, "n_files": 0, "n_new_blobs": 0,
           "state_digest": "", "transcript": [], "facts": {}, "members": members}
    (store_root / "manifests" / f"{cid}.zst").write_bytes(encode_manifest(man))


def _ok_blob(store: CheckpointStore, root: Path) -> str:
    ws = root / "one"
    ws.mkdir()
    (ws / "ok.txt").write_text("benign")
    store.create(ws, [], {}, checkpoint_id="benign")
    return store.manifest("benign")["members"][0]["blob"]


@pytest.mark.parametrize(
    ("members", "needle"),
    [
        ([{"path": "/etc/evil", "kind": "file", "mode": 0o644}], "absolute path"),
        ([{"path": "a/../../evil", "kind": "file", "mode": 0o644}], "'..' component"),
        ([{"path": "..", "kind": "dir", "mode": 0o755}], "'..' component"),
        ([{"path": "a//b", "kind": "file", "mode": 0o644}], "empty"),
        ([{"path": "ln", "kind": "symlink", "target": "/etc/passwd"}], "absolute target"),
        ([{"path": "d/ln", "kind": "symlink", "target": "../../outside"}], "outside"),
        # each link looks harmless lexically; followed like the kernel does, it escapes
        ([{"path": "here", "kind": "symlink", "target": "."},
          {"path": "up", "kind": "symlink", "target": "here/.."}], "outside"),
        ([{"path": "a", "kind": "symlink", "target": "b"},
          {"path": "b", "kind": "symlink", "target": "a"}], "too many levels"),
        ([{"path": "lnk", "kind": "symlink", "target": "sub"},
          {"path": "lnk/x", "kind": "file", "mode": 0o644}], "below symlink"),
        ([{"path": "ok.txt", "kind": "file", "mode": 0o4755}], "bad mode"),
        ([{"path": "ok.txt", "kind": "file", "mode": 0o644, "blob": "../../x"}], "bad blob"),
        ([{"path": "ok.txt", "kind": "file", "mode": 0o644},
          {"path": "ok.txt", "kind": "file", "mode": 0o644}], "duplicate"),
        ([{"path": "x", "kind": "fifo"}], "unknown kind"),
    ],
)
def test_malicious_manifest_refused_and_nothing_written(
        tmp_path: Path, members: list[dict], needle: str) -> None:
    store = CheckpointStore(tmp_path / "store")
    blob = _ok_blob(store, tmp_path)
    for m in members:
        if m["kind"] == "file":
            m.setdefault("blob", blob)
            m.setdefault("size", len(b"benign"))
    # a benign file first, so a partial write would be visible
    _forge(tmp_path / "store", "evil",
           [{"path": "aaa.txt", "kind": "file", "mode": 0o644, "blob": blob, "size": 6},
            *members])
    dest = tmp_path / "dest"
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(UnsafeArchiveError, match=needle) as exc:
        store.restore("evil", dest)
    bad = members[-1]["path"]
    assert repr(bad) in str(exc.value) or repr(members[0]["path"]) in str(exc.value)
    assert not dest.exists()
    assert sorted(os.listdir(tmp_path)) == before  # no temp dir left behind either


def test_blob_hash_mismatch_refused_and_nothing_written(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "store", threads=1)
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(5):
        (ws / f"f{i}.txt").write_text(f"file {i}")
    store.create(ws, [], {}, checkpoint_id="c")
    loc = store.locate(hashlib.sha256(b"file 3").hexdigest())
    assert loc is not None
    pack, off, clen = loc
    forged = zstandard.ZstdCompressor().compress(b"file X")  # same length, other content
    assert len(forged) == clen
    original = pack.read_bytes()
    with open(pack, "r+b") as f:
        f.seek(off)
        f.write(forged)
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(UnsafeArchiveError, match=r"'f3.txt'.*does not match"):
        store.restore("c", dest)
    assert os.listdir(dest) == []
    assert sorted(os.listdir(tmp_path)) == ["dest", "store", "ws"]
    with open(pack, "r+b") as f:
        f.seek(off)
        f.write(b"\x00" * clen)
    with pytest.raises(UnsafeArchiveError, match="'f3.txt'.*corrupt"):
        store.restore("c", dest)
    pack.write_bytes(original[:20])  # the pack is truncated: its index is unreadable
    fresh = CheckpointStore(tmp_path / "store")
    with pytest.warns(UserWarning, match="unreadable pack"), \
            pytest.raises(UnsafeArchiveError, match="'f0.txt'.*missing"):
        fresh.restore("c", dest)
    assert os.listdir(dest) == []


def test_escaping_symlink_is_refused_at_create_not_at_restore(tmp_path: Path) -> None:
    """Issue 32 item 5: a checkpoint restore would refuse is never reported as taken."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a")
    os.symlink("../../etc/passwd", ws / "esc")
    store = CheckpointStore(tmp_path / "store")
    with pytest.raises(UnrestorableMemberError, match="'esc' -> '../../etc/passwd': resolves"):
        store.create(ws, [], {}, checkpoint_id="c")
    assert store.ids() == []


def test_corrupt_manifest_is_a_clear_error(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "store")
    (tmp_path / "store" / "manifests" / "bad.zst").write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match=r"bad\.zst"):
        store.info("bad")
    with pytest.raises(CheckpointError, match=r"bad\.zst"):
        store.restore("bad", tmp_path / "d")


# ---------------------------------------------------------------- durable fork points
def test_checkpoint_waits_for_effect_log_drain(tmp_path: Path) -> None:
    ws = make_ws(tmp_path)
    store = CheckpointStore(tmp_path / "store")
    log = EffectLog(tmp_path / "effects.jsonl", "branch-1")
    log.append({"op": "post", "url": "https://example.invalid/a"})
    log.append({"op": "post", "url": "https://example.invalid/b"})
    with pytest.raises(ForkBarrierError):
        store.create(ws, [], {}, effect_log=log, checkpoint_id="early")
    assert store.ids() == []
    log.mark_drained(0)
    info = store.create(ws, [], {}, effect_log=log, upto=0, checkpoint_id="at0")
    assert info.effect_seq == 0 and store.info("at0").effect_seq == 0
    with pytest.raises(ForkBarrierError):
        store.create(ws, [], {}, effect_log=log, checkpoint_id="all")
    log.drain()
    info = store.create(ws, [], {}, effect_log=log, checkpoint_id="all")
    assert info.effect_seq == 1
    man = store.manifest("all")
    assert man["effect_branch"] == "branch-1" and man["effect_log"].endswith("effects.jsonl")
    with pytest.raises(ValueError, match="upto"):
        store.create(ws, [], {}, upto=0)


# ---------------------------------------------------------------- odd but legal workspaces
def test_read_only_files_dirs_and_undecodable_names_round_trip(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "locked").mkdir(parents=True)
    (ws / "locked" / "ro.txt").write_text("read only")
    os.chmod(ws / "locked" / "ro.txt", 0o444)
    os.chmod(ws / "locked", 0o555)
    raw_name = os.path.join(os.fsencode(ws), b"caf\xe9.txt")  # not valid UTF-8
    with open(raw_name, "wb") as f:
        f.write(b"latin-1 name")
    try:
        store = CheckpointStore(tmp_path / "store")
        info = store.create(ws, [], {}, checkpoint_id="c")
        dest = tmp_path / "dest"
        store.restore("c", dest)
        assert state_digest(dest) == info.state_digest
        assert (dest / "locked").stat().st_mode & 0o777 == 0o555
        assert (dest / "locked" / "ro.txt").stat().st_mode & 0o777 == 0o444
        with open(os.path.join(os.fsencode(dest), b"caf\xe9.txt"), "rb") as f:
            assert f.read() == b"latin-1 name"
    finally:
        for root in (ws, tmp_path / "dest"):
            if (root / "locked").exists():
                os.chmod(root / "locked", 0o755)


def test_deep_and_wide_workspaces_round_trip(tmp_path: Path) -> None:
    """More nested directories than the scan keeps descriptors for along one path, and
    more directories with files than it keeps open for reading: deeper ones are reopened
    one verified component at a time, with the same result."""
    ws = tmp_path / "ws"
    deep = ws.joinpath(*["d"] * (ckpt._MAX_CHAIN_FDS * 3))
    deep.mkdir(parents=True)
    (deep / "bottom.txt").write_text("at the bottom")
    (ws / "d" / "d" / "side.txt").write_text("beside the deep path")
    for i in range(ckpt._MAX_DIR_FDS * 2):
        (ws / "wide" / f"w{i}").mkdir(parents=True)
        (ws / "wide" / f"w{i}" / "f.txt").write_text(f"wide {i}")
    for threads in (1, 4):
        store = CheckpointStore(tmp_path / f"store{threads}", threads=threads)
        info = store.create(ws, [], {}, checkpoint_id="c")
        assert info.n_files == 2 + ckpt._MAX_DIR_FDS * 2
        assert info.state_digest == state_digest(ws)
        store.restore("c", tmp_path / f"out{threads}")
        assert state_digest(tmp_path / f"out{threads}") == info.state_digest


def test_fifo_and_socket_in_the_workspace_are_skipped_with_a_warning(tmp_path: Path) -> None:
    import socket

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a")
    os.mkfifo(ws / "pipe")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(ws / "sock"))
    try:
        store = CheckpointStore(tmp_path / "store")
        with pytest.warns(UserWarning) as warned:
            info = store.create(ws, [], {}, checkpoint_id="c")
        assert sorted(str(w.message).split(": ")[1].rsplit("/", 1)[1] for w in warned) == [
            "pipe", "sock"]
        assert {w.filename for w in warned} == {__file__}  # points at the caller
        assert {m["path"] for m in store.manifest("c")["members"]} == {"a.txt"}
        assert info.n_files == 1
    finally:
        sock.close()


def test_stores_sharing_a_root_deduplicate_and_see_each_other(tmp_path: Path) -> None:
    ws = make_ws(tmp_path)
    a = CheckpointStore(tmp_path / "store")
    b = CheckpointStore(tmp_path / "store")
    a.create(ws, [], {}, checkpoint_id="from-a")
    info = b.create(ws, [], {}, checkpoint_id="from-b")  # b reads a's pack index
    assert info.n_new_blobs == 0
    assert b.ids() == ["from-a", "from-b"]
    b.restore("from-a", tmp_path / "r")
    assert state_digest(tmp_path / "r") == info.state_digest


def test_concurrent_creates_in_threads(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    ws = make_ws(tmp_path)
    store = CheckpointStore(tmp_path / "store")
    with ThreadPoolExecutor(4) as pool:
        infos = list(pool.map(lambda i: store.create(ws, [{"i": i}], {}, checkpoint_id=f"c{i}"),
                              range(6)))
    assert len({i.state_digest for i in infos}) == 1
    # racing creates may each store a copy of a blob (never a reference to an unpublished
    # one); every content is stored at least once, and afterwards nothing is stored again
    assert 4 <= sum(i.n_new_blobs for i in infos) <= 4 * 6
    assert store.create(ws, [], {}, checkpoint_id="after").n_new_blobs == 0
    for i in range(6):
        r = store.restore(f"c{i}", tmp_path / f"r{i}")
        assert r.transcript == [{"i": i}]
        assert state_digest(tmp_path / f"r{i}") == infos[0].state_digest


def test_clean_tmp_removes_only_stale_files(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "store")
    stale = tmp_path / "store" / "tmp" / "dead.tmp"
    fresh = tmp_path / "store" / "tmp" / "live.tmp"
    stale.write_bytes(b"x")
    fresh.write_bytes(b"y")
    old = time.time() - 7200
    os.utime(stale, (old, old))
    assert store.clean_tmp(older_than_s=3600) == 1
    assert not stale.exists() and fresh.exists()


def test_concurrent_create_never_references_an_unpublished_blob(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "shared.txt").write_text("same content in both checkpoints")
    store = CheckpointStore(tmp_path / "store", threads=1)
    original = CheckpointStore._store_file
    b_done = threading.Event()
    a_stored = threading.Event()

    def slow_first(self: CheckpointStore, *args: object) -> tuple:
        out = original(self, *args)
        if threading.current_thread().name == "A":
            a_stored.set()
            assert b_done.wait(10)  # A holds its unpublished blob while B runs to the end
            raise KeyboardInterrupt("A dies before publishing its pack")
        return out

    monkeypatch.setattr(CheckpointStore, "_store_file", slow_first)
    errors: list[BaseException] = []

    def run_a() -> None:
        try:
            store.create(ws, [], {}, checkpoint_id="a")
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion below
            errors.append(exc)

    ta = threading.Thread(target=run_a, name="A")
    ta.start()
    assert a_stored.wait(10)
    info = store.create(ws, [], {}, checkpoint_id="b")
    b_done.set()
    ta.join(10)
    assert [type(e) for e in errors] == [KeyboardInterrupt]
    assert store.ids() == ["b"] and info.n_new_blobs == 1
    store.restore("b", tmp_path / "r")
    assert (tmp_path / "r" / "shared.txt").read_text() == "same content in both checkpoints"


# ---------------------------------------------------------------- reuse between checkpoints
def _members(store: CheckpointStore, cid: str) -> list[dict]:
    return store.manifest(cid)["members"]


def _cold(ws: Path, root: Path, cid: str) -> tuple[list[dict], str]:
    """Members and digest from a fresh store (no stat cache, no cached listings)."""
    store = CheckpointStore(root, threads=1)
    info = store.create(ws, [], {}, checkpoint_id=cid)
    return _members(store, cid), info.state_digest


def _odd_tree(tmp_path: Path) -> Path:
    ws = make_ws(tmp_path)
    # names whose path order differs from a directory-by-directory walk ("a-b" < "a/x")
    (ws / "a").mkdir()
    for rel in ("a/x", "a-b", "a.b", "a0", "a/sub/y", "b"):
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(rel * 3)
    with open(os.path.join(os.fsencode(ws / "a"), b"caf\xe9"), "wb") as f:
        f.write(b"undecodable name")
    return ws


def test_warm_checkpoints_equal_cold_ones_through_edits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reused stat-cache entries give the same manifest and digest as a cold checkpoint,
    also after adding, deleting, renaming, retyping, chmod-ing and linking members."""
    monkeypatch.setattr(ckpt, "RACY_SLACK_NS", 20_000_000)  # shorter waits in age_all
    ws = _odd_tree(tmp_path)
    age_all(ws)
    store = CheckpointStore(tmp_path / "store", threads=1)
    edits = [
        lambda: None,
        lambda: (ws / "a" / "new.txt").write_text("added to an aged directory"),
        lambda: (ws / "a" / "x").unlink(),
        lambda: os.rename(ws / "a.b", ws / "a" / "moved"),
        lambda: ((ws / "b").unlink(), (ws / "b").mkdir(), (ws / "b" / "inner").write_text("i")),
        lambda: os.chmod(ws / "a" / "sub", 0o700),
        lambda: os.symlink("a/sub", ws / "a" / "lnk"),
    ]
    for i, edit in enumerate(edits):
        edit()
        if i > 0:  # age the edit so that this store caches the new state too
            age_all(ws)
        cold_members, cold_digest = _cold(ws, tmp_path / f"cold{i}", f"c{i}")
        # 1st: re-reads what changed; 2nd and 3rd: all cached. All equal the cold one.
        for j in range(3):
            info = store.create(ws, [], {}, checkpoint_id=f"w{i}-{j}")
            assert _members(store, f"w{i}-{j}") == cold_members, f"edit {i}, create {j}"
            assert info.state_digest == cold_digest == state_digest(ws), f"edit {i}, {j}"


def test_directory_timestamps_are_not_trusted(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A file added to a directory is checkpointed even on a filesystem that never updates
    directory timestamps (simulated by freezing them): change detection never skips
    reading a directory because its timestamps look unchanged."""
    ws = make_ws(tmp_path)
    age_all(ws)
    store = CheckpointStore(tmp_path / "store", threads=1)
    store.create(ws, [], {}, checkpoint_id="a")
    store.create(ws, [], {}, checkpoint_id="a2")
    frozen: dict[tuple[int, int], os.stat_result] = {}

    class Frozen:  # a directory's stat with the timestamps it had when first seen
        def __init__(self, st: os.stat_result) -> None:
            self._st, self._old = st, frozen.setdefault((st.st_dev, st.st_ino), st)

        def __getattr__(self, name: str) -> object:
            src = self._old if name in ("st_mtime", "st_mtime_ns", "st_ctime", "st_ctime_ns") else self._st
            return getattr(src, name)

    def wrap(real):  # noqa: ANN001, ANN202
        def patched(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            st = real(*args, **kwargs)
            return Frozen(st) if stat.S_ISDIR(st.st_mode) else st
        return patched

    for d in (ws, ws / "pkg", ws / "pkg" / "sub"):
        Frozen(os.stat(d))
    for name in ("stat", "lstat", "fstat"):
        monkeypatch.setattr(os, name, wrap(getattr(os, name)))
    (ws / "pkg" / "sub" / "new.py").write_text("print('new')\n")
    info = store.create(ws, [], {}, checkpoint_id="b")
    assert "pkg/sub/new.py" in {m["path"] for m in _members(store, "b")}
    assert info.state_digest == state_digest(ws) != store.info("a").state_digest


def test_in_place_edit_in_a_cached_directory_is_seen(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Same size, mtime put back, no directory entry changed: the file's own lstat still
    betrays the edit through its ctime, and only that file is read again."""
    ws = make_ws(tmp_path)
    age_all(ws)
    store = CheckpointStore(tmp_path / "store", threads=1)
    store.create(ws, [], {}, checkpoint_id="a")
    store.create(ws, [], {}, checkpoint_id="a2")  # all cached
    target = ws / "pkg" / "sub" / "data.bin"
    st = target.stat()
    dir_key = (ws / "pkg" / "sub").stat().st_mtime_ns
    with open(target, "r+b") as f:  # in place: no directory entry changes
        f.write(b"\xff\xfe")
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (ws / "pkg" / "sub").stat().st_mtime_ns == dir_key
    assert target.stat().st_size == st.st_size and target.stat().st_mtime_ns == st.st_mtime_ns
    reads = _count_reads(monkeypatch)
    info = store.create(ws, [], {}, checkpoint_id="b")
    assert reads == ["data.bin"]
    assert info.state_digest == state_digest(ws) != store.info("a").state_digest


@pytest.mark.parametrize("durable", [True, False])
def test_failed_publish_leaves_no_checkpoint_and_caches_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durable: bool) -> None:
    """A create whose pack is never finished leaves no checkpoint and no file behind, and
    the next checkpoint re-reads the files whose blobs were lost and stays restorable."""
    ws = make_ws(tmp_path)
    age_all(ws)
    store = CheckpointStore(tmp_path / "store", threads=1, durable=durable)
    original = ckpt._PackWriter.finish

    def failing(self: object, durable: bool) -> None:
        raise OSError("disk full while publishing the pack")

    monkeypatch.setattr(ckpt._PackWriter, "finish", failing)
    with pytest.raises(OSError, match="disk full"):
        store.create(ws, [], {}, checkpoint_id="c")
    assert store.ids() == []
    assert list((tmp_path / "store" / "packs").iterdir()) == []
    assert list((tmp_path / "store" / "tmp").iterdir()) == []
    monkeypatch.setattr(ckpt._PackWriter, "finish", original)
    reads = _count_reads(monkeypatch)
    info = store.create(ws, [], {}, checkpoint_id="c")
    assert len(reads) == 5 and info.n_new_blobs == 4
    store.restore("c", tmp_path / "out")
    assert state_digest(tmp_path / "out") == info.state_digest


def test_manifest_is_published_after_its_pack(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The manifest must not become visible before its pack is published (fsync'd and
    renamed): after a crash its blobs would be missing."""
    import threading

    ws = make_ws(tmp_path)
    store = CheckpointStore(tmp_path / "store", threads=1, durable=True)
    original = ckpt._PackWriter.finish
    published = threading.Event()
    seen_early: list[bool] = []

    def slow(self: object, durable: bool) -> object:
        time.sleep(0.05)
        out = original(self, durable)  # type: ignore[arg-type]
        published.set()
        return out

    real_link = os.link

    def link(src: str, dst: object, *args: object, **kwargs: object) -> None:
        if str(dst).endswith(".zst"):
            seen_early.append(not published.is_set())
        real_link(src, dst, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ckpt._PackWriter, "finish", slow)
    monkeypatch.setattr(ckpt.os, "link", link)
    info = store.create(ws, [], {}, checkpoint_id="c")
    assert seen_early == [False]
    store.restore("c", tmp_path / "out")
    assert state_digest(tmp_path / "out") == info.state_digest
