"""Attention of draft chains unrolled in blocks (EAGLE-3's training-time test) in O(n^2 + k n), not O(k n^2).

Step k of the training-time test (eagle_train.objective.ttt_outputs) runs the head over n positions whose keys and
values the cache has stacked after those of steps 0..k-1: [B, kvh, (k+1) n, D]. Query i (the chain started at the
real pair s = i - k) attends the real pairs j <= s of block 0 and, in block j = 1..k, one key: the same chain's
step-j node at position s + j. As one additive mask that is k + 1 full blocks of n keys; here block 0 is one
masked n x n product and blocks 1..k one dot product per query. Queries i < k start no chain: they see only block
nodes (never a real pair, never a valid query's node) and are left out of the loss.

The draft head's decoder layers run with this as their attention implementation (NAME, registered with
transformers): a call given `chain_step=k` takes this path; any other call is transformers' SDPA attention as is.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from .errors import EagleError

NAME = "eagle_chain"


def real_visible(n: int, step: int, device) -> torch.Tensor:
    """[n, n] bool: query i of step `step` sees the real pair j (j <= i - step)."""
    i = torch.arange(n, device=device)[:, None]
    return torch.arange(n, device=device)[None] <= i - step


def chain_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                    chain_step: int | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """query [B, h, n, D]; key, value [B, kvh, (chain_step + 1) n, D] -> ([B, n, h, D], None). Without chain_step:
    transformers' SDPA attention with the given mask. Grouped-query heads attend as views (no repeated keys)."""
    if chain_step is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    b, h, n, d = query.shape
    k, kvh = chain_step, key.shape[1]
    if key.shape[2] != (k + 1) * n:
        raise EagleError(f"chain step {k} over {n} positions needs {(k + 1) * n} cached keys, got {key.shape[2]}")
    scale = scaling if scaling is not None else d**-0.5
    q = query.view(b, kvh, h // kvh, n, d)  # [B, kvh, g, n, D]: the g query heads of each key/value head
    keys, values = key.unflatten(2, (k + 1, n))[:, :, None], value.unflatten(2, (k + 1, n))[:, :, None]
    real = (q @ keys[:, :, :, 0].transpose(-1, -2)).float() * scale  # [B, kvh, g, n, n]
    real = real.masked_fill(~real_visible(n, k, query.device), float("-inf"))
    # Block j's one key per query: the node at i - (k - j), none for queries i < k - j.
    nodes = [F.pad((q[..., k - j :, :] * keys[:, :, :, j, : n - (k - j)]).sum(-1).float() * scale, (k - j, 0),
                   value=float("-inf")) for j in range(1, k + 1)]
    weights = torch.cat([real, *(s[..., None] for s in nodes)], dim=-1).softmax(-1).to(query.dtype)
    out = weights[..., :n] @ values[:, :, :, 0]
    for j in range(1, k + 1):
        shift = k - j
        out = out + F.pad(weights[..., shift:, n + j - 1, None] * values[:, :, :, j, : n - shift], (0, 0, shift, 0))
    return out.view(b, h, n, d).transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, chain_attention)
