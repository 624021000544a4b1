"""The one command vocabulary (``features.commands``): readers and shell parser agree."""

from __future__ import annotations

import posixpath
import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from features.commands import (
    RUNNERS,
    WRAPPERS,
    command_start,
    is_test_run,
    might_commit,
    might_run_tests,
    program_name,
)
from features.readers.events import classify_command
from features.schema import EventKind
from features.shell import is_git_commit, is_test_command, parse_command, split_command

# (command, runs tests?): the cases where the readers' and the shell parser's old rules
# disagreed come first; every other case agreed before and must still agree
AGREE = [
    ("bats tests/", True),
    ("nohup pytest -q", True),
    ("unbuffer pytest", True),
    ("xvfb-run pytest -q", True),
    ("xvfb-run -a -s '-screen 0 1024x768x24' python -m pytest", True),
    ("timeout -s KILL 60 pytest", True),
    ("env -u HOME CI=1 pytest -x", True),
    ("sudo -u runner make check", True),
    ("nice -n 10 cargo test", True),
    ("stdbuf -oL -eL python3 -m unittest", True),
    ("time -p go test ./...", True),
    ("uv run --with pytest-xdist pytest -n 4", True),
    ("poetry run pytest", True),
    ("conda run -n py311 python -m pytest", True),
    ("npm exec -- jest --ci", True),
    ("npx -y vitest run", True),
    ("yarn jest --ci", True),
    ("coverage run -m pytest", True),
    ("bash run_tests.sh", True),
    ("./tests/run_tests.sh -v", True),
    ("runtests.py queries", True),
    ("python manage.py test app", True),
    ("python setup.py test", True),
    ("python -m django test", True),
    ("make test-unit", True),
    ("mvn -q verify", True),
    ("./gradlew check", True),
    ("django-admin test", True),
    ("cd app && bash -lc 'pnpm --filter web test'", True),
    ("command -v pytest", False),
    ("python3 test_fix.py", False),  # a script the agent wrote, not the project's suite
    ("bash tests/test_smoke.sh", False),
    ("cargo check", False),
    ("test -f setup.py && echo yes", False),
    ("yarn add -D jest", False),
    ("uv sync", False),
    ("npm install vitest", False),
    ("echo pytest", False),
    ("cat <<'EOF' > t.sh\npytest\nEOF", False),
]


@pytest.mark.parametrize(("cmd", "expected"), AGREE)
def test_readers_and_shell_parser_agree(cmd: str, expected: bool) -> None:
    argv = split_command(cmd)
    assert is_test_command(cmd) is expected
    assert parse_command(cmd).is_test is expected
    assert (classify_command(cmd, argv) == EventKind.TEST) is expected
    if argv is not None and not any(t in cmd for t in ("&&", "<<", "-lc")):
        assert is_test_run(argv) is expected  # a simple command: the rule itself


@pytest.mark.parametrize(("argv", "start"), [
    (["pytest"], 0),
    (["FOO=1", "BAR=2", "pytest"], 2),
    (["timeout", "-k", "5", "300", "pytest"], 4),
    (["env", "-i", "X=1", "nohup", "nice", "-n", "5", "make"], 7),
    (["sudo", "-E", "-u", "bob", "--", "ls"], 5),
    (["uv", "run", "--python", "3.12", "pytest"], 4),
    (["pnpm", "--filter", "web", "exec", "vitest"], 4),
    (["npx", "--package", "x", "jest"], 3),
    (["command", "-v", "pytest"], 0),  # a lookup: runs nothing
    (["env"], 0),
    (["exec"], 1),  # nothing left to run
    (["uv", "sync"], 0),  # not a run: uv itself is the program
])
def test_command_start(argv: list[str], start: int) -> None:
    assert command_start(argv) == start


def test_wrapped_and_run_commands_keep_their_file_effects() -> None:
    assert parse_command("nohup cat a.py > out.log").reads == ("a.py",)
    assert parse_command("sudo -u bob cp a b").writes == ("b",)
    eff = parse_command("uv run python -m json.tool data.json")
    assert eff.reads == ("data.json",) and eff.interpreted
    assert parse_command("xvfb-run -a frobnicate").interpreted is False


def test_cargo_check_builds_and_agent_scripts_are_opaque() -> None:
    assert (parse_command("cargo check").is_test, parse_command("cargo check").is_build) == (False, True)
    eff = parse_command("python3 test_fix.py")
    assert (eff.is_test, eff.interpreted, eff.reads) == (False, False, ("test_fix.py",))


def test_tables_name_programs_once() -> None:
    assert not set(WRAPPERS) & set(RUNNERS)
    assert all(name == name.strip() and "/" not in name for name in {*WRAPPERS, *RUNNERS})


def test_long_heredoc_is_split_without_shlex(monkeypatch: pytest.MonkeyPatch) -> None:
    body = "\n".join(f"x{i} = 'a\\\\b' + \"it's\"  # \\t" for i in range(2000))
    cmd = f"cat <<'EOF' > gen.py\n{body}\nEOF\npython3 gen.py"
    expected = shlex.split(cmd)
    monkeypatch.setattr(shlex, "split", lambda *a, **k: pytest.fail("shlex.split called"))
    assert split_command(cmd) == expected
    assert is_test_command(cmd) is False


_PIECES = ["pytest", "py.test", "tox", "bats", "go", "test", "cargo", "nextest", "make", "check",
           "npm", "t", "run", "test:unit", "python", "-m", "unittest", "runtests.py", "&&", "|",
           "cd", "x", "bash", "-lc", "uv", "timeout", "5", "git", "commit", "-m", "msg"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), min_size=1, max_size=6), st.data())
def test_cheap_hint_never_hides_a_test_or_a_commit(words: list[str], data: st.DataObject) -> None:
    """might_run_tests / might_commit answer without parsing; they may say yes wrongly,
    never no wrongly, however the words are quoted."""
    quoted = []
    for w in words:
        cut = data.draw(st.integers(0, len(w)))
        q = data.draw(st.sampled_from(["", "'", '"', "\\\\"]))
        quoted.append(w if not q or w in ("&&", "|") else
                      (w[:cut] + "\\" + w[cut:] if q == "\\\\" and cut < len(w) else w[:cut] + q + q + w[cut:]))
    cmd = " ".join(quoted)
    eff = parse_command(cmd)
    assert might_run_tests(cmd) or not eff.is_test, cmd
    assert might_commit(cmd) or not eff.is_commit, cmd
    assert is_test_command(cmd) is eff.is_test and is_git_commit(cmd) is eff.is_commit


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="ab/.\\ -", max_size=12))
def test_program_name_is_the_last_path_component(word: str) -> None:
    assert program_name(word) == posixpath.basename(word)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="ab'\"\\ é", max_size=16))
def test_unquoting_drops_quotes_and_backslashes(text: str) -> None:
    from features.commands import _unquoted

    assert _unquoted(text) == text.translate(str.maketrans("", "", "'\"\\"))
