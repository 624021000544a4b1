"""Label sets: the recovery tables and paired advantage labels the harness produces.

A label set is a directory of schema-checked Parquet tables plus ``label_set.json``:

- ``tasks.parquet``: one row per task (repo, family, nominal outcome and duration).
- ``checkpoints.parquet``: one row per candidate boundary b = 1..B of a task: where it falls
  in the nominal trajectory, the nominal work done by then, and the measured creation cost
  (seconds, bytes) and restore latency of its checkpoint.
- ``recovery.parquet``: the recovery table, one row per executed branch: J(r, f) for
  restore point r (0 = pristine) and failure f (strikes during segment f, after boundary
  f-1), every repetition, with re-executed tokens and tool calls and the verified flag.
- ``labels.parquet``: one row per CP/SKIP pair (paper, Appendix B):
  j_cp = J(t, f) + creation_s(t), j_skip = J(c-, f), advantage = j_skip - j_cp.
- ``trajectories.parquet``: the nominal trajectories in the canonical event schema, so
  features are computed exactly as for real logs.
- ``label_set.json``: the manifest, written last (the commit): ``version``, the counts
  ``n_tasks`` / ``n_branches`` / ``n_pairs``, ``provenance`` and ``hash``, the SHA-256 of
  :meth:`LabelSet.content_hash` over every table, the trajectories and those fields.

:meth:`LabelSet.load` is the one verified loader: every reader of a label set goes through
it. It refuses, with a :class:`LabelSetError` naming the file and field, a set with no or a
blank hash, a hash that does not match, an unknown version or field, an unreadable table or
manifest, and rows no study can produce. Version ``"1"`` sets (hash over the four tables,
branch ids left out, trajectories and manifest fields not covered) are still read when their
version-1 hash verifies, with a warning; saving one again seals it as version ``"2"``.

Quarantined branches and pairs (diverged inputs, ``paper/003``) stay in the tables with
a reason; they are excluded from estimates, never deleted.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from features.files import write_atomic, write_text_atomic
from features.schema import Trajectory
from features.schema import read_parquet as read_trajectories
from features.schema import to_frame as trajectory_frame
from features.schema import write_parquet as write_trajectories
from labelsets.definitions import (
    advantage,
    branch_order,
    cell_id,
    charged_cp,
    failure_cost,
    pilot_cells,
    stratum,
)

#: the version :meth:`LabelSet.save` writes; ``"2"`` seals trajectories and manifest fields
LABEL_SET_VERSION = "2"
#: versions :meth:`LabelSet.load` reads (each verified with its own hash definition)
READABLE_VERSIONS: tuple[str, ...] = ("1", "2")
#: the manifest's fields besides ``hash``, all covered by it
MANIFEST_FIELDS: tuple[str, ...] = ("version", "n_tasks", "n_branches", "n_pairs", "provenance")

TASK_SCHEMA = pa.schema(
    [
        ("task_id", pa.string()),
        ("repo", pa.string()),
        ("family", pa.string()),
        ("verified", pa.bool_()),  # the nominal run reached the verified endpoint
        ("nominal_s", pa.float64()),  # nominal wall seconds start -> completion
        ("n_boundaries", pa.int64()),
        ("granularity", pa.string()),  # "turn" | "tool_call"
    ]
)

CHECKPOINT_SCHEMA = pa.schema(
    [
        ("task_id", pa.string()),
        ("boundary", pa.int64()),  # 1..B
        ("event_index", pa.int64()),  # event of the nominal trajectory the boundary follows
        ("step", pa.int64()),
        ("nominal_t_s", pa.float64()),  # nominal elapsed seconds at the boundary
        ("creation_s", pa.float64()),
        ("size_bytes", pa.int64()),
        ("restore_latency_s", pa.float64()),
    ]
)

RECOVERY_SCHEMA = pa.schema(
    [
        ("task_id", pa.string()),
        ("restore_point", pa.int64()),  # 0 = pristine, b >= 1 = checkpoint at boundary b
        ("failure", pa.int64()),  # 1..B: strikes during segment f
        ("repetition", pa.int64()),
        ("branch_id", pa.string()),
        ("pair_id", pa.string()),  # null for table-plan branches not part of a pair
        ("role", pa.string()),  # "cp" | "skip" | "table"
        ("cost_s", pa.float64()),  # J(r, f): recovery seconds to the stopping rule
        ("restore_latency_s", pa.float64()),
        ("tokens", pa.int64()),  # re-executed tokens, null when unknown
        ("tool_calls", pa.int64()),
        ("verified", pa.bool_()),
        ("capped", pa.bool_()),  # stopped by the per-branch cap
        ("seed", pa.int64()),
        ("state_digest", pa.string()),
        ("obs_digest", pa.string()),
        ("quarantined", pa.bool_()),
        ("quarantine_reason", pa.string()),
    ]
)

LABEL_SCHEMA = pa.schema(
    [
        ("task_id", pa.string()),
        ("repo", pa.string()),
        ("cell_id", pa.string()),
        ("candidate", pa.int64()),
        ("fallback", pa.int64()),
        ("failure", pa.int64()),
        ("repetition", pa.int64()),
        ("stratum", pa.string()),  # "first" (fallback == 0) | "additional"
        ("branch_order", pa.string()),  # "cp_first" | "skip_first"
        ("j_cp", pa.float64()),
        ("j_skip", pa.float64()),
        ("advantage", pa.float64()),
        ("creation_s", pa.float64()),
        ("protected_work_s", pa.float64()),  # nominal work between fallback and candidate
        ("verified", pa.bool_()),  # the task's nominal run was verified
        ("verified_cp", pa.bool_()),
        ("verified_skip", pa.bool_()),
        ("tokens_cp", pa.int64()),
        ("tokens_skip", pa.int64()),
        ("tool_calls_cp", pa.int64()),
        ("tool_calls_skip", pa.int64()),
        ("pair_seed", pa.int64()),
        ("digest_cp", pa.string()),
        ("digest_skip", pa.string()),
        ("quarantined", pa.bool_()),
        ("quarantine_reason", pa.string()),
    ]
)

SCHEMAS: dict[str, pa.Schema] = {
    "tasks": TASK_SCHEMA,
    "checkpoints": CHECKPOINT_SCHEMA,
    "recovery": RECOVERY_SCHEMA,
    "labels": LABEL_SCHEMA,
}
#: each table's columns, in schema order (what a producer of rows fills in)
TASK_COLUMNS: tuple[str, ...] = tuple(TASK_SCHEMA.names)
CHECKPOINT_COLUMNS: tuple[str, ...] = tuple(CHECKPOINT_SCHEMA.names)
RECOVERY_COLUMNS: tuple[str, ...] = tuple(RECOVERY_SCHEMA.names)
LABEL_COLUMNS: tuple[str, ...] = tuple(LABEL_SCHEMA.names)


class LabelSetError(ValueError):
    """A label-set table does not match its schema; the message names file and column."""


def _nullable(t: pa.DataType) -> Any:
    if pa.types.is_int64(t):
        return pd.Int64Dtype()
    if pa.types.is_boolean(t):
        return pd.BooleanDtype()
    return None


def conform(df: pd.DataFrame, name: str, *, where: str = "") -> pd.DataFrame:
    """Check ``df`` against the named schema and return it with canonical column order/types.

    Raises :class:`LabelSetError` naming the table and column on a missing column, an
    extra column, or a value that cannot be represented in the column's type.
    """
    schema = SCHEMAS[name]
    label = where or name
    missing = [c for c in schema.names if c not in df.columns]
    if missing:
        raise LabelSetError(f"{label}: missing columns {missing}")
    extra = [c for c in df.columns if c not in schema.names]
    if extra:
        raise LabelSetError(f"{label}: unexpected columns {extra}")
    arrays = []
    for f in schema:
        col = df[f.name]
        try:
            arrays.append(pa.array(col.astype(object).where(col.notna(), None), type=f.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
            raise LabelSetError(f"{label}: column {f.name!r} does not fit {f.type}: {exc}") from exc
    table = pa.Table.from_arrays(arrays, schema=schema)
    return table.to_pandas(types_mapper=_nullable)


def write_table(df: pd.DataFrame, name: str, path: str | Path) -> None:
    """Schema-check and write atomically (temp file then rename)."""
    path = Path(path)
    out = conform(df, name, where=str(path))
    table = pa.Table.from_pandas(out, schema=SCHEMAS[name], preserve_index=False)
    table = table.replace_schema_metadata(
        {"ripplecp.table": name, "ripplecp.version": LABEL_SET_VERSION}
    )
    write_atomic(path, lambda f: pq.write_table(table, f))


def read_table(path: str | Path, name: str) -> pd.DataFrame:
    """Read a table and check it against its schema, naming the file on any mismatch."""
    path = Path(path)
    if not path.exists():
        raise LabelSetError(f"{path}: missing ({name} table)")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise LabelSetError(f"{path}: not a readable Parquet table ({name}): {_first_line(exc)}") from exc
    meta = table.schema.metadata or {}
    got = meta.get(b"ripplecp.table")
    if got is not None and got.decode() != name:
        raise LabelSetError(f"{path}: holds a {got.decode()!r} table, expected {name!r}")
    return conform(table.to_pandas(types_mapper=_nullable), name, where=str(path))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def empty(name: str) -> pd.DataFrame:
    """An empty frame with the named schema's columns and types."""
    return SCHEMAS[name].empty_table().to_pandas(types_mapper=_nullable)


@dataclass
class RecoveryTable:
    """One task's measured recovery costs, checkpoint costs and nominal timing.

    ``cost(r, f)`` is the mean over non-quarantined repetitions of J(r, f);
    ``restore_latency(r, f)`` the mean restore latency those branches measured.
    ``placement_cost`` prices a placement at one failure with the one price the evaluation
    and the optimum use (:func:`labelsets.definitions.failure_cost`): the creation time of the
    checkpoints taken before the failure + the restore latency of the restore point used
    (the last of them, or the pristine start) + the measured recovery J from it. Labels
    keep the paper's definition instead (``advantage``: J_skip - J_cp, J_cp charged the
    candidate's creation; restore latency recorded apart).
    """

    task_id: str
    recovery: pd.DataFrame
    checkpoints: pd.DataFrame

    def __post_init__(self) -> None:
        ok = self.recovery[~self.recovery["quarantined"].fillna(False).astype(bool)]
        grouped = ok.groupby(["restore_point", "failure"])
        self._cost = {k: float(v) for k, v in grouped["cost_s"].mean().items()}
        self._n = {k: int(v) for k, v in grouped["cost_s"].size().items()}
        rl = grouped["restore_latency_s"].mean()
        self._restore = {k: float(v) for k, v in rl.items() if pd.notna(v)}
        cp = self.checkpoints.set_index("boundary")
        self._cp_restore = {int(b): float(v) for b, v in cp["restore_latency_s"].items()
                            if pd.notna(v)}
        self._creation = {int(b): float(v) for b, v in cp["creation_s"].items()}
        self._size = {int(b): int(v) for b, v in cp["size_bytes"].items()}
        self._t = {int(b): float(v) for b, v in cp["nominal_t_s"].items()}
        self.n_boundaries = len(cp)

    @property
    def failures(self) -> list[int]:
        return sorted({f for _, f in self._cost})

    def has(self, r: int, f: int) -> bool:
        return (r, f) in self._cost

    def cost(self, r: int, f: int) -> float:
        """Mean measured J(r, f); KeyError naming the cell when it was never executed."""
        if r >= f:
            raise ValueError(f"{self.task_id}: restore point {r} cannot serve failure {f}")
        try:
            return self._cost[(r, f)]
        except KeyError:
            raise KeyError(f"{self.task_id}: J(r={r}, f={f}) was not measured") from None

    def repetitions(self, r: int, f: int) -> int:
        return self._n.get((r, f), 0)

    def creation_s(self, b: int) -> float:
        return self._creation[b]

    def size_bytes(self, b: int) -> int:
        return self._size[b]

    def nominal_t(self, b: int) -> float:
        """Nominal elapsed seconds at boundary b (0 at the pristine start)."""
        return 0.0 if b == 0 else self._t[b]

    def advantage(self, t: int, c_minus: int, f: int) -> float:
        """Counterfactual checkpoint advantage from mean costs: J(c-, f) - J(t, f) - C(t)."""
        if not c_minus < t < f:
            raise ValueError(f"{self.task_id}: need c- < t < f, got {c_minus}, {t}, {f}")
        return advantage(self.cost(c_minus, f), charged_cp(self.cost(t, f), self.creation_s(t)))

    def restore_latency(self, r: int, f: int) -> float:
        """Mean restore latency of restore point r measured by the branches of cell (r, f);
        when none recorded one, the checkpoint's own measurement (0 for the pristine start)."""
        if (r, f) in self._restore:
            return self._restore[(r, f)]
        return self._cp_restore.get(r, 0.0) if r > 0 else 0.0

    def placement_cost(self, checkpoints: Iterable[int], f: int) -> float:
        """Price of a placement at failure f (:func:`labelsets.definitions.failure_cost`): creation
        of its checkpoints before f + restore latency of the last one + J(last, f)."""
        before = [b for b in checkpoints if b < f]
        last = max(before, default=0)
        return failure_cost(sum(self.creation_s(b) for b in before),
                            self.restore_latency(last, f), self.cost(last, f))

    def is_full(self) -> bool:
        """True when every (r, f) with r < f is measured: any placement can be priced."""
        return all((r, f) in self._cost for f in self.failures for r in range(f))


@dataclass
class LabelSet:
    """The tables one study produced; see the module docstring for their meaning."""

    tasks: pd.DataFrame
    checkpoints: pd.DataFrame
    recovery: pd.DataFrame
    labels: pd.DataFrame
    trajectories: dict[str, Trajectory]
    provenance: dict[str, Any]

    def __post_init__(self) -> None:
        self.tasks = conform(self.tasks, "tasks")
        self.checkpoints = conform(self.checkpoints, "checkpoints")
        self.recovery = conform(self.recovery, "recovery")
        self.labels = conform(self.labels, "labels")
        known = set(self.tasks["task_id"])
        for name in ("checkpoints", "recovery", "labels"):
            stray = set(getattr(self, name)["task_id"]) - known
            if stray:
                raise LabelSetError(f"{name}: task ids not in tasks table: {sorted(stray)[:5]}")
        missing = known - set(self.trajectories)
        if missing:
            raise LabelSetError(f"trajectories: no nominal trajectory for {sorted(missing)[:5]}")
        stray = set(self.trajectories) - known
        if stray:
            raise LabelSetError(f"trajectories: task ids not in tasks table: {sorted(stray)[:5]}")
        _check_rows(self.tasks, self.checkpoints, self.recovery)

    @property
    def task_ids(self) -> list[str]:
        return list(self.tasks["task_id"])

    @property
    def repos(self) -> list[str]:
        return sorted(self.tasks["repo"].unique())

    def repo_of(self, task_id: str) -> str:
        return str(self.tasks.set_index("task_id").at[task_id, "repo"])

    def recovery_table(self, task_id: str) -> RecoveryTable:
        return RecoveryTable(
            task_id,
            self.recovery[self.recovery["task_id"] == task_id],
            self.checkpoints[self.checkpoints["task_id"] == task_id],
        )

    def subset(self, task_ids: Iterable[str]) -> LabelSet:
        """The label set restricted to ``task_ids`` (used by every split)."""
        keep = set(task_ids)

        def sel(df: pd.DataFrame) -> pd.DataFrame:
            return df[df["task_id"].isin(keep)].reset_index(drop=True)

        return LabelSet(
            sel(self.tasks), sel(self.checkpoints), sel(self.recovery), sel(self.labels),
            {k: v for k, v in self.trajectories.items() if k in keep},
            dict(self.provenance),
        )

    def manifest_fields(self, version: str = LABEL_SET_VERSION) -> dict[str, Any]:
        """The manifest's fields besides ``hash`` (:data:`MANIFEST_FIELDS`), as saved."""
        return {"version": version, "n_tasks": len(self.tasks), "n_branches": len(self.recovery),
                "n_pairs": len(self.labels), "provenance": self.provenance}

    def content_hash(self, version: str = LABEL_SET_VERSION) -> str:
        """SHA-256 a label set is sealed with (the manifest's ``hash``; runs are tagged with it).

        Version ``"2"``: the manifest fields (canonical JSON), every column of every table and
        the nominal trajectories in task order, so no edit to what a study reads keeps the
        hash. Version ``"1"``: the four tables without branch ids, the definition version-1
        sets were sealed with, kept to verify them.
        """
        if version == "1":
            return self._hash_v1()
        if version != LABEL_SET_VERSION:
            raise ValueError(f"no hash definition for label-set version {version!r}")
        h = hashlib.sha256(b"ripplecp.label_set\0")
        h.update(json.dumps(self.manifest_fields(version), sort_keys=True, separators=(",", ":"),
                            default=str).encode())
        frames = [(name, getattr(self, name)) for name in SCHEMAS]
        frames.append(("trajectories", trajectory_frame([self.trajectories[t] for t in self.task_ids])))
        for name, df in frames:
            h.update(f"\0{name}\0{len(df)}\0".encode())
            _feed_columns(h, df)
        return h.hexdigest()

    def _hash_v1(self) -> str:
        h = hashlib.sha256()
        for name in ("tasks", "checkpoints", "recovery", "labels"):
            df = getattr(self, name)
            cols = [c for c in SCHEMAS[name].names if c not in ("branch_id",)]
            h.update(name.encode())
            h.update(pd.util.hash_pandas_object(df[cols], index=False).values.tobytes())
        return h.hexdigest()

    def save(self, path: str | Path) -> Path:
        """Write every table atomically; ``label_set.json`` is written last, as the commit."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        for name in ("tasks", "checkpoints", "recovery", "labels"):
            write_table(getattr(self, name), name, path / f"{name}.parquet")
        write_trajectories([self.trajectories[t] for t in self.task_ids], path / "trajectories.parquet")
        manifest = {**self.manifest_fields(), "hash": self.content_hash()}
        write_text_atomic(path / "label_set.json",
                          json.dumps(manifest, indent=2, sort_keys=True, default=str))
        return path

    @classmethod
    def load(cls, path: str | Path) -> LabelSet:
        """The one verified loader: read, schema-check and verify a label-set directory.

        The manifest must be a JSON object with exactly :data:`MANIFEST_FIELDS` and
        ``hash``, a readable version, counts that match the tables and a hash that matches
        the content under that version's definition. Every refusal is a
        :class:`LabelSetError` naming the file and field. A version-1 set loads with a
        warning (its hash leaves the trajectories and provenance unsealed).
        """
        path = Path(path)
        manifest_path = path / "label_set.json"
        if not manifest_path.is_file():
            raise LabelSetError(f"{path}: not a label set (no label_set.json): its manifest is missing")
        manifest = _read_manifest(manifest_path)
        version = manifest["version"]
        tables = {n: read_table(path / f"{n}.parquet", n) for n in SCHEMAS}
        trajs = {t.task_id: t for t in _read_trajectories(path / "trajectories.parquet")}
        try:
            ls = cls(tables["tasks"], tables["checkpoints"], tables["recovery"],
                     tables["labels"], trajs, manifest["provenance"])
        except LabelSetError as exc:
            raise LabelSetError(f"{path}: {exc}") from exc
        for name, held in ls.manifest_fields(version).items():
            if name.startswith("n_") and manifest[name] != held:
                raise LabelSetError(f"{manifest_path}: field {name!r} says {manifest[name]}, "
                                    f"the tables hold {held}")
        if manifest["hash"] != ls.content_hash(version):
            raise LabelSetError(
                f"{manifest_path}: field 'hash' does not match the content (a table, the "
                f"trajectories or a manifest field changed after the set was sealed)")
        if version != LABEL_SET_VERSION:
            warnings.warn(
                f"{path}: label-set version {version}: its hash does not cover "
                f"trajectories.parquet or the provenance; save it again to seal them as "
                f"version {LABEL_SET_VERSION}", UserWarning, stacklevel=2)
        return ls


def _feed_columns(h: Any, df: pd.DataFrame) -> None:
    """Every column's name, nulls and values as canonical bytes (little-endian int64 /
    float64, uint8 booleans, length-prefixed UTF-8 text, lists as JSON text), so a hash does
    not depend on how a pandas version hashes or stores a column."""
    for col in df.columns:
        s = df[col]
        null = s.isna().to_numpy(dtype=bool)
        h.update(f"\0{col}\0".encode())
        h.update(np.packbits(null).tobytes())
        if pd.api.types.is_bool_dtype(s.dtype):
            h.update(b"b" + s.fillna(False).to_numpy(dtype=np.uint8).tobytes())
        elif pd.api.types.is_integer_dtype(s.dtype):
            h.update(b"i" + s.fillna(0).to_numpy(dtype="<i8").tobytes())
        elif pd.api.types.is_float_dtype(s.dtype):
            v = s.to_numpy(dtype="<f8", na_value=np.nan)
            h.update(b"f" + np.where(np.isnan(v), np.nan, v).astype("<f8").tobytes())
        else:
            h.update(b"s")
            for v, missing in zip(s.tolist(), null, strict=True):
                if missing:
                    h.update(b"\x00")
                    continue
                text = v if isinstance(v, str) else (
                    json.dumps([str(x) for x in v]) if isinstance(v, list | tuple | np.ndarray)
                    else str(v))
                b = text.encode()
                h.update(b"\x01" + len(b).to_bytes(8, "little") + b)


def _read_manifest(path: Path) -> dict[str, Any]:
    """``label_set.json`` as a dict whose fields have the right types; LabelSetError naming
    the file and field otherwise (the hash is checked by :meth:`LabelSet.load`)."""
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise LabelSetError(f"{path}: unreadable: {_first_line(exc)}") from exc
    except json.JSONDecodeError as exc:
        raise LabelSetError(f"{path}: invalid JSON: {exc}") from exc
    if not isinstance(manifest, dict):
        raise LabelSetError(f"{path}: must be a JSON object, got {type(manifest).__name__}")
    for name in ("version", "hash", *MANIFEST_FIELDS[1:]):
        if name not in manifest:
            raise LabelSetError(f"{path}: field {name!r} is missing"
                                + (": an unsealed label set is refused" if name == "hash" else ""))
    unknown = sorted(set(manifest) - {"hash", *MANIFEST_FIELDS})
    if unknown:
        raise LabelSetError(f"{path}: field {unknown[0]!r} is not a label-set field "
                            f"(expected {', '.join(('hash', *MANIFEST_FIELDS))})")
    version = manifest["version"]
    if not isinstance(version, str) or version not in READABLE_VERSIONS:
        raise LabelSetError(f"{path}: field 'version': {version!r} is not a label-set version "
                            f"this code reads ({', '.join(map(repr, READABLE_VERSIONS))})")
    digest = manifest["hash"]
    if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
        what = "blank" if isinstance(digest, str) and not digest.strip() else f"{digest!r}"
        raise LabelSetError(f"{path}: field 'hash': {what} is not a SHA-256 digest: an "
                            "unsealed label set is refused")
    for name in ("n_tasks", "n_branches", "n_pairs"):
        v = manifest[name]
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise LabelSetError(f"{path}: field {name!r}: {v!r} is not a count")
    if not isinstance(manifest["provenance"], dict):
        raise LabelSetError(f"{path}: field 'provenance' must be a JSON object, "
                            f"got {type(manifest['provenance']).__name__}")
    return manifest


def _read_trajectories(path: Path) -> list[Trajectory]:
    """The nominal trajectories; LabelSetError naming the file when unreadable."""
    if not path.exists():
        raise LabelSetError(f"{path}: missing (trajectories table)")
    try:
        return read_trajectories(path)
    except (pa.ArrowException, OSError) as exc:
        raise LabelSetError(f"{path}: not a readable Parquet table (trajectories): "
                            f"{_first_line(exc)}") from exc
    except ValueError as exc:  # the schema's own checks, which name the file
        msg = _first_line(exc)
        raise LabelSetError(msg if str(path) in msg else f"{path}: {msg}") from exc


def _check_rows(tasks: pd.DataFrame, checkpoints: pd.DataFrame, recovery: pd.DataFrame) -> None:
    """Refuse rows no study produces (what a hash recomputed after an edit cannot hide):
    duplicate task ids, checkpoints or branch ids; a boundary outside 1..B; negative or
    non-finite creation costs; a restore point at or after its failure; a failure past
    B + 1; a negative or non-finite recovery cost on a branch that is not quarantined."""
    def bad(table: str, column: str, mask: Any, what: str) -> None:
        mask = np.asarray(mask, dtype=bool)
        if mask.any():
            df = {"tasks": tasks, "checkpoints": checkpoints, "recovery": recovery}[table]
            row = int(np.flatnonzero(mask)[0])
            raise LabelSetError(f"{table}: column {column!r}: {what} (row {row}, task "
                                f"{df['task_id'].iloc[row]!r}, {int(mask.sum())} row(s) in all)")

    bad("tasks", "task_id", tasks["task_id"].duplicated(), "duplicate task id")
    n_b = tasks.set_index("task_id")["n_boundaries"]
    if len(checkpoints):
        b = checkpoints["boundary"].astype("float64").to_numpy()
        top = checkpoints["task_id"].map(n_b).astype("float64").to_numpy()
        bad("checkpoints", "boundary", checkpoints.duplicated(["task_id", "boundary"]),
            "duplicate boundary of a task")
        bad("checkpoints", "boundary", ~((b >= 1) & (b <= top)), "outside 1..n_boundaries")
        c = checkpoints["creation_s"].astype("float64").to_numpy()
        bad("checkpoints", "creation_s", ~np.isfinite(c) | (c < 0), "negative or not finite")
    if len(recovery):
        r = recovery["restore_point"].astype("float64").to_numpy()
        f = recovery["failure"].astype("float64").to_numpy()
        top = recovery["task_id"].map(n_b).astype("float64").to_numpy()
        bad("recovery", "restore_point", ~((r >= 0) & (r < f)), "not in 0..failure-1")
        bad("recovery", "failure", ~((f >= 1) & (f <= top + 1)), "outside 1..n_boundaries+1")
        ids = recovery["branch_id"]
        bad("recovery", "branch_id", ids.notna() & ids.duplicated(), "duplicate branch id")
        used = ~recovery["quarantined"].fillna(False).astype(bool).to_numpy()
        cost = recovery["cost_s"].astype("float64").to_numpy()
        bad("recovery", "cost_s", used & (~np.isfinite(cost) | (cost < 0)),
            "negative or not finite on a branch that is not quarantined")


def labels_from_recovery(
    tasks: pd.DataFrame, checkpoints: pd.DataFrame, recovery: pd.DataFrame
) -> pd.DataFrame:
    """Build pair labels from branches whose ``pair_id`` joins a CP and a SKIP branch.

    The pair's cell is (candidate t, fallback c-, failure f): the CP branch restores t, the
    SKIP branch restores c-. Branch order is read from ``branch_id`` order within the pair
    (the harness writes ``<pair_id>/0`` and ``<pair_id>/1`` in execution order).
    """
    rows = []
    paired = recovery[recovery["pair_id"].notna() & recovery["role"].isin(["cp", "skip"])]
    t_by_task = tasks.set_index("task_id")
    cp_by = checkpoints.set_index(["task_id", "boundary"])
    for pair_id, g in paired.groupby("pair_id", sort=True):
        roles = dict(zip(g["role"], g.to_dict("records"), strict=False))
        if set(roles) != {"cp", "skip"} or len(g) != 2:
            raise LabelSetError(f"recovery: pair {pair_id!r} lacks exactly one cp and one skip branch")
        cp, sk = roles["cp"], roles["skip"]
        task, t, c, f = cp["task_id"], int(cp["restore_point"]), int(sk["restore_point"]), int(cp["failure"])
        creation = float(cp_by.at[(task, t), "creation_s"])
        t_nom = float(cp_by.at[(task, t), "nominal_t_s"])
        c_nom = 0.0 if c == 0 else float(cp_by.at[(task, c), "nominal_t_s"])
        first = sorted(g["branch_id"])[0]
        order = branch_order(first == cp["branch_id"])
        j_cp = charged_cp(float(cp["cost_s"]), creation)
        j_skip = float(sk["cost_s"])
        q = bool(cp["quarantined"]) or bool(sk["quarantined"])
        reason = "; ".join(str(x["quarantine_reason"]) for x in (cp, sk) if x["quarantined"]) or None
        rows.append(
            dict(
                task_id=task, repo=str(t_by_task.at[task, "repo"]),
                cell_id=cell_id(task, t, c, f), candidate=t, fallback=c, failure=f,
                repetition=int(cp["repetition"]), stratum=stratum(c),
                branch_order=order, j_cp=j_cp, j_skip=j_skip, advantage=advantage(j_skip, j_cp),
                creation_s=creation, protected_work_s=t_nom - c_nom,
                verified=bool(t_by_task.at[task, "verified"]),
                verified_cp=bool(cp["verified"]), verified_skip=bool(sk["verified"]),
                tokens_cp=cp["tokens"], tokens_skip=sk["tokens"],
                tool_calls_cp=cp["tool_calls"], tool_calls_skip=sk["tool_calls"],
                pair_seed=int(cp["seed"]), digest_cp=cp["state_digest"],
                digest_skip=sk["state_digest"], quarantined=q, quarantine_reason=reason,
            )
        )
    if not rows:
        return empty("labels")
    out = pd.DataFrame(rows)
    for col in ("tokens_cp", "tokens_skip", "tool_calls_cp", "tool_calls_skip"):
        out[col] = out[col].map(lambda v: None if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA else int(v))
    return conform(out, "labels")


def labels_from_table(
    tasks: pd.DataFrame, checkpoints: pd.DataFrame, recovery: pd.DataFrame,
    cells: Callable[[int], Iterable[tuple[int, int, int]]] = pilot_cells,
) -> pd.DataFrame:
    """Pair labels derived from measured recovery tables, for sets with branches but no pairs.

    For each task and each cell (t, c-, f) of ``cells(n_boundaries)`` (default: the pilot's
    frozen cells, :func:`labelsets.definitions.pilot_cells`), one label per repetition k measured for
    both table cells (t, f) and (c-, f): ``j_cp = J_k(t, f) + C(t)``, ``j_skip = J_k(c-, f)``,
    advantage and stratum as :mod:`labelsets.definitions` defines them. As the simulator's
    table-derived labels: ``pair_seed`` is the CP branch's seed and the branch order is
    ``skip_first`` (:func:`oracle.harness.plan.full_table_plan` submits (c-, f) before (t, f)); the
    verified flags, tokens, tool calls and digests are the two branches'; a label is
    quarantined when either branch is.
    """
    table = recovery[recovery["role"] == "table"]
    want = [dict(task_id=tid, candidate=t, fallback=c, failure=f)
            for tid, b in zip(tasks["task_id"], tasks["n_boundaries"], strict=True)
            for t, c, f in cells(int(b))]
    if not want or not len(table):
        return empty("labels")
    keys = ["task_id", "restore_point", "failure", "repetition"]
    cols = [*keys, "cost_s", "verified", "tokens", "tool_calls", "seed", "state_digest",
            "quarantined", "quarantine_reason"]
    br = table[cols]
    cp = pd.DataFrame(want).merge(br.rename(columns={"restore_point": "candidate"}),
                                  on=["task_id", "candidate", "failure"])
    pairs = cp.merge(br.rename(columns={"restore_point": "fallback"}),
                     on=["task_id", "fallback", "failure", "repetition"], suffixes=("_cp", "_skip"))
    if not len(pairs):
        return empty("labels")
    ck = checkpoints.set_index(["task_id", "boundary"])
    at = pd.MultiIndex.from_arrays([pairs["task_id"], pairs["candidate"]])
    creation = ck["creation_s"].reindex(at).to_numpy(float)
    t_nom = ck["nominal_t_s"].reindex(at).to_numpy(float)
    back = pd.MultiIndex.from_arrays([pairs["task_id"], pairs["fallback"]])
    c_nom = np.where(pairs["fallback"] == 0, 0.0, ck["nominal_t_s"].reindex(back).to_numpy(float))
    by_task = tasks.set_index("task_id")
    j_cp = charged_cp(pairs["cost_s_cp"].to_numpy(float), creation)
    j_skip = pairs["cost_s_skip"].to_numpy(float)
    q_cp = pairs["quarantined_cp"].fillna(False).astype(bool)
    q_skip = pairs["quarantined_skip"].fillna(False).astype(bool)
    reasons = [
        "; ".join(str(r) for r, q in ((rc, qc), (rs, qs)) if q) or None
        for rc, qc, rs, qs in zip(pairs["quarantine_reason_cp"], q_cp, pairs["quarantine_reason_skip"],
                                  q_skip, strict=True)
    ]
    out = pd.DataFrame(dict(
        task_id=pairs["task_id"], repo=pairs["task_id"].map(by_task["repo"]),
        cell_id=[cell_id(*x) for x in zip(pairs["task_id"], pairs["candidate"], pairs["fallback"],
                                          pairs["failure"], strict=True)],
        candidate=pairs["candidate"], fallback=pairs["fallback"], failure=pairs["failure"],
        repetition=pairs["repetition"], stratum=stratum(pairs["fallback"].to_numpy()),
        branch_order=branch_order(np.zeros(len(pairs), dtype=bool)), j_cp=j_cp, j_skip=j_skip,
        advantage=advantage(j_skip, j_cp), creation_s=creation, protected_work_s=t_nom - c_nom,
        verified=pairs["task_id"].map(by_task["verified"]),
        verified_cp=pairs["verified_cp"], verified_skip=pairs["verified_skip"],
        tokens_cp=pairs["tokens_cp"], tokens_skip=pairs["tokens_skip"],
        tool_calls_cp=pairs["tool_calls_cp"], tool_calls_skip=pairs["tool_calls_skip"],
        pair_seed=pairs["seed_cp"], digest_cp=pairs["state_digest_cp"],
        digest_skip=pairs["state_digest_skip"], quarantined=(q_cp | q_skip).to_numpy(),
        quarantine_reason=reasons,
    ))
    return conform(out.sort_values(["task_id", "candidate", "fallback", "failure", "repetition"],
                                   kind="stable").reset_index(drop=True), "labels")


def advantage_matrix(rt: RecoveryTable) -> np.ndarray:
    """A[t, c, f] = J(c, f) - J(t, f) - C(t) for every measured c < t < f; NaN elsewhere."""
    b = rt.n_boundaries
    out = np.full((b + 1, b + 1, b + 2), np.nan)
    for f in rt.failures:
        for t in range(1, f):
            for c in range(t):
                if rt.has(t, f) and rt.has(c, f):
                    out[t, c, f] = rt.advantage(t, c, f)
    return out
