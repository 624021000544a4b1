"""Workload families for the simulated agent (:mod:`oracle.simulator`), as typed configs.

A family is a set of repositories plus a step template: what a task's logical steps
(turns) contain, how long they take, which tool-call units they are made of, and how
expensive each kind of lost work is to re-derive. The generative model that turns a
family into tasks, nominal trajectories and recovery costs, and the meaning of every
parameter below, is documented in :mod:`oracle.simulator`'s module docstring.

Families (paper, Section 4 and Appendix I). Every family declares 8 repositories; a study
that asks for more gets generated variants beyond them (:func:`repo_at`: each with its own
workspace size, spread and difficulty drawn from the family's declared repositories' spread,
deterministic from the study seed; never copies). Outside ``swe-pilot`` each step's template is drawn per
task (``FamilyConfig.step_weights``), so the valuable step may come first, later, in
several places or nowhere, and recovery cost does not follow elapsed work by construction
(long steps cheap to redo, short ones dear; caches; dead ends). Each entry says which
signals observable at a boundary carry the value - what a policy could learn; the names
are online features (``features.row``), and ``python -m experiments.family_structure``
measures them (the boundary of the one-checkpoint optimum and its spread, Spearman of
first-stratum advantage with elapsed work and with every feature).

``swe-pilot``
    Calibrated to the published pilot (``paper/pilot_tables.json``): 3-4 logical steps
    with ~74 % of the work in step 1, ~29 tool-call boundaries per task (~25 in the first
    turn), 10 of 12 tasks verified; the pilot's 3 repositories plus 5 more SWE-bench
    Verified ones drawn alike (pilot-sized calibration samples use the first 3). Facts found
    in step 1 are costly to rediscover; later steps are verification, which a resumed agent
    re-runs anyway. Value: the first turn boundary in nearly every task (the first
    checkpoint is the paper's finding); the additional checkpoint is worth about nothing
    whatever is observed (every recovery from a checkpoint costs ~100 s).
``dependency-resolution``
    Steps drawn from: an investigation (failing ``pip install -e .`` attempts reading
    ``pyproject.toml``/``setup.cfg``/``requirements.txt``, then a one-line pin that the
    step's closing test verifies; rediscovering it costs ~3x the investigation, heavy
    tailed), regenerated lock files (megabytes written, cheap to redo), a cached install
    (long, nearly free to redo), exploration (dead ends, cheap facts) and rebuild-and-test.
    A task holds 4-6 steps with 0, 1 or several investigations anywhere. Observable value
    (Spearman with first-stratum advantage, default study, seeds 0-1): failing attempts
    (``cost__retries_since_cp`` +0.69, ``cost__errors_since_cp`` +0.66), provenance edges
    into the pin (``ripple__edges_from_past`` +0.63, ``ripple__fanout_max`` +0.35), weakly
    the tests turning green after a pin (``progress__newly_passing_since_cp`` +0.15; tests
    fail once per pin still ahead); bytes written carry nothing
    (``state__bytes_modified_since_cp`` 0.00: lock files are large and worthless to keep);
    elapsed work ``cost__busy_s_since_cp`` +0.53.
``multi-stage-build``
    Stages drawn from: compile (large artifacts whose size tracks compile time; redone at
    0.6x), a remote-cache hit (long, small stamps, free to redo), smoke tests (long, never
    redone) and configure (failing ``cmake`` attempts, then a flag in a config file that
    the stage's build verifies; dear to rediscover). Observable value (as above): artifact
    bytes (``state__bytes_modified_since_cp``, ``state__artifact_bytes`` +0.67), failing
    attempts (``cost__retries_since_cp`` +0.50); elapsed seconds rank worse
    (``cost__busy_s_since_cp`` +0.43: cache hits and smoke tests are long and worth little).
``long-horizon``
    5-6 expensive phases, 30-60 tool-call boundaries; each phase is drawn as one with
    hard-won facts (rediscovery 4x) or a routine one (0.5x) that look the same to every
    observer - the same unit kinds, commands, bytes and tests. The honest null for
    targeting: nothing observable tells the valuable phases apart, so a policy can do no
    better than elapsed work (``cost__busy_s_since_cp`` +0.60, ``cost__tokens_since_cp``
    +0.61; retries and fan-out, +0.47 and +0.36, only count elapsed phases) and the rules
    built on it; additional checkpoints are worth something here, unlike in the
    pilot. The study's **null control** (``control="null"``): a learned policy should not
    beat the best simple rule here.
``positive-control``
    The study's **positive control** (``control="positive"``): learning is needed by
    construction. Six steps of the same template shape and work (~60 s each: dead ends and
    small edits, no tests anywhere); exactly one of them, at a uniformly random position
    (``FamilyConfig.exactly_once``), is an investigation: its exploration is failing
    attempts (``pip install -e .`` exiting 1) and it closes with a one-line pin whose
    rediscovery costs ~300 s; every later edit reads the pin. Nothing positional,
    elapsed-work or test-based tells the decisive step from the others; failing attempts
    (``cost__retries_since_cp``, ``cost__errors_since_cp``) and the pin's provenance
    (``ripple__*``) do. One checkpoint right after it saves ~300 s x the share of failures
    after it; the best fixed position saves about half as much.

The controls' names are :data:`POSITIVE_CONTROL` and :data:`NULL_CONTROL`
(:func:`control_families`); :func:`with_controls` adds them to a study's family list.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, replace
from typing import Literal

UNIT_KINDS: tuple[str, ...] = ("fact", "dead_end", "edit", "build", "test", "decision")


@dataclass(frozen=True)
class RepoConfig:
    """One repository of a family.

    ``workspace_mb``: compressed size of the pristine workspace archive (MB), the floor of
    every checkpoint's size; ``workspace_cv``: its spread across the repository's tasks
    (the pilot: 1 % for Django, 12 % for scikit-learn, 39 % for SymPy, Appendix G.3);
    ``work_scale``: multiplies every step's nominal work (repository difficulty).
    """

    name: str
    workspace_mb: float
    workspace_cv: float = 0.1
    work_scale: float = 1.0


@dataclass(frozen=True)
class StepConfig:
    """Template of one logical step (turn).

    ``work_s``/``work_cv``: mean nominal seconds of the step and its lognormal spread across
    tasks. ``units``: inclusive range of tool-call units (each = one model call + one tool
    call ending at a tool-call safe boundary). ``mix``: relative weights of unit kinds
    (``fact``: exploration that discovers a fact the result needs; ``dead_end``: exploration
    that does not; ``edit``: an on-path file change; ``build``: an on-path artifact;
    ``test``: a test run; ``decision``: a fact whose only trace is a tiny edit read by
    every later step). ``kind_weight``: relative duration of each kind's unit.
    ``last``: kind of the step's final unit (its turn boundary). ``fact_mult`` and
    ``fact_sigma``: the rediscovery cost of a fact is its nominal unit seconds times a
    multiplier drawn once per fact, lognormal with mean ``fact_mult`` and log-sd
    ``fact_sigma`` (heavy tail across facts). ``redo_edit``/``redo_build``: seconds to redo
    a lost edit or build per nominal second (builds < 1: cached inputs make regeneration
    cheap). ``edit_bytes``/``build_bytes``: log-uniform range of bytes written.
    ``fanout``: for a ``decision`` unit, the path it writes is read by every later unit
    of these kinds. ``closing``: kinds of the units placed, in this order, right before
    the last one (e.g. a ``decision`` the step's final test then verifies). ``fail_rate``:
    share of the step's exploration units (``fact``, ``dead_end``) that are failing
    attempts - the command ``attempt`` reading the project's config files and exiting 1 -
    instead of a read or a search. ``name``: what the template stands for (documentation;
    never emitted, not hashed).
    """

    work_s: float
    work_cv: float = 0.3
    units: tuple[int, int] = (1, 3)
    mix: tuple[tuple[str, float], ...] = (("test", 1.0),)
    kind_weight: tuple[tuple[str, float], ...] = ()
    last: str = "test"
    fact_mult: float = 1.5
    fact_sigma: float = 0.8
    redo_edit: float = 0.8
    redo_build: float = 0.3
    edit_bytes: tuple[int, int] = (200, 4_000)
    build_bytes: tuple[int, int] = (1_000_000, 50_000_000)
    fanout: tuple[str, ...] = ("build", "test", "edit")
    closing: tuple[str, ...] = ()
    fail_rate: float = 0.0
    attempt: tuple[str, ...] = ("pip", "install", "-e", ".")
    name: str = field(default="", compare=False)


@dataclass(frozen=True)
class FamilyConfig:
    """A workload family: repositories, step templates and recovery/checkpoint parameters.

    Task shape: ``steps`` are the step templates; a task has ``steps_pattern[i %
    len(steps_pattern)]`` steps, cycled over the task's index within its repository: the
    first that many templates in order, or, with ``step_weights`` (one weight per
    template), each step's template drawn independently with those weights, so where a
    family's valuable steps fall varies from task to task (in any step, in several, in
    none). ``exactly_once``: the index of a template that every task holds in exactly one
    step, at a uniformly random position (the other steps drawn with ``step_weights``, which
    should give it weight 0): a decisive step whose position nothing positional reveals.
    ``tasks_per_repo`` and ``study_repos`` size the family's default study: that many tasks
    in each of that many repositories (None: the declared ones; more: generated variants,
    :func:`repo_at`), chosen with the power planner (``python -m experiments.power``).
    A task is verified unless its global index modulo ``len(verified_pattern)``
    hits a ``False`` (``None``: every task verified). ``tests_track``: what a test run's
    failures count - ``"steps"``: failing until the last step of a verified task;
    ``"decisions"``: one failure per ``decision`` unit still ahead in the task (plus one
    on an unverified task), so the tests go green when the last decision is made.

    Recovery (seconds unless noted; all noise terms are mean-one lognormals):
    ``orient_pristine_s`` re-reading the task statement after a restart from scratch;
    ``orient_base_s`` + ``orient_per_ktok_s`` x preserved transcript kilotokens the
    re-orientation of a resumed agent; ``orient_sigma`` its noise. ``explore_s`` and
    ``explore_sigma``: fresh exploration of every recovery. ``final_verification``: a
    resumed agent runs the task's verification suite once at the end (``verify_s`` x task
    scale, noise ``verify_sigma``) instead of the remaining nominal test runs (the pilot:
    once a checkpoint exists, cost barely depends on how much verification it preserved).
    ``remaining_sigma``: noise of the remaining nominal work; ``redo_sigma``: of redone
    edits and builds; ``rediscovery_sigma``: per-fact noise of each rediscovery;
    ``branch_sigma``: a whole-branch multiplier; ``unverified_extra_s``: extra attempts
    on tasks that never pass the verifier, whose nominal work is also ``unverified_work_scale``
    times larger (harder tasks); ``cap_s``: per-branch cap (the pilot's 1800 s).

    Checkpoints: creation = (``creation_base_s`` + ``creation_per_mb_s`` x size MB) x noise
    ``creation_sigma``; restore latency = (``restore_base_s`` + ``restore_per_mb_s`` x size
    MB) x noise ``restore_sigma``; size = workspace MB + ``compress_ratio`` x bytes written
    so far. Tokens: ``tokens_per_model_s`` input tokens per model-call second, of which
    ``cached_fraction`` cached; ``output_tokens_per_s`` output tokens; a tool call returns
    ``tool_output_tokens`` tokens into the transcript.

    ``control``: ``"positive"`` or ``"null"`` for the study's control families (the module
    docstring), ``""`` otherwise (documentation and study wiring; not hashed).
    """

    name: str
    repos: tuple[RepoConfig, ...]
    steps: tuple[StepConfig, ...]
    tasks_per_repo: int = 4
    study_repos: int | None = None
    steps_pattern: tuple[int, ...] = (3,)
    step_weights: tuple[float, ...] | None = None
    exactly_once: int | None = None
    verified_pattern: tuple[bool, ...] | None = None
    tests_track: Literal["steps", "decisions"] = "steps"
    model_share: float = 0.75
    orient_pristine_s: float = 5.0
    orient_base_s: float = 20.0
    orient_per_ktok_s: float = 0.3
    orient_sigma: float = 0.25
    explore_s: float = 8.0
    explore_sigma: float = 0.6
    final_verification: bool = True
    verify_s: float = 45.0
    verify_cv: float = 0.25
    verify_sigma: float = 0.12
    remaining_sigma: float = 0.1
    redo_sigma: float = 0.25
    rediscovery_sigma: float = 0.5
    branch_sigma: float = 0.03
    unverified_extra_s: float = 40.0
    unverified_work_scale: float = 1.0
    cap_s: float = 1800.0
    creation_base_s: float = 1.6
    creation_per_mb_s: float = 0.21
    creation_sigma: float = 0.12
    restore_base_s: float = 1.2
    restore_per_mb_s: float = 0.6
    restore_sigma: float = 0.55
    compress_ratio: float = 0.35
    tokens_per_model_s: float = 2600.0
    cached_fraction: float = 0.85
    output_tokens_per_s: float = 25.0
    tool_output_tokens: int = 400
    seed_salt: int = 0
    notes: str = field(default="", compare=False)
    control: str = field(default="", compare=False)

    def with_tasks_per_repo(self, n: int) -> FamilyConfig:
        """The same family with ``n`` tasks per repository."""
        if n < 1:
            raise ValueError(f"{self.name}: tasks_per_repo must be >= 1, got {n}")
        return replace(self, tasks_per_repo=int(n))

    @property
    def n_study_repos(self) -> int:
        """Repositories of the family's default study."""
        return len(self.repos) if self.study_repos is None else int(self.study_repos)

    def validate(self) -> None:
        """Raise ValueError naming the field on an inconsistent config."""
        if not self.repos:
            raise ValueError(f"{self.name}: needs at least one repository")
        if self.study_repos is not None and self.study_repos < 1:
            raise ValueError(f"{self.name}: study_repos must be >= 1, got {self.study_repos}")
        if not self.steps:
            raise ValueError(f"{self.name}: needs at least one step template")
        top = len(self.steps) if self.step_weights is None else 10_000
        for n in self.steps_pattern:
            if not 1 <= n <= top:
                raise ValueError(f"{self.name}: steps_pattern value {n} outside 1..{top}")
        if self.step_weights is not None:
            w = self.step_weights
            if len(w) != len(self.steps) or any(not x >= 0 for x in w) or not sum(w) > 0:
                raise ValueError(f"{self.name}: step_weights {w} must give one weight >= 0 per "
                                 f"template ({len(self.steps)}), not all 0")
        if self.exactly_once is not None:
            if self.step_weights is None or not 0 <= self.exactly_once < len(self.steps):
                raise ValueError(f"{self.name}: exactly_once {self.exactly_once} needs step_weights and "
                                 f"a template index in 0..{len(self.steps) - 1}")
        if self.control not in ("", "positive", "null"):
            raise ValueError(f"{self.name}: control must be '', 'positive' or 'null', got {self.control!r}")
        if self.tests_track not in ("steps", "decisions"):
            raise ValueError(f"{self.name}: tests_track must be 'steps' or 'decisions', got {self.tests_track!r}")
        for i, s in enumerate(self.steps, 1):
            if s.units[0] < 1 + len(s.closing) or s.units[1] < s.units[0]:
                raise ValueError(f"{self.name}: step {i} units range {s.units} invalid "
                                 f"(at least {1 + len(s.closing)}: the closing units and the last)")
            for k, w in (*s.mix, *s.kind_weight):
                if k not in UNIT_KINDS or w < 0:
                    raise ValueError(f"{self.name}: step {i} unknown unit kind or weight {k}={w}")
            for k in (s.last, *s.closing):
                if k not in UNIT_KINDS:
                    raise ValueError(f"{self.name}: step {i} last/closing kind {k!r} unknown")
            if s.work_s <= 0:
                raise ValueError(f"{self.name}: step {i} work_s must be > 0")
            if not 0.0 <= s.fail_rate <= 1.0:
                raise ValueError(f"{self.name}: step {i} fail_rate {s.fail_rate} outside 0..1")
            if s.fail_rate > 0 and not s.attempt:
                raise ValueError(f"{self.name}: step {i} fail_rate > 0 needs an attempt command")


# ---------------------------------------------------------------------------------------
# The families
# ---------------------------------------------------------------------------------------

_EXPLORE_W = (("fact", 1.3), ("dead_end", 1.0), ("edit", 0.8), ("build", 1.5), ("test", 1.0),
              ("decision", 1.2))

SWE_PILOT = FamilyConfig(
    name="swe-pilot",
    repos=(
        RepoConfig("django/django", workspace_mb=9.1, workspace_cv=0.01, work_scale=1.0),
        RepoConfig("scikit-learn/scikit-learn", workspace_mb=13.4, workspace_cv=0.12, work_scale=1.05),
        RepoConfig("sympy/sympy", workspace_mb=19.0, workspace_cv=0.3, work_scale=0.95),
        # five more SWE-bench Verified repositories drawn like the pilot's three (the
        # pilot-sized calibration samples use the first three; the study uses all eight)
        RepoConfig("astropy/astropy", workspace_mb=17.5, workspace_cv=0.15, work_scale=1.05),
        RepoConfig("matplotlib/matplotlib", workspace_mb=15.5, workspace_cv=0.1, work_scale=1.0),
        RepoConfig("pytest-dev/pytest", workspace_mb=9.5, workspace_cv=0.05, work_scale=0.95),
        RepoConfig("sphinx-doc/sphinx", workspace_mb=12.0, workspace_cv=0.1, work_scale=1.0),
        RepoConfig("pydata/xarray", workspace_mb=13.5, workspace_cv=0.1, work_scale=1.0),
    ),
    steps=(
        StepConfig(  # issue analysis, localisation and the fix: ~74 % of the work
            work_s=154.0, work_cv=0.2, units=(14, 36),
            mix=(("fact", 0.22), ("dead_end", 0.46), ("edit", 0.14), ("test", 0.18)),
            kind_weight=_EXPLORE_W, last="test", fact_mult=2.9, fact_sigma=0.45, redo_edit=0.8,
            edit_bytes=(300, 6_000),
        ),
        StepConfig(  # run the test suite, small follow-up fix
            work_s=41.0, work_cv=0.35, units=(2, 5),
            mix=(("test", 0.6), ("edit", 0.25), ("dead_end", 0.15)),
            kind_weight=_EXPLORE_W, last="test", redo_edit=1.0, edit_bytes=(100, 1_500),
        ),
        StepConfig(work_s=12.5, work_cv=0.35, units=(1, 2), mix=(("test", 1.0),), last="test"),
        StepConfig(work_s=4.9, work_cv=0.3, units=(1, 1), mix=(("test", 1.0),), last="test"),
    ),
    tasks_per_repo=4,
    steps_pattern=(3, 3, 3, 4),
    # 10 of 12 verified (paper, Section 4); the two unsolved tasks sit in different repos.
    verified_pattern=(True, True, True, True, False, True, True, True, True, False, True, True),
    orient_pristine_s=4.0, orient_base_s=26.0, orient_per_ktok_s=0.25, orient_sigma=0.2,
    explore_s=9.0, explore_sigma=0.5, final_verification=True, verify_s=54.0, verify_cv=0.2,
    verify_sigma=0.14, unverified_extra_s=60.0, unverified_work_scale=1.6,
    notes="calibrated to the RippleCP pilot (paper Section 4, Tables 1, 4, 5; Appendix G)",
)

def _repos(prefix: str, specs: tuple[tuple[str, float, float, float], ...]) -> tuple[RepoConfig, ...]:
    """Repositories ``prefix/name`` from (name, workspace MB, workspace cv, work scale)."""
    return tuple(RepoConfig(f"{prefix}/{n}", workspace_mb=mb, workspace_cv=cv, work_scale=ws)
                 for n, mb, cv, ws in specs)


DEPENDENCY_RESOLUTION = FamilyConfig(
    name="dependency-resolution",
    repos=_repos("deps", (
        ("torch-extension", 6.0, 0.1, 1.0), ("geo-stack", 9.0, 0.15, 1.1),
        ("notebook-env", 4.5, 0.2, 0.9), ("cuda-kernels", 7.5, 0.1, 1.2),
        ("web-backend", 5.0, 0.15, 0.85), ("bio-pipeline", 8.0, 0.2, 1.05),
        ("cli-tooling", 3.5, 0.1, 0.8), ("data-connectors", 6.5, 0.15, 0.95),
    )),
    steps=(
        StepConfig(  # an investigation: failing installs, then a one-line pin the next test verifies
            name="investigate-and-pin", work_s=110.0, work_cv=0.6, units=(5, 12),
            mix=(("dead_end", 0.75), ("fact", 0.25)), kind_weight=_EXPLORE_W,
            closing=("decision",), last="test", fact_mult=3.0, fact_sigma=0.7,
            fail_rate=0.85, attempt=("pip", "install", "-e", "."), edit_bytes=(20, 120),
        ),
        StepConfig(  # regenerate lock files / vendored code: many bytes, a tool redoes it cheaply
            name="regenerate-lock", work_s=90.0, work_cv=0.4, units=(3, 6),
            mix=(("edit", 0.8), ("dead_end", 0.2)), kind_weight=_EXPLORE_W, last="edit",
            redo_edit=0.12, edit_bytes=(200_000, 4_000_000),
        ),
        StepConfig(  # download and install from the wheel cache: long, nearly free to redo
            name="cached-install", work_s=120.0, work_cv=0.5, units=(2, 4),
            mix=(("build", 1.0),), kind_weight=(("build", 3.0),), last="build",
            redo_build=0.04, build_bytes=(5_000_000, 200_000_000),
        ),
        StepConfig(  # read code and docs: mostly dead ends, a few cheap facts
            name="explore", work_s=55.0, work_cv=0.5, units=(3, 8),
            mix=(("dead_end", 0.6), ("fact", 0.25), ("test", 0.15)), kind_weight=_EXPLORE_W,
            last="test", fact_mult=0.8, fact_sigma=0.5, fail_rate=0.1,
        ),
        StepConfig(  # rebuild and run the tests
            name="rebuild-and-test", work_s=50.0, work_cv=0.4, units=(2, 4),
            mix=(("build", 0.5), ("test", 0.5)), kind_weight=_EXPLORE_W, last="test",
            redo_build=0.3, build_bytes=(2_000_000, 20_000_000),
        ),
    ),
    step_weights=(0.28, 0.17, 0.17, 0.2, 0.18),
    # sized by the planner (python -m experiments.power, seed 0, alpha 0.05/10) within the
    # main job's 5 minutes: the limit gains ~34 s over the best simple rule; the learned
    # policies' differences detect ~56 s at 12 x 6 (89 at 8 x 4); ~33 s needs 24 x 8
    tasks_per_repo=6,
    study_repos=12,
    steps_pattern=(4, 5, 6, 5),
    verified_pattern=None,
    tests_track="decisions",
    orient_base_s=15.0, explore_s=8.0, final_verification=False, verify_s=0.0,
    notes="Appendix I, right panel: tiny semantic decision, large ripple; where it falls varies",
)

MULTI_STAGE_BUILD = FamilyConfig(
    name="multi-stage-build",
    repos=_repos("build", (
        ("llvm-subset", 30.0, 0.1, 1.2), ("ml-pipeline", 15.0, 0.2, 1.0),
        ("docs-site", 8.0, 0.1, 0.8), ("game-engine", 25.0, 0.15, 1.15),
        ("firmware", 12.0, 0.1, 0.9), ("browser-ext", 10.0, 0.2, 0.85),
        ("db-server", 20.0, 0.1, 1.1), ("mobile-app", 18.0, 0.15, 1.0),
    )),
    steps=(
        StepConfig(  # compile from edited sources: artifact size tracks compile time, redone on loss
            name="compile", work_s=100.0, work_cv=0.5, units=(2, 4),
            mix=(("build", 0.7), ("test", 0.15), ("dead_end", 0.15)),
            kind_weight=(("build", 3.0), ("test", 1.0), ("dead_end", 0.6)), last="build",
            redo_build=0.6, build_bytes=(20_000_000, 900_000_000),
        ),
        StepConfig(  # a remote-cache hit: long download, small stamps and links, free to redo
            name="cache-hit", work_s=90.0, work_cv=0.5, units=(2, 4),
            mix=(("build", 0.8), ("dead_end", 0.2)), kind_weight=(("build", 3.0), ("dead_end", 0.6)),
            last="build", redo_build=0.03, build_bytes=(20_000, 2_000_000),
        ),
        StepConfig(  # integration and smoke tests: long, superseded on recovery, never redone
            name="smoke-tests", work_s=90.0, work_cv=0.5, units=(2, 4),
            mix=(("test", 0.8), ("dead_end", 0.2)), kind_weight=(("test", 2.0), ("dead_end", 0.6)),
            last="test",
        ),
        StepConfig(  # configure: failing configure runs, then a flag in a config file the build verifies
            name="configure", work_s=35.0, work_cv=0.5, units=(4, 8),
            mix=(("dead_end", 0.7), ("fact", 0.3)), kind_weight=_EXPLORE_W,
            closing=("decision",), last="build", fact_mult=4.0, fact_sigma=0.6, fail_rate=0.8,
            attempt=("cmake", "-S", ".", "-B", "build"), edit_bytes=(20, 200), redo_build=0.3,
            build_bytes=(1_000_000, 20_000_000),
        ),
    ),
    step_weights=(0.36, 0.24, 0.2, 0.2),
    # sized by the planner (seed 0, alpha 0.05/10): the limit gains ~33 s over the best simple
    # rule; the learned policies' differences detect ~30 s at 12 x 6, 52 s at 8 x 4
    tasks_per_repo=6,
    study_repos=12,
    steps_pattern=(4, 5, 6, 5),
    tests_track="decisions",
    orient_base_s=12.0, explore_s=5.0, explore_sigma=0.3, remaining_sigma=0.04, redo_sigma=0.15,
    final_verification=False, verify_s=0.0, creation_per_mb_s=0.004, restore_per_mb_s=0.006, compress_ratio=0.15,
    notes="Appendix I, left panel: large artifacts, cheap to regenerate; stages drawn per task",
)

_PHASE = dict(work_s=140.0, work_cv=0.45, units=(6, 11),
              mix=(("fact", 0.25), ("dead_end", 0.35), ("edit", 0.25), ("test", 0.15)),
              kind_weight=_EXPLORE_W, last="test", fact_sigma=0.8, redo_edit=0.8, fail_rate=0.15,
              attempt=("python", "-m", "pytest", "-x", "-q"))

LONG_HORIZON = FamilyConfig(
    name="long-horizon",
    repos=_repos("long", (
        ("compiler-port", 20.0, 0.1, 1.1), ("api-migration", 12.0, 0.15, 1.0),
        ("data-platform", 16.0, 0.2, 1.05), ("ui-rewrite", 10.0, 0.15, 0.9),
        ("search-engine", 18.0, 0.1, 1.15), ("payments", 14.0, 0.2, 0.95),
        ("sim-toolkit", 22.0, 0.1, 1.2), ("infra-as-code", 8.0, 0.15, 0.85),
    )),
    steps=(
        StepConfig(name="phase-with-insight", fact_mult=4.0, **_PHASE),  # hard-won facts
        StepConfig(name="routine-phase", fact_mult=0.5, **_PHASE),  # the same to the eye, cheap facts
    ),
    step_weights=(0.3, 0.7),
    tasks_per_repo=4,
    steps_pattern=(5, 6),
    orient_base_s=25.0, orient_per_ktok_s=0.3, explore_s=10.0, final_verification=True,
    verify_s=40.0,
    notes="several expensive phases, 30-60 tool-call boundaries; the honest null for targeting",
    control="null",
)

_ROUTINE = dict(work_s=60.0, work_cv=0.3, units=(5, 8), mix=(("dead_end", 0.6), ("edit", 0.4)),
                kind_weight=_EXPLORE_W, last="edit", redo_edit=0.3, edit_bytes=(200, 4_000))

POSITIVE = FamilyConfig(
    name="positive-control",
    repos=_repos("control", (
        ("pinned-service", 6.0, 0.1, 1.0), ("plugin-host", 8.0, 0.15, 1.1),
        ("etl-jobs", 5.0, 0.2, 0.9), ("sdk-python", 7.0, 0.1, 1.05),
        ("model-serving", 9.0, 0.15, 1.15), ("report-builder", 4.0, 0.2, 0.85),
        ("auth-gateway", 6.5, 0.1, 0.95), ("queue-workers", 5.5, 0.15, 1.0),
    )),
    steps=(
        # the decisive step: failing installs, then a one-line pin; rediscovery ~5 x 60 s
        StepConfig(name="decisive-pin", closing=("decision",), fact_mult=5.0, fact_sigma=0.25,
                   fail_rate=0.9, attempt=("pip", "install", "-e", "."), **_ROUTINE),
        # a routine step: the same shape and work, reads and small edits, nothing dear
        StepConfig(name="routine", **_ROUTINE),
    ),
    step_weights=(0.0, 1.0),
    exactly_once=0,
    # sized by the planner (seed 0, alpha 0.05/10): the limit gains ~53 s over the best simple
    # rule, the learned policies 47-52 s; their differences detect ~32 s at 12 x 4, 45-48 at 8 x 4
    tasks_per_repo=4,
    study_repos=12,
    steps_pattern=(6,),
    tests_track="decisions",
    orient_base_s=15.0, explore_s=8.0, rediscovery_sigma=0.25, final_verification=False,
    verify_s=0.0,
    notes="positive control: one decisive step at a random position, seen only through features",
    control="positive",
)

#: the study's control families (``FamilyConfig.control``): learning needed by construction,
#: and nothing observable to learn from
POSITIVE_CONTROL = POSITIVE.name
NULL_CONTROL = LONG_HORIZON.name

FAMILIES: dict[str, FamilyConfig] = {
    f.name: f for f in (SWE_PILOT, DEPENDENCY_RESOLUTION, MULTI_STAGE_BUILD, LONG_HORIZON, POSITIVE)
}


def get_family(name: str | FamilyConfig) -> FamilyConfig:
    """The family config named ``name`` (a config passes through after validation)."""
    if isinstance(name, FamilyConfig):
        name.validate()
        return name
    try:
        fam = FAMILIES[name]
    except KeyError:
        raise KeyError(f"unknown workload family {name!r}; known: {sorted(FAMILIES)}") from None
    fam.validate()
    return fam


def family_names() -> list[str]:
    """The registered family names."""
    return sorted(FAMILIES)


def control_families() -> dict[str, str]:
    """The registered control families by role: ``{"positive": name, "null": name}``."""
    out: dict[str, str] = {}
    for fam in FAMILIES.values():
        if fam.control:
            if fam.control in out:
                raise ValueError(f"two {fam.control} controls: {out[fam.control]!r} and {fam.name!r}")
            out[fam.control] = fam.name
    return out


def with_controls(families: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """``families`` with the control families appended where missing (every study runs
    them: the positive control tells whether the study can say yes, the null whether it
    says yes where it should not)."""
    fams = list(families)
    return (*fams, *(c for c in control_families().values() if c not in fams))


#: the relative spread of generated repository variants' parameters when a family declares
#: too few repositories to measure one (log-sd of workspace MB and of work scale)
_VARIANT_FLOOR = (0.3, 0.1)


def repo_at(family: FamilyConfig, index: int, seed: int) -> RepoConfig:
    """Repository ``index`` of ``family`` in a study with seed ``seed``: a declared one, or
    beyond them a generated variant with its own parameters, drawn from the declared
    repositories' spread (log-normal workspace MB and work scale around their log means with
    their log-sds, workspace cv uniform over their range), deterministic in (family name,
    salt, seed, index). Variants are new repositories, never copies: a study with more
    folds than the family declares draws new repository effects, as a bigger sample of the
    same population would."""
    if index < 0:
        raise ValueError(f"{family.name}: repository index must be >= 0, got {index}")
    if index < len(family.repos):
        return family.repos[index]
    import numpy as np

    declared = family.repos
    log_mb = np.log([r.workspace_mb for r in declared])
    log_ws = np.log([r.work_scale for r in declared])
    cvs = [r.workspace_cv for r in declared]
    sd_mb = max(float(np.std(log_mb)), _VARIANT_FLOOR[0])
    sd_ws = max(float(np.std(log_ws)), _VARIANT_FLOOR[1])
    key = hashlib.blake2b(f"{family.name}\x1f{family.seed_salt}\x1f{int(seed)}\x1f{index}".encode(),
                          digest_size=8).digest()
    rng = np.random.default_rng(int.from_bytes(key, "little"))
    z = rng.standard_normal(2)
    mb = float(math.exp(float(np.mean(log_mb)) + sd_mb * z[0]))
    ws = float(math.exp(float(np.mean(log_ws)) + sd_ws * z[1]))
    cv = float(rng.uniform(min(cvs), max(cvs))) if max(cvs) > min(cvs) else float(cvs[0])
    prefix = declared[0].name.rsplit("/", 1)[0] if "/" in declared[0].name else family.name
    return RepoConfig(f"{prefix}/variant-{index + 1:03d}", workspace_mb=round(mb, 3),
                      workspace_cv=round(cv, 4), work_scale=round(ws, 4))
