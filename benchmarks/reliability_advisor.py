"""Reliability of the advisor under attack (issue 32, items 1, 7 and 10): cases made afresh each run.

Every case is run for real (real files, FIFOs, devices, threads, the real server), from a
seed (``--seed``; default: a new one each run, printed):

* **torn logs**: a decision log with random records, then a tail torn at a random byte or a
  corrupt line at a random place; a session is followed into it. Right: every boundary
  decided, every record written whole, the torn tail gone, the log readable.
* **hostile transcripts** given to the hook: a FIFO, ``/dev/zero``, ``/dev/urandom``, a
  directory, a symlink to a device, a sparse file over the size limit, random bytes, a line
  over the line limit before valid lines, a transcript that shrinks between calls. Right: the
  call returns within 20 s with less than 512 MiB allocated, and logs SKIP with its reason.
* **concurrent bursts**: 2-10 hook calls at once on one session whose transcript grows,
  in-process command hooks and the server's http hook. Right: no boundary decided twice,
  no more checkpoints than the budget.
* **tampered models**: a random byte of a random stored file flipped, the wrapper code
  edited, the digests rewritten for an edited config, a pickle in place of the policy.
  Right: refused with :class:`~ripplecp_policy.stored.ModelRefused`, nothing executed.

* **the exec wrapper under a signal** (``advise -- COMMAND``, issue 32 item 10): SIGINT,
  SIGTERM or SIGHUP to the wrapper or its whole process group after a random number of the
  command's lines; the command ends on it, exits a status of its own, or ignores signals.
  Right: the wrapper exits 128 + the signal within 15 s, the command is gone, the decision
  log is whole lines.
* **the exec wrapper and huge output lines**: lines around the line limit (at it, one byte
  over, a few KiB either side) and up to 400 MB, at random places among a recording's lines,
  the last one maybe without its newline, a random exit status. Right: the output copied
  byte for byte, the command's status returned, every line over the limit counted in a SKIP
  record, the recording's boundaries decided as without them, the wrapper's peak memory
  under 200 MiB.

Prints tried / right / wrong per case; exit status 0 when nothing is wrong.

    python benchmarks/reliability_advisor.py [--seed N] [--rounds 5]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import pickle
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ripplecp_policy.advise import Args, hook  # noqa: E402
from ripplecp_policy.advisor import CP, Advisor, load_model, read_decisions  # noqa: E402
from ripplecp_policy.policy import Budget  # noqa: E402

SESSION = ROOT / "tests" / "data" / "recordings" / "claude-code-2.1.197" / "task.session.jsonl"
EXEC = ROOT / "tests" / "data" / "recordings" / "codex-0.171.0" / "task.exec.jsonl"


class Row:
    def __init__(self, case: str) -> None:
        self.case, self.tried, self.right, self.wrong = case, 0, 0, 0
        self.why: list[str] = []

    def judge(self, ok: bool, why: str = "") -> None:
        self.tried += 1
        if ok:
            self.right += 1
        else:
            self.wrong += 1
            self.why.append(why)


def make_model(tmp: Path) -> Path:
    import importlib.util

    from ripplecp_policy.datasets import replays
    from ripplecp_policy.export import example_frame, log_policy_model
    from ripplecp_policy.learned import AdvantageRegressorPolicy
    from ripplecp_policy.policy import Setting

    spec = importlib.util.spec_from_file_location("fixtures", ROOT / "tests" / "conftest.py")
    fx = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fx)  # type: ignore[union-attr]
    ls = fx._toy_label_set(n_repos=3, tasks_per_repo=2, seed=3)
    budget = Budget("count", 2)
    pol = AdvantageRegressorPolicy("xgboost", n_estimators=10, threshold=-1e9).fit(ls, Setting(budget))
    obs: list = []
    for task in list(replays(ls).values())[:2]:
        pol.reset(task.task_id, 0)
        task.replay(pol.decide, budget, trace=obs)
    return log_policy_model(pol, budget, example_frame(obs).head(3), path=tmp / "model")


def bounded(fn: Callable[[], object], seconds: float) -> tuple[bool, float, int]:
    """Run ``fn`` in a thread: (returned in time, seconds, peak bytes allocated)."""
    tracemalloc.start()
    t0 = time.perf_counter()
    th = threading.Thread(target=fn, daemon=True)
    th.start()
    th.join(seconds)
    dt = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return not th.is_alive(), dt, peak


def payload(transcript: Path | str, session: str, cwd: Path) -> io.StringIO:
    return io.StringIO(json.dumps({"session_id": session, "transcript_path": str(transcript),
                                   "cwd": str(cwd), "hook_event_name": "PostToolUse"}))


def torn_logs(rng: random.Random, model, tmp: Path, row: Row) -> None:
    log = tmp / f"torn-{rng.randrange(1 << 30)}.jsonl"
    recs = [json.dumps({"session": f"old{i}", "boundary": i + 1, "decision": "SKIP",
                        "reason": "policy", "remaining_budget": 1.0}) for i in range(rng.randint(1, 6))]
    text = "".join(r + "\n" for r in recs)
    corrupt_middle = rng.random() < 0.4
    if corrupt_middle:
        cut = rng.randrange(len(recs))
        lines = text.splitlines(keepends=True)
        lines.insert(cut, lines[cut][: rng.randint(1, len(lines[cut]) - 2)] + "\n")
        text = "".join(lines)
    tail = recs[-1]
    text += tail[: rng.randint(1, len(tail) - 1)]  # a torn tail
    log.write_text(text)
    adv = Advisor(model, Budget("count", 2), log=log, session="new", source=EXEC)
    for line in EXEC.read_bytes().splitlines():
        adv.feed(line)
    adv.finish()
    got = read_decisions(log, "new")
    raw = log.read_bytes()
    whole = raw.endswith(b"\n")
    new_lines = [x for x in raw.splitlines() if b'"new"' in x]
    ok = (len(got) == 4 and [r["boundary"] for r in got] == [1, 2, 3, 4] and whole
          and all(json.loads(x)["session"] == "new" for x in new_lines))
    row.judge(ok, f"{log.name}: {len(got)} records, ends with newline {whole}")


def hostile(rng: random.Random, args: Args, tmp: Path, row: Row, kind: str) -> None:
    where = tmp / f"{kind}-{rng.randrange(1 << 30)}"
    path: Path | str
    if kind == "fifo":
        path = where
        os.mkfifo(path)
    elif kind in ("zero", "urandom"):
        path = f"/dev/{kind}"
    elif kind == "directory":
        where.mkdir()
        path = where
    elif kind == "symlink-to-device":
        path = where
        os.symlink(rng.choice(["/dev/zero", "/dev/urandom", "/dev/null"]), path)
    elif kind == "sparse-over-limit":
        path = where
        with open(path, "wb") as f:
            f.truncate(rng.randint(65, 400) * 2**20)
    elif kind == "random-bytes":
        path = where
        path.write_bytes(rng.randbytes(rng.randint(1, 2**20)))
    elif kind == "long-line":
        path = where
        with open(path, "wb") as f:
            f.write(b"x" * rng.randint(8 * 2**20 + 1, 20 * 2**20))
            f.write(b"\n")
            f.write(SESSION.read_bytes())
    else:  # shrinks between calls
        path = where
        path.write_bytes(SESSION.read_bytes())
    log = tmp / f"log-{where.name}.jsonl"
    a = Args(model=args.model, hook="claude-code", log=log, budget="count:2")
    if kind == "shrinking":
        hook(a, payload(path, "s", tmp))
        path.write_bytes(SESSION.read_bytes()[: rng.randint(0, 2000)])
    done, dt, peak = bounded(lambda: hook(a, payload(path, "s", tmp)), 20.0)
    recs = read_decisions(log) if done else []
    if kind == "long-line":
        sane = any(r["decision"] == CP for r in recs)  # the valid lines after it are followed
    elif kind == "shrinking":
        sane = True
    else:
        sane = bool(recs) and all(r["decision"] == "SKIP" for r in recs) and any(
            "transcript" in r["reason"] or "error" in r["reason"] for r in recs)
    ok = done and peak < 512 * 2**20 and sane
    row.judge(ok, f"{kind}: returned {done} in {dt:.1f} s, peak {peak / 2**20:.0f} MiB, sane {sane}")
    if kind == "fifo" or kind == "symlink-to-device":
        os.unlink(path)


def bursts(rng: random.Random, args: Args, tmp: Path, row: Row, server: tuple | None) -> None:
    lines = SESSION.read_bytes().splitlines(keepends=True)
    tag = rng.randrange(1 << 30)
    transcript = tmp / f"burst-{tag}.jsonl"
    log = tmp / f"burst-{tag}-d.jsonl"
    ws = tmp / f"ws-{tag}"
    ws.mkdir()
    (ws / "f.txt").write_text(str(tag))
    a = Args(model=args.model, hook="claude-code", log=log, budget="count:2", store=tmp / f"store-{tag}")
    cuts = sorted({rng.randint(1, len(lines)) for _ in range(rng.randint(1, 4))} | {len(lines)})
    for cut in cuts:
        transcript.write_bytes(b"".join(lines[:cut]))
        n = rng.randint(2, 10)
        if server is None:
            calls = [lambda: hook(a, payload(transcript, "s", ws)) for _ in range(n)]
        else:
            import http.client

            port, token, _ = server

            def call(port: int = port, token: str = token, transcript: Path = transcript) -> None:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                body = json.dumps({"session_id": f"s{tag}", "transcript_path": str(transcript),
                                   "cwd": str(ws), "hook_event_name": "PostToolUse"})
                c.request("POST", "/v1/hook/claude-code?budget=count:2", body=body,
                          headers={"X-Ripplecp-Token": token})
                c.getresponse().read()
                c.close()

            calls = [call] * n
        threads = [threading.Thread(target=c) for c in calls]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    if server is not None:
        log = server[2] / "sessions" / f"s{tag}.jsonl"
    recs = [r for r in read_decisions(log) if r.get("boundary") is not None]
    bounds = [r["boundary"] for r in recs]
    cps = sum(r["decision"] == CP for r in recs)
    ok = bool(bounds) and len(bounds) == len(set(bounds)) and cps <= 2
    row.judge(ok, f"burst {tag}: boundaries {bounds}, {cps} checkpoints")


class _Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def tampered(rng: random.Random, model_dir: Path, tmp: Path, row: Row) -> None:
    from ripplecp_policy.export import load_policy_model
    from ripplecp_policy.stored import ModelRefused

    tag = rng.randrange(1 << 30)
    copy = tmp / f"model-{tag}"
    shutil.copytree(model_dir, copy)
    marker = tmp / f"PWNED-{tag}"
    how = rng.choice(["flip", "code", "redigest", "pickle"])
    arts = copy / "artifacts"
    if how == "flip":
        f = rng.choice([arts / "config.json", arts / "booster.json", arts / "digests.json",
                        copy / "pyfunc_model.py"])
        data = bytearray(f.read_bytes())
        i = rng.randrange(len(data))
        data[i] ^= 1 << rng.randrange(8)
        f.write_bytes(bytes(data))
        how = f"flip a bit of {f.name}"
    elif how == "code":
        code = copy / "pyfunc_model.py"
        code.write_text(f"import pathlib; pathlib.Path({str(marker)!r}).touch()\n" + code.read_text())
    elif how == "redigest":  # a consistent forgery: the config edited to a format this
        # version does not read, its digest rewritten
        conf = json.loads((arts / "config.json").read_text())
        conf["format"] = rng.choice(["joblib", "cloudpickle", "pyfunc-code"])
        (arts / "config.json").write_text(json.dumps(conf))
        dig = json.loads((arts / "digests.json").read_text())
        dig["sha256"]["artifacts/config.json"] = hashlib.sha256((arts / "config.json").read_bytes()).hexdigest()
        (arts / "digests.json").write_text(json.dumps(dig))
        (arts / "policy.joblib").write_bytes(pickle.dumps(_Payload(str(marker))))
    else:
        conf = json.loads((arts / "config.json").read_text())
        conf["format"] = "joblib"
        (arts / "config.json").write_text(json.dumps(conf))
        (arts / "policy.joblib").write_bytes(pickle.dumps(_Payload(str(marker))))
    try:
        load_policy_model(str(copy))
        refused = False
    except ModelRefused as exc:
        refused = "\n" not in str(exc)
    row.judge(refused and not marker.exists(), f"{how}: refused {refused}, ran {marker.exists()}")


#: the command the wrapper runs: the recording's lines with long ones inserted, its pid, the
#: size and sha256 of what it wrote in ``PIDFILE``, then, per mode: exit with ``code``; sleep
#: until a signal ends it (``plain``); exit ``code`` on one (``own-status``); ignore them
COMMAND = r"""
import hashlib, os, signal, sys, time
rec, pidfile, mode, code, after, longs = sys.argv[1:7]
code, after = int(code), int(after)
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    if mode == "own-status":
        signal.signal(s, lambda *_: os._exit(code))
    elif mode == "stubborn":
        signal.signal(s, signal.SIG_IGN)
out, digest, size = sys.stdout.buffer, hashlib.sha256(), 0
def put(b):
    global size
    out.write(b); digest.update(b); size += len(b)
lines = open(rec, "rb").readlines()[:after]
at = {}
for item in filter(None, longs.split(",")):
    i, n = map(int, item.split(":"))
    at.setdefault(i, []).append(n)
for i in range(len(lines) + 1):
    for j, n in enumerate(at.get(i, [])):  # odd status: the output's last line has no newline
        head = b'{"type":"item.completed","item":{"id":"long","type":"agent_message","text":"'
        put(head)
        left, block = n - len(head) - 4, b"x" * (1 << 20)
        while left > 0:
            put(block[:left]); left -= len(block)
        last = i == len(lines) and j == len(at[i]) - 1 and code % 2
        put(b'"}}' + (b"" if last else b"\n"))
    if i < len(lines):
        put(lines[i])
out.flush()
with open(pidfile + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {size} {digest.hexdigest()}")
os.replace(pidfile + ".tmp", pidfile)
if mode == "exit":
    sys.exit(code)
time.sleep(120)
"""


def _wrapper(model_dir: Path, state: Path, where: Path, mode: str, code: int, after: int,
             longs: str = "", measure: bool = False) -> subprocess.Popen:
    argv = [sys.executable, "-m", "ripplecp_policy.advise", "--model", str(model_dir),
            "--budget", "count:2", "--log", str(where / "d.jsonl"), "--state", str(state), "--",
            sys.executable, "-c", COMMAND, str(EXEC), str(where / "pid"), mode, str(code),
            str(after), longs]
    if measure:  # a parent that writes its children's peak memory (the wrapper's)
        argv = [sys.executable, "-c", "import resource, subprocess, sys; rc = subprocess.call("
                "sys.argv[2:]); open(sys.argv[1], 'w').write(str(resource.getrusage("
                "resource.RUSAGE_CHILDREN).ru_maxrss * 1024)); sys.exit(rc)",
                str(where / "peak"), *argv]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))


def _gone(pid: int, within: float = 5.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def _log_lines(log: Path) -> list[dict] | None:
    """The decision log's records, or None when a line of it is not whole."""
    try:
        data = log.read_bytes()
        return None if data and not data.endswith(b"\n") else [json.loads(x) for x in data.splitlines()]
    except (OSError, ValueError):
        return None


def wrapper_signals(rng: random.Random, model_dir: Path, state: Path, tmp: Path, row: Row) -> None:
    where = tmp / f"wsig-{rng.randrange(1 << 30)}"
    where.mkdir()
    n_lines = sum(1 for _ in EXEC.open("rb"))
    mode = rng.choice(["plain", "own-status", "stubborn"])
    sig = rng.choice([signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
    target = rng.choice(["wrapper", "group"])
    code, after = rng.choice([0, 1, 3, 254]), rng.randint(1, n_lines)
    p = _wrapper(model_dir, state, where, mode, code, after)
    what = f"{mode} command, {after} lines, {signal.Signals(sig).name} to the {target}"
    try:
        end = time.monotonic() + 60
        while not (where / "pid").exists() and time.monotonic() < end:
            time.sleep(0.02)
        pid = int((where / "pid").read_text().split()[0])
        time.sleep(rng.uniform(0.05, 0.5))
        t0 = time.monotonic()
        (os.killpg if target == "group" else os.kill)(p.pid, sig)
        try:
            p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    gone = _gone(pid)
    recs = _log_lines(where / "d.jsonl") if (where / "d.jsonl").exists() else []
    ok = p.returncode == 128 + sig and took < 15 and gone and recs is not None
    row.judge(ok, f"{what}: exit {p.returncode} in {took:.1f} s, command gone {gone}, "
                  f"log whole {recs is not None}")


def wrapper_long_lines(rng: random.Random, model_dir: Path, state: Path, tmp: Path, row: Row,
                       plain: list[str]) -> None:
    from ripplecp_policy.advisor_lines import MAX_LINE_BYTES

    where = tmp / f"wlong-{rng.randrange(1 << 30)}"
    where.mkdir()
    n_lines = sum(1 for _ in EXEC.open("rb"))
    sizes = [MAX_LINE_BYTES + rng.choice([0, 1, -rng.randint(1, 4096), rng.randint(2, 4096)])
             for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.5:
        sizes.append(rng.randint(16, 400) * 10**6)
    longs = sorted((rng.randint(0, n_lines), n) for n in sizes)
    code = rng.randint(0, 125)
    p = _wrapper(model_dir, state, where, "exit", code, n_lines,
                 ",".join(f"{i}:{n}" for i, n in longs), measure=True)
    digest, size = hashlib.sha256(), 0
    try:
        while chunk := p.stdout.read1(1 << 20):
            digest.update(chunk)
            size += len(chunk)
        p.wait(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    _, want_size, want = (where / "pid").read_text().split()
    same = (size, digest.hexdigest()) == (int(want_size), want)
    recs = _log_lines(where / "d.jsonl") or []
    counted = sum(int(m[1]) for r in recs if r["boundary"] is None
                  for m in [re.search(r"(\d+) line\(s\) not followed: over", r["reason"])] if m)
    no_newline = longs[-1][0] == n_lines and code % 2  # the last line, one byte shorter
    over = sum(n - (no_newline and k == len(longs) - 1) > MAX_LINE_BYTES
               for k, (_, n) in enumerate(longs))
    decided = [r["decision"] for r in recs if r["boundary"] is not None]
    peak = int((where / "peak").read_text()) if (where / "peak").exists() else 1 << 62
    ok = p.returncode == code and same and counted == over and decided == plain and peak < 200 * 2**20
    row.judge(ok, f"lines {longs}, status {code}: exit {p.returncode}, copied {same}, "
                  f"{counted} of {over} over-long counted, decisions {decided} (want {plain}), "
                  f"peak {peak / 2**20:.0f} MiB")


def start_server(model_dir: Path, tmp: Path) -> tuple[int, str, Path]:
    from ripplecp_policy.advisor_server import serve
    from ripplecp_policy.advisor_state import ServerConfig, token_of

    state = tmp / "state"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conf = ServerConfig(model=str(model_dir.resolve()), port=port, idle_s=3600,
                        store=str(tmp / "srv-store"))
    conf.write(state)
    ready = threading.Event()
    threading.Thread(target=serve, args=(state, conf), kwargs={"ready": ready}, daemon=True).start()
    ready.wait(120)
    return port, token_of(state), state


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=None, help="the cases' seed (default: a new one)")
    ap.add_argument("--rounds", type=int, default=5, help="cases of each kind")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    rng = random.Random(seed)
    t0 = time.perf_counter()
    kinds = ["fifo", "zero", "urandom", "directory", "symlink-to-device", "sparse-over-limit",
             "random-bytes", "long-line", "shrinking"]
    rows = {name: Row(name) for name in ["torn decision log", *[f"transcript: {k}" for k in kinds],
                                         "burst: command hooks", "burst: server http hooks",
                                         "tampered model folder", "exec wrapper: signal",
                                         "exec wrapper: huge lines"]}
    with tempfile.TemporaryDirectory(prefix="reliability-advisor-") as t:
        tmp = Path(t)
        model_dir = make_model(tmp)
        model = load_model(model_dir)
        hargs = Args(model=str(model_dir), hook="claude-code")
        server = start_server(model_dir, tmp)
        plain = _wrapper(model_dir, server[2], tmp, "exit", 0, 99)
        plain.communicate(timeout=120)
        plain_decisions = [r["decision"] for r in _log_lines(tmp / "d.jsonl") or []]
        for _ in range(args.rounds):
            torn_logs(rng, model, tmp, rows["torn decision log"])
            for k in kinds:
                hostile(rng, hargs, tmp, rows[f"transcript: {k}"], k)
            bursts(rng, hargs, tmp, rows["burst: command hooks"], None)
            bursts(rng, hargs, tmp, rows["burst: server http hooks"], server)
            for _ in range(4):
                tampered(rng, model_dir, tmp, rows["tampered model folder"])
            wrapper_signals(rng, model_dir, server[2], tmp, rows["exec wrapper: signal"])
            wrapper_long_lines(rng, model_dir, server[2], tmp, rows["exec wrapper: huge lines"],
                               plain_decisions)
        from ripplecp_policy.hook_client import request

        request(server[2], "POST", "/v1/shutdown", timeout=10)
    print(f"advisor reliability, seed {seed}, {args.rounds} rounds, "
          f"{time.perf_counter() - t0:.0f} s; load: {os.getloadavg()[0]:.1f}")
    print(f"{'case':34} {'tried':>6} {'right':>6} {'wrong':>6}")
    for r in rows.values():
        print(f"{r.case:34} {r.tried:6d} {r.right:6d} {r.wrong:6d}")
        for why in r.why[:3]:
            print(f"    wrong: {why}")
    wrong = sum(r.wrong for r in rows.values())
    print(f"total: {sum(r.tried for r in rows.values())} tried, {wrong} wrong")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
