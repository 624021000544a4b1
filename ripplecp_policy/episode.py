"""The one episode runner: a policy walks one task's candidate boundaries under a budget cap.

Every place that shows a policy boundaries goes through here — the matched-budget
evaluation (:class:`ripplecp_policy.evaluation.Evaluator`), training replays
(:class:`ripplecp_policy.datasets.TaskReplay`), fitted-Q's behaviour walks and the exported
model (:func:`ripplecp_policy.export.decide_frame`):

- the prefix walk: features at boundary b come from one :class:`features.online.PrefixWalk`
  that has observed the nominal trajectory's events up to b's event and no further, with
  every checkpoint taken so far marked right after its boundary (:func:`prefix_features`,
  :class:`LiveFeatures`);
- the one observation builder (:func:`observation`), which also states whether the
  checkpoint fits the remaining budget (:func:`ripplecp_policy.pricing.fits`);
- the budget check: :meth:`Episode.offer` records every request and takes it only when it
  fits, so no policy can overspend whatever it answers;
- the :class:`Placement` record of what happened.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from features.online import FeatureConfig, PrefixWalk
from ripplecp_policy.policy import BoundaryObservation, Budget, Setting
from ripplecp_policy.pricing import fits

if TYPE_CHECKING:
    from features.schema import Trajectory
    from ripplecp_policy.pricing import TaskCosts

#: features at (boundary, checkpoints taken before it)
FeatureSource = Callable[[int, Sequence[int]], dict[str, float]]
Decide = Callable[[BoundaryObservation], bool]


@dataclass
class Placement:
    """What a policy did on one task under one setting; ``budget`` is the cap it ran under
    (the setting's budget, or a cap that never binds for an unmatched reference)."""

    task_id: str
    repo: str
    policy: str
    budget: Budget
    checkpoints: list[int]
    requested: list[int] = field(default_factory=list)  # boundaries where it asked to checkpoint
    refused: list[int] = field(default_factory=list)  # asked, but over the remaining budget
    spend: float = 0.0  # in the budget's unit
    budget_matched: bool = True
    seed: int = 0
    n_boundaries: int = 0
    setting: Setting = field(default_factory=Setting)


def charge_estimate(taken: Sequence[float], prior: float) -> float:
    """What a runtime can know of the next checkpoint's charge before taking it: the mean
    realised charge of the task's earlier checkpoints, or ``prior`` before the first."""
    n = len(taken)
    if n == 0:
        return float(prior)
    # numpy sums fewer than 8 values in order, as sum() does: the same mean, without the
    # array (this runs at every boundary of every episode)
    return sum(map(float, taken)) / n if n < 8 else float(np.mean(taken))


def observation(
    task_id: str, repo: str, boundary: int, *, event_index: int, features: dict[str, float],
    cap: Budget, spent: float, history: Sequence[int], elapsed_s: float, charge: float,
    estimate: float | None = None,
) -> BoundaryObservation:
    """What a policy is shown at ``boundary``: the prefix features, the placement so far and
    this checkpoint's estimated charge (``estimate``, see :func:`charge_estimate`; the
    realised ``charge`` only when none is given), with ``spent`` of the cap ``cap`` already
    used; ``affordable`` is the runner's own check of the realised charge."""
    return BoundaryObservation(
        task_id=task_id, repo=repo, boundary=boundary, event_index=event_index,
        features=features, budget=cap, remaining=cap.amount - spent,
        n_checkpoints=len(history), last_checkpoint=history[-1] if history else 0,
        elapsed_s=elapsed_s, checkpoint_cost=charge if estimate is None else estimate,
        affordable=fits(spent, charge, cap.amount), history=list(history),
    )


class Episode:
    """One task walked under one cap: what was asked, taken and refused, and the spend."""

    def __init__(self, task_id: str, repo: str, cap: Budget, prior: float = 1.0) -> None:
        self.task_id = task_id
        self.repo = repo
        self.cap = cap
        self.prior = prior  # the charge estimate before the task's first checkpoint
        self.charges: list[float] = []  # realised charges of the checkpoints taken
        self.spent = 0.0
        self.taken: list[int] = []
        self.requested: list[int] = []
        self.refused: list[int] = []
        self.failed: list[int] = []  # taken, then the checkpoint itself failed (cancelled)

    def observe(self, boundary: int, *, event_index: int, features: dict[str, float],
                elapsed_s: float, charge: float) -> BoundaryObservation:
        """The observation at ``boundary`` given the placement so far."""
        return observation(
            self.task_id, self.repo, boundary, event_index=event_index, features=features,
            cap=self.cap, spent=self.spent, history=self.taken, elapsed_s=elapsed_s,
            charge=charge, estimate=charge_estimate(self.charges, self.prior),
        )

    def offer(self, boundary: int, charge: float) -> bool:
        """The policy asks to checkpoint at ``boundary``: taken when it fits, else refused."""
        self.requested.append(boundary)
        if fits(self.spent, charge, self.cap.amount):
            self.taken.append(boundary)
            self.charges.append(charge)
            self.spent += charge
            return True
        self.refused.append(boundary)
        return False

    def settle(self, measured: float) -> None:
        """The last checkpoint taken (on an estimated charge) is charged ``measured``, what
        it was found to cost once taken (a runtime's creation seconds or stored bytes)."""
        if not self.taken:
            raise ValueError("settle: no checkpoint taken to settle")
        self.spent += float(measured) - self.charges[-1]
        self.charges[-1] = float(measured)

    def cancel(self) -> None:
        """The last checkpoint taken failed: it is no longer taken, and nothing is charged
        for it (it stays among the requests, and is recorded in ``failed``)."""
        if not self.taken:
            raise ValueError("cancel: no checkpoint taken to cancel")
        self.failed.append(self.taken.pop())
        self.spent -= self.charges.pop()

    def replay(self, boundary: int, charge: float) -> None:
        """A checkpoint taken at ``boundary`` by an earlier run of this episode (read back
        from a log): taken and charged ``charge``, whether or not it fits now."""
        self.requested.append(boundary)
        self.taken.append(boundary)
        self.charges.append(float(charge))
        self.spent += float(charge)

    def resume(self, spent: float) -> None:
        """Continue from a spend counted elsewhere (a runtime that tracks its own budget
        says what is left): ``spent`` of the cap is used so far, whatever this ledger says."""
        self.spent = float(spent)

    def walk(self, decide: Decide, costs: TaskCosts, charges: np.ndarray, features: FeatureSource,
             name: str = "policy") -> Episode:
        """Boundaries 1..B in order: observe, ask ``decide``, offer what it wants."""
        for b in range(1, costs.n_boundaries + 1):
            obs = self.observe(b, event_index=int(costs.event_index[b]),
                               features=features(b, self.taken),
                               elapsed_s=float(costs.nominal_t[b]), charge=float(charges[b]))
            decision = decide(obs)
            if not isinstance(decision, bool | np.bool_):
                raise TypeError(f"{name}.decide returned {decision!r}; expected a bool")
            if decision:
                self.offer(b, float(charges[b]))
        return self

    def placement(self, policy: str, setting: Setting, *, budget_matched: bool, seed: int,
                  n_boundaries: int) -> Placement:
        """The record of this episode of ``policy`` under ``setting``."""
        return Placement(
            task_id=self.task_id, repo=self.repo, policy=policy, budget=self.cap,
            checkpoints=list(self.taken), requested=list(self.requested),
            refused=list(self.refused), spend=self.spent, budget_matched=budget_matched,
            seed=seed, n_boundaries=n_boundaries, setting=setting,
        )


def prefix_features(traj: Trajectory, boundary_events: Sequence[int], history: Sequence[int],
                    config: FeatureConfig | None = None) -> list[dict[str, float] | None]:
    """Features at every boundary after the last checkpoint of ``history``, with each
    checkpoint of ``history`` marked right after its boundary: one prefix walk. Row b
    (1-based) serves every episode whose checkpoints before b are ``history``; rows at or
    before the last checkpoint are None."""
    walk = PrefixWalk(traj, boundary_events, config)
    marks = set(history)
    last = max(history, default=0)
    rows: list[dict[str, float] | None] = [None] * (walk.n_boundaries + 1)
    for b in range(1, walk.n_boundaries + 1):
        walk.advance(b)
        if b > last:
            rows[b] = walk.features()
        if b in marks:
            walk.extractor.mark_checkpoint()
    return rows


class LiveFeatures:
    """A :data:`FeatureSource` that advances one prefix walk along with the episode, marking
    each checkpoint as the episode takes it (no cache: the walk a runtime does)."""

    def __init__(self, traj: Trajectory, boundary_events: Sequence[int],
                 config: FeatureConfig | None = None) -> None:
        self.walk = PrefixWalk(traj, boundary_events, config)
        self._marked = 0

    def __call__(self, boundary: int, history: Sequence[int]) -> dict[str, float]:
        for b in history[self._marked:]:  # taken since the last call, at the current boundary
            if b != self.walk.boundary:
                raise ValueError(f"checkpoint {b} was not taken at the walk's boundary {self.walk.boundary}")
            self.walk.extractor.mark_checkpoint()
        self._marked = len(history)
        self.walk.advance(boundary)
        return self.walk.features()
