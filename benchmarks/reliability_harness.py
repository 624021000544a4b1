"""Reliability of the harness's command line under hostile input (issue 32 items 3 and 10).

Every case runs the real ``python -m oracle`` (or an experiment) in a subprocess, with cases
drawn afresh from ``--seed`` (default: a fresh seed, printed first):

* plans edited after they were frozen and resealed with a recomputed plain sha256: a task's
  verifier replaced by a command that would leave a marker, a cell's seed, order or
  boundaries changed, a field's type changed. Right: exit 2 in one line, and the marker
  never appears (nothing ran);
* ``plan.json`` that is a FIFO, a directory or JSON nested 10^4-10^6 deep, and an audit log
  that is a FIFO: right when the command ends within 30 s with exit 2 and one line;
* ``--task-opt`` values that are broken JSON or options the task maker does not take:
  right on exit 2 naming ``--task-opt``;
* ``--out`` below a regular file or on a filesystem nothing can be created in, for
  ``oracle plan`` and ``experiments.pilot_analysis``: right on exit 2 naming ``--out``
  within a few seconds (before any computation);
* Ctrl-C (SIGINT to the process group) at a random instant of ``oracle run --jobs 2``:
  right on exit 130 within 6 s with nothing of its process group left.

It prints one line per case, then tried / right / wrong; exit status 0 when nothing is wrong.

Run::

    python benchmarks/reliability_harness.py
    python benchmarks/reliability_harness.py --edits 3 --files 3 --options 2 --outs 2 --interrupts 1
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the code next to this script

from ripplecp_cli import opt, run  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
ENV.pop("RIPPLECP_SIGNING_KEY", None)
ENV.pop("RIPPLECP_SIGNING_KEY_FILE", None)


def _sigint_default() -> None:
    """In the child before exec: SIGINT at its default, as a terminal's foreground job has it
    (this benchmark run in the background inherits it ignored, and the Ctrl-C cases would
    then test nothing)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@dataclass(frozen=True)
class Args:
    """Feed the harness's commands hostile plans, files, options and interrupts."""

    edits: int = opt(8, min=0)
    """plans edited and resealed"""
    files: int = opt(6, min=0)
    """FIFOs, directories and nested JSON in place of plan.json / audit.jsonl"""
    options: int = opt(6, min=0)
    """bad --task-opt values"""
    outs: int = opt(4, min=0)
    """bad --out paths"""
    interrupts: int = opt(2, min=0)
    """Ctrl-C at a random instant of oracle run"""
    seed: int | None = opt(None, min=0)
    """seed of every generated case (default: a fresh one, printed)"""


def _run(args: list[str], timeout: float = 60, **kw) -> tuple[int | None, str, float]:
    t = time.monotonic()
    try:
        res = subprocess.run([sys.executable, *args], capture_output=True, text=True,
                             timeout=timeout, env=ENV, **kw)
    except subprocess.TimeoutExpired:
        return None, "HUNG", time.monotonic() - t
    return res.returncode, res.stderr, time.monotonic() - t


def _one_line_2(rc: int | None, err: str, needle: str = "") -> bool:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    return rc == 2 and len(lines) == 1 and needle in lines[0] and "Traceback" not in err


def _rehash(doc: dict) -> dict:
    content = {k: v for k, v in doc.items() if k not in ("hash", "hmac")}
    doc["hash"] = hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":"),
                                            allow_nan=False).encode()).hexdigest()
    return doc


def _make_plan(work: Path, seed: int) -> Path:
    plan = work / "base" / "p.json"
    plan.parent.mkdir(parents=True)
    rc, err, _ = _run(["-m", "oracle", "plan", "--agent", "scripted", "--tasks", "2", "--design",
                       "pilot", "--seed", str(seed % 1000), "--out", str(plan), "--task-opt",
                       "time_scale=1.0", "--task-opt", "n_steps=3", "--task-opt", "n_files=2",
                       "--no-progress"], timeout=600)
    if rc != 0:
        raise RuntimeError(f"could not make the base plan: {err[-500:]}")
    return plan


def _copy_plan(plan: Path, where: Path) -> Path:
    where.mkdir(parents=True)
    shutil.copy(plan, where / "p.json")
    shutil.copytree(plan.with_name("p.study"), where / "p.study")
    return where / "p.json"


def study(args: Args) -> int:
    if args.seed is None:
        args = dataclasses.replace(args, seed=random.SystemRandom().randrange(1 << 31))
    print(f"seed {args.seed}", flush=True)
    rng = random.Random(args.seed)
    rows: list[tuple[str, bool, str]] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="reliability_harness_") as tmp:
        work = Path(tmp)
        base = _make_plan(work, args.seed) if args.edits or args.interrupts else None
        for i in range(args.edits):
            assert base is not None
            plan = _copy_plan(base, work / f"edit{i}")
            doc = json.loads(plan.read_text())
            marker = work / f"MARKER{i}"
            kind = rng.choice(["verifier", "seed", "order", "boundaries", "type", "params"])
            task = rng.randrange(len(doc["tasks"]))
            cell = doc["cells"][rng.randrange(len(doc["cells"]))]
            if kind == "verifier":
                doc["tasks"][task]["verifier"] = [sys.executable, "-c",
                                                  f"open({str(marker)!r}, 'w').write('ran')"]
            elif kind == "seed":
                cell["seeds"][rng.randrange(len(cell["seeds"]))] = rng.randrange(1 << 62)
            elif kind == "order":
                k = rng.randrange(len(cell["cp_first"]))
                cell["cp_first"][k] = not cell["cp_first"][k]
            elif kind == "boundaries":
                cell["failure"] = cell["failure"] + rng.randint(1, 5)
            elif kind == "type":
                doc[rng.choice(["repetitions", "study_seed"])] = str(rng.randint(1, 9))
            else:
                doc["tasks"][task]["params"]["injected"] = rng.random()
            plan.write_text(json.dumps(_rehash(doc)))
            rc, err, took = _run(["-m", "oracle", "run", str(plan), "--executor", "inline",
                                  "--no-progress"], timeout=300)
            ok = _one_line_2(rc, err) and not marker.exists() and not (
                plan.with_name("p.study") / "branches").exists()
            rows.append((f"plan edited + resealed: {kind}", ok,
                         f"exit {rc} in {took:.1f} s; marker {'RAN' if marker.exists() else 'absent'}"
                         f": {err.strip()[-90:]}"))
        for i in range(args.files):
            d = work / f"file{i}"
            d.mkdir()
            kind = rng.choice(["plan fifo", "plan directory", "plan nested", "audit fifo"])
            if kind == "plan fifo":
                os.mkfifo(d / "p.json")
                cmd = ["-m", "oracle", "run", str(d / "p.json")]
            elif kind == "plan directory":
                (d / "p.json").mkdir()
                cmd = ["-m", "oracle", "run", str(d / "p.json")]
            elif kind == "plan nested":
                depth = rng.choice([10_000, 100_000, 1_000_000])
                (d / "p.json").write_text("[" * depth + "]" * depth)
                cmd = ["-m", "oracle", "run", str(d / "p.json")]
            else:
                (d / "s.study").mkdir()
                os.mkfifo(d / "s.study" / "audit.jsonl")
                cmd = ["-m", "oracle", "audit", str(d / "s.study")]
            rc, err, took = _run(cmd, timeout=30)
            named = "audit.jsonl" if kind == "audit fifo" else "p.json"
            rows.append((kind, _one_line_2(rc, err, named), f"exit {rc} in {took:.1f} s: "
                         f"{err.strip()[-90:]}"))
        for i in range(args.options):
            kind = rng.choice(["broken json", "unknown option", "wrong type"])
            if kind == "broken json":
                value = f"n_files={rng.choice(['{', '[', '{bad', '[1,', chr(34) + 'x'])}"
            elif kind == "unknown option":
                value = f"{rng.choice(['bogus', 'nfiles', 'n-files', 'x'])}={rng.randint(0, 9)}"
            else:
                value = f"n_files={rng.choice(['abc', '[1]', '{}', chr(34) + 'x' + chr(34)])}"
            out = work / f"opt{i}" / "p.json"
            rc, err, took = _run(["-m", "oracle", "plan", "--agent", "scripted", "--tasks", "1",
                                  "--seed", "1", "--out", str(out), "--task-opt", value],
                                 timeout=120)
            rows.append((f"--task-opt {value}", _one_line_2(rc, err, "--task-opt"),
                         f"exit {rc} in {took:.1f} s: {err.strip()[-90:]}"))
        (work / "a_file").write_text("x")
        for i in range(args.outs):
            bad = rng.choice([work / "a_file" / "out", work / "a_file" / f"d{i}" / "x",
                              Path("/proc/self/ripplecp-out")])
            tool = rng.choice(["oracle plan", "pilot_analysis"])
            if tool == "oracle plan":
                cmd = ["-m", "oracle", "plan", "--agent", "scripted", "--tasks", "1", "--seed",
                       "1", "--out", str(bad / "p.json")]
            else:
                cmd = ["-m", "experiments.pilot_analysis", "--pilot", "--no-mlflow", "--out",
                       str(bad)]
            rc, err, took = _run(cmd, timeout=120)
            rows.append((f"{tool} --out {bad}", _one_line_2(rc, err, "--out") and took < 30,
                         f"exit {rc} in {took:.1f} s: {err.strip()[-90:]}"))
        for i in range(args.interrupts):
            assert base is not None
            plan = _copy_plan(base, work / f"int{i}")
            proc = subprocess.Popen([sys.executable, "-m", "oracle", "run", str(plan), "--jobs",
                                     "2", "--no-progress"], start_new_session=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env=ENV, preexec_fn=_sigint_default)
            branches = plan.with_name("p.study") / "branches"
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not (branches.exists()
                                                       and any(branches.iterdir())):
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 3.0))
            os.killpg(proc.pid, signal.SIGINT)
            t = time.monotonic()
            try:
                proc.communicate(timeout=60)
                took = time.monotonic() - t
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                took = float("inf")
            left = ""
            for _ in range(50):
                left = subprocess.run(["ps", "-o", "pid=,args=", "-g", str(proc.pid)],
                                      capture_output=True, text=True).stdout.strip()
                if not left:
                    break
                time.sleep(0.1)
            ok = proc.returncode == 130 and took < 6 and not left
            rows.append(("Ctrl-C during oracle run --jobs 2", ok,
                         f"exit {proc.returncode} {took:.1f} s after SIGINT; "
                         f"{len(left.splitlines())} processes left"))
    wrong = sum(not ok for _, ok, _ in rows)
    for case, ok, note in rows:
        print(f"{'right' if ok else 'WRONG':5}  {case[:60]:60} {note}")
    print(f"\n{len(rows)} tried (seed {args.seed}) in {time.perf_counter() - t0:.0f} s; "
          f"right: {len(rows) - wrong}; wrong: {wrong}")
    return 0 if wrong == 0 else 1


def main(argv: list[str] | None = None) -> int:
    return run(study, Args, argv, prog="python benchmarks/reliability_harness.py")


if __name__ == "__main__":
    raise SystemExit(main())
