"""Reliability of the checkpoint store under attack: every adversarial case, run for real.

Each case is done the way an adversary did it against the store (issue 16), with real
processes, symlinks, FIFOs, kills and forged files; nothing is patched or mocked:

* a concurrent swapper process turns workspace files and a directory into symlinks to
  outside content and back while checkpoints are taken;
* another one swaps files for FIFOs (a create that blocks counts as hung);
* another one deletes files and re-creates them;
* writer processes are SIGKILLed at random instants during ``create``;
* decompression bombs: packs whose index declares a size the frame exceeds by far,
  restored in a process whose files may not grow past the declared size (RLIMIT_FSIZE);
* edited manifests (transcript, facts, a mode, a blob, the effect seq, one byte);
* malformed manifests (overflowing mtimes, overlong names and paths, deep nesting, NaN,
  oversized numbers, a manifest bomb);
* (issue 32) restores raced by a process that swaps directories inside their temp
  directory for symlinks to an outside directory (files written outside: lost);
* random symlink sets (``..``, ``.``, links through links, absolute): create must refuse
  exactly those resolving outside the workspace (judged by ``os.path.realpath``), and every
  checkpoint it reports must restore to its digest;
* hostile stores: a FIFO planted in ``packs/`` or ``manifests/``, manifests and pack
  indexes of value-dense JSON (a random unit and size, ~100 KB on disk) read in a process
  limited to 1 GiB, restores past ``max_restore_bytes`` / ``max_restore_files``;
* restores SIGKILLed at random instants, then one more restore next to them.

Every generated case (shapes, sizes, targets, timings) is drawn from ``--seed``, by default
a fresh one printed first, so each run tries new cases and any run can be repeated.

For every case it prints what was tried, stored, refused, right, and what was *lost* (wrong): a stored
checkpoint that does not restore to its own digest, content stored for a path that never
held it, outside content stored anywhere, a crash with an error other than the store's own,
or a hang. Exit status 0 when nothing was lost, 1 otherwise.

Run::

    python benchmarks/reliability_checkpoint.py
    python benchmarks/reliability_checkpoint.py --checkpoints 5 --kills 3   # quick
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import multiprocessing
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the code next to this script

import zstandard  # noqa: E402

from oracle.store.checkpoint import (  # noqa: E402
    CheckpointError,
    CheckpointStore,
    UnrestorableMemberError,
    UnsafeArchiveError,
    WorkspaceChangedError,
    encode_manifest,
    state_digest,
    write_pack,
)
from ripplecp_cli import opt, run  # noqa: E402

SECRET = b"OUTSIDE CONTENT: never to be stored in a checkpoint\n"


@dataclass(frozen=True)
class Args:
    """Run every adversarial case against the checkpoint store and report what was lost."""

    checkpoints: int = opt(30, min=1)
    """checkpoints taken under each concurrent adversary"""
    kills: int = opt(33, min=1)
    """writer processes SIGKILLed during create"""
    seed: int | None = opt(None, min=0)
    """seed of the adversaries' timing and of every generated case (default: a fresh one,
    printed, so a run can be repeated)"""
    bomb_mb: int = opt(2100, min=64)
    """megabytes the streamed bomb's frame inflates to (its index declares 33)"""
    restores: int = opt(15, min=1)
    """restores raced by a process swapping their temp subdirectories for symlinks"""
    links: int = opt(60, min=1)
    """workspaces with random symlinks checkpointed and restored"""
    hostile: int = opt(12, min=1)
    """hostile stores (FIFOs, JSON bombs, restores past the bounds), in turn"""
    workdir: Path | None = None
    """where to make the scratch folder (default: the system temp folder)"""


@dataclass
class Row:
    """One case's tally."""

    case: str
    tried: int = 0
    stored: int = 0
    refused: int = 0
    lost: int = 0
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- workspaces
def _workspace(root: Path) -> tuple[Path, Path, dict[str, set[bytes]]]:
    """A workspace, an outside folder holding SECRET under the same names, and the
    contents each workspace path legitimately holds."""
    ws, out = root / "ws", root / "outside"
    (ws / "pkg").mkdir(parents=True)
    (ws / "d").mkdir()
    out.mkdir()
    legit: dict[str, set[bytes]] = {}
    for i in range(8):
        for rel, text in ((f"pkg/m{i}.py", f"def f{i}():\n    return {i}\n" * 8000),
                          (f"d/m{i}.py", f"# d/{i}\n" * 20000)):
            (ws / rel).write_text(text)
            legit.setdefault(rel, set()).add(text.encode())
        (out / f"m{i}.py").write_bytes(SECRET)
    (out / "secret.txt").write_bytes(SECRET)
    return ws, out, legit


def _staging(ws: str) -> str:
    """Where adversaries prepare what they swap in: same filesystem, outside the workspace
    (so the workspace never holds a half-written file, only whole swaps)."""
    path = os.path.join(os.path.dirname(ws), "staging")
    os.makedirs(path, exist_ok=True)
    return path


def _swap_symlinks(ws: str, outside: str, stop: str, seed: int, swaps: Any) -> None:
    """Adversary: files and a directory become symlinks to outside content, and back."""
    rng = random.Random(seed)
    stage = _staging(ws)
    names = [f"m{i}.py" for i in range(8)]
    orig = {n: Path(ws, "pkg", n).read_bytes() for n in names}
    d, away = os.path.join(ws, "d"), os.path.join(stage, "d.away")
    while not os.path.exists(stop):
        n = rng.choice(names)
        p, tmp = os.path.join(ws, "pkg", n), os.path.join(stage, n)
        os.symlink(os.path.join(outside, n), tmp)
        os.replace(tmp, p)  # file -> symlink to outside, atomically
        time.sleep(rng.uniform(0, 0.002))
        Path(tmp).write_bytes(orig[n])
        os.replace(tmp, p)  # and back
        os.rename(d, away)  # directory -> symlink to outside
        os.symlink(outside, d)
        time.sleep(rng.uniform(0, 0.002))
        os.unlink(d)
        os.rename(away, d)
        swaps.value += 2
        time.sleep(rng.uniform(0, 0.01))


def _swap_fifos(ws: str, outside: str, stop: str, seed: int, swaps: Any) -> None:
    """Adversary: files become FIFOs (no writer ever opens them), and back."""
    rng = random.Random(seed)
    stage = _staging(ws)
    names = [f"m{i}.py" for i in range(8)]
    orig = {n: Path(ws, "pkg", n).read_bytes() for n in names}
    while not os.path.exists(stop):
        n = rng.choice(names)
        p, tmp = os.path.join(ws, "pkg", n), os.path.join(stage, n)
        os.mkfifo(tmp)
        os.replace(tmp, p)
        time.sleep(rng.uniform(0, 0.005))
        Path(tmp).write_bytes(orig[n])
        os.replace(tmp, p)
        swaps.value += 1
        time.sleep(rng.uniform(0, 0.01))


def _vanish(ws: str, outside: str, stop: str, seed: int, swaps: Any) -> None:
    """Adversary: files and a whole directory are deleted and re-created."""
    rng = random.Random(seed)
    stage = _staging(ws)
    names = [f"m{i}.py" for i in range(8)]
    orig = {n: Path(ws, "pkg", n).read_bytes() for n in names}
    dorig = {n: Path(ws, "d", n).read_bytes() for n in names}
    d, fresh = os.path.join(ws, "d"), os.path.join(stage, "d.new")
    while not os.path.exists(stop):
        n = rng.choice(names)
        p, tmp = os.path.join(ws, "pkg", n), os.path.join(stage, n)
        os.unlink(p)
        time.sleep(rng.uniform(0, 0.003))
        Path(tmp).write_bytes(orig[n])
        os.replace(tmp, p)
        if rng.random() < 0.3:
            shutil.rmtree(d)
            time.sleep(rng.uniform(0, 0.003))
            os.mkdir(fresh)
            for m, data in dorig.items():
                Path(fresh, m).write_bytes(data)
            os.rename(fresh, d)
            swaps.value += 1
        swaps.value += 1
        time.sleep(rng.uniform(0, 0.01))


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    def alarm(signum: int, frame: object) -> None:
        raise TimeoutError(f"blocked for more than {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _check_stored(store: CheckpointStore, cid: str, legit: dict[str, set[bytes]],
                  scratch: Path, row: Row) -> None:
    """Count what a stored checkpoint lost: outside or never-held content, a failed restore."""
    contents = {m["path"]: store.blob(m["blob"])
                for m in store.manifest(cid)["members"] if m["kind"] == "file"}
    bad = [p for p, data in contents.items()
           if data == SECRET or data not in legit.get(p, set())]
    if bad:
        row.lost += 1
        row.notes.append(f"{cid}: content a path never held: {bad}")
        return
    dest = scratch / f"restore-{cid}"
    try:
        r = store.restore(cid, dest)
    except UnsafeArchiveError as exc:  # reported as taken, but not restorable: lost
        row.lost += 1
        row.notes.append(f"{cid}: does not restore: {exc}")
        return
    if r.state_digest != store.info(cid).state_digest or state_digest(dest) != r.state_digest:
        row.lost += 1
        row.notes.append(f"{cid}: restored state differs from its digest")
    shutil.rmtree(dest)


def _under_adversary(name: str, adversary: Callable[..., None], args: Args, scratch: Path
                     ) -> Row:
    """``args.checkpoints`` checkpoints of a workspace an adversary process is changing."""
    root = scratch / name.split()[0]
    root.mkdir()
    ws, out, legit = _workspace(root)
    row = Row(name)
    stop = root / "stop"
    ctx = multiprocessing.get_context("spawn")
    swaps = ctx.Value("q", 0, lock=False)  # only the adversary writes it
    proc = ctx.Process(target=adversary, args=(str(ws), str(out), str(stop), args.seed, swaps))
    proc.start()
    rng = random.Random(args.seed)
    crashed, hung, rescans, attempts = 0, 0, 0, []
    try:
        while swaps.value == 0 and proc.is_alive():  # until the adversary is at work
            time.sleep(0.01)
        before = swaps.value
        t = time.perf_counter()
        for i in range(args.checkpoints):
            cid = f"c{i}"
            row.tried += 1
            time.sleep(rng.uniform(0, 0.02))  # let the adversary move on between checkpoints
            # A fresh store object has no stat cache: every file is read, under attack.
            store = CheckpointStore(root / "store", threads=2)
            try:
                with warnings.catch_warnings(), _deadline(30):
                    warnings.simplefilter("ignore")  # escaping symlinks, FIFOs: warned about
                    store.create(ws, [{"i": i}], {}, checkpoint_id=cid)
            except (WorkspaceChangedError, UnrestorableMemberError):
                row.refused += 1  # changing, or caught holding a link to outside
                continue
            except TimeoutError:
                hung += 1
                continue
            except Exception as exc:  # noqa: BLE001 - any other outcome is a loss
                crashed += 1
                row.notes.append(f"{cid}: crashed: {exc!r}")
                continue
            finally:
                rescans += store.rescans
            row.stored += 1
            attempts.append(cid)
        during = f"{swaps.value - before} swaps in the {time.perf_counter() - t:.1f} s of checkpoints"
    finally:
        stop.touch()
        proc.join(30)
    store = CheckpointStore(root / "store")
    for cid in attempts:
        _check_stored(store, cid, legit, root, row)
    row.lost += crashed + hung
    row.notes.insert(0, f"adversary: {during}; changed members seen (fresh scans): "
                        f"{rescans}; checkpoints crashed {crashed}, hung {hung}")
    return row


# --------------------------------------------------------------------------- kills
def _writer(root: str, ws: str, seed: int) -> None:
    """A writer that checkpoints changing content until it is killed."""
    rng = random.Random(seed)
    store = CheckpointStore(root, threads=1)
    i = 0
    while True:
        for j in range(4):
            Path(ws, f"f{j}.bin").write_bytes(rng.randbytes(1 << 19))
        store.create(Path(ws), [{"i": i}], {}, checkpoint_id=f"w{seed}-{i}")
        i += 1


def _kills(args: Args, scratch: Path) -> Row:
    """Writers SIGKILLed at random instants; temp files left, and what survives."""
    root = scratch / "kills"
    store_root = root / "store"
    tmp = store_root / "tmp"
    CheckpointStore(store_root)
    rng = random.Random(args.seed)
    ctx = multiprocessing.get_context("spawn")
    row = Row("writers SIGKILLed during create")
    left_after_kill = 0
    for k in range(args.kills):
        ws = root / f"ws{k}"
        ws.mkdir(parents=True)
        proc = ctx.Process(target=_writer, args=(str(store_root), str(ws), k))
        proc.start()
        time.sleep(0.25 + rng.uniform(0, 0.3))  # start-up, then a random instant of its work
        proc.kill()
        proc.join()
        row.tried += 1
        left_after_kill += len(os.listdir(tmp))
    store = CheckpointStore(store_root)  # opening cleans the dead writers' temp files
    remaining = len(os.listdir(tmp))
    for cid in store.ids():
        row.stored += 1
        dest = root / "restored" / cid
        try:
            r = store.restore(cid, dest)
            ok = r.state_digest == store.info(cid).state_digest == state_digest(dest)
        except UnsafeArchiveError as exc:
            ok = False
            row.notes.append(f"{cid}: {exc}")
        row.lost += not ok
        shutil.rmtree(dest, ignore_errors=True)
    row.notes.insert(0, f"temp files present after a kill: {left_after_kill} in all; left "
                        f"after the next store opened: {remaining}; visible checkpoints "
                        f"that do not restore to their digest: {row.lost}")
    row.lost += remaining
    return row


# --------------------------------------------------------------------------- hostile files
_RESTORE_UNDER_FSIZE = r"""
import resource, signal, sys, time
sys.path.insert(0, sys.argv[5])
root, cid, dest, limit = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
from oracle.store.checkpoint import CheckpointStore
t = time.perf_counter()
try:
    CheckpointStore(root).restore(cid, dest)
    print("restored", time.perf_counter() - t)
except Exception as exc:
    print(type(exc).__name__, time.perf_counter() - t, exc)
"""


def _small_store(root: Path) -> CheckpointStore:
    ws = root / "ws"
    (ws / "pkg").mkdir(parents=True)
    (ws / "pkg" / "mod.py").write_text("def f(x):\n    return x + 1\n" * 50)
    (ws / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.symlink("pkg", ws / "link")
    store = CheckpointStore(root / "store", threads=1)
    store.create(ws, [{"role": "user", "content": "fix the bug"}], {"cause": "off by one"},
                 checkpoint_id="c")
    return store


def _bomb_frame(inflated: int, with_size: bool) -> bytes:
    obj = zstandard.ZstdCompressor(level=1, write_content_size=with_size).compressobj(
        size=inflated if with_size else -1)
    chunk = bytes(1 << 20)
    parts = [obj.compress(chunk) for _ in range(inflated >> 20)]
    parts.append(obj.flush())
    return b"".join(parts)


def _bombs(args: Args, scratch: Path) -> Row:
    """Blobs that inflate far past their declared size, restored under RLIMIT_FSIZE."""
    row = Row("decompression bombs")
    repo = str(Path(__file__).resolve().parents[1])
    cases = [(33 << 20, args.bomb_mb << 20, True), (33 << 20, args.bomb_mb << 20, False),
             (1 << 20, 256 << 20, False), (1 << 20, 256 << 20, True)]
    for k, (declared, inflated, with_size) in enumerate(cases):
        root = scratch / f"bomb{k}"
        store = _small_store(root)
        frame = _bomb_frame(inflated, with_size)
        blob = hashlib.sha256(b"bomb %d" % k).hexdigest()
        pack_bytes = write_pack(store.root / "packs" / "bomb.pack", [(blob, frame, declared)])
        man = store.manifest("c")
        man["members"].append({"path": "bomb.bin", "kind": "file", "mode": 0o644,
                               "mtime_ns": 0, "size": declared, "blob": blob})
        (store.root / "manifests" / "c.zst").write_bytes(encode_manifest(man))
        res = subprocess.run([sys.executable, "-c", _RESTORE_UNDER_FSIZE, str(store.root), "c",
                              str(root / "dest"), str(declared), repo],
                             capture_output=True, text=True, timeout=600)
        row.tried += 1
        words = res.stdout.split()
        refused = bool(words) and words[0] == "UnsafeArchiveError"
        row.refused += refused
        row.lost += not refused or (root / "dest").exists()
        row.notes.append(
            f"pack {pack_bytes / 1e3:.0f} KB, index declares {declared >> 20} MB, frame "
            f"{'declares' if with_size else 'hides'} {inflated >> 20} MB: "
            + (f"refused in {float(words[1]):.2f} s, nothing past {declared >> 20} MB written"
               if refused else f"NOT refused by the store: {res.stdout.strip()} {res.stderr[-300:]}"))
        shutil.rmtree(root)
    return row


def _edits() -> list[tuple[str, Callable[[dict], None]]]:
    def member(m: dict, path: str) -> dict:
        return next(x for x in m["members"] if x["path"] == path)

    def set_(path: str, key: str, value: object) -> Callable[[dict], None]:
        return lambda m: member(m, path).__setitem__(key, value)

    def swap_blobs(m: dict) -> None:
        a, b = (x for x in m["members"] if x["kind"] == "file")
        a["blob"], b["blob"] = b["blob"], a["blob"]

    return [
        ("transcript edited", lambda m: m["transcript"][0].__setitem__("content", "rm -rf")),
        ("facts edited", lambda m: m["facts"].__setitem__("cause", "none")),
        ("a mode edited", set_("run.sh", "mode", 0o777)),
        ("two blobs swapped", swap_blobs),
        ("effect seq edited", lambda m: m.__setitem__("effect_seq", 41)),
    ]


def _malformed() -> list[tuple[str, Callable[[dict], object]]]:
    def member(m: dict, path: str) -> dict:
        return next(x for x in m["members"] if x["path"] == path)

    def raw(transcript: bytes = b"[]", facts: bytes = b"{}") -> Callable[[dict], bytes]:
        def make(m: dict) -> bytes:
            base = {k: v for k, v in m.items() if k not in ("digest", "transcript", "facts")}
            head = json.dumps(base, separators=(",", ":")).encode()[:-1]
            return head + b',"transcript":' + transcript + b',"facts":' + facts + b"}"
        return make

    return [
        ("mtime_ns 10^30", lambda m: member(m, "run.sh").__setitem__("mtime_ns", 10**30)),
        ("300-byte name", lambda m: member(m, "run.sh").__setitem__("path", "r" * 300)),
        ("5000-byte path", lambda m: member(m, "run.sh").__setitem__(
            "path", "/".join(["p" * 250] * 20))),
        ("6000-byte link target", lambda m: member(m, "link").__setitem__(
            "target", "pkg/" + "./" * 3000)),
        ("negative size", lambda m: member(m, "run.sh").__setitem__("size", -1)),
        ("transcript nested 10^5 deep", raw(transcript=b"[" * 100_000 + b"]" * 100_000)),
        ("facts nested 10^5 deep", raw(facts=b'{"a":' * 100_000 + b"1" + b"}" * 100_000)),
        ("NaN in facts", raw(facts=b'{"x":NaN}')),
        ("5000-digit number", raw(facts=b'{"x":' + b"9" * 5000 + b"}")),
    ]


def _hostile_manifests(scratch: Path) -> tuple[Row, Row]:
    """Edited manifests (old digest kept) and malformed ones (digest recomputed)."""
    edited, malformed = Row("edited manifests"), Row("malformed manifests")
    root = scratch / "manifests"
    store = _small_store(root)
    path = store.root / "manifests" / "c.zst"
    original = path.read_bytes()
    body = zstandard.ZstdDecompressor().stream_reader(original).read()
    cases: list[tuple[Row, str, bytes]] = []
    for name, edit in _edits():
        man = json.loads(body)
        edit(man)
        cases.append((edited, name, zstandard.ZstdCompressor().compress(
            json.dumps(man, separators=(",", ":")).encode())))
    cases.append((edited, "one byte of the transcript",
                  zstandard.ZstdCompressor().compress(body.replace(b"fix the bug", b"fix the BUG"))))
    for name, change in _malformed():
        man = store.manifest("c")
        text = change(man)
        cases.append((malformed, name, encode_manifest(text if isinstance(text, bytes) else man)))
    bomb = zstandard.ZstdCompressor(level=1).compressobj(size=2 << 30)
    pad = b" " * (1 << 20)
    cases.append((malformed, "manifest inflating to 2 GB",
                  b"".join([bomb.compress(pad) for _ in range(2048)] + [bomb.flush()])))
    for row, name, data in cases:
        path.write_bytes(data)
        row.tried += 1
        dest = root / "dest"
        try:
            store.restore("c", dest)
        except UnsafeArchiveError as exc:
            row.refused += 1
            row.notes.append(f"{name}: refused: {exc.field[:40]}: {exc.problem[:70]}")
        except Exception as exc:  # noqa: BLE001 - a foreign error is a loss
            row.lost += 1
            row.notes.append(f"{name}: {type(exc).__name__} instead of the store's error")
        else:
            row.lost += 1
            row.notes.append(f"{name}: restored silently")
        shutil.rmtree(dest, ignore_errors=True)
    path.write_bytes(original)
    return edited, malformed


# --------------------------------------------------------------------------- issue 32
_TEMP_RACER = r"""
import os, random, sys, time
parent, outside, stage, stop, seed = sys.argv[1:6]
rng = random.Random(int(seed))
n = 0
while not os.path.exists(stop):
    for name in os.listdir(parent):
        if ".restore-" not in name:
            continue
        tmp = os.path.join(parent, name)
        try:
            subs = [s for s in os.listdir(tmp) if os.path.isdir(os.path.join(tmp, s))]
        except OSError:
            continue
        if not subs:
            continue
        d = os.path.join(tmp, rng.choice(subs))
        try:
            os.rename(d, os.path.join(stage, f"away{n}"))
            os.symlink(outside, d)
            n += 1
        except OSError:
            pass
    if rng.random() < 0.1:
        time.sleep(rng.uniform(0, 0.001))
print(n)
"""


def _raced_restores(args: Args, scratch: Path) -> Row:
    """Restores while another process swaps directories inside their temp directories for
    symlinks to an outside directory: each is restored or refused, nothing lands outside."""
    row = Row("restore raced: temp subdirectories -> symlinks to outside")
    rng = random.Random(args.seed + 32)
    root = scratch / "raced"
    ws = root / "ws"
    for k in range(rng.randint(3, 6)):  # a fresh shape each seed
        d = ws / f"d{k}" / ("sub" if rng.random() < 0.5 else "")
        d.mkdir(parents=True, exist_ok=True)
        for i in range(rng.randint(40, 160)):
            (d / f"f{i}.txt").write_bytes(rng.randbytes(rng.randint(10, 3000)))
    store = CheckpointStore(root / "store", threads=2)
    store.create(ws, [], {}, checkpoint_id="c")
    parent, outside, stage, stop = root / "dests", root / "outside", root / "stage", root / "stop"
    for p in (parent, outside, stage):
        p.mkdir()
    racer = subprocess.Popen([sys.executable, "-c", _TEMP_RACER, str(parent), str(outside),
                              str(stage), str(stop), str(args.seed)],
                             stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.2)
        for i in range(args.restores):
            row.tried += 1
            dest = parent / f"r{i}"
            try:
                with _deadline(60):
                    r = store.restore("c", dest)
            except CheckpointError:
                row.refused += 1
                continue
            except Exception as exc:  # noqa: BLE001 - a foreign error or a hang is a loss
                row.lost += 1
                row.notes.append(f"r{i}: {exc!r}"[:200])
                continue
            row.stored += 1
            if r.state_digest != state_digest(dest) or r.state_digest != store.info("c").state_digest:
                row.lost += 1
                row.notes.append(f"r{i}: restored, but not the checkpoint's state")
    finally:
        stop.touch()
        swaps = racer.communicate(timeout=60)[0].strip()
    escaped = sum(len(files) for _, _, files in os.walk(outside))
    row.lost += escaped
    row.notes.insert(0, f"racer swaps: {swaps}; files written outside: {escaped}")
    return row


def _random_target(rng: random.Random, names: list[str]) -> str:
    parts = [rng.choice(["..", ".", "", rng.choice(names), rng.choice(names), "x"])
             for _ in range(rng.randint(1, 5))]
    target = "/".join(parts) or "."
    return ("/" + target) if rng.random() < 0.15 else target


def _lexical(ws: Path, link: str) -> str:
    """How link ``link`` of workspace ``ws`` resolves, read from the filesystem itself:
    ``"escape"`` (absolute, or ``..`` above the root at any point), ``"loop"`` (more than
    40 links followed) or ``"inside"``. Names that do not exist are taken lexically, as a
    later ``mkdir`` could make them: what the store must judge from a checkpoint alone."""
    hops = [0]

    def walk(cur: list[str], target: str) -> list[str] | str:
        if target.startswith("/"):
            return "escape"
        for part in target.split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                if not cur:
                    return "escape"
                cur = cur[:-1]
                continue
            cur = [*cur, part]
            p = ws.joinpath(*cur)
            if p.is_symlink():
                hops[0] += 1
                if hops[0] > 40:
                    return "loop"
                got = walk(cur[:-1], os.readlink(p))
                if isinstance(got, str):
                    return got
                cur = got
        return cur

    got = walk(link.split("/")[:-1], os.readlink(ws / link))
    return got if isinstance(got, str) else "inside"


def _links_at_create(args: Args, scratch: Path) -> Row:
    """Random symlinks (relative with '..' and '.', through other links, absolute): each
    checkpoint create reports must restore to its digest, and create refuses exactly the
    sets holding a link that resolves outside the workspace or loops (judged by
    :func:`_lexical`, from the filesystem's own links)."""
    row = Row("links at create: every reported checkpoint restores")
    rng = random.Random(args.seed + 5)
    for k in range(args.links):
        root = scratch / f"links{k}"
        ws = root / "ws"
        (ws / "a" / "b").mkdir(parents=True)
        (ws / "a" / "f.txt").write_text("f")
        names = ["a", "b", "f.txt", "l0", "l1", "l2"]
        made = []
        for j in range(rng.randint(1, 3)):
            where = rng.choice(["", "a/", "a/b/"])
            target = _random_target(rng, names)
            with contextlib.suppress(FileExistsError):
                os.symlink(target, ws / f"{where}l{j}")
                made.append(f"{where}l{j}")
        escapes = [m for m in made if _lexical(ws, m) != "inside"]
        store = CheckpointStore(root / "store", threads=1)
        row.tried += 1
        try:
            info = store.create(ws, [], {}, checkpoint_id="c")
        except UnrestorableMemberError as exc:
            row.refused += 1
            if not escapes:
                row.lost += 1
                shown = {m: os.readlink(ws / m) for m in made}
                row.notes.append(f"refused links that stay inside: {shown}: {exc}"[:300])
            shutil.rmtree(root)
            continue
        except RecursionError:
            row.lost += 1
            row.notes.append(f"{made}: RecursionError")
            continue
        row.stored += 1
        try:
            r = store.restore("c", root / "dest")
            ok = r.state_digest == info.state_digest == state_digest(root / "dest")
        except CheckpointError as exc:
            ok = False
            row.notes.append(f"reported, then not restorable: {made}: {exc}"[:240])
        if escapes and ok:
            ok = False
            row.notes.append(f"stored links that leave the workspace or loop: {escapes}"[:240])
        row.lost += not ok
        shutil.rmtree(root)
    return row


_RESTORE_UNDER_AS = r"""
import resource, sys, time, warnings
sys.path.insert(0, sys.argv[4])
limit = int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from oracle.store.checkpoint import CheckpointStore
warnings.simplefilter("error")
t = time.perf_counter()
try:
    CheckpointStore(sys.argv[1]).restore("c", sys.argv[2])
    print("restored", time.perf_counter() - t)
except Exception as exc:
    print(type(exc).__name__, time.perf_counter() - t, str(exc)[:200])
"""

#: units of value-dense JSON: each is a Python object of 24-64 bytes for 2-5 bytes of text
_DENSE_UNITS = (b"{},", b"[],", b'"ab",', b"1.5,", b"[[]],", b"0,")


def _dense_frame(prefix: bytes, unit: bytes, nbytes: int, suffix: bytes) -> tuple[bytes, str]:
    """zstd frame of ``prefix + unit * n + suffix`` (about ``nbytes``), made streaming, and
    the sha256 a sealed manifest of that text would carry (prefix after its ``{``)."""
    block = unit * ((1 << 20) // len(unit))
    obj = zstandard.ZstdCompressor(level=1).compressobj()
    parts = [obj.compress(prefix)]
    seal = hashlib.sha256(b"ripplecp-manifest-v2\n{" + prefix[1:])
    for _ in range(max(1, nbytes // len(block))):
        parts.append(obj.compress(block))
        seal.update(block)
    parts += [obj.compress(suffix), obj.flush()]
    seal.update(suffix)
    return b"".join(parts), seal.hexdigest()


def _hostile_stores(args: Args, scratch: Path) -> Row:
    """FIFOs planted in packs/ and manifests/; value-dense manifests and pack indexes of a
    random shape and size read in a process limited to 1 GiB; restores past the store's
    bounds. Right: refused by the store's own error (or the pack ignored with its
    warning), in bounded time and memory, with nothing written."""
    row = Row("hostile stores: FIFOs, JSON bombs, unbounded restores")
    rng = random.Random(args.seed + 6)
    repo = str(Path(__file__).resolve().parents[1])
    for k in range(args.hostile):
        root = scratch / f"hostile{k}"
        store = _small_store(root)
        kind = ("fifo pack", "fifo manifest", "manifest bomb", "index bomb", "too many bytes",
                "too many files")[k % 6]
        dest = root / "dest"
        row.tried += 1
        ok, what = False, kind
        if kind.startswith("fifo"):
            where = ("packs", "x.pack") if kind == "fifo pack" else ("manifests", "c.zst")
            target = store.root / where[0] / where[1]
            if target.exists():
                target.unlink()
            os.mkfifo(target)
            try:
                with _deadline(20), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    fresh = CheckpointStore(store.root)
                    fresh.create(root / "ws", [], {}, checkpoint_id=f"n{k}")
                    if kind == "fifo pack":
                        fresh.restore("c", dest)
                        ok = True
                    else:
                        try:
                            fresh.restore("c", dest)
                        except UnsafeArchiveError:
                            ok = not dest.exists()
            except TimeoutError:
                what += ": HUNG"
            except Exception as exc:  # noqa: BLE001
                what += f": {exc!r}"[:160]
        elif kind.endswith("bomb"):
            unit = rng.choice(_DENSE_UNITS)
            size = rng.randint(120, 240) << 20
            if kind == "manifest bomb":
                head = b'{"format":2,"checkpoint_id":"c","transcript":[],"facts":{},"members":['
                _, digest = _dense_frame(head, unit, size, b"0]}")  # the seal of the text
                frame, _ = _dense_frame(b'{"digest":"' + digest.encode() + b'",' + head[1:],
                                        unit, size, b"0]}")
                (store.root / "manifests" / "c.zst").write_bytes(frame)
            else:
                idx, _ = _dense_frame(b"[", unit, size, b"0]")
                (store.root / "packs" / "evil.pack").write_bytes(
                    b"RCPPACK1" + idx + struct.pack("<QQ8s", 8, len(idx), b"RCPPACK1"))
            res = subprocess.run([sys.executable, "-c", _RESTORE_UNDER_AS, str(store.root),
                                  str(dest), str(1 << 30), repo],
                                 capture_output=True, text=True, timeout=300)
            words = (res.stdout or res.stderr.strip().splitlines()[-1:][0]).split()
            want = "UnsafeArchiveError" if kind == "manifest bomb" else "UserWarning"
            ok = bool(words) and words[0] == want and not dest.exists()
            stored = frame if kind == "manifest bomb" else idx
            what += (f" of {unit.decode()!r} x {size >> 20} MB ({len(stored) >> 10} KB): "
                     + " ".join(words[:2]))
        else:
            big = kind == "too many bytes"
            limit = rng.randint(1, 64) << 20 if big else rng.randint(100, 5000)
            man = store.manifest("c")
            fm = next(m for m in man["members"] if m["kind"] == "file")
            if big:
                n = (limit // fm["size"]) + rng.randint(1, 50)
            else:
                n = limit + rng.randint(1, 500)
            man["members"] += [{**fm, "path": f"many/{i:07d}"} for i in range(n)]
            man["members"].append({"path": "many", "kind": "dir", "mode": 0o755, "mtime_ns": 0})
            (store.root / "manifests" / "c.zst").write_bytes(encode_manifest(man))
            bounded = CheckpointStore(store.root, **({"max_restore_bytes": limit} if big
                                                     else {"max_restore_files": limit}))
            t = time.perf_counter()
            try:
                bounded.restore("c", dest)
            except UnsafeArchiveError as exc:
                ok = "max_restore" in exc.problem and not dest.exists()
            what += f": {n} copies against a bound of {limit} ({time.perf_counter() - t:.2f} s)"
        left = [p for p in os.listdir(root) if ".restore-" in p]
        ok = ok and not left
        row.refused += ok
        row.lost += not ok
        row.notes.append(("right: " if ok else "WRONG: ") + what)
        shutil.rmtree(root, ignore_errors=True)
    return row


_RESTORER = r"""
import sys
sys.path.insert(0, sys.argv[3])
from oracle.store.checkpoint import CheckpointStore
CheckpointStore(sys.argv[1], threads=1).restore("c", sys.argv[2])
"""


def _killed_restores(args: Args, scratch: Path) -> Row:
    """Restores SIGKILLed at random instants: the next restore next to them leaves no temp
    directory, and every restore that completed restored its checkpoint."""
    row = Row("restores SIGKILLed, then one more restore")
    rng = random.Random(args.seed + 7)
    root = scratch / "rkills"
    ws = root / "ws"
    ws.mkdir(parents=True)
    for i in range(rng.randint(10, 30)):
        (ws / f"f{i}.bin").write_bytes(rng.randbytes(rng.randint(1 << 16, 1 << 20)))
    store = CheckpointStore(root / "store")
    info = store.create(ws, [], {}, checkpoint_id="c")
    dests = root / "dests"
    dests.mkdir()
    repo = str(Path(__file__).resolve().parents[1])
    left_max = 0
    for k in range(args.kills):
        proc = subprocess.Popen([sys.executable, "-c", _RESTORER, str(store.root),
                                 str(dests / f"k{k}"), repo])
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline and not any(
                ".restore-" in n for n in os.listdir(dests)):
            time.sleep(0.002)  # until it has started writing, then a random instant of it
        time.sleep(rng.uniform(0, 0.3))
        proc.kill()
        proc.wait()
        row.tried += 1
        left_max = max(left_max, len([n for n in os.listdir(dests) if ".restore-" in n]))
    r = store.restore("c", dests / "next")
    left = [n for n in os.listdir(dests) if ".restore-" in n]
    done = [n for n in os.listdir(dests) if n.startswith("k")]
    for n in done:  # a restore that finished before its kill: it must be whole
        if state_digest(dests / n) != info.state_digest:
            row.lost += 1
            row.notes.append(f"{n}: a visible restore that is not the checkpoint")
    row.stored = len(done)
    row.lost += len(left) + (r.state_digest != info.state_digest)
    row.notes.insert(0, f"temp directories left at most after a kill: {left_max}; after the "
                        f"next restore: {len(left)}; restores that finished first: {len(done)}")
    return row


# --------------------------------------------------------------------------- report
def study(args: Args) -> int:
    if args.seed is None:  # cases generated afresh each run, the seed printed to repeat it
        args = dataclasses.replace(args, seed=random.SystemRandom().randrange(1 << 31))
    print(f"seed {args.seed}", flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="reliability_ckpt_", dir=args.workdir))
    t0 = time.perf_counter()
    try:
        rows = [
            _under_adversary("swapper: files and a directory <-> symlinks to outside",
                             _swap_symlinks, args, scratch),
            _under_adversary("fifos: files <-> FIFOs", _swap_fifos, args, scratch),
            _under_adversary("vanishing: files and a directory deleted, re-created",
                             _vanish, args, scratch),
            _kills(args, scratch),
            _bombs(args, scratch),
            *_hostile_manifests(scratch),
            _raced_restores(args, scratch),
            _links_at_create(args, scratch),
            _hostile_stores(args, scratch),
            _killed_restores(args, scratch),
        ]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    header = (f"{'case':58} {'tried':>5} {'stored':>6} {'refused':>7} {'right':>5} "
              f"{'wrong':>5}")
    print(header)
    print("-" * len(header))
    for r in rows:
        right = max(r.tried - r.lost, 0)
        print(f"{r.case:58} {r.tried:5d} {r.stored:6d} {r.refused:7d} {right:5d} {r.lost:5d}")
        for note in r.notes:
            print(f"    {note}")
    lost = sum(r.lost for r in rows)
    tried = sum(r.tried for r in rows)
    print(f"\n{tried} tried (seed {args.seed}) in {time.perf_counter() - t0:.0f} s; wrong: "
          f"{lost} (lost: a checkpoint reported that does not restore to its digest, content "
          "a path never held, outside content read or a file written outside, a crash with "
          "a foreign error, a hang, a temp file or directory left)")
    return 0 if lost == 0 else 1


def main(argv: list[str] | None = None) -> int:
    return run(study, Args, argv, prog="python benchmarks/reliability_checkpoint.py")


if __name__ == "__main__":
    raise SystemExit(main())
