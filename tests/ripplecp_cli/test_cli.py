"""The shared command-line builder: flags, help, one-line errors, suggestions, subcommands."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

from ripplecp_cli import opt, parse, run, run_subcommands

FAMS = ("swe-pilot", "dependency-resolution")


@dataclass(frozen=True)
class Args:
    """A toy study."""

    labels: Path | None = None
    """a label-set directory"""
    families: tuple[str, ...] = opt(FAMS, choices=FAMS)
    """workload families"""
    seed: int = opt(0, min=0)
    """one seed"""
    tolerance: float = opt(0.05, min=0.0)
    """spend tolerance"""
    hazard: Literal["uniform", "duration"] = "uniform"
    """failure distribution"""
    quick: bool = False
    """a small study"""
    learned: bool = True
    """run the learned policies"""


def test_defaults_and_values() -> None:
    a = parse(Args, [], prog="toy")
    assert a == Args()
    a = parse(Args, ["--families", "swe-pilot", "--seed", "3", "--quick", "--no-learned",
                     "--hazard", "duration", "--labels", "/x"], prog="toy")
    assert a.families == ("swe-pilot",) and a.seed == 3 and a.quick and not a.learned
    assert a.hazard == "duration" and a.labels == Path("/x")


def test_commas_split_and_checked() -> None:
    assert parse(Args, ["--families", "swe-pilot,dependency-resolution"], prog="t").families == FAMS


@pytest.mark.parametrize("argv, needle", [
    (["--families", "swe-pilto"], "argument --families: invalid choice 'swe-pilto' (did you mean 'swe-pilot'?)"),
    (["--seed", "-1"], "argument --seed: must be >= 0, got -1"),
    (["--seed", "1.5"], "argument --seed: expected an integer, got '1.5'"),
    (["--tolerance", "nan"], "argument --tolerance: expected a finite number"),
    (["--hazard", "unifrom"], "did you mean 'uniform'?"),
    (["--nope"], "unrecognized arguments: --nope"),
])
def test_errors_are_one_line_exit_2(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(Args, argv, prog="toy")
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("toy: error: ") and needle in err, err


def test_help_lists_every_option_with_docs_and_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(Args, ["--help"], prog="python -m toy")
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m toy")
    for text in ("a label-set directory", "{swe-pilot, dependency-resolution}", "one seed (default: 0)",
                 "{uniform, duration}", "run the learned policies (default: on; --no-learned turns it off)",
                 "a small study (default: off)", "--debug"):
        assert text in out, text


def test_check_callback_error_names_argument(capsys: pytest.CaptureFixture[str]) -> None:
    def positive_even(v: int) -> int:
        if v % 2:
            raise ValueError(f"must be even, got {v}")
        return v

    @dataclass(frozen=True)
    class A:
        n: int = opt(2, check=positive_even)
        """an even number"""

    assert parse(A, ["--n", "4"], prog="t").n == 4
    with pytest.raises(SystemExit):
        parse(A, ["--n", "3"], prog="t")
    assert "t: error: argument --n: must be even, got 3" in capsys.readouterr().err


def test_run_turns_input_errors_into_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    def study(a: Args) -> int:
        raise FileNotFoundError(2, "No such file or directory", "/nonexistent/labels")

    assert run(study, Args, [], prog="toy") == 2
    err = capsys.readouterr().err
    assert err == "toy: error: /nonexistent/labels: No such file or directory\n"
    with pytest.raises(FileNotFoundError):
        run(study, Args, ["--debug"], prog="toy")


def test_run_reports_a_defect_without_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    def study(a: Args) -> int:
        raise TypeError("boom")

    assert run(study, Args, [], prog="toy") == 1
    assert "internal error: TypeError: boom (rerun with --debug" in capsys.readouterr().err


@dataclass(frozen=True)
class PlanArgs:
    """Freeze a plan."""

    agent: str = opt(positional=True, choices=("scripted", "repair"))
    """the agent"""
    tasks: int = opt(4, min=1)
    """how many tasks"""


@dataclass(frozen=True)
class ListArgs:
    """List installed runtimes."""


def test_subcommands_nested_and_suggested(capsys: pytest.CaptureFixture[str]) -> None:
    seen = []
    table = {"plan": (PlanArgs, lambda a: seen.append(a) or 0),
             "agents": {"list": (ListArgs, lambda a: seen.append(a) or 0)}}
    assert run_subcommands(table, ["plan", "repair", "--tasks", "2"], prog="python -m oracle") == 0
    assert seen[-1] == PlanArgs("repair", 2)
    assert run_subcommands(table, ["agents", "list"], prog="python -m oracle") == 0
    assert seen[-1] == ListArgs()
    with pytest.raises(SystemExit) as exc:
        run_subcommands(table, ["pln"], prog="python -m oracle")
    assert exc.value.code == 2
    assert "unknown command 'pln' (did you mean 'plan'?)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run_subcommands(table, ["plan", "repiar"], prog="python -m oracle")
    err = capsys.readouterr().err
    assert err.startswith("python -m oracle plan: error: argument agent: invalid choice 'repiar' (did you mean 'repair'?)")


def test_real_process_exit_status(tmp_path: Path) -> None:
    script = tmp_path / "tool.py"
    script.write_text(textwrap.dedent('''
        from dataclasses import dataclass
        from ripplecp_cli import opt, run

        @dataclass(frozen=True)
        class Args:
            """Tool."""
            n: int = opt(1, min=1)
            """how many"""

        raise SystemExit(run(lambda a: print(a.n) or 0, Args, prog="python -m tool"))
    '''))
    ok = subprocess.run([sys.executable, str(script), "--n", "3"], capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout == "3\n"
    bad = subprocess.run([sys.executable, str(script), "--n", "0"], capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr == "python -m tool: error: argument --n: must be >= 1, got 0 (see python -m tool --help)\n"


@dataclass(frozen=True)
class Either:
    """A tool taking one of two inputs."""

    labels: str | None = None
    """a label set"""
    pilot: bool = False
    """the published figures"""
    n: int = opt(3, min=1)
    """how many"""
    rate: float = opt(0.5, check=None)
    """a rate"""

    def __post_init__(self) -> None:
        if (self.labels is None) == (not self.pilot):
            raise ValueError("give exactly one of --labels or --pilot")


def test_a_rule_between_options_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse(Either, ["--pilot"], prog="t").pilot
    for argv in ([], ["--pilot", "--labels", "x"]):
        with pytest.raises(SystemExit) as exc:
            parse(Either, argv, prog="t")
        assert exc.value.code == 2
        assert capsys.readouterr().err == ("t: error: give exactly one of --labels or --pilot "
                                           "(see t --help)\n")


def test_a_mistyped_option_suggests_the_nearest(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(Args, ["--no-learnd"], prog="t")
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err == "t: error: unrecognized arguments: --no-learnd (did you mean '--no-learned'?) (see t --help)\n"
    with pytest.raises(SystemExit):
        parse(Args, ["--tolerence=0.1"], prog="t")
    assert "(did you mean '--tolerance'?)" in capsys.readouterr().err


def test_a_mistyped_subcommand_option_suggests_from_that_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    table = {"plan": (PlanArgs, lambda a: 0)}
    with pytest.raises(SystemExit) as exc:
        run_subcommands(table, ["plan", "repair", "--taks", "2"], prog="python -m oracle")
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m oracle plan: error: unrecognized arguments: --taks 2 "
                          "(did you mean '--tasks'?)")


def test_numbers_show_a_plain_metavar(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(Either, ["--help"], prog="t")
    out = capsys.readouterr().out
    assert "--n N" in out and "--rate X" in out


def test_shared_checks(tmp_path: Path) -> None:
    from ripplecp_cli import choice_error, existing_dir, existing_file, existing_path, positive

    f = tmp_path / "f.txt"
    f.write_text("x")
    existing_dir(tmp_path)
    existing_file(f)
    existing_path(f)
    existing_path(tmp_path)
    positive(0.1)
    for check, value, needle in [
        (existing_dir, tmp_path / "nope", "nope: no such directory"),
        (existing_dir, f, "f.txt: not a directory"),
        (existing_file, tmp_path / "nope", "nope: no such file"),
        (existing_file, tmp_path, "a directory, expected a file"),
        (existing_path, tmp_path / "nope", "nope: no such file or directory"),
        (positive, 0.0, "must be > 0, got 0"),
        (positive, -2.5, "must be > 0, got -2.5"),
    ]:
        with pytest.raises(ValueError, match=needle):
            check(value)
    err = choice_error("swe-pilto", ["swe-pilot", "long-horizon"], "--families")
    assert str(err) == ("argument --families: invalid choice 'swe-pilto' (did you mean 'swe-pilot'?); "
                        "choose from swe-pilot, long-horizon")
    assert str(choice_error("zzz", ["a"])) == "invalid choice 'zzz'; choose from a"


def test_a_check_on_a_path_runs_before_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ripplecp_cli import existing_dir

    @dataclass(frozen=True)
    class A:
        labels: str = opt(".", check=existing_dir)
        """a folder"""

    ran = []
    with pytest.raises(SystemExit) as exc:
        run(lambda a: ran.append(a) or 0, A, ["--labels", str(tmp_path / "nope")], prog="t")
    assert exc.value.code == 2 and not ran
    assert f"t: error: argument --labels: {tmp_path / 'nope'}: no such directory" in capsys.readouterr().err


def test_abbreviated_options_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """A prefix is no option: ``--no-learn`` must not silently mean ``--no-learned``."""
    with pytest.raises(SystemExit) as exc:
        parse(Args, ["--no-learn"], prog="t")
    assert exc.value.code == 2
    assert "unrecognized arguments: --no-learn (did you mean '--no-learned'?)" in capsys.readouterr().err


@dataclass(frozen=True)
class _OutArgs:
    """Compute for a while, then write --out."""

    out: Path | None = None
    """where results go"""


@pytest.mark.parametrize("make_bad", [
    lambda tmp: tmp / "a_file" / "out",          # below a regular file
    lambda tmp: tmp / "a_file" / "deeper" / "x",
    lambda tmp: Path("/proc/self/ripplecp-out"),  # a filesystem nothing can be created in
])
def test_a_bad_out_is_refused_before_the_computation(
        tmp_path: Path, make_bad, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 32 item 10: several tools found a bad --out only after the whole computation."""
    (tmp_path / "a_file").write_text("x")
    bad = make_bad(tmp_path)
    ran = []
    with pytest.raises(SystemExit) as e:
        run(lambda a: ran.append(1), _OutArgs, ["--out", str(bad)], prog="tool")
    assert e.value.code == 2 and ran == []
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "argument --out" in err, err


def test_a_good_out_is_accepted_and_nothing_is_created(tmp_path: Path) -> None:
    ran = []
    assert run(lambda a: ran.append(a.out), _OutArgs, ["--out", str(tmp_path / "new" / "dir")],
               prog="tool") == 0
    assert ran == [tmp_path / "new" / "dir"] and not (tmp_path / "new").exists()
