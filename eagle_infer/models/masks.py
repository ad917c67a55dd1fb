"""Additive attention masks over a KV cache whose rows hold committed prefixes followed by a forward's new tokens:
0 where a query sees a key, the dtype's lowest value elsewhere. The target's verification, the head's feeds and
training's unrolled steps all build their masks here."""
from __future__ import annotations

import torch

from .. import constants


def additive(seen: torch.Tensor, dtype: torch.dtype, out: torch.Tensor | None = None) -> torch.Tensor:
    """An additive attention mask from bool `seen`: 0 where seen, the dtype's lowest value elsewhere (one operator;
    written into `out` when given)."""
    device = seen.device
    return torch.where(seen, constants.filled((), 0.0, dtype, device),
                       constants.filled((), torch.finfo(dtype).min, dtype, device), out=out)


def additive_mask(allowed: torch.Tensor, prefix: int | list[int], dtype: torch.dtype, device,
                  prefix_column: torch.Tensor | None = None) -> torch.Tensor:
    """Attention mask [B, 1, T, max(prefix) + S] over a cache whose row b holds prefix[b] committed positions and
    then this forward's S new ones: row b's queries see its whole prefix, its new block as `allowed` says, and
    nothing past that (other rows' longer prefixes). allowed: bool [T, S] (shared) or [B, T, S]; an int prefix
    means every row has it (B = 1 for a shared allowed); prefix_column: the prefixes as a LongTensor [B, 1] on the
    device where the caller has them (else they are copied there when rows differ)."""
    if allowed.device != torch.device(device):
        allowed = allowed.to(device)
    if allowed.dim() == 2:
        allowed = allowed[None]
    prefixes = [prefix] * allowed.shape[0] if isinstance(prefix, int) else list(prefix)
    if allowed.shape[0] == 1 and len(prefixes) > 1:
        allowed = allowed.expand(len(prefixes), -1, -1)
    b, t, s = allowed.shape
    width = max(prefixes) + s
    low = torch.finfo(dtype).min
    if min(prefixes) == max(prefixes):  # every row's prefix visible, then `allowed`: a few ops
        return torch.nn.functional.pad(additive(allowed, dtype), (prefixes[0], 0))[:, None]
    if prefix_column is None:
        prefix_column = torch.tensor(prefixes, device=device)[:, None]
    # [B, T, 1 + S + 1]: a prefix key's value (seen), the new keys' (as `allowed` says), a key past them (hidden)
    table = torch.cat([constants.filled((b, t, 1), 0.0, dtype, device),
                       additive(allowed, dtype),
                       constants.filled((b, t, 1), low, dtype, device)], -1)
    # key column c of row b: its prefix (c < prefix: 0), new key c - prefix (1 + it), or past the block (S + 1)
    column = (constants.arange(1, width + 1, device) - prefix_column).clamp_(0, s + 1).view(b, 1, 1, width)
    # [B, 1, T, W] by one index: row b's query i reads its table at each key's column
    return table[constants.index_along(b, 0, 4, device), constants.index_along(t, 2, 4, device), column]


def causal_mask(prefix: int | list[int], t: int, dtype, device, keys: torch.Tensor | None = None) -> torch.Tensor:
    """Additive [B, 1, t, max(prefix) + t]: new token i sees its row's prefix and new tokens <= i (as
    additive_mask(lower triangle, ...) builds it; rows of unequal prefixes by one comparison: key c is seen by new
    token i of row b iff c <= prefix[b] + i). keys: LongTensor [B, t] on the device, prefix[b] + i (each new
    token's own key: its position), where the caller has them."""
    if isinstance(prefix, int) or min(prefix) == max(prefix):
        return additive_mask(constants.lower_triangle(t, device), prefix, dtype, device)
    if keys is None:
        keys = torch.tensor(prefix, device=device)[:, None] + constants.arange(0, t, device)
    return additive(constants.arange(0, max(prefix) + t, device) <= keys.view(-1, 1, t, 1), dtype)  # [B, 1, t, W]
