"""List the studies in an MLflow store and compare runs, without opening the MLflow UI.

    python -m experiments.compare                      # the studies (parent runs), newest first
    python -m experiments.compare RUN_A RUN_B          # what changed from A to B
    python -m experiments.compare RUN_A RUN_B --metric vs_first_boundary   # and per child run
    python -m experiments.compare RUN_A RUN_B --all    # every metric, changed or not

A study is a parent run tagged ``ripplecp.kind=study`` (every study logs one per invocation
through ripplecp_policy.tracking.study_run; experiments.matched_budget gives it a child run
per (family, policy, budget), its folds as metric history). Run ids may be abbreviated to a
unique prefix. Comparing two runs prints the differences that matter: the tags that differ,
the metrics that changed (a study's handful of headline metrics; a child run's metrics),
and for two studies the verdicts of their child runs that changed, and with ``--metric``
that metric for every (family, policy, budget) whose value changed. Metrics equal in both,
or in neither, are counted, not printed (``--all`` prints them).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ripplecp_cli import CommandLineError, opt, run

if TYPE_CHECKING:  # type names only: these load where they are used, so --help stays fast
    import pandas as pd

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
    metric: str | None = opt(None, metavar="NAME")
    """for two studies: also this metric of every child run (family, policy, budget) whose
    value changed (e.g. vs_first_boundary, total_failure_cost)"""
    all: bool = False
    """print every metric, the unchanged ones too"""
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
    import pandas as pd

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
    import pandas as pd

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


def changed(table: pd.DataFrame, tolerance: float = 1e-9) -> pd.DataFrame:
    """The rows of :func:`compare_runs` whose value changed: present in one run only, or
    differing by more than ``tolerance`` (relative to the larger magnitude)."""
    import pandas as pd

    a, b = table["a"].astype(float), table["b"].astype(float)
    one = a.isna() != b.isna()
    scale = pd.concat([a.abs(), b.abs()], axis=1).max(axis=1).clip(lower=1.0)
    return table[one | ((b - a).abs() > tolerance * scale)]


def children(client: Any, run: Any) -> dict[tuple[str, str, str], Any]:
    """A study's child runs by (family, policy, budget) (those that carry the three tags)."""
    out = {}
    for r in client.search_runs([run.info.experiment_id],
                                filter_string=f"tags.`mlflow.parentRunId` = '{run.info.run_id}'",
                                max_results=50_000):
        t = r.data.tags
        if {"ripplecp.family", "ripplecp.policy", "ripplecp.budget"} <= set(t):
            out[(t["ripplecp.family"], t["ripplecp.policy"], t["ripplecp.budget"])] = r
    return out


def verdict_changes(kids_a: dict[tuple[str, str, str], Any], kids_b: dict[tuple[str, str, str], Any]) -> pd.DataFrame:
    """Per (family, policy, budget) and bar, the verdicts (child tags ``ripplecp.verdict.*``)
    that differ between two studies, or that one of them lacks."""
    import pandas as pd

    rows = []
    for key in sorted(set(kids_a) | set(kids_b)):
        ta = kids_a[key].data.tags if key in kids_a else {}
        tb = kids_b[key].data.tags if key in kids_b else {}
        for tag in sorted(k for k in set(ta) | set(tb) if k.startswith("ripplecp.verdict.")):
            if ta.get(tag) != tb.get(tag):
                rows.append(dict(family=key[0], policy=key[1], budget=key[2],
                                 bar=tag.rpartition(".")[2], a=ta.get(tag, "-"), b=tb.get(tag, "-")))
    return pd.DataFrame(rows, columns=["family", "policy", "budget", "bar", "a", "b"])


def child_metric_changes(kids_a: dict[tuple[str, str, str], Any], kids_b: dict[tuple[str, str, str], Any],
                         metric: str) -> pd.DataFrame:
    """``metric`` of every (family, policy, budget) child run whose value changed, B - A."""
    import pandas as pd

    rows = []
    for key in sorted(set(kids_a) | set(kids_b)):
        x = kids_a[key].data.metrics.get(metric, math.nan) if key in kids_a else math.nan
        y = kids_b[key].data.metrics.get(metric, math.nan) if key in kids_b else math.nan
        rows.append(dict(family=key[0], policy=key[1], budget=key[2], a=x, b=y, diff=y - x))
    return changed(pd.DataFrame(rows, columns=["family", "policy", "budget", "a", "b", "diff"]))


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments.compare``: check the arguments and the store, then list or compare."""
    return run(command, Args, argv, prog=PROG)


def command(args: Args) -> int:
    """List the studies (no run ids) or print what changed between two runs."""
    import pandas as pd

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
    shown = table if args.all else changed(table)
    fmt = {"float_format": lambda x: f"{x:.4g}"}
    same = len(table) - len(shown)
    what = f" matching {args.filter!r}" if args.filter else ""
    if shown.empty:
        print(f"metrics{what}: none changed ({same} the same in both)" if len(table)
              else f"no metrics to compare{what}")
    else:
        print(f"\nmetrics{what}" + (f" that changed ({same} the same in both, --all shows them)" if same else "")
              + ", B - A:")
        print(shown.to_string(index=False, **fmt))
    if ta.get("ripplecp.kind") == "study" and tb.get("ripplecp.kind") == "study":
        client = _client(args.mlruns)
        kids_a = children(client, client.get_run(table.attrs["a"]))
        kids_b = children(client, client.get_run(table.attrs["b"]))
        vc = verdict_changes(kids_a, kids_b)
        print(f"\nverdicts that changed ({len(vc)}):" if len(vc) else "\nverdicts: none changed")
        if len(vc):
            print(vc.to_string(index=False))
        only = (len(set(kids_a) - set(kids_b)), len(set(kids_b) - set(kids_a)))
        if any(only):
            print(f"child runs only in A: {only[0]}, only in B: {only[1]}")
        if args.metric:
            cm = child_metric_changes(kids_a, kids_b, args.metric)
            print(f"\n{args.metric} per child run, where it changed ({len(cm)} of "
                  f"{len(set(kids_a) | set(kids_b))}), B - A:")
            if len(cm):
                print(cm.to_string(index=False, **fmt))
    return 0


if __name__ == "__main__":
    sys.exit(main())
