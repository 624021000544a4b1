"""Reliability of the advisor under attack (issue 32, items 1 and 7): cases made afresh each run.

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
import shutil
import socket
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


def start_server(model_dir: Path, tmp: Path) -> tuple[int, str, Path]:
    from ripplecp_policy.advisor_server import serve
    from ripplecp_policy.advisor_state import ServerConfig, token_of

    state = tmp / "state"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conf = ServerConfig(model=str(model_dir), port=port, idle_s=3600, store=str(tmp / "srv-store"))
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
                                         "tampered model folder"]}
    with tempfile.TemporaryDirectory(prefix="reliability-advisor-") as t:
        tmp = Path(t)
        model_dir = make_model(tmp)
        model = load_model(model_dir)
        hargs = Args(model=str(model_dir), hook="claude-code")
        server = start_server(model_dir, tmp)
        for _ in range(args.rounds):
            torn_logs(rng, model, tmp, rows["torn decision log"])
            for k in kinds:
                hostile(rng, hargs, tmp, rows[f"transcript: {k}"], k)
            bursts(rng, hargs, tmp, rows["burst: command hooks"], None)
            bursts(rng, hargs, tmp, rows["burst: server http hooks"], server)
            for _ in range(4):
                tampered(rng, model_dir, tmp, rows["tampered model folder"])
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
