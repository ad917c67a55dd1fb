"""A cycle's trees as one verification batch: padded to [B, N] on the device, the target's input built from them,
greedy acceptance of every row at once, and the one device-to-host copy a greedy cycle makes."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .tree import DraftTree, ancestor_masks
from .verify import Acceptance, verify_greedy


@dataclass
class TreeBatch:
    """A cycle's trees padded to [B, N] on the device and the target's verification input built from them."""

    tokens: torch.Tensor  # [B, N]; padding slots hold the root token
    parents: torch.Tensor  # [B, N]; padding slots are children of the root
    sizes: torch.Tensor  # [B] real nodes per row
    ids: torch.Tensor  # [B, 1 + N] root then nodes
    positions: torch.Tensor  # [B, 1 + N]
    allowed: torch.Tensor  # bool [B, 1 + N, 1 + N] tree attention (ancestors and self)
    probs: torch.Tensor  # [B, N] draft probabilities (padding: 0)


def verification_input(trees: list[DraftTree], roots: list[int], bases: list[int], device, width: int) -> TreeBatch:
    """Each row's [root, tree...] padded to `width` nodes (>= the largest tree); roots[b] is row b's root token at
    sequence position bases[b]. A padding slot sits at the root's position and sees only the root and itself.
    Built-in drafters give every row the same size, so without padding this is one stack per field."""
    b, sizes = len(trees), [len(t) for t in trees]
    n = width
    root_ids = torch.tensor(roots, dtype=torch.long, device=device)[:, None]
    if min(sizes) == n:
        stack = lambda field: torch.stack([getattr(t, field).to(device) for t in trees])  # noqa: E731
        tokens, parents, depths, probs = stack("tokens"), stack("parents"), stack("depths"), stack("probs").float()
    else:
        tokens = root_ids.repeat(1, n)
        parents = torch.full((b, n), -1, dtype=torch.long, device=device)
        depths = torch.zeros(b, n, dtype=torch.long, device=device)
        probs = torch.zeros(b, n, device=device)
        for i, t in enumerate(trees):
            k = len(t)
            tokens[i, :k], parents[i, :k], depths[i, :k], probs[i, :k] = t.tokens, t.parents, t.depths, t.probs
    ids = torch.cat([root_ids, tokens], 1)
    base = torch.tensor(bases, dtype=torch.long, device=device)[:, None]
    positions = base + torch.cat([depths.new_zeros(b, 1), depths], 1)
    return TreeBatch(tokens=tokens, parents=parents, sizes=torch.tensor(sizes, device=device), ids=ids,
                     positions=positions, allowed=ancestor_masks(parents), probs=probs)


def host_rows(batch: TreeBatch, first: list[torch.Tensor]) -> tuple[list[list[float]], list[list[int]], list[list[float]]]:
    """One device-to-host copy of `first` (tensors [B, *]) and the trees' tokens and probabilities: (the rows of
    `first` concatenated, tokens [B][N], probs [B][N]); float64 holds every token id exactly."""
    n = batch.tokens.shape[1]
    host = torch.cat([x.double() for x in first] + [batch.tokens.double(), batch.probs.double()], 1).tolist()
    m = len(host[0]) - 2 * n
    return [r[:m] for r in host], [[int(x) for x in r[m : m + n]] for r in host], [r[m + n :] for r in host]


def greedy_outcomes(batch: TreeBatch, logits: torch.Tensor):
    """Batched greedy acceptance (verify.verify_greedy) of logits [B, 1 + N, V] and the trees, copied to the host in
    one transfer: one Acceptance per row (path and tested node indices ascending = root-to-leaf and visiting order),
    tokens [B][N], probs [B][N]."""
    g = verify_greedy(batch.tokens, batch.parents, batch.sizes, batch.allowed, logits)
    n = batch.tokens.shape[1]
    head, tokens, probs = host_rows(batch, [g.bonus[:, None], g.on_path, g.tested])
    outcomes = [
        Acceptance([i for i in range(n) if row[1 + i]], int(row[0]), [i for i in range(n) if row[1 + n + i]])
        for row in head
    ]
    return outcomes, tokens, probs
