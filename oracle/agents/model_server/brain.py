"""The brain: the model server's pluggable decision-maker.

The server reads each request into a normalized :class:`ModelRequest` (the whole transcript
as a :class:`~oracle.agents.model_server.conversation.Conversation`, plus the raw request for brains
that forward it) and asks the brain to respond. A brain answers either with a
:class:`~oracle.agents.model_server.conversation.Step`, which the server renders in the request's
protocol, or with a ready :class:`~oracle.agents.model_server.wire.Reply` (a forwarding brain passes
the real endpoint's answer through). Most brains decide from the transcript alone and derive
from :class:`StepBrain`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from oracle.agents.model_server.conversation import Conversation, Step
from oracle.agents.model_server.wire import Reply

__all__ = ["Brain", "BrainError", "ModelRequest", "StepBrain"]


class BrainError(RuntimeError):
    """A brain could not answer (answered with HTTP 502 and recorded in the audit log)."""


@dataclass(frozen=True)
class ModelRequest:
    """One model request as the brain sees it.

    ``path`` includes the query string; ``headers`` have lower-case names; ``raw`` is the
    request body as received (decoded from any content encoding).
    """

    protocol: str
    path: str
    headers: Mapping[str, str]
    body: Mapping[str, Any]
    raw: bytes
    conversation: Conversation


class Brain(ABC):
    """Decides the model's answer to each request."""

    #: the name the audit log records and ``--brain`` selects
    name: ClassVar[str] = ""

    @abstractmethod
    def respond(self, request: ModelRequest) -> Step | Reply:
        """The next step for ``request`` (rendered by the server), or a ready reply."""


class StepBrain(Brain):
    """A brain that decides the next step from the normalized transcript alone."""

    def respond(self, request: ModelRequest) -> Step:
        return self.next_step(request.conversation)

    @abstractmethod
    def next_step(self, conversation: Conversation) -> Step:
        """The next step given the whole transcript so far."""
