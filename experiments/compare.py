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

import argparse
import math
import sys
import time
from dataclasses import dataclass
from typing import Any

import pandas as pd


@dataclass
class Args:
    runs: tuple[str, ...] = ()
    """zero run ids: list the studies; two run ids (or unique prefixes): compare them"""
    mlruns: str | None = None
    """MLflow store root (default: $RIPPLECP_MLRUNS or ./mlruns)"""
    filter: str = ""
    """only metrics whose name contains this text"""
    limit: int = 50
    """at most this many studies listed"""


def _client(root: str | None) -> Any:
    from mlflow.tracking import MlflowClient

    from ripplecp_policy.tracking import tracking_uri

    return MlflowClient(tracking_uri=tracking_uri(root))


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
    """A run by full id or unique prefix; SystemExit naming the candidates otherwise."""
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
        raise SystemExit(f"run {run_id!r}: {len(matches)} runs match (found: {found})")
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
    parser = argparse.ArgumentParser(prog="python -m experiments.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", help="zero run ids (list studies) or two (compare them)")
    parser.add_argument("--mlruns", default=None, help="MLflow store root (default: $RIPPLECP_MLRUNS or ./mlruns)")
    parser.add_argument("--filter", default="", help="only metrics whose name contains this text")
    parser.add_argument("--limit", type=int, default=50, help="at most this many studies listed")
    ns = parser.parse_args(argv)
    args = Args(tuple(ns.runs), ns.mlruns, ns.filter, ns.limit)
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
    if len(args.runs) != 2:
        parser.error("give zero run ids (list studies) or exactly two (compare them)")
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
