"""mini-swe-agent under the harness: its trajectory file, watched live, as harness reports.

mini-swe-agent 2.4 prints console text only; what it records is its trajectory file (``-o``,
format ``mini-swe-agent-1.1``), which ``DefaultAgent.run`` rewrites whole after every step
(one model call and the actions it asked for, run one after another), before its next model
request. So a live run is learned of from two sources, read by :func:`watch_trajectory`:

* **the file**, polled: each rewrite (a whole step; a torn read is retried) becomes one
  ``{"type": "trajectory", ...}`` line naming a snapshot copy of it, with the tool results
  it adds and whether the run ended (an ``exit`` message);
* **the process tree**, polled while a model answer is out and its results are not in the
  file yet: the first child process of the runtime (``LocalEnvironment`` runs each action as
  ``sh -c`` in a session of its own) is a tool that started, a ``{"type": "tool.started"}``
  line. A tool over before the poll saw it is reported just before the step's results, so
  every step with actions has one.

:class:`MiniLineParser` maps the snapshots to events through the readers' mapping of the
format (:func:`features.readers.mini_swe_agent.read_mini_swe_agent`, the one mapping, the
same as reading the file afterwards): each snapshot's events past those already reported,
their times moved from mini-swe-agent's epoch stamps to the run's clock. A command that got
its result is a safe boundary (tool-call granularity); several actions of one step are
reported together, after the step (mini-swe-agent runs them without a model call between).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from features.readers.mini_swe_agent import read_mini_swe_agent
from features.readers.stream import StreamParser
from oracle.agents.runtimes import MiniSweAgent
from oracle.agents.stream_reports import StreamReports

__all__ = ["MiniLineParser", "TrajectoryStream", "trajectory_results", "watch_trajectory"]

def trajectory_results(text: str) -> list[str] | None:
    """The ``tool_call_id`` of every tool message of a trajectory's text (None: not whole
    JSON, e.g. read while being rewritten)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    messages = doc.get("messages") if isinstance(doc, dict) else None
    if not isinstance(messages, list):
        return None
    return [str(m.get("tool_call_id")) for m in messages
            if isinstance(m, dict) and m.get("role") == "tool"]


def _ended(messages: list[Any]) -> bool:
    return bool(messages) and isinstance(messages[-1], dict) and messages[-1].get("role") == "exit"


def watch_trajectory(path: Path, snapshots: Path, *, running: Callable[[], bool],
                     tools: Callable[[], list[int]], answers: Callable[[], int],
                     clock: Callable[[], float], restored: Path | None = None,
                     poll_s: float = 0.01) -> Iterator[dict]:
    """Lines (see the module docstring) of a run that writes its trajectory to ``path``,
    until the run has ended (``running()`` false) and its last rewrite was read.

    ``tools()``: the run's tool processes; ``answers()``: model answers sent so far;
    ``restored``: the trajectory a resumed run started from (its messages are history).
    """
    snapshots.mkdir(parents=True, exist_ok=True)
    seen = 0
    if restored is not None:
        seen = len(json.loads(restored.read_text())["messages"])
        yield {"type": "restored", "path": str(restored)}
    last: tuple[int, int] | None = None
    tool_for = answers()  # the answer whose tool was last reported
    k = 0
    while True:
        alive = running()  # before reading: the last read after the end sees the last rewrite
        try:
            st = path.stat()
            sig: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            sig = None
        if sig is not None and sig != last:
            text = path.read_text(errors="replace")
            ids = trajectory_results(text)
            if ids is not None:  # else torn (being rewritten): read again
                last = sig
                messages = json.loads(text)["messages"]
                new = messages[seen:]
                if new:
                    results = [str(m.get("tool_call_id")) for m in new if m.get("role") == "tool"]
                    if (results or _ended(new)) and tool_for < answers():
                        tool_for = answers()
                        yield {"type": "tool.started", "seen": False}
                    k += 1
                    snap = snapshots / f"{k:04d}.traj.json"
                    snap.write_text(text)
                    seen = len(messages)
                    yield {"type": "trajectory", "path": str(snap), "messages": seen,
                           "tool_results": results, "ended": _ended(messages),
                           "epoch": time.time(), "clock": clock()}
        if tool_for < answers() and tools():
            tool_for = answers()
            yield {"type": "tool.started", "seen": True}
        if not alive:
            return
        time.sleep(poll_s)


class TrajectoryStream(StreamParser):
    """Trajectory snapshots (``trajectory`` lines) to the events they add, final as they
    come: the events of :func:`read_mini_swe_agent` past those already released, in the run's
    clock; a snapshot's last event ends its turn when the run has ended there (as a file read
    marks it), else not (the turn goes on). A ``restored`` line names the history."""

    FORMAT = "mini-swe-agent"

    def __init__(self, *, source: str | Path = "mini-swe-agent trajectory") -> None:
        super().__init__(source=source)
        self._seen = 0

    def on_record(self, obj: dict[str, Any], lineno: int, arrival: float | None) -> None:
        kind = obj.get("type")
        if kind == "restored":
            self._seen = len(read_mini_swe_agent(obj["path"]).events)
            return
        if kind != "trajectory":
            return
        events = read_mini_swe_agent(obj["path"]).events
        new, self._seen = events[self._seen:], len(events)
        clock = float(obj["clock"])
        offset = clock - float(obj["epoch"])
        for i, ev in enumerate(new):
            ev.start = None if ev.start is None else ev.start + offset
            ev.end = clock if ev.start is None and ev.end is None else \
                None if ev.end is None else ev.end + offset
            self.emit(ev, ev.turn_end if i + 1 < len(new) else bool(obj.get("ended")))


class MiniLineParser(StreamReports):
    """The watch's lines to reports, one line at a time (stateful per run)."""

    def __init__(self) -> None:
        super().__init__(TrajectoryStream())

    @property
    def session_id(self) -> str:
        """What a resume names: the trajectory file (mini-swe-agent has no session id)."""
        return MiniSweAgent.trajectory
