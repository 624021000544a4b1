"""``python -m experiments.collect_labels``'s command line: help on every option, one line
with exit 2 for every wrong argument, and the simulated agent collects (or says in one line
what it cannot)."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.collect_labels import PROG, Args, main
from labelsets.tables import LabelSet

MODULE = "experiments.collect_labels"


def test_help_lists_every_option(check_help) -> None:
    out = check_help(MODULE, Args)
    for text in ("{pilot, tool_call, full, sparse}", "{inline, local, dask}", "--scheduler ADDR", "--jobs N"):
        assert text in out, text


@pytest.mark.parametrize("argv, needle", [
    (["--agent", "simulatr"], "argument --agent: invalid choice 'simulatr' (did you mean 'simulator'?)"),
    (["--tasks", "0"], "argument --tasks: must be >= 1, got 0"),
])
def test_wrong_arguments_for_real(tmp_path: Path, run_command, failed_in_one_line, argv, needle) -> None:
    failed_in_one_line(run_command(MODULE, *argv, "--out", str(tmp_path / "o"), timeout=120), PROG, needle)
    assert not (tmp_path / "o").exists()  # nothing was started


@pytest.mark.parametrize("argv, needle", [
    (["--design", "pilott"], "argument --design: invalid choice 'pilott' (did you mean 'pilot'?)"),
    (["--granularity", "turns"], "argument --granularity: invalid choice 'turns' (did you mean 'turn'?)"),
    (["--executor", "locl"], "argument --executor: invalid choice 'locl' (did you mean 'local'?)"),
    (["--scheduler", "tcp://127.0.0.1:8786"], "argument --scheduler: needs --executor dask, not inline"),
    (["--cap", "0"], "argument --cap: must be > 0, got 0"),
    (["--repos", "0"], "argument --repos: must be >= 1, got 0"),
    (["--jobs", "0"], "argument --jobs: must be >= 1, got 0"),
    (["--repetitions", "0"], "argument --repetitions: must be >= 1, got 0"),
    (["--seed", "-1"], "argument --seed: must be >= 0, got -1"),
    (["--workers", "2"], "unrecognized arguments: --workers 2"),
    (["--no-progres"], "(did you mean '--no-progress'?)"),
    (["--runtime", "codx"], "argument --runtime: invalid choice 'codx' (did you mean 'codex'?)"),
    (["--design", "sparse"], "argument --branches: needed by --design sparse, and only by it"),
    (["--branches", "4"], "argument --branches: needed by --design sparse, and only by it"),
    (["--adaptive-branches", "2"], "argument --adaptive-branches: only for --design sparse"),
    (["--runtime", "codex"], "argument --runtime: agent 'simulator' is no brain; choose --agent "
                             "llm-free, repair, depres, cbuild, migrate, bisect"),
    (["--families", "bisect"], "argument --families: only for --agent llm-free, not simulator"),
    (["--families", "bisekt"], "argument --families: invalid choice 'bisekt' (did you mean "
                               "'bisect'?)"),
])
def test_wrong_arguments(tmp_path: Path, one_line_error, argv, needle) -> None:
    small = ["--agent", "simulator", "--tasks", "1", "--repos", "1", "--executor", "inline"]
    one_line_error(main, [*small, *argv, "--out", str(tmp_path / "o")], needle)
    assert not (tmp_path / "o").exists()


def test_the_simulated_agent_collects(tmp_path: Path) -> None:
    """``--agent simulator`` once crashed (AttributeError: no make_tasks); with 3 repositories
    it collects a label set. (9 repositories, beyond swe-pilot's 8 declared ones, were refused
    in one line until issue 28's generated repository variants: tests/oracle/simulator.)"""
    out = tmp_path / "b"
    assert main(["--agent", "simulator", "--tasks", "1", "--repos", "3", "--executor", "inline",
                 "--repetitions", "1", "--out", str(out), "--no-progress"]) == 0
    ls = LabelSet.load(out / "labelset")
    assert len(ls.tasks) == 1 and set(ls.labels["stratum"]) == {"first", "additional"}
