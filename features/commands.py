"""One command vocabulary: what the program of a simple command is and whether it runs tests.

The readers (event kinds), the shell parser (``features.shell``: file effects, test and
build flags) and live parsers all classify commands with these tables, so a command is a
test for one exactly when it is a test for the others. The tables:

* :data:`WRAPPERS`: programs that run the command after their own options (``env``,
  ``nohup``, ``unbuffer``, ``xvfb-run``, ``timeout``, ``sudo``, ``time``, ``nice``,
  ``stdbuf`` ...); :data:`RUNNERS`: a program's subcommand that runs the command after it
  (``uv run``, ``poetry run``, ``npm exec``, ``npx`` ...). :func:`command_start` skips both
  (and ``NAME=value`` assignments) to the program that does the work.
* Test runners: :data:`TEST_RUNNERS` (``pytest``, ``bats``, ``tox``, ``jest`` ...),
  :data:`TEST_SUBCOMMANDS` (``go test``, ``cargo test``, ``mvn verify`` ...),
  :data:`MAKE_TEST_TARGETS`, :data:`PYTHON_TEST_MODULES` (``python -m pytest``),
  :data:`TEST_SCRIPTS` (``runtests.py``, ``run_tests.sh`` ...) and JS package-manager
  scripts (``npm test``, ``yarn test:unit``). :func:`is_test_run` is the one rule.
* What the shell parser's per-program rules key on: :data:`SHELLS`, :data:`BUILD_TOOLS`,
  :data:`TOOLCHAINS`, :data:`INSTALLERS`, :data:`JS_PACKAGE_MANAGERS`, :data:`VCS`,
  :data:`FILE_READERS`, :data:`SEARCH_TOOLS`, :data:`NO_EFFECT`, :data:`ACI_COMMANDS`.

A script an agent wrote and runs (``python test_fix.py``) is not a test run: only the
project's runners are (its test suite is the verifier of the paper's verified progress).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "ACI_COMMANDS", "ASSIGNMENT", "BUILD_TOOLS", "FILE_READERS", "GIT_OPTIONS", "GIT_QUERIES",
    "GIT_READS", "INSTALLERS",
    "INTERPRETERS", "JS_PACKAGE_MANAGERS", "MAKE", "MAKE_OPTIONS", "MAKE_TEST_TARGETS",
    "NO_EFFECT", "PACKAGE_MANAGER_OPTIONS", "PACKAGE_MANAGER_QUERIES", "PYTHON",
    "PYTHON_OPTIONS", "PYTHON_TEST_MODULES", "RUNNERS", "SEARCH_OPTIONS", "SEARCH_TOOLS",
    "SHELLS", "TEST_RUNNERS", "TEST_SCRIPTS", "TEST_SUBCOMMANDS", "TOOLCHAINS", "VCS",
    "WRAPPERS", "Runner", "Wrapper", "command_start", "is_test_run", "might_commit",
    "might_run_tests", "positionals", "program_name", "program_runs_tests",
    "shell_script_option",
]

# ---------------------------------------------------------------------------------------
# Wrappers and runners: words before the program that does the work
# ---------------------------------------------------------------------------------------

ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class Wrapper:
    """A program that runs the command after its own options and operands."""

    value_options: frozenset[str] = frozenset()  # options that take the next word
    operands: int = 0  # its own positional words first (timeout's duration)
    assignments: bool = False  # NAME=value words of its own (env)
    lookup_options: frozenset[str] = frozenset()  # with one of these it runs nothing


WRAPPERS: dict[str, Wrapper] = {
    "env": Wrapper(frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}),
                   assignments=True),
    "nohup": Wrapper(),
    "unbuffer": Wrapper(),
    "xvfb-run": Wrapper(frozenset({"-n", "--server-num", "-s", "--server-args", "-f",
                                   "--auth-file", "-e", "--error-file", "-p",
                                   "--xauth-protocol"})),
    "timeout": Wrapper(frozenset({"-s", "--signal", "-k", "--kill-after"}), operands=1),
    "sudo": Wrapper(frozenset({"-u", "--user", "-g", "--group", "-C", "--close-from", "-h",
                               "--host", "-p", "--prompt", "-r", "--role", "-t", "--type",
                               "-U", "--other-user", "-D", "--chdir"})),
    "time": Wrapper(frozenset({"-f", "--format", "-o", "--output"})),
    "nice": Wrapper(frozenset({"-n", "--adjustment"})),
    "ionice": Wrapper(frozenset({"-c", "--class", "-n", "--classdata"})),
    "stdbuf": Wrapper(frozenset({"-i", "--input", "-o", "--output", "-e", "--error"})),
    "exec": Wrapper(frozenset({"-a"})),
    "command": Wrapper(lookup_options=frozenset({"-v", "-V"})),
    "builtin": Wrapper(),
}


@dataclass(frozen=True)
class Runner:
    """A program (with a subcommand, or none) that runs the command after it."""

    subcommands: frozenset[str] = frozenset()  # empty: the program itself runs it (npx)
    value_options: frozenset[str] = frozenset()  # of the program and of the subcommand


# options of package managers and build tools that take the next word as their value
PACKAGE_MANAGER_OPTIONS = frozenset({
    "--filter", "-F", "--prefix", "-C", "--dir", "--cwd", "--workspace", "-w", "-f",
    "--file", "--directory", "--manifest-path", "--project", "-P",
})
_CONDA_OPTIONS = frozenset({"-n", "--name", "-p", "--prefix", "--cwd"})

RUNNERS: dict[str, Runner] = {
    "uv": Runner(frozenset({"run"}), frozenset({
        "--with", "--with-requirements", "--python", "-p", "--project", "--directory",
        "--package", "--extra", "--group", "--env-file", "--index", "--from"})),
    "poetry": Runner(frozenset({"run"}), frozenset({"-C", "--directory", "-P", "--project"})),
    "pipenv": Runner(frozenset({"run"})),
    "hatch": Runner(frozenset({"run"}), frozenset({"-e", "--env"})),
    "pdm": Runner(frozenset({"run"}), frozenset({"-p", "--project"})),
    "rye": Runner(frozenset({"run"})),
    "pipx": Runner(frozenset({"run"}), frozenset({"--spec", "--python"})),
    "conda": Runner(frozenset({"run"}), _CONDA_OPTIONS),
    "mamba": Runner(frozenset({"run"}), _CONDA_OPTIONS),
    "micromamba": Runner(frozenset({"run"}), _CONDA_OPTIONS),
    "bundle": Runner(frozenset({"exec"})),
    **{pm: Runner(frozenset({"exec", "x", "dlx"}), PACKAGE_MANAGER_OPTIONS)
       for pm in ("npm", "pnpm", "yarn", "bun")},
    "npx": Runner(value_options=frozenset({"-p", "--package", "-c", "--call"})),
    "pnpx": Runner(value_options=frozenset({"-p", "--package"})),
    "bunx": Runner(value_options=frozenset({"-p", "--package"})),
}


def program_name(word: str) -> str:
    """The program a command word names: its last path component (``/usr/bin/env`` -> env).
    ``posixpath.basename``'s answer by ``rpartition`` (a fifth of its cost: command_start
    asks it of every word it skips)."""
    return word.rpartition("/")[2]


def positionals(args: Sequence[str], value_options: frozenset[str] | set[str]) -> list[str]:
    """The non-option words of ``args``; an option in ``value_options`` takes the next word
    with it; every word after ``--`` is positional."""
    out: list[str] = []
    skip = False
    ddash = False
    for a in args:
        if skip:
            skip = False
        elif ddash:
            out.append(a)
        elif a == "--":
            ddash = True
        elif a.startswith("-") and a != "-":
            skip = a in value_options
        else:
            out.append(a)
    return out


def _after_options(argv: Sequence[str], i: int, value_options: frozenset[str]) -> int:
    """Index of the first word from ``i`` on that is not an option (or its value); a
    ``--`` ends the options and is skipped."""
    n = len(argv)
    while i < n:
        a = argv[i]
        if a == "--":
            return i + 1
        if not a.startswith("-") or a == "-":
            return i
        i += 2 if a in value_options else 1
    return i


def _skip_wrapper(argv: Sequence[str], i: int, w: Wrapper) -> int | None:
    """Index of the wrapped command's first word, or None when the wrapper runs nothing."""
    n = len(argv)
    j = i + 1
    while j < n:
        a = argv[j]
        if a in w.lookup_options:
            return None
        if a == "--":
            j += 1
            break
        if w.assignments and ASSIGNMENT.match(a):
            j += 1
        elif a.startswith("-") and a != "-":
            j += 2 if a in w.value_options else 1
        else:
            break
    return min(j + w.operands, n)


def _skip_runner(argv: Sequence[str], i: int, r: Runner) -> int | None:
    """Index of the command a runner runs, or None when this is not a run (``uv sync``)."""
    if not r.subcommands:
        return _after_options(argv, i + 1, r.value_options)
    j = _after_options(argv, i + 1, r.value_options)
    if j >= len(argv) or argv[j] not in r.subcommands:
        return None
    k = _after_options(argv, j + 1, r.value_options)
    return k if k < len(argv) else None


def command_start(argv: Sequence[str]) -> int:
    """Index of the word that names the program doing the work: ``NAME=value`` words,
    wrappers (with their options) and runners (``uv run``, ``npx`` ...) are skipped.
    ``len(argv)`` when nothing is left to run (``env X=1``, ``exec``)."""
    i = 0
    n = len(argv)
    while i < n:
        word = argv[i]
        if "=" in word and ASSIGNMENT.match(word):
            i += 1
            continue
        name = program_name(word)
        w = WRAPPERS.get(name)
        if w is not None:
            j = _skip_wrapper(argv, i, w)
            if j is None or (j >= n and name in ("env", "command")):
                return i  # `command -v x`, a bare `env`: the program itself (no effect)
            i = j
            continue
        r = RUNNERS.get(name)
        if r is not None:
            j = _skip_runner(argv, i, r)
            if j is None:
                return i
            i = j
            continue
        return i
    return i


# ---------------------------------------------------------------------------------------
# Test runners
# ---------------------------------------------------------------------------------------

TEST_RUNNERS = frozenset({
    "pytest", "py.test", "tox", "nox", "jest", "vitest", "mocha", "ava", "karma", "rspec",
    "phpunit", "ctest", "bats", "nosetests", "nose2", "trial", "unittest",
})
# program -> its subcommands that run tests (first positional after the program's options)
TEST_SUBCOMMANDS: dict[str, frozenset[str]] = {
    "go": frozenset({"test"}),
    "cargo": frozenset({"test", "nextest"}),
    "mvn": frozenset({"test", "verify", "integration-test"}),
    "gradle": frozenset({"test", "check"}),
    "gradlew": frozenset({"test", "check"}),
    "dotnet": frozenset({"test"}),
    "deno": frozenset({"test"}),
    "swift": frozenset({"test"}),
    "mix": frozenset({"test"}),
    "stack": frozenset({"test"}),
    "cabal": frozenset({"test"}),
    "bazel": frozenset({"test"}),
    "bazelisk": frozenset({"test"}),
    "sbt": frozenset({"test"}),
    "zig": frozenset({"test"}),
    "django-admin": frozenset({"test"}),
}
MAKE = frozenset({"make", "gmake"})
MAKE_OPTIONS = frozenset({"-C", "-f", "-j", "-l", "-o", "-W"})
# a make target that is one of these, or starts with "test", runs tests
MAKE_TEST_TARGETS = frozenset({"test", "tests", "check", "verify", "spec", "unittest"})
PYTHON = re.compile(r"^(python[0-9.]*|pypy[0-9.]*)$")
PYTHON_OPTIONS = frozenset({"-W", "-X", "-Q"})
PYTHON_TEST_MODULES = frozenset({
    "pytest", "py.test", "unittest", "test", "tox", "nox", "nose", "nose2", "doctest", "xdist",
})
# scripts that run a project's test suite, by file name (run by path, by name, or by an
# interpreter or shell); ``manage.py test`` and ``setup.py test`` too
TEST_SCRIPTS = frozenset({
    "runtests.py", "run_tests.py", "runtest.py", "run-tests.py",
    "runtests.sh", "run_tests.sh", "run-tests.sh",
})
JS_PACKAGE_MANAGERS = frozenset({"npm", "pnpm", "yarn", "bun"})
SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh"})


def _python_runs_tests(args: Sequence[str]) -> bool:
    """Whether ``python ARGS`` (or ``coverage run ARGS``) runs a test runner."""
    skip = False
    for j, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a == "-m":
            if j + 1 >= len(args):
                return False
            mod = args[j + 1]
            if mod == "django":
                return positionals(args[j + 2:], set())[:1] == ["test"]
            return mod in PYTHON_TEST_MODULES
        if a == "-c" or a == "-":
            return False  # inline code or a script on stdin
        if a in PYTHON_OPTIONS:
            skip = True
            continue
        if a.startswith("-"):
            continue
        return _script_runs_tests(a, args[j + 1:])
    return False


def _script_runs_tests(script: str, rest: Sequence[str]) -> bool:
    name = program_name(script)
    if name in TEST_SCRIPTS or name in ("pytest", "py.test"):
        return True
    if name == "manage.py":
        return "test" in rest
    if name == "setup.py":
        return positionals(rest, set())[:1] == ["test"]
    return False


def is_test_run(argv: Sequence[str]) -> bool:
    """Whether one simple command (its words, quotes removed) runs tests: a test runner
    (``pytest``, ``bats``, ``tox``, ``jest`` ...), a toolchain's test subcommand (``go
    test``, ``cargo test``), ``make test``/``check``, ``python -m pytest``/``unittest``, a
    project's test script (``runtests.py``, ``manage.py test``, ``bin/test``), a JS
    package-manager test script (``npm test``, ``pnpm --filter web test``, ``yarn
    test:unit``, ``yarn jest``), behind any wrappers and runners (``timeout 60 uv run
    pytest``). Shell syntax (``&&``, ``bash -c``) is the shell parser's business."""
    i = command_start(argv)
    if i >= len(argv):
        return False
    return program_runs_tests(argv[i], argv[i + 1:])


def program_runs_tests(word: str, args: Sequence[str]) -> bool:
    """:func:`is_test_run` of a command whose program word is ``word`` (wrappers and
    runners already skipped: :func:`command_start`), for callers that know where it
    starts (the shell parser)."""
    prog = program_name(word)
    if prog not in _TEST_PROGRAMS and not prog.startswith(("python", "pypy")):
        return False  # no rule below can say yes (most commands: git, cat, sed, ...)
    if prog in TEST_RUNNERS:
        return True
    subs = TEST_SUBCOMMANDS.get(prog)
    if subs is not None:
        pos = positionals(args, PACKAGE_MANAGER_OPTIONS)
        return bool(pos) and pos[0] in subs
    if prog in MAKE:
        return any(t in MAKE_TEST_TARGETS or t.startswith("test")
                   for t in positionals(args, MAKE_OPTIONS) if "=" not in t)
    if PYTHON.match(prog):
        return _python_runs_tests(args)
    if prog == "coverage":
        return bool(args) and args[0] == "run" and _python_runs_tests(args[1:])
    if prog in JS_PACKAGE_MANAGERS:
        return _package_script_is_test(prog, args)
    if prog in SHELLS:
        pos = positionals(args, {"-o", "+o", "-O"})
        return bool(pos) and shell_script_option(args) is None and _script_runs_tests(
            pos[0], pos[1:])
    if prog == "test":
        # bin/test, ./test, or a bare `test` (a project script: `hatch run test`); not the
        # test builtin (`test -f x`, `/usr/bin/test ...`)
        if not args:
            return not word.startswith(("/usr/", "/bin/"))
        return "/" in word and not word.startswith(("/usr/", "/bin/")) and not args[0].startswith("-")
    return _script_runs_tests(word, args)


# every program name for which a rule of program_runs_tests can answer yes (PYTHON's names
# aside: they all start with python or pypy); the last rule is _script_runs_tests'
_TEST_PROGRAMS = frozenset({
    *TEST_RUNNERS, *TEST_SUBCOMMANDS, *MAKE, "coverage", *JS_PACKAGE_MANAGERS, *SHELLS, "test",
    *TEST_SCRIPTS, "pytest", "py.test", "manage.py", "setup.py",
})


def _unquoted(text: str) -> str:
    """``text`` without quote characters and backslashes: three C-level replaces, a fifth
    of the cost of ``str.translate`` with a deletion table (asked of every new command)."""
    return text.replace("'", "").replace('"', "").replace("\\", "")


# a test run names one of these words (its program, subcommand, target, module, script or
# package script); the pattern is built from the tables above, so it cannot fall behind them
_TEST_WORDS = sorted(
    {*TEST_RUNNERS, *PYTHON_TEST_MODULES, *MAKE_TEST_TARGETS, *TEST_SCRIPTS, "test", "spec",
     "tst", *(s for subs in TEST_SUBCOMMANDS.values() for s in subs)}, key=len, reverse=True)
# a word holding another one (pytest, runtests.py, nosetests ...) can only be found where
# that one is: the search tries the rest alone (16 words, not 35: half the cost)
_TEST_HINT_WORDS = [w for w in _TEST_WORDS if not any(v != w and v in w for v in _TEST_WORDS)]
_TEST_HINT = re.compile("|".join(re.escape(w) for w in _TEST_HINT_WORDS) + r"|\bt\b")


def might_run_tests(text: str) -> bool:
    """A cheap necessary condition for a command text to run tests: one of the words
    :func:`is_test_run` keys on appears in it (quotes and backslashes dropped). False means
    no simple command in the text is a test run; True means parse it to know."""
    return _TEST_HINT.search(_unquoted(text)) is not None


def might_commit(text: str) -> bool:
    """A cheap necessary condition for a command text to run ``git commit``."""
    text = _unquoted(text)
    return "commit" in text and any(v in text for v in VCS)


def shell_script_option(args: Sequence[str]) -> int | None:
    """Index in a shell's arguments of ``-c`` (``-lc``, ``-ic`` ...): the next word is the
    script it runs; None when it runs a script file or its standard input."""
    for i, a in enumerate(args):
        if a.startswith("-") and not a.startswith("--") and "c" in a[1:]:
            return i
    return None


def _package_script_is_test(prog: str, args: Sequence[str]) -> bool:
    """``npm test``, ``npm run test:unit``, ``pnpm --filter web test``, ``yarn jest``."""
    if "--" in args:
        args = args[: list(args).index("--")]
    pos = positionals(args, PACKAGE_MANAGER_OPTIONS)
    if not pos:
        return False
    first = pos[0]
    script = (pos[1] if len(pos) > 1 else "") if first in ("run", "run-script") else first
    if script in ("t", "tst") or "test" in script or "spec" in script:
        return True
    return prog != "npm" and first in TEST_RUNNERS  # yarn jest, pnpm vitest, bun jest


# ---------------------------------------------------------------------------------------
# What the shell parser's per-program rules key on
# ---------------------------------------------------------------------------------------

# programs that read the files they name; value: their options that take a value
FILE_READERS: dict[str, frozenset[str]] = {p: frozenset(v) for p, v in {
    "cat": (), "nl": ("-b", "-n", "-s", "-v", "-w", "-i"), "head": ("-n", "-c"),
    "tail": ("-n", "-c", "-s"), "less": (), "more": (), "wc": (), "stat": ("-c", "-f"),
    "file": (), "diff": ("-U", "-C", "-x", "-X", "-I"), "cmp": (), "md5sum": (),
    "sha1sum": (), "sha256sum": (), "du": ("-d",), "tac": (), "strings": (),
    "xxd": (), "hexdump": (), "od": (), "bat": ("-r", "--line-range", "-l"),
    "sort": ("-k", "-t", "-o"), "uniq": (), "cut": ("-d", "-f", "-c", "-b"),
    "column": ("-t", "-s"), "realpath": (), "readlink": (), "tree": ("-L", "-I", "-P"),
    "source": (), ".": (), "jq": ("--arg", "--argjson"), "wc-l": (), "view": (),
    "cloc": (), "pygmentize": ("-l", "-f"), "iconv": ("-f", "-t"), "diff3": (),
}.items()}
SEARCH_TOOLS = frozenset({"grep", "egrep", "fgrep", "rg", "ag", "ack", "git-grep"})
SEARCH_OPTIONS = frozenset({
    "-e", "-f", "-m", "-A", "-B", "-C", "-g", "-t", "-T", "--max-count", "--context",
    "--glob", "--type", "--type-not", "-d", "-D", "--include", "--exclude", "-M",
    "--max-columns", "--regexp", "--file", "-j", "--threads", "--sort", "--sortr", "-E",
})
# programs without file effects
NO_EFFECT = frozenset({
    "echo", "printf", "true", "false", "pwd", "export", "set", "unset", "which", "type",
    "sleep", "date", "whoami", "env", "alias", "exit", "clear", "history", "uname", "id",
    "hostname", "nproc", "free", "df", "ps", "kill", "jobs", "wait", "read", "shift", "local",
    "declare", "test", "[", "[[", "basename", "dirname", "seq", "yes", "tr", "mkdir", "pushd",
    "popd", "umask", "ulimit", "trap", "return", "break", "continue", "hash", "command",
    "shopt", "printenv", "locale", "lsb_release", "top", "uptime", "expr", "bc", "tput",
    "stty", "ss", "netstat", "lsof", "pgrep", "pip-list", "conda", "tty", "getconf", ":",
})
BUILD_TOOLS = frozenset({
    "cmake", "ninja", "meson", "tsc", "webpack", "gcc", "g++", "clang", "clang++", "cc", "c++",
    "javac", "rustc", "esbuild", "rollup", "scons", "autoreconf", "configure", "maturin", "poetry", "pdm", "hatch", "flit",
})
# toolchains: their build subcommands (tests: TEST_SUBCOMMANDS; anything else is unknown)
TOOLCHAINS: dict[str, frozenset[str]] = {p: frozenset({
    "build", "install", "compile", "package", "check", "clippy", "vet", "run", "generate",
    "fmt", "restore", "publish", "get", "mod",
}) for p in ("go", "cargo", "dotnet", "mix", "bazel", "bazelisk", "sbt", "mvn", "gradle",
             "gradlew", "deno", "swift", "zig", "stack", "cabal")}
# package installers: their subcommands that install or build
INSTALLERS: dict[str, frozenset[str]] = {p: frozenset({
    "install", "sync", "pip", "add", "uninstall", "remove", "create", "lock", "build",
}) for p in ("pip", "pip3", "uv", "conda", "mamba", "pipx")}
# JS package-manager subcommands that only inspect
PACKAGE_MANAGER_QUERIES = frozenset({
    "view", "info", "ls", "list", "outdated", "why", "config", "whoami", "help", "version",
})
VCS = frozenset({"git"})
GIT_OPTIONS = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace"})  # take a value
# git subcommands that read the paths they name (the work tree when none)
GIT_READS = frozenset({"diff", "status", "grep", "ls-files", "difftool", "blame", "annotate"})
# git subcommands without effects on the work tree (``show -- PATH`` reads PATH)
GIT_QUERIES = frozenset({
    "show", "log", "shortlog", "rev-parse", "rev-list", "branch", "tag", "remote", "fetch",
    "config", "describe", "reflog", "show-ref", "cat-file", "ls-tree", "init", "help",
    "version", "--version", "worktree-list", "count-objects", "var", "for-each-ref", "push",
    "notes", "bisect-log", "check-ignore", "name-rev", "merge-base",
})
INTERPRETERS = re.compile(
    r"^(python[0-9.]*|pypy[0-9.]*|node|ruby|perl|php|Rscript|deno|bun|ts-node|lua)$")
# SWE-agent's agent-computer interface commands and its str_replace_editor tool
ACI_COMMANDS = frozenset({
    "open", "goto", "scroll_down", "scroll_up", "create", "find_file", "search_dir",
    "search_file", "submit", "edit", "str_replace_editor", "view_file", "insert",
})
