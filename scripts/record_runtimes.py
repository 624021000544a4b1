"""Record real Codex CLI and Claude Code outputs against the loopback model server.

    python scripts/record_runtimes.py [--out tests/data/recordings] [--runtimes codex claude-code]
    python scripts/record_runtimes.py --measure 5      # time start-up and requests, record nothing

For each runtime (installed at its pin by :mod:`oracle.agents.runtimes` if needed) it records, into
``OUT/<runtime>-<version>/``:

* ``task``: a scripted task of three steps — a shell command that writes a file, an edit,
  two parallel shell calls — and a final message;
* ``killed``: a run killed (SIGKILL, every process with it) while its ``sleep`` tool runs;
* ``resumed``: the killed session resumed by id in a fresh private home;
* ``forked``: the resumed session forked (``codex exec fork`` / ``claude --resume
  --fork-session``) in another fresh home;

each as the runtime's live stdout (``*.exec.jsonl`` for ``codex exec --json``,
``*.stream.jsonl`` for ``claude -p --output-format stream-json --verbose``) and its session
file as it stood after that run (``*.rollout.jsonl`` / ``*.session.jsonl``), plus the model
server's audit log of all four (``model_server.audit.jsonl``). Files are copied byte for
byte. Everything runs under one fixed work folder (``--work``, wiped first), so the absolute
paths the runtimes write are the same on every machine and nothing needs scrubbing. The
model's answers are deterministic (the scripted brain's ids derive from the transcript);
thread/session ids, timestamps and durations are the runtimes' own and differ per run.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a file: import the project next to it
    sys.path.insert(0, str(REPO))

from oracle.agents import runtimes  # noqa: E402
from oracle.agents.model_server import ModelServer, Plan, ScriptedBrain, ServerConfig  # noqa: E402
from ripplecp_cli import opt, run  # noqa: E402

TASK = Plan.from_json([
    {"shell": "printf 'hello\\n' > hello.txt", "text": "Creating the file."},
    {"edit": {"path": "hello.txt", "old": "hello", "new": "hello world"}},
    {"calls": [{"shell": "wc -c hello.txt"}, {"shell": "ls"}]},
    {"finish": "hello.txt now says hello world."},
])
CHAIN = Plan.from_json({"turns": [
    {"steps": [{"shell": "printf 'draft\\n' > notes.txt"},
               {"shell": "touch started && sleep 30"},
               {"finish": "slept"}]},
    {"match": "RESUME", "steps": [
        {"edit": {"path": "notes.txt", "old": "draft", "new": "final"}},
        {"finish": "notes.txt is final."}]},
    {"match": "FORK", "steps": [
        {"calls": [{"shell": "cat notes.txt"}, {"shell": "printf 'fork\\n' > fork.txt"}]},
        {"finish": "forked."}]},
]})
STREAM = {"codex": "exec", "claude-code": "stream"}
SESSION = {"codex": "rollout", "claude-code": "session"}


@dataclass(frozen=True)
class Args:
    """Record Codex CLI / Claude Code streams and session files for the readers' tests."""

    out: Path = REPO / "tests" / "data" / "recordings"
    """folder the recordings go to (one subfolder per runtime and version)"""
    work: Path = Path("/tmp/ripplecp-recordings")
    """fixed work folder (wiped first); its paths appear in what the runtimes write"""
    runtimes: tuple[str, ...] = opt(("codex", "claude-code"),
                                    choices=("codex", "claude-code", "mini-swe-agent"))
    """runtimes to record (mini-swe-agent: --measure only; it has no resume or fork)"""
    measure: int = opt(0, min=0)
    """instead of recording: run the task this many times per runtime and print timings"""


def _session_id(rt: runtimes.Runtime, session: Path) -> str:
    return runtimes.Codex.thread_id(session) if rt.spec.name == "codex" else session.stem


def _run(launch: runtimes.Launch) -> subprocess.CompletedProcess:
    p = subprocess.run(launch.argv, env=dict(launch.env), cwd=launch.cwd, capture_output=True,
                       stdin=subprocess.DEVNULL, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"{launch.argv[0]} exited {p.returncode}: "
                           f"{p.stderr.decode(errors='replace')[-500:]}")
    return p


def _killed(launch: runtimes.Launch, marker: Path) -> bytes:
    proc = launch.start()
    end = time.monotonic() + 120
    while not marker.exists():
        if proc.poll() is not None or time.monotonic() > end:
            proc.kill()
            raise RuntimeError(f"{launch.argv[0]}: the sleep step never started")
        time.sleep(0.02)
    time.sleep(0.5)  # let the runtime write what it writes while a tool runs
    proc.kill()
    out, _ = proc.communicate()
    return out


def record(rt: runtimes.Runtime, out_root: Path, work_root: Path) -> Path:
    """Record the four runs of one runtime; returns its output folder."""
    name = rt.spec.name
    if name not in STREAM:
        raise ValueError(f"{name} is measured (--measure), not recorded: no resume or fork")
    out = out_root / f"{name}-{rt.spec.version}"
    work = work_root / name
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    audit = out / "model_server.audit.jsonl"
    stream, sess = STREAM[name], SESSION[name]

    def keep(tag: str, stdout: bytes, session: Path) -> None:
        (out / f"{tag}.{stream}.jsonl").write_bytes(stdout)
        shutil.copyfile(session, out / f"{tag}.{sess}.jsonl")

    ws = work / "ws"
    ws.mkdir(parents=True)
    with ModelServer(ScriptedBrain(TASK), ServerConfig(audit=audit, run_id="task")) as srv:
        home = work / "home-task"
        p = _run(rt.launch("Create hello.txt saying hello world.", home=home, cwd=ws,
                           base_url=srv.url))
        keep("task", p.stdout, rt.sessions(home)[-1])

    ws = work / "ws-chain"
    ws.mkdir()
    with ModelServer(ScriptedBrain(CHAIN), ServerConfig(audit=audit, run_id="chain")) as srv:
        home = work / "home-killed"
        stdout = _killed(rt.launch("Write notes.txt, then wait.", home=home, cwd=ws,
                                   base_url=srv.url), ws / "started")
        session = rt.sessions(home)[-1]
        keep("killed", stdout, session)
        sid = _session_id(rt, session)

        home = work / "home-resumed"
        rt.seed_home(home, session, ws)
        p = _run(rt.launch("RESUME: the last run was killed; finish the notes.", home=home,
                           cwd=ws, base_url=srv.url, resume=sid))
        session = next(s for s in rt.sessions(home) if _session_id(rt, s) == sid)
        keep("resumed", p.stdout, session)

        home = work / "home-forked"
        rt.seed_home(home, session, ws)
        p = _run(rt.launch("FORK: try it another way.", home=home, cwd=ws, base_url=srv.url,
                           resume=sid, fork=True))
        forked = [s for s in rt.sessions(home) if _session_id(rt, s) != sid]
        keep("forked", p.stdout, forked[-1])
    return out


def summarize(folder: Path) -> None:
    """Print per-file counts (lines, tool calls, model calls, tokens) to check by hand."""
    audit = [json.loads(line)["record"]
             for line in (folder / "model_server.audit.jsonl").read_text().splitlines()]
    model = [r for r in audit if r.get("protocol")]
    print(f"{folder.name}: {len(audit)} exchanges, {len(model)} model calls, "
          f"{sum(r['output_tokens'] for r in model)} output tokens served")
    for f in sorted(folder.glob("*.jsonl")):
        if f.name.startswith("model_server"):
            continue
        lines = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
        text = f.read_text()
        calls = (text.count('"type":"function_call"') + text.count('"type":"custom_tool_call"')
                 + text.count('"type":"tool_use"'))
        print(f"  {f.name}: {len(lines)} lines, {f.stat().st_size} bytes, "
              f"{calls} tool-call mentions")


def measure(rt: runtimes.Runtime, work_root: Path, reps: int) -> None:
    """Median start-up (launch to first model request), per-request gap, and wall time."""
    starts, gaps, serves, walls = [], [], [], []
    for i in range(reps):
        work = work_root / f"measure-{rt.spec.name}-{i}"
        shutil.rmtree(work, ignore_errors=True)
        (work / "ws").mkdir(parents=True)
        with ModelServer(ScriptedBrain(TASK)) as srv:
            launch = rt.launch("Create hello.txt saying hello world.", home=work / "home",
                               cwd=work / "ws", base_url=srv.url)
            t0 = time.time()
            _run(launch)
            walls.append(time.time() - t0)
        model = [r for r in srv.exchanges if r.get("protocol")]
        starts.append(model[0]["received_unix_s"] - t0)
        serves += [r["duration_s"] for r in model]
        gaps += [b["received_unix_s"] - (a["received_unix_s"] + a["duration_s"])
                 for a, b in zip(model, model[1:], strict=False)]
        shutil.rmtree(work, ignore_errors=True)
    med = statistics.median
    print(f"{rt.spec.name} {rt.spec.version} ({reps} runs, {len(model)} model requests each): "
          f"start-up to first request {med(starts):.3f} s [{min(starts):.3f}-{max(starts):.3f}], "
          f"runtime time between requests {med(gaps):.3f} s [{min(gaps):.3f}-{max(gaps):.3f}], "
          f"server time per request {1000 * med(serves):.1f} ms, "
          f"whole run {med(walls):.3f} s [{min(walls):.3f}-{max(walls):.3f}]")


def main_(a: Args) -> int:
    for name in a.runtimes:
        runtimes.install(name)
        rt = runtimes.get_runtime(name)
        if a.measure:
            measure(rt, a.work, a.measure)
        else:
            summarize(record(rt, a.out, a.work))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(main_, Args, argv, prog="python scripts/record_runtimes.py")


if __name__ == "__main__":
    sys.exit(main())
