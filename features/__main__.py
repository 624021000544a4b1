"""``python -m features FILE... --out features.parquet``: agent logs -> online features.

Reads each file (agent logs through ``features.readers.read_trajectory``; trajectory
tables written by ``features.write_parquet`` directly), builds the provenance graph and
the prefix-causal features at every candidate boundary (no checkpoints: the placement is
the policy's business), prints a summary per file and writes all rows to one Parquet file
atomically. A bad file stops the run with its name (exit 1, nothing written); with
``--keep-going`` bad files are skipped, listed at the end, and the exit code is 1.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from features.graph import EdgeFamily
from features.online import FeatureConfig, OnlineFeatureExtractor, boundary_features, config_for
from features.readers import FORMATS, format_names, read_trajectory
from features.schema import Trajectory, read_parquet

TRAJECTORY_PARQUET = "trajectory-parquet"


def _is_trajectory_parquet(path: Path) -> bool:
    if path.suffix != ".parquet":
        return False
    try:
        meta = pq.read_schema(path).metadata or {}
    except (OSError, pa.ArrowInvalid):
        return False
    return meta.get(b"ripplecp.schema") == b"trajectory"


def load(path: Path, fmt: str | None) -> list[Trajectory]:
    """Trajectories in ``path``: a ripplecp trajectory table, or one agent log."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if fmt == TRAJECTORY_PARQUET or (fmt is None and _is_trajectory_parquet(path)):
        return read_parquet(path)
    return [read_trajectory(path, fmt)]


def _write_atomic(df: pd.DataFrame, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    df.to_parquet(tmp, index=False)
    tmp.replace(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m features", description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path, help="agent logs or trajectory Parquet tables")
    ap.add_argument("--out", required=True, type=Path, help="output Parquet file")
    ap.add_argument("--granularity", choices=("turn", "tool_call"), default="turn",
                    help="candidate boundaries: turn ends (pilot) or every tool call")
    ap.add_argument("--format", dest="fmt", default=None, metavar="FORMAT",
                    choices=[TRAJECTORY_PARQUET, *format_names()],
                    help=f"input format (default: detect from the content): {TRAJECTORY_PARQUET}, "
                         f"{', '.join(FORMATS)} (or an alias of one)")
    ap.add_argument("--keep-going", action="store_true",
                    help="skip bad files, list them at the end, exit 1")
    ap.add_argument("--without-family", action="append", default=[],
                    choices=[f.value for f in EdgeFamily], help="drop an edge family (ablation)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)

    config = FeatureConfig().without(*args.without_family)
    frames: list[pd.DataFrame] = []
    failed: list[tuple[Path, str]] = []
    bar = tqdm(args.files, desc="files", unit="file", disable=args.no_progress, file=sys.stderr)
    for path in bar:
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                trajs = load(path, args.fmt)
                for traj in trajs:
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
            msg = str(exc) if str(path) in str(exc) else f"{path}: {exc}"
            if not args.keep_going:
                bar.close()
                print(f"error: {msg}", file=sys.stderr)
                print("nothing written (use --keep-going to skip bad files)", file=sys.stderr)
                return 1
            failed.append((path, msg))
            tqdm.write(f"skipped: {msg}", file=sys.stderr)
    bar.close()
    if frames:
        out = pd.concat(frames, ignore_index=True)
        _write_atomic(out, args.out)
        print(f"wrote {len(out)} rows from {len(args.files) - len(failed)} file(s) to {args.out}")
    else:
        print("no rows: nothing written", file=sys.stderr)
    if failed:
        print(f"{len(failed)} bad file(s) skipped:", file=sys.stderr)
        for _path, msg in failed:
            print(f"  {msg}", file=sys.stderr)
        return 1
    return 0 if frames else 1


if __name__ == "__main__":
    sys.exit(main())
