"""``python -m features``: end to end through a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from features.online import FEATURE_NAMES
from features.readers import format_names
from features.schema import write_parquet
from features.synthetic import generate_trajectory

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "features", *args, "--no-progress"],
        cwd=REPO, capture_output=True, text=True, timeout=600,  # a hang guard only: generous for a loaded machine
    )


def codex_exec_log(path: Path) -> Path:
    """A small ``codex exec --json`` stream: one turn, a read, an edit, a test."""
    lines = [
        {"type": "thread.started", "thread_id": "t-cli"},
        {"type": "turn.started"},
        {"type": "item.completed", "item": {"id": "item_0", "type": "command_execution",
         "command": "bash -lc 'cat src/app.py'", "aggregated_output": "x = 1\n",
         "exit_code": 0, "status": "completed"}},
        {"type": "item.completed", "item": {"id": "item_1", "type": "command_execution",
         "command": "bash -lc \"sed -i 's/1/2/' src/app.py\"", "aggregated_output": "",
         "exit_code": 0, "status": "completed"}},
        {"type": "item.completed", "item": {"id": "item_2", "type": "command_execution",
         "command": "bash -lc 'python -m pytest -q'", "aggregated_output": "3 passed in 0.1s\n",
         "exit_code": 0, "status": "completed"}},
        {"type": "item.completed", "item": {"id": "item_3", "type": "agent_message", "text": "done"}},
        {"type": "turn.completed", "usage": {"input_tokens": 100, "cached_input_tokens": 10,
                                             "output_tokens": 20}},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


def test_cli_on_trajectory_parquet(tmp_path: Path) -> None:
    trajs = [generate_trajectory(80, seed=s, task_id=f"task-{s}") for s in (1, 2)]
    src = tmp_path / "trajs.parquet"
    write_parquet(trajs, src)
    out = tmp_path / "features.parquet"
    res = run_cli(str(src), "--out", str(out), "--granularity", "tool_call")
    assert res.returncode == 0, res.stderr
    df = pd.read_parquet(out)
    assert len(df) == sum(len(t.boundaries("tool_call")) for t in trajs)
    assert set(FEATURE_NAMES) <= set(df.columns)
    assert list(df["task_id"].unique()) == ["task-1", "task-2"]
    assert (df["source_file"] == str(src)).all()
    assert res.stdout.count("edges: write=") == 2 and "format=synthetic" in res.stdout
    assert not (tmp_path / "features.parquet.tmp").exists()


def test_cli_on_codex_exec_log(tmp_path: Path) -> None:
    pytest.importorskip("features.readers")
    log = codex_exec_log(tmp_path / "run.jsonl")
    out = tmp_path / "f.parquet"
    res = run_cli(str(log), "--out", str(out), "--granularity", "tool_call")
    assert res.returncode == 0, res.stderr
    df = pd.read_parquet(out)
    assert len(df) == 3  # three tool calls
    assert "format=codex-exec" in res.stdout
    # the sed edit wrote src/app.py; the test read it (build_io)
    assert "build_io=1" in res.stdout
    assert df["cost__wall_s_total"].isna().all()  # codex exec logs carry no timestamps


def test_cli_bad_file_fail_fast_and_keep_going(tmp_path: Path) -> None:
    good = tmp_path / "good.parquet"
    write_parquet(generate_trajectory(30, seed=4), good)
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"\x00\x01 not parquet")
    out = tmp_path / "out.parquet"
    res = run_cli(str(bad), str(good), "--out", str(out), "--format", "trajectory-parquet")
    assert res.returncode == 1
    assert str(bad) in res.stderr
    assert not out.exists()
    res = run_cli(str(bad), str(good), str(tmp_path / "missing.jsonl"), "--out", str(out),
                  "--keep-going")
    assert res.returncode == 1
    assert "2 bad file(s) skipped" in res.stderr
    assert str(bad) in res.stderr and "missing.jsonl" in res.stderr
    assert len(pd.read_parquet(out)) == len(generate_trajectory(30, seed=4).boundaries("turn"))


def test_cli_format_choices_are_the_reader_table(tmp_path: Path) -> None:
    res = run_cli("x.jsonl", "--out", str(tmp_path / "o.parquet"), "--format", "nope")
    assert res.returncode == 2 and "argument --format: invalid choice: 'nope'" in res.stderr
    assert all(f"'{name}'" in res.stderr for name in ["trajectory-parquet", *format_names()])
    log = codex_exec_log(tmp_path / "run.jsonl")
    ok = run_cli(str(log), "--out", str(tmp_path / "o.parquet"), "--format", "codex")  # an alias
    assert ok.returncode == 0 and "format=codex-exec" in ok.stdout
