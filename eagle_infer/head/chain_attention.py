"""Attention of draft chains unrolled in blocks (EAGLE-3's training-time test) in O(n^2 + k n), not O(k n^2).

Step k of the training-time test (eagle_train.training.objective.ttt_outputs) runs the head over n positions whose keys and
values the cache has stacked after those of steps 0..k-1: [B, kvh, (k+1) n, D]. Query i (the chain started at the
real pair s = i - k) attends the real pairs j <= s of block 0 and, in block j = 1..k, one key: the same chain's
step-j node at position s + j. As one additive mask that is k + 1 full blocks of n keys; here block 0 is one
masked n x n product and blocks 1..k one dot product per query. Queries i < k start no chain: they see only block
nodes (never a real pair, never a valid query's node) and are left out of the loss.

Training on a CPU packs a batch's rows end to end into one sequence (eagle_train.training.objective.packed_outputs): a call
given `segments` (the rows' lengths) attends within each row only, so the layers' products run once over real
tokens and never over padding.

The draft head's decoder layers run with this as their attention implementation (NAME, registered with
transformers): a call given `chain_step=k` or `segments` takes this path; any other call is transformers' SDPA
attention as is.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from ..errors import EagleError

NAME = "eagle_chain"


def real_visible(n: int, step: int, device) -> torch.Tensor:
    """[n, n] bool: query i of step `step` sees the real pair j (j <= i - step)."""
    i = torch.arange(n, device=device)[:, None]
    return torch.arange(n, device=device)[None] <= i - step


def chain_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                    chain_step: int | None = None, segments: tuple[int, ...] | None = None,
                    **kwargs) -> tuple[torch.Tensor, None]:
    """query [B, h, n, D]; key, value [B, kvh, (chain_step + 1) n, D] -> ([B, n, h, D], None). Without chain_step:
    transformers' SDPA attention with the given mask. Grouped-query heads attend as views (no repeated keys).
    segments: lengths of independent sequences packed end to end along n (summing to n); each attends within
    itself only, causally (attention_mask unused), as if it were its own batch row."""
    if segments is None and chain_step is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    return _unrolled(module, query, key, value, dropout, scaling, chain_step, segments, **kwargs)


@torch.compiler.disable
def _unrolled(module, query, key, value, dropout, scaling, chain_step, segments, **kwargs):
    """chain_attention's training paths (a chain step, packed rows), always eager: a training step compiled with
    train.compile runs its layers' other operations as graphs and this between them, so that neither the step nor
    a batch's row lengths ever make a new graph."""
    b, h, n, d = query.shape
    k = chain_step or 0
    if key.shape[2] != (k + 1) * n:
        raise EagleError(f"chain step {k} over {n} positions needs {(k + 1) * n} cached keys, got {key.shape[2]}")
    scale = scaling if scaling is not None else d**-0.5
    keys, values = key.unflatten(2, (k + 1, n)), value.unflatten(2, (k + 1, n))  # [B, kvh, k + 1, n, D]
    if segments is None:
        return _chain(query, keys, values, k, scale), None
    if sum(segments) != n:
        raise EagleError(f"segments {list(segments)} sum to {sum(segments)}, not the {n} positions attended")
    outs, start = [], 0
    for m in segments:
        q, ks, vs = query[:, :, start : start + m], keys[:, :, :, start : start + m], values[:, :, :, start : start + m]
        if chain_step is None:
            outs.append(sdpa_attention_forward(module, q, ks[:, :, 0], vs[:, :, 0], None, dropout=dropout,
                                               scaling=scaling, **kwargs)[0])
        else:
            outs.append(_chain(q, ks, vs, k, scale))
        start += m
    return torch.cat(outs, dim=1), None


def _chain(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, k: int, scale: float) -> torch.Tensor:
    """Step k's attention (module docstring): query [B, h, n, D]; keys, values [B, kvh, k + 1, n, D], block j the
    step-j keys of the same n positions -> [B, n, h, D]."""
    b, h, n, d = query.shape
    kvh = keys.shape[1]
    q = query.view(b, kvh, h // kvh, n, d)  # [B, kvh, g, n, D]: the g query heads of each key/value head
    keys, values = keys[:, :, None], values[:, :, None]
    real = (q @ keys[:, :, :, 0].transpose(-1, -2)).float() * scale  # [B, kvh, g, n, n]
    real = real.masked_fill(~real_visible(n, k, query.device), float("-inf"))
    # Block j's one key per query: the node at i - (k - j), none for queries i < k - j (all of them in a sequence
    # of n <= k - j positions).
    shifts = [k - j for j in range(1, k + 1)]
    nodes = [F.pad((q[..., s:, :] * keys[:, :, :, j, : n - s]).sum(-1).float() * scale, (s, 0), value=float("-inf"))
             if s < n else real.new_full(real.shape[:-1], float("-inf")) for j, s in zip(range(1, k + 1), shifts)]
    weights = torch.cat([real, *(s[..., None] for s in nodes)], dim=-1).softmax(-1).to(query.dtype)
    out = weights[..., :n] @ values[:, :, :, 0]
    for j, s in zip(range(1, k + 1), shifts):
        if s < n:
            out = out + F.pad(weights[..., s:, n + j - 1, None] * values[:, :, :, j, : n - s], (0, 0, s, 0))
    return out.view(b, h, n, d).transpose(1, 2).contiguous()


AttentionInterface.register(NAME, chain_attention)
