"""A whole simulated study through the fast, vectorised path: the same cost function as the
simulated agent (:func:`~oracle.simulator.model.batch_branch_costs`), straight into a
:class:`~labelsets.tables.LabelSet`.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any, Literal

import numpy as np
import pandas as pd

from features.schema import Trajectory
from labelsets.definitions import (
    DESIGNS,
    advantage,
    branch_order,
    cell_id,
    charged_cp,
    cp_first,
    pair_seed,
    pair_seeds,
    pilot_cells,
    sign_unstable,
    stratum,
    table_cell_id,
)
from labelsets.tables import (
    CHECKPOINT_COLUMNS,
    LABEL_COLUMNS,
    RECOVERY_COLUMNS,
    TASK_COLUMNS,
    LabelSet,
    conform,
    labels_from_recovery,
)
from oracle.simulator.model import (
    Granularity,
    LatentTask,
    TaskBatch,
    batch_branch_costs,
    branch_costs,
    family_tasks,
)
from oracle.simulator.workloads import FamilyConfig, get_family

__all__ = ["simulate_label_set"]

Design = Literal["full", "pilot", "tool_call"]


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
    :func:`labelsets.tables.labels_from_recovery`. Repetitions are numbered from 1, as in the
    harness, and seeds and branch order are the plan's (:mod:`labelsets.definitions`): a pilot pair
    runs with the pair seed of its cell and repetition (both branches) in the order drawn
    from it, exactly as :func:`oracle.harness.plan.pilot_plan` run by the harness with the
    simulated agent; a table branch (r, f) uses the pair seed of its table cell, as
    :func:`oracle.harness.plan.full_table_plan`; a label derived from the table has, as a harness
    label, its CP branch's seed as ``pair_seed``, and the order in which that plan submits
    its two branches: ``skip_first`` (the fallback's cell (c-, f) precedes (t, f)).
    """
    if design == "sparse":
        raise ValueError("design 'sparse': simulate design 'full' and draw the sparse cells from it "
                         "(labelsets.recovery_model.subsample)")
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
        _full_design(batch, tasks, per_task, seed, repetitions, tri_t, tri_r, tri_f,
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
        cid = cell_id(lt.task_id, t, cm, f)
        advs: list[float] = []
        k = 1
        while True:
            if k > repetitions and not (third and k == repetitions + 1 and repetitions == 2
                                        and sign_unstable(advs)):
                break
            bs = pair_seed(seed, cid, k)
            c = branch_costs(lt, [t, cm], [f, f], [bs, bs], gran)
            advs.append(float(advantage(c["cost_s"][1], charged_cp(c["cost_s"][0], creation[t]))))
            pair = f"{cid}:rep{k}"
            order = ("cp", "skip") if cp_first(bs) else ("skip", "cp")
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
    batch: TaskBatch, tasks: list[LatentTask], per_task: list[tuple], seed: int,
    repetitions: int, tri_t: list, tri_r: list, tri_f: list, lab_t: list, lab_tt: list,
    lab_c: list, lab_f: list, rec_cols: dict[str, list], lab_cols: dict[str, list],
) -> None:
    """Every r < f for every repetition in one vectorised pass, then labels from it."""
    t0, r0, f0 = np.concatenate(tri_t), np.concatenate(tri_r), np.concatenate(tri_f)
    m = len(r0)
    ti, rr, ff = np.tile(t0, repetitions), np.tile(r0, repetitions), np.tile(f0, repetitions)
    reps = np.repeat(np.arange(1, repetitions + 1), m)
    ids = np.array([lt.task_id for lt in tasks], dtype=object)
    tid = ids[ti]
    cells = [table_cell_id(a, b, d) for a, b, d in zip(tid.tolist(), rr.tolist(), ff.tolist(), strict=True)]
    seeds = pair_seeds(seed, cells, reps)
    c = batch_branch_costs(batch, ti, rr, ff, seeds)
    n = len(rr)
    repos = np.array([lt.repo for lt in tasks], dtype=object)
    width = int(batch.n_boundaries.max()) + 1
    off = np.concatenate([[0], np.cumsum(batch.n_boundaries + 1)])
    restore = np.concatenate([p[1] for p in per_task])
    creation = np.concatenate([p[0] for p in per_task])
    t_nom = np.concatenate([p[2] for p in per_task])
    digests = np.concatenate([p[3] for p in per_task])
    obs = np.concatenate([p[4] for p in per_task])
    at_r = off[ti] + rr
    _extend(rec_cols, task_id=tid, restore_point=rr, failure=ff, repetition=reps,
            branch_id=[f"{x}:rep{k}" for x, k in zip(cells, reps.tolist(), strict=True)],
            pair_id=np.full(n, None, dtype=object), role=np.full(n, "table", dtype=object),
            cost_s=c["cost_s"], restore_latency_s=restore[at_r], tokens=c["tokens"],
            tool_calls=c["tool_calls"], verified=batch.verified[ti] & ~c["capped"], capped=c["capped"],
            seed=seeds, state_digest=digests[at_r], obs_digest=obs[at_r],
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
    ver = batch.verified[T_i]
    nl = len(T)
    _extend(lab_cols, task_id=tids, repo=repos[T_i], cell_id=cell, candidate=T, fallback=C, failure=F,
            repetition=R, stratum=stratum(C), branch_order=np.full(nl, branch_order(False), dtype=object),
            j_cp=j_cp, j_skip=j_skip, advantage=advantage(j_skip, j_cp), creation_s=cr_t,
            protected_work_s=t_nom[off[T_i] + T] - t_nom[off[T_i] + C], verified=ver,
            verified_cp=ver & ~c["capped"][icp], verified_skip=ver & ~c["capped"][isk],
            tokens_cp=c["tokens"][icp], tokens_skip=c["tokens"][isk],
            tool_calls_cp=c["tool_calls"][icp], tool_calls_skip=c["tool_calls"][isk],
            pair_seed=seeds[icp], digest_cp=digests[off[T_i] + T], digest_skip=digests[off[T_i] + C],
            quarantined=np.zeros(nl, dtype=bool), quarantine_reason=np.full(nl, None, dtype=object))

