"""Shell command parser: which files a command reads, writes and deletes.

The provenance graph (``features.graph``) needs observable file effects of each agent
command. :func:`parse_command` parses the command with bashlex (falling back to shlex plus
rules when bashlex cannot parse it) and applies per-program rules: ``cat``/``sed -n``/
``grep``/``rg``/``ls``/``find``/``git diff`` read, redirections/``tee``/``sed -i``/``cp``/
``mv`` write, ``rm`` deletes, ``apply_patch``/``git apply``/``patch`` write the paths named
in their patch headers. Test and build commands are flagged; their file inputs are the
whole workspace, which the graph adds (``build_io``).

A command is ``interpreted=False`` when any part of it has file effects the rules cannot pin
down (an unknown program, a script run, a path behind ``$VAR`` or a glob that is written
or deleted, ``git reset --hard``...). What was understood is still returned.

Paths stay relative to the command's working directory (``cd`` inside the command is
followed); ``./x`` becomes ``x``; a read of a directory (``ls src``, ``grep -r x src``,
``rg x`` = ``.``) is returned as that directory and the graph expands it to the files
under it.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from types import ModuleType
from typing import TYPE_CHECKING

from features.commands import (
    ACI_COMMANDS,
    BUILD_TOOLS,
    FILE_READERS,
    GIT_OPTIONS,
    GIT_QUERIES,
    GIT_READS,
    INSTALLERS,
    INTERPRETERS,
    JS_PACKAGE_MANAGERS,
    MAKE,
    NO_EFFECT,
    PACKAGE_MANAGER_QUERIES,
    SEARCH_OPTIONS,
    SEARCH_TOOLS,
    SHELLS,
    TEST_RUNNERS,
    TOOLCHAINS,
    VCS,
    command_start,
    might_commit,
    might_run_tests,
    positionals,
    program_name,
    program_runs_tests,
    shell_script_option,
)
from features.patches import patch_paths

if TYPE_CHECKING:
    import bashlex.ast


def _bashlex() -> ModuleType:
    """bashlex, imported on first use: it builds its parser tables when imported (~75 ms,
    every process that imports :mod:`features` paid it), and most command lines never need
    it (the plain-command tokenizer reads them)."""
    import bashlex
    import bashlex.errors  # noqa: F401  (bashlex.errors.ParsingError is caught below)

    return bashlex


__all__ = [
    "ShellEffects", "clear_cache", "is_git_commit", "is_test_command", "parse_command", "parse_with",
    "split_command",
]


@dataclass(frozen=True)
class ShellEffects:
    """File effects of one command. Tuples keep first-occurrence order, no duplicates."""

    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    deletes: tuple[str, ...] = ()
    is_test: bool = False
    is_build: bool = False
    interpreted: bool = True
    is_commit: bool = False


# ---------------------------------------------------------------------------------------
# Accumulator
# ---------------------------------------------------------------------------------------

_SPECIAL_FILES = re.compile(r"^(/dev/(null|stdout|stderr|stdin|tty|zero|random|urandom|fd/\d+)|-)$")
_GLOB = re.compile(r"[*?\[]")


@dataclass
class _Acc:
    ops: list[tuple[str, str]] = field(default_factory=list)  # (r|w|d, path) in order
    is_test: bool = False
    is_build: bool = False
    is_commit: bool = False
    interpreted: bool = True
    cwd: str = ""
    cwd_known: bool = True
    src: str = ""  # text bashlex positions refer to

    def _norm(self, path: str) -> str | None:
        if not path or _SPECIAL_FILES.match(path):
            return None
        if not self.cwd_known and not path.startswith(("/", "~")):
            self.interpreted = False
        if self.cwd and not path.startswith(("/", "~")):
            path = posixpath.join(self.cwd, path)
        path = posixpath.normpath(path)
        if path.startswith("//"):
            path = path[1:]
        return path

    def read(self, path: str, dynamic: bool = False) -> None:
        if dynamic or "$" in path or "`" in path:
            return  # a read we cannot resolve: not a file effect we can name
        if _GLOB.search(path):
            head = _GLOB.split(path, 1)[0]
            path = head.rsplit("/", 1)[0] if "/" in head else "."
        p = self._norm(path)
        if p is not None:
            self.ops.append(("r", p))

    def write(self, path: str, dynamic: bool = False) -> None:
        if dynamic or "$" in path or "`" in path or _GLOB.search(path):
            self.interpreted = False
            return
        p = self._norm(path)
        if p is not None:
            self.ops.append(("w", p))

    def delete(self, path: str, dynamic: bool = False) -> None:
        if dynamic or "$" in path or "`" in path or _GLOB.search(path):
            self.interpreted = False
            return
        p = self._norm(path)
        if p is not None:
            self.ops.append(("d", p))

    def result(self) -> ShellEffects:
        if not self.ops:
            return _no_files(self.is_test, self.is_build, self.interpreted, self.is_commit)
        reads: dict[str, None] = {}
        final: dict[str, str] = {}
        written_here: set[str] = set()
        for op, p in self.ops:
            if op == "r":
                if p not in written_here:
                    reads.setdefault(p, None)
            else:
                final[p] = op
                if op == "w":
                    written_here.add(p)
        return ShellEffects(
            reads=tuple(reads),
            writes=tuple(p for p, op in final.items() if op == "w"),
            deletes=tuple(p for p, op in final.items() if op == "d"),
            is_test=self.is_test,
            is_build=self.is_build,
            interpreted=self.interpreted,
            is_commit=self.is_commit,
        )


@cache
def _no_files(is_test: bool, is_build: bool, interpreted: bool, is_commit: bool) -> ShellEffects:
    """The effects of a command that names no file (``git commit``, ``pytest``, ``echo``):
    one shared value per combination of flags (it is frozen), not a new one each time."""
    return ShellEffects(is_test=is_test, is_build=is_build, interpreted=interpreted,
                        is_commit=is_commit)


# ---------------------------------------------------------------------------------------
# Program rules: one table, program -> rule (the vocabulary is features.commands)
# ---------------------------------------------------------------------------------------


class _Word:
    __slots__ = ("text", "dynamic")

    def __init__(self, text: str, dynamic: bool = False) -> None:
        self.text = text
        self.dynamic = dynamic


class _Call:
    """One simple command as a rule sees it: the program (its name and the word naming
    it), its arguments (``dyn``: those holding an expansion), the heredoc fed to it, and
    whether the command vocabulary calls it a test run."""

    __slots__ = ("prog", "path", "args", "dyn", "heredoc", "acc", "is_test")

    def __init__(self, prog: str, path: str, args: list[str], dyn: set[str],
                 heredoc: str | None, acc: _Acc, is_test: bool) -> None:
        self.prog, self.path, self.args, self.dyn = prog, path, args, dyn
        self.heredoc, self.acc, self.is_test = heredoc, acc, is_test

    def rd(self, p: str) -> None:
        self.acc.read(p, p in self.dyn)

    def wr(self, p: str) -> None:
        self.acc.write(p, p in self.dyn)

    def dl(self, p: str) -> None:
        self.acc.delete(p, p in self.dyn)

    def patch(self, text: str) -> bool:
        """Write and delete what a patch's headers name; whether they named anything."""
        w, d = patch_paths(text)
        for p in w:
            self.acc.write(p)
        for p in d:
            self.acc.delete(p)
        return bool(w or d)


def _simple(words: list[_Word], redirects: list[tuple[str, str | None, str | None]], acc: _Acc) -> None:
    """Apply the rules of one simple command. redirects: (op, target word, heredoc body)."""
    heredoc = None
    for op, target, body in redirects:
        if body is not None:
            heredoc = body
        elif target is None:
            continue
        elif op in ("<",):
            acc.read(target)
        elif op in (">", ">>", ">|", "&>", "&>>", ">&"):
            acc.write(target)
    texts = [w.text for w in words]
    start = command_start(texts)  # past NAME=value words, wrappers and runners
    if start >= len(words):
        return
    if words[start].dynamic:
        acc.interpreted = False
        return
    path = texts[start]
    prog = program_name(path)
    args = texts[start + 1:]
    test = program_runs_tests(path, args)  # is_test_run's verdict, its command_start known
    if test:
        acc.is_test = True
    call = _Call(prog, path, args, {w.text for w in words[start + 1:] if w.dynamic},
                 heredoc, acc, test)
    rule = _RULES.get(prog)
    if rule is None:
        rule = _interpreter if INTERPRETERS.match(prog) else _other
    rule(call)


def _no_effect(c: _Call) -> None:
    """No file effects (``echo``, ``pwd``; a test runner: the graph adds its inputs)."""


def _other(c: _Call) -> None:
    """A program no rule knows: a test run reads the workspace (the graph's business);
    anything else has effects we cannot name (a script run by path is also read)."""
    if c.is_test:
        return
    if "/" in c.path:
        c.rd(c.path)
    c.acc.interpreted = False


def _shell(c: _Call) -> None:
    args = c.args
    idx = shell_script_option(args)
    if idx is not None:
        if idx + 1 < len(args):
            _parse_into(args[idx + 1], c.acc)
        return
    pos = positionals(args, {"-o", "+o", "-O"})
    if pos:
        c.rd(pos[0])
        if not c.is_test:
            c.acc.interpreted = False
    elif c.heredoc is not None:
        _parse_into(c.heredoc, c.acc)


def _cd(c: _Call) -> None:
    acc = c.acc
    pos = [a for a in c.args if not a.startswith("-")]
    if not pos or pos[0] in ("~", "-") or pos[0] in c.dyn or "$" in pos[0]:
        acc.cwd_known = False
    else:
        target = pos[0]
        acc.cwd = posixpath.normpath(target if target.startswith("/") else posixpath.join(acc.cwd, target))
        if acc.cwd == ".":
            acc.cwd = ""


def _build_tool(c: _Call) -> None:
    if not c.is_test:
        c.acc.is_build = True


def _apply_patch(c: _Call) -> None:
    text = c.args[0] if c.args else (c.heredoc or "")
    if not text:
        c.acc.interpreted = False
        return
    c.patch(text)


def _patch(c: _Call) -> None:
    args = c.args
    pos = positionals(args, {"-p", "-d", "-i", "-o", "-B", "-F", "-z", "-V", "-D", "-r"})
    if "-i" in args:
        i = args.index("-i")
        if i + 1 < len(args):
            c.rd(args[i + 1])
    if pos:
        c.wr(pos[0])
    elif c.heredoc:
        c.patch(c.heredoc)
    else:
        c.acc.interpreted = False


def _file_reader(c: _Call) -> None:
    pos = positionals(c.args, FILE_READERS[c.prog])
    for p in pos:
        c.rd(p)
    if c.prog == "tree" and not pos:
        c.acc.read(".")


def _search(c: _Call) -> None:
    args, prog = c.args, c.prog
    pos = positionals(args, SEARCH_OPTIONS)
    has_pattern_opt = any(a in ("-e", "-f", "--regexp", "--file") or a.startswith(("--regexp=", "--file=")) for a in args)
    files_only = prog == "rg" and "--files" in args
    paths = pos if (has_pattern_opt or files_only) else pos[1:]
    recursive = prog not in ("grep", "egrep", "fgrep") or any(
        a in ("-r", "-R", "--recursive") or (a.startswith("-") and not a.startswith("--") and ("r" in a or "R" in a)) for a in args
    )
    for p in paths:
        c.rd(p)
    if not paths and recursive:
        c.acc.read(".")


def _ls(c: _Call) -> None:
    for p in positionals(c.args, {"-I", "--ignore", "-w", "-T"}) or ["."]:
        c.rd(p)


_FIND_EXEC = {"-exec", "-execdir", "-ok", "-okdir"}
_FIND_EXEC_SAFE = FILE_READERS.keys() | {"grep", "egrep", "rg", "wc", "ls", "echo", "stat"}


def _find(c: _Call) -> None:
    args = c.args
    roots: list[str] = []
    i = 0
    while i < len(args) and not args[i].startswith(("-", "(", "!")):
        roots.append(args[i])
        i += 1
    expr = args[i:]
    for p in roots or ["."]:
        c.rd(p)
    if "-delete" in expr:
        c.acc.interpreted = False
    if any(a in _FIND_EXEC for a in expr):
        j = next(k for k, a in enumerate(expr) if a in _FIND_EXEC)
        sub = expr[j + 1 : j + 2]
        if not sub or posixpath.basename(sub[0]) not in _FIND_EXEC_SAFE:
            c.acc.interpreted = False


def _sed(c: _Call) -> None:
    args = c.args
    inplace = any(a == "-i" or a.startswith("-i") and not a.startswith("--") and len(a) > 1 or a.startswith("--in-place") for a in args)
    # -i may carry a suffix (-i.bak); -e/-f take values
    has_script_opt = any(a in ("-e", "-f", "--expression", "--file") for a in args)
    pos = positionals(args, {"-e", "-f", "--expression", "--file", "-l"})
    for p in pos if has_script_opt else pos[1:]:
        c.rd(p)
        if inplace:
            c.wr(p)


def _awk(c: _Call) -> None:
    args = c.args
    inplace = "inplace" in args
    pos = positionals(args, {"-F", "-v", "-f", "-i", "--include"})
    for p in [p for p in (pos if "-f" in args else pos[1:]) if not re.match(r"^[A-Za-z_]\w*=", p)]:
        c.rd(p)
        if inplace:
            c.wr(p)


def _perl(c: _Call) -> None:
    args = c.args
    if any(a.startswith("-") and "i" in a and not a.startswith("--") for a in args) and (
        "-e" in args or any(a.startswith("-") and a.endswith("e") for a in args)
    ):  # perl -i -pe '...' FILE: an in-place edit
        for p in positionals(args, {"-e", "-E", "-M", "-I"}):
            c.rd(p)
            c.wr(p)
        return
    _interpreter(c)


def _tee(c: _Call) -> None:
    for p in positionals(c.args, set()):
        c.wr(p)


def _copy(c: _Call) -> None:
    """cp, mv, ln, install, rsync: sources read (mv: deleted), destinations written."""
    args, prog, dyn = c.args, c.prog, c.dyn
    pos = positionals(args, {"-t", "--target-directory", "-S", "--suffix", "-m", "-o", "-g", "-e"})
    target_dir = None
    for k, a in enumerate(args):
        if a in ("-t", "--target-directory") and k + 1 < len(args):
            target_dir = args[k + 1]
        elif a.startswith("--target-directory="):
            target_dir = a.split("=", 1)[1]
    if target_dir is not None:
        srcs, dst, is_dir = pos, target_dir, True
    elif len(pos) >= 2:
        srcs, dst = pos[:-1], pos[-1]
        is_dir = len(srcs) > 1 or dst.endswith("/") or dst in (".", "..")
    else:
        c.acc.interpreted = False
        return
    if prog == "ln":
        for s in srcs:
            c.wr(posixpath.join(dst, posixpath.basename(s)) if is_dir else dst)
        return
    for s in srcs:
        c.rd(s)
        if prog == "mv":
            c.dl(s)
        if s in dyn or dst in dyn:
            c.acc.interpreted = False
            continue
        c.wr(posixpath.join(dst, posixpath.basename(s.rstrip("/"))) if is_dir else dst)


def _remove(c: _Call) -> None:
    for p in positionals(c.args, set()):
        c.dl(p)


def _touch(c: _Call) -> None:
    """touch, truncate, chmod, chown, chgrp: the files named are written."""
    pos = positionals(c.args, {"-s", "--size", "-r", "--reference", "-d", "-t"})
    if c.prog in ("chmod", "chown", "chgrp") and pos:
        pos = pos[1:]
    for p in pos:
        c.wr(p)


def _dd(c: _Call) -> None:
    for a in c.args:
        if a.startswith("if="):
            c.rd(a[3:])
        elif a.startswith("of="):
            c.wr(a[3:])


_PM_OPTIONS = {"--filter", "-F", "--prefix", "-C", "--dir", "-w", "--workspace", "--cwd"}


def _package_manager(c: _Call) -> None:
    """npm/yarn/pnpm/bun: a package script or an install is a build, a query nothing."""
    if c.is_test:
        return
    args = c.args
    sub = positionals(args, _PM_OPTIONS)
    if not sub:
        if not any(a in ("-v", "--version", "-h", "--help") for a in args):
            c.acc.is_build = True  # bare `npm`/`yarn`/`pnpm` installs
        return
    if sub[0] not in PACKAGE_MANAGER_QUERIES:
        c.acc.is_build = True  # install, build, lint, check-types, any package script


def _toolchain(c: _Call) -> None:
    """go, cargo, mvn, gradle, ...: a build subcommand builds; an unknown one is opaque."""
    if c.is_test:
        return
    sub = [a for a in c.args if not a.startswith("-")]
    if sub and sub[0] in TOOLCHAINS[c.prog]:
        c.acc.is_build = True
    else:
        c.acc.interpreted = False


def _installer(c: _Call) -> None:
    """pip/uv/mamba/pipx: install and the like build; list/show/freeze have no effects."""
    sub = [a for a in c.args if not a.startswith("-")]
    if sub and sub[0] in INSTALLERS[c.prog]:
        c.acc.is_build = True


def _aci(c: _Call) -> None:
    """SWE-agent's interface commands: open/view read, create/str_replace_editor write."""
    prog, args, acc = c.prog, c.args, c.acc
    if prog in ("open", "view_file") and args:
        c.rd(args[0])
    elif prog == "create" and args:
        c.wr(args[0])
    elif prog in ("find_file", "search_dir") and args:
        acc.read(args[1] if len(args) > 1 else ".")
    elif prog == "search_file" and len(args) > 1:
        c.rd(args[1])
    elif prog == "submit":
        acc.read(".")  # produces the diff of the workspace
    elif prog == "str_replace_editor" and len(args) >= 2:
        if args[0] == "view":
            c.rd(args[1])
        else:  # create, str_replace, insert, undo_edit
            c.wr(args[1])
    elif prog in ("goto", "scroll_down", "scroll_up"):
        return  # moves the window over the already-open file
    else:
        acc.interpreted = False  # edit/insert/search_file without a file: the open file is unknown


_PY_BUILD_MODULES = {"pip", "build", "compileall", "py_compile", "setup", "installer", "maturin"}
_PY_QUIET_MODULES = {"venv", "virtualenv", "http.server", "site", "this", "timeit", "platform"}


def _interpreter(c: _Call) -> None:
    prog, args, acc = c.prog, c.args, c.acc
    if prog.startswith(("python", "pypy")):
        if "-m" in args:
            i = args.index("-m")
            mod = args[i + 1] if i + 1 < len(args) else ""
            rest = args[i + 2 :]
            if c.is_test:
                return
            if mod in _PY_BUILD_MODULES:
                acc.is_build = True
                if mod == "py_compile":
                    for p in rest:
                        c.rd(p)
            elif mod == "json.tool":
                for p in positionals(rest, set())[:1]:
                    c.rd(p)
            elif mod not in _PY_QUIET_MODULES:
                acc.interpreted = False
            return
        if any(a in ("-V", "--version") for a in args):
            return
        if "-c" in args or (args and args[0] == "-") or (not args and c.heredoc is not None):
            acc.interpreted = False
            return
        pos = positionals(args, {"-W", "-X", "-Q"})
        if not pos:
            acc.interpreted = False
            return
        c.rd(pos[0])
        if c.is_test:
            return
        if posixpath.basename(pos[0]) == "setup.py" and len(pos) > 1:
            acc.is_build = True
        else:
            acc.interpreted = False
        return
    if any(a in ("-v", "--version", "-V") for a in args) and len(args) == 1:
        return
    pos = positionals(args, {"-e", "-E", "-r", "-I", "-M"})
    if pos and "-e" not in args:
        c.rd(pos[0])
    acc.interpreted = False


def _git_pathlike(a: str) -> bool:
    """Whether a git argument looks like a path (not an option, a revision or a remote)."""
    return not a.startswith("-") and ".." not in a and ":" not in a and "@" not in a and (
        "/" in a or "." in a
    ) and not a.startswith(("HEAD", "origin/"))


def _git(c: _Call) -> None:
    args, dyn, heredoc, acc = c.args, c.dyn, c.heredoc, c.acc
    i = 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] in GIT_OPTIONS and i + 1 < len(args):
            if args[i] == "-C":
                _simple([_Word("cd"), _Word(args[i + 1], args[i + 1] in dyn)], [], acc)
            i += 2
        else:
            i += 1
    if i >= len(args):
        return
    sub, rest = args[i], args[i + 1 :]
    if "--" in rest:
        k = rest.index("--")
        before, after = rest[:k], rest[k + 1 :]
    else:
        before, after = rest, None

    if sub in GIT_READS:
        if sub == "grep":
            pos = positionals(before, {"-e", "-f", "-A", "-B", "-C", "-m"})
            paths = after if after is not None else [p for p in pos[1:] if _git_pathlike(p)]
        elif sub == "blame":
            paths = after if after is not None else [p for p in before if _git_pathlike(p)][-1:]
        else:
            paths = after if after is not None else [p for p in before if _git_pathlike(p)]
        if sub == "diff" and any(a in ("--cached", "--staged") for a in before) and not paths:
            return
        for p in paths or ["."]:
            acc.read(p, p in dyn)
        return
    if sub in GIT_QUERIES:
        if sub == "show" and after:
            for p in after:
                acc.read(p, p in dyn)
        return
    if sub in ("add", "commit"):
        if sub == "commit":
            acc.is_commit = True
        return
    if sub == "apply" or sub == "am":
        flags = [a for a in before if a.startswith("-")]
        pos = positionals(before, {"-p", "-C", "--directory", "--exclude", "--include"})
        for p in pos:
            acc.read(p, p in dyn)
        if any(f in ("--check", "--stat", "--numstat", "--summary") for f in flags):
            return
        if heredoc and not pos:
            w, d = patch_paths(heredoc)
            for p in w:
                acc.write(p)
            for p in d:
                acc.delete(p)
            if w or d:
                return
        acc.interpreted = False
        return
    if sub in ("checkout", "restore"):
        if after is not None:
            for p in after:
                acc.write(p, p in dyn)
            return
        opts_with_value = {"-b", "-B", "--orphan", "-s", "--source", "--conflict"}
        pos = positionals(before, opts_with_value)
        if sub == "checkout" and any(a in ("-b", "-B", "--orphan") for a in before):
            return
        if sub == "restore":
            if "--staged" in before and "--worktree" not in before and "-W" not in before:
                return
            for p in pos:
                acc.write(p, p in dyn)
            return
        if len(pos) >= 2:
            for p in pos[1:]:
                acc.write(p, p in dyn)
            return
        if len(pos) == 1 and _git_pathlike(pos[0]):
            acc.write(pos[0], pos[0] in dyn)
            return
        acc.interpreted = False  # branch switch: rewrites arbitrary files
        return
    if sub == "mv":
        _simple([_Word("mv")] + [_Word(a, a in dyn) for a in rest], [], acc)
        return
    if sub == "rm":
        pos = positionals(before, set()) if after is None else after
        if "--cached" in before:
            return
        for p in pos:
            acc.delete(p, p in dyn)
        return
    acc.interpreted = False  # stash, reset, pull, merge, rebase, clean, cherry-pick, ...




# first registration wins: the order is the precedence of the rules
_RULES: dict[str, Callable[[_Call], None]] = {}
for _programs, _rule in (
    (SHELLS, _shell), (("cd",), _cd), (NO_EFFECT, _no_effect), (TEST_RUNNERS, _no_effect),
    (BUILD_TOOLS, _build_tool), (("apply_patch", "applypatch"), _apply_patch),
    (("patch",), _patch), (FILE_READERS, _file_reader), (SEARCH_TOOLS, _search),
    (("ls",), _ls), (("find",), _find), (("sed",), _sed), (("awk", "gawk", "mawk", "nawk"), _awk),
    (("perl",), _perl), (("tee",), _tee), (("cp", "mv", "ln", "install", "rsync"), _copy),
    (("rm", "rmdir", "unlink", "shred"), _remove),
    (("touch", "truncate", "chmod", "chown", "chgrp"), _touch), (("dd",), _dd),
    (VCS, _git), (JS_PACKAGE_MANAGERS, _package_manager), (MAKE, _build_tool),
    (TOOLCHAINS, _toolchain), (INSTALLERS, _installer), (ACI_COMMANDS, _aci),
):
    for _p in _programs:
        _RULES.setdefault(_p, _rule)
del _programs, _rule, _p


# ---------------------------------------------------------------------------------------
# bashlex walk
# ---------------------------------------------------------------------------------------

_QUOTED_HEREDOC = re.compile(r"<<(-?)\s*(['\"])([A-Za-z_][A-Za-z0-9_]*)\2")


def _word_of(node: bashlex.ast.node, acc: _Acc) -> _Word:
    """A bashlex word, unquoted from the source (bashlex keeps the quotes of mixed-quoted
    words such as 'a'"'"'b')."""
    dynamic = False
    for part in getattr(node, "parts", []) or []:
        if part.kind in ("commandsubstitution", "processsubstitution"):
            _walk(part.command, acc)
            dynamic = True
        elif part.kind in ("parameter", "tilde"):
            dynamic = dynamic or part.kind == "parameter"
    word = node.word
    if ("'" in word or '"' in word) and acc.src:
        raw = acc.src[node.pos[0] : node.pos[1]]
        try:
            parts = shlex.split(raw)
        except ValueError:
            parts = []
        if len(parts) == 1:
            word = parts[0]
    return _Word(word, dynamic)


def _walk(node: bashlex.ast.node, acc: _Acc) -> None:
    kind = node.kind
    if kind == "command":
        words: list[_Word] = []
        redirects: list[tuple[str, str | None, str | None]] = []
        for part in node.parts:
            if part.kind == "word":
                words.append(_word_of(part, acc))
            elif part.kind == "assignment":
                if not words:
                    continue
                words.append(_Word(part.word))
            elif part.kind == "redirect":
                body = None
                target: str | None = None
                heredoc = getattr(part, "heredoc", None)
                if heredoc is not None:
                    body = heredoc.value.rsplit("\n", 1)[0] if "\n" in heredoc.value else ""
                    redirects.append((part.type, None, body))
                    continue
                out = part.output
                if isinstance(out, int) or out is None:
                    continue
                w = _word_of(out, acc)
                target = w.text
                if w.dynamic:
                    if part.type != "<":
                        acc.interpreted = False
                    continue
                redirects.append((part.type, target, None))
            elif part.kind in ("commandsubstitution", "processsubstitution"):
                _walk(part.command, acc)
            else:
                acc.interpreted = False
        _simple(words, redirects, acc)
    elif kind in ("list", "pipeline"):
        for part in node.parts:
            _walk(part, acc)
    elif kind == "compound":
        saved = (acc.cwd, acc.cwd_known)  # a subshell's cd does not leak out
        for part in node.list:
            _walk(part, acc)
        acc.cwd, acc.cwd_known = saved
        for r in getattr(node, "redirects", []) or []:
            out = getattr(r, "output", None)
            if out is not None and not isinstance(out, int):
                if r.type == "<":
                    acc.read(out.word)
                else:
                    acc.write(out.word)
    elif kind in ("operator", "pipe", "reservedword", "word"):
        return
    elif kind in ("if", "while", "until"):
        for part in node.parts:
            _walk(part, acc)
    elif kind == "for":
        # the loop variable is dynamic: commands using it get dynamic args
        for part in node.parts:
            if part.kind not in ("word", "reservedword"):
                _walk(part, acc)
    elif kind == "function":
        _walk(node.body, acc)
    elif kind in ("commandsubstitution", "processsubstitution"):
        _walk(node.command, acc)
    else:
        acc.interpreted = False


def _parse_into(text: str, acc: _Acc) -> None:
    """Parse ``text`` into ``acc``: fast tokenizer for plain commands, else bashlex, else
    shlex plus rules. All three feed the same per-program rules (:func:`_simple`)."""
    if not text.strip():
        return
    saved_cwd, saved_known = acc.cwd, acc.cwd_known
    try:
        stripped, bodies = _cut_heredocs(text)
        tokens = _fast_tokens(stripped)
        if tokens is not None:
            _run_tokens(tokens, bodies, acc)
            return
        _parse_bashlex(text, stripped, bodies, acc)
    finally:
        acc.cwd, acc.cwd_known = saved_cwd, saved_known


def _parse_bashlex(text: str, stripped: str, bodies: list[str], acc: _Acc) -> None:
    prepared = _QUOTED_HEREDOC.sub(r"<<\1\3", text)
    bashlex = _bashlex()
    try:
        trees = bashlex.parse(prepared)
    except (bashlex.errors.ParsingError, NotImplementedError, IndexError, AttributeError,
            TypeError, ValueError, AssertionError, KeyError, RecursionError):
        _fallback(stripped, bodies, text, acc)
        return
    saved = acc.src
    acc.src = prepared
    try:
        for tree in trees:
            _walk(tree, acc)
    finally:
        acc.src = saved


# ---------------------------------------------------------------------------------------
# Token-level path: fast tokenizer and shlex fallback
# ---------------------------------------------------------------------------------------

_HEREDOC_START = re.compile(r"<<-?[ \t]*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
_SEPARATORS = {";", "&&", "||", "|", "&", "\n", "(", ")", ";;", "|&"}
_KEYWORDS = {"for", "while", "until", "if", "case", "function", "select", "do", "then", "else",
             "elif", "done", "fi", "esac", "{", "}", "!", "[[", "coproc"}
_REDIR_RE = re.compile(r"^(\d*)(>>|>\||>&|>|<&|<>|<|&>>|&>|<<<)(\d*)$")
# plain commands only: no expansions, substitutions, subshells, escapes
_FAST_BAD = re.compile(r"[$`\\(){}]")
# one token after blanks: an operator, a comment (a word starting with # runs to the end of
# its line), a word, or a character no token starts with (an unbalanced quote, a form feed)
_FAST_TOKEN = re.compile(
    r"[ \t\r]*(?:(&&|\|\||;;|\|&|\d*>>|\d*>\||\d*>&\d*|&>>|&>|\d*>|<<<|\d*<|[|;&\n])"
    r"|(#[^\n]*)"
    r"|((?:[^\s'\"|&;<>]+|'[^']*'|\"[^\"]*\")+)"
    r"|([^ \t\r]))"
)
_WORD_PIECES = re.compile(r"[^'\"]+|'[^']*'|\"[^\"]*\"")
_PLACEHOLDER = re.compile(r"__HEREDOC(\d+)__")


def _cut_heredocs(text: str) -> tuple[str, list[str]]:
    """Replace each heredoc operator and delimiter by a placeholder word and cut its body.

    Quote-aware: a ``<<`` inside quotes (e.g. in the script of ``bash -lc '...'``) is not a
    heredoc of this level; the script is parsed on its own when unwrapped."""
    if "<<" not in text:
        return text, []
    bodies: list[str] = []
    out: list[str] = []
    pending: list[str] = []  # delimiters whose bodies start at the next newline
    i = 0
    n = len(text)
    quote = ""
    seg_start = 0
    while i < n:
        c = text[i]
        if quote:
            if c == quote:
                quote = ""
            elif c == "\\" and quote == '"':
                i += 1
            i += 1
            continue
        if c in "'\"":
            quote = c
            i += 1
            continue
        if c == "\\":
            i += 2
            continue
        if c == "<" and text.startswith("<<", i) and not text.startswith("<<<", i):
            m = _HEREDOC_START.match(text, i)
            if m:
                out.append(text[seg_start:i])
                out.append(f" __HEREDOC{len(bodies) + len(pending)}__ ")
                pending.append(m.group(2))
                i = seg_start = m.end()
                continue
        if c == "\n" and pending:
            out.append(text[seg_start : i + 1])
            j = i + 1
            for delim in pending:
                body: list[str] = []
                while j < n:
                    end = text.find("\n", j)
                    line = text[j:] if end < 0 else text[j:end]
                    j = n if end < 0 else end + 1
                    if line.strip() == delim:
                        break
                    body.append(line)
                bodies.append("\n".join(body))
            pending = []
            i = seg_start = j
            continue
        i += 1
    out.append(text[seg_start:])
    for _ in pending:  # heredoc without a body (end of text)
        bodies.append("")
    return "".join(out), bodies


def _fast_tokens(text: str) -> list[str] | None:
    """Tokens of a plain command line, or None when it needs a real parser.

    One ``findall`` cuts the whole line (each token is one of the pattern's four groups;
    the tokens tile the line up to trailing blanks); the loop only looks at the words."""
    # characters that need a real parser, outside single quotes, send the line to bashlex
    check = _FAST_BAD.search(text) is not None
    tokens: list[str] = []
    first = True  # at a command's first word (where a keyword would be)
    for op, _comment, word, odd in _FAST_TOKEN.findall(text):
        if op:
            tokens.append(op)
            first = op in _SEPARATORS
        elif word:
            if first and word in _KEYWORDS:
                return None
            first = False
            if check and _bad_outside_single_quotes(word):
                return None
            sq, dq = "'" in word, '"' in word
            if sq and dq:
                word = "".join(p[1:-1] if p[0] in "'\"" else p for p in _WORD_PIECES.findall(word))
            elif sq or dq:  # one kind of quote: its pieces hold no quote character
                word = word.replace("'" if sq else '"', "")
            else:
                tokens.append(word)
                continue
            tokens.append("\x00" + word)  # quoted: never an operator or placeholder
        elif odd:
            return None  # unbalanced quote or odd character
    return tokens


def _bad_outside_single_quotes(word: str) -> bool:
    """Whether a word holds a character of :data:`_FAST_BAD` outside its '...' pieces."""
    if "'" not in word:
        return _FAST_BAD.search(word) is not None
    return any(piece[0] != "'" and _FAST_BAD.search(piece) for piece in _WORD_PIECES.findall(word))


def _run_tokens(tokens: list[str], bodies: list[str], acc: _Acc) -> None:
    """Split tokens into simple commands at operators and apply the program rules."""
    words: list[_Word] = []
    redirects: list[tuple[str, str | None, str | None]] = []
    rest = iter(tokens)
    for tok in rest:
        if tok in _SEPARATORS:
            if words or redirects:
                _command(words, redirects, acc)
                words, redirects = [], []
        elif tok.startswith("\x00"):  # a quoted word: never an operator or placeholder
            text = tok[1:]
            words.append(_Word(text, "$" in text or "`" in text))
        elif ("<" in tok or ">" in tok) and (m := _REDIR_RE.match(tok)) is not None:
            op, fd_to = m.group(2, 3)
            if not fd_to:  # not a 2>&1 style duplication: the next token is the target
                tgt = next(rest, None)
                if tgt is None:
                    return  # nothing after the operator: the command is not applied
                tgt = tgt.lstrip("\x00")
                if not (op in (">&", "<&") and tgt.isdigit()) and op != "<<<":
                    redirects.append((op, tgt, None))
        elif tok.startswith("__HEREDOC") and (m2 := _PLACEHOLDER.fullmatch(tok)) is not None:
            redirects.append(("<<", None, bodies[int(m2.group(1))]))
        else:
            words.append(_Word(tok, "$" in tok or "`" in tok))
    if words or redirects:
        _command(words, redirects, acc)


def _command(words: list[_Word], redirects: list[tuple[str, str | None, str | None]],
             acc: _Acc) -> None:
    """One simple command of a token list: its rules, or opaque when it opens a compound
    command (``for``, ``if`` ... the token paths do not follow them)."""
    if words and words[0].text in _KEYWORDS:
        acc.interpreted = False
    else:
        _simple(words, redirects, acc)


def _fallback(stripped: str, bodies: list[str], original: str, acc: _Acc) -> None:
    """shlex plus rules, for what bashlex rejects; heredoc bodies were cut out first."""
    try:
        lex = shlex.shlex(stripped, posix=True, punctuation_chars=";&|<>\n")
        lex.whitespace = " \t\r"
        lex.whitespace_split = True
        raw = list(lex)
    except ValueError:
        acc.interpreted = False
        _keyword_flags(original, acc)
        return
    # shlex splits "2>&1" into "2", ">&", "1": glue fd numbers back onto redirections
    tokens: list[str] = []
    k = 0
    while k < len(raw):
        tok = raw[k]
        nxt = raw[k + 1] if k + 1 < len(raw) else None
        if tok.isdigit() and nxt in (">", ">>", "<", ">&", "<&"):
            k += 1
            continue
        if tok in (">&", "<&") and nxt is not None and nxt.isdigit():
            tokens.append(tok + nxt)
            k += 2
            continue
        if tok.startswith("(") or tok.endswith(")"):
            acc.interpreted = False  # a subshell or function: not followed
        tokens.append(tok)
        k += 1
    _run_tokens(tokens, bodies, acc)


_NAIVE_SEPARATORS = re.compile(r"&&|\|\||[;|&\n]")


def _keyword_flags(text: str, acc: _Acc) -> None:
    """Test and build flags of text no tokenizer splits (an unbalanced quote): each
    command between separators, split at whitespace with quote characters dropped, goes
    through the same program rules; its file effects are not trusted and are dropped."""
    for segment in _NAIVE_SEPARATORS.split(text):
        words = segment.replace("'", "").replace('"', "").split()
        if words:
            flags = _Acc()
            _simple([_Word(w, "$" in w or "`" in w) for w in words], [], flags)
            acc.is_test = acc.is_test or flags.is_test
            acc.is_build = acc.is_build or flags.is_build


# ---------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------


@lru_cache(maxsize=65536)
def _parse_cached(command: str | None, argv: tuple[str, ...] | None) -> ShellEffects:
    acc = _Acc()
    if command:
        _parse_into(command, acc)
    elif argv:
        # argv as executed (e.g. rollout ["bash", "-lc", "..."] or ["apply_patch", patch])
        _simple([_Word(a) for a in argv], [], acc)
    else:
        return ShellEffects(interpreted=False)
    return acc.result()


def clear_cache() -> None:
    """Forget cached parses and word splits (benchmarks measure cold parsing)."""
    _parse_cached.cache_clear()
    _split_remembered.cache_clear()


def parse_command(command: str | None = None, argv: list[str] | tuple[str, ...] | None = None) -> ShellEffects:
    """File effects of one shell command. The command string is parsed when given (an argv
    split from it loses its operators and quoting); ``argv`` is used only without one, as
    the exact argument vector executed. Cached by input."""
    if command:
        return _parse_cached(command, None)
    return _parse_cached(None, tuple(argv) if argv else None)


def _text_of(command: str | Sequence[str]) -> str:
    return command if isinstance(command, str) else " ".join(command)


def _effects_of(command: str | Sequence[str]) -> ShellEffects:
    if isinstance(command, str):
        return parse_command(command)
    return parse_command(argv=tuple(command))


def is_test_command(command: str | Sequence[str] | None) -> bool:
    """Whether a command runs tests: :func:`parse_command`'s ``is_test`` of a shell string
    or of an executed argv (``bash -lc '...'`` unwrapped, each command of a ``&&``/``;``/
    ``|`` chain checked, so ``cd x && pytest`` counts). The one rule behind it is
    :func:`features.commands.is_test_run`; readers and the provenance graph share it. Text
    that names no test word is answered without parsing (:func:`might_run_tests`)."""
    if not command or not might_run_tests(_text_of(command)):
        return False
    return _effects_of(command).is_test


def is_git_commit(command: str | Sequence[str] | None) -> bool:
    """Whether a command (possibly inside ``bash -lc`` or a ``&&`` chain) runs ``git commit``:
    :func:`parse_command`'s ``is_commit``."""
    if not command:
        return False
    if not might_commit(_text_of(command)):
        return False
    return _effects_of(command).is_commit


# ---------------------------------------------------------------------------------------
# Word splitting
# ---------------------------------------------------------------------------------------

# one POSIX word: unquoted characters, backslash escapes, '...' and "..." pieces
_SPLIT_WORD = re.compile(r"(?:[^ \t\r\n'\"\\]+|\\[\s\S]|'[^']*'|\"(?:[^\"\\]|\\[\s\S])*\")+")
# a word, or from the first character no word starts with (an unbalanced quote, a trailing
# backslash) to the end of the text: the text then does not split
_SPLIT_TOKEN = re.compile(rf"({_SPLIT_WORD.pattern})|([^ \t\r\n][\s\S]*)")
_SPLIT_PIECE = re.compile(r"\\([\s\S])|'([^']*)'|\"((?:[^\"\\]|\\[\s\S])*)\"")
_DQ_ESCAPE = re.compile(r'\\(["\\])')


def _unquote_piece(m: re.Match[str]) -> str:
    if m.group(1) is not None:
        return m.group(1)
    if m.group(2) is not None:
        return m.group(2)
    inner = m.group(3)
    return _DQ_ESCAPE.sub(r"\1", inner) if "\\" in inner else inner


def _fast_split(cmd: str) -> list[str] | None:
    """``shlex.split(cmd)`` by regular expressions over the whole text (shlex reads
    character by character, slow on long heredocs); None when the text is not splittable
    (an unbalanced quote, a trailing backslash: shlex raises)."""
    found = _SPLIT_TOKEN.findall(cmd)  # one pass: (word, "") pairs, then perhaps ("", rest)
    if found and found[-1][1]:
        return None  # a character outside every word: the words do not tile the text
    words = [w for w, _ in found]
    for i, w in enumerate(words):
        sq, dq, bs = "'" in w, '"' in w, "\\" in w
        if not (sq or dq or bs):
            continue
        if not bs and not (sq and dq):  # one kind of quote, no escapes: drop the quotes
            words[i] = w.replace("'" if sq else '"', "")
        else:
            words[i] = _SPLIT_PIECE.sub(_unquote_piece, w)
    return words


def split_command(cmd: str) -> list[str] | None:
    """``shlex.split`` of a shell string (the words of an event's ``argv``), or None when
    shlex cannot split it (unbalanced quotes, e.g. a heredoc holding an apostrophe).
    Splits of short commands are remembered (agents rerun the same reads, tests and git
    commands many times a session); every call returns a list of its own."""
    if len(cmd) <= _REMEMBER_SPLITS_UP_TO:
        words = _split_remembered(cmd)
        return None if words is None else list(words)
    return _split(cmd)


_REMEMBER_SPLITS_UP_TO = 512  # characters: long commands (heredocs) are rarely rerun


@lru_cache(maxsize=4096)
def _split_remembered(cmd: str) -> tuple[str, ...] | None:
    words = _split(cmd)
    return None if words is None else tuple(words)


def _split(cmd: str) -> list[str] | None:
    fast = _fast_split(cmd)
    if fast is not None:
        return fast
    try:
        return shlex.split(cmd)
    except ValueError:
        return None


def parse_with(text: str, engine: str) -> ShellEffects:
    """File effects of ``text`` parsed by one engine only: ``"fast"`` (the plain-command
    tokenizer; ValueError when the text needs a real parser), ``"bashlex"`` or ``"shlex"``
    (the fallback). :func:`parse_command` picks the first that applies; the three must
    agree wherever they all apply, which the tests check."""
    acc = _Acc()
    stripped, bodies = _cut_heredocs(text)
    if engine == "fast":
        tokens = _fast_tokens(stripped)
        if tokens is None:
            raise ValueError(f"not a plain command: {text!r}")
        _run_tokens(tokens, bodies, acc)
    elif engine == "bashlex":
        prepared = _QUOTED_HEREDOC.sub(r"<<\1\3", text)
        acc.src = prepared
        for tree in _bashlex().parse(prepared):
            _walk(tree, acc)
    elif engine == "shlex":
        _fallback(stripped, bodies, text, acc)
    else:
        raise ValueError(f"unknown engine {engine!r}")
    return acc.result()
