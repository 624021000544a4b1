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
  oversized numbers, a manifest bomb).

For every case it prints what was tried, stored, refused, and what was *lost*: a stored
checkpoint that does not restore to its own digest, content stored for a path that never
held it, outside content stored anywhere, a crash with an error other than the store's own,
or a hang. Exit status 0 when nothing was lost, 1 otherwise.

Run::

    python benchmarks/reliability_checkpoint.py
    python benchmarks/reliability_checkpoint.py --checkpoints 5 --kills 3   # quick
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import os
import random
import shutil
import signal
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
    CheckpointStore,
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
    seed: int = opt(0, min=0)
    """seed for the adversaries' timing"""
    bomb_mb: int = opt(2100, min=64)
    """megabytes the streamed bomb's frame inflates to (its index declares 33)"""
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
    escaping = [m["path"] for m in store.manifest(cid)["members"]
                if m["kind"] == "symlink" and m["target"].startswith("/")]
    dest = scratch / f"restore-{cid}"
    try:
        r = store.restore(cid, dest)
    except UnsafeArchiveError as exc:
        if escaping:  # a symlink to outside was checkpointed as a symlink: refused, by design
            return
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
            except WorkspaceChangedError:
                row.refused += 1
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


# --------------------------------------------------------------------------- report
def study(args: Args) -> int:
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
        ]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    header = f"{'case':58} {'tried':>5} {'stored':>6} {'refused':>7} {'lost':>4}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r.case:58} {r.tried:5d} {r.stored:6d} {r.refused:7d} {r.lost:4d}")
        for note in r.notes:
            print(f"    {note}")
    lost = sum(r.lost for r in rows)
    print(f"\n{sum(r.tried for r in rows)} tried in {time.perf_counter() - t0:.0f} s; lost: "
          f"{lost} (a checkpoint that does not restore to its digest, content a path never "
          "held, outside content, a crash with a foreign error, a hang, a temp file left)")
    return 0 if lost == 0 else 1


def main(argv: list[str] | None = None) -> int:
    return run(study, Args, argv, prog="python benchmarks/reliability_checkpoint.py")


if __name__ == "__main__":
    raise SystemExit(main())
