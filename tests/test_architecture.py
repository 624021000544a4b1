"""The house rules that the layout promises, checked on the code itself.

- Imports between the project's packages flow one way: ripplecp_cli and features at the
  bottom, then labelsets, oracle, ripplecp_policy, baselines, experiments; nothing imports
  experiments.
- No two sibling sub-packages import each other (oracle's rooms: harness, store, agents,
  simulator; agents' model_server beneath it).
- The label-set contract is consumed through ``labelsets``: ``ripplecp_policy`` and
  ``baselines`` import nothing of the harness (``oracle`` only for the advisor's checkpoint
  store).
- No import circle between modules, function-level imports included.
- No private name (leading underscore) is imported from another module.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
#: lower number = lower floor; a module may import only its own floor or lower ones
FLOORS = {"ripplecp_cli": 0, "features": 1, "labelsets": 2, "oracle": 3, "ripplecp_policy": 4,
          "baselines": 5, "experiments": 6}
#: what of ``oracle`` the consumers of label sets may import (the advisor's checkpoint store)
CONSUMER_MAY_USE = {"oracle.store.checkpoint"}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in FLOORS:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The project module an imported dotted name refers to (longest known prefix)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        cand = ".".join(parts[:i])
        if cand in MODULES:
            return cand
    return None


def _imports(module: str, path: Path) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for every import in the file,
    function-level ones included; relative imports resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    pkg = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, None, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            for a in node.names:
                full = f"{base}.{a.name}"
                out.append((full if full in MODULES else base, a.name if full not in MODULES else None,
                            node.lineno))
    return out


def _edges() -> dict[tuple[str, str], list[str]]:
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for mod, path in MODULES.items():
        for target, _name, line in _imports(mod, path):
            dst = _resolve(target)
            if dst and dst != mod and not mod.startswith(dst + ".") and not (
                    # a package's own __init__ importing its submodules is how packages work
                    dst.startswith(mod + ".")):
                edges[(mod, dst)].append(f"{path.relative_to(ROOT)}:{line}")
    return edges


def test_packages_import_downward_only() -> None:
    bad = []
    for (src, dst), where in _edges().items():
        a, b = FLOORS[src.split(".")[0]], FLOORS[dst.split(".")[0]]
        if b > a:
            bad.append(f"{src} -> {dst} ({where[0]})")
    assert not bad, "imports running up the house:\n" + "\n".join(bad)


def test_no_import_circles() -> None:
    g = nx.DiGraph(list(_edges()))
    cycles = [c for c in nx.simple_cycles(g)]
    assert not cycles, f"import circles: {cycles[:5]}"


def test_no_private_name_imported_across_modules() -> None:
    bad = []
    for mod, path in MODULES.items():
        for target, name, line in _imports(mod, path):
            dst = _resolve(target)
            if dst is None or dst == mod:
                continue
            private_mod = any(p.startswith("_") and not p.startswith("__")
                              for p in dst.split(".")[1:])
            if (name and name.startswith("_") and not name.startswith("__")) or private_mod:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name or ''} from {dst}")
    assert not bad, "private names crossing modules:\n" + "\n".join(bad)


@pytest.mark.parametrize("pkg", sorted(FLOORS))
def test_every_package_is_found(pkg: str) -> None:
    assert any(m == pkg or m.startswith(pkg + ".") for m in MODULES)


def _package_of(module: str) -> str:
    """The package a module sits in (a package's own ``__init__`` is in that package)."""
    path = MODULES[module]
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def test_no_two_sibling_subpackages_import_each_other() -> None:
    ties: dict[tuple[str, str], str] = {}
    for (src, dst), where in _edges().items():
        a, b = _package_of(src), _package_of(dst)
        if a == b or a.startswith(b + ".") or b.startswith(a + "."):
            continue
        # the two sub-packages of one parent that hold src and dst
        pa, pb = a.split("."), b.split(".")
        i = 0
        while i < min(len(pa), len(pb)) and pa[i] == pb[i]:
            i += 1
        if i == 0:
            continue  # top-level packages: the floors rule
        ties.setdefault((".".join(pa[:i + 1]), ".".join(pb[:i + 1])), f"{src} -> {dst} ({where[0]})")
    both = [f"{a} <-> {b}: {ties[(a, b)]} / {ties[(b, a)]}" for (a, b) in ties
            if (b, a) in ties and a < b]
    assert not both, "sub-packages importing each other:\n" + "\n".join(both)


def test_consumers_read_label_sets_through_labelsets() -> None:
    bad = [f"{src} -> {dst} ({where[0]})" for (src, dst), where in _edges().items()
           if src.split(".")[0] in ("ripplecp_policy", "baselines")
           and dst.split(".")[0] == "oracle" and dst not in CONSUMER_MAY_USE]
    assert not bad, "consumers reaching into the harness:\n" + "\n".join(bad)
