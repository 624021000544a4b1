"""Shell parser: file effects of each construct the provenance graph relies on."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from features.patches import patch_paths
from features.shell import (
    ShellEffects,
    is_git_commit,
    is_test_command,
    parse_command,
    parse_with,
    split_command,
)

# (command, reads, writes, deletes)
CASES = [
    ("cat a.py", ["a.py"], [], []),
    ("bash -lc 'cat ./src/a.py'", ["src/a.py"], [], []),
    ("sh -c 'head -n 5 a b'", ["a", "b"], [], []),
    ('bash -lc "sed -n \'1,200p\' src/x.ts"', ["src/x.ts"], [], []),
    ("nl -ba foo.py | sed -n '10,40p'", ["foo.py"], [], []),
    ("tail -n 20 log.txt && grep -n def m.py", ["log.txt", "m.py"], [], []),
    ("grep -rn needle src", ["src"], [], []),
    ("grep -e x a.py b.py", ["a.py", "b.py"], [], []),
    ("rg needle", ["."], [], []),
    ("rg -n needle lib tests", ["lib", "tests"], [], []),
    ("ls", ["."], [], []),
    ("ls -la src", ["src"], [], []),
    ("find src -name '*.py'", ["src"], [], []),
    ("git diff", ["."], [], []),
    ("git diff -- a.py", ["a.py"], [], []),
    ("git status --short", ["."], [], []),
    ("git show HEAD", [], [], []),
    ("echo hi > out.txt", [], ["out.txt"], []),
    ("echo hi >> log.txt; cat < in.txt", ["in.txt"], ["log.txt"], []),
    ("python -m pytest -q 2> err.txt", [], ["err.txt"], []),
    ("ls 2>/dev/null", ["."], [], []),
    ("cat > f.py <<EOF\nprint(1)\nEOF", [], ["f.py"], []),
    ("cat > f.py <<'EOF'\nx = $HOME\nEOF\ncat g.py", ["g.py"], ["f.py"], []),
    ("cat <<A > f\nx\nA\ncat <<B > g\ny\nB", [], ["f", "g"], []),
    ("sed -i 's/a/b/' ./x.py", ["x.py"], ["x.py"], []),
    ("sed -i.bak -e 's/a/b/' x.py y.py", ["x.py", "y.py"], ["x.py", "y.py"], []),
    ("echo a | tee out.txt", [], ["out.txt"], []),
    ("printf '%s\\n' a | tee -a x y", [], ["x", "y"], []),
    ("cp a.py b.py", ["a.py"], ["b.py"], []),
    ("cp a.py b.py dest", ["a.py", "b.py"], ["dest/a.py", "dest/b.py"], []),
    ("mv old.py new.py", ["old.py"], ["new.py"], ["old.py"]),
    ("mv a.py dir/", ["a.py"], ["dir/a.py"], ["a.py"]),
    ("rm -rf build", [], [], ["build"]),
    ("rm a.py && touch a.py", [], ["a.py"], []),
    ("touch a.py && rm a.py", [], [], ["a.py"]),
    ("cat a.py b.py > c.py && rm a.py", ["a.py", "b.py"], ["c.py"], ["a.py"]),
    ("cd src && cat a.py > ../b.py", ["src/a.py"], ["b.py"], []),
    ("(cd sub && ls) && cat top.py", ["sub", "top.py"], [], []),
    ("git checkout -- a.py b.py", [], ["a.py", "b.py"], []),
    ("git restore src/x.py", [], ["src/x.py"], []),
    ("git apply <<EOF\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\nEOF", [], ["x.py"], []),
    ("git apply fix.patch", ["fix.patch"], [], []),
    (
        "apply_patch <<'PATCH'\n*** Begin Patch\n*** Update File: src/m.py\n@@\n-a\n+b\n"
        "*** Add File: n.py\n+x\n*** Delete File: o.py\n*** End Patch\nPATCH",
        [], ["src/m.py", "n.py"], ["o.py"],
    ),
    ("echo $(cat a.txt) > b.txt", ["a.txt"], ["b.txt"], []),
    ("ls # trailing comment > not_a_file", ["."], [], []),
    ("open src/f.py 14", ["src/f.py"], [], []),
    ("str_replace_editor str_replace /repo/a.py --old_str x --new_str y", [], ["/repo/a.py"], []),
]


@pytest.mark.parametrize(("cmd", "reads", "writes", "deletes"), CASES)
def test_effects(cmd: str, reads: list[str], writes: list[str], deletes: list[str]) -> None:
    eff = parse_command(cmd)
    assert list(eff.reads) == reads
    assert list(eff.writes) == writes
    assert list(eff.deletes) == deletes


@pytest.mark.parametrize(
    ("cmd", "is_test", "is_build"),
    [
        ("pytest -q tests/test_a.py", True, False),
        ("python -m pytest -x", True, False),
        ("python3 -m unittest discover", True, False),
        ("python -m test test_os", True, False),
        ("python tests/runtests.py queries", True, False),
        ("./bin/test sympy/core", True, False),
        ("tox -e py311", True, False),
        ("cd proj && npm test", True, False),
        ("pnpm --filter web test", True, False),
        ("go test ./...", True, False),
        ("cargo test --release", True, False),
        ("make test", True, False),
        ("make -j4", False, True),
        ("cargo build", False, True),
        ("npm install", False, True),
        ("pip install -e .", False, True),
        ("python setup.py build_ext -i", False, True),
        ("cat a.py", False, False),
    ],
)
def test_test_and_build_flags(cmd: str, is_test: bool, is_build: bool) -> None:
    eff = parse_command(cmd)
    assert (eff.is_test, eff.is_build) == (is_test, is_build)
    assert eff.interpreted


@pytest.mark.parametrize(
    "cmd",
    [
        "for f in *.py; do sed -i s/a/b/ $f; done",  # write behind a loop variable
        "rm *.pyc",  # glob delete
        "python - <<'PY'\nopen('x','w').write('y')\nPY",  # inline script
        "python reproduce.py",  # script run
        "git checkout main",  # branch switch rewrites arbitrary files
        "git reset --hard HEAD",
        "frobnicate --all",  # unknown program
        'echo "unterminated',  # neither parser understands it
        "edit 12:14",  # SWE-agent edit of an unknown open file
    ],
)
def test_uninterpreted(cmd: str) -> None:
    assert parse_command(cmd).interpreted is False


def test_partial_effects_survive_uninterpreted_parts() -> None:
    eff = parse_command("cat a.py && frobnicate && echo x > b.py")
    assert eff.interpreted is False
    assert eff.reads == ("a.py",) and eff.writes == ("b.py",)


def test_argv_form_and_apply_patch_argv() -> None:
    assert parse_command(argv=["bash", "-lc", "cat x > y"]) == ShellEffects(reads=("x",), writes=("y",))
    eff = parse_command(argv=["apply_patch", "*** Begin Patch\n*** Update File: q.py\n*** End Patch"])
    assert eff.writes == ("q.py",) and eff.interpreted


def test_commit_flag_and_empty() -> None:
    assert parse_command("git add -A && git commit -m wip").is_commit
    assert parse_command(None).interpreted is False


def test_patch_paths_unified_and_move() -> None:
    w, d = patch_paths("--- a/x.py\n+++ b/x.py\n--- a/gone.py\n+++ /dev/null\n")
    assert w == ["x.py"] and d == ["gone.py"]
    w, d = patch_paths("*** Update File: a.py\n*** Move to: b.py\n")
    assert w == ["b.py"] and d == ["a.py"]


PLAIN = [c for c, *_ in CASES if "$" not in c and "(" not in c and "\\" not in c]


@pytest.mark.parametrize("cmd", PLAIN)
def test_fast_tokenizer_agrees_with_bashlex(cmd: str) -> None:
    """The fast path for plain commands must give exactly what bashlex gives."""
    assert parse_with(cmd, "fast") == parse_with(cmd, "bashlex")


@pytest.mark.parametrize("cmd", ["cat a > b && rm c", "sed -n '1,5p' x | tee y", "ls 2>&1 | head"])
def test_shlex_fallback_agrees_with_bashlex(cmd: str) -> None:
    assert parse_with(cmd, "shlex") == parse_with(cmd, "bashlex")


def test_bashlex_failure_falls_back_to_shlex() -> None:
    # bashlex rejects unquoted parentheses inside a word; the fallback still reads the path
    cmd = "bash -lc 'sed -n 1,20p app/(group)/page.tsx'"
    with pytest.raises(Exception):  # noqa: B017 - any bashlex error
        parse_with("sed -n 1,20p app/(group)/page.tsx", "bashlex")
    eff = parse_command(cmd)
    assert eff.reads == ("app/(group)/page.tsx",)


def test_fast_path_agrees_with_bashlex_on_generated_commands() -> None:
    """Every synthetic command the fast tokenizer takes parses identically with bashlex
    (quote-concatenated heredocs inside ``bash -lc '...'`` included)."""
    from features.synthetic import generate_trajectory

    n_fast = 0
    for seed in range(3):
        for e in generate_trajectory(400, seed=seed).events:
            if not e.command:
                continue
            try:
                fast = parse_with(e.command, "fast")
            except ValueError:
                continue  # not a plain command: the fast path does not take it
            n_fast += 1
            assert fast == parse_with(e.command, "bashlex"), e.command
    assert n_fast > 300


@pytest.mark.parametrize("cmd,expected", [
    ("pytest -x tests/", True),
    ("python -m pytest -q", True),
    ("python3 -m unittest discover", True),
    ("./python -m test test_os", True),
    ("tox -e py311", True),
    ("cd repo && npm test", True),
    (["bash", "-lc", "pnpm --filter @repo/web test"], True),
    ("bash -lc 'go test ./...'", True),
    ("cargo test --release", True),
    ("python3 tests/runtests.py sitemaps_tests", True),
    ("timeout 300 python manage.py test app", True),
    ("FOO=1 uv run pytest", True),
    ("npx vitest run", True),
    ("yarn run test:unit", True),
    ("make test", True),
    ("python -W ignore -m pytest", True),
    ("make -C build test", True),
    ("npm exec jest", True),
    ("yarn jest --ci", True),
    ("yarn add -D jest", False),
    ("python -c 'import pytest'", False),
    ("pnpm install --filter test", False),
    ("python3 reproduce_issue.py", False),
    ("pnpm --filter @repo/web lint", False),
    ("sed -n '1,20p' tests/test_x.py", False),
    ("echo pytest", False),
    ("cat <<'EOF' > t.sh\npytest\nEOF", False),
    ("npm install", False),
    ("git commit -m 'run pytest later'", False),
    (None, False),
])
def test_is_test_command(cmd: object, expected: bool) -> None:
    assert is_test_command(cmd) is expected


def test_is_git_commit() -> None:
    assert is_git_commit("git commit -m x")
    assert is_git_commit(["bash", "-lc", "git add -A && git -C repo commit -am 'x'"])
    assert not is_git_commit("git log --grep commit")
    assert not is_git_commit("echo git commit")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=list("ab -'\"\t\n;|&$#é()\\"), max_size=16))
def test_split_command_matches_shlex(s: str) -> None:
    # the fast path of split_command must agree with shlex.split everywhere
    try:
        ref = shlex.split(s)
    except ValueError:
        ref = None
    assert split_command(s) == ref


def test_unsplittable_text_gets_its_flags_from_the_same_rules() -> None:
    # an unbalanced quote: no tokenizer splits it; each command still meets the one rule
    eff = parse_command('cd app && pytest -k "slow')
    assert (eff.is_test, eff.interpreted) == (True, False)
    assert parse_command("echo \"it's pytest").is_test is False  # pytest is echo's argument
    assert parse_command("make -j4 'x").is_build is True


def test_split_command_remembered_splits_are_never_shared() -> None:
    first = split_command("python -m pytest -q tests")
    first.append("--changed")  # an event's argv is its own list
    again = split_command("python -m pytest -q tests")
    assert again == ["python", "-m", "pytest", "-q", "tests"]
    assert again is not split_command("python -m pytest -q tests")
    assert split_command("echo 'unbalanced") is None
    assert split_command("echo 'unbalanced") is None  # a remembered refusal stays one
    long = "echo " + "x" * 600  # beyond the remembered length: split every time
    assert split_command(long) == ["echo", "x" * 600]
