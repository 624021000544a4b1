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
    with pytest.raises(LookupError, match="no shipped label set 'nope'; shipped: llm-free"):
        label_set_path("nope")


def test_the_shipped_set_loads_verified_and_meets_its_datasheet() -> None:
    path = label_set_path()
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
