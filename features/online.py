"""Prefix-causal online features at candidate boundaries (paper, Table 3 / Appendix C).

Five families, prefixed by name so a study can select them (the failure-risk baseline
uses everything except ``ripple__``):

``cost__``      execution cost: elapsed seconds, tokens, tool calls, retries, errors,
                expensive tools; totals and since the last checkpoint.
``state__``     physical state: files touched, bytes modified, live artifact size.
``progress__``  verified progress: test counts, newly passing tests, verifier events,
                validated artifacts, commits.
``ripple__``    provenance graph: how much of the current frontier (live file versions,
                latest test results, actions since the checkpoint) would be lost or was
                derived from work since the last checkpoint; fan-out; downstream verified
                nodes; affected artifacts; dependence on the previous segment.
``context__``   whether a checkpoint exists yet, distance and work since it, time since
                progress, recent error trend, position in the run.

"Since the last checkpoint" means since the start of the run while none exists (the
fallback is the pristine start). The *segment* is the set of graph nodes created since
then (epoch = segment). Ripple definitions:

- ``frontier_size``: live written file versions + latest result of each distinct test
  command; ``frontier_new`` (``_frac``): those created in the segment, i.e. what a failure
  now would lose back to the fallback; ``live_versions_new``/``latest_tests_new`` split it.
- ``new_descendant_count`` (``descendant_frac``): segment nodes with a strict ancestor in
  the segment (work derived from earlier work since the checkpoint).
- ``segment_edges``/``edges_from_past``: edges into segment nodes, and those whose source
  predates the segment (dependence on protected state); ``fanout_mean``/``fanout_max``:
  out-degree of segment nodes within the segment.
- ``downstream_verified`` (``_passed``): test runs in the segment that descend from segment
  work (and passed).
- ``affected_artifacts``: live files whose latest version was written by an event that
  itself descends from segment work.
- ``from_prev_segment``: segment nodes descending from the previous segment (the work the
  last checkpoint protects); NaN before the first checkpoint.

Quantities a log does not record are NaN, never 0: every second-based feature is NaN for
a ``codex exec --json`` log without arrival stamps, token features are NaN until a token
count has been seen (each of input/cached/output tokens until that part has been seen: a
log that never reports cached tokens has NaN, not 0, cached tokens), byte features until a
byte count has been seen.

The extractor is incremental: :meth:`OnlineFeatureExtractor.observe` costs O(direct edges
of the new event); a whole-workspace read or a test/build (an edge from every live file)
is one batch record, O(1) unless the live file set changed since the previous batch (then
one O(live files) pass in C-level loops); a passing test marks the live files it validates
(O(live files)). :meth:`~OnlineFeatureExtractor.features` is O(#features), independent of
the graph size. Descent is read from per-node epoch bitsets maintained by ``features.graph`` (an epoch is
the stretch between two checkpoints; :meth:`~OnlineFeatureExtractor.mark_checkpoint`
starts a new one), never from graph walks. :func:`reference_ripple` recomputes the
descent-based ripple features with ``nx.descendants``: the slow reference used by the
tests and the benchmark. Quantities that use the future live in
:func:`hindsight_descendants`, for analysis only.
"""

from __future__ import annotations

import gc
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
import pandas as pd

from features.graph import DEFAULT_FAMILIES, EdgeFamily, Node, ProvenanceGraph
from features.schema import Event, EventKind, Trajectory

__all__ = [
    "FEATURE_NAMES", "FeatureConfig", "OnlineFeatureExtractor", "boundary_features", "config_for",
    "hindsight_descendants", "reference_ripple",
]

NAN = float("nan")
_TOOL_KINDS = {EventKind.COMMAND, EventKind.FILE_CHANGE, EventKind.TEST, EventKind.OTHER}
_MODEL_CALL = EventKind.MODEL_CALL
_ROOT_KEYS = ("cwd", "workdir", "working_dir", "root", "repo_root")

FEATURE_NAMES: list[str] = [
    # execution cost
    "cost__wall_s_total", "cost__wall_s_since_cp", "cost__busy_s_total", "cost__busy_s_since_cp",
    "cost__tokens_total", "cost__tokens_since_cp", "cost__input_tokens_since_cp",
    "cost__cached_tokens_since_cp", "cost__output_tokens_since_cp",
    "cost__tool_calls_total", "cost__tool_calls_since_cp", "cost__model_calls_since_cp",
    "cost__retries_total", "cost__retries_since_cp", "cost__errors_total", "cost__errors_since_cp",
    "cost__expensive_tool_calls_since_cp", "cost__test_build_calls_since_cp",
    "cost__uninterpreted_commands_since_cp",
    # physical state
    "state__files_touched_total", "state__files_touched_since_cp", "state__files_read_since_cp",
    "state__files_deleted_since_cp", "state__bytes_modified_total", "state__bytes_modified_since_cp",
    "state__live_files", "state__artifact_bytes",
    # verified progress
    "progress__tests_passed_latest", "progress__tests_failed_latest",
    "progress__newly_passing_since_cp", "progress__verifier_events_total",
    "progress__verifier_events_since_cp", "progress__verifier_passes_since_cp",
    "progress__last_verifier_passed", "progress__validated_artifacts_since_cp",
    "progress__commits_since_cp",
    # ripple / graph
    "ripple__frontier_size", "ripple__frontier_new", "ripple__frontier_new_frac",
    "ripple__live_versions_new", "ripple__latest_tests_new", "ripple__segment_nodes",
    "ripple__new_descendant_count", "ripple__descendant_frac", "ripple__segment_edges",
    "ripple__edges_from_past", "ripple__fanout_mean", "ripple__fanout_max",
    "ripple__downstream_verified", "ripple__downstream_verified_passed",
    "ripple__affected_artifacts", "ripple__from_prev_segment",
    "ripple__edges_total",
    # context
    "context__has_checkpoint", "context__checkpoints", "context__events_since_cp",
    "context__steps_since_cp", "context__seconds_since_cp", "context__work_since_cp_s",
    "context__events_since_progress", "context__seconds_since_progress",
    "context__error_rate_recent", "context__error_trend", "context__step",
    "context__events_seen", "context__safe_boundaries_seen", "context__turns_completed",
]

# Positions in FEATURE_NAMES whose value _row() gives as an int (a count) or NaN:
# feature_vector() converts exactly these with float().
_INT_POS: tuple[int, ...] = tuple(
    i for i, n in enumerate(FEATURE_NAMES)
    if n not in {
        "cost__wall_s_total", "cost__wall_s_since_cp", "cost__busy_s_total", "cost__busy_s_since_cp",
        "progress__tests_passed_latest", "progress__tests_failed_latest",
        "progress__newly_passing_since_cp", "progress__last_verifier_passed",
        "ripple__frontier_new_frac", "ripple__descendant_frac", "ripple__fanout_mean",
        "context__has_checkpoint", "context__seconds_since_cp", "context__work_since_cp_s",
        "context__seconds_since_progress", "context__error_rate_recent", "context__error_trend",
    }
)


@dataclass(frozen=True)
class FeatureConfig:
    """Typed settings of the online features.

    edge_families: provenance edge families used (drop ``uninterpreted`` or ``tool_result``
        to ablate them; ``nl_inferred`` has no producer and is off by default).
    expensive_tool_seconds: a tool call whose known elapsed time reaches this is expensive.
    error_trend_window: events per window for the recent error rate and its trend.
    root: absolute workspace prefix stripped from paths (default: from the trajectory's
        ``meta``/event ``extra`` ``cwd``/``workdir`` when present).
    """

    edge_families: frozenset[EdgeFamily] = field(default=DEFAULT_FAMILIES)
    expensive_tool_seconds: float = 30.0
    error_trend_window: int = 10
    root: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "edge_families", frozenset(EdgeFamily(f) for f in self.edge_families))
        if self.error_trend_window < 1:
            raise ValueError(f"error_trend_window must be >= 1, got {self.error_trend_window}")
        if not self.expensive_tool_seconds > 0:
            raise ValueError(f"expensive_tool_seconds must be > 0, got {self.expensive_tool_seconds}")

    def without(self, *families: EdgeFamily | str) -> FeatureConfig:
        """A copy with the given edge families switched off (ablation)."""
        drop = {EdgeFamily(f) for f in families}
        return FeatureConfig(self.edge_families - drop, self.expensive_tool_seconds,
                             self.error_trend_window, self.root)


def _is_error(e: Event) -> bool:
    return bool(e.is_error) or (e.exit_code is not None and e.exit_code != 0)


def _verifier_passed(e: Event) -> bool | None:
    """True/False when the log shows the verifier outcome, None when it does not."""
    if e.tests_failed is not None and (e.tests_failed > 0):
        return False
    if e.exit_code is not None:
        return e.exit_code == 0 and not e.is_error
    if e.tests_failed is not None and e.tests_passed is not None:
        return e.tests_failed == 0 and e.tests_passed > 0
    if e.is_error:
        return False
    return None


def _event_time(e: Event) -> float | None:
    if e.end is not None:
        return e.end
    if e.start is not None and e.duration is not None:
        return e.start + e.duration
    return e.start


class OnlineFeatureExtractor:
    """Incremental, prefix-causal feature extractor; feed events in order with observe()."""

    def __init__(self, config: FeatureConfig | None = None) -> None:
        self.config = config or FeatureConfig()
        self.graph = ProvenanceGraph(self.config.edge_families, self.config.root)
        w = self.config.error_trend_window
        self._w = w
        self._errs: deque[int] = deque()  # last 2w error flags, with running window sums
        self._err_recent = 0
        self._err_prev = 0
        self._n = 0
        self._step = 0
        self._safe = 0
        self._turns = 0
        # time
        self._t_first: float | None = None
        self._t_now: float | None = None
        self._busy_total = 0.0
        self._busy_known = False
        # totals
        self._tok_total = 0
        self._tok_known = False
        self._tok_part_known = [False, False, False]  # input, cached, output ever reported
        self._tools_total = 0
        self._retries_total = 0
        self._errors_total = 0
        self._failed_cmds: set[str] = set()
        self._touched_total: set[str] = set()
        self._bytes_total = 0
        self._bytes_known_total = False
        self._verif_total = 0
        # per-path artifact sizes of live versions (None = unknown)
        self._size: dict[str, int | None] = {}
        self._size_sum = 0
        self._size_known = 0
        # progress
        self._passed_latest: float = NAN
        self._failed_latest: float = NAN
        self._last_progress_n = 0
        self._last_progress_t: float | None = None
        self._last_verifier: float = NAN
        # latest test result per test key
        self._latest_test: dict[str, int] = {}  # test key -> event node id
        self._key_passed: dict[str, int] = {}  # test key -> latest passed count
        self._test_counts_seen = False
        self._fv_dep: dict[int, bool] = {}
        self._n_cp = 0
        self._reset_segment()

    # -- checkpoints ------------------------------------------------------------------------

    def _reset_segment(self) -> None:
        self._cp_n = self._n
        self._cp_step = self._step
        self._cp_t: float | None = self._t_now if self._n_cp else self._t_first
        # newly passing: per test key, passed count now minus at the checkpoint (>= 0)
        self._cp_key_passed = dict(self._key_passed)
        self._s_newly = 0
        self._s_busy = 0.0
        self._s_tok = [0, 0, 0]
        self._s_tools = 0
        self._s_model = 0
        self._s_retries = 0
        self._s_errors = 0
        self._s_expensive = 0
        self._s_testbuild = 0
        self._s_uninterp = 0
        self._s_touched: set[str] = set()
        self._s_read: set[str] = set()
        self._s_deleted: set[str] = set()
        self._s_bytes = 0
        self._s_verif = 0
        self._s_verif_pass = 0
        self._s_validated: set[str] = set()
        self._s_commits = 0
        # ripple counters for the current epoch
        self._r_live_new = 0
        self._r_tests_new = 0
        self._r_nodes = 0
        self._r_desc = 0
        self._r_edges = 0
        self._r_edges_past = 0
        self._r_fanout_max = 0
        self._r_down = 0
        self._r_down_pass = 0
        self._r_affected = 0
        self._r_prev = 0

    def mark_checkpoint(self) -> None:
        """A checkpoint was materialised at the current point (after the last observed event)."""
        self._n_cp += 1
        self.graph.new_epoch()
        self._reset_segment()

    # -- observation ------------------------------------------------------------------------

    def observe(self, event: Event) -> None:
        """Add one event (in trajectory order); amortised O(its edges)."""
        if event.index != self._n:
            raise ValueError(
                f"event index {event.index} observed out of order (expected {self._n})"
            )
        pg = self.graph
        res = pg.add_event(event)
        eff = res.effects
        cb = 1 << pg.epoch
        anc = pg.anc
        own = pg.own
        kind = event.kind
        self._n += 1
        self._step = event.step
        if event.safe_boundary:
            self._safe += 1
        if event.turn_end:
            self._turns += 1

        # time (_event_time() and Event.elapsed, inlined: the hot path)
        start, end, dur = event.start, event.end, event.duration
        if end is not None:
            t = end
        elif start is not None and dur is not None:
            t = start + dur
        else:
            t = start
        if self._t_first is None:
            if start is not None:
                self._t_first = start
            elif t is not None:
                self._t_first = t
        if self._n_cp == 0 and self._cp_t is None:
            self._cp_t = self._t_first  # no checkpoint yet: distance from the run start
        if t is not None:
            now = self._t_now
            if now is None or t > now:  # max(now, t)
                self._t_now = t
        if dur is not None:
            el = dur
        elif start is not None and end is not None:
            el = end - start
        else:
            el = None
        if el is not None:
            self._busy_known = True
            self._busy_total += el
            self._s_busy += el

        # tokens
        ti, tc, to = event.input_tokens, event.cached_tokens, event.output_tokens
        if ti is not None or tc is not None or to is not None:
            self._tok_known = True
            st = self._s_tok
            pk = self._tok_part_known
            if ti is not None:
                st[0] += ti
                self._tok_total += ti
                pk[0] = True
            if tc is not None:
                st[1] += tc
                pk[1] = True
            if to is not None:
                st[2] += to
                self._tok_total += to
                pk[2] = True

        # calls, errors, retries
        xc = event.exit_code
        err = bool(event.is_error) or (xc is not None and xc != 0)  # _is_error(), inlined
        is_tool = kind in _TOOL_KINDS
        if kind == _MODEL_CALL:
            self._s_model += 1
        if is_tool:
            self._tools_total += 1
            self._s_tools += 1
            if el is not None and el >= self.config.expensive_tool_seconds:
                self._s_expensive += 1
        cmd_key = event.command or (" ".join(event.argv) if event.argv else None)
        retry = cmd_key is not None and cmd_key in self._failed_cmds
        if err and event.text:
            low = event.text.lower()
            if "retry" in low or "re-connecting" in low:
                retry = True
        if retry:
            self._retries_total += 1
            self._s_retries += 1
        if err:
            self._errors_total += 1
            self._s_errors += 1
            if cmd_key is not None:
                self._failed_cmds.add(cmd_key)
        errs = self._errs
        x = 1 if err else 0
        errs.append(x)
        self._err_recent += x
        w = self._w
        if len(errs) > w:
            moved = errs[-w - 1]
            self._err_recent -= moved
            self._err_prev += moved
            if len(errs) > 2 * w:
                self._err_prev -= errs.popleft()
        if res.test_like:
            self._s_testbuild += 1
        if res.uninterpreted:
            self._s_uninterp += 1
        if eff.is_commit:
            self._s_commits += 1

        # physical state
        if eff.reads:
            self._s_read.update(eff.reads)
        bw = event.bytes_written
        n_written = len(eff.writes)
        if bw is not None:  # once any event reports bytes, sums are known (0 if none since)
            self._bytes_total += bw
            self._s_bytes += bw
            self._bytes_known_total = True

        # ripple: the event node
        node = res.node
        self._r_nodes += 1
        node_desc = bool(anc[node] & cb)
        if node_desc:
            self._r_desc += 1
        if self._n_cp and (anc[node] >> (pg.epoch - 1)) & 1:
            self._r_prev += 1
        self._r_edges += res.n_edges
        self._r_edges_past += res.past_sources
        if res.max_src_outdeg > self._r_fanout_max:
            self._r_fanout_max = res.max_src_outdeg

        # file versions
        writer_dep = node_desc
        for path, fv, old, deleted in res.versions:
            self._touched_total.add(path)
            self._s_touched.add(path)
            self._r_nodes += 1
            if anc[fv] & cb:
                self._r_desc += 1
            if self._n_cp and (anc[fv] >> (pg.epoch - 1)) & 1:
                self._r_prev += 1
            if deleted:
                self._s_deleted.add(path)
            else:
                self._s_deleted.discard(path)
            self._s_validated.discard(path)
            if old is not None:
                if own[old] & cb:
                    self._r_live_new -= 1
                if own[old] & cb and self._fv_dep.get(old):
                    self._r_affected -= 1
                sz = self._size.pop(path, None)
                if sz is not None:
                    self._size_sum -= sz
                    self._size_known -= 1
                else:
                    self._size.pop(path, None)
            if not deleted:
                self._r_live_new += 1
                dep = writer_dep and bool(anc[fv] & cb)
                self._fv_dep[fv] = dep
                if dep:
                    self._r_affected += 1
                if n_written == 1 and bw is not None:
                    self._size[path] = bw
                    self._size_sum += bw
                    self._size_known += 1
                else:
                    self._size[path] = None

        # verifier events
        if eff.is_test:
            self._verif_total += 1
            self._s_verif += 1
            passed = _verifier_passed(event)
            if node_desc:
                self._r_down += 1
                if passed:
                    self._r_down_pass += 1
            if event.tests_passed is not None:
                self._passed_latest = float(event.tests_passed)
            if event.tests_failed is not None:
                self._failed_latest = float(event.tests_failed)
            if passed is not None:
                self._last_verifier = 1.0 if passed else 0.0
            if passed:
                self._s_verif_pass += 1
                self._last_progress_n = self._n
                self._last_progress_t = t if t is not None else self._t_now
                self._s_validated.update([p for p, v in pg.live.items() if own[v] & cb])
            key = (event.command or " ".join(event.argv or ()) or "<test>").strip()
            if event.tests_passed is not None:
                self._test_counts_seen = True
                base = self._cp_key_passed.get(key, 0)
                before = self._key_passed.get(key)
                if before is not None:
                    self._s_newly -= max(0, before - base)
                self._key_passed[key] = event.tests_passed
                self._s_newly += max(0, event.tests_passed - base)
            old_t = self._latest_test.get(key)
            if old_t is not None and own[old_t] & cb:
                self._r_tests_new -= 1
            self._latest_test[key] = node
            self._r_tests_new += 1

    # -- features ---------------------------------------------------------------------------

    @property
    def feature_names(self) -> list[str]:
        """Feature names in the stable order of :meth:`features`."""
        return list(FEATURE_NAMES)

    def features(self) -> dict[str, float]:
        """Features at the current point (after the last observed event), from the past only."""
        return dict(zip(FEATURE_NAMES, self.feature_vector(), strict=True))

    def feature_vector(self) -> list[float]:
        """The values of :meth:`features` as a list in :attr:`feature_names` order."""
        row = self._row()
        for i in _INT_POS:
            row[i] = float(row[i])
        return row

    def _row(self) -> list[float | int]:
        """:meth:`feature_vector` before its int -> float conversions (the counts at
        :data:`_INT_POS` stay ints so that :func:`boundary_features` converts them in
        bulk with NumPy: float(int) and NumPy's float64 conversion round alike)."""
        pg = self.graph
        has_wall = self._t_now is not None and self._t_first is not None
        wall_total = (self._t_now - self._t_first) if has_wall else NAN
        wall_cp = (self._t_now - self._cp_t) if (has_wall and self._cp_t is not None) else NAN
        busy_total = self._busy_total if self._busy_known else NAN
        busy_cp = self._s_busy if self._busy_known else NAN
        tk = self._tok_known
        n_live = len(pg.live)
        n_tests = len(self._latest_test)
        frontier = n_live + n_tests
        frontier_new = self._r_live_new + self._r_tests_new
        w = self._w
        n_errs = len(self._errs)
        n_recent = n_errs if n_errs < w else w
        rate_recent = self._err_recent / n_recent if n_recent else NAN
        rate_trend = (rate_recent - self._err_prev / (n_errs - w)) if n_errs > w else NAN
        seg_nodes = self._r_nodes
        has_cp = self._n_cp > 0
        newly = float(self._s_newly) if self._test_counts_seen else NAN
        return [
            wall_total,
            wall_cp,
            busy_total,
            busy_cp,
            self._tok_total if tk else NAN,
            self._s_tok[0] + self._s_tok[2] if tk else NAN,
            self._s_tok[0] if self._tok_part_known[0] else NAN,
            self._s_tok[1] if self._tok_part_known[1] else NAN,
            self._s_tok[2] if self._tok_part_known[2] else NAN,
            self._tools_total,
            self._s_tools,
            self._s_model,
            self._retries_total,
            self._s_retries,
            self._errors_total,
            self._s_errors,
            self._s_expensive if self._busy_known else NAN,
            self._s_testbuild,
            self._s_uninterp,
            len(self._touched_total),
            len(self._s_touched),
            len(self._s_read),
            len(self._s_deleted),
            self._bytes_total if self._bytes_known_total else NAN,
            self._s_bytes if self._bytes_known_total else NAN,
            n_live,
            self._size_sum if self._size_known else NAN,
            self._passed_latest,
            self._failed_latest,
            newly,
            self._verif_total,
            self._s_verif,
            self._s_verif_pass,
            self._last_verifier,
            len(self._s_validated),
            self._s_commits,
            frontier,
            frontier_new,
            frontier_new / frontier if frontier else NAN,
            self._r_live_new,
            self._r_tests_new,
            seg_nodes,
            self._r_desc,
            self._r_desc / seg_nodes if seg_nodes else NAN,
            self._r_edges,
            self._r_edges_past,
            (self._r_edges - self._r_edges_past) / seg_nodes if seg_nodes else NAN,
            self._r_fanout_max,
            self._r_down,
            self._r_down_pass,
            self._r_affected,
            self._r_prev if has_cp else NAN,
            pg.n_edges,
            1.0 if has_cp else 0.0,
            self._n_cp,
            self._n - self._cp_n,
            self._step - self._cp_step,
            wall_cp,
            busy_cp,
            self._n - self._last_progress_n,
            (
                self._t_now - (self._last_progress_t if self._last_progress_t is not None else self._t_first)
                if has_wall else NAN
            ),
            rate_recent,
            rate_trend,
            self._step,
            self._n,
            self._safe,
            self._turns,
        ]

    def ripple_state(self) -> dict[str, float]:
        """The descent-based ripple counters, for comparison with :func:`reference_ripple`."""
        return {
            "frontier_new": float(self._r_live_new + self._r_tests_new),
            "new_descendant_count": float(self._r_desc),
            "downstream_verified": float(self._r_down),
            "affected_artifacts": float(self._r_affected),
            "from_prev_segment": float(self._r_prev) if self._n_cp else NAN,
            "segment_edges": float(self._r_edges),
            "edges_from_past": float(self._r_edges_past),
            "fanout_max": float(self._r_fanout_max),
        }


# ---------------------------------------------------------------------------------------
# Whole trajectories
# ---------------------------------------------------------------------------------------


def config_for(traj: Trajectory, config: FeatureConfig | None = None) -> FeatureConfig:
    """``config`` with ``root`` filled from the trajectory's meta (cwd/workdir) if unset."""
    config = config or FeatureConfig()
    if config.root is None:
        for key in _ROOT_KEYS:
            v = traj.meta.get(key)
            if isinstance(v, str) and v.startswith("/"):
                return FeatureConfig(config.edge_families, config.expensive_tool_seconds,
                                     config.error_trend_window, v)
    return config


_ID_COLUMNS = ["task_id", "repo", "boundary", "event_index", "step"]
_FLUSH_MASK = 1023  # boundary_features converts its rows to float64 every 1024 boundaries


def boundary_features(
    traj: Trajectory,
    granularity: str = "turn",
    checkpoints: Iterable[int] = (),
    config: FeatureConfig | None = None,
    extractor: OnlineFeatureExtractor | None = None,
) -> pd.DataFrame:
    """One row per candidate boundary b = 1..B with the online features there.

    ``checkpoints`` are boundary numbers (1-based) where a checkpoint is taken: row b sees
    only checkpoints at boundaries < b; after row b is computed, a checkpoint at b is
    marked. Pass ``extractor`` to inspect the graph afterwards (it must be fresh).

    A batch call: Python's cyclic garbage collector is paused for its duration (the walk
    allocates only acyclic objects; collection passes were its largest single cost) and
    restored to its previous state afterwards, also on error.
    """
    cps = set(checkpoints)
    bounds = traj.boundaries(granularity)  # type: ignore[arg-type]
    bad = [c for c in cps if not 1 <= c <= len(bounds)]
    if bad:
        raise ValueError(f"{traj.task_id}: checkpoint boundaries {sorted(bad)} outside 1..{len(bounds)}")
    ex = extractor if extractor is not None else OnlineFeatureExtractor(config_for(traj, config))
    values = np.empty((len(bounds), len(FEATURE_NAMES)), dtype=np.float64)
    out = values.reshape(-1)
    done = 0  # entries of ``out`` filled
    flat: list[float | int] = []  # rows not yet converted, concatenated
    steps: list[int] = []
    events = traj.events
    n = len(events)
    pos = 0
    observe = ex.observe
    row = ex._row
    extend = flat.extend
    # The walk allocates many small long-lived objects (graph nodes, edge records) and no
    # reference cycles: pause the cyclic collector, whose repeated full passes over the
    # growing heap would otherwise cost about as much as the walk itself.
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        for b, idx in enumerate(bounds, start=1):
            while pos < n and events[pos].index <= idx:
                observe(events[pos])
                pos += 1
            steps.append(events[pos - 1].step)
            extend(row())
            if b in cps:
                ex.mark_checkpoint()
            if not b & _FLUSH_MASK:  # convert in chunks: a small, reused working set
                k = len(flat)
                out[done : done + k] = np.fromiter(flat, dtype=np.float64, count=k)
                done += k
                flat.clear()
    finally:
        if gc_was_on:
            gc.enable()
    out[done:] = np.fromiter(flat, dtype=np.float64, count=len(flat))
    cols: dict[str, object] = {
        "task_id": [traj.task_id] * len(bounds),
        "repo": [traj.repo] * len(bounds),
        "boundary": np.arange(1, len(bounds) + 1, dtype=np.int64),
        "event_index": np.asarray(bounds, dtype=np.int64),
        "step": np.asarray(steps, dtype=np.int64),
    }
    frame = pd.DataFrame(cols)
    feats = pd.DataFrame(values, columns=FEATURE_NAMES)
    return pd.concat([frame, feats], axis=1)


# ---------------------------------------------------------------------------------------
# Slow references and hindsight (analysis only)
# ---------------------------------------------------------------------------------------


def reference_ripple(ex: OnlineFeatureExtractor) -> dict[str, float]:
    """Recompute the descent-based ripple counters of ``ex`` from its networkx graph with
    ``nx.descendants`` per node of the current segment: the naive, O(graph) per boundary
    computation that the incremental bitsets replace. For tests and the benchmark."""
    pg = ex.graph
    g = pg.graph
    cur = pg.epoch
    seg = [n for n, d in g.nodes(data=True) if d.get("epoch") == cur]
    desc: set[Node] = set()
    for n in seg:
        desc |= nx.descendants(g, n)
    keys = pg.keys
    live_new = sum(1 for v in pg.live.values() if g.nodes[keys[v]]["epoch"] == cur)
    tests_new = sum(1 for v in ex._latest_test.values() if g.nodes[keys[v]]["epoch"] == cur)
    down = sum(1 for n in desc if n[0] == "ev" and g.nodes[n].get("test"))
    affected = 0
    for v in (keys[i] for i in pg.live.values()):
        if g.nodes[v]["epoch"] != cur:
            continue
        writers = [u for u in g.predecessors(v) if g.edges[u, v]["family"] == EdgeFamily.WRITE.value]
        if writers and writers[0] in desc:
            affected += 1
    seg_set = set(seg)
    into = [(u, v) for v in seg for u in g.predecessors(v)]
    out = {
        "segment_edges": float(len(into)),
        "edges_from_past": float(sum(1 for u, _ in into if u not in seg_set)),
        "fanout_max": float(max((g.out_degree(n) for n in seg), default=0)),
        "frontier_new": float(live_new + tests_new),
        "new_descendant_count": float(len(desc)),
        "downstream_verified": float(down),
        "affected_artifacts": float(affected),
        "from_prev_segment": NAN,
    }
    if cur > 0:
        prev = [n for n, d in g.nodes(data=True) if d.get("epoch") == cur - 1]
        pdesc: set[Node] = set()
        for n in prev:
            pdesc |= nx.descendants(g, n)
        out["from_prev_segment"] = float(sum(1 for n in seg if n in pdesc))
    return out


def hindsight_descendants(
    traj: Trajectory, granularity: str = "turn", config: FeatureConfig | None = None
) -> pd.DataFrame:
    """HINDSIGHT (uses the future; analysis only, never a policy input): for each boundary
    b, how many nodes created after b descend from the nodes created in segment (b-1, b]
    in the graph of the whole run."""
    config = config_for(traj, config)
    pg = ProvenanceGraph(config.edge_families, config.root)
    for e in traj.events:
        pg.add_event(e)
    g = pg.graph
    bounds = traj.boundaries(granularity)  # type: ignore[arg-type]
    by_t: dict[int, list[Node]] = {}
    for n, d in g.nodes(data=True):
        by_t.setdefault(d["t"], []).append(n)
    rows = []
    prev = -1
    for b, idx in enumerate(bounds, start=1):
        seg = [n for t in range(prev + 1, idx + 1) for n in by_t.get(t, [])]
        desc: set[Node] = set()
        for n in seg:
            desc |= nx.descendants(g, n)
        fut = {n for n in desc if g.nodes[n]["t"] > idx}
        n_future = sum(len(v) for t, v in by_t.items() if t > idx)
        rows.append({
            "task_id": traj.task_id, "repo": traj.repo, "boundary": b, "event_index": idx,
            "hindsight__future_descendants": len(fut),
            "hindsight__future_events_descending": sum(1 for n in fut if n[0] == "ev"),
            "hindsight__future_tests_descending": sum(1 for n in fut if n[0] == "ev" and g.nodes[n].get("test")),
            "hindsight__future_nodes": n_future,
        })
        prev = idx
    return pd.DataFrame(rows)
