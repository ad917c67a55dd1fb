"""Random draws by inverse CDF, a row's uniforms from its own generator: what the target's sampling, the verifiers
and a sampling drafter share, so a row draws the same whatever else is in its batch."""
from __future__ import annotations

import torch


def uniforms(generators: list[torch.Generator], count: int, device) -> torch.Tensor:
    """float64 [B, count]: `count` uniforms in [0, 1) from each row's generator, in order."""
    return torch.stack([torch.rand(count, generator=g, device=device, dtype=torch.float64) for g in generators])


def inverse_cdf(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """probs [..., V] (rows summing to ~1), uniforms [...] in [0, 1) -> LongTensor [...]: the token whose float64
    CDF interval holds u x total; only tokens of probability > 0 are drawn."""
    cdf = probs.double().cumsum(dim=-1)
    total = cdf[..., -1:].contiguous()
    drawn = torch.searchsorted(cdf, uniforms[..., None] * total, right=True)
    last = torch.searchsorted(cdf, total)  # where the CDF first reaches its total: a token of probability > 0
    return torch.minimum(drawn, last)[..., 0]  # u * total rounded up to the total falls back to it
