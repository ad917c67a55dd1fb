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
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from .errors import EagleError

NAME = "eagle_chain"


def real_visible(n: int, step: int, device) -> torch.Tensor:
    """[n, n] bool: query i of step `step` sees the real pair j (j <= i - step)."""
    i = torch.arange(n, device=device)[:, None]
    return torch.arange(n, device=device)[None] <= i - step


def _shifted(block: torch.Tensor, shift: int) -> torch.Tensor:
    """block [B, h, n, D] moved `shift` positions later along n (zeros first): row i holds block row i - shift."""
    if shift == 0:
        return block
    return torch.cat((block.new_zeros(*block.shape[:2], shift, block.shape[3]), block[:, :, :-shift]), dim=2)


def chain_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                    chain_step: int | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """query [B, h, n, D]; key, value [B, kvh, (chain_step + 1) n, D] -> ([B, n, h, D], None). Without chain_step:
    transformers' SDPA attention with the given mask."""
    if chain_step is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    b, h, n, d = query.shape
    k = chain_step
    if key.shape[2] != (k + 1) * n:
        raise EagleError(f"chain step {k} over {n} positions needs {(k + 1) * n} cached keys, got {key.shape[2]}")
    key = key.repeat_interleave(h // key.shape[1], dim=1)
    value = value.repeat_interleave(h // value.shape[1], dim=1)
    scale = scaling if scaling is not None else d**-0.5
    real = (query @ key[:, :, :n].transpose(-1, -2)).float() * scale  # [B, h, n, n]
    real = real.masked_fill(~real_visible(n, k, query.device), float("-inf"))
    nodes = []  # block j's one score per query: the node at i - k + j (none before position k - j)
    for j in range(1, k + 1):
        score = (query * _shifted(key[:, :, j * n : (j + 1) * n], k - j)).sum(-1).float() * scale  # [B, h, n]
        nodes.append(score.masked_fill(torch.arange(n, device=query.device) < k - j, float("-inf")))
    weights = torch.cat([real, *(s[..., None] for s in nodes)], dim=-1).softmax(-1).to(query.dtype)
    out = weights[..., :n] @ value[:, :, :n]
    for j in range(1, k + 1):
        out = out + weights[..., n + j - 1, None] * _shifted(value[:, :, j * n : (j + 1) * n], k - j)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, chain_attention)
