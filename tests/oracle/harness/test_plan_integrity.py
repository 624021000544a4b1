"""Issue 32 item 3: a plan file is code. An edited plan whose plain sha256 was recomputed
must be refused before anything runs; with a signing key the plan cannot be forged at all.

Real plans from ``python -m oracle plan`` (the scripted agent), real runs; the only edit is
the one an attacker makes to ``plan.json``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from oracle.__main__ import main
from oracle.harness.plan import Plan, PlanError

KEY_ENV = "RIPPLECP_SIGNING_KEY"


def _plan(tmp_path: Path) -> Path:
    path = tmp_path / "p.json"
    assert main(["plan", "--agent", "scripted", "--tasks", "1", "--design", "pilot", "--seed",
                 "5", "--out", str(path), "--task-opt", "time_scale=0.05", "--task-opt",
                 "n_files=2", "--task-opt", "n_steps=3", "--no-progress"]) == 0
    return path


def _rehash(doc: dict) -> dict:
    """What an attacker does after an edit: recompute the plain sha256."""
    content = {k: v for k, v in doc.items() if k not in ("hash", "hmac")}
    doc["hash"] = hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":"),
                                            allow_nan=False).encode()).hexdigest()
    doc.pop("hmac", None)
    return doc


def _edit_verifier(path: Path, marker: Path) -> None:
    doc = json.loads(path.read_text())
    doc["tasks"][0]["verifier"] = [sys.executable, "-c",
                                   f"open({str(marker)!r}, 'w').write('ran')"]
    path.write_text(json.dumps(_rehash(doc)))


def test_an_edited_rehashed_verifier_is_refused_before_anything_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    path = _plan(tmp_path)
    marker = tmp_path / "MARKER"
    _edit_verifier(path, marker)
    capsys.readouterr()
    assert main(["run", str(path), "--executor", "inline", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "verifier" in err, err
    assert not marker.exists(), "the edited verifier command ran"
    assert not (tmp_path / "p.study" / "branches").exists()


@pytest.mark.parametrize("edit", [
    lambda d: d["cells"][0]["seeds"].__setitem__(0, 12345),
    lambda d: d["cells"][0]["cp_first"].__setitem__(0, not d["cells"][0]["cp_first"][0]),
    lambda d: d["cells"][0].__setitem__("candidate", 2),
    lambda d: d["cells"][0].__setitem__("failure", 99),
    lambda d: d["cells"][0].pop("seeds"),
    lambda d: d["tasks"][0].__setitem__("verifier", "rm -rf /"),
    lambda d: d.__setitem__("repetitions", "2"),
])
def test_an_edited_rehashed_cell_or_field_is_refused_at_load(tmp_path: Path, edit) -> None:
    path = _plan(tmp_path)
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(_rehash(doc)))
    with pytest.raises(PlanError, match=str(path)):
        Plan.load(path)


def test_with_a_signing_key_a_plan_cannot_be_forged(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "correct horse battery staple, 32+ bytes long")
    path = _plan(tmp_path)
    assert "hmac" in json.loads(path.read_text())
    Plan.load(path)  # signed by the key it was made with
    doc = json.loads(path.read_text())
    doc["agent"]["options"]["note"] = "edited"
    path.write_text(json.dumps(_rehash(doc)))
    with pytest.raises(PlanError, match="hmac"):
        Plan.load(path)  # resealed without the key: no signature
    doc["hmac"] = "0" * 64
    path.write_text(json.dumps(doc))
    with pytest.raises(PlanError, match="hmac"):
        Plan.load(path)
    monkeypatch.setenv(KEY_ENV, "another key, also more than 32 bytes long")
    path2 = _plan(tmp_path / "b")
    monkeypatch.setenv(KEY_ENV, "correct horse battery staple, 32+ bytes long")
    with pytest.raises(PlanError, match="hmac"):
        Plan.load(path2)  # signed with another key


def test_a_short_signing_key_is_a_one_line_error(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(KEY_ENV, "short")
    (tmp_path / "b").mkdir()
    assert main(["plan", "--agent", "scripted", "--tasks", "1", "--seed", "5", "--out",
                 str(tmp_path / "p.json"), "--no-progress"]) == 2
    assert KEY_ENV in capsys.readouterr().err
