"""A read's memory is bounded (issue 32, item 9): a log whose objects would take more than a
read may use is refused in one line naming the file, before the process runs out; running
out anyway is one line too, never an empty error."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard

from features.readers import ReadLimits, TrajectoryFormatError, read_trajectory

REPO = Path(__file__).resolve().parents[3]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}


def _tiny_exec_log(path: Path, mib: int) -> Path:
    """A codex-exec log of ``mib`` MiB (decompressed) of 27-byte lines, one event each: about
    30 MB of objects per MiB, the most a log's bytes cost."""
    line = b'{"type":"item.plan.delta"}\n'
    data = b'{"type":"thread.started","thread_id":"t"}\n' + line * (mib * 2**20 // len(line))
    path.write_bytes(zstandard.ZstdCompressor(level=10).compress(data))
    return path


def _child(code: str, *args: str, limit_as: int | None = None) -> subprocess.CompletedProcess:
    def cap() -> None:
        if limit_as is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))
    return subprocess.run([sys.executable, *(["-c", code] if code else []), *args], env=ENV,
                          capture_output=True, text=True, timeout=120, preexec_fn=cap,
                          cwd=REPO)


def test_a_read_past_its_memory_budget_is_refused_in_one_line(tmp_path: Path) -> None:
    log = _tiny_exec_log(tmp_path / "exec.jsonl.zst", 2)  # ~60 MB of objects
    # in a fresh process: memory another test freed would be reused unseen
    done = _child("import sys\nfrom features.readers import ReadLimits, read_trajectory\n"
                  "read_trajectory(sys.argv[1], limits=ReadLimits(max_memory=32 << 20))",
                  str(log))
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("features.readers.errors.TrajectoryFormatError: " + str(log) + ": ")
    assert "more memory than a read may use (32 MiB: --max-memory-mb 32)" in last
    ok = _child("import sys\nfrom features.readers import ReadLimits, read_trajectory\n"
                "print(len(read_trajectory(sys.argv[1], limits=ReadLimits(max_memory=2 << 30))"
                ".events))", str(log))
    assert ok.returncode == 0 and int(ok.stdout) == 2 * 2**20 // 27  # one event a line


def test_a_bomb_under_an_address_space_limit_is_refused_in_one_line(tmp_path: Path) -> None:
    """A 64 MiB (decompressed) zstandard log within --max-mb would need ~2 GB; under a
    1.5 GB address-space limit the CLI refused it with an empty error (issue 32)."""
    log = _tiny_exec_log(tmp_path / "bomb.jsonl.zst", 64)
    assert log.stat().st_size < 100_000
    out = tmp_path / "f.parquet"
    done = _child("", "-m", "features", str(log), "--out", str(out), "--no-progress",
                  limit_as=1536 << 20)
    assert done.returncode == 1 and not out.exists()
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith(f"python -m features: error: {log}: line ")
    assert "what the address-space limit (ulimit -v) leaves" in lines[0]


def test_running_out_of_memory_anyway_is_one_line(tmp_path: Path, monkeypatch) -> None:
    from features.readers import codex_exec

    log = tmp_path / "exec.jsonl"
    log.write_text(json.dumps({"type": "thread.started", "thread_id": "t"}) + "\n")

    def exhausted(*args: object, **kwargs: object) -> None:
        raise MemoryError

    monkeypatch.setattr(codex_exec.CodexExecParser, "on_record", exhausted)
    # a file's lines of a known type go straight to their handler (StreamParser.DISPATCH)
    monkeypatch.setitem(codex_exec.CodexExecParser.DISPATCH, "thread.started", exhausted)
    with pytest.raises(TrajectoryFormatError, match=r"ran out of memory reading it") as err:
        read_trajectory(log)
    assert str(err.value).startswith(f"{log}: ") and "\n" not in str(err.value)


def test_the_memory_limit_is_checked() -> None:
    assert ReadLimits().max_memory is None
    assert ReadLimits(max_memory=1).max_memory == 1
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="ReadLimits.max_memory must be a positive"):
            ReadLimits(max_memory=bad)
