"""What a batch decodes with and where it stands: the requests in its rows, the models (read-only for the call) and
the batch's device state (its one owner: `BatchState`), kept row for row with the caches.

Row b of every tensor here is the request in row b of the scheduler's batch; `BatchState.select_rows` drops rows
from all of them at once. The cycle's stages (eagle_infer.decoding.cycle) read a BatchState and return what they
produced; `cycle.draft_cycle` and `cycle.feed_pending` write it, nothing else does (the caches excepted, which the
stages grow and compact through their own methods).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from .. import constants
from ..head.block_runner import BlockRunner
from ..head.head_runner import HeadRunner
from ..models.kv_cache import KVCache
from ..trees.cost import Plan
from ..trees.copy_choice import CopyChoice
from ..trees.lookup import CopyRates


class Output:
    """Collects a request's emitted tokens; knows when to stop."""

    def __init__(self, max_new: int, stop_ids: set[int], stream: Callable[[list[int]], None] | None):
        self.tokens: list[int] = []
        self.max_new, self.stop_ids, self.stream = max_new, stop_ids, stream
        self.reason = ""

    def emit(self, new: list[int]) -> bool:
        """Append tokens up to a stop id or the length limit; True when generation is over."""
        taken = []
        for t in new:
            taken.append(t)
            if t in self.stop_ids:
                self.reason = "stop"
                break
            if len(self.tokens) + len(taken) >= self.max_new:
                self.reason = "length"
                break
        self.tokens += taken
        if self.stream and taken:
            self.stream(taken)
        return bool(self.reason)


@dataclass
class Request:
    """A request decoding in one batch row: its prompt, output, sampler and stats, and what its next cycle starts
    from (root: the newest emitted token, not yet in the target's cache; on the device: BatchState.roots)."""

    index: int
    prompt: list[int]
    out: Output
    generator: torch.Generator
    start: float
    prefill_s: float = 0.0
    cycles: list = field(default_factory=list)
    root: int = 0
    rates: CopyRates | None = None  # acceptance of copied tokens per depth, when drafting with lookup
    choice: CopyChoice | None = None  # which way its cycles draft, when a head drafts beside lookup

    def context(self) -> list[int]:
        """The prompt and every token emitted so far (the last one is the next cycle's root)."""
        return self.prompt + self.out.tokens


@dataclass(frozen=True)
class Models:
    """What a batch decodes with, read-only for the call: the target, the head as it drafts (None: a headless
    method; a BlockRunner for a block drafter, whose cache is its context and whose feature is its context state)
    and the target layers whose states a fused head reads (() otherwise)."""

    target: object
    head: HeadRunner | BlockRunner | None

    @property
    def feature_layers(self) -> tuple[int, ...]:
        return tuple(self.head.config.feature_layers) if self.head is not None else ()


@dataclass
class Pending:
    """The head's inputs committed by the last cycle, not yet fed: features [B, W, H or k*H], pair tokens [B, W];
    row b's first counts[b] are real (counts: host list, on_device: the same as a LongTensor [B, 1]); newest:
    LongTensor [B], each row's last real index (counts - 1; 0 for a row with none)."""

    features: torch.Tensor
    tokens: torch.Tensor
    counts: list[int]
    on_device: torch.Tensor
    newest: torch.Tensor

    def select(self, rows: torch.Tensor, kept: list[int]) -> "Pending":
        """These rows only (rows: LongTensor of the kept row indices, kept: the same on the host)."""
        return Pending(self.features.index_select(0, rows), self.tokens.index_select(0, rows),
                       [self.counts[r] for r in kept], self.on_device.index_select(0, rows),
                       self.newest.index_select(0, rows))

    def then(self, new: "Pending") -> "Pending":
        """These inputs followed by `new`'s, row by row (a cycle between the two commits fed the head nothing: its
        copies alone were drafted): row b's counts[b] pairs, then new's new.counts[b], packed from column 0."""
        counts = [a + b for a, b in zip(self.counts, new.counts)]
        width, old = max(counts), self.features.shape[1]
        columns = constants.arange(0, width, self.tokens.device)[None]  # [1, width]
        # column j of row b: its own j-th pair while j < counts[b], else new's (j - counts[b])-th (clamped: padding)
        index = torch.where(columns < self.on_device, columns, old + columns - self.on_device)
        index = index.clamp(max=old + new.features.shape[1] - 1)  # [B, width]
        features = torch.cat((self.features, new.features), 1)
        features = features.gather(1, index[..., None].expand(-1, -1, features.shape[-1]))
        tokens = torch.cat((self.tokens, new.tokens), 1).gather(1, index)
        on_device = self.on_device + new.on_device
        return Pending(features, tokens, counts, on_device, (on_device[:, 0] - 1).clamp(min=0))

    def clear(self, b: int) -> None:
        """Row b has nothing to feed (a request admitted in it). (on_device and newest are the commit's counts and
        acceptance counts themselves, written here in place: nothing reads those after the commit.)"""
        self.counts[b] = 0
        self.on_device[b] = 0
        self.newest[b] = 0


@dataclass
class BatchState:
    """A batch's device state, row for row: the target's cache and the head's (None headless); roots [B, 1], each
    row's newest token (the next verification's root); features [B, H], the head's predicted feature after each
    row's committed context (None headless); pending, the head's inputs the last cycle committed and no forward has
    fed yet; plan, an auto budget's plan for the next cycle (cost.Plan; None: none yet, or a fixed tree); carry_s
    and carry_forwards, the head's seconds and forwards spent after the last verification (feeding), counted in
    the next cycle's draft time."""

    cache: KVCache
    head_cache: KVCache | None
    roots: torch.Tensor
    features: torch.Tensor | None
    pending: Pending | None = None
    plan: Plan | None = None
    carry_s: float = 0.0
    carry_forwards: int = 0

    @classmethod
    def empty(cls, models: Models, rows: int, max_len: int, head_room: int) -> "BatchState":
        """Caches of `rows` rows and max_len positions (the head's with head_room more, for the nodes a cycle feeds
        it), zero roots and features."""
        target, head = models.target, models.head
        roots = torch.zeros(rows, 1, dtype=torch.long, device=target.device)
        return cls(target.new_cache(rows, max_len), head.new_cache(rows, max_len + head_room) if head else None,
                   roots, head.module.weight.new_zeros(rows, head.config.hidden_size) if head else None)

    def select_rows(self, keep: list[int]) -> None:
        """Keep these rows (host indices, ascending) of every cache and tensor, in this order."""
        self.cache.select_rows(keep)
        index = torch.tensor(keep, device=self.roots.device)
        self.roots = self.roots.index_select(0, index)
        if self.head_cache is not None:
            self.head_cache.select_rows(keep)
            self.features = self.features.index_select(0, index)
            if self.pending is not None:
                self.pending = self.pending.select(index, keep)
