"""Optional model-latency emulation: a seeded delay per output token before each answer.

A real model takes time roughly proportional to what it writes. The delay for an answer of
``n`` output tokens is ``first_token_s`` plus a Gamma(n, per_token_s) draw — the sum of ``n``
exponential per-token times with mean ``per_token_s`` — from a generator seeded by the seed
and the transcript digest. The same seed and the same transcript give the same delay, so two
branches that send the same request wait the same time (paired measurements stay paired).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["LatencyModel"]


@dataclass(frozen=True)
class LatencyModel:
    """Seeded per-output-token latency; ``per_token_s`` is the mean seconds per token."""

    per_token_s: float
    seed: int = 0
    first_token_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.per_token_s >= 0 or not self.first_token_s >= 0:
            raise ValueError("latency: per_token_s and first_token_s must be >= 0, got "
                             f"{self.per_token_s} and {self.first_token_s}")

    def delay(self, output_tokens: int, key: str) -> float:
        """Seconds to wait before an answer of ``output_tokens`` tokens to transcript ``key``."""
        rng = random.Random(f"{self.seed}:{key}")
        body = rng.gammavariate(output_tokens, self.per_token_s) \
            if output_tokens > 0 and self.per_token_s > 0 else 0.0
        return self.first_token_s + body
