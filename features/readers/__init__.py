"""Readers for real agent logs → the canonical :class:`~features.schema.Trajectory`.

``read_trajectory(path)`` detects the format from the file's content (not only its name)
and dispatches to one reader per format. Every format is registered once, in
:data:`READERS` (name, layout, detector, reader, aliases, options); detection, the
``format`` argument, :data:`FORMATS` and the command line's ``--format`` choices all read
that table:

=======================  ====================================================
``codex-exec``           ``codex exec --json`` JSONL (:mod:`.codex_exec`)
``codex-rollout``        Codex session rollout JSONL (:mod:`.codex_rollout`)
``claude-code-stream``   Claude Code ``--output-format stream-json`` (:mod:`.claude_code`)
``claude-code-session``  Claude Code session file (:mod:`.claude_code`)
``mini-swe-agent``       mini-SWE-agent ``.traj.json`` v1 and v1.1 (:mod:`.mini_swe_agent`)
``swe-agent``            SWE-agent ``.traj`` v1 and 0.x (:mod:`.swe_agent`)
``openhands``            OpenHands V0 event list (:mod:`.openhands`)
``openhands-v1``         OpenHands V1 conversation: event list or directory (:mod:`.openhands_v1`)
``gemini-cli-stream``    Gemini CLI ``--output-format stream-json`` (:mod:`.gemini_cli`)
``aider-chat``           Aider ``.aider.chat.history.md`` (markdown; :mod:`.aider`)
``aider-llm-history``    Aider ``--llm-history-file`` (text; :mod:`.aider`)
``cline-task``           Cline / Roo Code task folder or its ``ui_messages.json`` (:mod:`.cline`)
=======================  ====================================================

The line-oriented formats have a streaming parser each (``ReaderSpec.parser``, a
:class:`~features.readers.stream.StreamParser`): their ``read`` feeds it every line of the
file, and a live harness feeds it lines as they arrive (:func:`stream_parser`).

Any log may be gzip- or zstandard-compressed (recognised by content). Only regular files
(and, for formats that have one, a log directory) are read, within :class:`ReadLimits`.
Bad input (empty, binary, non-JSON or torn lines, duplicate keys, NaN, too deep, values no
table column can hold, wrong field types, unknown format) raises
:class:`TrajectoryFormatError` naming the file and the line or field; a log of another
format than the one asked for says what it looks like. Unknown event types are kept as
``other`` events with an :class:`UnknownEventWarning`; a log with no events is an
:class:`EmptyTrajectoryWarning`, times running backwards a :class:`TimeOrderWarning`.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from features.readers import (
    aider,
    claude_code,
    cline,
    codex_exec,
    codex_rollout,
    gemini_cli,
    mini_swe_agent,
    openhands,
    openhands_v1,
    swe_agent,
)
from features.readers.common import (
    EmptyTrajectoryWarning,
    ReadLimits,
    TimeOrderWarning,
    TrajectoryFormatError,
    UnknownEventWarning,
    clear_caches,
    current_limits,
    load_json,
    log_text,
    parse_json_line,
    parse_test_counts,
    read_limits,
    read_log_bytes,
    reading,
)
from features.readers.stream import StreamParser
from features.schema import EventKind, Trajectory
from features.shell import is_git_commit, is_test_command

__all__ = [
    "FORMATS",
    "READERS",
    "EmptyTrajectoryWarning",
    "ReadLimits",
    "ReaderSpec",
    "StreamParser",
    "TimeOrderWarning",
    "TrajectoryFormatError",
    "UnknownEventWarning",
    "clear_caches",
    "detect_format",
    "format_names",
    "is_git_commit",
    "is_test_command",
    "parse_test_counts",
    "read_trajectory",
    "stream_parser",
]


@dataclass(frozen=True)
class ReaderSpec:
    """One log format: its name, how its files are laid out, how to recognise one, how to
    read one, and (line-oriented formats) its streaming parser for live logs."""

    name: str
    layout: Literal["json", "jsonl", "text"]  # one JSON document, one JSON object per line,
    # or lines of text (Aider's markdown)
    detect: Callable[[Any], bool]  # the parsed document (json), first record (jsonl) or text
    read: Callable[..., Trajectory]  # read(path, *, task_id, repo, **options)
    aliases: tuple[str, ...] = ()
    options: frozenset[str] = frozenset()  # keyword options read() takes beyond task_id/repo
    parser: type[StreamParser] | None = None  # parser(source=, task_id=, repo=): feed/finish
    detect_dir: Callable[[Path], bool] | None = None  # a log that is a directory


_JSONL_OPTIONS = frozenset({"allow_truncated_tail"})

READERS: tuple[ReaderSpec, ...] = (
    ReaderSpec(codex_exec.FORMAT, "jsonl", codex_exec.looks_like, codex_exec.read_codex_exec,
               ("codex", "codex-exec-json"), _JSONL_OPTIONS | {"arrival_times", "usage_base"},
               codex_exec.CodexExecParser),
    ReaderSpec(codex_rollout.FORMAT, "jsonl", codex_rollout.looks_like,
               codex_rollout.read_codex_rollout, ("rollout",), _JSONL_OPTIONS,
               codex_rollout.CodexRolloutParser),
    ReaderSpec(claude_code.STREAM_FORMAT, "jsonl", claude_code.looks_like_stream,
               claude_code.read_claude_stream, ("claude-stream-json", "stream-json"),
               _JSONL_OPTIONS | {"arrival_times"}, claude_code.ClaudeStreamParser),
    ReaderSpec(claude_code.SESSION_FORMAT, "jsonl", claude_code.looks_like_session,
               claude_code.read_claude_session, ("claude-code", "claude-session"),
               _JSONL_OPTIONS, claude_code.ClaudeSessionParser),
    ReaderSpec(mini_swe_agent.FORMAT, "json", mini_swe_agent.looks_like,
               mini_swe_agent.read_mini_swe_agent, mini_swe_agent.VERSIONS),
    ReaderSpec(swe_agent.FORMAT, "json", swe_agent.looks_like, swe_agent.read_swe_agent,
               ("sweagent",)),
    ReaderSpec(openhands.FORMAT, "json", openhands.looks_like, openhands.read_openhands),
    ReaderSpec(openhands_v1.FORMAT, "json", openhands_v1.looks_like,
               openhands_v1.read_openhands_v1, detect_dir=openhands_v1.looks_like_dir),
    ReaderSpec(gemini_cli.FORMAT, "jsonl", gemini_cli.looks_like, gemini_cli.read_gemini_stream,
               ("gemini-cli", "gemini-stream-json"), _JSONL_OPTIONS, gemini_cli.GeminiStreamParser),
    ReaderSpec(aider.FORMAT, "text", aider.looks_like_chat, aider.read_aider_chat, ("aider",),
               parser=aider.AiderChatParser),
    ReaderSpec(aider.LLM_FORMAT, "text", aider.looks_like_llm_history,
               aider.read_aider_llm_history, parser=aider.AiderLlmHistoryParser),
    ReaderSpec(cline.FORMAT, "json", cline.looks_like, cline.read_cline_task, ("cline", "roo-code"),
               detect_dir=cline.looks_like_dir),
)
FORMATS: tuple[str, ...] = tuple(r.name for r in READERS)
_BY_NAME: dict[str, ReaderSpec] = {n: r for r in READERS for n in (r.name, *r.aliases)}


def format_names() -> list[str]:
    """Every name ``read_trajectory`` accepts for ``format``: the formats, then aliases."""
    return [*FORMATS, *(a for r in READERS for a in r.aliases)]


def _detect(doc: Any, layout: str) -> str | None:
    for r in READERS:
        try:
            if r.layout == layout and r.detect(doc):
                return r.name
        except (TypeError, ValueError, AttributeError, KeyError, IndexError):
            continue  # a detector meeting an odd shape: not its format
    return None


def detect_format(path: str | Path) -> str:
    """The format name of a log, decided from its content.

    A file that parses as one JSON document is matched on its shape (mini-SWE-agent's
    ``trajectory_format``/``messages``+``info``, SWE-agent's ``trajectory``, OpenHands V0's
    list of events with ``id`` and ``action``/``observation``, V1's events with a
    ``kind``); otherwise the first line of a JSONL stream decides (codex-exec ``type``
    names, possibly arrival-wrapped; rollout ``timestamp``+``type``+``payload``); a
    directory is asked of the formats that have a directory form. Anything else is a
    :class:`TrajectoryFormatError`.
    """
    path = Path(path)
    if path.is_dir():
        for r in READERS:
            if r.detect_dir is not None and r.detect_dir(path):
                return r.name
        dirs = [r.name for r in READERS if r.detect_dir is not None]
        raise TrajectoryFormatError(
            f"{path}: a directory that holds no known log (formats with a directory form: "
            f"{', '.join(dirs)})")
    raw = read_log_bytes(path)
    if _first_byte(raw) not in (b"{", b"["):  # no JSON: a text log, or nothing known
        text = log_text(path, raw)
        if (name := _detect(text, "text")) is not None:
            return name
    first = _first_record(path, raw)
    if first is not None and (name := _detect(first, "jsonl")) is not None:
        return name
    text = log_text(path, raw)
    doc: Any = None
    werr: json.JSONDecodeError | None = None
    try:
        doc = load_json(path)  # strict; the reader gets the same parse
        whole = True
    except TrajectoryFormatError as exc:
        if not isinstance(exc.__cause__, json.JSONDecodeError):
            raise  # valid JSON that no reader may take (duplicate keys, NaN, too deep)
        # its traceback dropped: kept, it held the frames that hold the text and the bytes
        # in a cycle (through this frame), all alive until the next full collection
        whole, werr = False, exc.__cause__.with_traceback(None)
    if whole:
        name = _detect(doc, "json") or (_detect(doc, "jsonl") if isinstance(doc, dict) else None)
        if name is not None:  # a JSON document, or a one-line JSONL stream
            return name
        shape = type(doc).__name__ if not isinstance(doc, dict) else f"keys {sorted(doc)[:8]}"
        raise TrajectoryFormatError(
            f"{path}: unknown trajectory format (a JSON {shape}); known formats: "
            f"{', '.join(FORMATS)}"
        )
    for lineno, line in enumerate(_lines(text), 1):  # "\n" only, as in iter_jsonl
        if not line.strip():
            continue
        if werr is not None and werr.lineno > lineno and not _is_json_line(line):
            # the first line does not parse alone: a JSON document broken further down
            raise TrajectoryFormatError(
                f"{path}: line {werr.lineno} column {werr.colno}: invalid JSON ({werr.msg})"
            ) from werr
        if not line.lstrip().startswith("{"):
            raise TrajectoryFormatError(
                f"{path}: line {lineno}: unknown trajectory format (first record "
                f"{line.strip()[:80]!r}); known formats: {', '.join(FORMATS)}")
        try:
            first = parse_json_line(line, path, lineno)
        except TrajectoryFormatError as exc:
            cause = exc.__cause__
            if not isinstance(cause, json.JSONDecodeError):
                raise
            raise TrajectoryFormatError(
                f"{path}: line {lineno}: not valid JSON ({cause.msg}); cannot detect the format"
            ) from cause
        if (name := _detect(first, "jsonl")) is not None:
            return name
        raise TrajectoryFormatError(
            f"{path}: line {lineno}: unknown trajectory format (first record "
            f"{str(first)[:80]!r}); known formats: {', '.join(FORMATS)}"
        )
    raise TrajectoryFormatError(f"{path}: empty file")


def _first_byte(raw: bytes) -> bytes:
    """The first byte of ``raw`` that is not blank space (b"" for none), without copying
    the log (``raw.lstrip()`` copies all of it)."""
    head = raw[:4096].lstrip()
    return head[:1] if head or len(raw) <= 4096 else raw.lstrip()[:1]


def _first_record(path: Path, raw: bytes) -> dict[str, Any] | None:
    """The first line of a JSONL log as its object, when the bytes alone say the file is
    one: it begins with ``{``, its first line is an object the strict parse accepts, and
    the next line begins at once with something other than blank space. The whole-document
    parse must then fail just after that object (more follows it), and the first line
    decides, as :func:`detect_format` decides without this shortcut; None leaves it to that
    path. The text of the log is then never decoded whole for detection."""
    nl = raw.find(b"\n")
    if not raw.startswith(b"{") or nl < 0 or raw[nl + 1:nl + 2] in (b"", b" ", b"\t",
                                                                   b"\r", b"\n"):
        return None
    try:
        line = raw[:nl].decode("utf-8")
        return parse_json_line(line, path, 1)
    except (UnicodeDecodeError, TrajectoryFormatError):
        return None


def _lines(text: str) -> Iterator[str]:
    """The lines of ``text`` (split at "\\n") one at a time: detection looks at the first
    non-blank one, and splitting a large log whole costs more than the rest of detection."""
    start = 0
    while (end := text.find("\n", start)) >= 0:
        yield text[start:end]
        start = end + 1
    yield text[start:]


def _is_json_line(line: str) -> bool:
    try:
        json.loads(line)
    except (ValueError, RecursionError):
        return False
    return True


def read_trajectory(
    path: str | Path,
    format: str | None = None,
    *,
    task_id: str | None = None,
    repo: str | None = None,
    arrival_times: Sequence[float] | None = None,
    allow_truncated_tail: bool = False,
    usage_base: Mapping[str, Any] | None = None,
    limits: ReadLimits | None = None,
) -> Trajectory:
    """Read one agent log into a :class:`Trajectory`.

    ``format`` is one of :data:`FORMATS` (or None to detect it from the content).
    ``task_id`` defaults to the log's own id (thread/session/instance id) else the file
    stem; ``repo`` to the repository named in the log, else ``"unknown"``.
    ``arrival_times`` (formats without times of their own: codex-exec, claude-code-stream):
    one epoch-seconds float per non-blank line, the times the harness received each line;
    streams stamped as ``{"arrival": t, "line": {...}}`` carry them inline instead.
    ``allow_truncated_tail`` (JSONL formats): skip a torn last line (stream cut
    mid-write) with a warning instead of raising.
    ``usage_base`` (codex-exec only): the thread's running token total before this stream
    (a resumed or forked thread); see :mod:`features.readers.codex_exec`.
    ``limits``: size and nesting bounds (default: those in force, see :func:`read_limits`).
    The file is read and parsed once, however many steps look at it.
    """
    path = Path(path)
    with read_limits(limits or current_limits()), reading(path):
        if format is None:
            spec = _BY_NAME[detect_format(path)]
        else:
            found = _BY_NAME.get(format)
            if found is None:
                raise ValueError(
                    f"unknown format {format!r}; expected one of {', '.join(FORMATS)}")
            spec = found
        if arrival_times is not None and "arrival_times" not in spec.options:
            which = ", ".join(r.name for r in READERS if "arrival_times" in r.options)
            raise ValueError(
                f"arrival_times applies to the {which} formats only ({path} is {spec.name}, "
                "which records its own times)"
            )
        if usage_base is not None and "usage_base" not in spec.options:
            raise ValueError(f"usage_base applies to the codex-exec format only ({path} is "
                             f"{spec.name})")
        options: dict[str, Any] = {}
        if arrival_times is not None:
            options["arrival_times"] = arrival_times
        if usage_base is not None:
            options["usage_base"] = usage_base
        if "allow_truncated_tail" in spec.options:
            options["allow_truncated_tail"] = allow_truncated_tail
        try:
            traj = spec.read(path, task_id=task_id, repo=repo, **options)
        except TrajectoryFormatError as exc:
            if format is not None:
                _raise_if_another_format(path, spec, exc)
            raise
        except ValueError as exc:
            if str(path) in str(exc):
                raise  # an argument that does not fit the log (arrival_times), named
            raise TrajectoryFormatError(f"{path}: {exc}") from exc
        except (TypeError, AttributeError, KeyError, IndexError, RecursionError) as exc:
            raise TrajectoryFormatError(
                f"{path}: {spec.name} reader failed on unexpected input "
                f"({type(exc).__name__}: {exc})") from exc
        if format is not None:
            _check_forced_format(path, spec, traj)
        return traj


def _raise_if_another_format(path: Path, spec: ReaderSpec, exc: TrajectoryFormatError) -> None:
    """A log forced through the wrong reader says what it looks like."""
    try:
        other = detect_format(path)
    except TrajectoryFormatError:
        return
    if other != spec.name:
        reason = str(exc).removeprefix(f"{path}: ")
        raise TrajectoryFormatError(
            f"{path}: read as {spec.name} but it looks like {other} ({reason})") from exc


def _check_forced_format(path: Path, spec: ReaderSpec, traj: Trajectory) -> None:
    """A log read through a forced reader that detection would not pick: refused when the
    reader recognised none of its records (every event kind ``other``, or no event: the
    records were read, but as nothing); else kept as asked, with a warning (the Claude Code
    session file read as its stream: the same messages, but not their tree)."""
    try:
        other = detect_format(path)
    except TrajectoryFormatError:
        return
    if other == spec.name:
        return
    if all(e.kind is EventKind.OTHER for e in traj.events):
        raise TrajectoryFormatError(
            f"{path}: read as {spec.name} but it looks like {other} (no record of it was "
            f"recognised as {spec.name}: every event would be kind 'other')")
    warnings.warn(f"{path}: read as {spec.name}, as asked, though it looks like {other}",
                  UserWarning, stacklevel=3)


def stream_parser(format: str, **options: Any) -> StreamParser:
    """A fresh streaming parser of a line-oriented format (a name or alias of
    :data:`FORMATS`); ``options`` go to the parser (``source``, ``task_id``, ``repo``, ...)."""
    spec = _BY_NAME.get(format)
    if spec is None:
        raise ValueError(f"unknown format {format!r}; expected one of {', '.join(FORMATS)}")
    if spec.parser is None:
        streams = ", ".join(r.name for r in READERS if r.parser is not None)
        raise ValueError(f"format {spec.name!r} is one JSON document, read whole; the "
                         f"line-oriented formats are {streams}")
    return spec.parser(**options)
