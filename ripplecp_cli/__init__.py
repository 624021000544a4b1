"""One way to turn an ``Args`` dataclass into a command line, for every ripplecp command.

Every experiment (``python -m experiments.…``) and every ``python -m oracle`` /
``python -m features`` subcommand declares its options as a dataclass, CleanRL style: a
field per option, its default, and the string under it as its help::

    @dataclass(frozen=True)
    class Args:
        \"\"\"Every placement policy at matched budgets.\"\"\"

        seed: int = opt(0, min=0)
        \"\"\"one seed for the simulator and the policies\"\"\"
        families: tuple[str, ...] = opt(FAMILIES, choices=FAMILIES)
        \"\"\"workload families to simulate\"\"\"

    def main(argv=None) -> int:
        return run(study, Args, argv, prog="python -m experiments.matched_budget")

Flags are the field names with dashes (``n_resamples`` → ``--n-resamples``), so one name
means one flag in every tool; booleans get ``--x`` / ``--no-x``; ``Literal`` types and
``choices`` list their choices in the help; a list or tuple takes one or more values
(comma-separated values are split too).

Errors are one line, ``PROG: error: argument --x: what it accepts``, exit status 2, and a
mistyped choice suggests the nearest valid one. :func:`run` validates every option before the
study starts (``opt`` bounds and checks; a ``ValueError`` from the dataclass's
``__post_init__`` for rules between options), and turns an error the study raises on bad
input (``ValueError``, ``OSError``, ``LookupError``) into the same one line; ``--debug`` shows
the traceback instead. Checks shared by every command (:func:`existing_dir`,
:func:`existing_file`, :func:`existing_path`, :func:`positive`, :func:`choice_error`) and the
progress of long steps (:func:`progress`: a bar on a terminal, plain lines elsewhere) live
here too.

Written by hand rather than taken from tyro or simple-parsing, which would give the help
and flags: both print parse errors as multi-line panels and usage blocks, and neither wraps
the command's own input errors, so neither gives the one-line error every command owes.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import inspect
import os
import sys
import tempfile
import textwrap
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ripplecp_cli.progress import Progress, progress

__all__ = [
    "CommandLineError", "Progress", "check_out", "choice_error", "existing_dir", "existing_file",
    "existing_path", "opt", "parse", "positive", "progress", "run", "run_subcommands", "suggest",
]

#: metadata key of :func:`opt`'s settings on a dataclass field
_META = "ripplecp_cli"


class CommandLineError(ValueError):
    """A command-line value the command cannot use; printed as one line, exit status 2."""


def opt(
    default: Any = dataclasses.MISSING,
    *,
    choices: Sequence[Any] | None = None,
    min: float | None = None,  # noqa: A002 - reads naturally at the call site
    max: float | None = None,  # noqa: A002
    check: Callable[[Any], Any] | None = None,
    metavar: str | None = None,
    positional: bool = False,
    short: str | None = None,
    help: str | None = None,  # noqa: A002
) -> Any:
    """A dataclass field with command-line settings.

    ``choices`` restricts values (each element of a list), ``min``/``max`` bound numbers,
    ``check`` is called on the converted value and may raise ``ValueError`` (its message
    becomes the error) or return a replacement; ``positional`` makes it an argument rather
    than an option; ``short`` adds a one-letter alias (``"-n"``); ``help`` overrides the
    field's docstring. A list or tuple default is copied per instance.
    """
    meta = {_META: dict(choices=None if choices is None else tuple(choices), min=min, max=max,
                        check=check, metavar=metavar, positional=positional, short=short,
                        help=help)}
    if isinstance(default, list | dict | set):
        value = default
        return dataclasses.field(default_factory=lambda: type(value)(value), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def suggest(value: str, valid: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the nearest valid name, or ''."""
    near = difflib.get_close_matches(str(value), [str(v) for v in valid], n=1, cutoff=0.6)
    return f" (did you mean {near[0]!r}?)" if near else ""


def choice_error(value: Any, valid: Sequence[Any], name: str | None = None) -> CommandLineError:
    """The one message for a value outside ``valid``: ``invalid choice 'x' (did you mean
    'y'?); choose from a, b``, prefixed ``argument NAME: `` when ``name`` is given (for
    choices only known after parsing, such as the families of a loaded label set)."""
    text = (f"invalid choice {str(value)!r}{suggest(str(value), [str(v) for v in valid])}; "
            f"choose from {', '.join(map(str, valid))}")
    return CommandLineError(f"argument {name}: {text}" if name else text)


# ---------------------------------------------------------------------------------------
# checks for opt(check=...): raise ValueError with what the argument accepts
# ---------------------------------------------------------------------------------------


def existing_dir(path: str | Path) -> None:
    """``check=``: ``path`` must be an existing directory."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"{path}: no such directory")
    if not p.is_dir():
        raise ValueError(f"{path}: not a directory")


def existing_file(path: str | Path) -> None:
    """``check=``: ``path`` must be an existing file."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"{path}: no such file")
    if p.is_dir():
        raise ValueError(f"{path}: a directory, expected a file")


def existing_path(path: str | Path) -> None:
    """``check=``: ``path`` must exist (a file or a directory)."""
    if not Path(path).exists():
        raise ValueError(f"{path}: no such file or directory")


def positive(value: float) -> None:
    """``check=``: a number > 0."""
    if not value > 0:
        raise ValueError(f"must be > 0, got {value:g}")


# ---------------------------------------------------------------------------------------
# field introspection
# ---------------------------------------------------------------------------------------


def field_docs(cls: type) -> dict[str, str]:
    """The string literal under each annotated field of ``cls`` (attribute docstrings)."""
    try:
        src = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    tree = ast.parse(src)
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    out: dict[str, str] = {}
    for prev, node in zip(body, body[1:], strict=False):
        if (isinstance(prev, ast.AnnAssign) and isinstance(prev.target, ast.Name)
                and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            out[prev.target.id] = " ".join(node.value.value.split())
    for base in cls.__mro__[1:]:
        if dataclasses.is_dataclass(base):
            for k, v in field_docs(base).items():
                out.setdefault(k, v)
    return out


def _unwrap(tp: Any) -> tuple[Any, bool]:
    """(type without ``None``, whether ``None`` was allowed)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
        raise TypeError(f"unsupported union {tp!r}")
    return tp, False


def _element(tp: Any) -> tuple[Any, str | None]:
    """(element type, container) for list[T] / tuple[T, ...]; container None for scalars."""
    origin = typing.get_origin(tp)
    if origin in (list, tuple, Sequence, typing.Sequence):
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        return (args[0] if args else str), ("tuple" if origin is tuple else "list")
    return tp, None


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _describe(v: Any) -> str:
    if isinstance(v, list | tuple):
        return " ".join(map(str, v)) if v else "none"
    if isinstance(v, bool):
        return "on" if v else "off"
    return str(v)


def _converter(name: str, elem: Any, cfg: Mapping[str, Any]) -> Callable[[str], Any]:
    """A type= callable that converts, bounds and checks one value with one-line errors."""
    literal = typing.get_origin(elem) is typing.Literal
    choices = cfg.get("choices") or (typing.get_args(elem) if literal else None)
    base = type(choices[0]) if literal and choices else elem
    base = {int: int, float: float, Path: Path}.get(base, str)
    lo, hi = cfg.get("min"), cfg.get("max")

    def convert(text: str) -> Any:
        if base is int:
            try:
                value: Any = int(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        elif base is float:
            try:
                value = float(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
            if value != value or value in (float("inf"), float("-inf")):
                raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
        else:
            value = base(text)
        if choices is not None and value not in choices:
            raise argparse.ArgumentTypeError(str(choice_error(text, choices)))
        if lo is not None and value < lo:
            raise argparse.ArgumentTypeError(f"must be >= {lo:g}, got {text}")
        if hi is not None and value > hi:
            raise argparse.ArgumentTypeError(f"must be <= {hi:g}, got {text}")
        return value

    convert.__name__ = name  # argparse names the converter in some messages
    return convert


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``PROG: error: MESSAGE (see PROG --help)``, exit 2.

    Abbreviated options are refused (``--no-progres`` is an error suggesting
    ``--no-progress``, never a silent prefix match that starts hours of work)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        """argparse's, with the nearest option suggested for a mistyped one."""
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            owner = getattr(ns, "_parser", self)  # a subcommand's words are its parser's
            flags = [f for f in owner._option_string_actions if f.startswith("--")]
            typo = next((w.split("=")[0] for w in extras if w.startswith("--")), None)
            hint = suggest(typo, flags) if typo else ""
            owner.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return ns


class _Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32, width=min(100, _terminal_width()))


def _terminal_width() -> int:
    try:
        return os.get_terminal_size().columns
    except OSError:
        return 100


def _choices_text(elem: Any, cfg: Mapping[str, Any]) -> Sequence[Any] | None:
    if cfg.get("choices"):
        return cfg["choices"]
    if typing.get_origin(elem) is typing.Literal:
        return typing.get_args(elem)
    return None


def add_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """One argument per field of the dataclass ``cls`` (help from its attribute docstrings)."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    hints = typing.get_type_hints(cls, include_extras=False)
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        cfg = dict(f.metadata.get(_META) or {})
        tp, _ = _unwrap(hints[f.name])  # None is only ever a default, never typed in
        elem, container = _element(tp)
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        default = (f.default if f.default is not dataclasses.MISSING
                   else f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        text = cfg.get("help") or docs.get(f.name, "")
        choices = _choices_text(elem, cfg)
        if choices is not None and tp is not bool:
            text += (" " if text else "") + "{" + ", ".join(map(str, choices)) + "}"
        names = [f.name] if cfg.get("positional") else [_flag(f.name)]
        if cfg.get("short") and not cfg.get("positional"):
            names.insert(0, cfg["short"])
        if tp is bool:
            group = parser.add_mutually_exclusive_group()
            off = "--no-" + f.name.replace("_", "-")
            state = f"default: on; {off} turns it off" if default else "default: off"
            group.add_argument(*names, dest=f.name, action="store_true", help=f"{text} ({state})")
            group.add_argument(off, dest=f.name, action="store_false", help=argparse.SUPPRESS)
            parser.set_defaults(**{f.name: bool(default)})
            continue
        conv = _converter(f.name, elem, cfg)
        if container:
            conv = _splitting(conv)
        kwargs: dict[str, Any] = dict(type=conv, help=text, metavar=cfg.get("metavar"))
        if container:
            kwargs["nargs"] = "+" if not (has_default and not default) else "*"
        if cfg.get("positional"):
            if has_default:
                kwargs["nargs"] = kwargs.get("nargs", "?") if not container else "*"
                kwargs["default"] = default
        else:
            if has_default:
                kwargs["default"] = default
                if default is not None and not (container and not default):
                    kwargs["help"] = f"{text} (default: {_describe(default)})".strip()
            else:
                kwargs["required"] = True
        if kwargs["metavar"] is None:
            number = {int: "N", float: "X"}.get(elem)
            if number is not None and choices is None and not cfg.get("positional"):
                kwargs["metavar"] = number  # --seed N, --tolerance X
            else:
                kwargs.pop("metavar")
        parser.add_argument(*names, **kwargs)


def _splitting(conv: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    """A converter for one word of a list option: ``a,b`` gives two values."""

    def split(text: str) -> list[Any]:
        return [conv(p) for p in text.split(",") if p]

    split.__name__ = conv.__name__
    return split


def _build(ns: argparse.Namespace, cls: type, prog: str) -> Any:
    """The dataclass instance from parsed values: containers typed, commas split, checks run."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        v = getattr(ns, f.name)
        tp, _ = _unwrap(hints[f.name])
        _, container = _element(tp)
        if container and v is not None:
            # parsed words are lists (commas split); a default is the values themselves
            items = [y for x in v for y in (x if isinstance(x, list) else [x])]
            v = tuple(items) if container == "tuple" else list(items)
        check = (f.metadata.get(_META) or {}).get("check")
        if check is not None and v is not None:
            try:
                out = check(v)
            except (ValueError, argparse.ArgumentTypeError) as exc:
                name = f.name if (f.metadata.get(_META) or {}).get("positional") else _flag(f.name)
                raise CommandLineError(f"argument {name}: {exc}") from None
            v = v if out is None else out
        if (f.name == "out" or f.name.endswith("_out")) and isinstance(v, str | os.PathLike):
            try:
                check_out(v)
            except ValueError as exc:
                raise CommandLineError(f"argument {_flag(f.name)}: {exc}") from None
        values[f.name] = v
    try:
        return cls(**values)
    except CommandLineError:
        raise
    except ValueError as exc:  # a rule between options, from the dataclass's __post_init__
        raise CommandLineError(_one_line(exc)) from None


def check_out(path: str | os.PathLike) -> None:
    """Refuse an output path no result could be written to, before any computation: a
    component above it that is not a directory, or a directory (the nearest that exists)
    in which no file can be created (tried for real: a read-only or special filesystem, no
    permission). Nothing is left behind; ``path`` itself is not created. Every option named
    ``out`` or ``*_out`` is checked this way when parsed."""
    p = Path(os.path.abspath(path))
    probe = p
    while not os.path.lexists(probe) and probe != probe.parent:
        probe = probe.parent
    if probe != p and not probe.is_dir():
        raise ValueError(f"{path}: {probe} is not a directory")
    where = probe if probe != p or p.is_dir() else p.parent
    try:
        fd, tmp = tempfile.mkstemp(dir=where, prefix=".ripplecp-out-check-")
    except OSError as exc:
        raise ValueError(f"{path}: nothing can be written in {where}: "
                         f"{exc.strerror or exc}") from None
    os.close(fd)
    os.unlink(tmp)


def _parser(cls: type | None, prog: str, description: str | None) -> _Parser:
    doc = description if description is not None else inspect.getdoc(cls) if cls else None
    p = _Parser(prog=prog, description=doc, formatter_class=_Formatter)
    p.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    return p


def parse(cls: type, argv: Sequence[str] | None = None, *, prog: str,
          description: str | None = None) -> Any:
    """Parse ``argv`` into an instance of the dataclass ``cls``; errors exit with status 2."""
    p = _parser(cls, prog, description)
    add_arguments(p, cls)
    ns = p.parse_args(None if argv is None else list(argv))
    try:
        return _build(ns, cls, prog)
    except CommandLineError as exc:
        p.error(str(exc))


def _guard(fn: Callable[[], int | None], prog: str, debug: bool) -> int:
    """Run ``fn``: input errors become one line and exit 2, anything else exit 1."""
    if debug:
        return int(fn() or 0)
    try:
        return int(fn() or 0)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except (ValueError, OSError, LookupError) as exc:
        print(f"{prog}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:  # a defect, not bad input: still one line, traceback on --debug
        print(f"{prog}: internal error: {type(exc).__name__}: {_one_line(exc)} "
              "(rerun with --debug for the traceback)", file=sys.stderr)
        return 1


def _one_line(exc: BaseException) -> str:
    text = str(exc) if not isinstance(exc, KeyError) or not exc.args else str(exc.args[0])
    if isinstance(exc, OSError) and exc.filename and exc.strerror:
        text = f"{exc.filename}: {exc.strerror}"
    line = " ".join(text.split())
    return line if len(line) <= 400 else line[:397] + "..."


def run(main: Callable[[Any], int | None], cls: type, argv: Sequence[str] | None = None, *,
        prog: str, description: str | None = None) -> int:
    """Parse ``argv`` into ``cls``, call ``main(args)``, and return its exit status with the
    one-line error rule applied (see the module docstring)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    args = parse(cls, args_list, prog=prog, description=description)
    return _guard(lambda: main(args), prog, "--debug" in args_list)


Command = tuple[type, Callable[[Any], int | None]]
Commands = Mapping[str, "Command | Commands"]


def run_subcommands(commands: Commands, argv: Sequence[str] | None = None, *, prog: str,
                    description: str | None = None) -> int:
    """Like :func:`run` for a command with subcommands (nested mappings nest): ``commands``
    maps each name to ``(ArgsClass, main)`` or to a mapping of further subcommands."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    root = _parser(None, prog, description)

    def add(parser: argparse.ArgumentParser, table: Commands, depth: int) -> None:
        sub = parser.add_subparsers(dest=f"_command{depth}", metavar="COMMAND", required=True,
                                    parser_class=_Parser)
        for name, entry in table.items():
            if isinstance(entry, Mapping):
                p = sub.add_parser(name, help=f"{', '.join(entry)}", formatter_class=_Formatter)
                add(p, entry, depth + 1)
            else:
                cls, _ = entry
                doc = inspect.getdoc(cls) or ""
                p = sub.add_parser(name, help=doc.split("\n")[0], description=doc,
                                   formatter_class=_Formatter)
                p.add_argument("--debug", action="store_true",
                               help="show tracebacks instead of one-line errors")
                add_arguments(p, cls)
                p.set_defaults(_entry=entry, _parser=p)

    add(root, commands, 0)
    _suggest_subcommand(root, commands, args_list)
    ns = root.parse_args(args_list)
    cls, main = ns._entry
    try:
        args = _build(ns, cls, ns._parser.prog)
    except CommandLineError as exc:
        ns._parser.error(str(exc))
    return _guard(lambda: main(args), ns._parser.prog, bool(ns.debug))


def _suggest_subcommand(root: argparse.ArgumentParser, commands: Commands, argv: list[str]) -> None:
    """A mistyped subcommand gets the nearest valid name in its one-line error."""
    table: Any = commands
    prog = root.prog
    for word in argv:
        if word.startswith("-") or not isinstance(table, Mapping):
            return
        if word not in table:
            root.exit(2, f"{prog}: error: unknown command {word!r}{suggest(word, list(table))}; "
                         f"choose from {', '.join(table)} (see {prog} --help)\n")
        table, prog = table[word], f"{prog} {word}"
