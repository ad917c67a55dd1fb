"""Preallocated KV cache shared by the target and the draft head.

Keys and values of every layer live in two tensors `k`, `v` of shape [layers, batch, kv_heads, max_len, head_dim].
Positions [0, length) hold committed tokens. A forward writes its T new tokens at [length, length + T) and returns
views over [0, length + T); `advance(T)` commits them and `keep(start, idx)` keeps only some of them (the accepted
path of a tree) by gathering them into contiguous positions starting at `start`.
"""
from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin


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
        s, n = self.store.length, key_states.shape[-2]
        self.store.k[self.layer, :, :, s : s + n] = key_states
        self.store.v[self.layer, :, :, s : s + n] = value_states
        return self.store.k[self.layer, :, :, : s + n], self.store.v[self.layer, :, :, : s + n]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.store.length + query_length, 0

    def get_seq_length(self) -> int:
        return self.store.length

    def get_max_length(self) -> int:
        return self.store.max_len


class KVCache:
    """Preallocated keys/values; `length` positions are committed (the same for every row of the batch)."""

    def __init__(self, layers: int, batch: int, kv_heads: int, head_dim: int, max_len: int, dtype, device):
        shape = (layers, batch, kv_heads, max_len, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.max_len = max_len
        self.length = 0
        self.hf = Cache(layers=[_LayerView(self, i) for i in range(layers)])

    def advance(self, n: int) -> None:
        """Commit the n positions the last forward wrote."""
        self.length += n

    def truncate(self, length: int) -> None:
        """Forget everything at or after `length`."""
        self.length = length

    def keep(self, start: int, idx: torch.Tensor) -> None:
        """Keep the written positions start + idx (idx ascending, idx[i] >= i) at start, start+1, ...; commit them.

        idx: LongTensor [m] of offsets relative to `start`.
        """
        m = idx.numel()
        src = idx.to(self.k.device) + start
        self.k[:, :, :, start : start + m] = self.k.index_select(3, src)
        self.v[:, :, :, start : start + m] = self.v.index_select(3, src)
        self.length = start + m
