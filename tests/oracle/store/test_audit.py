"""Audit log: checksummed fsync'd records, torn-tail recovery, corruption errors, crash safety."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from oracle.store.audit import AuditCorruptError, AuditDuplicateKeyError, AuditLog, record_checksum


def _fill(path: Path, n: int) -> AuditLog:
    log = AuditLog(path)
    for i in range(n):
        log.append({"key": f"b{i}", "j": i * 1.5, "verified": i % 2 == 0})
    return log


def test_append_and_read_back(tmp_path: Path) -> None:
    p = tmp_path / "audit.jsonl"
    _fill(p, 3)
    fresh = AuditLog(p)
    assert [r["key"] for r in fresh.records()] == ["b0", "b1", "b2"]
    assert fresh.records()[1] == {"key": "b1", "j": 1.5, "verified": False}
    assert fresh.keys() == {"b0", "b1", "b2"}
    line = json.loads(p.read_text().splitlines()[0])
    assert line["key"] == "b0" and line["sha256"] == record_checksum(line["record"])


def test_missing_file_reads_empty(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "none.jsonl")
    assert log.records() == [] and log.keys() == set()


def test_duplicate_key_refused_also_across_writers(tmp_path: Path) -> None:
    p = tmp_path / "audit.jsonl"
    a, b = AuditLog(p), AuditLog(p)
    a.append({"key": "x", "v": 1})
    with pytest.raises(AuditDuplicateKeyError, match="'x'"):
        a.append({"key": "x", "v": 2})
    with pytest.raises(AuditDuplicateKeyError):
        b.append({"key": "x", "v": 3})  # b never saw x in memory: it re-reads the file
    b.append({"key": "y"})
    assert [r["key"] for r in a.records()] == ["x", "y"]


def test_bad_records_refused(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl")
    with pytest.raises(ValueError, match="key"):
        log.append({"v": 1})
    with pytest.raises(TypeError):
        log.append({"key": "k", "v": object()})
    with pytest.raises(TypeError):
        log.append({"key": "k", "v": float("nan")})
    assert log.records() == []


def test_torn_last_line_without_newline_dropped_and_truncated(tmp_path: Path) -> None:
    p = tmp_path / "audit.jsonl"
    _fill(p, 2)
    good = p.read_bytes()
    with p.open("ab") as f:
        f.write(b'{"key": "b2", "record": {"key": "b2", "j"')  # killed mid-write
    log = AuditLog(p)
    with pytest.warns(UserWarning, match=r"audit.jsonl:3: dropping torn last line"):
        recs = log.records()
    assert [r["key"] for r in recs] == ["b0", "b1"]
    assert p.read_bytes() == good  # truncated back to the acknowledged prefix
    log.append({"key": "b2"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [r["key"] for r in AuditLog(p).records()] == ["b0", "b1", "b2"]


def test_torn_last_line_with_bad_checksum_dropped(tmp_path: Path) -> None:
    p = tmp_path / "audit.jsonl"
    _fill(p, 3)
    lines = p.read_text().splitlines()
    lines[-1] = lines[-1].replace('"j":3.0', '"j":4.0')
    p.write_text("\n".join(lines) + "\n")
    with pytest.warns(UserWarning, match="checksum mismatch"):
        assert [r["key"] for r in AuditLog(p).records()] == ["b0", "b1"]


def test_corrupt_middle_line_names_line(tmp_path: Path) -> None:
    p = tmp_path / "audit.jsonl"
    _fill(p, 4)
    lines = p.read_text().splitlines()
    lines[1] = lines[1][:20]  # garbage in the middle
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(AuditCorruptError, match=r"audit\.jsonl:2: .*bad JSON"):
        AuditLog(p).records()


def test_checksum_mismatch_in_middle_detected(tmp_path: Path) -> None:
    p = tmp_path / "audit.jsonl"
    _fill(p, 4)
    lines = p.read_text().splitlines()
    assert '"verified":true' in lines[2]
    lines[2] = lines[2].replace('"verified":true', '"verified":false')
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(AuditCorruptError, match=r"audit\.jsonl:3: .*checksum mismatch"):
        AuditLog(p).keys()


def test_duplicate_key_on_disk_is_corruption(tmp_path: Path) -> None:
    p = tmp_path / "audit.jsonl"
    _fill(p, 2)
    lines = p.read_text().splitlines()
    p.write_text("\n".join([lines[0], lines[1], lines[0], lines[1]]) + "\n")
    with pytest.raises(AuditCorruptError, match=r"audit\.jsonl:3: duplicate key 'b0'"):
        AuditLog(p).records()


_WRITER = """
import sys
from pathlib import Path
from oracle.store.audit import AuditLog
log = AuditLog(Path(sys.argv[1]))
n = int(sys.argv[2])
done = log.keys()
print("ready", len(done), flush=True)
for i in range(n):
    key = f"branch-{i:05d}"
    if key in done:
        continue
    log.append({"key": key, "i": i, "payload": "x" * (i % 97)})
print("finished", flush=True)
"""


def _newlines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def test_sigkill_at_random_moments_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    p = tmp_path / "audit.jsonl"
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    endless = 10**9  # the writer never finishes by itself: every kill lands mid-run
    rng = random.Random(20261129)
    previous = 0
    for _ in range(4):
        proc = subprocess.Popen([sys.executable, str(script), str(p), str(endless)],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("ready")
        # kill only once this writer has acknowledged a new record, however loaded the
        # machine (a kill before any progress would leave `previous` at 0 and test nothing)
        give_up = time.monotonic() + 300
        while _newlines(p) <= previous and proc.poll() is None:
            assert time.monotonic() < give_up, "writer appended nothing in 300 s"
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.2))
        proc.send_signal(signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL
        proc.stdout.close()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a torn tail is legitimate after SIGKILL
            recs = AuditLog(p).records()
        keys = [r["key"] for r in recs]
        assert keys == [f"branch-{i:05d}" for i in range(len(keys))]  # a clean prefix
        assert len(keys) > previous  # every kill came after progress, none of it lost
        previous = len(keys)
    n = previous + 25  # resume once more and let it finish
    done = subprocess.run([sys.executable, str(script), str(p), str(n)],
                          capture_output=True, text=True, check=True, timeout=600)
    assert "finished" in done.stdout
    recs = AuditLog(p).records()
    assert [r["i"] for r in recs] == list(range(n))
