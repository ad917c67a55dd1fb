"""Preallocated KV cache shared by the target and the draft head, with one committed length per batch row.

Keys and values live in two lists `k`, `v` of one tensor per layer, [batch, kv_heads, max_len, head_dim] (separate
tensors, so a compiled forward writes each in place). Row b holds committed tokens at positions [0, lengths[b]). A
forward of T new tokens writes row b's at [lengths[b], lengths[b] + T) and every layer's attention sees keys
[0, span(T)) with span(T) = max(lengths) + T: the caller's mask hides, in each row, the slots past that row's own
new tokens. A `static` cache (the compiled forward's, eagle_infer/compiled.py) instead always attends over all
max_len slots, and writes where `static_mask(...)`, called before the forward, put the slots as tensors: shapes
and Python state then stay the same from step to step. `advance` commits what the last forward wrote,
`keep(row, start, idx)` keeps only some of it (a tree's accepted path) by gathering it into contiguous positions,
`select_rows` drops finished rows, and `row(b)` is a one-row view sharing the storage.
"""
from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from .tree import causal_mask


class _LayerView(CacheLayerMixin):
    """One layer's window into a KVCache, in the shape transformers' attention modules call."""

    is_sliding = False
    is_compileable = False

    def __init__(self, store: "KVCache", layer: int):
        super().__init__()
        self.store, self.layer = store, layer
        self.is_initialized = True

    def lazy_initialization(self, key_states, value_states) -> None:  # buffers are preallocated
        pass

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """key_states, value_states: [B, kv_heads, T, D] -> all keys/values [B, kv_heads, span(T), D]."""
        store, n = self.store, key_states.shape[-2]
        k, v = store.k[self.layer], store.v[self.layer]
        if store.static:  # slots planned before the forward (tensors only: nothing here changes between steps)
            rows, index = store.static_slots
            k[rows, :, index] = key_states.transpose(1, 2)
            v[rows, :, index] = value_states.transpose(1, 2)
            return k, v
        start, rows, index = store.write_plan(n)
        if start is not None:  # every row writes at the same offset
            k[:, :, start : start + n] = key_states
            v[:, :, start : start + n] = value_states
        else:
            k[rows, :, index] = key_states.transpose(1, 2)
            v[rows, :, index] = value_states.transpose(1, 2)
        span = store.span(n)
        return k[:, :, :span], v[:, :, :span]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.store.span(query_length), 0

    def get_seq_length(self) -> int:
        return max(self.store.lengths)

    def get_max_length(self) -> int:
        return self.store.max_len


class KVCache:
    """Preallocated keys/values; `lengths[b]` positions of row b are committed."""

    def __init__(self, layers: int, batch: int, kv_heads: int, head_dim: int, max_len: int, dtype, device,
                 static: bool = False):
        shape = (batch, kv_heads, max_len, head_dim)
        new = lambda: [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]  # noqa: E731
        self._attach(new(), new(), max_len, [0] * batch, static)

    def _attach(self, k: list[torch.Tensor], v: list[torch.Tensor], max_len: int, lengths: list[int],
                static: bool) -> None:
        self.k, self.v, self.max_len, self.lengths, self.static = k, v, max_len, lengths, static
        if static:  # one compiled graph serves every cache length
            for x in k + v:
                torch._dynamo.maybe_mark_dynamic(x, 2)
                if x.is_cuda:  # written in place inside the graph: CUDA graphs capture only a fixed-address buffer
                    torch._dynamo.mark_static_address(x, guard=False)
        self._plans: dict = {}
        self.static_slots: tuple[torch.Tensor, torch.Tensor] | None = None  # see static_mask
        self.hf = Cache(layers=[_LayerView(self, i) for i in range(len(k))])

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

    def static_mask(self, mask: torch.Tensor | None, n: int, dtype) -> torch.Tensor:
        """Before a forward of n tokens over a static cache: plan the slots it writes (rows [B, 1], positions
        [B, n]) and return its additive mask over every slot: `mask` ([B or 1, 1, n, w]; None = causal after each
        row's committed length) with the slots past w hidden."""
        device = self.k[0].device
        if mask is None:
            mask = causal_mask(self.lengths, n, dtype, device)
        starts = torch.tensor(self.lengths, device=device)[:, None]
        self.static_slots = (torch.arange(self.batch, device=device)[:, None], starts + torch.arange(n, device=device))
        if n > 1:  # one compiled graph for any number of new tokens (as for the forward's inputs)
            torch._dynamo.maybe_mark_dynamic(self.static_slots[1], 1)
        return torch.nn.functional.pad(mask, (0, self.max_len - mask.shape[-1]), value=torch.finfo(mask.dtype).min)

    def write_plan(self, n: int) -> tuple[int | None, torch.Tensor | None, torch.Tensor | None]:
        """Where a forward of n tokens writes: (common start, None, None) when all rows are equally long, else
        (None, rows [B, 1], positions [B, n]) for advanced indexing."""
        key = (tuple(self.lengths), n)
        if key not in self._plans:
            if min(self.lengths) == max(self.lengths):
                plan = (self.lengths[0], None, None)
            else:
                device = self.k[0].device
                starts = torch.tensor(self.lengths, device=device)[:, None]
                plan = (None, torch.arange(self.batch, device=device)[:, None], starts + torch.arange(n, device=device))
            self._plans = {key: plan}  # lengths change every forward: keep only the newest plan
        return self._plans[key]

    def advance(self, n: int | list[int]) -> None:
        """Commit n positions of every row (or n[b] of row b) from what the last forward wrote."""
        counts = n if isinstance(n, list) else [n] * self.batch
        self.lengths = [length + c for length, c in zip(self.lengths, counts)]

    def truncate(self, lengths: int | list[int]) -> None:
        """Forget everything at or after lengths (one value for every row, or one per row)."""
        self.lengths = list(lengths) if isinstance(lengths, list) else [lengths] * self.batch

    def keep(self, row: int, start: int, idx) -> None:
        """Keep row `row`'s written positions start + idx (idx ascending, idx[i] >= i) at start, start+1, ...; commit
        them. idx: offsets relative to `start` (a list or LongTensor [m])."""
        self.keep_rows([row], [start], [idx.tolist() if isinstance(idx, torch.Tensor) else list(idx)])

    def keep_rows(self, rows: list[int], starts: list[int], kept: list[list[int]]) -> None:
        """`keep` for several rows at once: one gather per layer's keys and values for every row whose kept offsets
        are not already contiguous (a chain accepted from its first child moves nothing)."""
        moves = [(r, s, idx) for r, s, idx in zip(rows, starts, kept) if idx != list(range(len(idx)))]
        for r, s, idx in zip(rows, starts, kept):
            self.lengths[r] = s + len(idx)
        if not moves:
            return
        width = max(len(idx) for _, _, idx in moves)  # pad by repeating each row's last move (same value twice)
        src = [[s + i for i in idx] + [s + idx[-1]] * (width - len(idx)) for _, s, idx in moves]
        dst = [[s + j for j in range(len(idx))] + [s + len(idx) - 1] * (width - len(idx)) for _, s, idx in moves]
        device = self.k[0].device
        r = torch.tensor([m[0] for m in moves], device=device)[:, None]
        src, dst = torch.tensor(src, device=device), torch.tensor(dst, device=device)
        for layer in self.k + self.v:
            layer[r, :, dst] = layer[r, :, src]

    def select_rows(self, rows: list[int]) -> None:
        """Keep only these rows, in this order (finished requests stop costing attention and memory)."""
        index = torch.tensor(rows, dtype=torch.long, device=self.k[0].device)
        self._attach([x.index_select(0, index) for x in self.k], [x.index_select(0, index) for x in self.v],
                     self.max_len, [self.lengths[r] for r in rows], self.static)

    def row(self, b: int) -> "KVCache":
        """A one-row cache over row b's storage (writes land in this cache); its length starts at lengths[b] and
        is not shared: after writing through the view, set `self.lengths[b]`."""
        view = KVCache.__new__(KVCache)
        view._attach([x[b : b + 1] for x in self.k], [x[b : b + 1] for x in self.v], self.max_len, [self.lengths[b]],
                     self.static)
        return view

    def copy(self) -> "KVCache":
        """An independent cache holding the same keys, values and lengths."""
        twin = KVCache.__new__(KVCache)
        twin._attach([x.clone() for x in self.k], [x.clone() for x in self.v], self.max_len, list(self.lengths),
                     self.static)
        return twin
