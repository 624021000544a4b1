"""Simulated agent workloads: a generative model of agent runs and of recovery by re-derivation.

One real label cost the pilot 8.4 agent-minutes (paper, G.4). This module gives a fast,
reproducible workbench behind the same agent protocol: a simulated agent whose nominal
runs are emitted in the canonical event schema and whose recoveries cost what the
generative model below says, on a virtual clock. Workload families (the parameters) live
in :mod:`oracle.workloads`; ``swe-pilot`` is calibrated to the published pilot
(``experiments.calibrate`` prints how close).

Generative model
================

**Task (hidden latent state).** A task of family ``F`` in repository ``R`` has ``S``
logical steps (``F.steps_pattern`` cycled over the task's index in its repository; the
first ``S`` templates of ``F.steps``). Step ``s`` carries nominal work
``W_s = StepConfig.work_s x R.work_scale x LN(work_cv)`` (``LN(c)``: a mean-one lognormal
with coefficient of variation ``c``; ``LN_sigma(s)``: mean-one lognormal with log-sd ``s``)
split over ``n_s ~ U{units}`` tool-call *units*. A unit is one model call followed by one
tool call; the kinds of the first ``n_s - 1`` follow the proportions of ``StepConfig.mix``
(largest-remainder rounding, random order; the last unit has kind ``StepConfig.last``) and its share of ``W_s`` is proportional to ``kind_weight[kind] x
LN_sigma(0.5)``. ``FamilyConfig.model_share`` of an exploration unit's seconds is the model
call (30 % for builds and tests, whose tool dominates). Unit kinds:

- ``fact``: exploration that discovers a fact the result needs. Its *rediscovery scale* is
  ``unit seconds x m``, ``m = fact_mult x LN_sigma(fact_sigma)`` drawn once per fact:
  heavy-tailed across facts, so a few facts are very expensive to rediscover.
- ``decision``: a fact whose only trace is a tiny edit (a one-line pin in
  ``requirements.txt``/config) that every later unit of the kinds in
  ``StepConfig.fanout`` reads (large downstream fan-out). Its rediscovery scale is the
  whole step's work times ``fact_mult x LN_sigma(fact_sigma)``: the investigation.
- ``dead_end``: exploration that led nowhere; it never needs redoing.
- ``edit``: an on-path file change of ``edit_bytes`` bytes; redo costs ``redo_edit`` x its
  seconds. ``build``: an on-path artifact of ``build_bytes`` bytes; redo costs
  ``redo_build`` x its seconds (cached inputs make regeneration cheap); its bytes are
  ``sqrt(lo x hi)`` of ``build_bytes`` times its seconds over the family's mean unit seconds
  (mean over templates of ``work_s`` / mean ``units``) times ``LN_sigma(0.3)``, clipped to the range (bigger artifacts take longer to build).
  Edits and decisions write log-uniform bytes in ``edit_bytes``.
- ``test``: a test run (passed/failed counts; failing until the last step of a verified
  task). Lost test runs are superseded, never redone.

Each task also has a verification-suite cost ``V = F.verify_s x R.work_scale x
LN(F.verify_cv)``, a verified flag (``F.verified_pattern`` over the task's global index),
and a pristine workspace of ``R.workspace_mb x LN(R.workspace_cv)`` MB.

**Nominal trajectory.** Units are emitted in order as a ``model_call`` event (input tokens
``F.tokens_per_model_s`` per second, ``F.cached_fraction`` of them cached,
``F.output_tokens_per_s`` output tokens per second) and a tool event (``command``,
``file_change`` or ``test``) with argv, command text, paths read and written, bytes and
test counts. Every tool event is a safe boundary (``tool_return``, or ``test``); the last
tool event of a step is also ``turn_end``. Candidate boundaries (``features.schema``
indexing): ``granularity="turn"`` numbers the steps' last tool events 1..S,
``"tool_call"`` numbers every tool event 1..N. Hidden state (unit kinds, fact scales,
which events are dead ends) is never written to events, their ``extra`` or the
trajectory ``meta``.

**Recovery is a re-derivation.** Write ``P[b]`` for the number of units done at boundary
``b`` (``P[0] = 0``). A failure ``f`` strikes when boundary ``f-1`` has passed and the next
event arrives, so the units in ``[P[r], P[f-1])`` are *lost* and the units in
``[P[f-1], N)`` were never reached (*remaining*). Resumed from restore point ``r`` (the
preserved transcript and facts at ``r``), the recovery cost to the stopping rule is

    J(r, f) = G x (O + D + Q + X + M + Vf + U), capped at F.cap_s

- ``O`` re-orientation: ``F.orient_pristine_s`` from the pristine start, else
  ``F.orient_base_s + F.orient_per_ktok_s x (preserved transcript kilotokens)``, times
  ``LN_sigma(F.orient_sigma)``: reading the transcript grows with its length.
- ``D`` rediscovery of every fact (and decision) lost in ``[P[r], P[f-1])``: the sum of
  their rediscovery scales, each times its own ``LN_sigma(F.rediscovery_sigma)``.
- ``Q`` redo of lost edits and builds on the path to the result (their redo seconds times
  ``LN_sigma(F.redo_sigma)``); lost dead ends and test runs are not redone.
- ``X`` fresh exploration: ``F.explore_s x LN_sigma(F.explore_sigma)``.
- ``M`` the remaining nominal work (units in ``[P[f-1], N)``; test units excluded when
  ``F.final_verification``) times ``LN_sigma(F.remaining_sigma)``.
- ``Vf`` when ``F.final_verification``: one run of the verification suite, ``V x
  LN_sigma(F.verify_sigma)``; a resumed agent re-verifies once at the end however much
  verification the restore point preserved.
- ``U`` for tasks that never pass the verifier: ``F.unverified_extra_s x LN_sigma(0.5)``
  (their nominal step work is also ``F.unverified_work_scale`` times larger).
- ``G = LN_sigma(F.branch_sigma)``: a whole-branch factor.

Every random draw comes from a counter-based hash of (task, r, f, branch seed, component),
so repetitions of a cell differ (within-cell noise, paper G.4), the same inputs give the
same cost in any order, and the vectorised fast path and the agent call the *same*
function (:func:`branch_costs`). Re-executed tokens are ``J x`` the task's nominal tokens
per second; tool calls count the emitted recovery tool events (one per rediscovered fact,
redone unit, remaining tool unit, exploration and verification).

**Checkpoints.** The checkpoint at boundary ``b`` archives the workspace: size ``=
workspace MB + F.compress_ratio x bytes written by then``; creation ``= (F.creation_base_s
+ F.creation_per_mb_s x MB) x LN_sigma(F.creation_sigma)``; restore latency ``=
(F.restore_base_s + F.restore_per_mb_s x MB) x LN_sigma(F.restore_sigma)`` (the pristine
start, ``b = 0``, restores the bare workspace). Fixed per (task, boundary, study seed).

Parameters (every field of :mod:`oracle.workloads`' configs)
===========================================================

``RepoConfig``: ``name`` (repository, the unit of leave-one-repository-out splits);
``workspace_mb``, ``workspace_cv`` (pristine archive size and its spread across tasks);
``work_scale`` (multiplies all nominal work and ``V``).

``StepConfig`` (one per logical step): ``work_s``, ``work_cv`` (step work, lognormal);
``units`` (range of tool-call units); ``mix`` (unit-kind proportions); ``kind_weight``
(relative unit duration per kind, default 1); ``last`` (kind of the turn-ending unit);
``fact_mult``, ``fact_sigma`` (rediscovery multiplier of its facts/decisions: mean and
across-fact log-sd); ``redo_edit``, ``redo_build`` (redo seconds per nominal second);
``edit_bytes``, ``build_bytes`` (byte ranges); ``fanout`` (unit kinds that read a decision's
file downstream).

``FamilyConfig``: ``name``; ``repos``; ``steps``; ``tasks_per_repo`` (default study size);
``steps_pattern``, ``verified_pattern`` (task shapes, cycled); ``model_share`` (model-call
share of an exploration/edit unit); ``orient_pristine_s``, ``orient_base_s``,
``orient_per_ktok_s``, ``orient_sigma`` (``O``); ``explore_s``, ``explore_sigma`` (``X``);
``final_verification``, ``verify_s``, ``verify_cv``, ``verify_sigma`` (``Vf`` and ``V``);
``remaining_sigma`` (``M``); ``redo_sigma`` (``Q``); ``rediscovery_sigma`` (``D``);
``branch_sigma`` (``G``); ``unverified_extra_s``, ``unverified_work_scale`` (``U`` and the
harder nominal runs of unverified tasks); ``cap_s`` (per-branch cap); ``creation_base_s``,
``creation_per_mb_s``, ``creation_sigma``, ``restore_base_s``, ``restore_per_mb_s``,
``restore_sigma``, ``compress_ratio`` (checkpoints); ``tokens_per_model_s``,
``cached_fraction``, ``output_tokens_per_s`` (model-call tokens), ``tool_output_tokens``
(tokens a tool result adds to the transcript, which drives ``O``); ``seed_salt`` (mixed into
every task's random stream: a different salt gives an independent family draw); ``notes``
(free text, not hashed).

Calibration. ``swe-pilot``'s values were tuned by hand against the pilot (paper Section 4,
Tables 1, 4, 5; Appendix G.4-G.5) with ``experiments.calibrate``: e.g. ``fact_mult=2.9`` in
step 1 sets the first checkpoint's conversion near 0.64, ``orient_base_s=26`` with
``verify_s=54`` puts every recovery from a checkpoint near 100 s whatever its depth (Table
5), which makes the additional checkpoint worth about nothing.

Two ways to run it
==================

:class:`SimulatedAgent` implements the agent protocol (:mod:`oracle.agents.protocol`) on a
:class:`~oracle.agents.protocol.VirtualClock`: ``start`` emits the nominal trajectory and boundary
reports; ``kill`` abandons the run and records, in the simulated world (never in the
workspace or transcript), how far it got, i.e. which failure struck; ``resume`` re-derives
from the preserved transcript and facts with events whose durations add up to
:func:`branch_costs`'s ``J``. :mod:`oracle.agents` lists it as ``sim:<family>`` (and
``simulated``/``simulator``, the ``swe-pilot`` family unless ``family`` is given).
:func:`simulate_label_set` computes the same costs vectorised, for every ``r < f`` and
repetition, straight into an :class:`oracle.tables.LabelSet`.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy.special import ndtri

from features.schema import BoundaryKind, Event, EventKind, Trajectory
from oracle.agents.protocol import AgentReport, Clock, RestorePoint, TaskSpec
from oracle.labels import (
    DESIGNS,
    advantage,
    branch_order,
    cell_id,
    charged_cp,
    pilot_cells,
    sign_unstable,
    stratum,
    table_cell_id,
)
from oracle.tables import (
    CHECKPOINT_COLUMNS,
    LABEL_COLUMNS,
    RECOVERY_COLUMNS,
    TASK_COLUMNS,
    LabelSet,
    conform,
    labels_from_recovery,
)
from oracle.workloads import FamilyConfig, RepoConfig, StepConfig, get_family

__all__ = [
    "LatentTask", "SimulatedAgent", "SimulatedRun", "TaskBatch", "batch_branch_costs",
    "branch_costs", "branch_seed",
    "build_task", "family_tasks", "simulate_label_set", "task_specs",
]

Design = Literal["full", "pilot", "tool_call"]
Granularity = Literal["turn", "tool_call"]

_KIND_CODE = {"fact": 0, "dead_end": 1, "edit": 2, "build": 3, "test": 4, "decision": 5}
_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)
_GOLD = np.uint64(0x9E3779B97F4A7C15)
STATE_FILE = ".ripplecp_sim/state.json"

# component slots of the counter-based random stream
_C_ORIENT, _C_REDO, _C_EXPLORE, _C_VERIFY, _C_REMAIN, _C_UNVER, _C_BRANCH = range(7)
_C_FACT0 = 16
_C_CREATE, _C_RESTORE = 1001, 1002


# ---------------------------------------------------------------------------------------
# Counter-based random numbers (splitmix64), vectorised
# ---------------------------------------------------------------------------------------


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = (x + _GOLD) & _M64
        z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _M64
        z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _M64
        return z ^ (z >> np.uint64(31))


def _branch_keys_arr(task_keys: np.ndarray, r: np.ndarray, f: np.ndarray, bseed: np.ndarray) -> np.ndarray:
    """Stream key of each branch: hash of (task key, branch seed, r, f)."""
    with np.errstate(over="ignore"):
        k = _mix(task_keys.astype(np.uint64) ^ _mix(bseed.astype(np.uint64)))
        k = _mix(k ^ (r.astype(np.uint64) * np.uint64(0xD6E8FEB86659FD93)))
        return _mix(k ^ (f.astype(np.uint64) * np.uint64(0xA0761D6478BD642F)))


def _branch_keys(task_key: int, r: np.ndarray, f: np.ndarray, bseed: np.ndarray) -> np.ndarray:
    return _branch_keys_arr(np.full(r.shape, np.uint64(task_key)), r, f, bseed)


def _normal(keys: np.ndarray, component: int | np.ndarray) -> np.ndarray:
    """Standard normals from (key, component): inverse CDF of a 53-bit uniform."""
    c = np.asarray(component, dtype=np.uint64)
    with np.errstate(over="ignore"):
        h = _mix(keys ^ ((c * _GOLD) & _M64))
    u = ((h >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)
    return ndtri(u)


def _ln(sigma: float, z: np.ndarray) -> np.ndarray:
    """Mean-one lognormal with log-sd ``sigma`` from standard normals ``z``."""
    return np.exp(sigma * z - 0.5 * sigma * sigma)


def _ln_cv(cv: float, rng: np.random.Generator) -> float:
    """Mean-one lognormal draw with coefficient of variation ``cv``."""
    if cv <= 0:
        return 1.0
    s = math.sqrt(math.log1p(cv * cv))
    return float(math.exp(s * rng.standard_normal() - 0.5 * s * s))


def _stable_int(*parts: Any) -> int:
    h = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little")


def branch_seed(seed: int, repetition: int) -> int:
    """The branch seed of repetition ``repetition`` in a study seeded ``seed``.

    Both branches of a pair share it (their costs still differ: the random stream is keyed
    by the restore point too). Pass it as ``seed`` to :meth:`SimulatedAgent.resume` to get
    the fast path's number for that repetition.
    """
    return (int(seed) * 10_007 + int(repetition)) % (1 << 62)


# ---------------------------------------------------------------------------------------
# Latent tasks
# ---------------------------------------------------------------------------------------


@dataclass
class LatentTask:
    """One task's hidden state plus its nominal trajectory (hidden arrays are per unit)."""

    task_id: str
    repo: str
    family: FamilyConfig
    seed: int
    repo_index: int
    task_index: int
    verified: bool
    n_steps: int
    workspace_mb: float
    verify_s: float
    kind: np.ndarray  # unit kind codes
    step: np.ndarray  # 1-based step of each unit
    model_s: np.ndarray
    tool_s: np.ndarray
    redo_s: np.ndarray  # redo seconds (edits, builds), 0 otherwise
    fact_scale: np.ndarray  # rediscovery scale (facts, decisions), 0 otherwise
    bytes_written: np.ndarray
    transcript_tokens: np.ndarray  # tokens each unit adds to the transcript
    tokens: np.ndarray  # model tokens of each unit (input + output)
    trajectory: Trajectory
    key: int = 0
    _cum: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _ckpt: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)

    @property
    def n_units(self) -> int:
        return len(self.kind)

    @property
    def duration(self) -> np.ndarray:
        return self.model_s + self.tool_s

    @property
    def nominal_s(self) -> float:
        return float(self.duration.sum())

    def cum(self, name: str) -> np.ndarray:
        """Prefix sums (length N+1) of per-unit quantities used by the cost function."""
        out = self._cum.get(name)
        if out is None:
            if "dur" not in self._cum:
                d = self.model_s + self.tool_s
                test = self.kind == _KIND_CODE["test"]
                src = {
                    "dur": d, "nontest_dur": np.where(test, 0.0, d), "redo": self.redo_s,
                    "n_redo": (self.redo_s > 0).astype(float), "n_nontest": (~test).astype(float),
                    "n_all": np.ones_like(d), "tokens": self.transcript_tokens.astype(float),
                    "bytes": self.bytes_written.astype(float),
                }
                for k, v in src.items():
                    c = np.empty(len(v) + 1)
                    c[0] = 0.0
                    np.cumsum(v, out=c[1:])
                    self._cum[k] = c
            out = self._cum[name]
        return out

    def positions(self, granularity: Granularity) -> np.ndarray:
        """``P[b]``: units done at boundary b = 0..B (``P[0] = 0``)."""
        key = f"pos:{granularity}"
        if key in self._cum:
            return self._cum[key]
        if granularity == "tool_call":
            out = np.arange(self.n_units + 1)
        elif granularity == "turn":
            ends = np.flatnonzero(np.diff(self.step, append=self.step[-1] + 1)) + 1
            out = np.concatenate([[0], ends]).astype(np.int64)
        else:
            raise ValueError(f"granularity must be 'turn' or 'tool_call', got {granularity!r}")
        self._cum[key] = out
        return out

    @property
    def fact_positions(self) -> np.ndarray:
        return np.flatnonzero(self.fact_scale > 0)

    @property
    def tokens_per_s(self) -> float:
        return float(self.tokens.sum()) / max(self.nominal_s, 1e-9)

    def checkpoint_costs(self, granularity: Granularity) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(creation_s, size_bytes, restore_latency_s) for boundaries 0..B (b = 0: pristine)."""
        key = f"ckpt:{granularity}"
        if key in self._ckpt:
            return self._ckpt[key]
        fam = self.family
        pos = self.positions(granularity)
        size_mb = self.workspace_mb + fam.compress_ratio * self.cum("bytes")[pos] / 1e6
        b = np.arange(len(pos))
        keys = _branch_keys(self.key, b, np.full_like(b, -7), np.full_like(b, self.seed))
        creation = (fam.creation_base_s + fam.creation_per_mb_s * size_mb) * _ln(
            fam.creation_sigma, _normal(keys, _C_CREATE))
        restore = (fam.restore_base_s + fam.restore_per_mb_s * size_mb) * _ln(
            fam.restore_sigma, _normal(keys, _C_RESTORE))
        self._ckpt[key] = (creation, np.round(size_mb * 1e6).astype(np.int64), restore)
        return self._ckpt[key]


_MODULES = ("core", "utils", "models", "views", "parser", "solvers", "fields", "query",
            "printing", "linear", "base", "compat", "io", "config", "metrics", "forms")


def _slug(repo: str) -> str:
    return repo.split("/")[-1].replace("_", "-")


def _kinds_for_step(cfg: StepConfig, n: int, rng: np.random.Generator) -> list[str]:
    """Kinds of a step's units: ``mix`` proportions of the first n-1 (largest remainder,
    ties broken at random), in random order, then ``last``."""
    names = [k for k, _ in cfg.mix]
    w = np.array([v for _, v in cfg.mix], dtype=float)
    m = n - 1
    if m <= 0:
        return [cfg.last]
    quota = m * w / w.sum()
    counts = np.floor(quota).astype(int)
    rest = m - int(counts.sum())
    if rest:
        frac = quota - counts + 1e-9 * rng.random(len(w))
        counts[np.argsort(-frac)[:rest]] += 1
    drawn = [k for k, c in zip(names, counts, strict=True) for _ in range(int(c))]
    order = rng.permutation(len(drawn))
    return [str(drawn[i]) for i in order] + [cfg.last]


def build_task(family: FamilyConfig | str, repo_index: int, task_index: int, seed: int) -> LatentTask:
    """Draw one task's latent state and emit its nominal trajectory (deterministic)."""
    fam = get_family(family)
    if not 0 <= repo_index < len(fam.repos):
        raise ValueError(f"{fam.name}: repo_index {repo_index} outside 0..{len(fam.repos) - 1}")
    repo: RepoConfig = fam.repos[repo_index]
    rng = np.random.default_rng([_stable_int(fam.name, fam.seed_salt), int(seed) % (1 << 63),
                                 repo_index, task_index])
    n_steps = fam.steps_pattern[task_index % len(fam.steps_pattern)]
    g = repo_index * fam.tasks_per_repo + task_index
    verified = True if fam.verified_pattern is None else bool(
        fam.verified_pattern[g % len(fam.verified_pattern)])
    slug = _slug(repo.name)
    task_id = f"{fam.name}.{slug}-{task_index:03d}"
    ws_mb = repo.workspace_mb * _ln_cv(repo.workspace_cv, rng)
    verify_s = fam.verify_s * repo.work_scale * _ln_cv(fam.verify_cv, rng)
    mods = [str(m) for m in rng.choice(_MODULES, size=6, replace=False)]
    unit_s = float(np.mean([c.work_s / np.mean(c.units) for c in fam.steps]))

    kinds: list[str] = []
    steps: list[int] = []
    durs, facts, redo, nbytes = [], [], [], []
    for s in range(n_steps):
        cfg = fam.steps[s]
        w_s = cfg.work_s * repo.work_scale * _ln_cv(cfg.work_cv, rng)
        if not verified:
            w_s *= fam.unverified_work_scale
        n = int(rng.integers(cfg.units[0], cfg.units[1] + 1))
        ks = _kinds_for_step(cfg, n, rng)
        kw = dict(cfg.kind_weight)
        z = rng.standard_normal((4, n))
        wts = np.array([kw.get(k, 1.0) for k in ks]) * np.exp(0.5 * z[0])
        d = (w_s * wts / wts.sum()).tolist()
        mult = (cfg.fact_mult * np.exp(cfg.fact_sigma * z[1] - 0.5 * cfg.fact_sigma ** 2)).tolist()
        lo_e, hi_e = cfg.edit_bytes
        lo_b, hi_b = cfg.build_bytes
        u_e = np.exp(np.log(lo_e) + (np.log(hi_e) - np.log(lo_e)) * rng.random(n)).tolist()
        b_noise = np.exp(0.3 * z[2]).tolist()
        for i, k in enumerate(ks):
            dk = d[i]
            kinds.append(k)
            steps.append(s + 1)
            durs.append(dk)
            facts.append(dk * mult[i] if k == "fact" else w_s * mult[i] if k == "decision" else 0.0)
            redo.append(dk * cfg.redo_edit if k == "edit" else dk * cfg.redo_build if k == "build" else 0.0)
            if k == "build":  # artifact size grows with build time
                nbytes.append(int(min(hi_b, max(lo_b, math.sqrt(lo_b * hi_b) * dk / unit_s * b_noise[i]))))
            elif k in ("edit", "decision"):
                nbytes.append(int(u_e[i]))
            else:
                nbytes.append(0)
    dur = np.array(durs)
    kind = np.array([_KIND_CODE[k] for k in kinds])
    share = np.where(np.isin(kind, [_KIND_CODE["build"], _KIND_CODE["test"]]), 0.3, fam.model_share)
    model_s = dur * share
    tool_s = dur - model_s
    out_tok = np.round(model_s * fam.output_tokens_per_s).astype(np.int64)
    in_tok = np.round(model_s * fam.tokens_per_model_s).astype(np.int64)
    latent = LatentTask(
        task_id=task_id, repo=repo.name, family=fam, seed=int(seed), repo_index=repo_index,
        task_index=task_index, verified=verified, n_steps=n_steps, workspace_mb=ws_mb,
        verify_s=verify_s, kind=kind, step=np.array(steps), model_s=model_s, tool_s=tool_s,
        redo_s=np.array(redo), fact_scale=np.array(facts), bytes_written=np.array(nbytes, dtype=np.int64),
        transcript_tokens=out_tok + fam.tool_output_tokens, tokens=in_tok + out_tok,
        trajectory=Trajectory(task_id, repo.name, "simulator", [], {}),
        key=_stable_int(fam.name, task_id, int(seed)),
    )
    latent.trajectory = _nominal_trajectory(latent, rng, mods, in_tok, out_tok)
    return latent


_TOOL_KIND = {_KIND_CODE["fact"]: EventKind.COMMAND, _KIND_CODE["dead_end"]: EventKind.COMMAND,
              _KIND_CODE["edit"]: EventKind.FILE_CHANGE, _KIND_CODE["decision"]: EventKind.FILE_CHANGE,
              _KIND_CODE["build"]: EventKind.COMMAND, _KIND_CODE["test"]: EventKind.TEST}
_CONFIGS = ("requirements.txt", "setup.cfg", "pyproject.toml")


def _kind_name(code: int) -> str:
    return next(k for k, v in _KIND_CODE.items() if v == code)


def _nominal_trajectory(
    lt: LatentTask, rng: np.random.Generator, mods: list[str], in_tok: np.ndarray, out_tok: np.ndarray,
) -> Trajectory:
    """The observable events of the nominal run (commands, paths, bytes, tests; no hidden state)."""
    fam = lt.family
    slug = _slug(lt.repo)
    focus = [f"src/{slug}/{m}.py" for m in mods[:2]]
    n_units = lt.n_units
    rnd = rng.random((n_units, 4))
    events: list[Event] = []
    t = 0.0
    written_build: list[str] = []
    decision_paths: list[str] = []
    kinds = lt.kind.tolist()
    steps = lt.step.tolist()
    model_s, tool_s = lt.model_s.tolist(), lt.tool_s.tolist()
    nbytes = lt.bytes_written.tolist()
    in_l, out_l = in_tok.tolist(), out_tok.tolist()
    last_of_step = {s: i for i, s in enumerate(steps)}
    test_code, build_code = _KIND_CODE["test"], _KIND_CODE["build"]
    for u in range(n_units):
        k, s = kinds[u], steps[u]
        r0, r1, r2, r3 = rnd[u]
        kind = _TOOL_KIND[k]
        extra: dict[str, Any] = {}
        if kind == EventKind.COMMAND and k != build_code:  # exploration (fact or dead end)
            mod = mods[int(r0 * len(mods))]
            path = f"src/{slug}/{mod}.py"
            if r1 < 0.4:
                argv = ["grep", "-rn", f"{mod}_{int(r2 * 100)}", f"src/{slug}"]
                reads = [f"src/{slug}"]
            else:
                a = 1 + int(r2 * 400)
                argv = ["sed", "-n", f"{a},{a + 80}p", path]
                reads = [path]
            extra = dict(argv=argv, paths_read=reads, exit_code=0)
        elif kind == EventKind.FILE_CHANGE:
            if k == _KIND_CODE["decision"]:
                path = _CONFIGS[int(r0 * len(_CONFIGS))]
                decision_paths.append(path)
            else:
                path = focus[int(r0 * len(focus))]
            extra = dict(paths_read=[path], paths_written=[path], bytes_written=nbytes[u],
                         text=f"apply_patch {path}")
        elif k == build_code:
            out = f"build/stage{s}/artifact-{u}.bin"
            reads = sorted({*written_build[-1:], f"src/{slug}"})
            extra = dict(argv=["make", f"stage{s}"], paths_read=reads, paths_written=[out],
                         bytes_written=nbytes[u], exit_code=0)
            written_build.append(out)
        else:  # test
            mod = mods[int(r0 * 3)]
            n_pass = 5 + int(r1 * 55)
            n_fail = 0 if (s == lt.n_steps and lt.verified) else 1 + int(r2 * 3)
            extra = dict(argv=["python", "-m", "pytest", f"tests/test_{mod}.py", "-q"],
                         paths_read=[f"tests/test_{mod}.py", *focus], tests_passed=n_pass,
                         tests_failed=n_fail, exit_code=0 if n_fail == 0 else 1)
        if decision_paths and kind != EventKind.FILE_CHANGE and _kind_name(k) in fam.steps[s - 1].fanout:
            extra["paths_read"] = sorted({*extra.get("paths_read", []), *decision_paths})
        if "argv" in extra:
            extra["command"] = " ".join(extra["argv"])
        ms, ts = model_s[u], tool_s[u]
        events.append(Event(
            index=len(events), kind=EventKind.MODEL_CALL, step=s, start=t, end=t + ms, duration=ms,
            input_tokens=in_l[u], cached_tokens=int(round(in_l[u] * fam.cached_fraction)),
            output_tokens=out_l[u], text=f"plan step {s}",
        ))
        t += ms
        events.append(Event(
            index=len(events), kind=kind, step=s, start=t, end=t + ts, duration=ts, safe_boundary=True,
            boundary_kind=BoundaryKind.TEST if k == test_code else BoundaryKind.TOOL_RETURN,
            turn_end=last_of_step[s] == u, **extra,
        ))
        t += ts
    meta = {"family": fam.name, "simulated": True, "seed": lt.seed}
    return Trajectory(lt.task_id, lt.repo, "simulator", events, meta)


@lru_cache(maxsize=4096)
def _cached_task(family: FamilyConfig, repo_index: int, task_index: int, seed: int) -> LatentTask:
    return build_task(family, repo_index, task_index, seed)


def family_tasks(
    family: FamilyConfig | str, n_repos: int | None = None, tasks_per_repo: int | None = None,
    seed: int = 0,
) -> list[LatentTask]:
    """The latent tasks of a study: ``n_repos`` repositories x ``tasks_per_repo`` tasks."""
    fam = get_family(family)
    if tasks_per_repo is not None and tasks_per_repo != fam.tasks_per_repo:
        fam = fam.with_tasks_per_repo(tasks_per_repo)
    n = len(fam.repos) if n_repos is None else int(n_repos)
    if not 1 <= n <= len(fam.repos):
        raise ValueError(f"{fam.name}: n_repos must be in 1..{len(fam.repos)}, got {n_repos}")
    return [_cached_task(fam, i, k, int(seed)) for i in range(n) for k in range(fam.tasks_per_repo)]


def task_specs(
    family: FamilyConfig | str, n_repos: int | None = None, tasks_per_repo: int | None = None,
    seed: int = 0, granularity: Granularity = "turn",
) -> list[TaskSpec]:
    """Harness task specs for a study; ``params`` carry what rebuilds the hidden task."""
    fam = get_family(family)
    out = []
    for lt in family_tasks(fam, n_repos, tasks_per_repo, seed):
        out.append(TaskSpec(
            task_id=lt.task_id, repo=lt.repo, family=fam.name, workspace_template=None,
            verifier=None,
            params={"family": fam.name, "repo_index": lt.repo_index, "task_index": lt.task_index,
                    "tasks_per_repo": lt.family.tasks_per_repo, "seed": lt.seed,
                    "granularity": granularity},
        ))
    return out


# ---------------------------------------------------------------------------------------
# The cost function (shared by the agent and the fast path)
# ---------------------------------------------------------------------------------------


class TaskBatch:
    """Per-unit prefix sums and fact tables of several tasks of one family, padded to one
    shape, so :func:`batch_branch_costs` prices branches of many tasks in one numpy pass."""

    def __init__(self, tasks: Sequence[LatentTask], granularity: Granularity = "turn") -> None:
        if not tasks:
            raise ValueError("TaskBatch needs at least one task")
        fams = {lt.family for lt in tasks}
        if len(fams) != 1:
            raise ValueError(f"TaskBatch tasks must share one family config, got {len(fams)}")
        self.tasks = list(tasks)
        self.family = tasks[0].family
        self.granularity = granularity
        n = np.array([lt.n_units for lt in tasks])
        self.n_units = n
        width = int(n.max()) + 1

        def pad(name: str) -> np.ndarray:
            out = np.empty((len(tasks), width))
            for i, lt in enumerate(tasks):
                c = lt.cum(name)
                out[i, : len(c)] = c
                out[i, len(c):] = c[-1]
            return out

        self.cum = {k: pad(k) for k in ("dur", "nontest_dur", "redo", "n_redo", "n_nontest", "n_all", "tokens")}
        pos = [lt.positions(granularity) for lt in tasks]
        self.n_boundaries = np.array([len(p) - 1 for p in pos])
        self.pos = np.zeros((len(tasks), int(self.n_boundaries.max()) + 1), dtype=np.int64)
        for i, p in enumerate(pos):
            self.pos[i, : len(p)] = p
        fp = [lt.fact_positions for lt in tasks]
        nf = max(1, max(len(x) for x in fp))
        self.fact_pos = np.full((len(tasks), nf), np.iinfo(np.int64).max // 2, dtype=np.int64)
        self.fact_scale = np.zeros((len(tasks), nf))
        for i, (lt, x) in enumerate(zip(tasks, fp, strict=True)):
            self.fact_pos[i, : len(x)] = x
            self.fact_scale[i, : len(x)] = lt.fact_scale[x]
        self.keys = np.array([lt.key for lt in tasks], dtype=np.uint64)
        self.verify_s = np.array([lt.verify_s for lt in tasks])
        self.verified = np.array([lt.verified for lt in tasks])
        self.tokens_per_s = np.array([lt.tokens_per_s for lt in tasks])


def batch_branch_costs(
    batch: TaskBatch, ti: np.ndarray, r: np.ndarray, f: np.ndarray, bseed: np.ndarray,
) -> dict[str, np.ndarray]:
    """The cost function, vectorised over branches (task index, r, f, branch seed) of a batch.

    Returns arrays: ``cost_s`` (J, capped at the family's cap), ``raw_s`` (uncapped),
    ``capped``, components ``orient``, ``rediscover``, ``redo``, ``explore``,
    ``remaining``, ``verify``, ``unverified`` (each already times the branch factor),
    ``fact_s`` (n x F rediscovery seconds per fact of the task, in fact order),
    ``tokens``, ``tool_calls``, ``n_facts``.
    """
    fam = batch.family
    ti = np.atleast_1d(np.asarray(ti, dtype=np.int64))
    r = np.atleast_1d(np.asarray(r, dtype=np.int64))
    f = np.atleast_1d(np.asarray(f, dtype=np.int64))
    bs = np.broadcast_to(np.asarray(bseed, dtype=np.int64), r.shape)
    if not (ti.shape == r.shape == f.shape):
        raise ValueError(f"task index, r and f shapes differ ({ti.shape}, {r.shape}, {f.shape})")
    B = batch.n_boundaries[ti]
    bad = (r < 0) | (f < 1) | (f > B) | (r >= f)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{batch.tasks[int(ti[i])].task_id}: need 0 <= r < f <= B={int(B[i])}, "
                         f"got r={int(r[i])}, f={int(f[i])}")
    n = len(r)
    keys = _branch_keys_arr(batch.keys[ti], r, f, bs)
    pr = batch.pos[ti, r]
    pl = batch.pos[ti, f - 1]
    nu = batch.n_units[ti]
    cum = batch.cum
    orient = np.where(
        r == 0, fam.orient_pristine_s,
        fam.orient_base_s + fam.orient_per_ktok_s * cum["tokens"][ti, pr] / 1000.0,
    ) * _ln(fam.orient_sigma, _normal(keys, _C_ORIENT))
    fpos = batch.fact_pos[ti]
    mask = (fpos >= pr[:, None]) & (fpos < pl[:, None])
    nf = fpos.shape[1]
    z = _normal(keys[:, None], _C_FACT0 + np.arange(nf)[None, :])
    fact_s = np.where(mask, batch.fact_scale[ti] * _ln(fam.rediscovery_sigma, z), 0.0)
    rediscover = np.zeros(n)
    for k in range(nf):  # sequential sum: the same bits whatever the padding
        rediscover = rediscover + fact_s[:, k]
    n_facts = mask.sum(axis=1)
    redo = (cum["redo"][ti, pl] - cum["redo"][ti, pr]) * _ln(fam.redo_sigma, _normal(keys, _C_REDO))
    n_redo = np.round(cum["n_redo"][ti, pl] - cum["n_redo"][ti, pr]).astype(np.int64)
    explore = fam.explore_s * _ln(fam.explore_sigma, _normal(keys, _C_EXPLORE))
    if fam.final_verification:
        rem = cum["nontest_dur"][ti, nu] - cum["nontest_dur"][ti, pl]
        n_rem = cum["n_nontest"][ti, nu] - cum["n_nontest"][ti, pl]
        verify = batch.verify_s[ti] * _ln(fam.verify_sigma, _normal(keys, _C_VERIFY))
    else:
        rem = cum["dur"][ti, nu] - cum["dur"][ti, pl]
        n_rem = cum["n_all"][ti, nu] - cum["n_all"][ti, pl]
        verify = np.zeros(n)
    remaining = rem * _ln(fam.remaining_sigma, _normal(keys, _C_REMAIN))
    unver = np.where(batch.verified[ti], 0.0, fam.unverified_extra_s) * _ln(0.5, _normal(keys, _C_UNVER))
    g = _ln(fam.branch_sigma, _normal(keys, _C_BRANCH))
    parts = {
        "orient": orient * g, "rediscover": rediscover * g, "redo": redo * g,
        "explore": explore * g, "remaining": remaining * g, "verify": verify * g,
        "unverified": unver * g,
    }
    raw = parts["orient"]
    for k in ("rediscover", "redo", "explore", "remaining", "verify", "unverified"):
        raw = raw + parts[k]
    capped = raw >= fam.cap_s
    cost = np.where(capped, fam.cap_s, raw)
    tool_calls = (n_facts + n_redo + 1 + np.round(n_rem).astype(np.int64)
                  + (1 if fam.final_verification else 0))
    return {
        **parts, "fact_s": fact_s * g[:, None], "raw_s": raw, "cost_s": cost, "capped": capped,
        "tokens": np.round(raw * batch.tokens_per_s[ti]).astype(np.int64), "tool_calls": tool_calls,
        "n_facts": n_facts,
    }


_BATCH_CACHE: dict[tuple[int, str], TaskBatch] = {}


def branch_costs(
    lt: LatentTask, r: Sequence[int] | np.ndarray, f: Sequence[int] | np.ndarray,
    bseed: Sequence[int] | np.ndarray | int, granularity: Granularity = "turn",
) -> dict[str, np.ndarray]:
    """:func:`batch_branch_costs` for branches of one task (a batch of one)."""
    key = (id(lt), granularity)
    batch = _BATCH_CACHE.get(key)
    if batch is None or batch.tasks[0] is not lt:
        if len(_BATCH_CACHE) > 4096:
            _BATCH_CACHE.clear()
        batch = _BATCH_CACHE[key] = TaskBatch([lt], granularity)
    r = np.atleast_1d(np.asarray(r, dtype=np.int64))
    return batch_branch_costs(batch, np.zeros(len(r), dtype=np.int64), r, f, bseed)


# ---------------------------------------------------------------------------------------
# The simulated agent (agent protocol on a virtual clock)
# ---------------------------------------------------------------------------------------


@dataclass
class _Item:
    event: dict[str, Any] | None = None  # Event fields without index/start/end
    seconds: float = 0.0
    boundary: int | None = None
    fact: tuple[str, str] | None = None  # (name, value) the event discovers


class SimulatedRun:
    """One simulated run: replays a precomputed item list on the clock, live.

    ``reports()`` sleeps each event's duration on the clock, then yields it (stamped with
    clock times); at a boundary it writes the workspace state file and snapshots the
    preserved transcript and facts. ``kill()`` abandons the run (fail-stop).
    """

    def __init__(
        self, agent: SimulatedAgent, lt: LatentTask, items: list[_Item], workspace: Path,
        clock: Clock, transcript: list[dict], facts: dict[str, Any], first_boundary: int,
        granularity: Granularity,
    ) -> None:
        self._agent, self._lt, self._items = agent, lt, items
        self._ws, self._clock, self._gran = Path(workspace), clock, granularity
        self._transcript = list(transcript)
        self._facts = dict(facts)
        self._preserved = (list(transcript), dict(facts))
        self._last_boundary = first_boundary
        self._killed = False
        self._done = False
        self.usage: dict[str, Any] = {"tokens": 0, "tool_calls": 0}

    def reports(self) -> Iterator[AgentReport]:
        n = 0
        for it in self._items:
            if self._killed:
                return
            if it.boundary is not None:
                self._last_boundary = it.boundary
                self._agent._write_state(self._ws, self._lt, it.boundary, complete=False)
                self._preserved = (list(self._transcript), dict(self._facts))
                yield AgentReport("boundary", boundary=it.boundary)
                continue
            assert it.event is not None
            start = self._clock.now()
            self._clock.sleep(it.seconds)
            ev = Event(index=n, start=start, end=self._clock.now(), duration=it.seconds, **it.event)
            n += 1
            if self._killed:
                return
            toks = (ev.input_tokens or 0) + (ev.output_tokens or 0)
            self.usage["tokens"] += toks
            if ev.kind not in (EventKind.MODEL_CALL, EventKind.MESSAGE):
                self.usage["tool_calls"] += 1
            self._transcript.append({
                "index": len(self._transcript), "kind": str(ev.kind), "step": ev.step,
                "text": ev.command or ev.text or "", "tokens": toks,
            })
            if it.fact is not None:
                self._facts[it.fact[0]] = it.fact[1]
            yield AgentReport("event", event=ev)
        if not self._killed:
            self._done = True
            self._agent._write_state(self._ws, self._lt, self._last_boundary, complete=True)
            self._agent._frontier[self._lt.task_id] = len(self._lt.positions(self._gran))

    def preserved(self) -> tuple[list[dict], dict[str, Any]]:
        return list(self._preserved[0]), dict(self._preserved[1])

    def kill(self) -> None:
        if not self._killed and not self._done:
            self._killed = True
            # the simulated world remembers how far the abandoned run got (hidden state)
            self._agent._frontier[self._lt.task_id] = self._last_boundary + 1

    def wait(self) -> int:
        return -9 if self._killed else 0


class SimulatedAgent:
    """The simulated agent of a workload family, behind the agent protocol.

    ``task.params`` (from :func:`task_specs`) rebuild the hidden task; ``granularity``
    (``"turn"`` | ``"tool_call"``) picks which boundaries are reported. The simulated world
    remembers, per task, how far the last killed run got; branches of one task must
    therefore run one after another on one agent instance (the harness's local executor).
    """

    def __init__(self, family: FamilyConfig | str = "swe-pilot", granularity: Granularity | None = None) -> None:
        self.family = get_family(family)
        self.name = f"sim:{self.family.name}"
        self.granularity = granularity
        self._frontier: dict[str, int] = {}

    # -- task plumbing ------------------------------------------------------------------
    def latent(self, task: TaskSpec) -> LatentTask:
        """The hidden task behind ``task`` (rebuilt deterministically from its params)."""
        p = task.params
        missing = [k for k in ("repo_index", "task_index", "seed") if k not in p]
        if missing:
            raise ValueError(f"{task.task_id}: TaskSpec.params lacks {missing} (use oracle.simulator.task_specs)")
        fam = self.family
        if p.get("family", fam.name) != fam.name:
            fam = get_family(p["family"])
        if int(p.get("tasks_per_repo", fam.tasks_per_repo)) != fam.tasks_per_repo:
            fam = fam.with_tasks_per_repo(int(p["tasks_per_repo"]))
        lt = _cached_task(fam, int(p["repo_index"]), int(p["task_index"]), int(p["seed"]))
        if lt.task_id != task.task_id:
            raise ValueError(f"TaskSpec {task.task_id!r} does not match its params (rebuilds {lt.task_id!r})")
        return lt

    def make_tasks(self, n: int, seed: int, root: Path | None = None, *,
                   n_repos: int | None = None, tasks_per_repo: int | None = None) -> list[TaskSpec]:
        """The first ``n`` tasks of the family's study (``n_repos`` x ``tasks_per_repo``);
        simulated tasks live in their params, so ``root`` is unused. A count the study
        cannot hold is an error naming the sizes that would."""
        del root
        specs = task_specs(self.family, n_repos, tasks_per_repo, seed,
                           granularity=self.granularity or "turn")
        if n > len(specs):
            repos = len(self.family.repos) if n_repos is None else n_repos
            per = self.family.tasks_per_repo if tasks_per_repo is None else tasks_per_repo
            raise ValueError(
                f"agent {self.name!r}: {n} tasks asked for, the study holds {len(specs)} "
                f"({repos} repositories x {per} tasks); raise tasks_per_repo to at least "
                f"{-(-n // repos)}")
        return specs[:n]

    def _granularity(self, task: TaskSpec) -> Granularity:
        g = self.granularity or task.params.get("granularity", "turn")
        if g not in ("turn", "tool_call"):
            raise ValueError(f"{task.task_id}: granularity must be 'turn' or 'tool_call', got {g!r}")
        return g

    @staticmethod
    def _write_state(ws: Path, lt: LatentTask, boundary: int, complete: bool) -> None:
        # one small write (no temp + rename): a simulated kill is cooperative, never mid-write
        path = Path(ws) / STATE_FILE
        if not path.parent.is_dir():
            path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as fh:
            fh.write(json.dumps({"task_id": lt.task_id, "boundary": boundary, "complete": complete}))

    @staticmethod
    def _read_state(ws: Path) -> dict[str, Any] | None:
        path = Path(ws) / STATE_FILE
        if not path.exists():
            return None
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: corrupt simulator state: {exc}") from exc

    # -- protocol -----------------------------------------------------------------------
    def start(self, task: TaskSpec, workspace: Path, seed: int, clock: Clock) -> SimulatedRun:
        """The nominal run: the task's nominal trajectory, boundary by boundary."""
        lt = self.latent(task)
        gran = self._granularity(task)
        pos = set(int(p) for p in lt.positions(gran)[1:])
        bnum = {int(p): b for b, p in enumerate(lt.positions(gran)) if b}
        items: list[_Item] = []
        fact_names = _fact_names(lt)
        for e in lt.trajectory.events:
            fields_ = _event_fields(e)
            u = e.index // 2
            fact = fact_names.get(u) if e.index % 2 == 1 else None
            items.append(_Item(fields_, float(e.duration or 0.0), fact=fact))
            if e.index % 2 == 1 and (u + 1) in pos:
                items.append(_Item(boundary=bnum[u + 1]))
        self._frontier.pop(lt.task_id, None)
        return SimulatedRun(self, lt, items, workspace, clock, [], {}, 0, gran)

    def resume(
        self, task: TaskSpec, restore: RestorePoint, workspace: Path, seed: int, clock: Clock
    ) -> SimulatedRun:
        """A recovery: re-derive from the preserved state; durations add up to J(r, f)."""
        lt = self.latent(task)
        gran = self._granularity(task)
        pos = lt.positions(gran)
        B = len(pos) - 1
        r = int(restore.boundary)
        if not 0 <= r < B:
            raise ValueError(f"{task.task_id}: restore boundary {r} outside 0..{B - 1}")
        state = self._read_state(Path(workspace)) or self._read_state(restore.workspace)
        if state is not None and r > 0 and int(state.get("boundary", r)) != r:
            raise ValueError(
                f"{task.task_id}: restored workspace holds boundary {state.get('boundary')}, "
                f"restore point says {r}")
        f = int(self._frontier.get(lt.task_id, r + 1))
        f = min(max(f, r + 1), B)
        c = branch_costs(lt, [r], [f], [int(seed)], gran)
        items = _recovery_items(lt, gran, r, f, c)
        self._frontier[lt.task_id] = r + 1  # nothing else lost unless this run is killed
        return SimulatedRun(self, lt, items, workspace, clock, list(restore.transcript),
                            dict(restore.facts), r, gran)

    def verify(self, task: TaskSpec, workspace: Path) -> bool:
        """Verified iff the run in ``workspace`` completed and the task is solvable."""
        state = self._read_state(Path(workspace))
        return bool(state and state.get("complete") and self.latent(task).verified)

    def simulated_checkpoint_cost(self, task: TaskSpec, boundary: int, workspace: Path) -> tuple[float, int]:
        """(creation seconds, size bytes) of the checkpoint at ``boundary``."""
        lt = self.latent(task)
        creation, size, _ = lt.checkpoint_costs(self._granularity(task))
        _check_b(task, boundary, len(size) - 1, lo=1)
        return float(creation[boundary]), int(size[boundary])

    def simulated_restore_latency(self, task: TaskSpec, boundary: int) -> float:
        """Seconds to restore the checkpoint at ``boundary`` (0: the pristine workspace)."""
        lt = self.latent(task)
        _, _, restore = lt.checkpoint_costs(self._granularity(task))
        _check_b(task, boundary, len(restore) - 1, lo=0)
        return float(restore[boundary])


def _check_b(task: TaskSpec, b: int, B: int, lo: int) -> None:
    if not lo <= int(b) <= B:
        raise ValueError(f"{task.task_id}: boundary {b} outside {lo}..{B}")


def _fact_names(lt: LatentTask) -> dict[int, tuple[str, str]]:
    out = {}
    for k, u in enumerate(lt.fact_positions):
        e = lt.trajectory.events[2 * int(u) + 1]
        where = (e.paths_written or e.paths_read or ["?"])[0]
        out[int(u)] = (f"fact_{k}", f"observed in {where} (step {int(lt.step[u])})")
    return out


def _event_fields(e: Event) -> dict[str, Any]:
    return dict(
        kind=e.kind, step=e.step, input_tokens=e.input_tokens, cached_tokens=e.cached_tokens,
        output_tokens=e.output_tokens, command=e.command, argv=list(e.argv) if e.argv else None,
        exit_code=e.exit_code, paths_read=list(e.paths_read), paths_written=list(e.paths_written),
        bytes_written=e.bytes_written, tests_passed=e.tests_passed, tests_failed=e.tests_failed,
        safe_boundary=e.safe_boundary, boundary_kind=e.boundary_kind, turn_end=e.turn_end,
        text=e.text,
    )


def _recovery_items(lt: LatentTask, gran: Granularity, r: int, f: int, c: dict[str, np.ndarray]) -> list[_Item]:
    """Events of a recovery whose durations add up to ``c['raw_s']`` (one branch)."""
    fam = lt.family
    pos = lt.positions(gran)
    pr, pl = int(pos[r]), int(pos[f - 1])
    bnum = {int(p): b for b, p in enumerate(pos) if b}
    evs = lt.trajectory.events
    facts = _fact_names(lt)
    fpos = [int(u) for u in lt.fact_positions]
    step0 = int(lt.step[min(pr, lt.n_units - 1)])
    tok_rate = lt.tokens_per_s
    items: list[_Item] = []

    def model(seconds: float, step: int, text: str) -> None:
        tok = int(round(seconds * tok_rate))
        items.append(_Item(dict(kind=EventKind.MODEL_CALL, step=step, input_tokens=tok,
                                cached_tokens=int(round(tok * fam.cached_fraction)),
                                output_tokens=0, text=text), seconds))

    def tool(u: int, seconds: float, fact: tuple[str, str] | None = None, **over: Any) -> None:
        fields_ = _event_fields(evs[2 * u + 1])
        fields_.update(safe_boundary=False, boundary_kind=None, turn_end=False)
        fields_.update(over)
        items.append(_Item(fields_, seconds, fact=fact))

    def boundary_after(u: int) -> None:
        if (u + 1) in bnum:
            items.append(_Item(boundary=bnum[u + 1]))

    model(float(c["orient"][0]), step0, "re-orient from the preserved transcript")
    redo_total = float(lt.cum("redo")[pl] - lt.cum("redo")[pr])
    for u in range(pr, pl):
        if u in fpos:
            s = float(c["fact_s"][0, fpos.index(u)])
            model(0.5 * s, int(lt.step[u]), "rediscover")
            tool(u, 0.5 * s, fact=facts[u], bytes_written=evs[2 * u + 1].bytes_written)
        elif lt.redo_s[u] > 0:
            tool(u, float(c["redo"][0]) * float(lt.redo_s[u]) / redo_total)
        boundary_after(u)
    xs = float(c["explore"][0])
    model(0.6 * xs, int(lt.step[min(pl, lt.n_units - 1)]), "explore")
    u_x = min(pl, lt.n_units - 1)
    items.append(_Item(dict(kind=EventKind.COMMAND, step=int(lt.step[u_x]), argv=["git", "status"],
                            command="git status", paths_read=["."], exit_code=0), 0.4 * xs))
    test_code = _KIND_CODE["test"]
    rem_units = [u for u in range(pl, lt.n_units) if not (fam.final_verification and lt.kind[u] == test_code)]
    rem_nom = float(sum(lt.model_s[u] + lt.tool_s[u] for u in rem_units))
    scale = float(c["remaining"][0]) / rem_nom if rem_nom > 0 else 0.0
    last_test = max((u for u in range(pl, lt.n_units) if lt.kind[u] == test_code), default=None)
    verify_done = False
    for u in range(pl, lt.n_units):
        if u in rem_units:
            model(float(lt.model_s[u]) * scale, int(lt.step[u]), "continue")
            tool(u, float(lt.tool_s[u]) * scale, fact=facts.get(u))
        if fam.final_verification and u == last_test:
            tool(u, float(c["verify"][0]))
            verify_done = True
        boundary_after(u)
    if fam.final_verification and not verify_done:
        u = lt.n_units - 1
        items.append(_Item(dict(kind=EventKind.TEST, step=int(lt.step[u]), argv=["python", "-m", "pytest", "-q"],
                                command="python -m pytest -q", paths_read=["tests"],
                                tests_passed=40, tests_failed=0 if lt.verified else 1,
                                exit_code=0 if lt.verified else 1), float(c["verify"][0])))
    if float(c["unverified"][0]) > 0:
        model(float(c["unverified"][0]), int(lt.step[-1]), "another attempt")
    # fix the model-call token split so usage tokens equal the fast path's tokens exactly
    want = int(c["tokens"][0])
    calls = [it for it in items if it.event and it.event["kind"] == EventKind.MODEL_CALL]
    got = sum(it.event["input_tokens"] for it in calls)
    if calls:
        calls[0].event["input_tokens"] += want - got
        calls[0].event["cached_tokens"] = int(round(calls[0].event["input_tokens"] * fam.cached_fraction))
    return items


# ---------------------------------------------------------------------------------------
# Fast vectorised path
# ---------------------------------------------------------------------------------------


def _digest(*parts: Any) -> str:
    return hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).hexdigest()


def simulate_label_set(
    family: FamilyConfig | str,
    n_repos: int | None = None,
    tasks_per_repo: int | None = None,
    design: Design = "full",
    repetitions: int = 2,
    seed: int = 0,
    *,
    third_for_unstable: bool = True,
) -> LabelSet:
    """A whole study through the fast path: same model and numbers as the agent.

    ``design="full"``: turn boundaries, every ``r < f`` for each repetition (role
    ``table``), and pair labels for every ``c- < t < f`` with ``c-`` in {0, t-1} (the
    first-checkpoint and one-step-back additional contrasts). ``"tool_call"``: the same at
    tool-call boundaries. ``"pilot"``: the paper's frozen design, one early (1, 0, 2) and
    one late (B-1, B-2, B) cell per task, ``repetitions`` pairs plus a third for cells
    whose first two advantages differ in sign; labels via
    :func:`oracle.tables.labels_from_recovery`. Repetitions are numbered from 1, as in the
    harness; repetition k of every branch uses :func:`branch_seed` (seed, k).
    """
    if design not in DESIGNS:
        raise ValueError(f"design must be one of {', '.join(map(repr, DESIGNS))}, got {design!r}")
    if repetitions < 1:
        raise ValueError(f"repetitions must be >= 1, got {repetitions}")
    fam = get_family(family)
    gran: Granularity = "tool_call" if design == "tool_call" else "turn"
    tasks = family_tasks(fam, n_repos, tasks_per_repo, seed)
    task_rows: dict[str, list] = {k: [] for k in TASK_COLUMNS}
    cp_cols: dict[str, list] = {k: [] for k in CHECKPOINT_COLUMNS}
    rec_cols: dict[str, list] = {k: [] for k in RECOVERY_COLUMNS}
    lab_cols: dict[str, list] = {k: [] for k in LABEL_COLUMNS}
    batch = TaskBatch(tasks, gran)
    seeds = np.array([branch_seed(seed, k) for k in range(repetitions + 1)], dtype=np.int64)
    per_task = []  # (creation, restore, t_nom, digests, obs) per task
    tri_t, tri_r, tri_f, lab_t, lab_tt, lab_c, lab_f = [], [], [], [], [], [], []
    for i, lt in enumerate(tasks):
        pos = lt.positions(gran)
        B = len(pos) - 1
        t_nom = np.concatenate([[0.0], lt.cum("dur")[pos[1:]]])
        creation, size, restore = lt.checkpoint_costs(gran)
        for k, v in (("task_id", lt.task_id), ("repo", lt.repo), ("family", fam.name),
                     ("verified", lt.verified), ("nominal_s", lt.nominal_s), ("n_boundaries", B),
                     ("granularity", gran)):
            task_rows[k].append(v)
        _extend(cp_cols, task_id=np.full(B, lt.task_id, dtype=object), boundary=np.arange(1, B + 1),
                event_index=2 * (pos[1:] - 1) + 1, step=lt.step[pos[1:] - 1], nominal_t_s=t_nom[1:],
                creation_s=creation[1:], size_bytes=size[1:], restore_latency_s=restore[1:])
        digests = np.array([_digest(lt.task_id, "state", b) for b in range(B + 1)], dtype=object)
        obs = np.array([_digest(lt.task_id, "obs", b) for b in range(B + 1)], dtype=object)
        per_task.append((creation, restore, t_nom, digests, obs))
        if design == "pilot":
            _pilot_branches(lt, gran, B, repetitions, seed, restore, third_for_unstable, creation,
                            digests, obs, rec_cols)
            continue
        rr, ff = np.triu_indices(B + 1, 1)  # every 0 <= r < f <= B
        tri_t.append(np.full(len(rr), i))
        tri_r.append(rr)
        tri_f.append(ff)
        tt, fl = np.triu_indices(B + 1, 1)
        keep = (tt >= 1) & (fl >= 2)
        tt, fl = tt[keep], fl[keep]
        add = tt >= 2
        lab_t.append(np.full(len(tt) + int(add.sum()), i))
        lab_tt.append(np.concatenate([tt, tt[add]]))
        lab_c.append(np.concatenate([np.zeros(len(tt), dtype=np.int64), tt[add] - 1]))
        lab_f.append(np.concatenate([fl, fl[add]]))
    if design != "pilot" and tasks:
        _full_design(batch, tasks, per_task, seeds, repetitions, tri_t, tri_r, tri_f,
                     lab_t, lab_tt, lab_c, lab_f, rec_cols, lab_cols)
    tasks_df = pd.DataFrame(task_rows)
    checkpoints = _frame(cp_cols)
    recovery = _frame(rec_cols)
    if design == "pilot":
        labels = labels_from_recovery(conform(tasks_df, "tasks"), conform(checkpoints, "checkpoints"),
                                      conform(recovery, "recovery"))
    else:
        labels = _frame(lab_cols)
    prov = {"generator": "oracle.simulator.simulate_label_set", "family": fam.name, "design": design,
            "granularity": gran, "repetitions": repetitions, "seed": int(seed),
            "n_repos": n_repos, "tasks_per_repo": tasks[0].family.tasks_per_repo if tasks else None,
            "clock": "virtual (fast path, same cost function as SimulatedAgent)"}
    return LabelSet(tasks_df, checkpoints, recovery, labels,
                    {lt.task_id: _private_copy(lt.trajectory) for lt in tasks}, prov)


def _private_copy(traj: Trajectory) -> Trajectory:
    """A copy whose events, lists and ``extra``/``meta`` mappings are the caller's own.

    Latent tasks are cached per (family, repository, task, seed); handing out the cached
    trajectory would let a caller's edit change every later study with the same seed in
    the process. Cheaper than ``copy.deepcopy`` (values are JSON-like and shallow)."""
    events = []
    for e in traj.events:
        c = copy.copy(e)
        c.extra = {k: _copy_value(v) for k, v in e.extra.items()}
        c.paths_read, c.paths_written = list(e.paths_read), list(e.paths_written)
        if e.argv is not None:
            c.argv = list(e.argv)
        events.append(c)
    return Trajectory(traj.task_id, traj.repo, traj.source_format, events, copy.deepcopy(traj.meta))


def _copy_value(v: Any) -> Any:
    if isinstance(v, list):
        return [_copy_value(x) for x in v]
    if isinstance(v, dict):
        return {k: _copy_value(x) for k, x in v.items()}
    return v


def _extend(cols: dict[str, list], **arrays: Any) -> None:
    for k, v in arrays.items():
        cols[k].append(np.asarray(v) if not isinstance(v, list) else np.array(v, dtype=object))


def _frame(cols: dict[str, list]) -> pd.DataFrame:
    return pd.DataFrame({k: (np.concatenate(v) if v else np.array([])) for k, v in cols.items()})


def _pilot_branches(
    lt: LatentTask, gran: Granularity, B: int, repetitions: int, seed: int, restore: np.ndarray,
    third: bool, creation: np.ndarray, digests: np.ndarray, obs: np.ndarray, out: dict[str, list],
) -> None:
    for t, cm, f in pilot_cells(B):
        advs: list[float] = []
        k = 1
        while True:
            if k > repetitions and not (third and k == repetitions + 1 and repetitions == 2
                                        and sign_unstable(advs)):
                break
            bs = branch_seed(seed, k)
            c = branch_costs(lt, [t, cm], [f, f], [bs, bs], gran)
            advs.append(float(advantage(c["cost_s"][1], charged_cp(c["cost_s"][0], creation[t]))))
            pair = f"{cell_id(lt.task_id, t, cm, f)}:rep{k}"
            order = ("cp", "skip") if (_stable_int(pair, seed) & 1) == 0 else ("skip", "cp")
            r = np.array([t, cm])
            _extend(out, task_id=np.array([lt.task_id] * 2, dtype=object), restore_point=r,
                    failure=np.array([f, f]), repetition=np.array([k, k]),
                    branch_id=[f"{pair}/{order.index('cp')}", f"{pair}/{order.index('skip')}"],
                    pair_id=[pair, pair], role=["cp", "skip"], cost_s=c["cost_s"],
                    restore_latency_s=restore[r], tokens=c["tokens"], tool_calls=c["tool_calls"],
                    verified=lt.verified & ~c["capped"], capped=c["capped"], seed=np.array([bs, bs]),
                    state_digest=digests[r], obs_digest=obs[r], quarantined=np.zeros(2, dtype=bool),
                    quarantine_reason=[None, None])
            k += 1


def _full_design(
    batch: TaskBatch, tasks: list[LatentTask], per_task: list[tuple], seeds: np.ndarray,
    repetitions: int, tri_t: list, tri_r: list, tri_f: list, lab_t: list, lab_tt: list,
    lab_c: list, lab_f: list, rec_cols: dict[str, list], lab_cols: dict[str, list],
) -> None:
    """Every r < f for every repetition in one vectorised pass, then labels from it."""
    t0, r0, f0 = np.concatenate(tri_t), np.concatenate(tri_r), np.concatenate(tri_f)
    m = len(r0)
    ti, rr, ff = np.tile(t0, repetitions), np.tile(r0, repetitions), np.tile(f0, repetitions)
    reps = np.repeat(np.arange(1, repetitions + 1), m)
    c = batch_branch_costs(batch, ti, rr, ff, seeds[reps])
    n = len(rr)
    ids = np.array([lt.task_id for lt in tasks], dtype=object)
    repos = np.array([lt.repo for lt in tasks], dtype=object)
    width = int(batch.n_boundaries.max()) + 1
    off = np.concatenate([[0], np.cumsum(batch.n_boundaries + 1)])
    restore = np.concatenate([p[1] for p in per_task])
    creation = np.concatenate([p[0] for p in per_task])
    t_nom = np.concatenate([p[2] for p in per_task])
    digests = np.concatenate([p[3] for p in per_task])
    obs = np.concatenate([p[4] for p in per_task])
    at_r = off[ti] + rr
    tid = ids[ti]
    _extend(rec_cols, task_id=tid, restore_point=rr, failure=ff, repetition=reps,
            branch_id=[f"{table_cell_id(a, b, d)}:rep{k}" for a, b, d, k in zip(tid.tolist(), rr.tolist(), ff.tolist(), reps.tolist(), strict=True)],
            pair_id=np.full(n, None, dtype=object), role=np.full(n, "table", dtype=object),
            cost_s=c["cost_s"], restore_latency_s=restore[at_r], tokens=c["tokens"],
            tool_calls=c["tool_calls"], verified=batch.verified[ti] & ~c["capped"], capped=c["capped"],
            seed=seeds[reps], state_digest=digests[at_r], obs_digest=obs[at_r],
            quarantined=np.zeros(n, dtype=bool), quarantine_reason=np.full(n, None, dtype=object))
    # labels: look J(r, f, rep) up by a flat key
    key = ((ti * width + rr) * width + ff) * (repetitions + 1) + reps
    order = np.argsort(key)
    skey = key[order]
    L_t, L_tt, L_c, L_f = (np.concatenate(x) for x in (lab_t, lab_tt, lab_c, lab_f))
    if len(L_t) == 0:
        return
    k = len(L_t)
    T_i, T, C, F = (np.tile(x, repetitions) for x in (L_t, L_tt, L_c, L_f))
    R = np.repeat(np.arange(1, repetitions + 1), k)

    def look(r_: np.ndarray) -> np.ndarray:
        return order[np.searchsorted(skey, ((T_i * width + r_) * width + F) * (repetitions + 1) + R)]

    icp, isk = look(T), look(C)
    cr_t = creation[off[T_i] + T]
    j_cp = charged_cp(c["cost_s"][icp], cr_t)
    j_skip = c["cost_s"][isk]
    tids = ids[T_i]
    cell = [cell_id(*x) for x in zip(tids.tolist(), T.tolist(), C.tolist(), F.tolist(), strict=True)]
    bit = (_mix((R + 31 * T + 977 * F).astype(np.uint64) ^ batch.keys[T_i]) & np.uint64(1)) == 0
    ver = batch.verified[T_i]
    nl = len(T)
    _extend(lab_cols, task_id=tids, repo=repos[T_i], cell_id=cell, candidate=T, fallback=C, failure=F,
            repetition=R, stratum=stratum(C), branch_order=branch_order(bit),
            j_cp=j_cp, j_skip=j_skip, advantage=advantage(j_skip, j_cp), creation_s=cr_t,
            protected_work_s=t_nom[off[T_i] + T] - t_nom[off[T_i] + C], verified=ver,
            verified_cp=ver & ~c["capped"][icp], verified_skip=ver & ~c["capped"][isk],
            tokens_cp=c["tokens"][icp], tokens_skip=c["tokens"][isk],
            tool_calls_cp=c["tool_calls"][icp], tool_calls_skip=c["tool_calls"][isk],
            pair_seed=seeds[R], digest_cp=digests[off[T_i] + T], digest_skip=digests[off[T_i] + C],
            quarantined=np.zeros(nl, dtype=bool), quarantine_reason=np.full(nl, None, dtype=object))

