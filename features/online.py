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

Each feature's name, family and formula over the extractor's raw state are declared once,
in ``features.row``, which generates :data:`FEATURE_NAMES`, the raw layout and the row
builders; this module keeps the state up to date.

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

from array import array
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
import pandas as pd

from features.gc_pause import gc_paused
from features.graph import DEFAULT_FAMILIES, EdgeFamily, Node, ProvenanceGraph
from features.row import (
    CP_PAIRS,
    EPOCH_COUNTERS,
    FEATURE_NAMES,
    RAW_FIELDS,
    RAW_INDEX,
    feature_row,
    feature_rows,
    initial_raw,
)
from features.schema import Event, EventKind, Trajectory

__all__ = [
    "FEATURE_NAMES", "FeatureConfig", "OnlineFeatureExtractor", "PrefixWalk", "boundary_features",
    "config_for",
    "hindsight_descendants", "reference_ripple",
]

NAN = float("nan")
_TOOL_KINDS = {EventKind.COMMAND, EventKind.FILE_CHANGE, EventKind.TEST, EventKind.OTHER}
_MODEL_CALL = EventKind.MODEL_CALL
_ROOT_KEYS = ("cwd", "workdir", "working_dir", "root", "repo_root")

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


# The extractor's numeric state is one flat list, laid out by ``features.row`` (ints,
# floats, NaN for an unknown time); the features at a point are a pure function of it
# (``features.row.feature_row`` / ``feature_rows``, generated from the one declaration of
# the row), so batch extraction appends the list to an ``array('d')`` at each boundary (one
# C-level copy) and converts all rows at once. "Since the last checkpoint" integer counters
# are totals minus their value at the checkpoint (exact); float sums since the checkpoint
# are accumulated on their own. The hot path indexes the list by these constants, each
# bound to its field by name.
_N = RAW_INDEX["n"]
_STEP = RAW_INDEX["step"]
_SAFE = RAW_INDEX["safe"]
_TURNS = RAW_INDEX["turns"]
_N_CP = RAW_INDEX["n_cp"]
_T_FIRST = RAW_INDEX["t_first"]
_T_NOW = RAW_INDEX["t_now"]
_CP_T = RAW_INDEX["cp_t"]
_LP_T = RAW_INDEX["lp_t"]
_LP_N = RAW_INDEX["lp_n"]
_BUSY_KNOWN = RAW_INDEX["busy_known"]
_BUSY_TOTAL = RAW_INDEX["busy_total"]
_S_BUSY = RAW_INDEX["s_busy"]
_TOK_KNOWN = RAW_INDEX["tok_known"]
_PK_IN = RAW_INDEX["pk_in"]
_PK_CACHED = RAW_INDEX["pk_cached"]
_PK_OUT = RAW_INDEX["pk_out"]
_TOK_IN = RAW_INDEX["tok_in"]
_TOK_CACHED = RAW_INDEX["tok_cached"]
_TOK_OUT = RAW_INDEX["tok_out"]
_TOOLS = RAW_INDEX["tools"]
_MODEL = RAW_INDEX["model"]
_RETRIES = RAW_INDEX["retries"]
_ERRORS = RAW_INDEX["errors"]
_EXPENSIVE = RAW_INDEX["expensive"]
_TESTBUILD = RAW_INDEX["testbuild"]
_UNINTERP = RAW_INDEX["uninterp"]
_COMMITS = RAW_INDEX["commits"]
_N_TOUCHED = RAW_INDEX["n_touched"]
_N_S_TOUCHED = RAW_INDEX["n_s_touched"]
_N_S_READ = RAW_INDEX["n_s_read"]
_N_S_DELETED = RAW_INDEX["n_s_deleted"]
_N_S_VALIDATED = RAW_INDEX["n_s_validated"]
_BYTES_KNOWN = RAW_INDEX["bytes_known"]
_BYTES = RAW_INDEX["bytes"]
_N_LIVE = RAW_INDEX["n_live"]
_SIZE_SUM = RAW_INDEX["size_sum"]
_SIZE_KNOWN = RAW_INDEX["size_known"]
_PASSED_LATEST = RAW_INDEX["passed_latest"]
_FAILED_LATEST = RAW_INDEX["failed_latest"]
_NEWLY = RAW_INDEX["newly"]
_TEST_COUNTS_SEEN = RAW_INDEX["test_counts_seen"]
_VERIF = RAW_INDEX["verif"]
_VERIF_PASS = RAW_INDEX["verif_pass"]
_LAST_VERIFIER = RAW_INDEX["last_verifier"]
_N_TESTS = RAW_INDEX["n_tests"]
_R_LIVE_NEW = RAW_INDEX["r_live_new"]
_R_TESTS_NEW = RAW_INDEX["r_tests_new"]
_R_NODES = RAW_INDEX["r_nodes"]
_R_DESC = RAW_INDEX["r_desc"]
_R_EDGES = RAW_INDEX["r_edges"]
_R_EDGES_PAST = RAW_INDEX["r_edges_past"]
_R_FANOUT_MAX = RAW_INDEX["r_fanout_max"]
_R_DOWN = RAW_INDEX["r_down"]
_R_DOWN_PASS = RAW_INDEX["r_down_pass"]
_R_AFFECTED = RAW_INDEX["r_affected"]
_R_PREV = RAW_INDEX["r_prev"]
_N_EDGES = RAW_INDEX["n_edges"]
_ERR_RECENT = RAW_INDEX["err_recent"]
_ERR_PREV = RAW_INDEX["err_prev"]
_N_ERRS = RAW_INDEX["n_errs"]
_N_RAW = len(RAW_FIELDS)


class OnlineFeatureExtractor:
    """Incremental, prefix-causal feature extractor; feed events in order with observe()."""

    def __init__(self, config: FeatureConfig | None = None) -> None:
        self.config = config or FeatureConfig()
        self.graph = ProvenanceGraph(self.config.edge_families, self.config.root)
        self._w = self.config.error_trend_window
        self._expensive = self.config.expensive_tool_seconds
        self._raw = initial_raw()
        self._errs: deque[int] = deque()  # last 2w error flags (window sums in _raw)
        self._failed_cmds: set[str] = set()
        self._touched_total: set[str] = set()
        # per-path artifact sizes of live versions (None = unknown)
        self._size: dict[str, int | None] = {}
        self._latest_test: dict[str, int] = {}  # test key -> event node id
        self._key_passed: dict[str, int] = {}  # test key -> latest passed count
        self._fv_dep: dict[int, bool] = {}
        self._reset_segment()

    # -- checkpoints ------------------------------------------------------------------------

    def _reset_segment(self) -> None:
        raw = self._raw
        raw[_CP_T] = raw[_T_NOW] if raw[_N_CP] else raw[_T_FIRST]
        for total, at_cp in CP_PAIRS:
            raw[at_cp] = raw[total]
        for i in EPOCH_COUNTERS:
            raw[i] = 0
        raw[_S_BUSY] = 0.0
        # newly passing: per test key, passed count now minus at the checkpoint (>= 0)
        self._cp_key_passed = dict(self._key_passed)
        self._s_touched: set[str] = set()
        self._s_read: set[str] = set()
        self._s_deleted: set[str] = set()
        self._s_validated: set[str] = set()

    def mark_checkpoint(self) -> None:
        """A checkpoint was materialised at the current point (after the last observed event)."""
        self._raw[_N_CP] += 1
        self.graph.new_epoch()
        self._reset_segment()

    # -- observation ------------------------------------------------------------------------

    def observe(self, event: Event) -> None:
        """Add one event (in trajectory order); amortised O(its edges)."""
        raw = self._raw
        if event.index != raw[_N]:
            raise ValueError(
                f"event index {event.index} observed out of order (expected {raw[_N]})"
            )
        pg = self.graph
        node, eff, n_edges, versions, past, mx = pg._add(event)
        epoch = pg.epoch
        cb = 1 << epoch
        anc = pg.anc
        kind = event.kind
        n_cp = raw[_N_CP]
        raw[_N] += 1
        raw[_STEP] = event.step
        if event.safe_boundary:
            raw[_SAFE] += 1
        if event.turn_end:
            raw[_TURNS] += 1

        # time (_event_time() and Event.elapsed, inlined: the hot path)
        start, end, dur = event.start, event.end, event.duration
        if end is not None:
            t = end
        elif start is not None and dur is not None:
            t = start + dur
        else:
            t = start
        first = raw[_T_FIRST]
        if first != first:  # not known yet (NaN)
            if start is not None:
                raw[_T_FIRST] = start
            elif t is not None:
                raw[_T_FIRST] = t
        if not n_cp:
            ct = raw[_CP_T]
            if ct != ct:
                raw[_CP_T] = raw[_T_FIRST]  # no checkpoint yet: distance from the run start
        if t is not None:
            now = raw[_T_NOW]
            if now != now or t > now:  # max(now, t)
                raw[_T_NOW] = t
        if dur is not None:
            el = dur
        elif start is not None and end is not None:
            el = end - start
        else:
            el = None
        if el is not None:
            raw[_BUSY_KNOWN] = 1
            raw[_BUSY_TOTAL] += el
            raw[_S_BUSY] += el

        # tokens
        ti, tc, to = event.input_tokens, event.cached_tokens, event.output_tokens
        if ti is not None or tc is not None or to is not None:
            raw[_TOK_KNOWN] = 1
            if ti is not None:
                raw[_TOK_IN] += ti
                raw[_PK_IN] = 1
            if tc is not None:
                raw[_TOK_CACHED] += tc
                raw[_PK_CACHED] = 1
            if to is not None:
                raw[_TOK_OUT] += to
                raw[_PK_OUT] = 1

        # calls, errors, retries
        xc = event.exit_code
        err = bool(event.is_error) or (xc is not None and xc != 0)  # _is_error(), inlined
        if kind == _MODEL_CALL:
            raw[_MODEL] += 1
        elif kind in _TOOL_KINDS:
            raw[_TOOLS] += 1
            if el is not None and el >= self._expensive:
                raw[_EXPENSIVE] += 1
        cmd_key = event.command or (" ".join(event.argv) if event.argv else None)
        retry = cmd_key is not None and cmd_key in self._failed_cmds
        if err and event.text:
            low = event.text.lower()
            if "retry" in low or "re-connecting" in low:
                retry = True
        if retry:
            raw[_RETRIES] += 1
        errs = self._errs
        if err:
            raw[_ERRORS] += 1
            if cmd_key is not None:
                self._failed_cmds.add(cmd_key)
            errs.append(1)
            raw[_ERR_RECENT] += 1
        else:
            errs.append(0)
        w = self._w
        if len(errs) > w:
            moved = errs[-w - 1]
            if moved:
                raw[_ERR_RECENT] -= 1
                raw[_ERR_PREV] += 1
            if len(errs) > 2 * w and errs.popleft():
                raw[_ERR_PREV] -= 1
        if eff.is_test or eff.is_build:
            raw[_TESTBUILD] += 1
        if eff.has_command and not eff.interpreted:
            raw[_UNINTERP] += 1
        if eff.is_commit:
            raw[_COMMITS] += 1

        # physical state
        if eff.reads:
            self._s_read.update(eff.reads)
        bw = event.bytes_written
        if bw is not None:  # once any event reports bytes, sums are known (0 if none since)
            raw[_BYTES] += bw
            raw[_BYTES_KNOWN] = 1

        # ripple: the event node
        a = anc[node]
        node_desc = bool(a & cb)
        raw[_R_NODES] += 1
        if node_desc:
            raw[_R_DESC] += 1
        if n_cp and (a >> (epoch - 1)) & 1:
            raw[_R_PREV] += 1
        raw[_R_EDGES] += n_edges
        raw[_R_EDGES_PAST] += past
        if mx > raw[_R_FANOUT_MAX]:
            raw[_R_FANOUT_MAX] = mx

        # file versions
        if versions:
            self._observe_versions(versions, node_desc, len(eff.writes), bw, cb, n_cp, epoch)

        # verifier events
        if eff.is_test:
            self._observe_test(event, node, node_desc, t, cb)

    def _observe_versions(self, versions: list[tuple[str, int, int | None, bool]], writer_dep: bool,
                          n_written: int, bw: int | None, cb: int, n_cp: int, epoch: int) -> None:
        raw = self._raw
        anc = self.graph.anc
        own = self.graph.own
        size = self._size
        for path, fv, old, deleted in versions:
            self._touched_total.add(path)
            self._s_touched.add(path)
            raw[_R_NODES] += 1
            if anc[fv] & cb:
                raw[_R_DESC] += 1
            if n_cp and (anc[fv] >> (epoch - 1)) & 1:
                raw[_R_PREV] += 1
            if deleted:
                self._s_deleted.add(path)
            else:
                self._s_deleted.discard(path)
            self._s_validated.discard(path)
            if old is not None:
                if own[old] & cb:
                    raw[_R_LIVE_NEW] -= 1
                    if self._fv_dep.get(old):
                        raw[_R_AFFECTED] -= 1
                sz = size.pop(path, None)
                if sz is not None:
                    raw[_SIZE_SUM] -= sz
                    raw[_SIZE_KNOWN] -= 1
            if not deleted:
                raw[_R_LIVE_NEW] += 1
                dep = writer_dep and bool(anc[fv] & cb)
                self._fv_dep[fv] = dep
                if dep:
                    raw[_R_AFFECTED] += 1
                if n_written == 1 and bw is not None:
                    size[path] = bw
                    raw[_SIZE_SUM] += bw
                    raw[_SIZE_KNOWN] += 1
                else:
                    size[path] = None

    def _observe_test(self, event: Event, node: int, node_desc: bool, t: float | None, cb: int) -> None:
        raw = self._raw
        raw[_VERIF] += 1
        passed = _verifier_passed(event)
        if node_desc:
            raw[_R_DOWN] += 1
            if passed:
                raw[_R_DOWN_PASS] += 1
        if event.tests_passed is not None:
            raw[_PASSED_LATEST] = float(event.tests_passed)
        if event.tests_failed is not None:
            raw[_FAILED_LATEST] = float(event.tests_failed)
        if passed is not None:
            raw[_LAST_VERIFIER] = 1.0 if passed else 0.0
        if passed:
            raw[_VERIF_PASS] += 1
            raw[_LP_N] = raw[_N]
            raw[_LP_T] = t if t is not None else raw[_T_NOW]
            own = self.graph.own
            self._s_validated.update([p for p, v in self.graph.live.items() if own[v] & cb])
        key = (event.command or " ".join(event.argv or ()) or "<test>").strip()
        if event.tests_passed is not None:
            raw[_TEST_COUNTS_SEEN] = 1
            base = self._cp_key_passed.get(key, 0)
            before = self._key_passed.get(key)
            if before is not None:
                raw[_NEWLY] -= max(0, before - base)
            self._key_passed[key] = event.tests_passed
            raw[_NEWLY] += max(0, event.tests_passed - base)
        old_t = self._latest_test.get(key)
        if old_t is not None and self.graph.own[old_t] & cb:
            raw[_R_TESTS_NEW] -= 1
        self._latest_test[key] = node
        raw[_R_TESTS_NEW] += 1

    # -- features ---------------------------------------------------------------------------

    def _current_raw(self) -> list[float | int]:
        """The raw state with the sizes of the sets and maps brought up to date."""
        raw = self._raw
        pg = self.graph
        raw[_N_TOUCHED] = len(self._touched_total)
        raw[_N_S_TOUCHED] = len(self._s_touched)
        raw[_N_S_READ] = len(self._s_read)
        raw[_N_S_DELETED] = len(self._s_deleted)
        raw[_N_S_VALIDATED] = len(self._s_validated)
        raw[_N_LIVE] = len(pg.live)
        raw[_N_TESTS] = len(self._latest_test)
        raw[_N_EDGES] = pg.n_edges
        raw[_N_ERRS] = len(self._errs)
        return raw

    def snapshot(self, buffer: array) -> None:
        """Append the state at the current point to ``buffer`` (an ``array('d')``): batch
        callers record a snapshot per boundary and convert them all with
        :meth:`features_from_snapshots`, which gives what :meth:`feature_vector` gives."""
        buffer.fromlist(self._current_raw())

    def features_from_snapshots(self, buffer: array) -> np.ndarray:
        """Feature rows (one per snapshot, columns in :data:`FEATURE_NAMES` order)."""
        raw = np.frombuffer(buffer, dtype=np.float64).reshape(-1, _N_RAW)
        return feature_rows(raw, self._w)

    @property
    def feature_names(self) -> list[str]:
        """Feature names in the stable order of :meth:`features`."""
        return list(FEATURE_NAMES)

    def features(self) -> dict[str, float]:
        """Features at the current point (after the last observed event), from the past only."""
        return dict(zip(FEATURE_NAMES, self.feature_vector(), strict=True))

    def feature_vector(self) -> list[float]:
        """The values of :meth:`features` as a list in :attr:`feature_names` order."""
        return feature_row(self._current_raw(), self._w)

    def ripple_state(self) -> dict[str, float]:
        """The descent-based ripple counters, for comparison with :func:`reference_ripple`."""
        raw = self._raw
        return {
            "frontier_new": float(raw[_R_LIVE_NEW] + raw[_R_TESTS_NEW]),
            "new_descendant_count": float(raw[_R_DESC]),
            "downstream_verified": float(raw[_R_DOWN]),
            "affected_artifacts": float(raw[_R_AFFECTED]),
            "from_prev_segment": float(raw[_R_PREV]) if raw[_N_CP] else NAN,
            "segment_edges": float(raw[_R_EDGES]),
            "edges_from_past": float(raw[_R_EDGES_PAST]),
            "fanout_max": float(raw[_R_FANOUT_MAX]),
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


class PrefixWalk:
    """The one prefix walk: a trajectory's events fed to an extractor, boundary by boundary.

    Boundary ``b`` (1-based) follows event ``boundary_events[b - 1]``. :meth:`advance`
    observes every event up to and including that event and none after it, so features
    read after ``advance(b)`` are computed from the prefix alone; a checkpoint taken at
    ``b`` is marked with ``walk.extractor.mark_checkpoint()`` before advancing further.
    Batch rows (:func:`boundary_features`), matched-budget episodes and training replays
    all walk a trajectory through this class.
    """

    def __init__(self, traj: Trajectory, boundary_events: Sequence[int],
                 config: FeatureConfig | None = None, *,
                 extractor: OnlineFeatureExtractor | None = None) -> None:
        self.trajectory = traj
        self.boundary_events = [int(i) for i in boundary_events]
        self.extractor = extractor if extractor is not None else OnlineFeatureExtractor(
            config_for(traj, config))
        self.boundary = 0  # the last boundary advanced to (0 = the start)
        self._events = iter(traj.events)

    @property
    def n_boundaries(self) -> int:
        return len(self.boundary_events)

    def advance(self, boundary: int) -> None:
        """Observe the events up to boundary ``boundary``'s event (later than the current)."""
        if not self.boundary < boundary <= len(self.boundary_events):
            raise ValueError(f"{self.trajectory.task_id}: cannot advance from boundary "
                             f"{self.boundary} to {boundary} of {len(self.boundary_events)}")
        target = self.boundary_events[boundary - 1]
        observe = self.extractor.observe
        for e in self._events:
            observe(e)
            if e.index >= target:
                if e.index != target:
                    raise ValueError(f"{self.trajectory.task_id}: boundary event index {target} "
                                     "not found in its events")
                self.boundary = boundary
                return
        raise ValueError(f"{self.trajectory.task_id}: boundary event indices "
                         f"{self.boundary_events[boundary - 1:]} not found in its events")

    def features(self) -> dict[str, float]:
        """The online features at the current boundary."""
        return self.extractor.features()


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

    A batch call: the extractor's state is snapshotted at each boundary and all rows are
    converted together (:meth:`OnlineFeatureExtractor.snapshot`). Python's cyclic garbage
    collector is paused for its duration (the walk allocates only acyclic objects;
    collection passes were its largest single cost) and restored to its previous state
    afterwards, also on error.
    """
    cps = set(checkpoints)
    bounds = traj.boundaries(granularity)  # type: ignore[arg-type]
    bad = [c for c in cps if not 1 <= c <= len(bounds)]
    if bad:
        raise ValueError(f"{traj.task_id}: checkpoint boundaries {sorted(bad)} outside 1..{len(bounds)}")
    walk = PrefixWalk(traj, bounds, config, extractor=extractor)
    ex = walk.extractor
    buffer = array("d")
    nb = len(bounds)
    with gc_paused():  # many small long-lived acyclic objects: see features.gc_pause
        for b in range(1, nb + 1):
            walk.advance(b)
            ex.snapshot(buffer)
            if b in cps:
                ex.mark_checkpoint()
    values = ex.features_from_snapshots(buffer)
    steps = np.frombuffer(buffer, dtype=np.float64)[_STEP :: _N_RAW].astype(np.int64)
    cols: dict[str, object] = {
        "task_id": [traj.task_id] * nb,
        "repo": [traj.repo] * nb,
        "boundary": np.arange(1, nb + 1, dtype=np.int64),
        "event_index": np.asarray(bounds, dtype=np.int64),
        "step": steps,
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
