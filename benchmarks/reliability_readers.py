"""Reliability of the log readers on adversarial input (issue 14, item 5).

Generates the cases into a temp folder, reads each with ``read_trajectory`` in a worker
process (a memory cap, and a timeout per case: a hang or a blow-up is a result, not a
stalled run) and prints how many were tried, read, refused cleanly, and wrong.

Cases, each with the outcome it must have:

* the static cases of ``tests/data/readers/adversarial`` (outcome per its README);
* files that are not logs: a FIFO, /dev/zero and /dev/null behind a log name, a
  directory, a symlink loop, a dangling symlink, empty, blank, NUL bytes, random bytes,
  Latin-1, UTF-16, a file over the size limit, gzip / zstandard bombs, corrupt and
  truncated compressed files;
* for every seed log (the hand-made logs of ``tests/data/readers``, the public fixtures when
  present, the readable recordings): its gzip and zstandard copies (must read the same),
  cuts at several offsets, a value of every kind replaced by each wrong JSON type, a key
  duplicated, a number made NaN, a string given a lone surrogate, an integer made 10**30, a
  duration made negative, deep nesting inserted, a NUL byte inserted (these must be refused,
  or read and round-trip where the value lands in a kept, untyped field);
* for every seed log of a line-oriented format (one with a streaming parser in the reader
  table: Codex exec/rollout, Claude Code stream/session), each plain mutated copy again,
  fed line by line to the format's parser as a live harness would (group "fed lines"):
  the same strictness must hold there;
* memory (group "memory", issue 32 item 9): compressed logs of a few KB whose decompressed
  bytes are within a 256 MiB ``--max-mb`` but whose objects would take several GB (tiny
  records of each format, a JSON document of tiny messages, large lines), generated afresh
  at random sizes and read by a worker under a 1.25 GiB address-space limit: each must be
  read, or refused in one line naming the file, never a MemoryError, a crash or a hang.

Every format of the reader table (``features.readers.READERS``) is listed with its number
of seed logs; a format with none is printed as "no seed log", never skipped silently.

Outcomes: *read* (a trajectory that round-trips through Parquet; for a case that must read
the same as its seed, equal to it), *refused* (a one-line ``TrajectoryFormatError`` naming
the file, not a reader's unexpected exception), *wrong* (anything else: another exception,
a message that does not name the file or spans lines, a hang, memory exhaustion, a refusal
where a read was due, a silent read where a refusal was due, a read that does not round-trip).

Run: ``python benchmarks/reliability_readers.py [--seed 0] [--timeout 20] [--show-wrong]``
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zstandard

from features.fixtures import trajectories
from features.readers import READERS
from ripplecp_cli import opt, run

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "readers"
FIXTURES = trajectories(REPO)  # the tests' lookup (tests/features/conftest.py)
# must: "read", "refuse", "either" (refuse cleanly or read and round-trip), "same" (read,
# equal to the seed's trajectory), "flag" (read, with times flagged)
STATIC = {
    "duplicate_key.traj.json": "refuse", "deep_nesting.json": "refuse",
    "type_is_a_list.jsonl": "refuse", "swe_history_text_not_string.traj": "refuse",
    "nan_duration.traj": "refuse", "infinite_duration.traj": "refuse",
    "negative_duration.traj": "refuse", "arrivals_backwards.jsonl": "flag",
    "openhands_tool_call_metadata_wrong_type.json": "refuse", "lone_surrogate.jsonl": "refuse",
    "huge_token_count.jsonl": "refuse", "no_events.jsonl": "read",
    "paired_surrogates_ok.jsonl": "read",
}
LIMIT = 4 << 20  # the workers' size limit (small, so over-limit and bomb cases stay cheap)
AS_LIMIT = 3 << 30  # the workers' address-space limit
MEMORY_LIMIT = 256 << 20  # the memory cases' size limit ...
MEMORY_AS_LIMIT = 1280 << 20  # ... and address-space limit: their objects would not fit


@dataclass(frozen=True)
class Args:
    """Adversarial inputs for the log readers: tried / read / refused cleanly / wrong."""

    seed: int = opt(0, min=0)
    """one seed for the mutations"""
    timeout: float = opt(20.0, min=1.0)
    """seconds a case may take before it counts as a hang"""
    show_wrong: bool = True
    """list every wrong case with what happened"""
    show_refused: bool = False
    """list every refusal message too"""
    keep: Path | None = None
    """keep the generated cases in this folder (default: a temp folder, removed)"""
    checkout: Path = REPO
    """the checkout whose readers are tried (another one, e.g. main, to compare; the cases
    and seeds are this checkout's)"""
    memory_cases: int = opt(8, min=0)
    """memory cases (bombs within --max-mb whose objects exceed the worker's memory)"""


@dataclass(frozen=True)
class Case:
    name: str
    path: Path
    must: str
    seed: Path | None = None  # for "same": the log whose trajectory it must equal
    group: str = "mutated log"
    feed: str | None = None  # fed line by line to this format's streaming parser
    memory: bool = False  # a memory case: read by the memory worker, no round trip


# ---------------------------------------------------------------------------------------
# cases
# ---------------------------------------------------------------------------------------


def seed_logs(worker: Worker, scratch: Path) -> list[tuple[Path, str]]:
    """Hand-made logs, public fixtures and recordings that this checkout reads cleanly,
    with their formats."""
    cands = sorted(p for p in DATA.glob("*/*") if p.parent.name != "adversarial"
                   and p.name != "README.md")
    if FIXTURES.is_dir():
        cands += sorted(p for p in FIXTURES.glob("*/*") if p.is_file() and p.suffix in (
            ".json", ".jsonl", ".traj") and not p.name.endswith(".report.json"))
    cands += sorted((REPO / "tests" / "data" / "recordings").glob("*/*.jsonl"))
    out = []
    for p in cands:
        res = worker.read(Case(p.name, p, "read"), scratch)
        if res["outcome"] == "read":
            out.append((p, res["format"]))
    return out


def _walk(doc: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    yield path, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _walk(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:50]):
            yield from _walk(v, (*path, i))


def _set(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    parent[path[-1]] = value
    return doc


def _records(p: Path) -> tuple[str, list[Any]]:
    """("json", [doc]) or ("jsonl", [line objects]) of a seed file."""
    text = p.read_text(encoding="utf-8")
    try:
        return "json", [json.loads(text)]
    except json.JSONDecodeError:
        return "jsonl", [json.loads(x) for x in text.split("\n") if x.strip()]


def _dump(kind: str, recs: list[Any]) -> str:
    if kind == "json":
        return json.dumps(recs[0], indent=1, ensure_ascii=False)
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs)


WRONG_TYPES: list[Any] = [None, 7, "x", [], {}, True, 1.5]
DURATIONS = {"execution_time", "duration_seconds", "latency", "duration", "timestamp"}


def mutations(seed: Path, out: Path, rng: random.Random) -> Iterator[Case]:
    """The mutated copies of one seed log."""
    stem = f"{seed.parent.name}__{seed.name}"
    if seed.is_dir():  # a log directory: mutate one event file in a copy
        ev = sorted((seed / "events").glob("event-*.json"))
        for j, target in enumerate(rng.sample(ev, min(3, len(ev)))):
            for k, wrong in enumerate(("cut", "dup", "nan")):
                d = out / f"{stem}.{j}{k}"
                shutil.copytree(seed, d)
                f = d / "events" / target.name
                text = f.read_text()
                f.write_text(text[: len(text) // 2] if wrong == "cut" else
                             text.replace('"id": ', '"id": "dup", "id": ', 1) if wrong == "dup"
                             else re.sub(r'(?<=": )\d+(?:\.\d+)?', "NaN", text, count=1)
                             if re.search(r'": \d', text) else text[:-1] + ', "n": NaN}')
                yield Case(f"{stem} {wrong} {target.name[:12]}", d,
                           "refuse" if wrong != "cut" or text else "either")
        return
    data = seed.read_bytes()
    report = seed.with_name(seed.name.removesuffix(".traj.json") + ".report.json")
    if seed.name.endswith(".traj.json") and report.is_file():  # the verdict beside the copies
        shutil.copy(report, out / f"{stem.removesuffix('.traj.json')}.report.json")
    # compressed copies read the same (a Claude Code session's subagents folder beside them)
    side = seed.parent / Path(seed.name).stem
    if seed.suffix == ".jsonl" and side.is_dir():
        shutil.copytree(side, out / Path(stem).stem, dirs_exist_ok=True)
    gz = out / f"{stem}.gz"
    gz.write_bytes(gzip.compress(data))
    yield Case(f"{stem} gzip", gz, "same", seed)
    zs = out / f"{stem}.zst"
    zs.write_bytes(zstandard.ZstdCompressor().compress(data))
    yield Case(f"{stem} zstd", zs, "same", seed)
    # cuts
    for k, frac in enumerate((0.05, 0.3, 0.5, 0.77, 0.99)):
        c = out / f"{stem}.cut{k}"
        c.write_bytes(data[: max(1, int(len(data) * frac))])
        yield Case(f"{stem} cut at {frac:.0%}", c, "either")
    nul = out / f"{stem}.nul"
    mid = len(data) // 2
    nul.write_bytes(data[:mid] + b"\x00" + data[mid:])
    yield Case(f"{stem} NUL byte", nul, "refuse")
    kind, recs = _records(seed)
    places = [(i, p, v) for i, r in enumerate(recs) for p, v in _walk(r) if p]
    if not places:
        return
    # wrong types at random places
    for k in range(8):
        i, p, v = rng.choice(places)
        wrong = rng.choice([w for w in WRONG_TYPES if type(w) is not type(v)])
        copy = json.loads(json.dumps(recs))
        _set(copy[i], p, wrong)
        f = out / f"{stem}.type{k}"
        f.write_text(_dump(kind, copy))
        yield Case(f"{stem} {'/'.join(map(str, p))[-50:]} -> {type(wrong).__name__}", f,
                   "either")
    text = _dump(kind, recs)
    # a key written twice (JSON readers keep the last: a silent drop)
    m = re.search(r'\{(\s*)"([^"\\]+)": ', text)
    if m:
        f = out / f"{stem}.dupkey"
        f.write_text(text[: m.start()] + "{" + m.group(1) + f'"{m.group(2)}": null, '
                     + text[m.start() + 1:])
        yield Case(f"{stem} duplicate key {m.group(2)!r}", f, "refuse")
    # NaN for a number, a lone surrogate in a string, 10**30 for an integer
    nums = [m for m in re.finditer(r'(?<=": )-?\d+(?:\.\d+)?(?=[,}\n])', text)]
    if nums:
        m = rng.choice(nums)
        f = out / f"{stem}.nan"
        f.write_text(text[: m.start()] + "NaN" + text[m.end():])
        yield Case(f"{stem} NaN", f, "refuse")
        ints = [m for m in nums if "." not in m.group()]
        if ints:
            m = rng.choice(ints)
            f = out / f"{stem}.bigint"
            f.write_text(text[: m.start()] + str(10**30) + text[m.end():])
            yield Case(f"{stem} 10**30", f, "either")
    strs = [m for m in re.finditer(r'(?<=": ")[^"\\]{3,}(?=")', text)]
    if strs:
        m = rng.choice(strs)
        f = out / f"{stem}.surrogate"
        f.write_text(text[: m.start()] + "\\udc80" + text[m.start():])
        yield Case(f"{stem} lone surrogate", f, "refuse")
    durs = [m for m in re.finditer(r'"(\w+)": (\d+(?:\.\d+)?)', text) if m.group(1) in DURATIONS]
    if durs:
        m = rng.choice(durs)
        f = out / f"{stem}.negative"
        f.write_text(text[: m.start(2)] + "-" + text[m.start(2):])
        yield Case(f"{stem} negative {m.group(1)}", f, "either")
    objs = [m for m in re.finditer(r'": \{(?=\s*")', text)]
    if objs:
        m = rng.choice(objs)
        f = out / f"{stem}.deep"
        f.write_text(text[: m.end()] + '"_deep": ' + "[" * 5000 + "]" * 5000 + ", "
                     + text[m.end():])
        yield Case(f"{stem} nested 5000 deep", f, "refuse")


def special_cases(out: Path) -> Iterator[Case]:
    """Inputs that are not logs, or not files, and the static cases."""
    for case in _special(out):
        yield Case(case.name, case.path, case.must, group="not a log")
    for name, must in STATIC.items():
        yield Case(f"static {name}", DATA / "adversarial" / name, must, group="static case")


def _special(out: Path) -> Iterator[Case]:
    fifo = out / "fifo.jsonl"
    os.mkfifo(fifo)
    yield Case("a FIFO with no writer", fifo, "refuse")
    for dev in ("/dev/zero", "/dev/null", "/dev/urandom"):
        link = out / f"{Path(dev).name}.jsonl"
        link.symlink_to(dev)
        yield Case(f"{dev} behind a log name", link, "refuse")
    d = out / "a_directory"
    d.mkdir()
    (d / "x.json").write_text("{}")
    yield Case("a directory", d, "refuse")
    loop = out / "loop.json"
    loop.symlink_to(loop)
    yield Case("a symlink loop", loop, "refuse")
    dangling = out / "dangling.json"
    dangling.symlink_to(out / "nowhere.json")
    yield Case("a dangling symlink", dangling, "refuse")
    yield Case("a missing file", out / "absent.jsonl", "refuse")
    for name, data in (("empty", b""), ("blank", b" \n\t\n"), ("nul", b"\x00" * 64),
                       ("random", random.Random(1).randbytes(4096)),
                       ("latin1", '{"type": "thread.started", "x": "café"}\n'.encode("latin-1")),
                       ("utf16", '{"type": "thread.started"}\n'.encode("utf-16")),
                       ("text", b"hello, this is not a log\n"), ("number", b"42\n"),
                       ("string", b'"a log?"\n'), ("null", b"null\n"), ("list", b"[]\n"),
                       ("object", b"{}\n"), ("list of nulls", b"[null, null]\n"),
                       ("half object", b'{"type": "thread.started", "thread_id": '),
                       ("unterminated string", b'{"type": "thread.started", "thread_id": "t\n')):
        f = out / f"{name}.json"
        f.write_bytes(data)
        yield Case(f"{name} file", f, "refuse")
    big = out / "sparse_big.jsonl"
    with open(big, "wb") as f:
        f.truncate(64 << 30)  # a 64 GiB sparse file: never read
    yield Case("a 64 GiB file", big, "refuse")
    line = b'{"type": "thread.started", "thread_id": "bomb"}\n'
    gz = out / "bomb.jsonl.gz"
    with gzip.open(gz, "wb", compresslevel=9) as g:
        g.write(line)
        for _ in range(4 * LIMIT >> 20):
            g.write(b" " * (1 << 20))
    yield Case("a gzip bomb (16x the limit)", gz, "refuse")
    zs = out / "bomb.jsonl.zst"
    zs.write_bytes(zstandard.ZstdCompressor(level=19).compress(line + b" " * (4 * LIMIT)))
    yield Case("a zstandard bomb (4x the limit)", zs, "refuse")
    ok = (DATA / "adversarial" / "arrivals_backwards.jsonl").read_bytes()
    g = gzip.compress(ok)
    for name, data in (("cut gzip", g[: len(g) // 2]), ("flipped gzip", g[:30] + b"\xff" + g[31:]),
                       ("gzip then garbage", g + b"garbage"),
                       ("cut zstd", zstandard.ZstdCompressor().compress(ok)[:40]),
                       ("zstd magic only", b"\x28\xb5\x2f\xfd"), ("gzip magic only", b"\x1f\x8b")):
        f = out / f"{name.replace(' ', '_')}.gz"
        f.write_bytes(data)
        yield Case(name, f, "refuse")


def memory_cases(out: Path, rng: random.Random, n: int) -> Iterator[Case]:
    """``n`` logs of a few KB (zstandard or gzip) whose decompressed size is within the
    memory worker's size limit but whose objects would take several GB: tiny records of
    every kind of format, at random sizes (see the module docstring)."""
    shapes = list(_MEMORY_SHAPES)
    for k in range(n):
        name, ext, head, record, sep, tail = shapes[k % len(shapes)]
        mib = rng.randint(6, MEMORY_LIMIT >> 20 >> 1)
        count = (mib << 20) // (len(record) + len(sep))
        path = out / f"memory{k}_{name}_{mib}MiB{ext}"
        compress = ext.endswith(".gz")
        with open(path, "wb") as raw:
            sink = (gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6) if compress
                    else zstandard.ZstdCompressor(level=3).stream_writer(raw))
            with sink:
                sink.write(head)
                per_chunk = max(1, (1 << 20) // len(record))
                for _ in range(count // per_chunk):
                    sink.write((record + sep) * per_chunk)
                sink.write((record + sep) * (count % per_chunk) + record + tail)
        yield Case(f"{name}, {mib} MiB decompressed from {path.stat().st_size // 1024} KB",
                   path, "either", group="memory", memory=True)


# (name, suffix, head, one record, separator, tail): a log of many copies of the record
_MEMORY_SHAPES = (
    ("codex-exec tiny lines", ".jsonl.zst", b'{"type":"thread.started","thread_id":"t"}\n',
     b'{"type":"item.plan.delta"}', b"\n", b"\n"),
    ("claude stream tiny lines", ".jsonl.zst",
     b'{"type":"system","subtype":"init","session_id":"s"}\n',
     b'{"type":"system","subtype":"x","session_id":"s"}', b"\n", b"\n"),
    ("rollout tiny lines", ".jsonl.gz",
     b'{"timestamp":"2025-01-01T00:00:00Z","type":"session_meta","payload":{"id":"r"}}\n',
     b'{"timestamp":"2025-01-01T00:00:01Z","type":"compacted","payload":{"x":1}}', b"\n", b"\n"),
    ("mini-swe-agent tiny messages", ".traj.json.zst",
     b'{"trajectory_format":"mini-swe-agent-1","info":{},"messages":[',
     b'{"role":"system","content":""}', b",", b"]}"),
    ("openhands-v1 tiny events", ".json.zst", b"[",
     b'{"kind":"PauseEvent","id":"e","source":"user"}', b",", b"]"),
    ("swe-agent tiny steps", ".traj.zst", b'{"trajectory":[', b'{"action":"ls"}', b",",
     b'],"history":[],"info":{}}'),
    ("codex-exec large outputs", ".jsonl.zst", b'{"type":"thread.started","thread_id":"t"}\n',
     b'{"type":"item.completed","item":{"id":"i","type":"command_execution","command":"cat x",'
     b'"aggregated_output":"' + b"y" * 60000 + b'","exit_code":0,"status":"completed"}}',
     b"\n", b"\n"),
)


# ---------------------------------------------------------------------------------------
# the worker: reads cases one by one, answers one JSON line each
# ---------------------------------------------------------------------------------------

WORKER = r"""
import json, sys, warnings, resource
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[2]), int(sys.argv[2])))
from pathlib import Path
from features.readers import TrajectoryFormatError, read_trajectory
from features.schema import read_parquet, write_parquet
try:  # the readers of a checkout from before the hardening have neither (to compare)
    from features.readers import ReadLimits, TimeOrderWarning
    from features.readers.files import read_limits
    KW = {"limits": ReadLimits(max_bytes=int(sys.argv[1]))}
except ImportError:
    TimeOrderWarning, KW = (), {}
try:  # checkouts from before the streaming parsers have no live path
    from features.readers import stream_parser
except ImportError:
    stream_parser = None

def fed(path, fmt):
    from contextlib import nullcontext
    p = stream_parser(fmt, source=path)
    with read_limits(KW["limits"]) if KW else nullcontext():
        for raw in path.read_bytes().split(b"\n"):
            p.feed(raw)
        return p.finish()

for line in sys.stdin:
    req = json.loads(line)
    path, seed = Path(req["path"]), req.get("seed")
    res = {}
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if req.get("feed"):
                if stream_parser is None:
                    raise RuntimeError("no streaming parsers in this checkout")
                t = fed(path, req["feed"])
            else:
                t = read_trajectory(path, **KW)
        res["outcome"] = "read"
        res["format"] = t.source_format
        if req.get("memory"):  # the read is the test; its objects go now
            res["round_trip"], res["flagged"] = True, False
            del t
            print(json.dumps(res), flush=True)
            continue
        res["flagged"] = bool(TimeOrderWarning) and any(
            issubclass(w.category, TimeOrderWarning) for w in caught)
        out = Path(req["scratch"])
        write_parquet([t], out)
        # one row per event: a trajectory with no events has no row to come back from
        res["round_trip"] = read_parquet(out) == ([t] if t.events else [])
        if seed is not None:
            s = read_trajectory(Path(seed), **KW)
            for e in (*s.events, *t.events):  # a subagent's file: where the copy sits
                e.extra.pop("file", None)
            res["same"] = (s.events, s.repo) == (t.events, t.repo)  # task id: the file stem
    except TrajectoryFormatError as exc:
        msg = str(exc)
        res["outcome"] = "refused"
        res["message"] = msg
        res["clean"] = (str(path) in msg and "\n" not in msg
                        and "reader failed on unexpected input" not in msg)
    except MemoryError:
        res["outcome"] = "memory"
    except BaseException as exc:  # noqa: BLE001 - what the readers must never raise
        res["outcome"] = "exception"
        res["message"] = f"{type(exc).__name__}: {exc}"[:300]
    print(json.dumps(res), flush=True)
"""


class Worker:
    """A reader process fed case paths; restarted after a hang or a crash."""

    def __init__(self, timeout: float, checkout: Path, limit: int = LIMIT,
                 as_limit: int = AS_LIMIT) -> None:
        self.timeout = timeout
        self.checkout = checkout
        self.limit, self.as_limit = limit, as_limit
        self.proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        env = {**os.environ, "PYTHONPATH": str(self.checkout)}
        return subprocess.Popen([sys.executable, "-c", WORKER, str(self.limit),
                                 str(self.as_limit)], cwd=self.checkout,
                                env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, bufsize=1)

    def read(self, case: Case, scratch: Path) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        req = {"path": str(case.path), "scratch": str(scratch),
               **({"seed": str(case.seed)} if case.seed else {}),
               **({"feed": case.feed} if case.feed else {}),
               **({"memory": True} if case.memory else {})}
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        import selectors
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        ready = sel.select(self.timeout)
        sel.close()
        if not ready:
            self.close()
            return {"outcome": "hang"}
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            self.proc = None
            return {"outcome": "crash", "message": f"worker exit status {code}"}
        return json.loads(line)

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def judge(case: Case, res: dict[str, Any]) -> tuple[str, str]:
    """("read" | "refused" | "wrong", why)."""
    out = res["outcome"]
    if out == "refused":
        if not res["clean"]:
            return "wrong", f"refused, but the message is not one clean line naming the file: " \
                            f"{res['message'][:200]}"
        if case.must in ("read", "same", "flag"):
            return "wrong", f"refused where a read was due: {res['message'][:200]}"
        return "refused", res["message"]
    if out == "read":
        if not res["round_trip"]:
            return "wrong", "read, but the trajectory does not round-trip through Parquet"
        if case.must == "refuse":
            return "wrong", "read silently where a refusal was due"
        if case.must == "same" and not res.get("same"):
            return "wrong", "read, but not the same trajectory as the uncompressed log"
        if case.must == "flag" and not res["flagged"]:
            return "wrong", "read, but times running backwards were not flagged"
        return "read", ""
    return "wrong", f"{out}: {res.get('message', '')}"


def reliability(args: Args) -> int:
    rng = random.Random(args.seed)
    folder = Path(tempfile.mkdtemp(prefix="reliability_readers_")) if args.keep is None else args.keep
    folder.mkdir(parents=True, exist_ok=True)
    worker = Worker(args.timeout, args.checkout)
    mem_worker = Worker(max(args.timeout, 180.0), args.checkout, MEMORY_LIMIT, MEMORY_AS_LIMIT)
    scratch = folder / "scratch.parquet"
    tally: Counter[tuple[str, str]] = Counter()
    wrong: list[tuple[str, str]] = []
    t0 = time.perf_counter()
    try:
        (folder / "special").mkdir(exist_ok=True)
        cases = list(special_cases(folder / "special"))
        own = Worker(args.timeout, REPO)
        try:
            seeds = seed_logs(own, scratch)
        finally:
            own.close()
        streams = {r.name for r in READERS if r.parser is not None}
        for s, fmt in seeds:
            sub = folder / s.parent.name
            sub.mkdir(exist_ok=True)
            mutated = list(mutations(s, sub, rng))
            cases += mutated
            if fmt in streams:  # the same bytes, fed line by line as a live harness would
                cases += [Case(f"{c.name} (fed)", c.path, c.must, group="fed lines", feed=fmt)
                          for c in mutated if c.must in ("refuse", "either")
                          and c.path.is_file() and c.path.suffix not in (".gz", ".zst")]
        (folder / "memory").mkdir(exist_ok=True)
        cases += list(memory_cases(folder / "memory", rng, args.memory_cases))
        for case in cases:
            verdict, why = judge(case, (mem_worker if case.memory else worker).read(
                case, scratch))
            tally[(case.group, verdict)] += 1
            if verdict == "wrong":
                wrong.append((case.name, why))
            elif verdict == "refused" and args.show_refused:
                print(f"refused {case.name}: {why}")
    finally:
        worker.close()
        mem_worker.close()
        if args.keep is None:
            for p in folder.rglob("*"):  # a FIFO or a loop must not trip the removal
                if p.is_symlink() or stat.S_ISFIFO(p.lstat().st_mode):
                    p.unlink()
            shutil.rmtree(folder, ignore_errors=True)
    per_format = Counter(fmt for _, fmt in seeds)
    print("seed logs per format of the reader table: " + ", ".join(
        f"{r.name} {per_format[r.name]}" if per_format[r.name] else f"{r.name} no seed log"
        for r in READERS))
    groups = sorted({g for g, _ in tally})
    print(f"{'cases':<14}{'tried':>7}{'read':>7}{'refused':>9}{'wrong':>7}")
    for g in [*groups, "all"]:
        sel: Counter[str] = Counter()
        for (gg, v), n in tally.items():
            if g in (gg, "all"):
                sel[v] += n
        print(f"{g:<14}{sum(sel.values()):>7}{sel.get('read', 0):>7}{sel.get('refused', 0):>9}"
              f"{sel.get('wrong', 0):>7}")
    print(f"readers of {args.checkout}; {len(seeds)} seed logs; "
          f"{time.perf_counter() - t0:.0f} s; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    if args.show_wrong and wrong:
        print("\nwrong:")
        for name, why in wrong:
            print(f"  {name}: {why}")
    return 1 if wrong else 0


def main(argv: list[str] | None = None) -> int:
    return run(reliability, Args, argv, prog="python benchmarks/reliability_readers.py")


if __name__ == "__main__":
    sys.exit(main())
