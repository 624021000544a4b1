"""Hostile stores: edited, malformed and oversized manifests, and decompression bombs.

Every malformed manifest or pack raises the store's one error, UnsafeArchiveError (a
ValueError naming the file and field), before anything is written; restore never writes
more than a blob's declared size; the transcript and facts are covered by the manifest's
digest, so an edited manifest is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import zstandard

import oracle.store.checkpoint as ckpt
from oracle.store.checkpoint import (
    CheckpointError,
    CheckpointStore,
    UnsafeArchiveError,
    encode_manifest,
    write_pack,
)
from tests.oracle.workspaces import make_ws

REPO = Path(__file__).resolve().parents[3]
TRANSCRIPT = [{"role": "user", "content": "fix the bug"}, {"role": "assistant", "content": "ok"}]
FACTS = {"root_cause": "off by one", "files": ["pkg/mod.py"]}


def _store(tmp_path: Path) -> CheckpointStore:
    store = CheckpointStore(tmp_path / "store", threads=1)
    store.create(make_ws(tmp_path), TRANSCRIPT, FACTS, checkpoint_id="c")
    return store


def _man_path(store: CheckpointStore, cid: str) -> Path:
    return store.root / "manifests" / f"{cid}.zst"


def _raw(store: CheckpointStore, cid: str) -> bytes:
    return zstandard.ZstdDecompressor().stream_reader(_man_path(store, cid).read_bytes()).read()


def _nothing_written(tmp_path: Path, dest: Path, before: list[str]) -> None:
    assert not dest.exists()
    assert sorted(os.listdir(tmp_path)) == before  # no temp directory left either


# ---------------------------------------------------------------- edited manifests
def _set_transcript(m: dict) -> None:
    m["transcript"][0]["content"] = "delete the tests"


def _set_facts(m: dict) -> None:
    m["facts"]["root_cause"] = "none"


def _set_mode(m: dict) -> None:
    next(x for x in m["members"] if x["path"] == "run.sh")["mode"] = 0o777


def _set_effect_seq(m: dict) -> None:
    m["effect_seq"] = 41


def _swap_blob(m: dict) -> None:
    files = [x for x in m["members"] if x["kind"] == "file"]
    files[0]["blob"], files[1]["blob"] = files[1]["blob"], files[0]["blob"]


@pytest.mark.parametrize("edit", [_set_transcript, _set_facts, _set_mode, _set_effect_seq,
                                  _swap_blob])
def test_edited_manifest_is_refused(tmp_path: Path, edit: Callable[[dict], None]) -> None:
    """Re-encoding the manifest with one field changed (keeping its old digest) is refused
    by restore and info: the digest covers the transcript, the facts and every member."""
    store = _store(tmp_path)
    man = json.loads(_raw(store, "c"))
    edit(man)
    _man_path(store, "c").write_bytes(
        zstandard.ZstdCompressor().compress(json.dumps(man, separators=(",", ":")).encode()))
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(UnsafeArchiveError, match="digest") as exc:
        store.restore("c", tmp_path / "dest")
    assert "c.zst" in str(exc.value)
    _nothing_written(tmp_path, tmp_path / "dest", before)
    with pytest.raises(UnsafeArchiveError, match="digest"):
        store.info("c")


def test_byte_edit_of_the_transcript_is_refused(tmp_path: Path) -> None:
    store = _store(tmp_path)
    raw = _raw(store, "c")
    assert raw.count(b"fix the bug") == 1
    _man_path(store, "c").write_bytes(
        zstandard.ZstdCompressor().compress(raw.replace(b"fix the bug", b"fix the BUG")))
    with pytest.raises(UnsafeArchiveError, match="digest"):
        store.restore("c", tmp_path / "dest")


def test_sealed_manifest_round_trips(tmp_path: Path) -> None:
    """encode_manifest is the stored form: a re-encoded manifest restores like the original."""
    store = _store(tmp_path)
    man = store.manifest("c")
    _man_path(store, "c").write_bytes(encode_manifest(man))
    r = store.restore("c", tmp_path / "dest")
    assert r.transcript == TRANSCRIPT and r.facts == FACTS
    assert r.state_digest == store.info("c").state_digest


# ---------------------------------------------------------------- malformed manifests
def _member(m: dict, path: str) -> dict:
    return next(x for x in m["members"] if x["path"] == path)


def _file_mtime_overflow(m: dict) -> None:
    _member(m, "run.sh")["mtime_ns"] = 10**30


def _dir_mtime_overflow(m: dict) -> None:
    _member(m, "pkg")["mtime_ns"] = -(10**30)


def _long_component(m: dict) -> None:
    _member(m, "run.sh")["path"] = "r" * 300


def _long_path(m: dict) -> None:
    _member(m, "run.sh")["path"] = "/".join(["p" * 250] * 20)


def _long_target(m: dict) -> None:
    _member(m, "link_to_pkg")["target"] = "pkg/" + "./" * 3000


def _negative_size(m: dict) -> None:
    _member(m, "run.sh")["size"] = -1


def _bool_mode(m: dict) -> None:
    _member(m, "run.sh")["mode"] = True


def _no_size(m: dict) -> None:
    del _member(m, "run.sh")["size"]


def _wrong_id(m: dict) -> None:
    m["checkpoint_id"] = "other"


def _facts_not_a_dict(m: dict) -> None:
    m["facts"] = ["x"]


def _transcript_not_a_list(m: dict) -> None:
    m["transcript"] = {"not": "a list"}


@pytest.mark.parametrize(("change", "needle"), [
    (_file_mtime_overflow, r"'run\.sh'.*mtime_ns"),
    (_dir_mtime_overflow, r"'pkg'.*mtime_ns"),
    (_long_component, "too long"),
    (_long_path, "too long"),
    (_long_target, "too long"),
    (_negative_size, r"'run\.sh'.*size"),
    (_bool_mode, r"'run\.sh'.*mode"),
    (_no_size, r"'run\.sh'.*size"),
    (_wrong_id, "checkpoint_id"),
    (_facts_not_a_dict, "facts"),
    (_transcript_not_a_list, "transcript"),
])
def test_malformed_manifest_is_one_error_naming_file_and_field(
        tmp_path: Path, change: Callable[[dict], None], needle: str) -> None:
    """Correctly digested (as a forger would) but malformed: refused before anything is
    written, with UnsafeArchiveError, never OverflowError/OSError from the filesystem."""
    store = _store(tmp_path)
    man = store.manifest("c")
    change(man)
    _man_path(store, "c").write_bytes(encode_manifest(man))
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(UnsafeArchiveError, match=needle) as exc:
        store.restore("c", tmp_path / "dest")
    assert isinstance(exc.value, ValueError) and isinstance(exc.value, CheckpointError)
    assert "c.zst" in str(exc.value)
    _nothing_written(tmp_path, tmp_path / "dest", before)


def _raw_manifest(store: CheckpointStore, transcript: bytes = b"[]", facts: bytes = b"{}",
                  creation_s: bytes = b"0.0") -> bytes:
    """A sealed manifest from raw JSON text (for values json.dumps cannot produce)."""
    base = {k: v for k, v in store.manifest("c").items()
            if k not in ("digest", "transcript", "facts", "creation_s")}
    head = json.dumps(base, separators=(",", ":")).encode()[:-1]
    return encode_manifest(head + b',"creation_s":' + creation_s + b',"transcript":'
                           + transcript + b',"facts":' + facts + b"}")


@pytest.mark.parametrize(("parts", "needle"), [
    ({"transcript": b"[" * 200_000 + b"]" * 200_000}, "nested too deeply"),
    ({"facts": b'{"a":' * 200_000 + b"1" + b"}" * 200_000}, "nested too deeply"),
    ({"facts": b'{"x":NaN}'}, "NaN"),
    ({"creation_s": b"Infinity"}, "Infinity"),
    ({"facts": b'{"x":' + b"9" * 5000 + b"}"}, "JSON"),
])
def test_unparseable_manifest_values_are_the_stores_error(
        tmp_path: Path, parts: dict[str, bytes], needle: str) -> None:
    """Deep nesting (RecursionError inside json), NaN/Infinity and oversized numbers."""
    store = _store(tmp_path)
    _man_path(store, "c").write_bytes(_raw_manifest(store, **parts))
    with pytest.raises(UnsafeArchiveError, match=needle) as exc:
        store.restore("c", tmp_path / "dest")
    assert "c.zst" in str(exc.value)
    assert not (tmp_path / "dest").exists()
    with pytest.raises(UnsafeArchiveError):
        store.info("c")


def test_manifest_bomb_is_refused_before_inflating(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A tiny manifest file that inflates past MAX_MANIFEST_BYTES is refused, whether its
    frame declares the size or not."""
    store = _store(tmp_path)
    monkeypatch.setattr(ckpt, "MAX_MANIFEST_BYTES", 1 << 20)
    body = b'{"pad":"' + b" " * (4 << 20) + b'"}'
    for cctx in (zstandard.ZstdCompressor(), zstandard.ZstdCompressor(write_content_size=False)):
        _man_path(store, "c").write_bytes(cctx.compress(body))
        with pytest.raises(UnsafeArchiveError, match="more than"):
            store.restore("c", tmp_path / "dest")


def test_creating_a_manifest_too_large_to_read_back_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = CheckpointStore(tmp_path / "store", threads=1)
    monkeypatch.setattr(ckpt, "MAX_MANIFEST_BYTES", 1 << 16)
    with pytest.raises(ValueError, match="manifest"):
        store.create(make_ws(tmp_path), [{"content": "x" * (1 << 17)}], {}, checkpoint_id="c")
    assert store.ids() == []


# ---------------------------------------------------------------- bombs and lying packs
_RESTORE_UNDER_FSIZE = r"""
import resource, signal, sys
root, cid, dest, limit = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # writes past the limit fail with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
from oracle.store.checkpoint import CheckpointStore
try:
    CheckpointStore(root).restore(cid, dest)
    print("restored")
except Exception as exc:
    print(type(exc).__name__, exc)
"""


def _bomb(declared: int, inflated: int, with_size: bool) -> tuple[str, bytes]:
    """A zstd frame of ``inflated`` zero bytes, and a made-up blob name."""
    cctx = zstandard.ZstdCompressor(level=1, write_content_size=with_size)
    chunk = bytes(1 << 20)
    obj = cctx.compressobj(size=inflated if with_size else -1)
    parts = [obj.compress(chunk) for _ in range(inflated >> 20)]
    parts.append(obj.flush())
    return hashlib.sha256(b"bomb %d" % declared).hexdigest(), b"".join(parts)


@pytest.mark.parametrize(("declared", "inflated", "with_size"), [
    (33 << 20, 256 << 20, True),    # streamed path: index declares 33 MB, frame inflates to 256
    (33 << 20, 256 << 20, False),
    (1 << 20, 64 << 20, False),     # in-memory path, frame without a content size
])
def test_decompression_bomb_never_writes_past_the_declared_size(
        tmp_path: Path, declared: int, inflated: int, with_size: bool) -> None:
    """Restore runs in a real process whose files may not grow past the blob's declared
    size (RLIMIT_FSIZE): the bomb is refused with the store's error, never by the OS."""
    store = _store(tmp_path)
    blob, frame = _bomb(declared, inflated, with_size)
    write_pack(store.root / "packs" / "bomb.pack", [(blob, frame, declared)])
    man = store.manifest("c")
    man["members"].append({"path": "zz-bomb.bin", "kind": "file", "mode": 0o644,
                           "mtime_ns": 0, "size": declared, "blob": blob})
    _man_path(store, "c").write_bytes(encode_manifest(man))
    res = subprocess.run([sys.executable, "-c", _RESTORE_UNDER_FSIZE, str(store.root), "c",
                          str(tmp_path / "dest"), str(declared)],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.stdout.startswith("UnsafeArchiveError"), res.stdout + res.stderr
    assert "zz-bomb.bin" in res.stdout and "declared" in res.stdout
    assert not (tmp_path / "dest").exists()


def test_blob_size_disagreeing_with_the_manifest_is_refused_before_writing(
        tmp_path: Path) -> None:
    store = _store(tmp_path)
    man = store.manifest("c")
    _member(man, "run.sh")["size"] += 1
    _man_path(store, "c").write_bytes(encode_manifest(man))
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(UnsafeArchiveError, match=r"'run\.sh'.*size"):
        store.restore("c", tmp_path / "dest")
    _nothing_written(tmp_path, tmp_path / "dest", before)


@pytest.mark.parametrize("index", [
    b"[" * 200_000 + b"]" * 200_000,
    b'[["' + b"a" * 64 + b'",8,1,' + b"9" * 30 + b"]]",
    b"Infinity",
])
def test_malformed_pack_index_is_ignored_with_a_warning(tmp_path: Path, index: bytes) -> None:
    """A pack whose index nests too deeply or declares impossible sizes is skipped with a
    warning naming it (other packs still serve), never a RecursionError or OverflowError."""
    store = _store(tmp_path)
    body = ckpt._PACK_MAGIC + b"x"
    idx = zstandard.ZstdCompressor().compress(index)
    (store.root / "packs" / "evil.pack").write_bytes(
        body + idx + ckpt._FOOTER.pack(len(body), len(idx), ckpt._PACK_MAGIC))
    fresh = CheckpointStore(store.root)
    with pytest.warns(UserWarning, match="evil.pack"):
        r = fresh.restore("c", tmp_path / "dest")
    assert r.facts == FACTS


def test_blob_reads_stored_content_verified_and_bounded(tmp_path: Path) -> None:
    store = _store(tmp_path)
    content = (tmp_path / "ws" / "pkg" / "mod.py").read_bytes()
    assert store.blob(hashlib.sha256(content).hexdigest()) == content
    with pytest.raises(CheckpointError, match="no blob"):
        store.blob("0" * 64)
    blob, frame = _bomb(1 << 20, 64 << 20, False)
    write_pack(store.root / "packs" / "bomb.pack", [(blob, frame, 1 << 20)])
    with pytest.raises(UnsafeArchiveError, match="more than its declared size"):
        store.blob(blob)
    liar = hashlib.sha256(b"something else").hexdigest()
    write_pack(store.root / "packs" / "liar.pack",
               [(liar, zstandard.ZstdCompressor().compress(content), len(content))])
    with pytest.raises(UnsafeArchiveError, match="does not match its name"):
        store.blob(liar)
