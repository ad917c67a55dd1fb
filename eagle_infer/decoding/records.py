"""What decoding reports: a record per cycle, a result per request, a result per batch call. Every metric eval
computes (τ, n-α, calibration, speedup) is read from these records, never re-derived from text."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(kw_only=True)
class CycleStats:
    """One target forward after prefill. accepted: draft tokens kept (the cycle emits accepted + 1 before any stop
    truncation); tested_conf/tested_hit: draft confidence of each node whose parent was accepted, and whether it was."""

    tree_size: int
    tree_depth: int
    accepted: int
    draft_s: float
    verify_s: float
    tested_conf: list[float] = field(default_factory=list)
    tested_hit: list[bool] = field(default_factory=list)
    batch: int = 1  # requests in the cycle's batched forwards (the times are the batch's, shared by all of them)
    lookup_size: int = 0  # tree nodes proposed by prompt lookup (alone or together with the head)
    lookup_accepted: int = 0  # accepted tokens among them
    head_forwards: int = 0  # draft-head forwards in draft_s: one per level fed, plus feeding last cycle's accepted tokens


@dataclass(kw_only=True)
class GenerationResult:
    """One request: its new tokens (stop id included), its cycles, and times; stop_reason "stop" (a stop id) or
    "length" (max_new_tokens)."""

    tokens: list[int]
    cycles: list[CycleStats]
    prefill_s: float
    wall_s: float
    stop_reason: str

    @property
    def tau(self) -> float:
        """Tokens per target forward after prefill: mean of accepted + 1."""
        return sum(c.accepted + 1 for c in self.cycles) / max(len(self.cycles), 1)

    @property
    def tok_s(self) -> float:
        return len(self.tokens) / self.wall_s if self.wall_s > 0 else 0.0

    def stats(self) -> dict:
        return {
            "new_tokens": len(self.tokens),
            "tau": self.tau,
            "tok_s": self.tok_s,
            "wall_s": self.wall_s,
            "prefill_s": self.prefill_s,
            "stop_reason": self.stop_reason,
            "cycles": [asdict(c) for c in self.cycles],
        }


@dataclass(kw_only=True)
class BatchResult:
    """One generate_batch call: a result per prompt (in prompt order), the call's wall time, the most requests
    decoded at once, and the bytes of the KV caches it allocated."""

    results: list[GenerationResult]
    wall_s: float
    batch_size: int
    cache_bytes: int

    @property
    def new_tokens(self) -> int:
        return sum(len(r.tokens) for r in self.results)

    @property
    def tok_s(self) -> float:
        """Output tokens per second of the whole batch (throughput)."""
        return self.new_tokens / self.wall_s if self.wall_s > 0 else 0.0
