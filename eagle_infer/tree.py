"""Draft trees: what every drafter returns and the verifier consumes.

A tree of N draft nodes hangs below a root (the last emitted token, not yet in the target's cache). Nodes are in
breadth-first order: depth never decreases with the index and every parent precedes its children. In the flattened
verification input, index 0 is the root and node i sits at index i + 1.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import EagleError


def padded_width(n: int, cap: int) -> int:
    """The bucket a tree of n nodes is padded to when trees are padded (DecodeConfig.pad_trees): the next power of
    two, at most `cap` (the tree budget), never below n. A run then verifies at most log2(cap) + 2 distinct widths,
    so a GPU records that many CUDA graphs instead of one per tree size."""
    if n <= 1:
        return n
    return max(n, min(1 << (n - 1).bit_length(), cap))


@dataclass
class DraftTree:
    """tokens, parents, depths, probs: [N]. parents[i] is a node index, or -1 for a child of the root.

    depths[i] >= 1 is the distance from the root; probs[i] is the draft head's probability of tokens[i] given its
    parent (its own confidence). Siblings appear in the order the drafter ranked them. copied: bool [N], which
    nodes prompt lookup proposed (None: a tree drafted without lookup).
    """

    tokens: torch.Tensor
    parents: torch.Tensor
    depths: torch.Tensor
    probs: torch.Tensor
    copied: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.tokens.numel())

    @property
    def depth(self) -> int:
        return int(self.depths.max()) if len(self) else 0

    def children(self) -> list[list[int]]:
        """children()[j] lists the node indices under flattened index j (0 = root, node i = i + 1), in order."""
        out: list[list[int]] = [[] for _ in range(len(self) + 1)]
        for i, p in enumerate(self.parents.tolist()):
            out[p + 1].append(i)
        return out

    def ancestor_mask(self) -> torch.Tensor:
        """Bool [N+1, N+1] over flattened indices: row j may attend column c iff c is j or an ancestor of j."""
        return ancestor_masks(self.parents[None].cpu())[0]


def path_values(parents: list[int], probs: list[float]) -> list[float]:
    """Products of probs along each node's path from depth 1 (parents[i] < i, -1 = child of the root)."""
    values: list[float] = []
    for par, prob in zip(parents, probs):
        values.append(prob * (1.0 if par < 0 else values[par]))
    return values


def ancestor_masks(parents: torch.Tensor) -> torch.Tensor:
    """parents: LongTensor [B, N] of breadth-first trees (-1 = child of the root) -> bool [B, N+1, N+1] ancestor
    masks over flattened indices (0 = root, node i = i + 1), each row its own tree, on parents' device.

    Tensor ops only (no per-node loop, no host sync): the reflexive parent relation closed transitively by
    ceil(log2(N+1)) boolean squarings."""
    b, n = parents.shape
    up = torch.cat([parents.new_zeros(b, 1), parents + 1], 1)  # flattened parent of each flattened index (root: 0)
    eye = torch.eye(n + 1, dtype=torch.bool, device=parents.device)
    step = eye.expand(b, -1, -1) | torch.nn.functional.one_hot(up, n + 1).bool()
    closure = step.float()
    for _ in range(max(n, 1).bit_length()):
        closure = (closure @ closure).clamp_(max=1)
    return closure.bool()


def additive_mask(allowed: torch.Tensor, prefix: int | list[int], dtype: torch.dtype, device) -> torch.Tensor:
    """Attention mask [B, 1, T, max(prefix) + S] over a cache whose row b holds prefix[b] committed positions and
    then this forward's S new ones: row b's queries see its whole prefix, its new block as `allowed` says, and
    nothing past that (other rows' longer prefixes). allowed: bool [T, S] (shared) or [B, T, S]; an int prefix
    means every row has it (B = 1 for a shared allowed)."""
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
        blocked = (~allowed).to(dtype).mul_(low)  # (allowed slots hold -0.0: adding it changes no score)
        return torch.nn.functional.pad(blocked, (prefixes[0], 0))[:, None]
    rel = torch.arange(width, device=device)[None] - torch.tensor(prefixes, device=device)[:, None]  # [B, W]
    padded = torch.cat([allowed, allowed.new_zeros(b, t, 1)], dim=-1)  # column s: "past the new block"
    block = padded.gather(-1, rel.clamp(0, s)[:, None, :].expand(b, t, width))
    full = (rel < 0)[:, None, :] | block
    mask = torch.zeros(b, t, width, dtype=dtype, device=device)
    return mask.masked_fill_(~full, low)[:, None]


def causal_mask(prefix: int | list[int], t: int, dtype, device) -> torch.Tensor:
    """Additive [B, 1, t, max(prefix) + t]: new token i sees its row's prefix and new tokens <= i."""
    return additive_mask(torch.ones(t, t, dtype=torch.bool).tril(), prefix, dtype, device)


# EAGLE-1 style static tree: each path lists child ranks from the root (rank 0 = the head's top-1). A CPU-sized
# default (26 nodes, depth 6): wide near the root where the head is surest, a long top-1 spine below.
DEFAULT_STATIC_PATHS: tuple[tuple[int, ...], ...] = (
    (0,), (1,), (2,), (3,),
    (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (3, 0),
    (0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 0), (0, 2, 0),
    (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 1, 0), (0, 1, 0, 0),
    (0, 0, 0, 0, 0), (0, 0, 0, 0, 1), (0, 0, 0, 1, 0),
    (0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 1), (0, 0, 0, 0, 1, 0),
)


def chain_paths(depth: int) -> tuple[tuple[int, ...], ...]:
    """A chain is the static tree of one top-1 path."""
    return tuple((0,) * d for d in range(1, depth + 1))


def check_paths(paths) -> tuple[tuple[int, ...], ...]:
    """Validate a static tree: non-empty paths of non-negative ranks, every proper prefix also a path, no repeats."""
    norm = tuple(tuple(int(r) for r in p) for p in paths)
    seen = set(norm)
    if not norm:
        raise EagleError("static tree is empty: expected a list of paths such as [[0], [1], [0, 0]]")
    if len(seen) != len(norm):
        raise EagleError("static tree lists a path twice: expected distinct paths")
    for p in norm:
        if not p or min(p) < 0:
            raise EagleError(f"static tree path {list(p)} is invalid: expected a non-empty list of ranks >= 0")
        if len(p) > 1 and p[:-1] not in seen:
            raise EagleError(f"static tree path {list(p)} has no parent path {list(p[:-1])}: expected a closed tree")
    return tuple(sorted(norm, key=lambda p: (len(p), p)))
