"""``python -m features FILE... --out features.parquet``: agent logs -> online features.

Reads each file (agent logs of any supported format, gzip- or zstandard-compressed or not,
and OpenHands V1 conversation directories, through ``features.readers.read_trajectory``;
trajectory tables written by ``features.write_parquet`` directly), builds the provenance
graph and the prefix-causal features at every candidate boundary (no checkpoints: the
placement is the policy's business), prints a summary per file and writes all rows to one
Parquet file atomically (a temp file beside it, fsync'd and renamed; removed on an error,
Ctrl-C or SIGTERM).

Exit status: 0 done; 1 a bad file (nothing written; with ``--keep-going`` bad files are
skipped, listed at the end, and the others' rows written); 2 a bad argument; 3 a log that
held no events (warned; the others' rows written).
"""

from __future__ import annotations

import signal
import stat
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from features.files import write_atomic
from features.graph import EdgeFamily
from features.readers import ReadLimits, TrajectoryFormatError, format_names, read_trajectory
from features.readers.files import os_reason
from features.schema import Trajectory, read_parquet
from ripplecp_cli import opt, run

if TYPE_CHECKING:  # pandas, pyarrow, tqdm and the extractor load when a file is read: --help stays fast
    import pandas as pd

TRAJECTORY_PARQUET = "trajectory-parquet"
EXIT_BAD_FILE, EXIT_EMPTY = 1, 3


def _not_a_directory(p: Path) -> Path:
    if p.is_dir():
        raise ValueError(f"{str(p)!r} is a directory; give the path of the Parquet file to "
                         "write, e.g. DIR/features.parquet")
    return p


@dataclass(frozen=True)
class Args:
    """Agent logs -> the online, prefix-causal features at every candidate boundary.

    Exit status: 0 done; 1 a bad file (nothing written, unless --keep-going skips it);
    2 a bad argument; 3 a log that held no events (the others' rows are written).
    """

    files: list[Path] = opt(positional=True, metavar="FILE")
    """agent logs (.gz/.zst too; an OpenHands V1 conversation directory) or trajectory
    Parquet tables"""
    out: Path = opt(check=_not_a_directory)
    """output Parquet file (written atomically; not a directory)"""
    granularity: Literal["turn", "tool_call"] = "turn"
    """candidate boundaries: turn ends (the pilot's) or every tool call"""
    format: str | None = opt(None, choices=(TRAJECTORY_PARQUET, *format_names()))
    """input format, or an alias of one (default: detected from the content)"""
    keep_going: bool = False
    """skip bad files, list them at the end, exit 1"""
    without_families: tuple[str, ...] = opt((), choices=[f.value for f in EdgeFamily])
    """edge families to drop (ablation)"""
    max_mb: int = opt(ReadLimits().max_bytes >> 20, min=1)
    """largest log read, in MiB after decompression (a larger one is refused)"""
    max_memory_mb: int | None = opt(None, min=1)
    """most memory one read may take, in MiB (default: 16 x --max-mb, and never more than the
    process's memory limits leave; a log that needs more is refused)"""
    progress: bool = True
    """a progress bar while stderr is a terminal (else one line per file on stdout)"""


def _is_trajectory_parquet(path: Path) -> bool:
    if path.suffix != ".parquet" or not path.is_file():
        return False
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        meta = pq.read_schema(path).metadata or {}
    except (OSError, pa.ArrowInvalid):
        return False
    return meta.get(b"ripplecp.schema") == b"trajectory"


def load(path: Path, fmt: str | None, limits: ReadLimits | None = None) -> list[Trajectory]:
    """Trajectories in ``path``: a ripplecp trajectory table, or one agent log."""
    if fmt == TRAJECTORY_PARQUET or (fmt is None and _is_trajectory_parquet(path)):
        try:
            mode = path.stat().st_mode
        except OSError as exc:
            raise TrajectoryFormatError(f"{path}: cannot read file: {os_reason(exc)}") from exc
        if not stat.S_ISREG(mode):
            raise TrajectoryFormatError(f"{path}: not a regular file; refused unread")
        return read_parquet(path)
    return [read_trajectory(path, fmt, limits=limits)]


@contextmanager
def terminating_on_sigterm() -> Iterator[None]:
    """SIGTERM raises SystemExit(143) in the block (as Ctrl-C raises KeyboardInterrupt), so
    cleanup runs: an interrupted atomic write leaves no temp file."""
    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def extract(args: Args) -> int:
    """The command: read, extract, report, write (see the module docstring)."""
    import pandas as pd
    from tqdm import tqdm

    from features.online import FeatureConfig, OnlineFeatureExtractor, boundary_features, config_for

    limits = ReadLimits(max_bytes=args.max_mb << 20,
                        max_memory=None if args.max_memory_mb is None else args.max_memory_mb << 20)
    config = FeatureConfig().without(*args.without_families)
    frames: list[pd.DataFrame] = []
    failed: list[tuple[Path, str]] = []
    empty: list[Path] = []
    bar = tqdm(args.files, desc="files", unit="file", file=sys.stderr,
               disable=not (args.progress and sys.stderr.isatty()))
    for path in bar:
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                trajs = load(path, args.format, limits)
                for traj in trajs:
                    if not traj.events:
                        empty.append(path)
                        continue
                    ex = OnlineFeatureExtractor(config_for(traj, config))
                    df = boundary_features(traj, args.granularity, (), extractor=ex)
                    df.insert(2, "source_file", str(path))
                    df.insert(3, "source_format", traj.source_format)
                    frames.append(df)
                    edges = " ".join(f"{k}={v}" for k, v in ex.graph.edge_counts.items())
                    tqdm.write(
                        f"{path}: task={traj.task_id} format={traj.source_format} "
                        f"events={len(traj.events)} boundaries={len(df)} edges: {edges}",
                        file=sys.stdout,
                    )
            for w in caught:
                tqdm.write(f"{path}: warning: {w.message}", file=sys.stderr)
        except Exception as exc:  # noqa: BLE001 - any bad input is reported with its file
            text = str(exc) or type(exc).__name__  # never an empty reason
            msg = " ".join((text if str(path) in text else f"{path}: {text}").split())
            if not args.keep_going:
                bar.close()
                print(f"python -m features: error: {msg}; nothing written (--keep-going "
                      "skips bad files)", file=sys.stderr)
                return EXIT_BAD_FILE
            failed.append((path, msg))
            tqdm.write(f"skipped: {msg}", file=sys.stderr)
    bar.close()
    if frames:
        out = pd.concat(frames, ignore_index=True)
        write_atomic(args.out, lambda f: out.to_parquet(f, index=False))
        print(f"wrote {len(out)} rows from {len(args.files) - len(failed) - len(empty)} "
              f"file(s) to {args.out}")
    else:
        print("no rows: nothing written", file=sys.stderr)
    if failed:
        print(f"{len(failed)} bad file(s) skipped:", file=sys.stderr)
        for _path, msg in failed:
            print(f"  {msg}", file=sys.stderr)
        return EXIT_BAD_FILE
    if empty:
        print(f"{len(empty)} log(s) held no events: {', '.join(map(str, empty))}",
              file=sys.stderr)
        return EXIT_EMPTY
    return 0 if frames else EXIT_BAD_FILE


def main(argv: list[str] | None = None) -> int:
    with terminating_on_sigterm():
        return run(extract, Args, argv, prog="python -m features")


if __name__ == "__main__":
    sys.exit(main())
