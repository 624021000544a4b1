"""Codex code mode: the nested tool calls a cell's JavaScript makes, read from its source.

In code mode (Codex CLI 0.144 and later) the model runs JavaScript cells through one ``exec``
tool; a cell calls the real tools itself (``await tools.exec_command({cmd: "..."})``,
``await tools.apply_patch("*** Begin Patch ...")``), and ``wait`` polls a cell that is still
running. Later CLIs also log each nested call as an ``event_msg`` item; 0.144 logs only the
cell's code and what the script printed. This module reads the calls from the code: each
``tools.<name>(...)`` outside strings and comments, with its argument when that is a
literal (a string, or an object of literal values); an argument built at run time (a
variable, a template with ``${...}``, a call in a loop) is kept as source text, never
guessed. How often a call ran (a loop) is not known from the source: each call is read once.

A hand-written scanner, not a JavaScript parser from a library: only literals and the
call sites are needed, and no well-kept Python package parses modern JavaScript without
pulling in a runtime.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

#: the nested tools whose calls become events (the rest stay inside the cell)
TOOLS = ("exec_command", "shell_command", "apply_patch")
_CALL = re.compile(r"\btools\s*\.\s*(" + "|".join(TOOLS) + r")\s*\(")
_IDENT = re.compile(r"[A-Za-z_$][\w$]*")
_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_CODE_POINT = re.compile(r"\{([0-9a-fA-F]{1,6})\}|([0-9a-fA-F]{4})")
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f", "v": "\v", "0": "\0"}


class _Unresolved(Exception):
    """An argument that is not a literal."""


UNRESOLVED: Any = object()  # an object member whose value is not a literal


@dataclass(frozen=True)
class NestedCall:
    """One ``tools.<tool>(...)`` call of a cell: its argument (a string, a dict of literal
    values, :data:`UNRESOLVED` members inside it; None when the argument is not a literal)
    and its source text (the call, cut at 300 characters)."""

    tool: str
    argument: str | dict[str, Any] | None
    source: str


def nested_calls(code: str) -> list[NestedCall]:
    """The calls of :data:`TOOLS` that ``code`` makes outside strings and comments, in the
    order they are written."""
    live = _code_spans(code)
    out = []
    for m in _CALL.finditer(code):
        if not _inside(live, m.start()):
            continue
        try:
            arg, end = _value(code, _skip_blank(code, m.end()))
            if arg is UNRESOLVED:
                arg = None
        except _Unresolved:
            arg, end = None, m.end()
        source = code[m.start():max(end + 1, m.end())]
        out.append(NestedCall(m.group(1), arg, source[:300]))
    return out


def _code_spans(code: str) -> list[tuple[int, int]]:
    """The spans of ``code`` that are code: not inside a string, a template literal or a
    comment."""
    spans = []
    i, n, start = 0, len(code), 0
    while i < n:
        c = code[i]
        if c == "/" and code.startswith("//", i):
            spans.append((start, i))
            j = code.find("\n", i)
            i = n if j < 0 else j
            start = i
        elif c == "/" and code.startswith("/*", i):
            spans.append((start, i))
            j = code.find("*/", i + 2)
            i = n if j < 0 else j + 2
            start = i
        elif c in "'\"`":
            spans.append((start, i))
            i = _string_end(code, i)
            start = i
        else:
            i += 1
    spans.append((start, n))
    return spans


def _inside(spans: list[tuple[int, int]], pos: int) -> bool:
    return any(a <= pos < b for a, b in spans)


def _string_end(code: str, i: int) -> int:
    """The index just past the string or template literal starting at ``i`` (the end of
    the text when it is not closed)."""
    quote = code[i]
    j = i + 1
    n = len(code)
    while j < n:
        c = code[j]
        if c == "\\":
            j += 2
            continue
        if c == quote:
            return j + 1
        if quote != "`" and c == "\n":
            return j  # an unterminated string ends at its line
        j += 1
    return n


def _skip_blank(code: str, i: int) -> int:
    n = len(code)
    while i < n and code[i] in " \t\r\n":
        i += 1
    return i


def _value(code: str, i: int) -> tuple[Any, int]:
    """The literal at ``i`` and the index past it; :data:`UNRESOLVED` for an expression (the
    index then past the expression, at the next ``,``, ``)``, ``]`` or ``}`` at its level);
    raises :class:`_Unresolved` when nothing can be skipped."""
    if i >= len(code):
        raise _Unresolved
    c = code[i]
    if c in "'\"`":
        end = _string_end(code, i)
        text = code[i + 1:end - 1]
        after = _skip_blank(code, end)
        if c == "`" and "${" in text or not code.startswith(c, end - 1) or (
                after < len(code) and code[after] not in ",)]}"):
            return UNRESOLVED, _expression_end(code, i)
        return _unescape(text), end
    if c == "{":
        return _object(code, i)
    m = _NUMBER.match(code, i)
    if m is not None and _ends_value(code, m.end()):
        text = m.group()
        return (float(text) if any(x in text for x in ".eE") else int(text)), m.end()
    m = _IDENT.match(code, i)
    if m is not None and m.group() in ("true", "false", "null") and _ends_value(code, m.end()):
        return {"true": True, "false": False, "null": None}[m.group()], m.end()
    end = _expression_end(code, i)
    if end == i:
        raise _Unresolved
    return UNRESOLVED, end


def _ends_value(code: str, i: int) -> bool:
    i = _skip_blank(code, i)
    return i >= len(code) or code[i] in ",)]}"


def _object(code: str, i: int) -> tuple[dict[str, Any], int]:
    """An object literal at ``i`` (its members' values literal or UNRESOLVED)."""
    out: dict[str, Any] = {}
    i = _skip_blank(code, i + 1)
    while i < len(code) and code[i] != "}":
        c = code[i]
        if c in "'\"":
            end = _string_end(code, i)
            key, i = _unescape(code[i + 1:end - 1]), end
        else:
            m = _IDENT.match(code, i)
            if m is None:
                raise _Unresolved  # a spread, a computed key ...
            key, i = m.group(), m.end()
        i = _skip_blank(code, i)
        if i < len(code) and code[i] in ",}":  # shorthand {cmd}: a variable
            out[key] = UNRESOLVED
        elif i < len(code) and code[i] == ":":
            out[key], i = _value(code, _skip_blank(code, i + 1))
            i = _skip_blank(code, i)
        else:
            raise _Unresolved
        if i < len(code) and code[i] == ",":
            i = _skip_blank(code, i + 1)
    if i >= len(code):
        raise _Unresolved
    return out, i + 1


def _expression_end(code: str, i: int) -> int:
    """The index of the ``,``, ``)``, ``]`` or ``}`` that ends the expression at ``i`` (at
    its own nesting level; strings and templates skipped)."""
    depth = 0
    n = len(code)
    while i < n:
        c = code[i]
        if c in "'\"`":
            i = _string_end(code, i)
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                return i
            depth -= 1
        elif c == "," and depth == 0:
            return i
        i += 1
    return n


def _unescape(text: str) -> str:
    """A JavaScript string literal's text, its escapes decoded."""
    if "\\" not in text:
        return text
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        e = text[i + 1]
        i += 2
        if e in _ESCAPES and not (e == "0" and i < n and text[i].isdigit()):
            out.append(_ESCAPES[e])
        elif e == "x" and re.fullmatch(r"[0-9a-fA-F]{2}", text[i:i + 2]):
            out.append(chr(int(text[i:i + 2], 16)))
            i += 2
        elif e == "u" and (m := _CODE_POINT.match(text, i)) is not None:
            cp = int(m.group(1) or m.group(2), 16)
            # a lone surrogate or a code point past Unicode is no character: kept as written
            out.append(chr(cp) if cp <= 0x10FFFF and not 0xD800 <= cp <= 0xDFFF
                       else "\\u" + m.group())
            i = m.end()
        elif e == "\n":
            pass  # a line continuation
        elif e == "\r":
            i += text.startswith("\n", i)
        else:
            out.append(e)
    return "".join(out)
