"""The feature row, declared once: the extractor's raw state and every feature's formula.

:data:`RAW_STATE` declares the numeric state of :class:`features.online.OnlineFeatureExtractor`
(one flat list: ints, floats, NaN for an unknown time). :data:`FEATURES` declares each
feature as (family, quantity, formula) in row order; the formula is a Python expression over
the raw fields, the shared quantities of :data:`DERIVED`, ``w`` (the error-trend window),
``nan`` and four helpers:

``since(x)``   ``x`` minus its value at the last checkpoint (``x`` declared ``at_cp``);
``ratio(a, b)``  ``a / b`` where ``b > 0``, else NaN;
``known(t)``   ``t`` is not NaN;
``min(a, b)``  the smaller.

From this one declaration come :data:`FEATURE_NAMES`, :data:`RAW_FIELDS` (the layout; a
field declared ``at_cp`` gets a ``<name>_at_cp`` twin), :data:`RAW_INDEX` and the two row
builders, generated as Python source at import: :func:`feature_row` (one raw state, plain
Python: the online path, where a NumPy call per feature would cost more than the row) and
:func:`feature_rows` (raw states stacked, NumPy: the batch path). Both evaluate the same
formula with the same IEEE operations (integers are exact in float64 below 2**53; a
conditional becomes ``np.where``), so they agree to the bit; a test pins that. A name
cannot drift from its computation: they are one entry.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "CP_PAIRS", "DERIVED", "EPOCH_COUNTERS", "FAMILIES", "FEATURES", "FEATURE_NAMES",
    "RAW_FIELDS", "RAW_INDEX", "RAW_STATE", "Feature", "Raw", "feature_row", "feature_rows",
    "initial_raw",
]

NAN = float("nan")


@dataclass(frozen=True)
class Raw:
    """One raw state field: its start value, whether "since the checkpoint" needs its value
    at the checkpoint (a ``<name>_at_cp`` twin), whether a checkpoint zeroes it."""

    name: str
    start: float | int = 0
    at_cp: bool = False
    epoch: bool = False  # a per-segment counter, zeroed at a checkpoint


@dataclass(frozen=True)
class Feature:
    """One feature: ``family__quantity`` and its formula over the raw state."""

    family: str
    quantity: str
    formula: str

    @property
    def name(self) -> str:
        return f"{self.family}__{self.quantity}"


RAW_STATE: tuple[Raw, ...] = (
    # events, steps, boundaries, checkpoints
    Raw("n", at_cp=True), Raw("step", at_cp=True), Raw("safe"), Raw("turns"), Raw("n_cp"),
    # times: first event, now, the last checkpoint (the run start before one), last progress
    Raw("t_first", NAN), Raw("t_now", NAN), Raw("cp_t", NAN), Raw("lp_t", NAN), Raw("lp_n"),
    Raw("busy_known"), Raw("busy_total", 0.0), Raw("s_busy", 0.0),
    # tokens: any seen, each part seen, sums
    Raw("tok_known"), Raw("pk_in"), Raw("pk_cached"), Raw("pk_out"),
    Raw("tok_in", at_cp=True), Raw("tok_cached", at_cp=True), Raw("tok_out", at_cp=True),
    # calls
    Raw("tools", at_cp=True), Raw("model", at_cp=True), Raw("retries", at_cp=True),
    Raw("errors", at_cp=True), Raw("expensive", at_cp=True), Raw("testbuild", at_cp=True),
    Raw("uninterp", at_cp=True), Raw("commits", at_cp=True),
    # files (set sizes, brought up to date when read)
    Raw("n_touched"), Raw("n_s_touched"), Raw("n_s_read"), Raw("n_s_deleted"), Raw("n_s_validated"),
    Raw("bytes_known"), Raw("bytes", at_cp=True), Raw("n_live"), Raw("size_sum"), Raw("size_known"),
    # verified progress
    Raw("passed_latest", NAN), Raw("failed_latest", NAN), Raw("newly", epoch=True),
    Raw("test_counts_seen"), Raw("verif", at_cp=True), Raw("verif_pass", at_cp=True),
    Raw("last_verifier", NAN), Raw("n_tests"),
    # ripple counters of the current segment
    Raw("r_live_new", epoch=True), Raw("r_tests_new", epoch=True), Raw("r_nodes", epoch=True),
    Raw("r_desc", epoch=True), Raw("r_edges", epoch=True), Raw("r_edges_past", epoch=True),
    Raw("r_fanout_max", epoch=True), Raw("r_down", epoch=True), Raw("r_down_pass", epoch=True),
    Raw("r_affected", epoch=True), Raw("r_prev", epoch=True), Raw("n_edges"),
    # error window sums: the last w events, the w before them; events in the window
    Raw("err_recent"), Raw("err_prev"), Raw("n_errs"),
)

# quantities several features share (evaluated in this order, before the features)
DERIVED: tuple[tuple[str, str], ...] = (
    ("has_wall", "known(t_now) and known(t_first)"),
    ("wall_cp", "t_now - cp_t if has_wall and known(cp_t) else nan"),
    ("busy", "busy_known > 0"),
    ("busy_cp", "s_busy if busy else nan"),
    ("tok", "tok_known > 0"),
    ("s_in", "since(tok_in)"),
    ("s_cached", "since(tok_cached)"),
    ("s_out", "since(tok_out)"),
    ("has_bytes", "bytes_known > 0"),
    ("frontier", "n_live + n_tests"),
    ("frontier_new", "r_live_new + r_tests_new"),
    ("has_cp", "n_cp > 0"),
    ("rate_recent", "ratio(err_recent, min(n_errs, w))"),
)

FAMILIES: tuple[str, ...] = ("cost", "state", "progress", "ripple", "context")


def _family(family: str, *entries: tuple[str, str]) -> tuple[Feature, ...]:
    return tuple(Feature(family, q, f) for q, f in entries)


FEATURES: tuple[Feature, ...] = (
    *_family(
        "cost",  # execution cost: seconds, tokens, calls, retries, errors; totals and since cp
        ("wall_s_total", "t_now - t_first if has_wall else nan"),
        ("wall_s_since_cp", "wall_cp"),
        ("busy_s_total", "busy_total if busy else nan"),
        ("busy_s_since_cp", "busy_cp"),
        ("tokens_total", "tok_in + tok_out if tok else nan"),
        ("tokens_since_cp", "s_in + s_out if tok else nan"),
        ("input_tokens_since_cp", "s_in if pk_in > 0 else nan"),
        ("cached_tokens_since_cp", "s_cached if pk_cached > 0 else nan"),
        ("output_tokens_since_cp", "s_out if pk_out > 0 else nan"),
        ("tool_calls_total", "tools"),
        ("tool_calls_since_cp", "since(tools)"),
        ("model_calls_since_cp", "since(model)"),
        ("retries_total", "retries"),
        ("retries_since_cp", "since(retries)"),
        ("errors_total", "errors"),
        ("errors_since_cp", "since(errors)"),
        ("expensive_tool_calls_since_cp", "since(expensive) if busy else nan"),
        ("test_build_calls_since_cp", "since(testbuild)"),
        ("uninterpreted_commands_since_cp", "since(uninterp)"),
    ),
    *_family(
        "state",  # physical state: files touched, bytes modified, live artifacts
        ("files_touched_total", "n_touched"),
        ("files_touched_since_cp", "n_s_touched"),
        ("files_read_since_cp", "n_s_read"),
        ("files_deleted_since_cp", "n_s_deleted"),
        ("bytes_modified_total", "bytes if has_bytes else nan"),
        ("bytes_modified_since_cp", "since(bytes) if has_bytes else nan"),
        ("live_files", "n_live"),
        ("artifact_bytes", "size_sum if size_known > 0 else nan"),
    ),
    *_family(
        "progress",  # verified progress: test counts, verifier events, validated files, commits
        ("tests_passed_latest", "passed_latest"),
        ("tests_failed_latest", "failed_latest"),
        ("newly_passing_since_cp", "newly if test_counts_seen > 0 else nan"),
        ("verifier_events_total", "verif"),
        ("verifier_events_since_cp", "since(verif)"),
        ("verifier_passes_since_cp", "since(verif_pass)"),
        ("last_verifier_passed", "last_verifier"),
        ("validated_artifacts_since_cp", "n_s_validated"),
        ("commits_since_cp", "since(commits)"),
    ),
    *_family(
        "ripple",  # provenance graph: the frontier and the segment since the checkpoint
        ("frontier_size", "frontier"),
        ("frontier_new", "frontier_new"),
        ("frontier_new_frac", "ratio(frontier_new, frontier)"),
        ("live_versions_new", "r_live_new"),
        ("latest_tests_new", "r_tests_new"),
        ("segment_nodes", "r_nodes"),
        ("new_descendant_count", "r_desc"),
        ("descendant_frac", "ratio(r_desc, r_nodes)"),
        ("segment_edges", "r_edges"),
        ("edges_from_past", "r_edges_past"),
        ("fanout_mean", "ratio(r_edges - r_edges_past, r_nodes)"),
        ("fanout_max", "r_fanout_max"),
        ("downstream_verified", "r_down"),
        ("downstream_verified_passed", "r_down_pass"),
        ("affected_artifacts", "r_affected"),
        ("from_prev_segment", "r_prev if has_cp else nan"),
        ("edges_total", "n_edges"),
    ),
    *_family(
        "context",  # checkpoint, distance and work since it, progress, error trend, position
        ("has_checkpoint", "1.0 if has_cp else 0.0"),
        ("checkpoints", "n_cp"),
        ("events_since_cp", "since(n)"),
        ("steps_since_cp", "since(step)"),
        ("seconds_since_cp", "wall_cp"),
        ("work_since_cp_s", "busy_cp"),
        ("events_since_progress", "n - lp_n"),
        ("seconds_since_progress", "t_now - (lp_t if known(lp_t) else t_first) if has_wall else nan"),
        ("error_rate_recent", "rate_recent"),
        ("error_trend", "rate_recent - err_prev / (n_errs - w) if n_errs > w else nan"),
        ("step", "step"),
        ("events_seen", "n"),
        ("safe_boundaries_seen", "safe"),
        ("turns_completed", "turns"),
    ),
)

FEATURE_NAMES: list[str] = [f.name for f in FEATURES]
RAW_FIELDS: tuple[str, ...] = tuple(
    name for r in RAW_STATE for name in ((r.name, f"{r.name}_at_cp") if r.at_cp else (r.name,)))
RAW_INDEX: dict[str, int] = {name: i for i, name in enumerate(RAW_FIELDS)}
# (total, its value at the last checkpoint): "since the checkpoint" is their difference
CP_PAIRS: tuple[tuple[int, int], ...] = tuple(
    (RAW_INDEX[r.name], RAW_INDEX[f"{r.name}_at_cp"]) for r in RAW_STATE if r.at_cp)
EPOCH_COUNTERS: tuple[int, ...] = tuple(RAW_INDEX[r.name] for r in RAW_STATE if r.epoch)
_START: tuple[float | int, ...] = tuple(
    v for r in RAW_STATE for v in ((r.start, r.start) if r.at_cp else (r.start,)))


def initial_raw() -> list[float | int]:
    """The raw state before any event."""
    return list(_START)


# ---------------------------------------------------------------------------------------
# Generating the row builders
# ---------------------------------------------------------------------------------------


class _Formula(ast.NodeTransformer):
    """One formula to its scalar or its vector (NumPy) code; names become locals."""

    def __init__(self, vector: bool, derived: set[str], where: str) -> None:
        self.vector, self.derived, self.where = vector, derived, where
        self.used: set[str] = set()

    def _raw(self, name: str) -> ast.Name:
        if name not in RAW_INDEX:
            raise ValueError(f"features.row: {self.where}: unknown raw field {name!r}")
        self.used.add(name)
        return ast.Name(f"v_{name}", ast.Load())

    def _np(self, fn: str, *args: ast.expr) -> ast.Call:
        return ast.Call(ast.Attribute(ast.Name("np", ast.Load()), fn, ast.Load()), list(args), [])

    def visit_Name(self, node: ast.Name) -> ast.expr:
        if node.id in ("w", "nan"):
            return node
        if node.id in self.derived:
            return ast.Name(f"d_{node.id}", ast.Load())
        return self._raw(node.id)

    def visit_Call(self, node: ast.Call) -> ast.expr:
        fn = node.func.id if isinstance(node.func, ast.Name) else None
        n = len(node.args)
        if fn == "since" and n == 1 and isinstance(node.args[0], ast.Name):
            x = node.args[0].id
            return ast.BinOp(self._raw(x), ast.Sub(), self._raw(f"{x}_at_cp"))
        if fn == "ratio" and n == 2:
            a, b = (self.visit(x) for x in node.args)
            test = ast.Compare(b, [ast.Gt()], [ast.Constant(0)])
            return self._ifexp(test, ast.BinOp(a, ast.Div(), b), ast.Name("nan", ast.Load()))
        if fn == "known" and n == 1:
            x = self.visit(node.args[0])
            if self.vector:
                return ast.UnaryOp(ast.Invert(), self._np("isnan", x))
            return ast.Compare(x, [ast.Eq()], [x])  # NaN != NaN
        if fn == "min" and n == 2:
            a, b = (self.visit(x) for x in node.args)
            return self._np("minimum", a, b) if self.vector else ast.Call(node.func, [a, b], [])
        raise ValueError(f"features.row: {self.where}: unknown function in {ast.unparse(node)!r}")

    def _ifexp(self, test: ast.expr, body: ast.expr, orelse: ast.expr) -> ast.expr:
        if self.vector:
            return self._np("where", test, body, orelse)
        return ast.IfExp(test, body, orelse)

    def visit_IfExp(self, node: ast.IfExp) -> ast.expr:
        return self._ifexp(self.visit(node.test), self.visit(node.body), self.visit(node.orelse))

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.expr:
        values = [self.visit(v) for v in node.values]
        if not self.vector:
            return ast.BoolOp(node.op, values)
        op = ast.BitAnd() if isinstance(node.op, ast.And) else ast.BitOr()
        out = values[0]
        for v in values[1:]:
            out = ast.BinOp(out, op, v)
        return out


def _compile(vector: bool) -> Callable[..., Any]:
    derived = {name for name, _ in DERIVED}
    body: list[str] = []
    used: set[str] = set()
    exprs: list[tuple[str, str]] = []
    for name, formula in DERIVED:
        exprs.append((f"d_{name}", formula))
    for f in FEATURES:
        exprs.append((f"f_{f.name}", f.formula))
    code: list[tuple[str, str]] = []
    for target, formula in exprs:
        tr = _Formula(vector, derived, target[2:])
        tree = tr.visit(ast.parse(formula, mode="eval").body)
        used |= tr.used
        code.append((target, ast.unparse(tree)))
    body += [f"    v_{n} = c[{RAW_INDEX[n]}]" for n in sorted(used, key=RAW_INDEX.__getitem__)]
    body += [f"    {t} = {e}" for t, e in code]
    names = [f"f_{f.name}" for f in FEATURES]
    if vector:
        lines = ["def feature_rows(raw, w):", "    c = raw.T",
                 "    with np.errstate(divide='ignore', invalid='ignore'):"]
        lines += ["    " + b for b in body]
        lines.append("        return np.stack((" + ", ".join(names) + ",), axis=1)")
    else:
        lines = ["def feature_row(raw, w):", "    c = raw", *body,
                 "    return [" + ", ".join(f"float({n})" for n in names) + "]"]
    namespace: dict[str, Any] = {"np": np, "nan": NAN}
    exec(compile("\n".join(lines), f"<features.row {'vector' if vector else 'scalar'}>", "exec"),
         namespace)
    return namespace["feature_rows" if vector else "feature_row"]


_feature_row = _compile(vector=False)
_feature_rows = _compile(vector=True)


def feature_row(raw: list[float | int], w: int) -> list[float]:
    """One feature row (:data:`FEATURE_NAMES` order) from one raw state; ``w`` is the
    error-trend window."""
    return _feature_row(raw, w)


def feature_rows(raw: np.ndarray, w: int) -> np.ndarray:
    """Feature rows (``len(raw)`` x ``len(FEATURE_NAMES)``) from raw states stacked as rows."""
    return _feature_rows(raw, w)
