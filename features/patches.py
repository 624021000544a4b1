"""Patches: the files a patch writes and deletes, read from its headers. The one parser of
Codex's ``apply_patch`` format (``*** Begin Patch`` … ``*** End Patch``): the shell parser
(an ``apply_patch`` command, ``patch`` fed a heredoc) and the log readers (a Codex
``apply_patch`` call) both ask it; unified diffs (``---``/``+++``, ``diff --git``) are read
here too, for the shell parser.
"""

from __future__ import annotations

import re
from typing import Any

_APPLY_PATCH_HEADER = re.compile(
    r"^\*\*\* (Add|Update|Delete) File: (.+?)\s*$|^\*\*\* Move to: (.+?)\s*$", re.M)
_UNIFIED_OLD = re.compile(r"^--- (\S+)", re.M)
_UNIFIED_NEW = re.compile(r"^\+\+\+ (\S+)", re.M)
_GIT_DIFF_HDR = re.compile(r"^diff --git a/(\S+) b/(\S+)", re.M)


def apply_patch_ops(text: str) -> list[dict[str, str]]:
    """The file operations an ``apply_patch`` text's headers name, in order: ``{"op": "add" |
    "update" | "delete" | "move", "path": ...}`` (a ``*** Move to:`` line moves the file of
    the ``*** Update File:`` header just before it). Paths are kept exactly as written."""
    ops: list[dict[str, str]] = []
    for m in _APPLY_PATCH_HEADER.finditer(text):
        if m.group(1):
            ops.append({"op": m.group(1).lower(), "path": m.group(2)})
        else:
            ops.append({"op": "move", "path": m.group(3)})
    return ops


def files_of_ops(ops: list[dict[str, str]]) -> tuple[list[str], list[str]]:
    """(written, deleted) of :func:`apply_patch_ops`' operations: ``written`` the added and
    updated files and move destinations (each once), ``deleted`` the deleted files and the
    sources of moves."""
    written: list[str] = []
    deleted: list[str] = []
    for j, o in enumerate(ops):
        moved = o["op"] == "update" and j + 1 < len(ops) and ops[j + 1]["op"] == "move"
        if o["op"] == "delete" or moved:
            deleted.append(o["path"])
        elif o["path"] not in written:
            written.append(o["path"])
    return written, deleted


def parse_apply_patch(patch: str) -> dict[str, Any] | None:
    """Paths and added bytes of an ``apply_patch`` body (``*** Begin Patch`` format).

    Returns ``{"paths", "written", "deleted", "ops": [{"op", "path"}...], "added_bytes"}``
    or None when the text holds no patch. ``paths`` lists every header path in order;
    ``written`` and ``deleted`` as :func:`files_of_ops` says; ``added_bytes`` the UTF-8
    bytes of the ``+`` lines between ``*** Begin Patch`` and ``*** End Patch`` (a newline
    each).
    """
    if "*** Begin Patch" not in patch:
        return None
    ops = apply_patch_ops(patch)
    paths: list[str] = []
    for o in ops:
        if o["path"] not in paths:
            paths.append(o["path"])
    written, deleted = files_of_ops(ops)
    added = 0
    in_patch = False
    for line in patch.splitlines():
        if line.startswith("*** Begin Patch"):
            in_patch = True
            continue
        if line.startswith("*** End Patch"):
            in_patch = False
            continue
        if in_patch and line.startswith("+"):
            added += len(line[1:].encode("utf-8")) + 1
    return {"paths": paths, "written": written, "deleted": deleted, "ops": ops,
            "added_bytes": added}


def patch_paths(text: str) -> tuple[list[str], list[str]]:
    """(written, deleted) paths of a patch, from its headers: ``apply_patch`` headers
    (:func:`files_of_ops`), else a unified diff's ``---``/``+++`` pairs (``a/``, ``b/``
    dropped; ``+++ /dev/null`` deletes), else its ``diff --git`` headers."""
    ops = apply_patch_ops(text)
    if ops:
        return files_of_ops(ops)
    writes: list[str] = []
    deletes: list[str] = []
    olds = _UNIFIED_OLD.findall(text)
    news = _UNIFIED_NEW.findall(text)
    for old, new in zip(olds, news, strict=False):
        if new == "/dev/null":
            deletes.append(_strip_ab(old))
        else:
            writes.append(_strip_ab(new))
    if not writes and not deletes:
        for a, _b in _GIT_DIFF_HDR.findall(text):
            writes.append(a)
    return writes, deletes


def _strip_ab(p: str) -> str:
    return p[2:] if p.startswith(("a/", "b/")) else p
