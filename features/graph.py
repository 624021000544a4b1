"""Provenance graph of an agent run (paper, Appendix C): events and file versions.

Nodes are events ``("ev", i)`` and file versions ``("fv", path, version)``; version 0 is
the pristine file (created on first read of a path never written), every write or delete
creates the next version (a delete makes a tombstone version, ``deleted=True``).

Edges are observable only, each with attribute ``family`` (:class:`EdgeFamily`):

``write``
    event -> file version it wrote (or deleted).
``read``
    latest version of a path at the time of the read -> the reading event. A read of a
    directory (``ls src``, ``grep -r x src``; ``.`` is the whole workspace) reads every live
    version under it.
``build_io``
    every live written file version -> a test or build event (a test/build reads every
    file changed so far); its result feeds later events through ``tool_result``.
``tool_result``
    the rule: events of a logical step form a chain of decisions. Every event that produces
    an output the agent sees (model call, command, file change, test, other tool) is
    *pending*; the next event in the same step that is a decision or action (model call,
    command, file change, test) consumes all pending outputs: one edge from each. Pending
    outputs do not cross a step (turn) boundary. Messages neither produce nor consume.
``uninterpreted``
    a command whose file effects the shell parser could not pin down -> the next event (any
    step): a coarse edge so that a study can ablate it. Its understood effects still get
    their ordinary edges.
``nl_inferred``
    reserved for dependencies inferred from natural language. No producer is implemented,
    and the family is off by default; it exists so that counts and ablations have a name.

There is one edge per (source, target) pair: when several families apply to a pair, the
most specific one labels it (read, build_io, uninterpreted, then tool_result), so an
ablated family falls back to the next one that applies; a live version read directly by
an event that also reads the whole workspace or is a test/build keeps the family of that
whole-workspace edge. Whole-workspace edges are stored as one batch record in the edge
log (expanded in :attr:`ProvenanceGraph.graph`), so they cost O(1) per event online.

Edges always point forward in time, so each node's set of ancestor *epochs* (an epoch is
the stretch between two checkpoints; :meth:`ProvenanceGraph.new_epoch`) is final when the
node is created: it is the OR of its parents' bitsets (Python ints) and their own epoch
bits. Features read these bitsets (``features.online``) instead of walking the graph.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache, reduce
from itertools import chain, compress, repeat
from operator import or_, sub
from typing import TYPE_CHECKING, Any

from features.schema import BoundaryKind, Event, EventKind
from features.shell import ShellEffects, parse_command
from features.shell import clear_cache as clear_parse_cache

if TYPE_CHECKING:  # networkx is imported when the graph is first inspected
    import networkx as nx

__all__ = [
    "AddResult", "DEFAULT_FAMILIES", "EdgeFamily", "EventEffects", "Node",
    "ProvenanceGraph", "build_graph", "clear_caches", "event_effects",
]


class EdgeFamily(StrEnum):
    WRITE = "write"
    READ = "read"
    BUILD_IO = "build_io"
    TOOL_RESULT = "tool_result"
    UNINTERPRETED = "uninterpreted"
    NL_INFERRED = "nl_inferred"


DEFAULT_FAMILIES: frozenset[EdgeFamily] = frozenset(EdgeFamily) - {EdgeFamily.NL_INFERRED}

Node = tuple[Any, ...]

_SOURCES = {EventKind.MODEL_CALL, EventKind.COMMAND, EventKind.FILE_CHANGE, EventKind.TEST, EventKind.OTHER}
_CONSUMERS = {EventKind.MODEL_CALL, EventKind.COMMAND, EventKind.FILE_CHANGE, EventKind.TEST}
_TEST = EventKind.TEST
_COMMIT = BoundaryKind.COMMIT
_ROOT_KEYS = ("cwd", "workdir", "working_dir", "root", "repo_root")


@dataclass(frozen=True)
class EventEffects:
    """File effects of one event, from the reader's paths or from parsing its command."""

    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    deletes: tuple[str, ...] = ()
    is_test: bool = False
    is_build: bool = False
    interpreted: bool = True
    is_commit: bool = False
    has_command: bool = False


def _norm_path(p: str, root: str | None) -> str:
    p = posixpath.normpath(p) if p else p
    if root and p.startswith("/"):
        if p == root:
            return "."
        if p.startswith(root + "/"):
            p = p[len(root) + 1 :]
    return p


@lru_cache(maxsize=65536)
def _shell_effects(command: str | None, argv: tuple[str, ...] | None, root: str | None,
                   is_test_event: bool, is_commit_event: bool) -> EventEffects:
    sh = parse_command(command, argv)
    return EventEffects(
        tuple(_norm_path(p, root) for p in sh.reads),
        tuple(_norm_path(p, root) for p in sh.writes),
        tuple(_norm_path(p, root) for p in sh.deletes),
        is_test_event or sh.is_test, sh.is_build, sh.interpreted,
        sh.is_commit or is_commit_event, True,
    )


_NO_EFFECTS = EventEffects()


def clear_caches() -> None:
    """Forget cached command parses and event effects (benchmarks measure cold parsing)."""
    clear_parse_cache()
    _shell_effects.cache_clear()
    _path_effects.cache_clear()


def event_effects(event: Event, root: str | None = None) -> EventEffects:
    """Reads/writes/deletes of an event: the reader's ``paths_read``/``paths_written`` (and
    ``extra["paths_deleted"]``) when set, else the shell parse of ``argv``/``command``.
    The command is parsed in both cases for the test/build/commit flags. Cached by input."""
    has_cmd = bool(event.command or event.argv)
    deleted_extra = event.extra.get("paths_deleted") if event.extra else None
    has_paths = bool(event.paths_read or event.paths_written or deleted_extra)
    if not has_cmd and not has_paths and event.kind != _TEST and event.boundary_kind != _COMMIT:
        return _NO_EFFECTS
    if event.kind == EventKind.FILE_CHANGE and event.is_error and not has_paths:
        # a refused or failed edit (e.g. a rejected apply_patch) changed nothing: no writes
        return _NO_EFFECTS
    argv = None if event.command else (tuple(event.argv) if event.argv else None)
    if has_cmd and not has_paths:
        return _shell_effects(event.command, argv, root, event.kind == _TEST,
                              event.boundary_kind == _COMMIT)
    return _path_effects(
        event.command, tuple(event.argv) if event.argv else None, tuple(event.paths_read),
        tuple(event.paths_written), tuple(str(p) for p in (deleted_extra or ())), root,
        event.kind == _TEST, event.boundary_kind == _COMMIT,
    )


@lru_cache(maxsize=65536)
def _path_effects(command: str | None, argv: tuple[str, ...] | None, paths_read: tuple[str, ...],
                  paths_written: tuple[str, ...], paths_deleted: tuple[str, ...], root: str | None,
                  is_test_event: bool, is_commit_event: bool) -> EventEffects:
    """:func:`event_effects` of an event with reader paths (or none and no command)."""
    has_cmd = bool(command or argv)
    sh: ShellEffects | None = parse_command(command, argv) if has_cmd else None
    if paths_read or paths_written or paths_deleted:
        reads = tuple(_norm_path(p, root) for p in paths_read)
        writes = tuple(_norm_path(p, root) for p in paths_written)
        deletes = tuple(_norm_path(p, root) for p in paths_deleted)
        interpreted = True
    else:  # no paths and no command: a test or commit event that names nothing
        reads = writes = deletes = ()
        interpreted = True
    is_test = is_test_event or (sh is not None and sh.is_test)
    is_build = sh is not None and sh.is_build
    return EventEffects(
        reads, writes, deletes, is_test, is_build, interpreted,
        (sh is not None and sh.is_commit) or is_commit_event, has_cmd,
    )


@dataclass(slots=True)
class AddResult:
    """What one :meth:`ProvenanceGraph.add_event` added, for incremental feature updates.

    Node ids are ints (:meth:`ProvenanceGraph.key` gives the ``("ev", i)``/``("fv", p, k)``
    key used in the networkx graph)."""

    node: int
    effects: EventEffects
    n_edges: int = 0  # edges added by this event (incoming, and write edges out of it)
    # (path, new version id, previous live version id or None, deleted?)
    versions: list[tuple[str, int, int | None, bool]] = field(default_factory=list)
    test_like: bool = False
    uninterpreted: bool = False
    past_sources: int = 0  # incoming edges whose source belongs to an earlier epoch
    max_src_outdeg: int = 0  # max out-degree, after this event, of same-epoch sources


_FAMILY_CODES = {f: k for k, f in enumerate(EdgeFamily)}
_FAMILY_BY_CODE = list(EdgeFamily)
_WRITE = _FAMILY_CODES[EdgeFamily.WRITE]
_READ = _FAMILY_CODES[EdgeFamily.READ]
_BUILD_IO = _FAMILY_CODES[EdgeFamily.BUILD_IO]
_TOOL_RESULT = _FAMILY_CODES[EdgeFamily.TOOL_RESULT]
_UNINTERPRETED = _FAMILY_CODES[EdgeFamily.UNINTERPRETED]


class ProvenanceGraph:
    """Incrementally built provenance graph.

    The incremental state (integer node ids, an edge log, per-node epoch bitsets) is what
    features read; :attr:`graph` is the inspectable networkx DiGraph, brought up to date
    from the edge log when accessed (so building it costs nothing on the online path).

    ``families`` selects the edge families that are added (ablation). ``root`` strips an
    absolute workspace prefix from paths; if not given it is taken from the first event
    whose ``extra`` names a working directory.
    """

    def __init__(
        self,
        families: Iterable[EdgeFamily | str] = DEFAULT_FAMILIES,
        root: str | None = None,
    ) -> None:
        self.families = frozenset(EdgeFamily(f) for f in families)
        fam = self.families
        self._on = [f in fam for f in EdgeFamily]
        self.root = posixpath.normpath(root) if root else None
        self.epoch = 0
        # per node id
        self.keys: list[Node] = []
        self.attrs: list[tuple[Any, ...]] = []  # compact; expanded by node_attrs()
        self.anc: list[int] = []  # strict-ancestor epoch bitset
        self.own: list[int] = []  # own epoch bit (0 for pristine versions)
        self._direct: list[int] = []  # out-degree, batches excepted (see out_degree())
        self._id_map: dict[Node, int] = {}  # built lazily by id_of()
        # edge log, one record (target, source(s), family code) per edge group: a dict
        # {source: family} (code -1) for an event's direct incoming edges, a tuple for a
        # batch (one edge per source id), an int for one edge
        self._log: list[tuple[int, dict[int, int] | tuple[int, ...] | int, int]] = []
        self._n_edges = 0
        self._edge_counts = [0] * len(EdgeFamily)
        # file state
        self.latest: dict[str, int] = {}  # path -> latest version id (incl. tombstones)
        self.live: dict[str, int] = {}  # path -> latest version id, written and not deleted
        self._n_versions: dict[str, int] = {}
        # batches: "every live written version -> this event" (workspace reads, build_io).
        # A live version's out-degree is _direct + (#batches since it was born); the
        # snapshot of the live set, its bitset union and same-epoch maximum are cached
        # until the live set or the epoch changes.
        self._batches = 0
        self._born: dict[int, int] = {}
        self._live_gen = 0
        self._cache_key: tuple[int, int] | None = None
        self._snap: tuple[int, ...] = ()
        self._snap_bits = 0
        self._snap_same = 0
        self._snap_cand: int | None = None  # max(_direct - born) over same-epoch live
        self._live_same: dict[int, None] = {}  # live written versions of the current epoch
        self._pending: list[int] = []
        self._pending_step: int | None = None
        self._pending_uninterp: int | None = None
        self.n_events = 0
        self._t = -1
        self._nx: nx.DiGraph | None = None
        self._nx_nodes = 0
        self._nx_edges = 0

    # -- construction -------------------------------------------------------------------

    def new_epoch(self) -> None:
        """A checkpoint was taken: later nodes belong to a new epoch."""
        self.epoch += 1
        self._live_same.clear()

    def _node(self, key: Node, attrs: tuple[Any, ...], own: int) -> int:
        nid = len(self.keys)
        self.keys.append(key)
        self.attrs.append(attrs)
        self.anc.append(0)
        self.own.append(own)
        self._direct.append(0)
        return nid

    def _snapshot(self) -> None:
        key = (self._live_gen, self.epoch)
        if self._cache_key == key:
            return
        snap = tuple(self.live.values())
        anc, own, direct, born = self.anc, self.own, self._direct, self._born
        self._snap = snap
        self._snap_bits = reduce(or_, map(anc.__getitem__, snap), 0) | reduce(
            or_, map(own.__getitem__, snap), 0)
        same = self._live_same  # == [v for v in snap if own[v] == cb], kept up to date
        self._snap_same = len(same)
        self._snap_cand = max(map(sub, map(direct.__getitem__, same), map(born.__getitem__, same)),
                              default=None)
        self._cache_key = key

    def add_event(self, event: Event) -> AddResult:
        """Add one event (in trajectory order) with its file versions and incoming edges."""
        node, eff, n_edges, versions, past, mx = self._add(event)
        return AddResult(node, eff, n_edges, versions, eff.is_test or eff.is_build,
                         eff.has_command and not eff.interpreted, past, mx)

    def _add(self, event: Event) -> tuple[int, EventEffects, int, list[tuple[str, int, int | None, bool]],
                                           int, int]:
        """:meth:`add_event` as a plain tuple (node, effects, n_edges, versions,
        past_sources, max_src_outdeg): the per-event hot path of ``features.online``."""
        extra = event.extra
        if extra and self.root is None:
            for key in _ROOT_KEYS:
                v = extra.get(key)
                if isinstance(v, str) and v.startswith("/"):
                    self.root = posixpath.normpath(v)
                    break
        cmd = event.command
        kind = event.kind
        if cmd:
            if not (event.paths_read or event.paths_written or (extra and "paths_deleted" in extra)):
                eff = _shell_effects(cmd, None, self.root, kind == _TEST,
                                     event.boundary_kind == _COMMIT)
            else:
                eff = event_effects(event, self.root)
        elif (event.argv or event.paths_read or event.paths_written or extra or kind == _TEST
              or event.boundary_kind == _COMMIT):
            eff = event_effects(event, self.root)
        else:  # nothing to parse, no paths: what event_effects() returns, without the call
            eff = _NO_EFFECTS
        idx = event.index
        self._t = idx
        epoch = self.epoch
        cb = 1 << epoch
        keys = self.keys
        anc = self.anc
        own = self.own
        direct = self._direct
        node = len(keys)  # inlined _node(): the hot path
        keys.append(("ev", idx))
        self.attrs.append((kind, event.step, epoch, eff))
        anc.append(0)
        own.append(cb)
        direct.append(0)
        on = self._on
        # Incoming edges. One edge per (source, target) pair; when several families apply,
        # the most specific labels it: read, build_io, uninterpreted, tool_result (so an
        # ablated family falls back to the next one that applies).
        batch_fam = -1  # every live written version -> node
        reads = eff.reads
        incoming: dict[int, int] = {}
        if reads and on[_READ]:
            latest = self.latest
            for p in reads:
                if p == "." or p == "":
                    batch_fam = _READ
                else:
                    v = latest.get(p)  # _read_targets(p)'s first case, inlined
                    if v is not None:
                        incoming.setdefault(v, _READ)
                    else:
                        for v in self._read_targets(p):
                            incoming.setdefault(v, _READ)
        if batch_fam < 0 and on[_BUILD_IO] and (eff.is_test or eff.is_build):
            batch_fam = _BUILD_IO
        born = self._born
        if batch_fam >= 0 and incoming:
            incoming = {v: f for v, f in incoming.items() if v not in born}  # already in the batch
        pu = self._pending_uninterp
        if pu is not None and on[_UNINTERPRETED]:
            incoming.setdefault(pu, _UNINTERPRETED)
        self._pending_uninterp = node if (eff.has_command and not eff.interpreted) else None
        pending = self._pending
        if self._pending_step != event.step:
            pending = self._pending = []
            self._pending_step = event.step
        if pending and kind in _CONSUMERS:
            if on[_TOOL_RESULT]:
                for src in pending:
                    incoming.setdefault(src, _TOOL_RESULT)
            pending = self._pending = []
        if kind in _SOURCES:
            pending.append(node)

        bits = 0
        n_edges = past = mx = 0
        log = self._log
        if incoming:
            batches = self._batches
            counts = self._edge_counts
            for src, f in incoming.items():
                o = own[src]
                bits |= anc[src] | o
                d = direct[src] + 1
                direct[src] = d
                counts[f] += 1
                b = born.get(src)
                if b is not None:  # a live version read directly
                    d += batches - b
                    if o == cb and self._cache_key is not None:
                        cand = self._snap_cand
                        if cand is not None and direct[src] - b > cand:  # max(cand, ...)
                            self._snap_cand = direct[src] - b
                if o != cb:
                    past += 1
                elif d > mx:
                    mx = d
            n_edges = len(incoming)
            log.append((node, incoming, -1))
        if batch_fam >= 0 and self.live:
            self._snapshot()
            self._batches += 1
            snap = self._snap
            n = len(snap)
            bits |= self._snap_bits
            log.append((node, snap, batch_fam))
            self._edge_counts[batch_fam] += n
            n_edges += n
            past += n - self._snap_same
            if self._snap_cand is not None:
                d = self._snap_cand + self._batches
                if d > mx:
                    mx = d
        anc[node] = bits
        versions: list[tuple[str, int, int | None, bool]] = []
        if eff.deletes or eff.writes:
            # file versions: each delete, then each write, makes the path's next version
            wbits = bits | cb
            write_on = on[_WRITE]
            n_versions = self._n_versions
            live = self.live
            live_same = self._live_same
            attrs = self.attrs
            for p, deleted in chain(zip(eff.deletes, repeat(True)), zip(eff.writes, repeat(False))):
                k = n_versions.get(p, 0) + 1
                n_versions[p] = k
                fv = len(keys)
                keys.append(("fv", p, k))
                attrs.append((deleted, epoch, idx))
                anc.append(wbits if write_on else 0)
                own.append(cb)
                direct.append(0)
                if write_on:
                    log.append((fv, node, _WRITE))
                    self._edge_counts[_WRITE] += 1
                    n_edges += 1
                    d = direct[node] + 1  # events are never batch sources
                    direct[node] = d
                    if d > mx:
                        mx = d
                old = live.get(p)
                if old is not None:  # the old version dies: freeze its batch out-degree
                    direct[old] += self._batches - born.pop(old)
                    live_same.pop(old, None)
                self.latest[p] = fv
                if deleted:
                    live.pop(p, None)
                else:
                    live[p] = fv
                    born[fv] = self._batches
                    live_same[fv] = None
                self._live_gen += 1
                versions.append((p, fv, old, deleted))
        self._n_edges += n_edges
        self.n_events += 1
        return node, eff, n_edges, versions, past, mx

    def _read_targets(self, p: str) -> list[int]:
        v = self.latest.get(p)
        if v is not None:
            return [v]
        if p in (".", ""):
            return list(self.live.values())
        prefix = p.rstrip("/") + "/"
        live = self.live
        under = list(compress(live.values(), map(str.startswith, live, repeat(prefix))))
        if under:
            return under
        fv = self._node(("fv", p, 0), (False, None, self._t), 0)
        self.latest[p] = fv
        self._n_versions.setdefault(p, 0)
        return [fv]

    # -- inspection ----------------------------------------------------------------------

    @property
    def graph(self) -> nx.DiGraph:
        """The networkx DiGraph (nodes ``("ev", i)``/``("fv", path, k)``, edge attribute
        ``family``), synced from the incremental state on access."""
        if self._nx is None:
            import networkx as nx

            self._nx = nx.DiGraph()
        g = self._nx
        keys = self.keys
        for nid in range(self._nx_nodes, len(keys)):
            g.add_node(keys[nid], **self.node_attrs(nid))
        self._nx_nodes = len(keys)
        log = self._log
        n = len(log)
        for k in range(self._nx_edges, n):
            dst, src, f = log[k]
            v = keys[dst]
            if f < 0:
                g.add_edges_from((keys[u], v, {"family": _FAMILY_BY_CODE[fu].value})
                                 for u, fu in src.items())  # type: ignore[union-attr]
            elif isinstance(src, tuple):
                fam = _FAMILY_BY_CODE[f].value
                g.add_edges_from((keys[u], v, {"family": fam}) for u in src)
            else:
                g.add_edge(keys[src], v, family=_FAMILY_BY_CODE[f].value)
        self._nx_edges = n
        return g

    def node_attrs(self, nid: int) -> dict[str, Any]:
        """Attributes of node ``nid`` as stored on the networkx node."""
        key, a = self.keys[nid], self.attrs[nid]
        if key[0] == "ev":
            kind, step, epoch, eff = a
            return {"kind": str(kind), "step": step, "epoch": epoch, "t": key[1],
                    "test": eff.is_test, "build": eff.is_build, "interpreted": eff.interpreted}
        deleted, epoch, t = a
        return {"kind": "file_version", "path": key[1], "version": key[2], "deleted": deleted,
                "epoch": epoch, "t": t}

    @property
    def edge_counts(self) -> dict[str, int]:
        """Number of edges of each family (all families listed, zeros included)."""
        return {f.value: self._edge_counts[k] for k, f in enumerate(EdgeFamily)}

    def edge_counts_by_family(self) -> dict[str, int]:
        """Same as :attr:`edge_counts`."""
        return self.edge_counts

    @property
    def n_edges(self) -> int:
        """Number of edges (a batch counts one per source)."""
        return self._n_edges

    def out_degree(self, nid: int) -> int:
        """Out-degree of node id ``nid`` so far."""
        b = self._born.get(nid)
        return self._direct[nid] + (0 if b is None else self._batches - b)

    def id_of(self, key: Node) -> int:
        """Node id of a networkx key (``("ev", i)`` or ``("fv", path, k)``)."""
        m = self._id_map
        for nid in range(len(m), len(self.keys)):
            m[self.keys[nid]] = nid
        return m[key]

    def key(self, nid: int) -> Node:
        """The networkx key of node id ``nid``."""
        return self.keys[nid]

    def descends_from_epoch(self, node: Node | int, epoch: int) -> bool:
        """Whether ``node`` has a strict ancestor created in ``epoch`` (O(1))."""
        nid = node if isinstance(node, int) else self.id_of(node)
        return bool((self.anc[nid] >> epoch) & 1)


def build_graph(events: Iterable[Event], families: Iterable[EdgeFamily | str] = DEFAULT_FAMILIES,
                root: str | None = None) -> ProvenanceGraph:
    """Convenience: a graph of all ``events`` (no checkpoints, one epoch)."""
    pg = ProvenanceGraph(families, root)
    for e in events:
        pg.add_event(e)
    return pg
