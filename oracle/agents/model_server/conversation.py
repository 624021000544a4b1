"""The one normalized conversation every protocol is read into, and the step a brain answers.

Each wire protocol (OpenAI Responses, Anthropic Messages, OpenAI chat completions) sends the
whole transcript with every request. The server reads it into a :class:`Conversation` — system
and user text, assistant turns with their tool calls, tool results with their output and exit
status where the runtime reports it — so a brain decides from the transcript alone, whichever
runtime sent it. The brain answers with a :class:`Step`: tool calls (a shell command, a file
edit, or a named tool) or, with no calls, a finished message; the protocol renders it.

Tool calls are classified once here (:func:`tool_kind`), by the names the runtimes use:
``exec_command``/``shell_command``/``shell``/``Bash``/``bash`` run a shell command,
``apply_patch``/``Edit`` edit a file, ``Write`` writes one, ``Read`` reads one; Gemini CLI's
``run_shell_command``, ``replace``, ``write_file`` and ``read_file`` likewise.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = [
    "Action",
    "Call",
    "Conversation",
    "Edit",
    "Message",
    "Shell",
    "Step",
    "ToolCall",
    "ToolResult",
    "tool_kind",
]

Role = Literal["system", "user", "assistant", "tool"]
ToolKind = Literal["shell", "edit", "write", "read", "other"]

_KINDS: dict[str, ToolKind] = {
    "exec_command": "shell", "shell_command": "shell", "shell": "shell", "bash": "shell",
    "Bash": "shell", "apply_patch": "edit", "Edit": "edit", "MultiEdit": "edit",
    "Write": "write", "Read": "read",
    # Gemini CLI
    "run_shell_command": "shell", "replace": "edit", "write_file": "write", "read_file": "read",
}


def tool_kind(name: str) -> ToolKind:
    """What a runtime's tool of this name does: shell, edit, write, read or other."""
    return _KINDS.get(name, "other")


@dataclass(frozen=True)
class ToolCall:
    """One tool call an assistant turn made, as the runtime echoes it back.

    ``arguments`` are the parsed arguments (a free-form tool such as Codex's ``apply_patch``
    has ``{"input": text}``); ``command`` is the shell text of a shell call and ``path`` the
    file of a file tool, when they can be read off the arguments.
    """

    id: str
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    kind: ToolKind = "other"
    command: str | None = None
    path: str | None = None


@dataclass(frozen=True)
class ToolResult:
    """A tool call's result: its output text and, where the runtime reports it, exit status."""

    call_id: str
    output: str
    exit_code: int | None = None
    is_error: bool | None = None


@dataclass(frozen=True)
class Message:
    """One message of the transcript.

    ``system``/``user``: text. ``assistant``: text and the tool calls it made (parallel calls
    are one turn). ``tool``: the results of earlier calls, plus any text the runtime attached.
    """

    role: Role
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    results: tuple[ToolResult, ...] = ()


@dataclass(frozen=True)
class Conversation:
    """The whole transcript of one request, normalized across protocols.

    ``id`` is the runtime's conversation (thread/session) id when it sends one; ``cwd`` the
    working directory the runtime states in its prompt, if any; ``tools`` the tool names
    offered.
    """

    protocol: str
    messages: tuple[Message, ...]
    model: str = ""
    id: str | None = None
    tools: tuple[str, ...] = ()
    cwd: str | None = None

    @property
    def assistant_turns(self) -> int:
        """How many assistant turns the transcript holds (the brain's earlier answers)."""
        return sum(1 for m in self.messages if m.role == "assistant")

    def prompts(self) -> list[tuple[int, str]]:
        """``(position, text)`` of each user message (not tool results), in order."""
        return [(i, m.text) for i, m in enumerate(self.messages) if m.role == "user"]

    def tool_calls(self) -> list[ToolCall]:
        """Every tool call of the transcript, in order."""
        return [c for m in self.messages for c in m.tool_calls]

    def results(self) -> dict[str, ToolResult]:
        """Tool results by call id."""
        return {r.call_id: r for m in self.messages for r in m.results}

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready form (what :meth:`digest` hashes)."""
        return asdict(self)

    def digest(self) -> str:
        """sha256 of the canonical JSON of the normalized transcript, less its ``id``.

        Stable across the runtime's volatile request fields (thread ids, metadata, headers),
        so two runs that send the same conversation have the same digest.
        """
        content = {k: v for k, v in self.to_dict().items() if k != "id"}
        raw = json.dumps(content, sort_keys=True, separators=(",", ":"),
                         ensure_ascii=False, default=str)
        return hashlib.sha256(raw.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- the brain's answer


@dataclass(frozen=True)
class Shell:
    """Run a shell command; ``timeout_s`` asks the runtime to wait that long for it."""

    command: str
    timeout_s: float | None = None


@dataclass(frozen=True)
class Edit:
    """Replace ``old`` by ``new`` in the file at ``path`` (relative to the runtime's cwd).

    ``old`` and ``new`` are whole lines (Codex's ``apply_patch`` replaces lines).
    """

    path: str
    old: str
    new: str


@dataclass(frozen=True)
class Call:
    """A runtime's own tool by name, arguments passed through as given (e.g. Claude's Read)."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


Action = Shell | Edit | Call


@dataclass(frozen=True)
class Step:
    """A brain's answer to one request: tool calls, or none (a finished message).

    ``text`` is said alongside the calls, or is the final message when there are none;
    ``label`` names the decision for the audit log (e.g. ``turn0/step2``).
    """

    calls: tuple[Action, ...] = ()
    text: str = ""
    label: str = ""

    @property
    def finished(self) -> bool:
        """True when the step makes no tool call: the runtime's turn ends."""
        return not self.calls
