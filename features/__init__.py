"""features: canonical agent-event schema, readers for real agent logs, provenance graph,
and prefix-causal online features (paper, Appendix C)."""

from features.graph import DEFAULT_FAMILIES, EdgeFamily, ProvenanceGraph, build_graph, event_effects
from features.online import (
    FEATURE_NAMES,
    FeatureConfig,
    OnlineFeatureExtractor,
    boundary_features,
    config_for,
    hindsight_descendants,
)
from features.readers import (
    FORMATS,
    TrajectoryFormatError,
    UnknownEventWarning,
    detect_format,
    read_trajectory,
)
from features.schema import (
    BoundaryKind,
    Event,
    EventKind,
    Trajectory,
    from_frame,
    read_parquet,
    to_frame,
    write_parquet,
)
from features.shell import ShellEffects, parse_command
from features.synthetic import generate_trajectory

__all__ = [
    "DEFAULT_FAMILIES", "FEATURE_NAMES", "FORMATS", "BoundaryKind", "EdgeFamily", "Event",
    "EventKind", "FeatureConfig", "OnlineFeatureExtractor", "ProvenanceGraph", "ShellEffects",
    "Trajectory", "TrajectoryFormatError", "UnknownEventWarning", "boundary_features",
    "build_graph", "config_for", "detect_format", "event_effects", "from_frame",
    "generate_trajectory", "hindsight_descendants", "parse_command",
    "read_parquet", "read_trajectory", "to_frame", "write_parquet",
]
