"""The one shape of a log reader: a :class:`StreamParser` per format, records in, events out.

Every line-oriented format (``codex exec --json``, the Codex rollout, Claude Code's
``stream-json`` output and its session file) has one :class:`StreamParser` subclass, named in
its :class:`~features.readers.ReaderSpec` (``parser``). ``read_trajectory`` reads such a file
by feeding every line to a fresh parser and taking :meth:`StreamParser.finish`; a live harness
feeds lines as they arrive. Both therefore get the same events (the stream-vs-file identity).

A format whose log is one JSON document (mini-SWE-agent, SWE-agent, OpenHands V0 and V1;
``LAYOUT = "json"``) is read by a subclass of the same shape: :func:`read_document` hands
the document to :meth:`StreamParser.feed_document`, which feeds its records
(:meth:`StreamParser.records`: messages, steps or events) to the same
:meth:`~StreamParser.on_record` one by one, with their index in the document. Such a parser
places each event where what it did became known (:meth:`StreamParser.place`: an action
where its result arrived) and releases them in that order at the end of the document.

API::

    p = CodexExecParser(source="run-17", task_id=None, repo=None)   # any StreamParser
    for raw, t in lines_as_they_arrive:          # str/bytes (one JSON line) or a parsed dict
        for ev in p.feed(raw, arrival_s=t):      # final events, in trajectory order
            ...                                  # ev.index, ev.step, ev.turn_end are set
    tail = p.flush()                             # end of stream: events still held/pending
    traj = p.finish()                            # the Trajectory (calls flush() if needed)

Rules every parser keeps (each tested):

* **Final events.** An event :meth:`feed` returns is never changed afterwards: its index,
  step, boundary flags and fields are what :meth:`finish`'s trajectory holds. An event is
  returned when what it did is known (a tool call when its result arrives); until then it is
  *pending*. An event whose ``turn_end`` depends on a later line (formats whose steps end only
  when the next user input arrives: the Codex rollout, the Claude Code session file) is
  *held* until the next event is known (or :meth:`flush`), then released with the flag set;
  formats whose log says where a turn ends (``turn.completed``, ``result``) hold nothing.
  A turn cut by the end of a stream is then left open (no ``turn_end``).
* **Order.** Events come out in trajectory order with ``index`` 0, 1, 2, ...; ``step`` never
  decreases.
* **Times.** ``arrival_s`` (seconds, any one clock) is the time the line was received. Formats
  with no times of their own (:attr:`StreamParser.ARRIVAL_TIMES` true: ``codex exec --json``,
  Claude Code ``stream-json``) take event times from it, and from nowhere else; formats that
  stamp every line (rollout, session file) ignore it. A harness that stamps lines may also
  feed ``{"arrival": t, "line": {...}}`` (the stamped form), unwrapped here.
* **Bad input.** A line that is not JSON, or not a JSON object, or one a file reader would
  refuse (duplicate keys, NaN/Infinity, nesting deeper than the limit, a lone surrogate:
  :func:`~features.readers.strict_json.parse_json_line`), or text past the
  :class:`~features.readers.files.ReadLimits` size bound, raises
  :class:`~features.readers.errors.TrajectoryFormatError` naming the source and the line;
  blank lines are skipped (and counted, so line numbers match the file's). Times running
  backwards are kept and flagged as events are released, and a stream with no events warns,
  as for files (:func:`~features.readers.events.seal`).
* After :meth:`finish`, :meth:`feed` raises.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from features.readers.errors import TrajectoryFormatError
from features.readers.events import seal, time_flags
from features.readers.fields import Loc, to_float
from features.readers.files import current_limits, read_text, stem
from features.readers.memory import check_memory
from features.readers.strict_json import jsonl_records, load_json, parse_json_line
from features.schema import Event, Trajectory

__all__ = ["StreamParser", "TextStreamParser", "read_document", "read_text_with", "read_with"]


class StreamParser:
    """Base of the per-format streaming parsers (see the module docstring for the rules).

    Subclasses implement :meth:`on_record` (one JSON object of the log) and may implement
    :meth:`on_end` (release pending events at the end of the stream), :meth:`on_final`
    (meta from all events) and :meth:`task_default` / :meth:`repo_default`; they hand events
    out through :meth:`emit`.
    """

    FORMAT: ClassVar[str] = ""
    LAYOUT: ClassVar[str] = "jsonl"  # "json": one document, fed whole (feed_document)
    ARRIVAL_TIMES: ClassVar[bool] = False  # the format has no times: arrival_s times events
    #: a format whose lines are told apart by one text field (``DISPATCH_KEY``) may name a
    #: handler per value, ``handler(parser, value, obj, loc, arrival)``: a file's line whose
    #: field is one of them goes straight to it (:meth:`feed_records`, with the parser's one
    #: Loc at the line), and every other line to :meth:`on_record`, which must do what the
    #: handler does for these and read the rest with its own checks (a missing field, a
    #: number, an unknown value). One home for the per-line dispatch, and a file's line
    #: costs no on_record or field-check frame of its own.
    DISPATCH: ClassVar[Mapping[str, Callable[..., None]] | None] = None
    DISPATCH_KEY: ClassVar[str] = "type"

    def __init__(self, *, source: str | Path = "<stream>", task_id: str | None = None,
                 repo: str | None = None) -> None:
        self.source = Path(source) if not isinstance(source, Path) else source
        self.task_id = task_id
        self.repo = repo
        self.meta: dict[str, Any] = {}
        self.lineno = 0  # lines fed so far (blank ones included)
        self._events: list[Event] = []
        self._out: list[Event] = []
        self._held: Event | None = None
        self._flushed = False
        self._closed = False
        self._wrapped = False
        self._given_arrival = False
        self._fed_bytes = 0  # raw text fed so far, bounded by ReadLimits.max_bytes
        self._latest_end: float | None = None
        self._time_flagged: list[int] = []
        self._line_loc = Loc(self.source)  # see line_loc
        self._placed: list[Event] = []  # a document's events, until its end (see place)

    # -- the public face -----------------------------------------------------------------
    @property
    def events(self) -> Sequence[Event]:
        """The events released so far (read-only view)."""
        return tuple(self._events)

    def feed(self, line: str | bytes | Mapping[str, Any],
             arrival_s: float | None = None) -> list[Event]:
        """One line of the log (raw JSON text or an already-parsed object): the events it
        makes final, in order (often none)."""
        if self._flushed:
            raise RuntimeError(f"{self.source}: feed() after the end of the stream")
        self.lineno += 1
        if isinstance(line, Mapping):
            obj = line if isinstance(line, dict) else dict(line)
        else:
            text = self._line_text(line)
            if not text or text.isspace():
                return []
            obj = parse_json_line(text, self.source, self.lineno)
        return self.feed_record(obj, self.lineno, arrival_s)

    def _line_text(self, line: str | bytes) -> str:
        """Line ``self.lineno`` fed as text or bytes, as text: decoded as UTF-8 and counted
        against ``ReadLimits.max_bytes`` (both refused in one line naming it)."""
        try:
            text = line.decode("utf-8") if isinstance(line, bytes) else line
        except UnicodeDecodeError as exc:
            raise TrajectoryFormatError(
                f"{self.source}: line {self.lineno}: not UTF-8 text (byte offset "
                f"{exc.start})") from exc
        self._fed_bytes += len(line)
        limit = current_limits().max_bytes
        if self._fed_bytes > limit:
            raise TrajectoryFormatError(
                f"{self.source}: line {self.lineno}: the stream passed the "
                f"{limit / 2**20:g} MiB limit (ReadLimits.max_bytes)")
        return text

    def feed_record(self, obj: dict[str, Any], lineno: int,
                    arrival_s: float | None = None) -> list[Event]:
        """A parsed line with its line number (the file reader's entry; :meth:`feed` for raw
        lines). Returns the events it makes final."""
        if self._flushed:
            raise RuntimeError(f"{self.source}: feed() after the end of the stream")
        self.lineno = max(self.lineno, lineno)
        if self.ARRIVAL_TIMES and len(obj) == 2 and "arrival" in obj and "line" in obj:
            loc = Loc(self.source, lineno)
            if arrival_s is not None:
                raise ValueError(f"{self.source}: line {lineno} carries its own arrival time; "
                                 "do not also pass arrival_times")
            arrival_s = to_float(obj["arrival"], loc / "arrival")
            inner = obj["line"]
            if not isinstance(inner, dict):
                raise (loc / "line").error("expected object")
            obj = inner
            self._wrapped = True
        elif arrival_s is not None:
            if self._wrapped:
                raise ValueError(f"{self.source}: lines carry their own arrival times; "
                                 "do not also pass arrival_times")
            self._given_arrival = True
        if not self.ARRIVAL_TIMES:
            arrival_s = None
        self._out = []
        self.on_record(obj, lineno, arrival_s)
        out, self._out = self._out, []
        return out

    def feed_records(self, records: Iterable[tuple[int, dict[str, Any]]]) -> None:
        """Every parsed line of a file, (line number, object) in order: what
        :meth:`feed_record` does line by line, without building each line's list of final
        events (a file reader takes them all from :meth:`finish`)."""
        if self._flushed:
            raise RuntimeError(f"{self.source}: feed() after the end of the stream")
        on_record = self.on_record
        stamped = self.ARRIVAL_TIMES
        handlers, key, loc = self.DISPATCH or {}, self.DISPATCH_KEY, self._line_loc
        n = 0
        for lineno, obj in records:
            n += 1
            if not n & 4095:  # every 4,096 records: the read's memory (features.readers.memory)
                check_memory(f"line {lineno}")
            if stamped and len(obj) == 2 and "arrival" in obj and "line" in obj:
                self.feed_record(obj, lineno)  # the stamped form: unwrapped there
                continue
            if lineno > self.lineno:
                self.lineno = lineno
            if handlers:
                t = obj.get(key) if obj.__class__ is dict else None
                handler = handlers.get(t) if t.__class__ is str else None
                if handler is not None:
                    loc.line = lineno
                    handler(self, t, obj, loc, None)
                    continue
            on_record(obj, lineno, None)
        self._out = []

    def flush(self) -> list[Event]:
        """End of the stream: release pending and held events; returns them."""
        if self._flushed:
            return []
        self._out = []
        self.on_end()
        if self._held is not None:
            held, self._held = self._held, None
            held.turn_end = True
            self._release(held)
        self._flushed = True
        out, self._out = self._out, []
        return out

    def finish(self) -> Trajectory:
        """The trajectory of everything fed (flushes first); the parser is then closed."""
        if self._closed:
            raise RuntimeError(f"{self.source}: finish() called twice")
        self.flush()
        self._closed = True
        self.on_final()
        meta = self.meta
        if self.LAYOUT == "jsonl":
            meta["has_arrival_times"] = self._wrapped or self._given_arrival
        tid = self.task_id or self.task_default()
        return seal(tid, self.repo or self.repo_default() or "unknown", self.FORMAT,
                    list(self._events), meta, path=self.source, time_flagged=self._time_flagged)

    def feed_document(self, doc: Any) -> None:
        """A document format's whole document: each of its :meth:`records` handed to
        :meth:`on_record` in order, with its index in the document (then :meth:`finish`)."""
        if self._flushed:
            raise RuntimeError(f"{self.source}: feed() after the end of the stream")
        on_record = self.on_record
        for i, rec in enumerate(self.records(doc)):
            if not (i + 1) & 4095:
                check_memory()
            on_record(rec, i, None)

    # -- for subclasses ------------------------------------------------------------------
    def on_record(self, obj: Any, lineno: int, arrival: float | None) -> None:
        """Handle one record of the log: a line's JSON object (``lineno``, 1-based;
        ``arrival`` is None unless ARRIVAL_TIMES), or a document's record (its index)."""
        raise NotImplementedError

    def records(self, doc: Any) -> Sequence[Any]:
        """A document format: the records of its document, in order (the document's own
        shape checked here, its top-level fields kept for :meth:`on_final`)."""
        raise NotImplementedError(f"{type(self).__name__} reads lines, not a document")

    def place(self, ev: Event) -> None:
        """A document format: keep ``ev`` until the end of the document, where every kept
        event is released in :meth:`position` order (an event is placed where what it did
        became known; its fields may still change until then)."""
        self._placed.append(ev)

    def position(self, ev: Event) -> Any:
        """The sort key of a placed event (default: the order of placing)."""
        raise NotImplementedError

    def release_placed(self) -> None:
        """Release every placed event in :meth:`position` order (a stable sort), each one's
        ``turn_end`` from the next one's step."""
        placed, self._placed = self._placed, []
        placed.sort(key=self.position)
        for ev in placed:
            self.emit(ev)

    def on_end(self) -> None:
        """Release what is still pending at the end of the stream (default: nothing)."""

    def on_final(self) -> None:
        """Complete ``meta`` from every released event (called once, by :meth:`finish`)."""

    def task_default(self) -> str:
        """The task id when none was given: the log's own id, else the source's stem."""
        return stem(self.source)

    def repo_default(self) -> str | None:
        """The repository when none was given (None: ``"unknown"``)."""
        return None

    def line_loc(self, lineno: int) -> Loc:
        """The :class:`Loc` of line ``lineno`` of the source, for the checked reads of the
        line being handled: one object per parser, its line moved (a reader makes one per
        line, and reads it only to word an error). Keep nothing that holds it past the
        line; ``Loc(self.source, lineno)`` is a location of one's own."""
        loc = self._line_loc
        loc.line = lineno
        return loc

    def emit(self, ev: Event, turn_end: bool | None = None) -> None:
        """Release ``ev`` (final from now on). ``turn_end`` True/False when the log says
        whether its step ends after it; None holds it until the next event's step is known."""
        if self._held is not None:
            held, self._held = self._held, None
            held.turn_end = ev.step != held.step
            self._release(held)
        if turn_end is None:
            self._held = ev
        else:
            ev.turn_end = turn_end
            self._release(ev)

    def _release(self, ev: Event) -> None:
        events = self._events
        if events and ev.step < events[-1].step:
            ev.step = events[-1].step  # a late result never moves a step backwards
        ev.index = len(events)
        end = ev.end
        if end is not None:  # no end, no flag (time_flags says the same)
            latest, start = self._latest_end, ev.start
            if (start is None or end >= start) and (latest is None or end >= latest):
                self._latest_end = end  # in order: no flag, the latest end moves on
            else:
                flags, self._latest_end = time_flags(ev, latest)
                if flags:
                    ev.extra["time_flags"] = flags
                    self._time_flagged.append(ev.index)
        events.append(ev)
        self._out.append(ev)


def read_document(parser: StreamParser, path: str | Path) -> Trajectory:
    """Read a document format's log through ``parser``: its JSON document
    (:func:`~features.readers.strict_json.load_json`) fed whole, then finished."""
    parser.feed_document(load_json(Path(path)))
    return parser.finish()


def read_with(
    parser: StreamParser,
    path: str | Path,
    *,
    allow_truncated_tail: bool = False,
    arrival_times: Sequence[float] | None = None,
) -> Trajectory:
    """Read a whole log file through ``parser``: every line fed in order, then finished.

    Lines come from :func:`~features.readers.strict_json.jsonl_records` (so file checks and a torn
    last line are handled there). ``arrival_times``: one float per non-blank line.
    """
    path = Path(path)
    lines = jsonl_records(path, allow_truncated_tail=allow_truncated_tail, meta=parser.meta)
    if arrival_times is None:
        parser.feed_records(lines)
        return parser.finish()
    got = list(lines)
    if len(arrival_times) != len(got):
        raise ValueError(f"{path}: arrival_times has {len(arrival_times)} entries but the "
                         f"file has {len(got)} non-blank lines")
    for (lineno, obj), t in zip(got, arrival_times, strict=True):
        parser.feed_record(obj, lineno, to_float(t, Loc(path, lineno, "arrival_times")))
    return parser.finish()


class TextStreamParser(StreamParser):
    """Base of the parsers of line-oriented *text* logs (Aider's markdown chat history):
    :meth:`feed` takes one line of text (no JSON parse), strips its line end (``\\n``,
    ``\\r\\n``) and hands it to :meth:`on_line`; every other rule of :class:`StreamParser`
    holds (final events, order, the size bound, a line not UTF-8 refused naming the line).
    Subclasses implement :meth:`on_line` instead of :meth:`on_record`."""

    def feed(self, line: str | bytes | Mapping[str, Any],
             arrival_s: float | None = None) -> list[Event]:
        if self._flushed:
            raise RuntimeError(f"{self.source}: feed() after the end of the stream")
        if isinstance(line, Mapping):
            raise TypeError(f"{self.source}: a text log is fed lines of text, not objects")
        self.lineno += 1
        text = self._line_text(line)
        if text.endswith("\n"):
            text = text[:-1]
        if text.endswith("\r"):
            text = text[:-1]
        self._out = []
        self.on_line(text, self.lineno, arrival_s if self.ARRIVAL_TIMES else None)
        out, self._out = self._out, []
        return out

    def feed_lines(self, lines: Iterable[str], first_lineno: int = 1) -> None:
        """Every line of a text file (line ends, ``\r`` included, already cut), numbered from
        ``first_lineno``: what :meth:`feed` does line by line, without each line's list of
        final events (a file reader takes them all from :meth:`finish`)."""
        if self._flushed:
            raise RuntimeError(f"{self.source}: feed() after the end of the stream")
        on_line = self.on_line
        lineno = first_lineno - 1
        for lineno, text in enumerate(lines, first_lineno):
            on_line(text, lineno, None)
        self.lineno = max(self.lineno, lineno)
        self._out = []

    def on_record(self, obj: dict[str, Any], lineno: int, arrival: float | None) -> None:
        raise TypeError(f"{self.source}: a text log is fed lines of text, not objects")

    def on_line(self, line: str, lineno: int, arrival: float | None) -> None:
        """Handle one line of the log, its line end cut."""
        raise NotImplementedError


def read_text_with(parser: TextStreamParser, path: str | Path) -> Trajectory:
    """Read a whole text log through ``parser`` (the file's checks, decompression and
    decoding are :func:`~features.readers.files.read_text`'s): every line fed in order,
    then finished."""
    text = read_text(Path(path))
    if "\r" in text:  # CRLF line ends (Aider's --line-endings crlf): cut as feed() cuts them
        text = text.replace("\r\n", "\n")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the file's last line end
    parser.feed_lines(lines)
    return parser.finish()
