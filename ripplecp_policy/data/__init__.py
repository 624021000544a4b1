"""Data shipped with the toolkit: the pilot's published tables and executed label sets.

``labelsets/<name>/`` holds a label set collected on a real machine (Parquet tables,
``label_set.json`` with its content hash, ``DATASHEET.md``: how, where and with what it was
collected, and what it does not represent). :func:`label_set_path` finds one by name in a
checkout or an installed package; :func:`resolve_labels` turns a ``--labels`` value (a
shipped name, or a directory) into the directory :meth:`labelsets.tables.LabelSet.load`
verifies and reads.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["DEFAULT_LABEL_SET", "label_set_path", "resolve_labels", "shipped_label_sets"]

#: the shipped label set ``--labels shipped`` means: the sparse re-collection (3x the tasks,
#: five families); ``llm-free``, the full-design set, stays shipped as its ground truth
DEFAULT_LABEL_SET = "llm-free-sparse"


def _root() -> Path:
    return Path(str(resources.files("ripplecp_policy") / "data" / "labelsets"))


def shipped_label_sets() -> list[str]:
    """Names of the label sets shipped with the toolkit."""
    root = _root()
    return sorted(p.name for p in root.iterdir() if (p / "label_set.json").is_file()) if root.is_dir() else []


def label_set_path(name: str = DEFAULT_LABEL_SET) -> Path:
    """The directory of the shipped label set ``name``; LookupError naming the shipped ones."""
    path = _root() / name
    if not (path / "label_set.json").is_file():
        raise LookupError(f"no shipped label set {name!r}; shipped: {', '.join(shipped_label_sets()) or 'none'}")
    return path


def resolve_labels(spec: str) -> Path:
    """A ``--labels`` value as a directory: ``shipped`` (the default set), a shipped name,
    or a path (returned as given, for the loader to check)."""
    if spec == "shipped":
        return label_set_path(DEFAULT_LABEL_SET)
    if "/" not in spec and spec in shipped_label_sets() and not Path(spec).exists():
        return label_set_path(spec)
    return Path(spec)
