"""features: canonical agent-event schema, readers for real agent logs, provenance graph,
and prefix-causal online features (paper, Appendix C)."""

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

__all__ = [
    "FORMATS", "BoundaryKind", "Event", "EventKind", "Trajectory", "TrajectoryFormatError",
    "UnknownEventWarning", "detect_format", "from_frame", "read_parquet", "read_trajectory",
    "to_frame", "write_parquet",
]
