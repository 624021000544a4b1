"""features: canonical agent-event schema, readers for real agent logs, provenance graph,
and prefix-causal online features (paper, Appendix C)."""

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
    "BoundaryKind", "Event", "EventKind", "Trajectory",
    "from_frame", "read_parquet", "to_frame", "write_parquet",
]
