"""The simulator's generative model: latent tasks, their nominal runs, and the cost of a
recovery by re-derivation (one function for the agent and the fast path).

Workload families (the parameters) live in :mod:`oracle.simulator.workloads`; ``swe-pilot`` is
calibrated to the published pilot (``experiments.calibrate`` prints how close). The agent
behind the protocol is :mod:`oracle.simulator.agent`, the vectorised study
:mod:`oracle.simulator.fast`.

Generative model
================

**Task (hidden latent state).** A task of family ``F`` in repository ``R`` has ``S``
logical steps (``F.steps_pattern`` cycled over the task's index in its repository; the
first ``S`` templates of ``F.steps``, or, when ``F.step_weights`` is set, each step's
template drawn independently with those weights, so where a family's valuable steps fall
varies from task to task). Step ``s`` carries nominal work
``W_s = StepConfig.work_s x R.work_scale x LN(work_cv)`` (``LN(c)``: a mean-one lognormal
with coefficient of variation ``c``; ``LN_sigma(s)``: mean-one lognormal with log-sd ``s``)
split over ``n_s ~ U{units}`` tool-call *units*. A unit is one model call followed by one
tool call; the kinds of the first ``n_s - 1 - len(closing)`` follow the proportions of
``StepConfig.mix`` (largest-remainder rounding, random order), then come the kinds of
``StepConfig.closing`` and last one unit of kind ``StepConfig.last``; a unit's share of
``W_s`` is proportional to ``kind_weight[kind] x LN_sigma(0.5)``. ``FamilyConfig.model_share`` of an exploration unit's seconds is the model
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
- ``test``: a test run (passed/failed counts; with ``F.tests_track="steps"`` failing
  until the last step of a verified task; with ``"decisions"`` one failure per decision
  still ahead in the task, plus one on an unverified task, so a run after the last
  decision is green). Lost test runs are superseded, never redone.

A share ``StepConfig.fail_rate`` of a step's exploration units (``fact``, ``dead_end``) are
emitted as *failing attempts*: the command ``StepConfig.attempt`` reading the project's
config files and exiting 1 (they count as retries in the online features), instead of a
read or a search; which of them were facts stays hidden.

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

Every random draw comes from a counter-based hash of (task, r, f, branch seed, component)
- the branch seed is the plan's pair seed of the branch's cell (:func:`labelsets.definitions.pair_seed`),
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

Parameters (every field of :mod:`oracle.simulator.workloads`' configs)
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
file downstream); ``closing`` (kinds placed right before the last unit); ``fail_rate``,
``attempt`` (failing attempts among the exploration units); ``name`` (documentation only).

``FamilyConfig``: ``name``; ``repos``; ``steps``; ``tasks_per_repo`` (default study size);
``steps_pattern``, ``verified_pattern`` (task shapes, cycled); ``step_weights`` (templates
drawn per step, or None: in order); ``tests_track`` (what failing test counts follow); ``model_share`` (model-call
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

What a policy could learn. Hidden state never reaches the events, but its consequences
do: a failing attempt exits 1 and reads the config files (retries, errors), a decision is a
tiny write that later units read (provenance edges, fan-out) and, with ``tests_track=
"decisions"``, turns a failing test green; builds write bytes in proportion to their
seconds; caches and tests are long and write little. Which of these carry a family's value
(and the family where none does, ``long-horizon``) is documented per family in
:mod:`oracle.simulator.workloads`.

Calibration. ``swe-pilot``'s values were tuned by hand against the pilot (paper Section 4,
Tables 1, 4, 5; Appendix G.4-G.5) with ``experiments.calibrate``: e.g. ``fact_mult=2.9`` in
step 1 sets the first checkpoint's conversion near 0.64, ``orient_base_s=26`` with
``verify_s=54`` puts every recovery from a checkpoint near 100 s whatever its depth (Table
5), which makes the additional checkpoint worth about nothing.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

import numpy as np
from scipy.special import ndtri

from features.schema import BoundaryKind, Event, EventKind, Trajectory
from oracle.protocol import TaskSpec
from oracle.simulator.workloads import FamilyConfig, RepoConfig, StepConfig, get_family, repo_at

__all__ = [
    "KIND_CODE", "Granularity", "LatentTask", "TaskBatch", "batch_branch_costs", "branch_costs",
    "build_task", "cached_task", "family_tasks", "splitmix64", "stable_hash",
    "task_specs",
]

Granularity = Literal["turn", "tool_call"]

KIND_CODE = {"fact": 0, "dead_end": 1, "edit": 2, "build": 3, "test": 4, "decision": 5}
_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)
_GOLD = np.uint64(0x9E3779B97F4A7C15)

# component slots of the counter-based random stream
_C_ORIENT, _C_REDO, _C_EXPLORE, _C_VERIFY, _C_REMAIN, _C_UNVER, _C_BRANCH = range(7)
_C_FACT0 = 16
_C_CREATE, _C_RESTORE = 1001, 1002


# ---------------------------------------------------------------------------------------
# Counter-based random numbers (splitmix64), vectorised
# ---------------------------------------------------------------------------------------


def splitmix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = (x + _GOLD) & _M64
        z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _M64
        z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _M64
        return z ^ (z >> np.uint64(31))


def _branch_keys_arr(task_keys: np.ndarray, r: np.ndarray, f: np.ndarray, bseed: np.ndarray) -> np.ndarray:
    """Stream key of each branch: hash of (task key, branch seed, r, f)."""
    with np.errstate(over="ignore"):
        k = splitmix64(task_keys.astype(np.uint64) ^ splitmix64(bseed.astype(np.uint64)))
        k = splitmix64(k ^ (r.astype(np.uint64) * np.uint64(0xD6E8FEB86659FD93)))
        return splitmix64(k ^ (f.astype(np.uint64) * np.uint64(0xA0761D6478BD642F)))


def _branch_keys(task_key: int, r: np.ndarray, f: np.ndarray, bseed: np.ndarray) -> np.ndarray:
    return _branch_keys_arr(np.full(r.shape, np.uint64(task_key)), r, f, bseed)


def _normal(keys: np.ndarray, component: int | np.ndarray) -> np.ndarray:
    """Standard normals from (key, component): inverse CDF of a 53-bit uniform."""
    c = np.asarray(component, dtype=np.uint64)
    with np.errstate(over="ignore"):
        h = splitmix64(keys ^ ((c * _GOLD) & _M64))
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


def stable_hash(*parts: Any) -> int:
    """A stable 64-bit hash of ``parts`` (their ``str``), the same in every process."""
    h = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little")


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
    templates: tuple[int, ...] = ()  # the step template of each step (index into family.steps)
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
                test = self.kind == KIND_CODE["test"]
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
    """Kinds of a step's units: ``mix`` proportions of the first n-1-len(closing) (largest
    remainder, ties broken at random), in random order, then ``closing``, then ``last``."""
    names = [k for k, _ in cfg.mix]
    w = np.array([v for _, v in cfg.mix], dtype=float)
    tail = [*cfg.closing, cfg.last]
    m = n - len(tail)
    if m <= 0:
        return tail
    quota = m * w / w.sum()
    counts = np.floor(quota).astype(int)
    rest = m - int(counts.sum())
    if rest:
        frac = quota - counts + 1e-9 * rng.random(len(w))
        counts[np.argsort(-frac)[:rest]] += 1
    drawn = [k for k, c in zip(names, counts, strict=True) for _ in range(int(c))]
    order = rng.permutation(len(drawn))
    return [str(drawn[i]) for i in order] + tail


def build_task(family: FamilyConfig | str, repo_index: int, task_index: int, seed: int) -> LatentTask:
    """Draw one task's latent state and emit its nominal trajectory (deterministic)."""
    fam = get_family(family)
    if repo_index < 0:
        raise ValueError(f"{fam.name}: repo_index must be >= 0, got {repo_index}")
    repo: RepoConfig = repo_at(fam, repo_index, seed)  # beyond the declared: a generated variant
    rng = np.random.default_rng([stable_hash(fam.name, fam.seed_salt), int(seed) % (1 << 63),
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
    if fam.step_weights is None:
        templates = tuple(range(n_steps))
    else:
        w = np.asarray(fam.step_weights, dtype=float)
        drawn = [int(x) for x in rng.choice(len(w), size=n_steps, p=w / w.sum())]
        if fam.exactly_once is not None:  # the one decisive step, at a uniform position
            drawn[int(rng.integers(n_steps))] = fam.exactly_once
        templates = tuple(drawn)

    kinds: list[str] = []
    steps: list[int] = []
    durs, facts, redo, nbytes = [], [], [], []
    for s in range(n_steps):
        cfg = fam.steps[templates[s]]
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
    kind = np.array([KIND_CODE[k] for k in kinds])
    share = np.where(np.isin(kind, [KIND_CODE["build"], KIND_CODE["test"]]), 0.3, fam.model_share)
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
        key=stable_hash(fam.name, task_id, int(seed)), templates=templates,
    )
    latent.trajectory = _nominal_trajectory(latent, rng, mods, in_tok, out_tok)
    return latent


_TOOL_KIND = {KIND_CODE["fact"]: EventKind.COMMAND, KIND_CODE["dead_end"]: EventKind.COMMAND,
              KIND_CODE["edit"]: EventKind.FILE_CHANGE, KIND_CODE["decision"]: EventKind.FILE_CHANGE,
              KIND_CODE["build"]: EventKind.COMMAND, KIND_CODE["test"]: EventKind.TEST}
_CONFIGS = ("requirements.txt", "setup.cfg", "pyproject.toml")


def _kind_name(code: int) -> str:
    return next(k for k, v in KIND_CODE.items() if v == code)


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
    test_code, build_code = KIND_CODE["test"], KIND_CODE["build"]
    cfgs = [fam.steps[t] for t in lt.templates]
    # decisions still ahead of each unit (tests_track="decisions")
    ahead = np.cumsum((lt.kind == KIND_CODE["decision"])[::-1])[::-1].tolist()
    for u in range(n_units):
        k, s = kinds[u], steps[u]
        r0, r1, r2, r3 = rnd[u]
        kind = _TOOL_KIND[k]
        cfg = cfgs[s - 1]
        extra: dict[str, Any] = {}
        if kind == EventKind.COMMAND and k != build_code and r3 < cfg.fail_rate:
            # a failing attempt (install, configure, build) that reads the project config
            extra = dict(argv=list(cfg.attempt), paths_read=list(_CONFIGS), exit_code=1)
        elif kind == EventKind.COMMAND and k != build_code:  # exploration (fact or dead end)
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
            if k == KIND_CODE["decision"]:
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
            if fam.tests_track == "decisions":
                n_fail = int(ahead[u]) + (0 if lt.verified else 1)
            else:
                n_fail = 0 if (s == lt.n_steps and lt.verified) else 1 + int(r2 * 3)
            extra = dict(argv=["python", "-m", "pytest", f"tests/test_{mod}.py", "-q"],
                         paths_read=[f"tests/test_{mod}.py", *focus], tests_passed=n_pass,
                         tests_failed=n_fail, exit_code=0 if n_fail == 0 else 1)
        if decision_paths and kind != EventKind.FILE_CHANGE and _kind_name(k) in cfg.fanout:
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
def cached_task(family: FamilyConfig, repo_index: int, task_index: int, seed: int) -> LatentTask:
    return build_task(family, repo_index, task_index, seed)


def family_tasks(
    family: FamilyConfig | str, n_repos: int | None = None, tasks_per_repo: int | None = None,
    seed: int = 0,
) -> list[LatentTask]:
    """The latent tasks of a study: ``n_repos`` repositories x ``tasks_per_repo`` tasks
    (default: the family's default study size, ``FamilyConfig.n_study_repos``; beyond its
    declared repositories, generated variants, :func:`oracle.simulator.workloads.repo_at`)."""
    fam = get_family(family)
    if tasks_per_repo is not None and tasks_per_repo != fam.tasks_per_repo:
        fam = fam.with_tasks_per_repo(tasks_per_repo)
    n = fam.n_study_repos if n_repos is None else int(n_repos)
    if n < 1:
        raise ValueError(f"{fam.name}: n_repos must be >= 1, got {n_repos}")
    return [cached_task(fam, i, k, int(seed)) for i in range(n) for k in range(fam.tasks_per_repo)]


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

