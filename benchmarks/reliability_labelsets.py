"""Reliability of label-set reading under attack: every corruption, run through every reader.

A label set the project writes (the simulator's pilot design, and its full design as the
harness writes it: table branches, no pairs; or ``--labels PATH``, any saved set) is copied
and corrupted in each way of issue 16 and more: the hash removed, blank, null or forged; the
version unknown, missing, a number, downgraded; trajectories, labels, recovery, tasks and
checkpoints edited under the kept hash; manifest fields edited, added, or the manifest not a
JSON object, not JSON, not text; tables garbage, empty, truncated, missing, swapped, with a
column dropped or added; rows no study produces sealed with a recomputed hash. Controls that
must load: the pristine set and a version-1 set with its own (version-1) hash.

Each copy is read by every reader: the loader itself (``labelsets.tables.LabelSet.load``) and
each command that takes ``--labels`` (``experiments.matched_budget``, ``pilot_analysis``,
``train_policies``), run for real in a subprocess (the two that price placements only on
sets with full recovery tables: on any other they stop by design). An outcome is

* ``refused``: the loader raised ``LabelSetError`` naming a file of the set; a command
  exited 2 with one line on stderr naming it, and wrote no result;
* ``refused-badly``: refused, but with a traceback, another error, or no file named;
* ``read``: the reader went on and produced results (right for a control, *wrong* for a
  corruption: the corruption was read as data);
* ``read-with-warning``: loaded with the version-1 warning (its hash does not seal the
  trajectories: a known limit of version 1, reported, not hidden).

It prints one line per case and reader, then tried / refused in one line / wrong; exit
status 0 when nothing is wrong.

Run::

    python benchmarks/reliability_labelsets.py                  # loader + every command
    python benchmarks/reliability_labelsets.py --no-commands    # the loader only (seconds)
    python benchmarks/reliability_labelsets.py --labels runs/repair/labelset
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the code next to this script

import numpy as np  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from features.schema import read_parquet as read_trajectories  # noqa: E402
from features.schema import write_parquet as write_trajectories  # noqa: E402
from labelsets.tables import (  # noqa: E402
    LabelSet,
    LabelSetError,
    labels_from_recovery,
    read_table,
    write_table,
)
from oracle.simulator import simulate_label_set  # noqa: E402
from ripplecp_cli import opt, run  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

#: the commands that read ``--labels``, with the options that keep each small and offline
COMMANDS = {
    "matched_budget": ["--quick", "--no-mlflow", "--no-learned"],
    "pilot_analysis": ["--no-mlflow", "--n-resamples", "200", "--n-permutations", "200"],
    "train_policies": ["--quick", "--no-export", "--kinds", "ridge", "--n-trials", "1"],
}
#: commands that price placements, so read only sets with full recovery tables
FULL_TABLES_ONLY = ("matched_budget", "train_policies")


@dataclass(frozen=True)
class Args:
    """Corrupt a real label set every way known and run every reader on each copy."""

    labels: str | None = opt(None, metavar="PATH")
    """a saved label set to corrupt (default: simulated pilot and full-design sets)"""
    commands: bool = True
    """run the commands that take --labels too (minutes), not only the loader"""
    jobs: int = opt(2, min=1)
    """commands run at once"""
    workdir: str | None = opt(None, metavar="DIR")
    """where the scratch copies go (default: the system temp folder)"""
    generated: int = opt(24, min=0)
    """cases drawn afresh from --seed: impossible pair labels resealed, plausible edits to
    signed sets resealed without the key (issue 32)"""
    seed: int | None = opt(None, min=0)
    """seed of the generated cases (default: a fresh one, printed)"""
    fixed: bool = True
    """run the fixed list of corruptions too (off: the controls and the generated cases)"""


@dataclass(frozen=True)
class Case:
    """One way to corrupt a set: ``edit(dir)`` applied to a fresh copy; ``expect`` is
    ``refused``, ``read`` (a control) or ``read-with-warning`` (version 1's known limit)."""

    name: str
    edit: Callable[[Path], None]
    expect: str = "refused"
    needs_pairs: bool = False
    key: str | None = None  # the signing key its readers run with (RIPPLECP_SIGNING_KEY)


# ---------------------------------------------------------------------------- edits
def _manifest(d: Path) -> dict:
    return json.loads((d / "label_set.json").read_text())


def _put(d: Path, m: object) -> None:
    (d / "label_set.json").write_text(json.dumps(m, indent=2))


def _field(update: Callable[[dict], object]) -> Callable[[Path], None]:
    def edit(d: Path) -> None:
        m = _manifest(d)
        out = update(m)
        _put(d, m if out is None else out)
    return edit


def _table(name: str, change: Callable) -> Callable[[Path], None]:
    """Edit one table and write it back schema-checked, the hash kept."""
    def edit(d: Path) -> None:
        df = read_table(d / f"{name}.parquet", name)
        write_table(change(df), name, d / f"{name}.parquet")
    return edit


def _bytes(name: str, change: Callable[[bytes], bytes | None]) -> Callable[[Path], None]:
    def edit(d: Path) -> None:
        p = d / name
        out = change(p.read_bytes())
        if out is None:
            p.unlink()
        else:
            p.write_bytes(out)
    return edit


def _trajectories(change: Callable[[list], None]) -> Callable[[Path], None]:
    def edit(d: Path) -> None:
        trajs = read_trajectories(d / "trajectories.parquet")
        change(trajs)
        write_trajectories(trajs, d / "trajectories.parquet")
    return edit


def _slower(trajs: list) -> None:
    for t in trajs:
        for e in t.events:
            if e.duration is not None:
                e.duration *= 3.0


def _as_v1(d: Path) -> None:
    """Rewrite the manifest as version 1 sealed with its own (version-1) hash."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ls = LabelSet.load(d)
    m = _manifest(d)
    m.update(version="1", hash=ls.content_hash("1"))
    _put(d, m)


def _then(*edits: Callable[[Path], None]) -> Callable[[Path], None]:
    def edit(d: Path) -> None:
        for e in edits:
            e(d)
    return edit


def _resealed(name: str, change: Callable) -> Callable[[Path], None]:
    """An adversary who edits a table and recomputes the hash (bypassing the row checks,
    as a hand-written script would): only the loader's row checks stand in the way."""
    def edit(d: Path) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ls = LabelSet.load(d)
        df = change(getattr(ls, name).copy())
        forged = LabelSet.__new__(LabelSet)
        forged.__dict__.update(vars(ls))
        setattr(forged, name, df)
        write_table(df, name, d / f"{name}.parquet")
        m = _manifest(d)
        m.update(n_branches=len(forged.recovery), hash=forged.content_hash())
        _put(d, m)
    return edit


def _drop_column(name: str, column: str) -> Callable[[Path], None]:
    def edit(d: Path) -> None:
        t = pq.read_table(d / f"{name}.parquet")
        pq.write_table(t.drop_columns([column]), d / f"{name}.parquet")
    return edit


def _add_column(name: str) -> Callable[[Path], None]:
    def edit(d: Path) -> None:
        t = pq.read_table(d / f"{name}.parquet")
        pq.write_table(t.append_column("note", [[""] * len(t)]), d / f"{name}.parquet")
    return edit


def _first_row(col: str, f: Callable) -> Callable:
    def change(df):
        df.loc[df.index[0], col] = f(df.loc[df.index[0], col])
        return df
    return change


KEY = "reliability benchmark signing key (32 bytes+)"


def _signed(edit: Callable[[Path], None] | None) -> Callable[[Path], None]:
    """Sign the copy with :data:`KEY` (as its owner would), then apply ``edit`` (as someone
    without the key would, resealing the plain hash)."""
    def run_edit(d: Path) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ls = LabelSet.load(d)
        old = os.environ.get("RIPPLECP_SIGNING_KEY")
        os.environ["RIPPLECP_SIGNING_KEY"] = KEY
        try:
            ls.save(d)
        finally:
            if old is None:
                del os.environ["RIPPLECP_SIGNING_KEY"]
            else:
                os.environ["RIPPLECP_SIGNING_KEY"] = old
        if edit is not None:
            edit(d)
    return run_edit


def _forge(d: Path, tables: dict) -> None:
    """Write ``tables`` (name -> frame) and reseal the plain hash, with no check run: what a
    hand-written script does."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ls = LabelSet.load(d) if os.environ.get("RIPPLECP_SIGNING_KEY") else None
    if ls is None:
        forged = LabelSet.__new__(LabelSet)
        for name in ("tasks", "checkpoints", "recovery", "labels"):
            setattr(forged, name, read_table(d / f"{name}.parquet", name))
        forged.trajectories = {t.task_id: t for t in
                               read_trajectories(d / "trajectories.parquet")}
        forged.provenance = _manifest(d)["provenance"]
    else:  # pragma: no cover - the generated cases run without a key in this process
        forged = ls
    for name, df in tables.items():
        setattr(forged, name, df)
        write_table(df, name, d / f"{name}.parquet")
    m = _manifest(d)
    m.update(n_branches=len(forged.recovery), n_pairs=len(forged.labels),
             hash=forged.content_hash())
    _put(d, m)


def _generated(rng: np.random.Generator, n: int) -> list[Case]:
    """``n`` cases drawn from ``rng``: an impossible pair label resealed (a J_cp below its
    floor, an advantage that is not J_skip - J_cp, a J_skip that is not its branch's cost, a
    negative J_skip, a creation cost that is not the checkpoint's, a non-finite value), or
    a plausible edit (a cost, a seed, a verified flag) resealed in a set signed with a key."""
    out = []
    for i in range(n):
        row = int(rng.integers(0, 1 << 30))
        delta = float(rng.uniform(0.5, 2000.0))
        if i % 2 == 0:
            kind = str(rng.choice(["j-floor", "advantage", "j-skip", "negative", "creation",
                                   "non-finite"]))

            def change(df, kind=kind, row=row, delta=delta):
                r = df.index[row % len(df)]
                if kind == "j-floor":
                    df.loc[r, "j_cp"] = df.loc[r, "creation_s"] - delta
                    df.loc[r, "advantage"] = df.loc[r, "j_skip"] - df.loc[r, "j_cp"]
                elif kind == "advantage":
                    df.loc[r, "advantage"] += delta
                elif kind == "j-skip":
                    df.loc[r, "j_skip"] += delta
                    df.loc[r, "advantage"] += delta
                elif kind == "negative":
                    df.loc[r, "j_skip"] = -delta
                    df.loc[r, "advantage"] = -delta - df.loc[r, "j_cp"]
                elif kind == "creation":
                    df.loc[r, "creation_s"] += delta
                    df.loc[r, "j_cp"] += delta
                    df.loc[r, "advantage"] -= delta
                else:
                    df.loc[r, str(rng.choice(["j_cp", "j_skip", "advantage"]))] = float(
                        rng.choice([np.inf, -np.inf, np.nan]))
                df.loc[r, "quarantined"] = False
                return df

            out.append(Case(f"gen: resealed label, {kind} ({delta:.1f} s)",
                            lambda d, change=change: _forge(
                                d, {"labels": change(read_table(d / "labels.parquet", "labels"))}),
                            needs_pairs=True))
        else:
            kind = str(rng.choice(["cost", "seed", "verified"]))

            def plausible(d: Path, kind=kind, row=row, delta=delta) -> None:
                rec = read_table(d / "recovery.parquet", "recovery")
                r = rec.index[row % len(rec)]
                if kind == "cost":
                    rec.loc[r, "cost_s"] = float(rec.loc[r, "cost_s"]) + delta
                elif kind == "seed":
                    rec.loc[r, "seed"] = int(rec.loc[r, "seed"]) + 1
                else:
                    rec.loc[r, "verified"] = not bool(rec.loc[r, "verified"])
                tables = {"recovery": rec}
                if rec["pair_id"].notna().any():  # the labels follow, consistent
                    tables["labels"] = labels_from_recovery(
                        read_table(d / "tasks.parquet", "tasks"),
                        read_table(d / "checkpoints.parquet", "checkpoints"), rec)
                _forge(d, tables)

            out.append(Case(f"gen: signed set, {kind} edited, resealed without the key",
                            _signed(plausible), key=KEY))
    return out


CASES: list[Case] = [
    Case("pristine (control)", lambda d: None, "read"),
    Case("version 1 with its own hash (control)", _as_v1, "read-with-warning"),
    Case("hash removed", _field(lambda m: m.pop("hash") and None)),
    Case("hash blank", _field(lambda m: m.update(hash=""))),
    Case("hash null", _field(lambda m: m.update(hash=None))),
    Case("hash forged (64 zeros)", _field(lambda m: m.update(hash="0" * 64))),
    Case("hash truncated", _field(lambda m: m.update(hash=m["hash"][:40]))),
    Case("version 999", _field(lambda m: m.update(version="999"))),
    Case("version missing", _field(lambda m: m.pop("version") and None)),
    Case("version as a number", _field(lambda m: m.update(version=2))),
    Case("version 1 with the version-2 hash", _field(lambda m: m.update(version="1"))),
    Case("trajectories: durations x3, hash kept", _trajectories(_slower)),
    Case("trajectories: last event of a task removed", _trajectories(lambda t: t[0].events.pop())),
    Case("trajectories edited under a version-1 hash", _then(_as_v1, _trajectories(_slower)),
         "read-with-warning"),
    Case("labels: advantage x10, hash kept",
         _table("labels", lambda df: df.assign(advantage=df["advantage"] * 10)), needs_pairs=True),
    Case("labels: a row deleted", _table("labels", lambda df: df.iloc[1:]), needs_pairs=True),
    Case("recovery: a cost +1 s", _table("recovery", _first_row("cost_s", lambda v: v + 1.0))),
    Case("recovery: a branch id renamed",
         _table("recovery", _first_row("branch_id", lambda v: "renamed"))),
    Case("tasks: verified flag flipped", _table("tasks", _first_row("verified", lambda v: not v))),
    Case("checkpoints: creation cost halved",
         _table("checkpoints", _first_row("creation_s", lambda v: v / 2))),
    Case("provenance edited", _field(lambda m: m["provenance"].update(seed=12345))),
    Case("n_tasks edited", _field(lambda m: m.update(n_tasks=m["n_tasks"] + 1))),
    Case("unknown manifest field added", _field(lambda m: m.update(reviewed_by="me"))),
    Case("manifest is a list", _field(lambda m: [m])),
    Case("manifest is a string", _field(lambda m: "label set")),
    Case("manifest truncated (invalid JSON)", _bytes("label_set.json", lambda b: b[: len(b) // 2])),
    Case("manifest not UTF-8", _bytes("label_set.json", lambda b: b"\xff\xfe" + b)),
    Case("manifest empty", _bytes("label_set.json", lambda b: b"")),
    Case("manifest missing", _bytes("label_set.json", lambda b: None)),
    Case("recovery.parquet garbage", _bytes("recovery.parquet", lambda b: b"PAR1 not parquet")),
    Case("labels.parquet empty file", _bytes("labels.parquet", lambda b: b"")),
    Case("tasks.parquet truncated", _bytes("tasks.parquet", lambda b: b[: len(b) // 2])),
    Case("trajectories.parquet garbage", _bytes("trajectories.parquet", lambda b: b"garbage")),
    Case("trajectories.parquet missing", _bytes("trajectories.parquet", lambda b: None)),
    Case("checkpoints.parquet missing", _bytes("checkpoints.parquet", lambda b: None)),
    Case("tasks.parquet swapped for labels.parquet",
         lambda d: (d / "tasks.parquet").write_bytes((d / "labels.parquet").read_bytes())),
    Case("recovery: column cost_s dropped", _drop_column("recovery", "cost_s")),
    Case("labels: extra column", _add_column("labels")),
    Case("resealed: restore point after its failure",
         _resealed("recovery", _first_row("restore_point", lambda v: 99))),
    Case("resealed: a cost NaN", _resealed("recovery", _first_row("cost_s", lambda v: np.nan))),
    Case("resealed: a negative cost", _resealed("recovery", _first_row("cost_s", lambda v: -v))),
    Case("resealed: duplicate branch",
         _resealed("recovery", lambda df: df.iloc[np.r_[0, 0:len(df)]].reset_index(drop=True))),
    Case("manifest nested 10^5 deep", _bytes("label_set.json",
                                             lambda b: b"[" * 100_000 + b"]" * 100_000)),
    Case("signed with the key (control)", _signed(None), "read", key=KEY),
    Case("signed, read without a key (control)", _signed(None), "read"),
    Case("signed, its hmac forged", _then(_signed(None), _field(lambda m: m.update(
        hmac="0" * 64))), key=KEY),
    Case("unsigned, read with a key", lambda d: None, key=KEY),
]


# ---------------------------------------------------------------------------- readers
def read_with_loader(d: Path, key: str | None = None) -> tuple[str, str]:
    """The loader itself: refused (LabelSetError naming a file of the set) or read."""
    old = os.environ.pop("RIPPLECP_SIGNING_KEY", None)
    if key is not None:
        os.environ["RIPPLECP_SIGNING_KEY"] = key
    try:
        return _read_with_loader(d)
    finally:
        os.environ.pop("RIPPLECP_SIGNING_KEY", None)
        if old is not None:
            os.environ["RIPPLECP_SIGNING_KEY"] = old


def _read_with_loader(d: Path) -> tuple[str, str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            LabelSet.load(d)
        except LabelSetError as exc:
            ok = str(d) in str(exc) and "\n" not in str(exc)
            return ("refused" if ok else "refused-badly"), str(exc)
        except Exception as exc:  # noqa: BLE001 - anything else is the finding
            return "refused-badly", f"{type(exc).__name__}: {exc}"
    if any("version 1" in str(w.message) for w in caught):
        return "read-with-warning", str(caught[0].message)
    return "read", ""


def read_with_command(module: str, d: Path, scratch: Path, key: str | None = None
                      ) -> tuple[str, str]:
    """The real command in a subprocess: one-line refusal (exit 2), or a run that read it."""
    out = scratch / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT), RIPPLECP_MLRUNS=str(scratch / "mlruns"))
    env.pop("RIPPLECP_SIGNING_KEY", None)
    if key is not None:
        env["RIPPLECP_SIGNING_KEY"] = key
    res = subprocess.run(
        [sys.executable, "-m", f"experiments.{module}", "--labels", str(d), "--out", str(out),
         *COMMANDS[module]], cwd=scratch, env=env, capture_output=True, text=True, timeout=900)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    wrote = out.exists() and any(out.iterdir())
    if res.returncode == 0:
        warned = any("label-set version 1" in ln for ln in lines)
        return ("read-with-warning" if warned else "read"), f"exit 0, {len(lines)} stderr lines"
    one = (res.returncode == 2 and len(lines) == 1 and str(d) in lines[0]
           and "Traceback" not in res.stderr and not wrote)
    last = lines[-1] if lines else ""
    return ("refused" if one else "refused-badly"), f"exit {res.returncode}: {last[:160]}"


# ---------------------------------------------------------------------------- the study
def _sources(args: Args, root: Path) -> dict[str, Path]:
    if args.labels:
        return {Path(args.labels).name: Path(args.labels)}
    pilot = simulate_label_set("swe-pilot", n_repos=3, tasks_per_repo=2, design="pilot", seed=0)
    full = simulate_label_set("dependency-resolution", n_repos=3, tasks_per_repo=2,
                              design="full", seed=0)
    full.labels = full.labels.iloc[:0]  # as the harness writes a full design: no pairs
    return {"simulated pilot": pilot.save(root / "src-pilot"),
            "full design, no pairs": full.save(root / "src-full")}


def _full(src: Path) -> bool:
    """Whether every task's recovery table prices every placement (every J(r, f), r < f)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ls = LabelSet.load(src)
    return all(ls.recovery_table(t).is_full() for t in ls.task_ids)


def study(args: Args) -> int:
    if args.seed is None:
        args = dataclasses.replace(args, seed=random.SystemRandom().randrange(1 << 31))
    print(f"seed {args.seed}", flush=True)
    fixed = CASES if args.fixed else [c for c in CASES if c.expect != "refused"]
    cases = fixed + _generated(np.random.default_rng(args.seed), args.generated)
    t0 = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="reliability-labelsets-", dir=args.workdir))
    try:
        sources = _sources(args, root)
        readers = ["loader", *(COMMANDS if args.commands else [])]
        jobs = []
        for src_name, src in sources.items():
            has_pairs = bool(_manifest(src)["n_pairs"])
            full = _full(src)
            for i, case in enumerate(cases):
                if case.needs_pairs and not has_pairs:
                    continue
                d = root / f"{src.name}-{i:02d}"
                shutil.copytree(src, d)
                case.edit(d)
                jobs += [(src_name, case, reader, d) for reader in readers
                         if full or reader not in FULL_TABLES_ONLY]

        def one(job: tuple) -> tuple:
            src_name, case, reader, d = job
            if reader == "loader":
                got, why = read_with_loader(d, case.key)
            else:
                scratch = root / "runs" / f"{d.name}-{reader}"
                scratch.mkdir(parents=True)
                got, why = read_with_command(reader, d, scratch, case.key)
            return src_name, case, reader, got, why

        # the loader in this thread (warnings are process-global), the commands in a pool
        results = [one(j) for j in jobs if j[2] == "loader"]
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            results += list(pool.map(one, [j for j in jobs if j[2] != "loader"]))
    finally:
        shutil.rmtree(root, ignore_errors=True)

    wrong = refused = tried = 0
    print(f"{'set':<22} {'case':<46} {'reader':<15} {'outcome':<18} detail")
    for src_name, case, reader, got, why in results:
        tried += 1
        refused += got == "refused"
        bad = got != case.expect
        wrong += bad
        mark = "WRONG " if bad else ""
        print(f"{src_name:<22} {case.name:<46} {reader:<15} {mark + got:<18} {why[:110]}")
    corrupt = sum(1 for _, c, *_ in results if c.expect == "refused")
    print(f"\ntried {tried} (case x reader, seed {args.seed}; {corrupt} corruptions, "
          f"{tried - corrupt} controls and known limits); refused in one line {refused} of "
          f"{corrupt}; right {tried - wrong}; wrong {wrong}; {time.perf_counter() - t0:.0f} s")
    return 1 if wrong else 0


def main(argv: list[str] | None = None) -> int:
    return run(study, Args, argv, prog="python benchmarks/reliability_labelsets.py")


if __name__ == "__main__":
    sys.exit(main())
