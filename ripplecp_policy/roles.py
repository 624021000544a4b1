"""What a policy is in a comparison (:class:`Role`). The standard library only, so the
policy registry and every command's ``--help`` name the roles without scikit-learn."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Role"]


class Role(StrEnum):
    """What a policy is in a comparison.

    ``online``: decides from the prefix alone under the matched budget, and gets a verdict.
    ``offline limit``: reads the measured table (oracle, clairvoyant optimum), so no runtime
    can attain it; shown as a limit, never judged. ``unmatched reference``: runs without a
    budget cap (every boundary); shown for scale, never judged.
    """

    ONLINE = "online"
    OFFLINE = "offline limit"
    REFERENCE = "unmatched reference"
