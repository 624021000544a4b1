"""The data shipped with the toolkit: the executed label set, found by name and verified."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

import pytest

from labelsets.tables import LabelSet
from ripplecp_policy.data import (
    DEFAULT_LABEL_SET,
    label_set_path,
    resolve_labels,
    shipped_label_sets,
)

REPO = Path(__file__).resolve().parents[2]


def test_names_and_paths_resolve(tmp_path: Path) -> None:
    assert DEFAULT_LABEL_SET in shipped_label_sets()
    assert resolve_labels("shipped") == label_set_path() == label_set_path(DEFAULT_LABEL_SET)
    assert resolve_labels(DEFAULT_LABEL_SET) == label_set_path()
    assert resolve_labels(str(tmp_path)) == tmp_path and resolve_labels("runs/x") == Path("runs/x")
    with pytest.raises(LookupError, match="no shipped label set 'nope'; shipped: llm-free, llm-free-sparse"):
        label_set_path("nope")


def test_the_full_design_set_loads_verified_and_meets_its_datasheet() -> None:
    """``llm-free``: the full-design ground truth the design check sub-samples."""
    path = label_set_path("llm-free")
    ls = LabelSet.load(path)  # checks every table's schema and the content hash
    tasks = ls.tasks
    assert len(tasks) >= 100 and tasks["repo"].nunique() >= 16
    per_family = tasks.groupby("family")["repo"].nunique()
    assert set(per_family.index) == {"repair", "depres", "cbuild", "migrate"}
    assert (per_family >= 4).all()
    for t in ls.task_ids:
        rt = ls.recovery_table(t)
        assert rt.is_full(), t
        assert all(rt.repetitions(r, f) >= 2 for f in rt.failures for r in range(f)), t
    assert ls.provenance["agent"] == "llm-free" and ls.provenance["design"] == "full"
    sheet = (path / "DATASHEET.md").read_text()
    for must in ("python -m experiments.collect_labels --agent llm-free", "Python", "pip", "gcc",
                 "make", "does not represent"):
        assert must in sheet


def test_the_default_set_is_the_sparse_recollection_at_three_times_the_tasks() -> None:
    """Issue 29 item 5: ``shipped`` is the sparse re-collection — >= 3x llm-free's tasks, >= 8
    repositories per family, the bisect family beside the four — hash-verified, with a
    datasheet that states per family the limit's gain and the verdicts."""
    path = label_set_path()
    assert path == label_set_path("llm-free-sparse") == resolve_labels("shipped")
    ls = LabelSet.load(path)
    full = LabelSet.load(label_set_path("llm-free"))
    assert len(ls.tasks) >= 3 * len(full.tasks)
    per_family = ls.tasks.groupby("family")["repo"].nunique()
    assert set(per_family.index) == {"repair", "depres", "cbuild", "migrate", "bisect"}
    assert (per_family >= 8).all()
    assert ls.provenance["design"] == "sparse" and ls.provenance["sparse"]["repetitions"] == 1
    assert len(ls.recovery) == ls.provenance["sparse"]["n_cells"]
    sheet = (path / "DATASHEET.md").read_text()
    assert ls.content_hash() in sheet
    for must in ("python benchmarks/bench_collect.py --families repair depres cbuild migrate bisect",
                 "the limit's gain over first-boundary", "powered", "Python", "gcc",
                 "does not represent"):
        assert must in sheet
    for fam in per_family.index:
        assert f"| {fam} |" in sheet


def test_the_package_data_globs_ship_every_file_of_every_set() -> None:
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())
    globs = cfg["tool"]["setuptools"]["package-data"]["ripplecp_policy.data"]
    root = REPO / "ripplecp_policy" / "data"
    for name in shipped_label_sets():
        files = [p for p in (root / "labelsets" / name).iterdir() if p.is_file()]
        assert files
        for p in files:
            rel = p.relative_to(root).as_posix()
            assert any(fnmatch.fnmatch(rel, g) for g in globs), f"{rel} would not be installed"
