"""Making and finishing events: the event kind of a command, safe-boundary marks, test counts,
logical steps, and the trajectory every reader ends with (numbered, times flagged, totals,
validated)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from features.readers.errors import EmptyTrajectoryWarning, TimeOrderWarning, TrajectoryFormatError
from features.readers.files import reading_path
from features.readers.testcounts import parse_test_counts
from features.schema import BoundaryKind, Event, EventKind, Trajectory
from features.shell import clear_cache as clear_shell_cache
from features.shell import is_git_commit, is_test_command


@lru_cache(maxsize=4096)
def _is_test_text(command: str) -> bool:
    return is_test_command(command)


@lru_cache(maxsize=4096)
def _is_commit_text(command: str) -> bool:
    return is_git_commit(command)


def clear_caches() -> None:
    """Forget every remembered verdict and split of a command (the shell parser's too), so
    that a benchmark reads each log cold, as a fresh process would."""
    _is_test_text.cache_clear()
    _is_commit_text.cache_clear()
    clear_shell_cache()


def classify_command(command: str | None, argv: list[str] | None) -> EventKind:
    """``test`` for a test command, else ``command``: the shell parser's verdict on the
    command string (else the argv), the same the provenance graph reaches. Verdicts on
    command strings are remembered (agents rerun the same tests, status and diff commands
    many times a session)."""
    if isinstance(command, str) and command:
        is_test = _is_test_text(command)
    else:
        is_test = is_test_command(argv)
    return EventKind.TEST if is_test else EventKind.COMMAND


def mark_tool_return(e: Event) -> None:
    """Mark ``e`` as a safe boundary: a tool has returned after it.

    The kind is ``test`` for test events, ``commit`` for a ``git commit`` that did not
    fail (exit code 0 or unknown, and not an error), else ``tool_return``.
    """
    e.safe_boundary = True
    if e.kind == EventKind.TEST:
        e.boundary_kind = BoundaryKind.TEST
    elif (
        e.kind == EventKind.COMMAND
        and not e.is_error
        and e.exit_code in (0, None)
        and (_is_commit_text(e.command) if isinstance(e.command, str) and e.command
             else is_git_commit(e.argv))
    ):
        e.boundary_kind = BoundaryKind.COMMIT
    else:
        e.boundary_kind = BoundaryKind.TOOL_RETURN


def apply_test_counts(e: Event, output: str | None) -> None:
    """Fill tests_passed/failed on a test event from its visible output."""
    if e.kind == EventKind.TEST:
        p, f = parse_test_counts(output)
        e.tests_passed, e.tests_failed = p, f


def utf8_len(s: str | None) -> int | None:
    return None if s is None else len(s.encode("utf-8"))



def new_step_on_user_input(state: dict[str, Any]) -> None:
    """Advance the logical step at a user input if the agent acted since the last one.

    ``state`` holds ``step`` (current, starts at 1) and ``agent_acted`` (bool).
    """
    if state["agent_acted"]:
        state["step"] += 1
        state["agent_acted"] = False


def finish(
    task_id: str,
    repo: str,
    source_format: str,
    events: list[Event],
    meta: dict[str, Any],
    *,
    path: Path | None = None,
) -> Trajectory:
    """Number events, mark ``turn_end`` on each step's last event, then :func:`seal` (times
    that run backwards flagged, totals, validation, a warning for no events)."""
    n = len(events)
    for i, e in enumerate(events):
        e.index = i
        e.turn_end = i + 1 == n or events[i + 1].step != e.step
    return seal(task_id, repo, source_format, events, meta, path=path)


def seal(
    task_id: str,
    repo: str,
    source_format: str,
    events: list[Event],
    meta: dict[str, Any],
    *,
    path: Path | None = None,
    time_flagged: list[int] | None = None,
) -> Trajectory:
    """The trajectory of numbered events, as every reader ends: flag times that run
    backwards (see :func:`flag_times`; ``time_flagged``: the indices a streaming parser
    already flagged with :func:`time_flags` as it released them), add totals, validate (a
    value no table column can hold raises a :class:`TrajectoryFormatError` naming
    ``path``). No events at all is an :class:`EmptyTrajectoryWarning`."""
    if path is None:
        path = reading_path()
    where = str(path) if path is not None else task_id
    if time_flagged is None:
        flag_times(events, meta, where)
    else:
        _warn_time_flags(time_flagged, meta, where)
    if not events:
        warnings.warn(f"{where}: the log holds no events", EmptyTrajectoryWarning, stacklevel=3)
    meta.setdefault("totals", {}).update(totals(events))
    traj = Trajectory(task_id, repo, source_format, events, meta)
    try:
        traj.validate()
    except ValueError as exc:
        raise TrajectoryFormatError(f"{path}: {exc}" if path is not None else str(exc)) from exc
    return traj


def time_flags(e: Event, latest: float | None) -> tuple[list[str], float | None]:
    """The time flags of one event given the latest end of the events before it, and the
    latest end including it (see :func:`flag_times`; for parsers that release events one
    by one)."""
    flags: list[str] = []
    if e.end is not None:
        if e.start is not None and e.end < e.start:
            flags.append("end_before_start")
        if latest is not None and e.end < latest:
            flags.append("end_before_previous")
        latest = e.end if latest is None or e.end > latest else latest
    return flags, latest


def flag_times(events: Sequence[Event], meta: dict[str, Any], where: str) -> None:
    """Keep and flag times that run backwards (clocks jump; refusing would lose real logs):
    an event that ends before it starts (``"end_before_start"``), or ends before an earlier
    event ended (``"end_before_previous"``; events sit where their result arrived, so ends
    only grow). Flags go to ``extra["time_flags"]``, the flagged indices to
    ``meta["time_flags"]``, with one :class:`TimeOrderWarning`. Starts are not compared
    across events: a model call's start may come from the provider's clock."""
    latest: float | None = None
    flagged: list[int] = []
    for e in events:
        flags, latest = time_flags(e, latest)
        if flags:
            e.extra["time_flags"] = flags
            flagged.append(e.index)
    _warn_time_flags(flagged, meta, where)


def _warn_time_flags(flagged: list[int], meta: dict[str, Any], where: str) -> None:
    if flagged:
        meta["time_flags"] = flagged
        warnings.warn(f"{where}: times run backwards at {len(flagged)} event(s) (first: event "
                      f"{flagged[0]}); kept and flagged in extra['time_flags']",
                      TimeOrderWarning, stacklevel=5)


def totals(events: Sequence[Event]) -> dict[str, Any]:
    """Counts and token sums over events (token sums are None when no event has tokens)."""
    kinds = dict.fromkeys(EventKind, 0)
    errors = boundaries = 0
    steps: set[int] = set()
    t_in: int | None = None
    t_cached: int | None = None
    t_out: int | None = None
    for e in events:
        kinds[e.kind] += 1
        errors += e.is_error
        boundaries += e.safe_boundary
        steps.add(e.step)
        if (v := e.input_tokens) is not None:
            t_in = v if t_in is None else t_in + v
        if (v := e.cached_tokens) is not None:
            t_cached = v if t_cached is None else t_cached + v
        if (v := e.output_tokens) is not None:
            t_out = v if t_out is None else t_out + v
    tokens = (t_in, t_cached, t_out)
    out: dict[str, Any] = {"events": len(events)}
    out.update({f"n_{k.value}": n for k, n in kinds.items()})
    out["n_errors"] = errors
    out["n_safe_boundaries"] = boundaries
    out["steps"] = len(steps)
    out.update(zip(("input_tokens", "cached_tokens", "output_tokens"), tokens, strict=True))
    return out

