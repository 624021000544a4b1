"""Checkpoint creation speed: our content-addressed store against ``tar czf``, side by side.

Targets (issue 3): creating a checkpoint of a 50 MB workspace is >= 5x faster than
``tar czf`` of the same folder in the same run, and an incremental checkpoint after a 1 %
change is >= 20x faster than a full one.

The workspace is synthetic but shaped like a source repository: many small Python-like
text files (compressible like code) in nested packages, plus a few larger binary-ish files
(part random, part structured records). It is generated from ``--seed`` and aged by
``--age-s`` seconds before measuring (files an agent touched a moment ago are re-hashed by
design; see the stat-cache note in ``oracle/store/checkpoint.py``). The 1 % change rewrites
randomly chosen text files until 1 % of the workspace's bytes have changed.

Run::

    python benchmarks/bench_checkpoint.py            # 50 MB, 3 repeats, zstd 3 and 1
    python benchmarks/bench_checkpoint.py --size-mb 10 --repeats 1 --levels 3

Exit status 0 when every target passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the code next to this script

from oracle.store.checkpoint import CheckpointStore, state_digest  # noqa: E402

_WORDS = (
    "self data value index result config path items model state node tree graph cache "
    "logger request response token buffer offset count total name key args kwargs other "
    "query field record batch stream parser writer reader client server handler context"
).split()
_TEMPLATES = (
    "def {a}_{b}(self, {c}, {d}=None):",
    '    """Return the {a} of {b} for {c}."""',
    "    {a} = {b}.{c}({d})",
    "    if {a} is None:",
    "        raise ValueError(f\"bad {a}: {{{b}!r}}\")",
    "    for {a} in {b}.{c}:",
    "        {a}[{b}] = {c} + {n}",
    "    return {a}",
    "class {A}{B}({C}):",
    "    {a}: int = {n}",
    "import {a}.{b}",
    "from {a} import {b}, {c}",
    "# {a} {b} {c} {d}",
    "        self.{a} = {b}({c}, {d}={n})",
    "",
)


def _line(rng: random.Random) -> str:
    w = rng.choices(_WORDS, k=4)
    return rng.choice(_TEMPLATES).format(
        a=w[0], b=w[1], c=w[2], d=w[3], A=w[0].title(), B=w[1].title(), C=w[2].title(),
        n=rng.randrange(1000))


def _text(rng: random.Random, size: int) -> bytes:
    out: list[str] = []
    n = 0
    while n < size:
        s = _line(rng)
        out.append(s)
        n += len(s) + 1
    return ("\n".join(out) + "\n").encode()


def _binary(rng: random.Random, size: int) -> bytes:
    """Half incompressible noise, half structured little-endian records."""
    half = size // 2
    noise = rng.randbytes(half)
    rec = bytearray()
    i = 0
    while len(rec) < size - half:
        rec += i.to_bytes(4, "little") + (i * 7 % 251).to_bytes(2, "little") + b"\x00\x01"
        i += 1
    return noise + bytes(rec[: size - half])


def make_workspace(ws: Path, size_mb: float, seed: int) -> list[Path]:
    """Generate the workspace; return its text files (the candidates for the 1 % change)."""
    rng = random.Random(seed)
    target = int(size_mb * 1024 * 1024)
    text_budget = target // 2
    texts: list[Path] = []
    written = 0
    i = 0
    while written < text_budget:
        pkg = ws / f"pkg{i % 12}" / f"sub{(i // 12) % 9}"
        pkg.mkdir(parents=True, exist_ok=True)
        size = max(200, min(200_000, int(rng.lognormvariate(8.8, 0.9))))
        p = pkg / f"module_{i}.py"
        p.write_bytes(_text(rng, size))
        texts.append(p)
        written += size
        i += 1
    (ws / "assets").mkdir()
    remaining = target - written
    n_bin = 4
    for j in range(n_bin):
        (ws / "assets" / f"blob{j}.dat").write_bytes(_binary(rng, remaining // n_bin))
    return texts


def change_one_percent(ws: Path, texts: list[Path], total: int, seed: int) -> int:
    """Rewrite randomly chosen text files until 1 % of the workspace's bytes changed."""
    rng = random.Random(seed + 1)
    touched = 0
    order = texts[:]
    rng.shuffle(order)
    for p in order:
        if touched >= total // 100:
            break
        data = _text(rng, p.stat().st_size)
        p.write_bytes(data)
        touched += len(data)
    return touched


def dir_bytes(ws: Path) -> tuple[int, int]:
    n = size = 0
    for dirpath, _, files in os.walk(ws):
        for name in files:
            size += os.path.getsize(os.path.join(dirpath, name))
            n += 1
    return n, size


@dataclass
class Row:
    name: str
    ours_s: float
    ref_s: float
    target: float
    note: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.ref_s / self.ours_s if self.ours_s > 0 else float("inf")


def _median(xs: list[float]) -> float:
    return statistics.median(xs)


def _time_tar(tar: str, ws: Path, out: Path) -> tuple[float, int]:
    t = time.perf_counter()
    subprocess.run([tar, "czf", str(out), "-C", str(ws), "."], check=True)
    dt = time.perf_counter() - t
    size = out.stat().st_size
    out.unlink()
    return dt, size


def _time_stat_walk(ws: Path) -> float:
    """Seconds for a bare scandir + lstat of every member: the floor of any checkpoint
    that must notice an in-place edit of any file (no content read, no manifest)."""
    t = time.perf_counter()
    stack = [str(ws)]
    while stack:
        with os.scandir(stack.pop()) as it:
            for de in it:
                de.stat(follow_symlinks=False)
                if de.is_dir(follow_symlinks=False):
                    stack.append(de.path)
    return time.perf_counter() - t


def _bench_level(args: argparse.Namespace, level: int, work: Path, ws: Path,
                 texts: list[Path], raw: int, tar: str) -> dict:
    """Full checkpoints (fresh store each, tar czf interleaved) then 1 % incrementals."""
    tar_s, full_s = [], []
    tar_size = full_size = 0
    for r in range(args.repeats):
        dt, tar_size = _time_tar(tar, ws, work / "ref.tgz")
        tar_s.append(dt)
        root = work / f"store-l{level}-{r}"
        store = CheckpointStore(root, level=level, threads=args.threads, durable=args.durable)
        t = time.perf_counter()
        info = store.create(ws, [{"role": "user", "content": "bench"}], {}, checkpoint_id="full")
        full_s.append(time.perf_counter() - t)
        full_size = info.size_bytes
        assert info.state_digest == state_digest(ws)
        if r < args.repeats - 1:
            shutil.rmtree(root)
    # The last store keeps its stat cache, as the harness's store does between boundaries.
    same_s, inc_s, walk_s = [], [], []
    inc_size = touched = 0
    for r in range(args.repeats):
        t = time.perf_counter()
        store.create(ws, [], {}, checkpoint_id=f"same{r}")
        same_s.append(time.perf_counter() - t)
        touched = change_one_percent(ws, texts, raw, args.seed + 100 * level + r)
        time.sleep(args.age_s)
        t = time.perf_counter()
        info = store.create(ws, [], {}, checkpoint_id=f"inc{r}")
        inc_s.append(time.perf_counter() - t)
        inc_size = info.size_bytes
        walk_s.append(_time_stat_walk(ws))  # after, so it cannot warm caches for ours
    rest_s = []
    for r in range(args.repeats):
        dest = work / f"restore-l{level}-{r}"
        t = time.perf_counter()
        store.restore(f"inc{args.repeats - 1}", dest)
        rest_s.append(time.perf_counter() - t)
        shutil.rmtree(dest)
    return {"level": level, "threads": store.threads, "tar_czf_s": tar_s, "tar_gz_bytes": tar_size,
            "full_s": full_s, "full_bytes": full_size, "nochange_s": same_s,
            "incremental_s": inc_s, "incremental_bytes": inc_size, "changed_bytes": touched,
            "restore_s": rest_s, "stat_walk_s": walk_s}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=float, default=50.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--levels", default="3,1", help="zstd levels to measure (default store: 3)")
    ap.add_argument("--threads", type=int, default=0, help="0 = auto")
    ap.add_argument("--no-fsync", dest="durable", action="store_false",
                    help="measure CheckpointStore(durable=False) (tar does not fsync either)")
    ap.add_argument("--age-s", type=float, default=0.3,
                    help="pause after generating/changing files before checkpointing")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None, help="also write results here")
    args = ap.parse_args(argv)
    levels = [int(x) for x in args.levels.split(",") if x.strip()]

    tar = shutil.which("tar")
    if tar is None:
        print("tar not found: cannot run the side-by-side comparison", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench_ckpt_", dir=args.workdir))
    try:
        ws = work / "ws"
        ws.mkdir()
        t = time.perf_counter()
        texts = make_workspace(ws, args.size_mb, args.seed)
        n_files, raw = dir_bytes(ws)
        print(f"workspace: {n_files} files, {raw / 1e6:.1f} MB "
              f"(generated in {time.perf_counter() - t:.1f} s)")
        time.sleep(args.age_s)
        results = [_bench_level(args, lv, work, ws, texts, raw, tar) for lv in levels]
        tgz = work / "ref.tgz"
        subprocess.run([tar, "czf", str(tgz), "-C", str(ws), "."], check=True)
        untar_s = []
        for r in range(args.repeats):
            dest = work / f"untar{r}"
            dest.mkdir()
            t = time.perf_counter()
            subprocess.run([tar, "xzf", str(tgz), "-C", str(dest)], check=True)
            untar_s.append(time.perf_counter() - t)
            shutil.rmtree(dest)

        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(f"\nmedian of {args.repeats}; {os.cpu_count()} CPUs visible; load average "
              f"{load:.1f}; durable={args.durable}")
        header = (f"{'comparison':42} {'ours (s)':>9} {'ref (s)':>9} {'ratio':>7} "
                  f"{'target':>7}  result")
        print(header)
        print("-" * len(header))
        ok = True
        for res in results:
            lv = res["level"]
            rows = [
                Row(f"L{lv} full checkpoint vs tar czf", _median(res["full_s"]),
                    _median(res["tar_czf_s"]), 5.0,
                    f"ours {res['full_bytes'] / 1e6:.2f} MB, tar.gz "
                    f"{res['tar_gz_bytes'] / 1e6:.2f} MB"),
                Row(f"L{lv} 1% incremental vs full", _median(res["incremental_s"]),
                    _median(res["full_s"]), 20.0,
                    f"incr {res['incremental_bytes'] / 1e6:.3f} MB stored for "
                    f"{res['changed_bytes'] / 1e6:.2f} MB changed"),
                Row(f"L{lv} no-change checkpoint vs full (info)", _median(res["nochange_s"]),
                    _median(res["full_s"]), 0.0, ""),
                Row(f"L{lv} no-change vs bare stat walk (info)", _median(res["nochange_s"]),
                    _median(res["stat_walk_s"]), 0.0,
                    f"walk = scandir+lstat of {n_files} files, the floor of any checkpoint"),
                Row(f"L{lv} 1% incremental vs bare stat walk (info)",
                    _median(res["incremental_s"]), _median(res["stat_walk_s"]), 0.0,
                    "the rest: reading/hashing/compressing the change, manifest, fsyncs"),
                Row(f"L{lv} restore vs tar xzf (info)", _median(res["restore_s"]),
                    _median(untar_s), 0.0, "restore verifies every blob's sha256"),
            ]
            for row in rows:
                if row.target > 0:
                    passed = row.ratio >= row.target
                    ok &= passed
                    verdict, tgt = ("PASS" if passed else "FAIL"), f">={row.target:g}x"
                else:
                    verdict, tgt = "-", "-"
                print(f"{row.name:42} {row.ours_s:9.4f} {row.ref_s:9.4f} {row.ratio:6.1f}x "
                      f"{tgt:>7}  {verdict:4}  {row.note}")
        if args.json is not None:
            payload = {"files": n_files, "bytes": raw, "repeats": args.repeats,
                       "load_average": load, "tar_xzf_s": untar_s, "levels": results}
            tmp = args.json.with_suffix(".tmp")
            tmp.write_text(json.dumps(payload, indent=2))
            os.replace(tmp, args.json)
        return 0 if ok else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
