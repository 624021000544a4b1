"""The one verified loader: a label set loads only when its hash covers what it holds.

Each case is a way a saved set was found to be accepted, or refused with a traceback, before
the loader sealed everything: a missing or blank hash, edited trajectories or manifest
fields under the same hash, unknown versions, garbage Parquet, a manifest that is not a JSON
object. Every refusal is a :class:`LabelSetError` (a ValueError) naming the file and field.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from features.schema import read_parquet as read_trajectories
from features.schema import write_parquet as write_trajectories
from labelsets.tables import LABEL_SET_VERSION, LabelSet, LabelSetError, read_table, write_table
from oracle.simulator import simulate_label_set

#: the hash today's hand-made set had under version 1 (tables only, branch ids left out),
#: computed by the code that wrote version-1 sets: a version-1 set on disk still verifies
V1_HASH = "236ba9afc524e5f694dfd546d7f7e3719609ff7c65446bbeb89a38156457c41f"


@pytest.fixture()
def saved(tmp_path: Path) -> Path:
    """A label set the project writes (the simulator's pilot design), saved."""
    ls = simulate_label_set("dependency-resolution", n_repos=2, tasks_per_repo=1, design="pilot",
                            seed=1)
    return ls.save(tmp_path / "labelset")


def _manifest(path: Path) -> dict:
    return json.loads((path / "label_set.json").read_text())


def _write_manifest(path: Path, manifest: object) -> None:
    (path / "label_set.json").write_text(json.dumps(manifest))


def test_version_is_bumped_and_the_saved_set_loads(saved: Path) -> None:
    m = _manifest(saved)
    assert m["version"] == LABEL_SET_VERSION == "2"
    back = LabelSet.load(saved)
    assert back.content_hash() == m["hash"]


@pytest.mark.parametrize("hash_value", [None, "", "   ", 123, "abc"],
                         ids=["removed", "blank", "spaces", "number", "short"])
def test_a_set_without_a_proper_hash_is_refused(saved: Path, hash_value: object) -> None:
    m = _manifest(saved)
    if hash_value is None:
        del m["hash"]
    else:
        m["hash"] = hash_value
    _write_manifest(saved, m)
    with pytest.raises(LabelSetError, match=r"label_set.json: field 'hash'"):
        LabelSet.load(saved)


@pytest.mark.parametrize("version", ["999", None, 2, "", "1.0"])
def test_unknown_versions_are_refused(saved: Path, version: object) -> None:
    m = _manifest(saved)
    if version is None:
        del m["version"]
    else:
        m["version"] = version
    _write_manifest(saved, m)
    with pytest.raises(LabelSetError, match=r"label_set.json: field 'version'"):
        LabelSet.load(saved)


def test_edited_trajectories_are_refused(saved: Path) -> None:
    """Editing an event's duration moved TotalFailureCost under the same hash."""
    trajs = read_trajectories(saved / "trajectories.parquet")
    ev = next(e for e in trajs[0].events if e.duration is not None)
    ev.duration = ev.duration * 3 + 1.0
    write_trajectories(trajs, saved / "trajectories.parquet")
    with pytest.raises(LabelSetError, match="hash"):
        LabelSet.load(saved)


def test_edited_advantages_are_refused(saved: Path) -> None:
    labels = read_table(saved / "labels.parquet", "labels")
    labels["advantage"] = labels["advantage"] * 10
    write_table(labels, "labels", saved / "labels.parquet")
    # refused for the impossible rows (advantage != J_skip - J_cp), before the hash is read
    with pytest.raises(LabelSetError, match="labels.parquet|'advantage'"):
        LabelSet.load(saved)
    labels["j_skip"] = labels["j_skip"] * 10
    labels["advantage"] = labels["j_skip"] - labels["j_cp"]
    write_table(labels, "labels", saved / "labels.parquet")
    with pytest.raises(LabelSetError, match="hash"):  # consistent rows: the hash refuses
        LabelSet.load(saved)


def test_edited_branch_ids_are_refused(saved: Path) -> None:
    rec = read_table(saved / "recovery.parquet", "recovery")
    rec.loc[0, "branch_id"] = "elsewhere"
    write_table(rec, "recovery", saved / "recovery.parquet")
    with pytest.raises(LabelSetError, match="hash"):
        LabelSet.load(saved)


@pytest.mark.parametrize("edit", [
    lambda m: m["provenance"].update(seed=99),
    lambda m: m.update(provenance={}),
    lambda m: m.update(n_tasks=m["n_tasks"] + 1),
    lambda m: m.update(n_pairs=0),
    lambda m: m.update(n_branches="many"),
    lambda m: m.update(note="added by hand"),
    lambda m: m.update(provenance=["not", "a", "mapping"]),
], ids=["provenance-value", "provenance-cleared", "n_tasks", "n_pairs", "n_branches-type",
        "unknown-field", "provenance-type"])
def test_edited_manifest_fields_are_refused(saved: Path, edit) -> None:
    m = _manifest(saved)
    edit(m)
    _write_manifest(saved, m)
    with pytest.raises(LabelSetError, match=r"label_set.json: field '(provenance|n_tasks|n_pairs|"
                                            r"n_branches|hash|note)'"):
        LabelSet.load(saved)


@pytest.mark.parametrize("table", ["tasks", "checkpoints", "recovery", "labels", "trajectories"])
@pytest.mark.parametrize("content", [b"garbage, not parquet", b""], ids=["garbage", "empty"])
def test_unreadable_tables_name_the_file(saved: Path, table: str, content: bytes) -> None:
    (saved / f"{table}.parquet").write_bytes(content)
    # the same words for every table, trajectories included (it said only Arrow's message)
    with pytest.raises(LabelSetError, match=rf"{table}\.parquet: not a readable Parquet table \({table}\)"):
        LabelSet.load(saved)


@pytest.mark.parametrize("table", ["tasks", "labels", "trajectories"])
def test_a_missing_table_names_the_file(saved: Path, table: str) -> None:
    (saved / f"{table}.parquet").unlink()
    with pytest.raises(LabelSetError, match=rf"{table}\.parquet"):
        LabelSet.load(saved)


def test_a_table_swapped_for_another_is_refused(saved: Path) -> None:
    (saved / "tasks.parquet").write_bytes((saved / "labels.parquet").read_bytes())
    with pytest.raises(LabelSetError, match=r"tasks\.parquet"):
        LabelSet.load(saved)


@pytest.mark.parametrize("text", ["[]", "[1, 2]", '"a string"', "3", "null", "{", "{\"version\": "],
                         ids=["empty-list", "list", "string", "number", "null", "truncated",
                              "half"])
def test_a_manifest_that_is_not_a_json_object_names_the_file(saved: Path, text: str) -> None:
    (saved / "label_set.json").write_text(text)
    with pytest.raises(LabelSetError, match=r"label_set\.json"):
        LabelSet.load(saved)


def test_a_manifest_that_is_not_text_names_the_file(saved: Path) -> None:
    (saved / "label_set.json").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(LabelSetError, match=r"label_set\.json"):
        LabelSet.load(saved)


def test_the_hash_covers_every_table_and_field(tiny_label_set) -> None:
    base = tiny_label_set()
    h = base.content_hash()
    variants = []
    for name in ("tasks", "checkpoints", "recovery", "labels"):
        ls = tiny_label_set()
        df = getattr(ls, name).copy()
        col = {"tasks": "nominal_s", "checkpoints": "creation_s", "recovery": "cost_s",
               "labels": "j_skip"}[name]
        df.loc[0, col] = float(df.loc[0, col]) + 1e-6
        setattr(ls, name, df)
        variants.append(ls)
    ls = tiny_label_set()
    ls.trajectories["a"].events[0].duration = 1.0
    variants.append(ls)
    ls = tiny_label_set()
    ls.trajectories["a"].events[1].paths_read.append("src/x.py")
    variants.append(ls)
    ls = tiny_label_set()
    ls.provenance["seed"] = 2
    variants.append(ls)
    hashes = [v.content_hash() for v in variants]
    assert h not in hashes and len(set(hashes)) == len(hashes)


def test_the_previous_version_loads_only_with_its_own_hash(tmp_path: Path, tiny_label_set) -> None:
    ls = tiny_label_set()
    assert ls.content_hash("1") == V1_HASH  # the definition version 1 sets were sealed with
    path = ls.save(tmp_path / "v1")
    m = _manifest(path)
    v2_hash = m["hash"]
    m.update(version="1", hash=V1_HASH)
    _write_manifest(path, m)
    with pytest.warns(UserWarning, match="version 1.*trajectories"):
        back = LabelSet.load(path)
    assert back.content_hash() == v2_hash  # re-saving seals it under the current version
    m.update(hash=v2_hash)  # a version-1 manifest with a hash that is not version 1's
    _write_manifest(path, m)
    with pytest.raises(LabelSetError, match="field 'hash'"):
        LabelSet.load(path)
    m.update(hash="", version="1")
    _write_manifest(path, m)
    with pytest.raises(LabelSetError, match="field 'hash'"):
        LabelSet.load(path)
    with pytest.raises(ValueError, match="version"):
        ls.content_hash("999")


def test_resaving_a_previous_version_set_seals_it(tmp_path: Path, tiny_label_set) -> None:
    ls = tiny_label_set()
    path = ls.save(tmp_path / "v1")
    m = _manifest(path)
    m.update(version="1", hash=ls.content_hash("1"))
    _write_manifest(path, m)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = LabelSet.load(path).save(tmp_path / "v2")
    assert _manifest(again)["version"] == LABEL_SET_VERSION
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning for the current version
        LabelSet.load(again)


@pytest.mark.parametrize("edit, field", [
    (lambda ls: ls.recovery.assign(restore_point=ls.recovery["failure"]), "restore_point"),
    (lambda ls: ls.recovery.assign(cost_s=np.where(np.arange(len(ls.recovery)) == 0, np.nan,
                                                   ls.recovery["cost_s"])), "cost_s"),
    (lambda ls: ls.recovery.assign(cost_s=-ls.recovery["cost_s"]), "cost_s"),
    (lambda ls: pd.concat([ls.recovery, ls.recovery.iloc[:1]], ignore_index=True), "branch_id"),
], ids=["restore-after-failure", "nan-cost", "negative-cost", "duplicate-branch"])
def test_impossible_recovery_rows_are_refused(edit, field: str, tiny_label_set) -> None:
    """What a hash recomputed after an edit cannot hide: rows no study can produce."""
    ls = tiny_label_set()
    rec = edit(ls)
    with pytest.raises(LabelSetError, match=f"recovery: column '{field}'"):
        LabelSet(ls.tasks, ls.checkpoints, rec, ls.labels, ls.trajectories, {})


@pytest.mark.parametrize("edit, field", [
    (lambda cp: pd.concat([cp, cp.iloc[:1]], ignore_index=True), "boundary"),
    (lambda cp: cp.assign(boundary=cp["boundary"] + 5), "boundary"),
    (lambda cp: cp.assign(creation_s=-1.0), "creation_s"),
], ids=["duplicate", "out-of-range", "negative-creation"])
def test_impossible_checkpoint_rows_are_refused(edit, field: str, tiny_label_set) -> None:
    ls = tiny_label_set()
    with pytest.raises(LabelSetError, match=f"checkpoints: column '{field}'"):
        LabelSet(ls.tasks, edit(ls.checkpoints), ls.recovery, ls.labels, ls.trajectories, {})


# ------------------------------------------------------------------ issue 32 item 3
def _reseal(path: Path) -> None:
    """What a forger does after editing a table: recompute the plain hash (with the
    project's own hashing code, on the tables as they are) and write it."""
    m = _manifest(path)
    ls = object.__new__(LabelSet)  # no checks: a forger's own copy of the hashing code
    for name in ("tasks", "checkpoints", "recovery", "labels"):
        setattr(ls, name, read_table(path / f"{name}.parquet", name))
    ls.trajectories = {t.task_id: t for t in read_trajectories(path / "trajectories.parquet")}
    ls.provenance = m["provenance"]
    m["hash"] = ls.content_hash()
    m.pop("hmac", None)
    _write_manifest(path, m)


@pytest.mark.parametrize("edit, field", [
    (lambda lb: lb.assign(j_cp=-1000.0, advantage=lb["j_skip"] + 1000.0), "j_cp"),
    (lambda lb: lb.assign(advantage=lb["advantage"] + 1000.0), "advantage"),
    (lambda lb: lb.assign(j_skip=lb["j_skip"] + 1000.0, advantage=lb["advantage"] + 1000.0),
     "j_skip"),
    (lambda lb: lb.assign(creation_s=lb["creation_s"] * 0.5), "creation_s"),
    (lambda lb: lb.assign(j_skip=np.inf), "j_skip"),
], ids=["j-below-its-floor", "advantage-not-j-difference", "j-not-the-branch-cost",
        "creation-not-the-checkpoint", "infinite"])
def test_impossible_label_rows_under_a_recomputed_hash_are_refused(
        saved: Path, edit, field: str) -> None:
    """A resealed set with impossible pair labels made pilot_analysis report a 1,000.4 s
    advantage instead of 0.40 s: the verified loader refuses such rows whatever the hash."""
    labels = read_table(saved / "labels.parquet", "labels")
    write_table(edit(labels), "labels", saved / "labels.parquet")
    _reseal(saved)
    with pytest.raises(LabelSetError, match=f"labels.*'{field}'"):
        LabelSet.load(saved)


def test_with_a_signing_key_a_label_set_cannot_be_forged(
        saved: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    unsigned = LabelSet.load(saved)
    monkeypatch.setenv("RIPPLECP_SIGNING_KEY", "a label-set signing key of 32 bytes!")
    with pytest.raises(LabelSetError, match="'hmac' is missing"):
        LabelSet.load(saved)  # saved without the key: unsigned
    signed = unsigned.save(tmp_path / "signed")
    assert "hmac" in _manifest(signed)
    LabelSet.load(signed)
    rec = read_table(signed / "recovery.parquet", "recovery")
    write_table(rec.assign(seed=rec["seed"] + 1), "recovery", signed / "recovery.parquet")
    _reseal(signed)  # a plausible edit, resealed by someone without the key
    with pytest.raises(LabelSetError, match="'hmac'"):
        LabelSet.load(signed)
    monkeypatch.delenv("RIPPLECP_SIGNING_KEY")
    LabelSet.load(signed)  # without a key, the plain hash is all that is checked
