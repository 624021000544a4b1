"""features: canonical agent-event schema, readers for real agent logs, provenance graph,
and prefix-causal online features (paper, Appendix C).

The names below are imported on first use (PEP 562), so ``import features.readers`` or
``python -m features --help`` does not pay for networkx and pandas.
"""

from __future__ import annotations

import importlib
from typing import Any

#: each public name and the module that defines it
_HOMES = {
    "DEFAULT_FAMILIES": "features.graph", "EdgeFamily": "features.graph",
    "ProvenanceGraph": "features.graph", "build_graph": "features.graph",
    "event_effects": "features.graph",
    "FEATURE_NAMES": "features.online", "FeatureConfig": "features.online",
    "OnlineFeatureExtractor": "features.online", "boundary_features": "features.online",
    "config_for": "features.online", "hindsight_descendants": "features.online",
    "FORMATS": "features.readers", "TrajectoryFormatError": "features.readers",
    "UnknownEventWarning": "features.readers", "detect_format": "features.readers",
    "read_trajectory": "features.readers",
    "BoundaryKind": "features.schema", "Event": "features.schema", "EventKind": "features.schema",
    "Trajectory": "features.schema", "from_frame": "features.schema",
    "read_parquet": "features.schema", "to_frame": "features.schema",
    "write_parquet": "features.schema",
    "ShellEffects": "features.shell", "parse_command": "features.shell",
    "generate_trajectory": "features.synthetic",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'features' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


__all__ = sorted(_HOMES)
