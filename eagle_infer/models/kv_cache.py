"""Preallocated KV cache shared by the target and the draft head, with one committed length per batch row.

Keys and values live in one tensor [2, layers, batch, kv_heads, max_len, head_dim] (keys, then values), read as two
lists `k`, `v` of per-layer views [batch, kv_heads, max_len, head_dim] (a compiled forward writes each in place;
compacting every layer's keys and values at once is one index op over the whole tensor). Row b holds committed
tokens at positions [0, lengths[b]). A forward of T new tokens writes row b's at [lengths[b], lengths[b] + T) and
every layer's attention sees keys [0, span(T)) with span(T) = max(lengths) + T: the caller's mask hides, in each
row, the slots past that row's own new tokens. A `static` cache (the compiled forward's,
eagle_infer/models/compiled.py) instead always attends over all max_len slots and writes where tensor slots say, so
shapes and Python state stay the same from step to step.

A forward asks the cache two pure questions before it runs: `slots(T)` (where its T new keys go, a `Slots` value
passed down to every layer's `write`) and `attention_mask(mask, T, dtype)` (the caller's mask over the keys it
attends). `advance` commits what the last forward wrote, `keep_paths` keeps only some of it in every row (the
trees' accepted paths) by gathering it into contiguous positions on the device, `select_rows` drops finished rows,
and `row(b)` is a one-row view sharing the storage. The rows' lengths live on the host (`lengths`) and, for the
cycle, on the device too, as a column [B, 1] (`length_column`): operations that know the new lengths on the device
keep that copy, so a cycle never copies lengths from the host.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import constants
from .masks import causal_mask


@dataclass(frozen=True)
class Slots:
    """Where one forward of n new tokens writes its keys and values, and how many key positions it attends.

    Either every row writes at the common offset `start` (rows None), or row b writes at index[b] (rows [B, 1],
    index [B, n], LongTensors on the cache's device: a static cache's and unequal rows' way). span: the key
    positions attended, None for every slot (a static cache: no Python value that changes between steps)."""

    start: int | None
    rows: torch.Tensor | None
    index: torch.Tensor | None
    span: int | None


def write(k: torch.Tensor, v: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
          slots: Slots) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer's cache views k, v [B, kvh, max_len, D]: store keys, values [B, kvh, n, D] where `slots` says and
    return every key and value the forward attends, [B, kvh, slots.span or max_len, D]."""
    if slots.rows is None:
        n = keys.shape[-2]
        k[:, :, slots.start : slots.start + n] = keys
        v[:, :, slots.start : slots.start + n] = values
    else:
        k[slots.rows, :, slots.index] = keys.transpose(1, 2)
        v[slots.rows, :, slots.index] = values.transpose(1, 2)
    if slots.span is None:
        return k, v
    return k[:, :, : slots.span], v[:, :, : slots.span]


class KVCache:
    """Preallocated keys/values; `lengths[b]` positions of row b are committed."""

    def __init__(self, layers: int, batch: int, kv_heads: int, head_dim: int, max_len: int, dtype, device,
                 static: bool = False):
        store = torch.zeros((2, layers, batch, kv_heads, max_len, head_dim), dtype=dtype, device=device)
        self._attach(store, max_len, [0] * batch, static)

    def _attach(self, store: torch.Tensor, max_len: int, lengths: list[int], static: bool) -> None:
        """store: [2, layers, batch, kv_heads, max_len, head_dim], keys then values (a view of a larger cache's
        storage for `row`)."""
        self.store, self.max_len, self.lengths, self.static = store, max_len, lengths, static
        # one view per layer, three operators in all (a view of unbind may be written in place by tensors that do
        # not require grad, as inference writes; not by one that does, under grad mode)
        keys, values = store.unbind(0)
        self.k, self.v = list(keys.unbind(0)), list(values.unbind(0))
        k, v = self.k, self.v
        # (lengths, a LongTensor [B, 1] on the device, n): the lengths on the device are that column + n (added
        # when read)
        self._device_lengths: tuple[tuple[int, ...], torch.Tensor, int] | None = None
        if static:  # one compiled graph serves every cache length
            for x in k + v:
                torch._dynamo.maybe_mark_dynamic(x, 2)
                if x.is_cuda:  # written in place inside the graph: CUDA graphs capture only a fixed-address buffer
                    torch._dynamo.mark_static_address(x, guard=False)
        self._plans: dict = {}

    @staticmethod
    def bytes_needed(layers: int, batch: int, kv_heads: int, head_dim: int, max_len: int, dtype) -> int:
        """Memory of a cache of this shape (keys and values)."""
        return 2 * layers * batch * kv_heads * max_len * head_dim * torch.empty(0, dtype=dtype).element_size()

    @property
    def batch(self) -> int:
        return self.k[0].shape[0]

    @property
    def length(self) -> int:
        """The committed length shared by every row (batch-1 decoding, training); an error if rows differ."""
        if min(self.lengths) != max(self.lengths):
            raise ValueError(f"rows hold different lengths {self.lengths}: read `lengths`")
        return self.lengths[0]

    def span(self, n: int) -> int:
        """Key positions a forward of n new tokens attends over: max(lengths) + n (static: every slot)."""
        return self.max_len if self.static else max(self.lengths) + n

    def attention_mask(self, mask: torch.Tensor | None, n: int, dtype) -> torch.Tensor | None:
        """The additive mask a forward of n new tokens attends under, over its span(n) keys: `mask` ([B or 1, 1, n,
        w], w <= span(n); None = causal after each row's committed length) padded with hidden slots to the span, or
        None where SDPA's own causal mask is the same (a dynamic cache whose rows are equally long, holding nothing
        or taking one new token)."""
        if mask is None:
            equal = min(self.lengths) == max(self.lengths)
            if not self.static and equal and (n == 1 or self.lengths[0] == 0):
                return None
            mask = causal_mask(self.lengths, n, dtype, self.k[0].device)
        span = self.span(n)
        if mask.shape[-1] == span:
            return mask
        return torch.nn.functional.pad(mask, (0, span - mask.shape[-1]), value=torch.finfo(mask.dtype).min)

    def slots(self, n: int) -> Slots:
        """Where a forward of n new tokens writes: a common offset when every row is equally long (dynamic cache),
        else per-row positions as tensors (always for a static cache: nothing in them is a Python value that
        changes between steps)."""
        key = (tuple(self.lengths), n)
        if key not in self._plans:
            if min(self.lengths) == max(self.lengths) and not self.static:
                plan = Slots(self.lengths[0], None, None, self.span(n))
            else:
                device = self.k[0].device
                index = self.length_column() + constants.arange(0, n, device)
                if self.static and n > 1:  # one compiled graph for any number of new tokens (as for the inputs)
                    torch._dynamo.maybe_mark_dynamic(index, 1)
                span = None if self.static else self.span(n)
                plan = Slots(None, torch.arange(self.batch, device=device)[:, None], index, span)
            self._plans = {key: plan}  # lengths change every forward: keep only the newest plan
        return self._plans[key]

    def length_column(self) -> torch.Tensor:
        """LongTensor [B, 1]: `lengths` on the cache's device (copied there only when no operation kept it current;
        a cycle reads it several times: positions, masks, the commit)."""
        key = tuple(self.lengths)
        if self._device_lengths is None or self._device_lengths[0] != key:
            column = torch.tensor([[n] for n in self.lengths], dtype=torch.long, device=self.store.device)
            self._device_lengths = (key, column, 0)
        elif self._device_lengths[2]:  # advanced since: added now that they are read
            self._device_lengths = (key, self._device_lengths[1] + self._device_lengths[2], 0)
        return self._device_lengths[1]

    def _set_lengths(self, lengths: list[int], on_device: torch.Tensor | None) -> None:
        """New host lengths and, when the caller computed them there, the same on the device ([B, 1])."""
        self.lengths = lengths
        self._device_lengths = None if on_device is None else (tuple(lengths), on_device, 0)

    def advance(self, n: int | list[int], on_device: torch.Tensor | None = None) -> None:
        """Commit n positions of every row (or n[b] of row b; on_device: the same counts as a LongTensor [B, 1]) from
        what the last forward wrote."""
        counts = n if isinstance(n, list) else [n] * self.batch
        before, lengths = self._device_lengths, [length + c for length, c in zip(self.lengths, counts)]
        if isinstance(n, int) and before is not None and before[0] == tuple(self.lengths):  # added when read
            self.lengths, self._device_lengths = lengths, (tuple(lengths), before[1], before[2] + n)
            return
        self._set_lengths(lengths, None if on_device is None else self.length_column() + on_device)

    def truncate(self, lengths: int | list[int], on_device: torch.Tensor | None = None) -> None:
        """Forget everything at or after lengths (one value for every row, or one per row; on_device: the same as a
        LongTensor [B, 1])."""
        self._set_lengths(list(lengths) if isinstance(lengths, list) else [lengths] * self.batch, on_device)

    def keep_paths(self, kept: torch.Tensor, counts: list[int], on_device: torch.Tensor) -> None:
        """Keep, in every row b, the written positions start_b + kept[b, :counts[b]] (offsets ascending from 0,
        kept[b, i] >= i) at start_b, start_b + 1, ... and commit them, start_b being the row's committed length;
        on_device: counts as a LongTensor [B, 1]. One gather and one write over every layer's keys and values, every
        row at once (slots past a row's count receive what kept[b] names there: they lie past the new length, so
        nothing reads them before a forward writes them again)."""
        column = self.length_column()
        dst, src = column + constants.arange(0, kept.shape[1], kept.device), column + kept
        rows = constants.row_index(kept.shape[0], kept.device)
        self.store[:, :, rows, :, dst] = self.store[:, :, rows, :, src]
        self._set_lengths([s + c for s, c in zip(self.lengths, counts)], column + on_device)

    def select_rows(self, rows: list[int]) -> None:
        """Keep only these rows, in this order (finished requests stop costing attention and memory)."""
        index = torch.tensor(rows, dtype=torch.long, device=self.store.device)
        self._attach(self.store.index_select(2, index), self.max_len, [self.lengths[r] for r in rows], self.static)

    def row(self, b: int) -> "KVCache":
        """A one-row cache over row b's storage (writes land in this cache); its length starts at lengths[b] and
        is not shared: after writing through the view, set `self.lengths[b]`."""
        view = KVCache.__new__(KVCache)
        view._attach(self.store[:, :, b : b + 1], self.max_len, [self.lengths[b]], self.static)
        return view

    def copy(self) -> "KVCache":
        """An independent cache holding the same keys, values and lengths."""
        twin = KVCache.__new__(KVCache)
        twin._attach(self.store.clone(), self.max_len, list(self.lengths), self.static)
        return twin
