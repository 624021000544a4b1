"""The paper's definitions, one home each (RippleCP, Sections 2-3 and Appendices A, B, F).

Every module that labels, plans, simulates, audits or analyses imports these names rather
than restating them: the harness and the simulator, the plan, the label-set tables, the
statistics, the datasets and the experiments.

- **Charged CP cost** ``J_cp = J(t, f) + C(t)``: recovery from the candidate's checkpoint
  plus that checkpoint's measured creation time (Section 3, cost accounting: CP is charged
  its own overhead). Restore latency is recorded apart and not folded into a label.
- **Counterfactual checkpoint advantage** ``A_CP = J_skip - J_cp`` (Eq. 3), with
  ``J_skip = J(c-, f)``: positive means checkpointing saves more than it costs.
- **The price of a placement at one failure** (Appendix F, TotalFailureCost less the
  nominal run): creation of the checkpoints taken before the failure, plus the restore
  latency of the restore point used, plus the measured recovery from it. The recovery
  table, the table-derived training targets, the evaluation and the clairvoyant optimum
  all price with :func:`failure_cost`.
- **Stratum**: what the SKIP world falls back to (Section 4) - ``"first"`` when the fallback
  is the pristine start (one checkpoint against none), ``"additional"`` otherwise (one more
  checkpoint beside an earlier one); ``"pooled"`` names both together. Never by distance.
- **Sign-unstable cell** (Appendix A): the first two repetitions' advantages differ in
  sign (``numpy.sign``; zero differs from nonzero); such a pair cell gets exactly one
  predeclared third repetition.
- **Pilot cells** (Section 4, the frozen stratification): per task one early cell
  (t=1, c-=0, f=2) and, when B >= 3, one late cell (t=B-1, c-=B-2, f=B).
- **Seeds and branch order**: one pair seed per (cell, repetition) from the study seed
  (and one per task's nominal run); the branch order of a pair is drawn from its pair
  seed and named ``"cp_first"`` or ``"skip_first"``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

FIRST = "first"
ADDITIONAL = "additional"
#: the two strata of the paper's Table 1, in report order
STRATA: tuple[str, str] = (FIRST, ADDITIONAL)
#: both strata together (Table 1's last row)
POOLED = "pooled"
#: the plan designs: the pilot's stratification, adjacent tool-call cells, every (r, f), and
#: a stated number of (r, f) priced by the recovery model (labelsets.recovery_model)
DESIGNS: tuple[str, str, str, str] = ("pilot", "tool_call", "full", "sparse")
CP_FIRST = "cp_first"
SKIP_FIRST = "skip_first"
#: the paper's analysis: its bootstrap seed, resamples per interval and permutations per test
PAPER_SEED = 20260818
N_BOOTSTRAP = 10_000
N_PERMUTATIONS = 20_000
AGENT_MINUTES_PER_LABEL = 8.4  # paper, G.4: one label cost 8.4 min of agent time

#: the predeclared third-repetition rule, as recorded in every plan
THIRD_RULE = (
    "sign_change: after the first two repetitions of a pair cell, run exactly one more pair "
    "when the two advantages J_skip - J_cp differ in sign (numpy.sign)"
)

Num = TypeVar("Num", float, np.ndarray)


def stratum(fallback: Any) -> Any:
    """``"first"`` when the SKIP world falls back to the pristine start (fallback 0), else
    ``"additional"``; element-wise (an object array) for an array of fallbacks."""
    if np.ndim(fallback) == 0:
        return FIRST if int(fallback) == 0 else ADDITIONAL
    return np.where(np.asarray(fallback) == 0, FIRST, ADDITIONAL).astype(object)


def charged_cp(recovery_s: Num, creation_s: Num) -> Num:
    """``J_cp``: recovery from the candidate's checkpoint plus its creation time."""
    return recovery_s + creation_s


def advantage(j_skip: Num, j_cp: Num) -> Num:
    """Counterfactual checkpoint advantage ``J_skip - J_cp`` (J_cp already charged C(t))."""
    return j_skip - j_cp


def failure_cost(creation_before: Num, restore_latency: Num, recovery: Num) -> Num:
    """The one price of a placement at one failure: creation of the checkpoints taken
    before it + restore latency of the restore point used + measured recovery from it."""
    return creation_before + restore_latency + recovery


def sign_unstable(advantages: Sequence[float] | np.ndarray) -> bool:
    """True when the first two repetitions' advantages differ in sign (zero differs from
    nonzero: rerun rather than guess). Fewer than two repetitions are never unstable."""
    a = np.asarray(advantages, dtype=float)
    return bool(a.size >= 2 and np.sign(a[0]) != np.sign(a[1]))


def pilot_cells(n_boundaries: int) -> list[tuple[int, int, int]]:
    """The pilot's frozen cells ``(t, c-, f)`` for a task with ``n_boundaries`` boundaries."""
    b = int(n_boundaries)
    cells = []
    if b >= 2:
        cells.append((1, 0, 2))
    if b >= 3:
        cells.append((b - 1, b - 2, b))
    return cells


def cell_id(task_id: str, candidate: int, fallback: int, failure: int) -> str:
    """The id of a pair cell (t, c-, f) of a task."""
    return f"{task_id}:t{int(candidate)}:c{int(fallback)}:f{int(failure)}"


def table_cell_id(task_id: str, restore_point: int, failure: int) -> str:
    """The id of a table cell (r, f) of a task."""
    return f"{task_id}:r{int(restore_point)}:f{int(failure)}"


def _key_ints(text: str) -> list[int]:
    d = hashlib.sha256(text.encode()).digest()
    return [int.from_bytes(d[i:i + 4], "little") for i in range(0, 16, 4)]


def pair_seed(study_seed: int, cell: str, repetition: int) -> int:
    """Seed of (cell, repetition): ``SeedSequence(study_seed)`` spawned at key (cell, rep)."""
    ss = np.random.SeedSequence(int(study_seed), spawn_key=(*_key_ints(cell), int(repetition)))
    return int(ss.generate_state(1, dtype=np.uint64)[0] & np.uint64(2**63 - 1))


# numpy's SeedSequence constants (pool of 4 words; hashmix and mix of O'Neill's randutils)
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R, _M32 = 0xCA01F9DD, 0x4973F715, 0xFFFFFFFF


def pair_seeds(study_seed: int, cells: Sequence[str], repetitions: Sequence[int]) -> np.ndarray:
    """:func:`pair_seed` of many (cell, repetition) pairs at once (int64 array, equal
    element for element; tested). ``SeedSequence`` has no bulk form and costs ~20 us a
    call, so a study of thousands of table cells runs its entropy mixing vectorised here."""
    if int(study_seed) < 0:
        raise ValueError(f"study seed must be >= 0, got {study_seed}")
    run, x = [], int(study_seed)
    while True:  # the study seed as little-endian 32-bit words, padded to the pool size
        run.append(x & _M32)
        x >>= 32
        if x == 0:
            break
    run += [0] * max(0, 4 - len(run))
    n = len(cells)
    ent = np.empty((n, len(run) + 5), dtype=np.uint64)
    ent[:, :len(run)] = np.array(run, dtype=np.uint64)
    ent[:, len(run):-1] = np.array([_key_ints(c) for c in cells], dtype=np.uint64).reshape(n, 4)
    ent[:, -1] = np.asarray(repetitions, dtype=np.uint64)
    m32, sh = np.uint64(_M32), np.uint64(16)
    hc = _INIT_A

    def hashmix(v: np.ndarray) -> np.ndarray:
        nonlocal hc
        v = v ^ np.uint64(hc)
        hc = (hc * _MULT_A) & _M32
        v = (v * np.uint64(hc)) & m32
        return v ^ (v >> sh)

    def mix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        r = (np.uint64(_MIX_L) * a - np.uint64(_MIX_R) * b) & m32
        return r ^ (r >> sh)

    with np.errstate(over="ignore"):
        pool = [hashmix(ent[:, i]) for i in range(4)]
        for src in range(4):
            for dst in range(4):
                if src != dst:
                    pool[dst] = mix(pool[dst], hashmix(pool[src]))
        for src in range(4, ent.shape[1]):
            for dst in range(4):
                pool[dst] = mix(pool[dst], hashmix(ent[:, src]))
        hb, words = _INIT_B, []
        for i in range(2):  # generate_state(1, uint64): two 32-bit words, little-endian
            v = pool[i] ^ np.uint64(hb)
            hb = (hb * _MULT_B) & _M32
            v = (v * np.uint64(hb)) & m32
            words.append(v ^ (v >> sh))
        out = words[0] | (words[1] << np.uint64(32))
    return (out & np.uint64(2**63 - 1)).astype(np.int64)


def nominal_seed(study_seed: int, task_id: str) -> int:
    """Seed of the nominal run of ``task_id``: the pair seed of cell ``nominal/<task>``."""
    return pair_seed(study_seed, f"nominal/{task_id}", 0)


def cp_first(seed: int) -> bool:
    """The branch order of a pair, drawn from its pair seed: True runs CP before SKIP."""
    return bool(np.random.default_rng(int(seed)).random() < 0.5)


def branch_order(cp_ran_first: Any) -> Any:
    """``"cp_first"`` or ``"skip_first"``; element-wise (an object array) for an array."""
    if np.ndim(cp_ran_first) == 0:
        return CP_FIRST if cp_ran_first else SKIP_FIRST
    return np.where(np.asarray(cp_ran_first, dtype=bool), CP_FIRST, SKIP_FIRST).astype(object)
