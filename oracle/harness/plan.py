"""Study plans: tasks, candidate cells and seeds frozen before any paired run (paper, App. A).

A :class:`Plan` is written to disk as JSON together with the sha256 of its canonical
content; :meth:`Plan.load` recomputes the hash and refuses a plan that was edited. Every
audit record of a study carries the plan hash, so a study directory cannot silently mix
two plans.

**A plan is code** (its tasks name the verifier commands a run executes) and so a *trusted
input*: the plain sha256 detects corruption and accidental edits, not a forger who
recomputes it. :meth:`Plan.load` therefore checks everything it can before anything runs:
every field's type, every cell re-derived from the study seed (its id, seeds and branch
order), and :func:`oracle.harness.study.run_study` checks each task against the task its
nominal run in the study directory ran (an edited verifier is refused there, before any
branch starts). For plans that pass through hands you do not trust, set a signing key
(:mod:`labelsets.integrity`: ``RIPPLECP_SIGNING_KEY`` or ``RIPPLECP_SIGNING_KEY_FILE``):
plans are then written with an ``hmac`` under it and only plans carrying a valid one load.

Cells. A *pair* cell (candidate t, fallback c-, failure f) with c- < t < f yields, per
repetition, one CP branch (restores t) and one SKIP branch (restores c-), both driven from
the candidate state t into segment f (see :mod:`oracle.harness.branch`). A *table* cell
(restore point r, failure f) yields one branch (role ``table``) driven from f-1.

Ready designs:

``pilot_plan`` (the pilot's frozen stratification, :func:`labelsets.definitions.pilot_cells`)
    per task one early cell (t=1, c-=0, f=2) - the *first* checkpoint against none - and
    one late cell (t=B-1, c-=t-1, f=B) - one *additional* checkpoint one step after an
    existing one - when B >= 3 (for B = 2 only the early cell exists).
``tool_call_plan`` (finer, over tool-call boundaries; Appendix G.5)
    all *adjacent* cells (t, c-=t-1, f=t+1) for t = 1..B-1 (every ``stride``-th t), i.e.
    the pilot's early/late contrast generalised to every candidate: t=1 is the first
    checkpoint, every other t an additional one. ``mode="pilot"`` keeps only the
    early/late pair on the tool-call boundaries instead.
``full_table_plan`` (every restore point x every failure)
    table cells r = 0..f-1 for f = 1..B (and f = B+1, the segment after the last boundary,
    with ``include_final=True``), so any placement can be priced exactly.
``sparse_plan`` (a stated number of table cells, :mod:`labelsets.recovery_model`)
    the study's table cells drawn by stratum (pristine r=0, adjacent r=f-1, longer jumps)
    with known inclusion probabilities, recorded with each cell and in ``design_params``; a
    placement is priced from them by the recovery model with a doubly-robust correction.

Repetitions: ``repetitions`` (default 2) per cell, plus - for pair cells - a predeclared
third repetition for cells whose first two advantages differ in sign (the rule is recorded
in the plan; the runner applies it after the first two). Seeds: a pair seed per (cell,
repetition), derived from the study seed with ``numpy.random.SeedSequence`` keyed by the
cell id and the repetition; the branch order of each pair is drawn from its pair seed. The
third repetition's seed and order are in the plan from the start.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from features.files import write_text_atomic
from labelsets.definitions import (
    DESIGNS,
    THIRD_RULE,
    cell_id,
    cp_first,
    nominal_seed,
    pair_seed,
    pilot_cells,
    stratum,
    table_cell_id,
)
from labelsets.integrity import keyed_seal, signing_key, verify_seal
from labelsets.recovery_model import SPARSE, SparseDesign, cell_stratum, sparse_provenance
from oracle.harness.branch import BranchSpec, HarnessConfig, StudyContext
from oracle.protocol import TaskSpec

__all__ = [
    "Plan",
    "PlanError",
    "full_table_plan",
    "pilot_plan",
    "sparse_plan",
    "task_from_dict",
    "task_to_dict",
    "tool_call_plan",
]

PLAN_VERSION = 1
#: the fields of a plan file: its content, its hash, and its hmac when signed
_FIELDS = ("version", "design", "study_seed", "agent", "config", "tasks", "n_boundaries",
           "cells", "repetitions", "third_repetition", "nominal", "nominal_seeds", "hash",
           "hmac", "design_params")


class PlanError(ValueError):
    """A plan file is invalid or was modified; the message names the file and field."""


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def task_to_dict(t: TaskSpec) -> dict:
    """JSON form of a :class:`TaskSpec`."""
    return {"task_id": t.task_id, "repo": t.repo, "family": t.family,
            "workspace_template": None if t.workspace_template is None else str(t.workspace_template),
            "verifier": None if t.verifier is None else list(t.verifier), "params": dict(t.params)}


def task_from_dict(d: Mapping[str, Any], where: str = "task") -> TaskSpec:
    """Inverse of :func:`task_to_dict`; errors name the field."""
    if not isinstance(d, Mapping):
        raise PlanError(f"{where}: must be a JSON object")
    unknown = sorted(set(d) - {"task_id", "repo", "family", "workspace_template", "verifier",
                               "params"})
    if unknown:
        raise PlanError(f"{where}: field {unknown[0]!r} is not a task field")
    for k in ("task_id", "repo", "family"):
        if not isinstance(d.get(k), str):
            raise PlanError(f"{where}: field {k!r} must be a string")
    wt = d.get("workspace_template")
    if wt is not None and not isinstance(wt, str):
        raise PlanError(f"{where}: field 'workspace_template' must be a path or null")
    ver = d.get("verifier")
    if ver is not None and not (isinstance(ver, list) and ver
                                and all(isinstance(x, str) for x in ver)):
        raise PlanError(f"{where}: field 'verifier' must be a command (a list of strings) or "
                        "null")
    params = d.get("params")
    if params is not None and not isinstance(params, dict):
        raise PlanError(f"{where}: field 'params' must be an object")
    return TaskSpec(d["task_id"], d["repo"], d["family"], None if wt is None else Path(wt),
                    None if ver is None else list(ver), dict(params or {}))


def _read_json(path: Path, what: str) -> Any:
    """The JSON document at ``path``, read without blocking (a FIFO, a device or a
    directory is refused, not waited on) and without a RecursionError: PlanError naming it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise PlanError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise PlanError(f"{path}: cannot read {what}: not a regular file")
    with open(fd, "rb") as f:
        if st.st_size > MAX_PLAN_BYTES:
            raise PlanError(f"{path}: {what} of {st.st_size} bytes, more than the "
                            f"{MAX_PLAN_BYTES} read")
        data = f.read(MAX_PLAN_BYTES + 1)
    try:
        return json.loads(data)
    except RecursionError:
        raise PlanError(f"{path}: cannot read {what}: JSON nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise PlanError(f"{path}: cannot read {what}: {exc}") from None


def _int(v: Any, lo: int, hi: int | None = None) -> bool:
    return type(v) is int and v >= lo and (hi is None or v <= hi)


def _check_cells(cells: Any, plan: Plan, where: str) -> None:
    """Every cell well-typed, in range, and exactly the cell its design derives from the
    study seed (id, stratum, seeds, branch order): an edited cell is refused even under a
    recomputed hash."""
    if not isinstance(cells, list) or not cells:
        raise PlanError(f"{where}: field 'cells' must be a non-empty list")
    ids: set[str] = set()
    for i, c in enumerate(cells):
        at = f"{where}: cells[{i}]"
        if not isinstance(c, dict):
            raise PlanError(f"{at}: must be an object")
        tid, kind = c.get("task_id"), c.get("kind")
        if tid not in plan.n_boundaries:
            raise PlanError(f"{at}: field 'task_id' {tid!r} is not a task of the plan")
        b = plan.n_boundaries[tid]
        if kind == "pair":
            t, cm, f = c.get("candidate"), c.get("fallback"), c.get("failure")
            if not (_int(cm, 0) and _int(t, cm + 1) and _int(f, t + 1, b + 1)):
                raise PlanError(f"{at}: fields 'candidate', 'fallback', 'failure' must be "
                                f"integers with 0 <= fallback < candidate < failure <= {b + 1}, "
                                f"got {t!r}, {cm!r}, {f!r}")
            want = _pair_cell(tid, t, cm, f, plan.study_seed, plan.repetitions)
        elif kind == "table":
            r, f = c.get("restore_point"), c.get("failure")
            if not (_int(r, 0) and _int(f, r + 1, b + 1)):
                raise PlanError(f"{at}: fields 'restore_point', 'failure' must be integers "
                                f"with 0 <= restore_point < failure <= {b + 1}, got {r!r}, {f!r}")
            want = _table_cell(tid, r, f, plan.study_seed, plan.repetitions)
            if plan.design == SPARSE:  # a sparse cell also records its stratum and probability
                want["stratum"] = cell_stratum(r, f)
                want["inclusion"] = (plan.design_params.get("inclusion") or {}).get(want["stratum"])
        else:
            raise PlanError(f"{at}: field 'kind' must be 'pair' or 'table', got {kind!r}")
        if c != want:
            bad = sorted(k for k in set(c) | set(want) if c.get(k, _MISSING) != want.get(k))
            raise PlanError(f"{at}: field {bad[0]!r} is not what the plan's design derives "
                            f"from its study seed ({c.get(bad[0], 'missing')!r}, expected "
                            f"{want.get(bad[0])!r}): the plan was edited")
        if want["cell_id"] in ids:
            raise PlanError(f"{at}: duplicate cell {want['cell_id']!r}")
        ids.add(want["cell_id"])
    if plan.design == SPARSE:
        _check_sparse_draw(cells, plan, where)


def _check_sparse_draw(cells: list[dict], plan: Plan, where: str) -> None:
    """A sparse plan's cells are exactly the draw its recorded rule makes from the study
    seed (and the rule's inclusion probabilities the ones recorded)."""
    dp = plan.design_params
    try:
        design = SparseDesign(tuple(float(x) for x in dp["shares"]), int(dp["repetitions"]),
                              bool(dp["include_final"]))
        chosen, probs = design.choose({t: int(b) for t, b in plan.n_boundaries.items()},
                                      int(dp["n_cells"]), plan.study_seed)
    except (KeyError, TypeError, ValueError) as exc:
        raise PlanError(f"{where}: field 'design_params' does not state a sparse rule ({exc})") from None
    got = [(c["task_id"], c["restore_point"], c["failure"]) for c in cells]
    if got != chosen or {k: float(v) for k, v in (dp.get("inclusion") or {}).items()} != probs:
        raise PlanError(f"{where}: field 'cells' is not the draw the sparse rule in "
                        "'design_params' makes from the study seed: the plan was edited")


_MISSING = object()
MAX_PLAN_BYTES = 256 << 20


@dataclass
class Plan:
    """A frozen study plan (see module docstring)."""

    design: str
    study_seed: int
    agent: str
    agent_options: dict[str, Any]
    config: HarnessConfig
    tasks: list[TaskSpec]
    n_boundaries: dict[str, int]
    cells: list[dict]
    repetitions: int = 2
    third_repetition: bool = True
    nominal: dict[str, dict] = field(default_factory=dict)
    hash: str = ""
    #: what a design needs beyond its cells (sparse: its rule and inclusion probabilities);
    #: hashed with the plan, and absent from the content of designs that have none
    design_params: dict[str, Any] = field(default_factory=dict)

    # -- serialisation -----------------------------------------------------------------
    def content(self) -> dict:
        return {
            "version": PLAN_VERSION, "design": self.design, "study_seed": int(self.study_seed),
            "agent": {"name": self.agent, "options": dict(self.agent_options)},
            "config": {**asdict(self.config), "exclude": list(self.config.exclude)},
            "tasks": [task_to_dict(t) for t in self.tasks],
            "n_boundaries": {k: int(v) for k, v in self.n_boundaries.items()},
            "cells": self.cells, "repetitions": int(self.repetitions),
            "third_repetition": {"rule": THIRD_RULE} if self.third_repetition else None,
            "nominal": self.nominal,
            "nominal_seeds": {t.task_id: self.nominal_seed(t.task_id) for t in self.tasks},
        } | ({"design_params": self.design_params} if self.design_params else {})

    def compute_hash(self) -> str:
        return hashlib.sha256(_canonical(self.content())).hexdigest()

    def save(self, path: str | Path) -> Path:
        """Write the plan with its hash (and, with a signing key, its ``hmac``: module doc)
        atomically."""
        path = Path(path)
        self.hash = self.compute_hash()
        doc = {**self.content(), "hash": self.hash}
        key = signing_key()
        if key is not None:
            doc["hmac"] = keyed_seal("plan", self.hash, key)
        write_text_atomic(path, json.dumps(doc, indent=1, sort_keys=True))
        return path

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        """Load and verify a plan file: hash, version, every field's type, every cell
        against its design, and the ``hmac`` when a signing key is set (module doc)."""
        path = Path(path)
        doc = _read_json(path, "plan")
        if not isinstance(doc, dict):
            raise PlanError(f"{path}: plan must be a JSON object")
        if doc.get("version") != PLAN_VERSION:
            raise PlanError(f"{path}: field 'version' is {doc.get('version')!r}, expected {PLAN_VERSION}")
        unknown = sorted(set(doc) - set(_FIELDS))
        if unknown:
            raise PlanError(f"{path}: field {unknown[0]!r} is not a plan field")
        try:
            for k, kinds in (("design", str), ("study_seed", int), ("agent", dict),
                             ("config", dict), ("tasks", list), ("n_boundaries", dict),
                             ("cells", list), ("repetitions", int), ("hash", str)):
                if not isinstance(doc.get(k), kinds) or isinstance(doc.get(k), bool):
                    raise PlanError(f"{path}: field {k!r} is missing or not a "
                                    f"{kinds.__name__}")
            if doc["design"] not in DESIGNS:
                raise PlanError(f"{path}: field 'design' {doc['design']!r} is not one of "
                                f"{', '.join(DESIGNS)}")
            if not isinstance(doc["agent"].get("name"), str) or not isinstance(
                    doc["agent"].get("options") or {}, dict):
                raise PlanError(f"{path}: field 'agent' must be {{'name': str, 'options': {{}}}}")
            if not all(isinstance(k, str) and _int(v, 1) for k, v in doc["n_boundaries"].items()):
                raise PlanError(f"{path}: field 'n_boundaries' must map task ids to counts >= 1")
            if not _int(doc["repetitions"], 1):
                raise PlanError(f"{path}: field 'repetitions' must be an integer >= 1")
            if not isinstance(doc.get("nominal") or {}, dict):
                raise PlanError(f"{path}: field 'nominal' must be an object")
            if not isinstance(doc.get("design_params") or {}, dict):
                raise PlanError(f"{path}: field 'design_params' must be an object")
            cfg = dict(doc["config"])
            cfg["exclude"] = tuple(cfg.get("exclude", ()))
            plan = cls(
                design=doc["design"], study_seed=doc["study_seed"],
                agent=doc["agent"]["name"], agent_options=dict(doc["agent"].get("options") or {}),
                config=HarnessConfig(**cfg),
                tasks=[task_from_dict(t, f"{path}: tasks[{i}]") for i, t in enumerate(doc["tasks"])],
                n_boundaries=dict(doc["n_boundaries"]),
                cells=list(doc["cells"]), repetitions=doc["repetitions"],
                third_repetition=doc.get("third_repetition") is not None,
                nominal=dict(doc.get("nominal") or {}),
                design_params=dict(doc.get("design_params") or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, PlanError):
                raise
            raise PlanError(f"{path}: missing or bad field: {exc!r}") from exc
        if sorted(plan.n_boundaries) != sorted(plan.task_ids):
            raise PlanError(f"{path}: field 'n_boundaries' must name exactly the plan's tasks")
        want = doc.get("hash")
        got = plan.compute_hash()
        if want != got:
            raise PlanError(f"{path}: plan hash mismatch (file says {str(want)[:12]}, content "
                            f"hashes to {got[:12]}): the plan was modified after it was frozen")
        problem = verify_seal("plan", got, doc.get("hmac"), str(path))
        if problem is not None:
            raise PlanError(problem)
        _check_cells(doc["cells"], plan, str(path))
        plan.hash = got
        return plan

    # -- queries used by the runner ------------------------------------------------------
    @property
    def task_ids(self) -> list[str]:
        return [t.task_id for t in self.tasks]

    @property
    def third_rule(self) -> bool:
        return self.third_repetition

    def nominal_seed(self, task_id: str) -> int:
        return nominal_seed(self.study_seed, task_id)

    def cell(self, cell_id: str) -> dict:
        for c in self.cells:
            if c["cell_id"] == cell_id:
                return c
        raise KeyError(f"plan has no cell {cell_id!r}")

    def pair_cells(self) -> list[str]:
        return [c["cell_id"] for c in self.cells if c["kind"] == "pair"]

    def pairs_of(self, cell_id: str, reps: Iterable[int]) -> list[tuple[str, str]]:
        """(first, second) branch ids of the cell's pairs at the given repetitions."""
        return [(f"{cell_id}:rep{k}/0", f"{cell_id}:rep{k}/1") for k in reps]

    def branch_specs(self, repetitions: Sequence[int] = (1, 2),
                     cells: Iterable[str] | None = None) -> list[BranchSpec]:
        """Branches of the given repetitions (all cells, or ``cells``), in submission order."""
        keep = None if cells is None else set(cells)
        out = []
        for c in self.cells:
            if keep is not None and c["cell_id"] not in keep:
                continue
            for k in repetitions:
                if c["kind"] == "pair" and k == 3 and not self.third_repetition:
                    continue
                if c["kind"] == "table" and k > self.repetitions:
                    continue
                seed = int(c["seeds"][k - 1])
                if c["kind"] == "table":
                    out.append(BranchSpec(
                        branch_id=f"{c['cell_id']}:rep{k}", task_id=c["task_id"], role="table",
                        restore_point=c["restore_point"], failure=c["failure"],
                        drive_from=c["drive_from"], repetition=k, seed=seed,
                        cell_id=c["cell_id"]))
                    continue
                pair_id = f"{c['cell_id']}:rep{k}"
                roles = ["cp", "skip"] if c["cp_first"][k - 1] else ["skip", "cp"]
                for pos, role in enumerate(roles):
                    out.append(BranchSpec(
                        branch_id=f"{pair_id}/{pos}", task_id=c["task_id"], role=role,
                        restore_point=c["candidate"] if role == "cp" else c["fallback"],
                        failure=c["failure"], drive_from=c["candidate"], repetition=k,
                        seed=seed, pair_id=pair_id, cell_id=c["cell_id"],
                        candidate=c["candidate"], fallback=c["fallback"], order=pos))
        return out

    def adaptive_specs(self, cells: Iterable[Sequence[Any]]) -> list[BranchSpec]:
        """Branches of table cells (task, r, f) chosen after the plan was frozen (adaptive
        collection), with the seeds a table cell of this plan would have: ``repetitions``
        each. A cell the plan already holds, or one out of range, is a PlanError."""
        held = {c["cell_id"] for c in self.cells}
        out = []
        for task_id, r, f in cells:
            r, f = int(r), int(f)
            b = self.n_boundaries.get(str(task_id))
            if b is None or not 0 <= r < f <= b + 1:
                raise PlanError(f"adaptive cell ({task_id}, r={r}, f={f}) is not a table cell of the plan")
            c = _table_cell(str(task_id), r, f, self.study_seed, self.repetitions)
            if c["cell_id"] in held:
                raise PlanError(f"adaptive cell {c['cell_id']} is already in the plan")
            for k in range(1, self.repetitions + 1):
                out.append(BranchSpec(
                    branch_id=f"{c['cell_id']}:rep{k}", task_id=c["task_id"], role="table",
                    restore_point=r, failure=f, drive_from=f - 1, repetition=k,
                    seed=int(c["seeds"][k - 1]), cell_id=c["cell_id"]))
        return out

    def check_nominal(self, task_id: str, rec: dict) -> None:
        """Refuse a nominal record that does not match what the plan was frozen against:
        its boundaries, its trajectory, and the task it ran (a verifier, template or
        parameter edited in the plan since is refused before any branch runs)."""
        ran = rec.get("task")
        if isinstance(ran, dict):
            # as the audit log holds it: through JSON (tuples are lists there)
            now = json.loads(json.dumps(task_to_dict(next(t for t in self.tasks
                                                          if t.task_id == task_id)), default=str))
            for k in sorted(set(ran) | set(now)):
                if ran.get(k) != now.get(k):
                    raise PlanError(f"task {task_id}: field {k!r} of the plan differs from the "
                                    "task its nominal run ran: the plan was edited after it "
                                    "was frozen; refused before running anything")
        b = self.n_boundaries.get(task_id)
        if b is not None and int(rec["n_boundaries"]) != b:
            raise PlanError(f"task {task_id}: nominal run has {rec['n_boundaries']} boundaries, "
                            f"the plan was frozen with {b}")
        want = (self.nominal.get(task_id) or {}).get("trajectory_sha256")
        if want and want != rec.get("trajectory_sha256"):
            raise PlanError(f"task {task_id}: nominal trajectory differs from the one the plan "
                            "was frozen against (run it in the plan's study directory)")

    def context(self, study_dir: Path) -> StudyContext:
        return StudyContext(self.agent, dict(self.agent_options),
                            {t.task_id: t for t in self.tasks}, self.config, Path(study_dir),
                            self.hash or self.compute_hash())

    def provenance(self) -> dict:
        return {"plan_hash": self.hash or self.compute_hash(), "design": self.design,
                "study_seed": self.study_seed, "agent": self.agent,
                "agent_options": self.agent_options, "granularity": self.config.granularity,
                "clock": self.config.clock} | (
                    {"sparse": self.design_params} if self.design == SPARSE else {})

    def n_branches(self, with_third: bool = False) -> int:
        """Branches of the first ``repetitions`` (plus every third repetition if asked)."""
        reps = (1, 2, 3) if with_third else tuple(range(1, min(self.repetitions, 2) + 1))
        return len(self.branch_specs(reps))


# ---------------------------------------------------------------------------------------
# designs
# ---------------------------------------------------------------------------------------


def _pair_cell(task_id: str, t: int, c: int, f: int, seed: int, reps: int) -> dict:
    if not 0 <= c < t < f:
        raise PlanError(f"task {task_id}: need c- < t < f, got c-={c}, t={t}, f={f}")
    cid = cell_id(task_id, t, c, f)
    seeds = [pair_seed(seed, cid, k) for k in range(1, max(reps, 3) + 1)]
    return {"cell_id": cid, "task_id": task_id, "kind": "pair", "candidate": t, "fallback": c,
            "failure": f, "drive_from": t, "restore_point": None,
            "stratum": stratum(c), "seeds": seeds,
            "cp_first": [cp_first(s) for s in seeds]}


def _table_cell(task_id: str, r: int, f: int, seed: int, reps: int) -> dict:
    cid = table_cell_id(task_id, r, f)
    seeds = [pair_seed(seed, cid, k) for k in range(1, reps + 1)]
    return {"cell_id": cid, "task_id": task_id, "kind": "table", "candidate": None,
            "fallback": None, "failure": f, "drive_from": f - 1, "restore_point": r,
            "stratum": None, "seeds": seeds, "cp_first": None}


def _check_inputs(tasks: Sequence[TaskSpec], n_boundaries: Mapping[str, int]) -> None:
    ids = [t.task_id for t in tasks]
    if len(set(ids)) != len(ids):
        raise PlanError(f"duplicate task ids: {sorted({i for i in ids if ids.count(i) > 1})}")
    missing = [i for i in ids if i not in n_boundaries]
    if missing:
        raise PlanError(f"n_boundaries lacks tasks {missing}")


def _make(design: str, tasks: Sequence[TaskSpec], n_boundaries: Mapping[str, int], cells: list[dict],
          seed: int, agent: str, agent_options: Mapping[str, Any] | None,
          config: HarnessConfig | None, nominal: Mapping[str, dict] | None, repetitions: int,
          third: bool, granularity: str) -> Plan:
    cfg = config or HarnessConfig(granularity=granularity)
    if cfg.granularity != granularity:
        raise PlanError(f"{design} plan needs granularity {granularity!r}, config has {cfg.granularity!r}")
    if repetitions < 1:
        raise PlanError(f"repetitions must be >= 1, got {repetitions}")
    plan = Plan(design, int(seed), agent, dict(agent_options or {}), cfg, list(tasks),
                {t.task_id: int(n_boundaries[t.task_id]) for t in tasks}, cells, repetitions,
                third, dict(nominal or {}))
    plan.hash = plan.compute_hash()
    return plan


def pilot_plan(
    tasks: Sequence[TaskSpec], n_boundaries: Mapping[str, int], *, seed: int,
    agent: str = "scripted", agent_options: Mapping[str, Any] | None = None,
    config: HarnessConfig | None = None, nominal: Mapping[str, dict] | None = None,
    repetitions: int = 2, third_repetition: bool = True, granularity: str = "turn",
) -> Plan:
    """One early (t=1, c-=0, f=2) and one late (t=B-1, c-=t-1, f=B) cell per task."""
    _check_inputs(tasks, n_boundaries)
    cells = [_pair_cell(t.task_id, cand, fall, fail, seed, repetitions)
             for t in tasks for cand, fall, fail in pilot_cells(n_boundaries[t.task_id])]
    return _make("pilot", tasks, n_boundaries, cells, seed, agent, agent_options, config,
                 nominal, repetitions, third_repetition, granularity)


def tool_call_plan(
    tasks: Sequence[TaskSpec], n_boundaries: Mapping[str, int], *, seed: int,
    agent: str = "scripted", agent_options: Mapping[str, Any] | None = None,
    config: HarnessConfig | None = None, nominal: Mapping[str, dict] | None = None,
    repetitions: int = 2, third_repetition: bool = True, mode: str = "adjacent", stride: int = 1,
) -> Plan:
    """Cells over tool-call boundaries: every adjacent (t, t-1, t+1), or the pilot pair."""
    _check_inputs(tasks, n_boundaries)
    if mode not in ("adjacent", "pilot"):
        raise PlanError(f"tool_call_plan mode must be 'adjacent' or 'pilot', got {mode!r}")
    if stride < 1:
        raise PlanError(f"stride must be >= 1, got {stride}")
    if mode == "pilot":
        p = pilot_plan(tasks, n_boundaries, seed=seed, agent=agent,
                       agent_options=agent_options, config=config, nominal=nominal,
                       repetitions=repetitions, third_repetition=third_repetition,
                       granularity="tool_call")
        p.design = "tool_call"
        p.hash = p.compute_hash()
        return p
    cells = []
    for t in tasks:
        b = int(n_boundaries[t.task_id])
        for cand in range(1, b, stride):
            cells.append(_pair_cell(t.task_id, cand, cand - 1, cand + 1, seed, repetitions))
    return _make("tool_call", tasks, n_boundaries, cells, seed, agent, agent_options, config,
                 nominal, repetitions, third_repetition, "tool_call")


def full_table_plan(
    tasks: Sequence[TaskSpec], n_boundaries: Mapping[str, int], *, seed: int,
    agent: str = "scripted", agent_options: Mapping[str, Any] | None = None,
    config: HarnessConfig | None = None, nominal: Mapping[str, dict] | None = None,
    repetitions: int = 2, include_final: bool = False, granularity: str = "turn",
) -> Plan:
    """Every restore point r = 0..f-1 for every failure f = 1..B (B+1 with include_final)."""
    _check_inputs(tasks, n_boundaries)
    cells = []
    for t in tasks:
        b = int(n_boundaries[t.task_id])
        for f in range(1, b + (2 if include_final else 1)):
            for r in range(f):
                cells.append(_table_cell(t.task_id, r, f, seed, repetitions))
    return _make("full", tasks, n_boundaries, cells, seed, agent, agent_options, config, nominal,
                 repetitions, False, granularity)


def sparse_plan(
    tasks: Sequence[TaskSpec], n_boundaries: Mapping[str, int], *, seed: int,
    branches: int | None = None, branches_per_task: int | None = None,
    design: SparseDesign | None = None,
    agent: str = "scripted", agent_options: Mapping[str, Any] | None = None,
    config: HarnessConfig | None = None, nominal: Mapping[str, dict] | None = None,
    granularity: str = "turn",
) -> Plan:
    """Table cells drawn by the sparse design's rule (:class:`labelsets.recovery_model.
    SparseDesign`) within a budget of ``branches`` in total or ``branches_per_task`` times
    the number of tasks (exactly one of them); each cell records its stratum and inclusion
    probability."""
    _check_inputs(tasks, n_boundaries)
    design = design or SparseDesign()
    if (branches is None) == (branches_per_task is None):
        raise PlanError("sparse plan: give exactly one of branches (in total) and branches_per_task")
    total = branches if branches is not None else int(branches_per_task) * len(tasks)  # type: ignore[arg-type]
    if total < 1:
        raise PlanError(f"sparse plan: the branch budget must be >= 1, got {total}")
    n_cells = design.cells_for_branches(total)
    if n_cells < 1:
        raise PlanError(f"sparse plan: {total} branches buy no cell of {design.repetitions} repetitions")
    nb = {t.task_id: int(n_boundaries[t.task_id]) for t in tasks}
    chosen, probs = design.choose(nb, n_cells, seed)
    cells = []
    for tid, r, f in chosen:
        c = _table_cell(tid, r, f, seed, design.repetitions)
        c["stratum"] = cell_stratum(r, f)
        c["inclusion"] = probs[c["stratum"]]
        cells.append(c)
    plan = _make(SPARSE, tasks, n_boundaries, cells, seed, agent, agent_options, config, nominal,
                 design.repetitions, False, granularity)
    plan.design_params = sparse_provenance(design, probs, n_cells)
    plan.hash = plan.compute_hash()
    return plan
