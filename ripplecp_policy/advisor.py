"""The advisor: a learned placement policy at work in a live runtime.

An :class:`Advisor` follows one agent session. Log lines go in (any line-oriented format,
through that format's streaming parser, :func:`features.readers.stream_parser`); the online
features are kept incrementally (one :class:`features.online.OnlineFeatureExtractor`); at
every safe boundary (each tool return: the runtime can only act *now*, so every boundary
the log marks safe is a candidate) the policy answers CP or SKIP under the budget, through
the one episode runner's budget check (:class:`ripplecp_policy.episode.Episode`). On CP the
workspace is checkpointed with the toolkit's store (:class:`oracle.store.checkpoint.CheckpointStore`)
and the extractor marks the checkpoint, so later features see the placement actually taken.

What a checkpoint is charged: 1 for a count budget; for a seconds / bytes budget the
*measured* creation seconds / stored bytes of the checkpoint just taken (the decision itself
uses an estimate: the previous checkpoint's measured cost, else the model's mean training
cost). Without a store the decision is still made and charged the estimate (a dry run).

Every decision is one JSON line of the decision log (:class:`Decision`): the boundary, a
digest of the features, the score, CP/SKIP, the budget left, the reason and, on CP, the
checkpoint id and its measured cost. **Fail-open**: any error (a line that does not parse, a
model that does not load or raises, a checkpoint that fails) means SKIP with the reason
logged; the agent's session never breaks.

A policy is loaded once (:func:`load_model`) from an MLflow model URI (``runs:/…``,
``models:/…``, needing the tracking URI: :func:`ripplecp_policy.tracking.tracking_uri`) or a
local model folder, then called in-process: a boundary costs the feature update and one
policy decision, not a pyfunc ``predict`` on a DataFrame.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import math
import os
import stat
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from features.online import FEATURE_NAMES, OnlineFeatureExtractor, config_for
from features.readers import READERS, StreamParser, stream_parser
from features.schema import Event, Trajectory
from oracle.store.checkpoint import DEFAULT_EXCLUDES, CheckpointStore
from ripplecp_policy.advisor_lines import MAX_LINE_BYTES, LineSplitter
from ripplecp_policy.episode import Episode
from ripplecp_policy.export import (
    load_policy_model,
    out_of_range_share,
    policy_score,
    runtime_of_format,
)
from ripplecp_policy.policy import Budget, BudgetSpec, PlacementPolicy

__all__ = ["CP", "MAX_TRANSCRIPT_BYTES", "SKIP", "Advisor", "AdvisorModel", "Decision",
           "DecisionLog", "ProvenanceWarning", "TranscriptError", "TranscriptTail", "detect_line_format",
           "features_digest", "load_model", "read_decisions", "resolve_budget",
           "session_lock", "store_for"]

CP, SKIP = "CP", "SKIP"


@dataclass(frozen=True)
class AdvisorModel:
    """A loaded placement policy and the config saved with it (budget, features, ranges)."""

    policy: PlacementPolicy
    config: Mapping[str, Any]
    uri: str


def load_model(uri: str | Path, *, mlruns: str | Path | None = None,
               allow_pickle: bool = False, cache: str | Path | None = None,
               refresh: bool = False) -> AdvisorModel:
    """Load an exported policy (:func:`ripplecp_policy.export.log_policy_model`) once, to be
    called in-process: ``uri`` is an MLflow model URI or a local model folder; ``runs:/``
    and ``models:/`` URIs are read from the store at ``mlruns`` (default:
    ``$RIPPLECP_MLRUNS`` or ``./mlruns``). The policy is rebuilt from its stored numbers
    (:func:`ripplecp_policy.export.load_policy_model`): nothing stored with it runs, and a
    pickle is refused unless ``allow_pickle``. ``cache``, ``refresh``: a model kept out of
    the store (see :func:`~ripplecp_policy.export.load_policy_model`)."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # no bar per load
    os.environ.setdefault("MLFLOW_DISABLE_AGENT_HINT", "1")
    text = str(uri)
    loaded = load_policy_model(text, mlruns, allow_pickle=allow_pickle, cache=cache,
                               refresh=refresh)
    if not isinstance(loaded.policy, PlacementPolicy):
        raise ValueError(f"{text}: not a ripplecp placement policy model (no policy inside)")
    return AdvisorModel(loaded.policy, dict(loaded.config), text)


def resolve_budget(spec: BudgetSpec | str | None, config: Mapping[str, Any]) -> Budget:
    """The budget to follow a session under: ``spec`` (``count:2``, ``seconds:30``; a relative
    ``Kx`` is K times the model's mean training checkpoint cost), else the model's own."""
    if spec is None:
        return Budget(config["budget_kind"], float(config["budget_amount"]))
    if isinstance(spec, str):
        spec = BudgetSpec.parse(spec)
    amount = spec.amount
    if spec.relative:
        if config.get("budget_kind") != spec.kind:
            raise ValueError(f"a relative {spec.kind} budget needs a model trained under a "
                             f"{spec.kind} budget (its mean cost); this one was trained "
                             f"under {config.get('budget_kind')}")
        amount = spec.amount * float(config["default_checkpoint_cost"])
    return Budget(spec.kind, float(amount))


def detect_line_format(record: Mapping[str, Any]) -> str | None:
    """The line-oriented format whose first record ``record`` is (None: none matches)."""
    for spec in READERS:
        if spec.layout == "jsonl" and spec.parser is not None and spec.detect(record):
            return spec.name
    return None


class ProvenanceWarning(UserWarning):
    """A policy following a runtime or log format it was not trained on."""


@dataclass
class Decision:
    """One line of the decision log. ``boundary`` is None for an error between boundaries
    (a line that does not parse); ``remaining_budget`` is what is left after this decision."""

    session: str
    boundary: int | None
    event_index: int | None
    step: int | None
    features_sha256: str | None
    score: float | None
    decision: str
    remaining_budget: float
    reason: str
    charge: float | None = None
    checkpoint_id: str | None = None
    creation_s: float | None = None
    size_bytes: int | None = None
    state_digest: str | None = None
    out_of_range: float | None = None
    decide_ms: float | None = None
    t: float = field(default_factory=time.time)

    def to_json(self) -> str:
        d = asdict(self)
        for k in ("score", "out_of_range"):
            if isinstance(d[k], float) and not math.isfinite(d[k]):
                d[k] = None
        return json.dumps(d, sort_keys=True)


#: the longest decision-log line read back (a record is a few hundred bytes)
MAX_RECORD_BYTES = 1 << 20


def read_decisions(path: str | Path, session: str | None = None) -> list[dict[str, Any]]:
    """The records of a decision log (of one ``session`` when given); a missing file is
    empty. Fail-open: a line that is not a record (a tail torn by a full disk or a kill, a
    corrupt line) is skipped, so one bad line never disables the advisor."""
    path = Path(path)
    out = []
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return []
    with f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ValueError(f"{path}: the decision log is not a regular file")
        while line := f.readline(MAX_RECORD_BYTES):
            if not line.endswith(b"\n"):
                if len(line) == MAX_RECORD_BYTES:  # an over-long line: skip the rest of it
                    while (more := f.readline(MAX_RECORD_BYTES)) and not more.endswith(b"\n"):
                        pass
                continue  # a torn tail or an over-long line
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and (session is None or rec.get("session") == session):
                out.append(rec)
    return out


class DecisionLog:
    """A decision log that many writers append to at once (hook calls, the server's
    threads): each record is one ``write`` of a whole line under an exclusive lock, a torn
    tail (a full disk, a writer killed mid-line) is cut before the next record, and a write
    that fails is undone, so the log only ever holds whole lines."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
                           | os.O_NONBLOCK, 0o644)
        if not stat.S_ISREG(os.fstat(self._fd).st_mode):
            os.close(self._fd)
            raise ValueError(f"{self.path}: the decision log is not a regular file")

    def append(self, line: str) -> None:
        """Append one record (a line without its newline); OSError (nothing written) when
        the disk refuses it."""
        data = line.encode() + b"\n"
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            size = self._repair()
            try:
                if os.write(self._fd, data) != len(data):
                    raise OSError(errno.ENOSPC, "short write")
            except OSError:
                os.ftruncate(self._fd, size)
                raise
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _repair(self) -> int:
        """Cut a torn last line; the size after."""
        size = os.fstat(self._fd).st_size
        if size == 0 or os.pread(self._fd, 1, size - 1) == b"\n":
            return size
        end = size
        while end > 0:
            start = max(0, end - 65536)
            cut = os.pread(self._fd, end - start, start).rfind(b"\n")
            if cut >= 0:
                end = start + cut + 1
                break
            end = start
        os.ftruncate(self._fd, end)
        return end

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> DecisionLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def session_lock(log: str | Path) -> Iterator[None]:
    """Hold the decision log's lock file (``<log>.lock``) for a whole hook call: calls on
    one log (hook processes run in parallel, the server's threads) decide one at a time, so
    a boundary is decided once."""
    lock = Path(str(log) + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class TranscriptError(ValueError):
    """A transcript the advisor will not read: not a regular file, or over the size limit."""


#: what one session's transcript may hold for the advisor to follow it (a line: MAX_LINE_BYTES)
MAX_TRANSCRIPT_BYTES = 64 * 2**20


class TranscriptTail:
    """The complete lines a session file gained since the last :meth:`read`, within bounds:
    a regular file only (a FIFO, a device such as ``/dev/zero`` or a directory is refused
    at once, never read), at most ``max_bytes`` in all and ``max_line`` per line (a longer
    line is dropped and counted), a partial last line kept for the next read."""

    def __init__(self, path: str | Path, *, max_bytes: int = MAX_TRANSCRIPT_BYTES,
                 max_line: int = MAX_LINE_BYTES) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.max_line = max_line
        self.offset = 0
        self._lines = LineSplitter(max_line)

    def read(self, limit: int | None = None) -> list[bytes]:
        """The new complete lines (reading at most ``limit`` new bytes); TranscriptError
        for a file that is not to be read."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise TranscriptError(f"transcript {self.path}: {exc.strerror}") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise TranscriptError(f"transcript {self.path}: not a regular file; not followed")
            if st.st_size > self.max_bytes:
                raise TranscriptError(f"transcript {self.path}: {st.st_size / 2**20:.0f} MiB, over "
                                      f"the {self.max_bytes / 2**20:.0f} MiB the advisor follows")
            if st.st_size < self.offset:
                raise TranscriptError(f"transcript {self.path}: shrank from {self.offset} to "
                                      f"{st.st_size} bytes; not followed")
            end = st.st_size if limit is None else min(st.st_size, self.offset + limit)
            lines: list[bytes] = []
            while self.offset < end:
                chunk = os.pread(fd, min(1 << 20, end - self.offset), self.offset)
                if not chunk:
                    break
                self.offset += len(chunk)
                lines += (x for x in self._lines.split(chunk) if x is not None)
            return lines
        finally:
            os.close(fd)

    @property
    def dropped(self) -> int:
        """Over-long lines dropped since it was last set to 0."""
        return self._lines.dropped

    @dropped.setter
    def dropped(self, n: int) -> None:
        self._lines.dropped = n


def features_digest(values: Sequence[float]) -> str:
    """The log's digest of a feature row (sha256 of its float64 bytes, 16 hex digits)."""
    return hashlib.sha256(np.asarray(values, dtype=np.float64).tobytes()).hexdigest()[:16]


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"


class Advisor:
    """Follow one session: :meth:`feed` log lines as they arrive, :meth:`finish` at the end.

    ``model``: the loaded policy, or None with ``load_error`` saying why (every boundary is
    then SKIP with that reason). ``budget``: the cap (default: the model's own). ``format``:
    the log's format (default: detected from the first line). ``log``: the decision log
    (a path, appended to, or an open text file). ``store`` + ``workspace``: where a CP puts
    the checkpoint of which folder (without a store, decisions only). ``prior``: records of
    this session already in the log (a hook that re-reads its transcript on every call):
    their boundaries are not decided again, their checkpoints are marked. ``catch_up``:
    decide only the newest boundary seen by :meth:`finish` (older undecided ones are logged
    SKIP, reason ``past``: the runtime can no longer checkpoint there).
    """

    def __init__(self, model: AdvisorModel | None, budget: Budget | None = None, *,
                 format: str | None = None, log: str | Path | IO[str] | None = None,
                 store: CheckpointStore | None = None, workspace: str | Path | None = None,
                 session: str | None = None, source: str | Path = "<stream>", seed: int = 0,
                 load_error: str | None = None, prior: Iterable[Mapping[str, Any]] = (),
                 catch_up: bool = False, runtime: str | None = None) -> None:
        if model is None and load_error is None:
            raise ValueError("Advisor: give a model, or the load_error that left it without one")
        self.model = model
        self.load_error = load_error
        if budget is None:
            budget = resolve_budget(None, model.config) if model is not None else Budget("count", 0)
        self.budget = budget
        self.format = format
        self.store = store
        self.workspace = Path(workspace) if workspace is not None else None
        if store is not None and self.workspace is None:
            raise ValueError("Advisor: a store needs the workspace it checkpoints")
        self.session = session
        self.source = source
        self.seed = seed
        self.catch_up = catch_up
        self.runtime = runtime
        self.mismatch: str | None = None  # the runtime / format the policy was not trained on
        self.decisions: list[Decision] = []
        self._prior = {int(r["boundary"]): r for r in prior if r.get("boundary") is not None}
        self._own_log = False
        self._log: IO[str] | DecisionLog | None
        if log is None or hasattr(log, "write") or isinstance(log, DecisionLog):
            self._log = log  # type: ignore[assignment]
        else:
            self._log = DecisionLog(log)
            self._own_log = True
        self._parser: StreamParser | None = None
        self._extractor: OnlineFeatureExtractor | None = None
        self._episode: Episode | None = None
        self._boundary = 0
        self._pending: tuple[Event, list[float]] | None = None
        # the transcript so far, as it came (kept with a store, parsed at a checkpoint)
        self._records: list[str | bytes | Mapping[str, Any]] = []
        self._estimate: float | None = None
        self._ranges = (model.config.get("feature_ranges") if model is not None else None) or {}
        self._ood_warned = False
        self._broken: str | None = None  # the parser failed for good: the reason
        self._finished = False

    # -- the public face -------------------------------------------------------------------
    @property
    def checkpoints(self) -> list[Decision]:
        """The decisions that took a checkpoint."""
        return [d for d in self.decisions if d.decision == CP]

    @property
    def episode(self) -> Episode | None:
        """The session's episode (its budget ledger), once the first event arrived."""
        return self._episode

    @property
    def remaining(self) -> float:
        """The budget left."""
        spent = self._episode.spent if self._episode is not None else 0.0
        return self.budget.amount - spent

    def feed(self, line: str | bytes | Mapping[str, Any], arrival_s: float | None = None) -> list[Decision]:
        """One log line; returns the decisions it led to (often none). Never raises."""
        before = len(self.decisions)
        try:
            self._feed(line, arrival_s)
        except Exception as exc:  # fail-open: the line is lost, the session goes on
            self._error(f"error: {_short(exc)}")
        return self.decisions[before:]

    def finish(self) -> list[Decision]:
        """End of the stream: release what the parser holds, decide a pending boundary,
        close the log. Never raises; returns the decisions made here."""
        before = len(self.decisions)
        if self._finished:
            return []
        self._finished = True
        try:
            if self._parser is not None and self._broken is None:
                for ev in self._parser.flush():
                    self._event(ev)
            if self._pending is not None:
                ev, values = self._pending
                self._pending = None
                self._decide(ev, values)
        except Exception as exc:
            self._error(f"error: {_short(exc)}")
        self.close()
        return self.decisions[before:]

    def decide_pending(self) -> list[Decision]:
        """The runtime is at a boundary now (a hook call): decide the newest boundary seen
        and not yet decided (catch-up mode). Never raises; returns the decisions made."""
        before = len(self.decisions)
        if self._pending is not None:
            ev, values = self._pending
            self._pending = None
            try:
                self._decide(ev, values)
            except Exception as exc:  # fail-open
                self._error(f"error: {_short(exc)}")
        return self.decisions[before:]

    def skip_pending(self, reason: str) -> list[Decision]:
        """Log the newest undecided boundary (catch-up mode) SKIP with ``reason``."""
        before = len(self.decisions)
        if self._pending is not None:
            ev, values = self._pending
            self._pending = None
            self._log_skip(ev, self._boundary, values, reason)
        return self.decisions[before:]

    def error(self, reason: str) -> Decision:
        """Log an error between boundaries (``boundary`` None, SKIP, ``reason``): what a
        caller that could not feed the advisor (a transcript not to be read) records."""
        self._error(reason)
        return self.decisions[-1]

    def close(self) -> None:
        """Close the decision log if the advisor opened it."""
        if self._own_log and self._log is not None:
            self._log.close()
            self._own_log = False

    def __enter__(self) -> Advisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()

    # -- following the stream ----------------------------------------------------------------
    def _feed(self, line: str | bytes | Mapping[str, Any], arrival_s: float | None) -> None:
        if self._broken is not None:
            return
        if self._parser is None:
            obj = line if isinstance(line, Mapping) else self._first_record(line)
            if obj is None:
                return  # a blank line before the first record
            fmt = self.format or detect_line_format(obj)
            if fmt is None:
                self._broken = (f"error: {self.source}: unknown log format (first record "
                                f"{str(obj)[:80]!r})")
                self._error(self._broken)
                return
            self._parser = stream_parser(fmt, source=self.source, task_id=self.session)
            line = obj
        if self.store is not None:
            self._records.append(line)
        for ev in self._parser.feed(line, arrival_s=arrival_s):
            self._event(ev)

    @staticmethod
    def _first_record(line: str | bytes) -> dict[str, Any] | None:
        text = line.decode("utf-8") if isinstance(line, bytes) else line
        if not text.strip():
            return None
        obj = json.loads(text)
        if not isinstance(obj, dict):
            raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
        return obj

    def _start(self) -> None:
        parser = self._parser
        assert parser is not None
        if self.session is None:
            self.session = parser.task_id or parser.task_default()
        meta_traj = Trajectory(self.session, "unknown", parser.FORMAT, [], dict(parser.meta))
        fitted = getattr(self.model.policy, "setting_", None) if self.model else None
        base = fitted.features if fitted is not None else None
        self._extractor = OnlineFeatureExtractor(config_for(meta_traj, base))
        self._episode = Episode(self.session, "unknown", self.budget, prior=self._charge_estimate())
        self._check_provenance(parser.FORMAT)
        if self.model is not None:
            self.model.policy.reset(self.session, self.seed)

    def _event(self, ev: Event) -> None:
        if self._extractor is None:
            self._start()
        assert self._extractor is not None
        self._extractor.observe(ev)
        if not ev.safe_boundary:
            return
        values = self._extractor.feature_vector()
        self._boundary += 1
        if self._boundary in self._prior:
            self._replay(self._prior[self._boundary])
            return
        if self.catch_up:
            if self._pending is not None:
                old, old_values = self._pending
                self._log_skip(old, self._boundary - 1, old_values, "past: a later boundary "
                               "was already reached when the advisor saw it")
            self._pending = (ev, values)
            return
        self._decide(ev, values)

    def _replay(self, rec: Mapping[str, Any]) -> None:
        """A boundary decided by an earlier call: account its checkpoint, mark it."""
        assert self._episode is not None and self._extractor is not None
        if rec.get("decision") == CP:
            self._episode.replay(self._boundary, float(rec.get("charge") or 0.0))
            self._estimate = float(rec.get("charge") or 0.0) if self.budget.kind != "count" else None
            self._extractor.mark_checkpoint()

    def _check_provenance(self, fmt: str) -> None:
        """Warn once when the session's runtime or log format is not the one the policy was
        trained on (the model's ``training_runtime`` / ``log_format``)."""
        cfg = self.model.config if self.model is not None else {}
        trained_formats = cfg.get("log_format") or []
        trained_runtimes = cfg.get("training_runtime") or []
        runtime = self.runtime or runtime_of_format(fmt)
        why = []
        if trained_runtimes and runtime not in trained_runtimes:
            why.append(f"runtime {runtime} (trained on {', '.join(trained_runtimes)})")
        elif trained_formats and fmt not in trained_formats:
            why.append(f"log format {fmt} (trained on {', '.join(trained_formats)})")
        if why:
            self.mismatch = f"the policy follows {why[0]}: its decisions may not transfer"
            warnings.warn(f"{self.source}: {self.mismatch}", ProvenanceWarning, stacklevel=2)

    # -- deciding ---------------------------------------------------------------------------
    def _charge_estimate(self) -> float:
        if self.budget.kind == "count":
            return 1.0
        if self._estimate is not None:
            return self._estimate
        cfg = self.model.config if self.model is not None else {}
        return float(cfg.get("default_checkpoint_cost", 1.0))

    def _decide(self, ev: Event, values: list[float]) -> None:
        assert self._episode is not None and self._extractor is not None
        b = self._boundary  # a pending (catch-up) boundary is always the newest
        if self.model is None:
            self._log_skip(ev, b, values, f"advisor disabled: {self.load_error}")
            return
        t0 = time.perf_counter()
        ep = self._episode
        charge = self._charge_estimate()
        try:
            features = dict(zip(FEATURE_NAMES, values, strict=True))
            obs = ep.observe(b, event_index=ev.index, features=features, elapsed_s=math.nan,
                             charge=charge)
            policy = self.model.policy
            wants = bool(policy.decide(obs))
            score = policy_score(policy, obs)
        except Exception as exc:  # fail-open
            self._log_skip(ev, b, values, f"error: policy: {_short(exc)}")
            return
        ood = self._out_of_range(features)
        decide_ms = (time.perf_counter() - t0) * 1e3
        if not wants:
            why = "policy" if obs.affordable else "policy (the budget left does not fit one)"
            self._log_skip(ev, b, values, why, score=score, ood=ood, decide_ms=decide_ms)
            return
        if not ep.offer(b, charge):
            self._log_skip(ev, b, values, "over budget: the policy asked, the budget refused",
                           score=score, ood=ood, decide_ms=decide_ms)
            return
        rec = Decision(self.session or "", b, ev.index, ev.step, features_digest(values), score, CP,
                       0.0, "policy", charge=charge, out_of_range=ood, decide_ms=decide_ms)
        if self.store is not None:
            try:
                info = self._checkpoint(b, ev)
            except Exception as exc:  # fail-open: nothing was taken, nothing is charged
                ep.cancel()
                self._log_skip(ev, b, values, f"error: checkpoint: {_short(exc)}", score=score,
                               ood=ood, decide_ms=decide_ms)
                return
            measured = self.budget.charge(info.creation_s, info.size_bytes)
            ep.settle(measured)
            rec.charge = measured
            rec.checkpoint_id = info.checkpoint_id
            rec.creation_s = info.creation_s
            rec.size_bytes = info.size_bytes
            rec.state_digest = info.state_digest
            if self.budget.kind != "count":
                self._estimate = measured
        else:
            rec.reason = "policy (dry run: no store, nothing checkpointed)"
        self._extractor.mark_checkpoint()
        rec.remaining_budget = self.remaining
        self._write(rec)

    def _checkpoint(self, boundary: int, ev: Event) -> Any:
        assert self.store is not None and self.workspace is not None
        facts = {"advisor": {"session": self.session, "boundary": boundary,
                             "event_index": ev.index, "step": ev.step,
                             "model": self.model.uri if self.model else None,
                             "source": str(self.source)}}
        transcript = []
        for r in self._records:
            if not isinstance(r, Mapping):
                try:
                    r = self._first_record(r)
                except ValueError:  # a line that did not parse was logged when it came
                    continue
            if r is not None:
                transcript.append(dict(r))
        return self.store.create(self.workspace, transcript, facts)

    def _out_of_range(self, features: Mapping[str, float]) -> float | None:
        if not self._ranges:
            return None
        share = out_of_range_share(features, self._ranges)
        if share > 0 and not self._ood_warned:
            self._ood_warned = True
            warnings.warn(f"{self.source}: {share:.0%} of the features at boundary "
                          f"{self._boundary} lie outside the range the policy was trained on",
                          stacklevel=2)
        return share

    # -- the log ----------------------------------------------------------------------------
    def _log_skip(self, ev: Event, boundary: int, values: list[float], reason: str, *,
                  score: float | None = None, ood: float | None = None,
                  decide_ms: float | None = None) -> None:
        self._write(Decision(self.session or "", boundary, ev.index, ev.step, features_digest(values),
                             score, SKIP, self.remaining, reason, out_of_range=ood,
                             decide_ms=decide_ms))

    def _error(self, reason: str) -> None:
        self._write(Decision(self.session or "", None, None, None, None, None, SKIP,
                             self.remaining, reason))

    def _write(self, rec: Decision) -> None:
        self.decisions.append(rec)
        if self._log is not None:
            try:
                if isinstance(self._log, DecisionLog):
                    self._log.append(rec.to_json())
                else:
                    self._log.write(rec.to_json() + "\n")
                    self._log.flush()
            except Exception:  # fail-open: a full disk must not stop the agent
                pass


def store_for(root: str | Path, workspace: str | Path) -> CheckpointStore:
    """A checkpoint store at ``root`` for ``workspace``; a store inside the workspace is
    excluded from its own checkpoints."""
    root, workspace = Path(root).resolve(), Path(workspace).resolve()
    exclude = list(DEFAULT_EXCLUDES)
    if root.is_relative_to(workspace) and root != workspace:
        exclude.append(str(root.relative_to(workspace)) + "/")
    return CheckpointStore(root, exclude=exclude)
