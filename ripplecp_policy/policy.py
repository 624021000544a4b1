"""The placement-policy interface: online checkpoint/skip decisions under a budget.

A policy follows scikit-learn's estimator contract: parameters are stored by ``__init__``
unchanged, ``fit`` learns from training tasks and returns ``self``, learned attributes end
in ``_``. At evaluation, a runner walks each held-out task's candidate boundaries in
trajectory order; at each it builds a :class:`BoundaryObservation` from the prefix alone
(features computed with the placement so far) and asks :meth:`PlacementPolicy.decide`.
The runner, not the policy, enforces the budget: a checkpoint whose measured cost does not
fit the remaining budget is refused, so no policy can overspend.

A :class:`Setting` — the budget, the failure model and the feature configuration — is
given once to ``fit`` and once to the evaluation; a fitted policy records it
(``setting_``) and the runner refuses to evaluate it under another
(:class:`SettingMismatchError`), so no constructor copies a hazard that could disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator

from features.online import FeatureConfig
from ripplecp_policy.budget import Budget, BudgetSpec

if TYPE_CHECKING:
    from labelsets.tables import LabelSet

#: the named failure models: equal weight per measured failure, or weight proportional to
#: the nominal duration of the segment the failure strikes in (a constant hazard per second)
HAZARDS: tuple[str, str] = ("uniform", "duration")
#: a named failure model, or explicit weights ``{failure: weight}``
HazardSpec = str | Mapping[int, float] | tuple[tuple[int, float], ...]


def fold_settings(specs: tuple[str, ...] | list[str], train: LabelSet,
                  hazard: HazardSpec = "uniform") -> list[tuple[str, Setting]]:
    """(label, setting) per budget spec for one fold of a study: a relative budget
    (``seconds:2x``) is resolved on the fold's training tasks only — the held-out
    repository never sets its own budget — so its amount differs by fold and the spec
    itself is the label it is reported under; an absolute budget keeps its own label."""
    out = []
    for text in specs:
        spec = BudgetSpec.parse(text)
        budget = spec.resolve(train)
        out.append((text if spec.relative else budget.label(), Setting(budget, hazard)))
    return out


def canonical_hazard(hazard: HazardSpec) -> HazardSpec:
    """A failure model in its one hashable form: a name of :data:`HAZARDS`, or explicit
    weights as sorted ``(failure, weight)`` pairs; ValueError naming the bad value."""
    if isinstance(hazard, Mapping | tuple):
        pairs = hazard.items() if isinstance(hazard, Mapping) else hazard
        try:
            return tuple(sorted((int(f), float(w)) for f, w in pairs))
        except (TypeError, ValueError):
            raise ValueError(f"hazard weights must map failures to numbers, got {hazard!r}") from None
    if hazard not in HAZARDS:
        raise ValueError(f"hazard must be one of {HAZARDS} or a mapping failure -> weight, got {hazard!r}")
    return hazard


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


class SettingMismatchError(ValueError):
    """A policy fitted under one setting is evaluated under another."""


@dataclass(frozen=True)
class Setting:
    """What a policy is fitted for and evaluated under: the budget, the failure model, the
    online-feature configuration. Given once to ``fit`` and once to the evaluation.

    ``budget`` may be None at fit time for a policy that learns nothing budget-specific
    (it then runs under any budget); ``hazard`` is ``"uniform"``, ``"duration"`` (see
    :data:`HAZARDS`) or explicit weights ``{failure: weight}``, held as sorted pairs so a
    setting is hashable; ``features`` defaults to :class:`features.online.FeatureConfig`'s
    defaults.
    """

    budget: Budget | None = None
    hazard: HazardSpec = "uniform"
    features: FeatureConfig | None = None

    def __post_init__(self) -> None:
        if self.budget is not None and not isinstance(self.budget, Budget):
            raise TypeError(f"Setting: budget must be a Budget or None, got {self.budget!r}")
        object.__setattr__(self, "hazard", canonical_hazard(self.hazard))
        if self.features is None:
            object.__setattr__(self, "features", FeatureConfig())
        elif not isinstance(self.features, FeatureConfig):
            raise TypeError(f"Setting: features must be a features.online.FeatureConfig, got {self.features!r}")

    def with_budget(self, budget: Budget | None) -> Setting:
        """The same failure model and features under another budget."""
        return replace(self, budget=budget)

    def admits(self, evaluated: Setting) -> bool:
        """Can a policy fitted under this setting be evaluated under ``evaluated``? Same
        failure model and features, and the same budget unless this one names none."""
        return (self.hazard == evaluated.hazard and self.features == evaluated.features
                and (self.budget is None or self.budget == evaluated.budget))

    def label(self) -> str:
        budget = self.budget.label() if self.budget is not None else "any budget"
        hazard = self.hazard if isinstance(self.hazard, str) else "explicit weights"
        return f"{budget}, hazard {hazard}"


def as_setting(setting: Setting | None) -> Setting:
    """``setting``, or the default setting (no budget, uniform failures, default features)."""
    if setting is None:
        return Setting()
    if not isinstance(setting, Setting):
        raise TypeError(f"expected a Setting (ripplecp_policy.policy.Setting), got {setting!r}")
    return setting


def check_setting(policy: PlacementPolicy, setting: Setting) -> None:
    """Raise :class:`SettingMismatchError` when ``policy`` was fitted under a setting that does
    not admit ``setting`` (an unfitted policy has learned nothing and runs anywhere)."""
    fitted = getattr(policy, "setting_", None)
    if fitted is not None and not fitted.admits(setting):
        raise SettingMismatchError(
            f"{policy.name} was fitted under {fitted.label()} ({fitted}) and cannot be evaluated "
            f"under {setting.label()} ({setting}); fit it under the setting it is evaluated in"
        )


@dataclass
class BoundaryObservation:
    """What a policy may see at candidate boundary ``boundary`` (1-based) of a task.

    Everything here is computable online from the past: ``features`` are the prefix-causal
    features with the placement so far; ``checkpoint_cost`` is an estimate of what this
    checkpoint will be charged, known before it is taken (1 for a count budget; the mean
    realised charge of the task's earlier checkpoints, or before the first the mean of the
    other repositories' checkpoints: :func:`ripplecp_policy.episode.charge_estimate`); the
    runner charges the realised cost; ``affordable`` says whether it fits the remaining budget
    (the runner's own check, :func:`ripplecp_policy.pricing.fits`: the runner refuses a
    checkpoint that does not fit, whatever the policy answers).
    """

    task_id: str
    repo: str
    boundary: int
    event_index: int
    features: dict[str, float]
    budget: Budget
    remaining: float
    n_checkpoints: int
    last_checkpoint: int  # 0 = none yet
    elapsed_s: float  # nominal seconds at this boundary (NaN when unknown)
    checkpoint_cost: float
    affordable: bool
    history: list[int] = field(default_factory=list)  # boundaries checkpointed so far


class PlacementPolicy(BaseEstimator):
    """Base class of every placement policy, baseline or learned.

    Subclasses override :meth:`decide` and, when they learn or tune, :meth:`fit`.
    ``reset`` is called at the start of every task with the evaluation seed, so a
    stochastic policy is deterministic for a seed.
    """

    #: the policy's role (see :class:`Role`): an offline limit sees the measured table and the
    #: runner calls :meth:`place` instead of :meth:`decide`; an unmatched reference runs
    #: under a cap that never binds; neither gets a verdict
    role: ClassVar[Role] = Role.ONLINE
    #: False for policies that ignore features (the runner then skips feature extraction)
    uses_features: bool = True

    def fit(self, data: LabelSet, setting: Setting | None = None) -> PlacementPolicy:
        """Learn or tune on training tasks only, under ``setting``; the default learns nothing.

        Every fit ends here (subclasses return ``super().fit(data, setting)``): it records the
        setting (``setting_``), which the runner checks against the evaluated one.
        """
        self.setting_ = as_setting(setting)
        self.is_fitted_ = True
        return self

    def reset(self, task_id: str, seed: int = 0) -> None:
        """Start a new task; stochastic policies seed their generator here (``_rng``,
        made on first use: most policies never draw, and a study resets tens of thousands
        of times)."""
        self._rng_seed = (seed, _stable_hash(task_id))
        self.__dict__.pop("_rng_made", None)

    @property
    def _rng(self) -> np.random.Generator:
        """The task's generator, seeded by :meth:`reset` from the seed and the task id."""
        rng = self.__dict__.get("_rng_made")
        if rng is None:
            rng = self._rng_made = np.random.default_rng(list(self._rng_seed))
        return rng

    def decide(self, obs: BoundaryObservation) -> bool:
        """True to checkpoint at this boundary (subject to the runner's budget check)."""
        raise NotImplementedError

    def place(self, costs: Any, budget: Budget) -> list[int]:
        """Offline policies only: the boundaries to checkpoint, chosen from the measured
        table's cost arrays (a :class:`ripplecp_policy.pricing.TaskCosts`, priced under the
        evaluated failure model)."""
        raise NotImplementedError(f"{type(self).__name__} is an online policy; use decide()")

    @property
    def name(self) -> str:
        return type(self).__name__


def _stable_hash(s: str) -> int:
    """A process-independent 32-bit hash (``hash()`` is salted per process)."""
    import zlib

    return zlib.crc32(s.encode())
