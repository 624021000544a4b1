"""The readers' error and warning types: one error for a log that cannot be read (its message
names the file and the line or field), and the warnings a read may give."""

from __future__ import annotations

import warnings
from pathlib import Path


class TrajectoryFormatError(ValueError):
    """A log that cannot be read as the expected format; the message names file and line/field."""


class UnknownEventWarning(UserWarning):
    """An event or item type the reader does not know; it is kept as an ``other`` event."""


class EmptyTrajectoryWarning(UserWarning):
    """A log read without error that holds no events (``python -m features`` exits 3)."""


class TimeOrderWarning(UserWarning):
    """Times that run backwards; kept, and flagged (see :func:`finish`)."""


def warn_unknown(path: Path, where: str, what: str) -> None:
    """Emit an :class:`UnknownEventWarning` naming the file and location."""
    warnings.warn(
        f"{path}: {where}: unknown {what}; kept as kind 'other'",
        UnknownEventWarning,
        stacklevel=3,
    )

