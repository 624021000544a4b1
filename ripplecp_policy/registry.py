"""The policy registry: every baseline and learned policy once, with its role and search space.

Each entry is registered beside its classes — the learned policies in
:mod:`ripplecp_policy.learned`, the baselines in :mod:`baselines` (which may import this
package, never the reverse) — so importing a package registers its policies, and adding a
policy is one :func:`register` call next to it. Studies, training, tuning, plots, verdicts
and tests read the registry instead of keeping their own lists:

- ``key``: the entry's name on a command line (``xgboost``, ``fqi-extratrees``,
  ``first-boundary``); ``name``: the report name of the policy it makes;
- ``make(seed, quick, device)``: a fresh, unfitted policy (``quick``: CI-sized models);
- ``role``: what the policy is in a comparison (:class:`~ripplecp_policy.roles.Role`);
- ``space``: the Optuna search space :func:`ripplecp_policy.tuning.tune` uses (None for
  policies that tune themselves in ``fit`` or not at all);
- ``in_study``: whether the default matched-budget study runs it.

Entries are listed baselines first, then learned policies, each group in registration
order, whichever package was imported first.

An entry's key, name, role and ``in_study`` are declared as literals, and ``make`` imports
the policy's class on first call, so registering builds nothing: a command's ``--help`` reads
the registry without scikit-learn. :func:`check_entry` builds an entry's policy and checks
it is what the literals say (the conformance tests run it on every entry).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ripplecp_policy.roles import Role

if TYPE_CHECKING:
    from ripplecp_policy.policy import PlacementPolicy

#: an Optuna search space: trial -> constructor parameters
SearchSpace = Callable[[Any], dict[str, Any]]
#: make(seed=0, quick=False, device="cpu") -> a fresh, unfitted policy
Factory = Callable[..., "PlacementPolicy"]


@dataclass(frozen=True)
class PolicyEntry:
    """One registered policy: how to make it, what it is, how to tune it."""

    key: str
    name: str
    role: Role
    make: Factory
    learned: bool
    space: SearchSpace | None
    in_study: bool


_ENTRIES: dict[str, PolicyEntry] = {}


def register(key: str, make: Factory, *, name: str, role: Role, learned: bool = False,
             space: SearchSpace | None = None, in_study: bool = True) -> PolicyEntry:
    """Register a policy under ``key`` with the report ``name`` and ``role`` its policy
    has (declared, not built: :func:`check_entry` builds it); ValueError when another
    entry already has that report name."""
    entry = PolicyEntry(key=key, name=name, role=Role(role), make=make, learned=learned,
                        space=space, in_study=in_study)
    for other in _ENTRIES.values():
        if other.key != key and other.name == entry.name:
            raise ValueError(f"register({key!r}): report name {entry.name!r} is already {other.key!r}'s")
    _ENTRIES[key] = entry
    return entry


def check_entry(e: PolicyEntry) -> PlacementPolicy:
    """Build ``e``'s policy and check it is what the entry declares: a PlacementPolicy
    with the entry's report name and role (TypeError / ValueError naming the entry)."""
    from ripplecp_policy.policy import PlacementPolicy

    policy = e.make()
    if not isinstance(policy, PlacementPolicy):
        raise TypeError(f"register({e.key!r}): make() returned {type(policy).__name__}, not a PlacementPolicy")
    if policy.name != e.name or type(policy).role is not e.role:
        raise ValueError(f"register({e.key!r}): declared name {e.name!r}, role {e.role.value!r}; "
                         f"make() built name {policy.name!r}, role {type(policy).role.value!r}")
    return policy


def entries(*, learned: bool | None = None, role: Role | None = None,
            in_study: bool | None = None) -> list[PolicyEntry]:
    """The registered entries (baselines first, then learned), optionally filtered."""
    order = {k: i for i, k in enumerate(_ENTRIES)}
    out = sorted(_ENTRIES.values(), key=lambda e: (e.learned, order[e.key]))
    return [e for e in out if (learned is None or e.learned == learned)
            and (role is None or e.role is role) and (in_study is None or e.in_study == in_study)]


def entry(key: str) -> PolicyEntry:
    """The entry registered under ``key`` or with report name ``key``; KeyError naming the
    registered ones and the nearest."""
    if key in _ENTRIES:
        return _ENTRIES[key]
    for e in _ENTRIES.values():
        if e.name == key:
            return e
    known = sorted(_ENTRIES) + sorted(e.name for e in _ENTRIES.values())
    near = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    raise KeyError(f"no policy {key!r} is registered (registered: {', '.join(sorted(_ENTRIES))}; "
                   f"baselines register on `import baselines`, learned policies on "
                   f"`import ripplecp_policy.learned`){hint}")


def entry_for(policy: PlacementPolicy) -> PolicyEntry:
    """The entry whose report name is ``policy.name``."""
    return entry(policy.name)

