"""Progress of long steps: tqdm's bar on a terminal, one plain line per step elsewhere."""

from __future__ import annotations

import io

import pytest

from ripplecp_cli import progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_stream_gets_one_line_per_step_and_no_redraws() -> None:
    out = io.StringIO()
    assert list(progress(range(3), desc="folds", file=out)) == [0, 1, 2]
    text = out.getvalue()
    assert "\r" not in text and text.count("\n") == 1
    assert text.startswith("folds: 3/3 done in ") and text.endswith(" s\n")


def test_plain_lines_while_a_step_runs_at_most_every_interval() -> None:
    out = io.StringIO()
    with progress(desc="branches", total=4, unit="branch", file=out, interval=0.0) as bar:
        bar.update()
        bar.set_postfix(quarantined=1)
        bar.update()
        bar.set_total(5)
        bar.update(3)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3  # 1/4, 2/4, and the end (5/5 has no running line of its own)
    assert lines[0].startswith("branches: 1/4 branch (") and lines[1].startswith("branches: 2/4 branches (")
    assert "quarantined=1" in lines[1]
    assert lines[-1].startswith("branches: 5/5 branches done in ") and lines[-1].endswith("quarantined=1")
    quiet = io.StringIO()
    with progress(desc="branches", total=4, file=quiet) as bar:  # default interval: 10 s
        bar.update()
    assert quiet.getvalue().count("\n") == 1


def test_a_step_that_fails_says_where_it_stopped() -> None:
    out = io.StringIO()
    with pytest.raises(RuntimeError):
        for i in progress(range(5), desc="folds", file=out):
            if i == 2:
                raise RuntimeError("boom")
    assert out.getvalue().startswith("folds: 2/5 stopped after ")
    out = io.StringIO()
    with pytest.raises(ValueError), progress(desc="tasks", total=1, file=out):
        raise ValueError("bad input")
    assert out.getvalue().startswith("tasks: 0/1 stopped after ")


def test_a_terminal_gets_the_tqdm_bar() -> None:
    tty = Terminal()
    for _ in progress(range(3), desc="folds", file=tty):
        pass
    text = tty.getvalue()
    assert "\r" in text and "folds" in text and "3/3" in text


def test_disabled_shows_nothing_and_write_keeps_messages() -> None:
    out = io.StringIO()
    with progress(desc="x", total=2, file=out, enabled=False) as bar:
        bar.update(2)
    assert out.getvalue() == ""
    with progress(desc="x", total=2, file=out) as bar:
        bar.write("a message")
    assert out.getvalue().startswith("a message\n")
