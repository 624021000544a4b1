"""``python -m features`` (``features/__main__.py``): end to end through a subprocess, on
the shared command-line builder (one-line errors, exit 2), with the exit statuses of bad
and empty logs, and the atomic write."""

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
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert "argument --format: invalid choice 'nope'" in res.stderr
    listed = res.stderr.split("choose from ")[1].split(" (see ")[0].split(", ")
    assert listed == ["trajectory-parquet", *format_names()]
    log = codex_exec_log(tmp_path / "run.jsonl")
    ok = run_cli(str(log), "--out", str(tmp_path / "o.parquet"), "--format", "codex")  # an alias
    assert ok.returncode == 0 and "format=codex-exec" in ok.stdout


DATA = REPO / "tests" / "data" / "readers"
PROG = "python -m features"


def test_help_lists_every_option_with_its_help() -> None:
    res = subprocess.run([sys.executable, "-m", "features", "--help"], cwd=REPO,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0 and res.stdout.startswith(f"usage: {PROG} ")
    out = " ".join(res.stdout.split())
    assert "Exit status: 0 done; 1 a bad file" in out and "3 a log that held no events" in out
    for text in ("FILE", "agent logs (.gz/.zst too", "--out OUT output Parquet file",
                 "--granularity", "{turn, tool_call}", "--format", "trajectory-parquet",
                 "--keep-going skip bad files", "--without-families", "{write, read, build_io",
                 "--max-mb N largest log read, in MiB after decompression", "(default: 512)",
                 "--progress a progress bar", "--no-progress turns it off", "--debug"):
        assert text in out, text


@pytest.mark.parametrize("args, needle", [
    (["--granularity", "turns"], "argument --granularity: invalid choice 'turns' (did you "
                                 "mean 'turn'?)"),
    (["--max-mb", "0"], "argument --max-mb: must be >= 1, got 0"),
    (["--max-mb", "lots"], "argument --max-mb: expected an integer, got 'lots'"),
    (["--without-families", "writes"], "argument --without-families: invalid choice 'writes' "
                                       "(did you mean 'write'?)"),
    (["--format", "openhand"], "(did you mean 'openhands'?)"),
    (["--nope"], "unrecognized arguments: --nope"),
])
def test_wrong_arguments_one_line_exit_2(args: list[str], needle: str, tmp_path: Path) -> None:
    log = codex_exec_log(tmp_path / "run.jsonl")
    res = run_cli(str(log), "--out", str(tmp_path / "o.parquet"), *args)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert res.stderr.startswith(f"{PROG}: error: ") and needle in res.stderr, res.stderr
    assert not (tmp_path / "o.parquet").exists()


def test_out_a_directory_refused_before_work(tmp_path: Path) -> None:
    log = codex_exec_log(tmp_path / "run.jsonl")
    target = tmp_path / "outdir"
    target.mkdir()
    res = run_cli(str(log), "--out", str(target))
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert f"argument --out: '{target}' is a directory" in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outdir", "run.jsonl"]  # no stray
    assert list(target.iterdir()) == [] and "task=" not in res.stdout  # nothing read


def test_missing_file_argument() -> None:
    res = run_cli("--out", "x.parquet")
    assert res.returncode == 2 and "the following arguments are required: FILE" in res.stderr


def test_fifo_symlink_loop_and_empty_log(tmp_path: Path) -> None:
    """A FIFO is refused at once (it hung the command, even with --keep-going), a symlink
    loop is named, a log with no events is a warning and exit status 3."""
    import os
    fifo = tmp_path / "live.jsonl"
    os.mkfifo(fifo)
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop)
    good = codex_exec_log(tmp_path / "run.jsonl")
    out = tmp_path / "f.parquet"
    res = run_cli(str(fifo), str(loop), str(good), "--out", str(out), "--keep-going")
    assert res.returncode == 1, res.stderr
    assert f"{fifo}: not a regular file (a FIFO); refused unread" in res.stderr
    assert f"{loop}: cannot read file: a symbolic link loop" in res.stderr
    assert "2 bad file(s) skipped" in res.stderr and len(pd.read_parquet(out)) == 1
    res = run_cli(str(fifo), "--out", str(out))  # without --keep-going: one line, exit 1
    assert res.returncode == 1 and res.stderr.count("\n") == 1
    empty = DATA / "adversarial" / "no_events.jsonl"
    res = run_cli(str(empty), str(good), "--out", str(out))
    assert res.returncode == 3, res.stderr
    assert f"{empty}: warning: {empty}: the log holds no events" in res.stderr
    assert "1 log(s) held no events" in res.stderr and len(pd.read_parquet(out)) == 1
    res = run_cli(str(empty), "--out", str(tmp_path / "none.parquet"))
    assert res.returncode == 3 and not (tmp_path / "none.parquet").exists()


def test_compressed_v1_directory_and_forced_format(tmp_path: Path) -> None:
    import gzip
    src = DATA / "mini-swe-agent" / "toolcall_v11.traj.json"
    gz = tmp_path / "run.traj.json.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    conv = DATA / "openhands" / "conversation-a1b2c3"
    out = tmp_path / "f.parquet"
    res = run_cli(str(gz), str(conv), "--out", str(out), "--granularity", "tool_call")
    assert res.returncode == 0, res.stderr
    assert "task=acme__calc-7 format=mini-swe-agent events=13 boundaries=5" in res.stdout
    assert "format=openhands-v1 events=26 boundaries=11" in res.stdout
    df = pd.read_parquet(out)
    assert len(df) == 16 and set(df["source_format"]) == {"mini-swe-agent", "openhands-v1"}
    oh = DATA / "openhands" / "v1_events.json"
    res = run_cli(str(oh), "--out", str(out), "--format", "codex-exec")
    assert res.returncode == 1 and "read as codex-exec but it looks like openhands-v1" in (
        res.stderr)


def test_write_is_atomic_on_failure_interrupt_and_sigterm(tmp_path: Path) -> None:
    import os
    import signal

    from features.__main__ import terminating_on_sigterm
    from features.files import write_atomic

    target = tmp_path / "features.parquet"
    target.write_bytes(b"the previous table")

    def failing(f: object) -> None:
        f.write(b"half a table")  # type: ignore[attr-defined]
        raise OSError("disk full")

    def interrupted(f: object) -> None:
        f.write(b"half a table")  # type: ignore[attr-defined]
        raise KeyboardInterrupt

    def terminated(f: object) -> None:
        f.write(b"half a table")  # type: ignore[attr-defined]
        os.kill(os.getpid(), signal.SIGTERM)

    for writer, exc in ((failing, OSError), (interrupted, KeyboardInterrupt),
                        (terminated, SystemExit)):
        with terminating_on_sigterm(), pytest.raises(exc) as ei:
            write_atomic(target, writer)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["features.parquet"], writer
        assert target.read_bytes() == b"the previous table"
    assert ei.value.code == 128 + signal.SIGTERM
    write_atomic(target, lambda f: f.write(b"new"))
    assert target.read_bytes() == b"new" and len(list(tmp_path.iterdir())) == 1
    with pytest.raises(IsADirectoryError, match="is a directory"):
        write_atomic(tmp_path, lambda f: f.write(b"x"))
