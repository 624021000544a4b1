"""The one atomic write: whole or not at all, nothing left behind, for path-taking writers too."""

from __future__ import annotations

from pathlib import Path

import pytest

from features.files import atomic_path, write_text_atomic


def test_atomic_path_keeps_the_suffix_and_replaces_whole(tmp_path: Path) -> None:
    target = tmp_path / "out" / "curve.png"
    with atomic_path(target) as tmp:
        assert tmp.parent == target.parent and tmp.suffix == ".png" and tmp != target
        assert not target.exists()  # nothing under the trusted name until the rename
        tmp.write_bytes(b"figure")
    assert target.read_bytes() == b"figure"
    assert [p.name for p in target.parent.iterdir()] == ["curve.png"]


@pytest.mark.parametrize("exc", [OSError("No space left on device"), KeyboardInterrupt()])
def test_atomic_path_failure_leaves_the_old_file_and_no_temp(tmp_path: Path,
                                                            exc: BaseException) -> None:
    target = tmp_path / "budget_cost_swe-pilot.png"
    target.write_bytes(b"old")
    with pytest.raises(type(exc)), atomic_path(target) as tmp:
        tmp.write_bytes(b"half")
        raise exc
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == [target.name]


def test_a_writer_that_removes_its_temp_fails_loudly(tmp_path: Path) -> None:
    target = tmp_path / "report.txt"
    with pytest.raises(FileNotFoundError), atomic_path(target) as tmp:
        tmp.unlink()
    assert list(tmp_path.iterdir()) == []


def test_write_text_atomic(tmp_path: Path) -> None:
    target = tmp_path / "label_set.json"
    write_text_atomic(target, '{"hash": "é"}')
    assert target.read_text(encoding="utf-8") == '{"hash": "é"}'
    with pytest.raises(IsADirectoryError, match="is a directory"):
        write_text_atomic(tmp_path, "x")
