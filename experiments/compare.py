"""List the studies in an MLflow store and compare runs, without opening the MLflow UI.

    python -m experiments.compare                      # the studies (parent runs), newest first
    python -m experiments.compare RUN_A RUN_B          # metrics side by side, B - A
    python -m experiments.compare RUN_A RUN_B --filter long-horizon/optimum

A study is a parent run tagged ``ripplecp.kind=study`` (``experiments.matched_budget``
logs one per invocation, with a child run per (family, policy, budget, fold)). Run ids
may be abbreviated to a unique prefix. Comparing two parent runs compares their summary
metrics (``<family>/<policy>/<budget>/<metric>``); two child runs, their fold metrics.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ripplecp_cli import CommandLineError, opt, run

PROG = "python -m experiments.compare"


def zero_or_two(runs: tuple[str, ...]) -> None:
    """``check=`` of the run ids: none (list the studies) or two (compare them)."""
    if len(runs) not in (0, 2):
        raise ValueError(f"give zero run ids (list studies) or exactly two (compare them), "
                         f"got {len(runs)}")


@dataclass(frozen=True)
class Args:
    """List the studies in an MLflow store and compare runs, without opening the MLflow UI."""

    runs: tuple[str, ...] = opt((), positional=True, check=zero_or_two, metavar="RUN")
    """zero run ids: list the studies; two run ids (or unique prefixes): compare them"""
    mlruns: str | None = opt(None, metavar="DIR")
    """an existing MLflow store root (default: $RIPPLECP_MLRUNS or ./mlruns); never created"""
    filter: str = ""
    """only metrics whose name contains this text"""
    limit: int = opt(50, min=1)
    """at most this many studies listed"""


def existing_store(root: str | Path | None) -> Path:
    """The store root ``root`` (default: :func:`~ripplecp_policy.tracking.mlruns_root`) if it
    holds an MLflow store; FileNotFoundError otherwise (reading never creates one)."""
    from ripplecp_policy.tracking import mlruns_root

    path = Path(root).expanduser().resolve() if root is not None else mlruns_root()
    if not (path / "mlflow.db").is_file():
        raise FileNotFoundError(f"no MLflow store at {path} (no mlflow.db); run a study first "
                                "or give --mlruns")
    return path


def _client(root: str | Path | None) -> Any:
    from mlflow.tracking import MlflowClient

    from ripplecp_policy.tracking import tracking_uri

    return MlflowClient(tracking_uri=tracking_uri(existing_store(root)))


def list_studies(root: str | None = None, limit: int = 50) -> pd.DataFrame:
    """One row per study (parent run): id, start date, status, families, label-set hash."""
    client = _client(root)
    exps = client.search_experiments()
    rows = []
    if exps:
        runs = client.search_runs(
            [e.experiment_id for e in exps], filter_string="tags.`ripplecp.kind` = 'study'",
            order_by=["attributes.start_time DESC"], max_results=limit,
        )
        names = {e.experiment_id: e.name for e in exps}
        for r in runs:
            tags = r.data.tags
            rows.append(dict(
                run_id=r.info.run_id,
                date=time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.info.start_time / 1000)),
                experiment=names.get(r.info.experiment_id, r.info.experiment_id),
                status=r.info.status,
                families=tags.get("ripplecp.families", ""),
                label_set_hash=tags.get("ripplecp.label_set_hash", ""),
                quick=tags.get("ripplecp.quick", ""),
                seconds=r.data.metrics.get("study_seconds", math.nan),
            ))
    return pd.DataFrame(rows, columns=["run_id", "date", "experiment", "status", "families",
                                       "label_set_hash", "quick", "seconds"])


def resolve_run(client: Any, run_id: str) -> Any:
    """A run by full id or unique prefix; LookupError naming the candidates otherwise."""
    from mlflow.exceptions import MlflowException

    try:
        return client.get_run(run_id)
    except MlflowException:
        pass
    matches = []
    for e in client.search_experiments():
        for r in client.search_runs([e.experiment_id], max_results=50_000):
            if r.info.run_id.startswith(run_id):
                matches.append(r)
    if len(matches) != 1:
        found = ", ".join(m.info.run_id for m in matches[:5]) or "none"
        raise LookupError(f"run {run_id!r}: {len(matches)} runs match (found: {found})")
    return matches[0]


def compare_runs(run_a: str, run_b: str, root: str | None = None, contains: str = "") -> pd.DataFrame:
    """Metrics of two runs side by side with B - A (rows: metric name, sorted)."""
    client = _client(root)
    a, b = resolve_run(client, run_a), resolve_run(client, run_b)
    ma, mb = a.data.metrics, b.data.metrics
    keys = sorted(k for k in set(ma) | set(mb) if contains in k)
    rows = []
    for k in keys:
        x, y = ma.get(k, math.nan), mb.get(k, math.nan)
        rows.append(dict(metric=k, a=x, b=y, diff=y - x))
    out = pd.DataFrame(rows, columns=["metric", "a", "b", "diff"])
    out.attrs["a"], out.attrs["b"] = a.info.run_id, b.info.run_id
    out.attrs["tags_a"], out.attrs["tags_b"] = a.data.tags, b.data.tags
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments.compare``: check the arguments and the store, then list or compare."""
    return run(command, Args, argv, prog=PROG)


def command(args: Args) -> int:
    """List the studies (no run ids) or compare two runs, printing a table."""
    try:
        existing_store(args.mlruns)
    except FileNotFoundError as exc:
        raise CommandLineError(f"argument --mlruns: {exc}") from None
    pd.set_option("display.width", 200)
    pd.set_option("display.max_rows", 10_000)
    pd.set_option("display.max_colwidth", 60)
    if not args.runs:
        studies = list_studies(args.mlruns, args.limit)
        if studies.empty:
            print("no studies in this store (run `python -m experiments.matched_budget` first)")
            return 0
        print(studies.to_string(index=False))
        return 0
    table = compare_runs(args.runs[0], args.runs[1], args.mlruns, args.filter)
    ta, tb = table.attrs["tags_a"], table.attrs["tags_b"]
    print(f"A = {table.attrs['a']}  ({ta.get('ripplecp.families') or ta.get('mlflow.runName', '')})")
    print(f"B = {table.attrs['b']}  ({tb.get('ripplecp.families') or tb.get('mlflow.runName', '')})")
    for tag in sorted(k for k in set(ta) | set(tb) if k.startswith("ripplecp.") and ta.get(k) != tb.get(k)):
        print(f"  tag {tag}: A={ta.get(tag, '-')!s:.40}  B={tb.get(tag, '-')!s:.40}")
    if table.empty:
        print("no metrics to compare" + (f" matching {args.filter!r}" if args.filter else ""))
        return 0
    print(table.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
