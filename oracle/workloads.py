"""Workload families for the simulated agent (:mod:`oracle.simulator`), as typed configs.

A family is a set of repositories plus a step template: what a task's logical steps
(turns) contain, how long they take, which tool-call units they are made of, and how
expensive each kind of lost work is to re-derive. The generative model that turns a
family into tasks, nominal trajectories and recovery costs, and the meaning of every
parameter below, is documented in :mod:`oracle.simulator`'s module docstring.

Families (paper, Section 4 and Appendix I):

``swe-pilot``
    Calibrated to the published pilot (``paper/pilot_tables.json``): 3 repositories x 4
    tasks, 3-4 logical steps with ~74 % of the work in step 1, ~29 tool-call boundaries per
    task (~25 in the first turn), 10 of 12 tasks verified. Facts found in step 1 are costly
    to rediscover; later steps are verification, which a resumed agent re-runs anyway.
``dependency-resolution``
    A long investigation ends in a tiny decision (a one-line pin in a requirements or
    config file) that every later install, build and test reads: few bytes, large
    downstream fan-out, heavy-tailed rediscovery. Later steps write many bytes (vendored or
    regenerated code) that are cheap to redo.
``multi-stage-build``
    Build stages that write large artifacts which the next stage consumes; regenerating an
    artifact is cheap relative to its size (cached inputs), so bytes are large and value
    modest.
``long-horizon``
    Several expensive phases, each with its own discoveries and edits, 30-60 tool-call
    boundaries: additional checkpoints are worth something here, unlike in the pilot.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

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
    of these kinds.
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


@dataclass(frozen=True)
class FamilyConfig:
    """A workload family: repositories, step templates and recovery/checkpoint parameters.

    Task shape: ``steps`` are the step templates; a task has ``steps_pattern[i %
    len(steps_pattern)]`` steps (the first that many templates), cycled over the task's
    index within its repository, and is verified unless its global index modulo
    ``len(verified_pattern)`` hits a ``False`` (``None``: every task verified).

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
    """

    name: str
    repos: tuple[RepoConfig, ...]
    steps: tuple[StepConfig, ...]
    tasks_per_repo: int = 4
    steps_pattern: tuple[int, ...] = (3,)
    verified_pattern: tuple[bool, ...] | None = None
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

    def with_tasks_per_repo(self, n: int) -> FamilyConfig:
        """The same family with ``n`` tasks per repository."""
        if n < 1:
            raise ValueError(f"{self.name}: tasks_per_repo must be >= 1, got {n}")
        return replace(self, tasks_per_repo=int(n))

    def validate(self) -> None:
        """Raise ValueError naming the field on an inconsistent config."""
        if not self.repos:
            raise ValueError(f"{self.name}: needs at least one repository")
        if not self.steps:
            raise ValueError(f"{self.name}: needs at least one step template")
        for n in self.steps_pattern:
            if not 1 <= n <= len(self.steps):
                raise ValueError(f"{self.name}: steps_pattern value {n} outside 1..{len(self.steps)}")
        for i, s in enumerate(self.steps, 1):
            if s.units[0] < 1 or s.units[1] < s.units[0]:
                raise ValueError(f"{self.name}: step {i} units range {s.units} invalid")
            for k, w in (*s.mix, *s.kind_weight):
                if k not in UNIT_KINDS or w < 0:
                    raise ValueError(f"{self.name}: step {i} unknown unit kind or weight {k}={w}")
            if s.last not in UNIT_KINDS:
                raise ValueError(f"{self.name}: step {i} last kind {s.last!r} unknown")
            if s.work_s <= 0:
                raise ValueError(f"{self.name}: step {i} work_s must be > 0")


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

DEPENDENCY_RESOLUTION = FamilyConfig(
    name="dependency-resolution",
    repos=(
        RepoConfig("deps/torch-extension", workspace_mb=6.0, workspace_cv=0.1),
        RepoConfig("deps/geo-stack", workspace_mb=9.0, workspace_cv=0.15),
        RepoConfig("deps/notebook-env", workspace_mb=4.5, workspace_cv=0.2),
    ),
    steps=(
        StepConfig(  # read the failing install log, skim the project
            work_s=40.0, units=(4, 8), mix=(("dead_end", 0.6), ("fact", 0.2), ("test", 0.2)),
            kind_weight=_EXPLORE_W, last="test", fact_mult=0.8, fact_sigma=0.4,
        ),
        StepConfig(  # the investigation: many dead ends, one decision (a one-line pin)
            work_s=150.0, work_cv=0.35, units=(8, 16), mix=(("dead_end", 0.75), ("fact", 0.25)),
            kind_weight=_EXPLORE_W, last="decision", fact_mult=3.0, fact_sigma=0.9,
            edit_bytes=(20, 120),
        ),
        StepConfig(  # regenerate lock files / vendored code: many bytes, cheap to redo
            work_s=50.0, units=(3, 6), mix=(("edit", 0.8), ("dead_end", 0.2)),
            kind_weight=_EXPLORE_W, last="edit", redo_edit=0.25, edit_bytes=(200_000, 4_000_000),
        ),
        StepConfig(  # rebuild and run the tests
            work_s=60.0, units=(2, 4), mix=(("build", 0.5), ("test", 0.5)),
            kind_weight=_EXPLORE_W, last="test", redo_build=0.3, build_bytes=(2_000_000, 20_000_000),
        ),
    ),
    tasks_per_repo=4,
    steps_pattern=(4,),
    verified_pattern=None,
    orient_base_s=15.0, explore_s=8.0, final_verification=False, verify_s=0.0,
    notes="Appendix I, right panel: tiny semantic decision, large ripple",
)

MULTI_STAGE_BUILD = FamilyConfig(
    name="multi-stage-build",
    repos=(
        RepoConfig("build/llvm-subset", workspace_mb=30.0, workspace_cv=0.1),
        RepoConfig("build/ml-pipeline", workspace_mb=15.0, workspace_cv=0.2),
        RepoConfig("build/docs-site", workspace_mb=8.0, workspace_cv=0.1),
    ),
    steps=tuple(
        StepConfig(  # one build stage: configure, build (large artifact), smoke test
            work_s=w, work_cv=0.5, units=(2, 4), mix=(("build", 0.6), ("test", 0.2), ("dead_end", 0.2)),
            kind_weight=(("build", 3.0), ("test", 1.0), ("dead_end", 0.6)), last="build",
            redo_build=0.45, build_bytes=(20_000_000, 900_000_000),
        )
        for w in (90.0, 70.0, 110.0, 60.0, 80.0)
    ),
    tasks_per_repo=4,
    steps_pattern=(4, 5),
    orient_base_s=12.0, explore_s=5.0, explore_sigma=0.3, remaining_sigma=0.04, redo_sigma=0.15,
    final_verification=False, verify_s=0.0, creation_per_mb_s=0.004, restore_per_mb_s=0.006, compress_ratio=0.15,
    notes="Appendix I, left panel: large artifacts, cheap to regenerate",
)

LONG_HORIZON = FamilyConfig(
    name="long-horizon",
    repos=(
        RepoConfig("long/compiler-port", workspace_mb=20.0, workspace_cv=0.1),
        RepoConfig("long/api-migration", workspace_mb=12.0, workspace_cv=0.15),
        RepoConfig("long/data-platform", workspace_mb=16.0, workspace_cv=0.2),
    ),
    steps=tuple(
        StepConfig(  # one expensive phase: explore, discover, edit, test
            work_s=w, work_cv=0.35, units=(6, 11),
            mix=(("fact", 0.25), ("dead_end", 0.35), ("edit", 0.25), ("test", 0.15)),
            kind_weight=_EXPLORE_W, last="test", fact_mult=1.8, fact_sigma=0.8, redo_edit=0.8,
        )
        for w in (150.0, 130.0, 170.0, 120.0, 140.0, 110.0)
    ),
    tasks_per_repo=4,
    steps_pattern=(5, 6),
    orient_base_s=25.0, orient_per_ktok_s=0.3, explore_s=10.0, final_verification=True,
    verify_s=40.0,
    notes="several expensive phases, 30-60 tool-call boundaries",
)

FAMILIES: dict[str, FamilyConfig] = {
    f.name: f for f in (SWE_PILOT, DEPENDENCY_RESOLUTION, MULTI_STAGE_BUILD, LONG_HORIZON)
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
