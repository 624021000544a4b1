"""Readers for Aider's logs: the chat history (``.aider.chat.history.md``, markdown, written by
every Aider run unless turned off) and the LLM history (``--llm-history-file``, plain text).
Both are line-oriented text: a :class:`~features.readers.stream.TextStreamParser` each, fed
by the file reader and by a live harness alike.

**Chat history** (``aider/io.py``: ``append_chat_history``; how Aider itself reads the file
back: ``aider/utils.py`` ``split_chat_history_markdown``). A line is

* ``# aider chat started at YYYY-MM-DD HH:MM:SS``: a session starts (appended to the same
  file run after run; ``meta["sessions"]``);
* ``#### text``: the user's input, one line each (a multi-line input is several);
* ``> text``: Aider's own output (tool output, warnings, errors, questions and answers); a
  bare line right after it (no blank line between) continues it (markdown's lazy
  continuation: Aider quotes only the first line of a multi-line message);
* any other line: the model's reply (a blank line before it). Inside a ````` fence of a
  reply, ``#### `` and ``> `` lines are the reply's (a file's markdown being edited) unless
  the reply was cut there (the line follows two blank lines, or is the usage report).

Mapping, one event per action:

* a plain user input → ``message`` (``extra["role"] = "user"``, ``prompt`` True; a new
  step when the agent acted since the last one); a slash command → ``message`` (``prompt``
  False, ``extra["slash"]``), except ``/run CMD`` and ``!CMD`` (and ``/test CMD``,
  ``/git ARGS`` as ``git ARGS``) → ``command`` (or ``test``) run by the user
  (``extra["by"] = "user"``), and ``/ask``/``/code``/``/architect`` with a question, which
  are prompts;
* the model's reply → ``model_call`` (``text``; ```bash`` / ```sh`` blocks in it, the shell
  commands it suggests, in ``extra["shell_blocks"]``), with the usage report that follows
  it: ``> Tokens: 3.7k sent, 1.2k cache hit, 1.5k received. Cost: $0.0020 message, $0.0029
  session.`` → ``input_tokens`` (the *sent* figure as printed: for Anthropic models it does
  not count the cache hits, for others it does), ``cached_tokens`` (cache hits),
  ``output_tokens``, ``extra["cost_usd"]`` / ``extra["session_cost_usd"]``. Aider rounds
  counts of 1,000 and more (``3.7k``: to 100; ``12k``: to 1,000): they are read as
  printed and ``extra["tokens_rounded"]`` says so. The report of Aider before 0.50
  (``1,234 prompt tokens, 56 completion tokens, $0.0012 cost``) is read too. A reply with
  no report (cut by ^C) has no tokens; a report with no reply is a ``model_call`` without
  text;
* ``> Applied edit to PATH`` → ``file_change`` (``paths_written``), a safe boundary;
* ``> Commit 1a2b3c4 message`` (Aider's auto-commit) → ``other``, a ``commit`` boundary
  (``extra["commit"]``, ``extra["commit_message"]``);
* ``> Running CMD`` (a suggested shell command the user let run: the commands and the
  ``Run shell command? … y`` before it are folded into it) → ``command`` (or ``test``), a
  safe boundary; ``> Added N lines of output to the chat.`` after it goes to its
  ``extra["output_lines"]``; a declined suggestion stays with the other lines below;
* every other run of ``>`` lines (banners, questions, warnings, errors) → one ``other``
  event with the lines in ``extra["lines"]`` (nothing dropped); the banner's version and
  model go to ``meta`` too.

What the file does not hold stays missing: no event has a time (``meta["sessions"]``
keeps each session's start as written, local time without a zone), no command has an
exit code or output (Aider prints them to the terminal only; ``/test`` adds output to the
chat only on a non-zero exit, so ``> Added …`` after ``/test`` sets
``extra["exit_nonzero"]``, and ``exit_code`` stays None).

**LLM history** (``aider/io.py`` ``log_llm_history``): ``TO LLM <ISO time>`` then the
messages sent (``-------`` between them, each line prefixed by its role), ``LLM RESPONSE
<ISO time>`` then the reply (``ASSISTANT`` lines). One ``model_call`` per request, ``start``
and ``end`` from the two times (local times without a zone, taken as UTC like every naive
time here), ``text`` the reply, one step each; tokens are not in this file (the chat
history has them).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from features.readers.common import (
    Loc,
    TrajectoryFormatError,
    classify_command,
    mark_tool_return,
    new_step_on_user_input,
    parse_iso,
    plain_event,
    read_text,
    stem,
)
from features.readers.stream import TextStreamParser, read_text_with
from features.schema import BoundaryKind, Event, EventKind, Trajectory
from features.shell import split_command

FORMAT = "aider-chat"
LLM_FORMAT = "aider-llm-history"

HEADER = "# aider chat started at "
_HEADER_TIME = re.compile(r"# aider chat started at (\S.*?)\s*$")
_NUM = r"(\d[\d,]*(?:\.\d+)?k?)"
_TOKENS = re.compile(
    rf"Tokens: {_NUM} sent(?:, {_NUM} cache write)?(?:, {_NUM} cache hit)?, {_NUM} received\."
    r"(?:\s*Cost: \$(\d[\d,]*(?:\.\d+)?) (?:message|request), \$(\d[\d,]*(?:\.\d+)?) session\.)?")
_OLD_TOKENS = re.compile(
    r"(\d[\d,]*) prompt tokens, (\d[\d,]*) completion tokens"
    r"(?:, \$(\d[\d,]*(?:\.\d+)?) cost)?(?:, session cost: \$(\d[\d,]*(?:\.\d+)?))?")
_APPLIED = "Applied edit to "
_COMMIT = re.compile(r"Commit ([0-9a-f]{7,40}) (.*)$", re.S)
_RUNNING = "Running "
_ADDED = re.compile(r"Added (\d+) lines? of output to the chat\.")
_ADD_ASK = re.compile(r"Add (?:[\d.]+k tokens of )?command output to the chat\?")
_VERSION = re.compile(r"Aider v(\S+)")
_MODEL = re.compile(r"(?:Main model|Model): (\S+)")
_SHELL_BLOCK = re.compile(r"```(?:bash|sh|shell|zsh|console|fish|ksh|csh|tcsh)[ \t]*\n(.*?)\n[ \t]*```",
                          re.S)
# a line that may end a reply or open or close a fence in it (the rest are plain reply text)
_MARK = re.compile(r"\n(?=[#>`]|[ \t]+```)")  # found from its "\n": no try at every position
_PROMPT_SLASH = frozenset({"ask", "code", "architect", "context", "help"})
_QUESTION = re.compile(r"\? \((?:Y)es/\((?:N)o")


def looks_like_chat(text: str) -> bool:
    """Whether a text log is an Aider chat history: its first non-blank line is Aider's
    session header."""
    return _head(text)[: len(HEADER)] == HEADER


def looks_like_llm_history(text: str) -> bool:
    """Whether a text log is an Aider LLM history: it starts with ``TO LLM <time>``."""
    head = _head(text)
    return head.startswith("TO LLM ") and bool(re.match(r"TO LLM \d{4}-\d\d-\d\dT", head))


def _head(text: str) -> str:
    """The start of ``text`` from its first non-blank character (without copying a whole
    log, as ``text.lstrip()`` would)."""
    head = text[:4096].lstrip()
    return head if head or len(text) <= 4096 else text.lstrip()[:4096]


def _count(s: str | None) -> tuple[int | None, bool]:
    """A count as Aider prints it (``1,234``, ``3.7k``, ``12k``) and whether it was rounded."""
    if s is None:
        return None, False
    s = s.replace(",", "")
    if s.endswith("k"):
        return round(float(s[:-1]) * 1000), True
    return int(float(s)), False


def _money(s: str | None) -> float | None:
    return None if s is None else float(s.replace(",", ""))


class AiderChatParser(TextStreamParser):
    """Streaming parser of ``.aider.chat.history.md`` (see the module docstring)."""

    FORMAT = FORMAT

    def __init__(self, *, source: str | Path = "<stream>", task_id: str | None = None,
                 repo: str | None = None) -> None:
        super().__init__(source=source, task_id=task_id, repo=repo)
        self._state = {"step": 1, "agent_acted": False}
        self._section = ""  # "" (none yet), "user", "tool", "reply"
        self._buf: list[str] = []  # the lines of the open user input / reply / tool message
        self._buf_line = 0  # where the open section began
        self._blanks = 0  # blank lines just before this one
        self._fence = ""  # the open ``` fence of a reply ("" when none)
        self._call: Event | None = None  # the reply waiting for its usage report
        self._cmd: Event | None = None  # the command waiting for its "Added N lines"
        self._notes: list[str] = []  # other tool lines of the open block
        self._suggested: str | None = None  # commands the user let run, before "Running"
        self._notes_line = 0
        self._started = False
        self.meta.update(sessions=[], aider_versions=[], models=[])

    # -- lines ------------------------------------------------------------------------
    def on_line(self, line: str, lineno: int, arrival: float | None) -> None:
        c = line[:1]
        section = self._section
        if section == "reply" and (c != "#" and c != ">" or not self._ends_reply(line, c)):
            # the bulk of a log: a reply's lines (the work of _reply_line, inlined)
            self._buf.append(line)
            if not line or line.isspace():
                self._blanks += 1
            else:
                self._blanks = 0
                if "```" in line[:12]:
                    self._fence_line(line)
            return
        if not line or line.isspace():
            if section == "tool" or section == "user":
                self._end_section()
            self._blanks += 1
            return
        if not self._started:
            if line.startswith(HEADER):
                self._started = True
            else:
                raise TrajectoryFormatError(
                    f"{self.source}: line {lineno}: not an Aider chat history (its first "
                    f"line is {line[:60]!r}, not {HEADER.strip()!r} ...)")
        blanks, self._blanks = self._blanks, 0
        if c == ">" and (line[1:2] in ("", " ")):
            if section != "tool":
                self._end_section()
                self._section = "tool"
            else:
                self._tool_message()
            self._buf_line = lineno
            self._buf = [line[2:].rstrip()]
        elif c == "#" and (line.startswith("#### ") or line.rstrip() == "####"):
            if section != "user":
                self._end_section()
                self._section, self._buf_line, self._buf = "user", lineno, []
            self._buf.append(line[5:].rstrip())
        elif c == "#" and line.startswith(HEADER):
            self._end_section()
            self._session(line, lineno)
        elif section == "tool" and not blanks:  # a lazy continuation of the tool message
            self._buf.append(line.rstrip())
        else:
            self._end_section()
            self._section, self._buf_line, self._buf = "reply", lineno, []
            self._reply_line(line)

    def feed_text(self, text: str) -> None:
        """A whole file's text (line ends ``\n``): what :meth:`on_line` makes of its lines
        one by one, but the plain lines of a reply — those with no ``#``, ``>`` or `````
        at their start, which can neither end the reply nor open or close a fence: most of
        a log — are found by one regular-expression pass over the text and taken in one
        slice per run of them. The same result as line by line (the tests feed both)."""
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()  # the file's last line end
        # the lines that may matter to the state: their numbers, in order
        marks: list[int] = [0]  # the first line, whatever it holds
        row, pos, count = 0, 0, text.count
        for m in _MARK.finditer(text):
            start = m.start()
            row += count("\n", pos, start) + 1  # the line after this "\n"
            pos = start + 1
            marks.append(row)
        n = len(lines)
        marks.append(n)
        on_line = self.on_line
        i = k = 0
        while i < n:
            on_line(lines[i], i + 1, None)
            i += 1
            if self._section != "reply":
                continue
            while marks[k] < i:
                k += 1
            j = marks[k]
            if j > i:  # lines i .. j-1: plain reply lines
                chunk = lines[i:j]
                self._buf += chunk
                t = len(chunk)
                while t and (not chunk[t - 1] or chunk[t - 1].isspace()):
                    t -= 1
                blank_tail = len(chunk) - t
                self._blanks = self._blanks + blank_tail if t == 0 else blank_tail
                i = j
        self.lineno = max(self.lineno, n)
        self._out = []

    def _reply_line(self, line: str) -> None:
        self._blanks = 0 if line and not line.isspace() else self._blanks + 1
        self._buf.append(line)
        if "```" in line[:12]:
            self._fence_line(line)

    def _fence_line(self, line: str) -> None:
        """A reply line that may open or close a ````` fence."""
        s = line.lstrip()
        if s.startswith("```"):
            n = len(s) - len(s.lstrip("`"))
            if not self._fence:
                self._fence = "`" * n
            elif s.startswith(self._fence) and not s.lstrip("`").strip():
                self._fence = ""

    def _ends_reply(self, line: str, c: str) -> bool:
        """Whether a ``#`` or ``>`` line ends the open reply. Aider writes a reply as
        ``"\n" + reply + "\n\n"`` and every line of its own with two trailing spaces, so
        the user's next input follows a reply after two blank lines and Aider's next
        output after one; a markdown heading or quote of the reply does not (inside a
        code fence, where a file's markdown may be quoted, only those signatures count)."""
        if c == "#":
            if line.startswith(HEADER):
                return True
            if not (line.startswith("#### ") or line.rstrip() == "####"):
                return False
            return self._blanks >= 2 or (not self._fence and line.endswith("  "))
        if line[1:2] not in ("", " ") or not self._blanks:
            return False
        if line.startswith("> Tokens: ") or _OLD_TOKENS.match(line, 2) is not None:
            return True
        return not self._fence and line.endswith("  ")

    def _session(self, line: str, lineno: int) -> None:
        m = _HEADER_TIME.match(line)
        self.meta["sessions"].append({"line": lineno, "started": m.group(1) if m else None})
        if len(self.meta["sessions"]) > 1:
            new_step_on_user_input(self._state)

    # -- sections ---------------------------------------------------------------------
    def _end_section(self) -> None:
        section = self._section
        if not section:
            return
        self._section = ""
        if section == "tool":
            self._tool_message()
            self._end_tool_block()
        elif section == "user":
            self._user_input()
        else:
            self._reply()
        self._buf = []
        self._fence = ""

    def _reply(self) -> None:
        lines = self._buf
        while lines and not lines[-1].strip():
            lines.pop()
        text = "\n".join(lines).strip("\n")
        extra: dict[str, Any] = {"line": self._buf_line, "role": "assistant"}
        if "```" in text:
            blocks = [b.strip("\n") for b in _SHELL_BLOCK.findall(text)]
            if blocks:
                extra["shell_blocks"] = blocks
        self._release_call()
        self._release_cmd()
        self._state["agent_acted"] = True
        self._call = plain_event(EventKind.MODEL_CALL, self._state["step"], extra, text=text)

    def _user_input(self) -> None:
        self._release_call()
        self._release_cmd()
        self._flush_notes()
        text = "\n".join(self._buf).strip()
        lineno = self._buf_line
        extra: dict[str, Any] = {"line": lineno, "role": "user"}
        slash = None
        if text.startswith("!"):
            slash, rest = "run", text[1:].strip()
        elif text.startswith("/"):
            word, _, rest = text[1:].partition(" ")
            slash, rest = word.strip(), rest.strip()
        if slash in ("run", "test", "git") and rest:
            cmd = f"git {rest}" if slash == "git" else rest
            argv = split_command(cmd)
            ev = plain_event(classify_command(cmd, argv), self._state["step"],
                             {"line": lineno, "by": "user", "slash": slash})
            ev.command, ev.argv = cmd, argv
            self._cmd = ev
            self._state["agent_acted"] = True
            return
        prompt = slash is None or (slash in _PROMPT_SLASH and bool(rest))
        if slash is None and (text == "<blank>" or _QUESTION.search(text)):
            prompt = False  # an empty input, or an answer Aider logged as input
        if slash is not None:
            extra["slash"] = slash
        extra["prompt"] = prompt
        if prompt:
            new_step_on_user_input(self._state)
        self.emit(plain_event(EventKind.MESSAGE, self._state["step"], extra, text=text))

    def _tool_message(self) -> None:
        """One ``>`` message (its first line and lazy continuations) of a tool block."""
        lines = self._buf
        self._buf = []
        if not lines:
            return
        msg = lines[0] if len(lines) == 1 else "\n".join(lines)
        lineno = self._buf_line
        c = msg[:1]
        if (c == "T" and msg.startswith("Tokens: ")) or (c.isdigit() and _OLD_TOKENS.match(msg)):
            m = _TOKENS.match(msg) if msg.startswith("Tokens: ") else _OLD_TOKENS.match(msg)
            if m is None:
                raise TrajectoryFormatError(
                    f"{self.source}: line {lineno}: an Aider usage report that does not read "
                    f"as one ({msg[:80]!r})")
            call, self._call = self._call, None
            if call is None:  # a report with no reply before it (an empty answer)
                call = plain_event(EventKind.MODEL_CALL, self._state["step"],
                                   {"line": lineno, "role": "assistant"})
                self._state["agent_acted"] = True
            self._usage(call, m, lineno)
            self.emit(call)
            return
        self._release_call()
        if c == "A" and msg.startswith(_APPLIED):
            self._release_cmd()
            self._flush_notes()
            path = msg[len(_APPLIED):].strip()
            ev = plain_event(EventKind.FILE_CHANGE, self._state["step"], {"line": lineno})
            ev.paths_written = [path]
            mark_tool_return(ev)
            self._state["agent_acted"] = True
            self.emit(ev)
            return
        if c == "C" and msg.startswith("Commit ") and (m := _COMMIT.match(msg)) is not None:
            self._release_cmd()
            self._flush_notes()
            ev = plain_event(EventKind.OTHER, self._state["step"],
                             {"line": lineno, "commit": m.group(1),
                              "commit_message": m.group(2)}, text=msg)
            ev.safe_boundary, ev.boundary_kind = True, BoundaryKind.COMMIT
            self._state["agent_acted"] = True
            self.emit(ev)
            return
        if (c == "R" and self._notes and msg.startswith("Run shell command")
                and msg.rstrip().endswith(": y")):
            # the commands asked about (the message before) run next: their "Running"
            # lines become the events, the question goes with them
            self._suggested = self._notes.pop()
            return
        if c == "R" and msg.startswith(_RUNNING) and "\n" not in msg:
            self._release_cmd()
            self._flush_notes()
            cmd = msg[len(_RUNNING):].strip()
            argv = split_command(cmd)
            ev = plain_event(classify_command(cmd, argv), self._state["step"],
                             {"line": lineno, "by": "agent", "confirmed": True})
            self._suggested = None
            ev.command, ev.argv = cmd, argv
            self._cmd = ev
            self._state["agent_acted"] = True
            return
        if c == "A" and self._cmd is not None and msg.startswith("Add ") and _ADD_ASK.match(msg):
            self._cmd.extra["add_output"] = msg.rstrip()[-1:]  # the answer, y or n
            return
        if c == "A" and self._cmd is not None and (m := _ADDED.match(msg)) is not None:
            self._cmd.extra["output_lines"] = int(m.group(1))
            if self._cmd.extra.get("slash") == "test":
                self._cmd.extra["exit_nonzero"] = True
            return
        if c == "A" and msg.startswith("Aider v") and (m := _VERSION.match(msg)) is not None:
            self.meta["aider_versions"].append(m.group(1))
        elif c == "M" and (m := _MODEL.match(msg)) is not None:
            self.meta["models"].append(m.group(1))
        if not self._notes:
            self._notes_line = lineno
        self._notes.append(msg)

    def _end_tool_block(self) -> None:
        if self._suggested is not None:  # a confirmed suggestion that ran nothing: kept
            self._notes.append(self._suggested)
            self._suggested = None
        self._release_call()
        self._release_cmd()
        self._flush_notes()

    def _usage(self, call: Event, m: re.Match[str], lineno: int) -> None:
        call.extra["usage_line"] = lineno
        if m.re is _TOKENS:
            sent, r1 = _count(m.group(1))
            write, r2 = _count(m.group(2))
            hit, r3 = _count(m.group(3))
            recv, r4 = _count(m.group(4))
            cost, session = _money(m.group(5)), _money(m.group(6))
            rounded = r1 or r2 or r3 or r4
            if write is not None:
                call.extra["cache_write_tokens"] = write
        else:
            sent, _ = _count(m.group(1))
            recv, _ = _count(m.group(2))
            hit, rounded = None, False
            cost, session = _money(m.group(3)), _money(m.group(4))
        call.input_tokens, call.cached_tokens, call.output_tokens = sent, hit, recv
        call.extra["tokens_rounded"] = rounded
        if cost is not None:
            call.extra["cost_usd"] = cost
        if session is not None:
            call.extra["session_cost_usd"] = session

    def _release_call(self) -> None:
        if self._call is not None:
            call, self._call = self._call, None
            self.emit(call)

    def _release_cmd(self) -> None:
        if self._cmd is not None:
            ev, self._cmd = self._cmd, None
            mark_tool_return(ev)
            self.emit(ev)

    def _flush_notes(self) -> None:
        if self._notes:
            notes, self._notes = self._notes, []
            self.emit(plain_event(EventKind.OTHER, self._state["step"],
                                  {"line": self._notes_line, "lines": notes},
                                  text="\n".join(notes)))

    def on_end(self) -> None:
        self._end_section()
        self._end_tool_block()
        versions = self.meta["aider_versions"]
        self.meta["aider_version"] = versions[-1] if versions else None

    def task_default(self) -> str:
        name = self.source.name
        if name.startswith(".aider.chat.history") and self.source.parent.name:
            return self.source.parent.name  # the project the history sits in
        return stem(self.source)


def read_aider_chat(path: str | Path, *, task_id: str | None = None,
                    repo: str | None = None) -> Trajectory:
    """Read an Aider chat history (``.aider.chat.history.md``) into a :class:`Trajectory`."""
    parser = AiderChatParser(source=path, task_id=task_id, repo=repo)
    text = read_text(Path(path))
    parser.feed_text(text.replace("\r\n", "\n") if "\r" in text else text)
    return parser.finish()


_LLM_HEAD = re.compile(r"(TO LLM|LLM RESPONSE) (\S+)\s*$")
_ROLE = re.compile(r"([A-Z]+) ")


class AiderLlmHistoryParser(TextStreamParser):
    """Streaming parser of Aider's ``--llm-history-file`` (see the module docstring)."""

    FORMAT = LLM_FORMAT

    def __init__(self, *, source: str | Path = "<stream>", task_id: str | None = None,
                 repo: str | None = None) -> None:
        super().__init__(source=source, task_id=task_id, repo=repo)
        self._call: Event | None = None
        self._part = ""  # "request" or "response"
        self._reply: list[str] = []
        self._n_messages = 0
        self._roles: list[str] = []
        self._calls = 0

    def on_line(self, line: str, lineno: int, arrival: float | None) -> None:
        if line.startswith(("TO LLM ", "LLM RESPONSE ")):
            m = _LLM_HEAD.match(line)
            if m is None:
                raise TrajectoryFormatError(
                    f"{self.source}: line {lineno}: expected '{line.split(' 2')[0]} "
                    f"<ISO time>', got {line[:80]!r}")
            t = parse_iso(m.group(2), Loc(self.source, lineno))
            if m.group(1) == "TO LLM":
                self._close()
                self._calls += 1
                self._call = plain_event(EventKind.MODEL_CALL, self._calls,
                                         {"line": lineno, "time": m.group(2)}, start=t)
                self._part, self._n_messages, self._roles, self._reply = "request", 0, [], []
            else:
                if self._call is None or self._part != "request":
                    raise TrajectoryFormatError(
                        f"{self.source}: line {lineno}: 'LLM RESPONSE' without a "
                        "'TO LLM' request before it")
                self._call.end = t
                self._call.extra["response_time"] = m.group(2)
                self._part = "response"
            return
        if self._call is None:
            if not line.strip():
                return
            raise TrajectoryFormatError(
                f"{self.source}: line {lineno}: not an Aider LLM history (expected 'TO LLM "
                f"<ISO time>', got {line[:60]!r})")
        if self._part == "request":
            if line == "-------":
                self._n_messages += 1
            elif self._roles == [] or line[:1].isupper():
                m = _ROLE.match(line)
                if m and (not self._roles or self._roles[-1] != m.group(1)):
                    self._roles.append(m.group(1))
        else:
            self._reply.append(line[10:] if line.startswith("ASSISTANT ") else
                               "" if line == "ASSISTANT" else line)

    def _close(self) -> None:
        ev = self._call
        if ev is None:
            return
        self._call = None
        ev.extra["n_messages"] = self._n_messages
        ev.extra["roles"] = self._roles
        if self._part == "response":
            ev.text = "\n".join(self._reply)
        else:
            ev.extra["incomplete"] = True  # no response written (the run was cut)
        self.emit(ev, turn_end=True)

    def on_end(self) -> None:
        self._close()


def read_aider_llm_history(path: str | Path, *, task_id: str | None = None,
                           repo: str | None = None) -> Trajectory:
    """Read an Aider LLM history (``--llm-history-file``) into a :class:`Trajectory`."""
    return read_text_with(AiderLlmHistoryParser(source=path, task_id=task_id, repo=repo), path)
