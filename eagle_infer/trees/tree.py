"""Draft trees: what every drafter returns and the verifier consumes.

A tree of N draft nodes hangs below a root (the last emitted token, not yet in the target's cache). Every parent
precedes its children (drafters build breadth-first trees, whose depth never decreases with the index; a hybrid's
merged trees keep the union's order, `merge.py`). In the flattened
verification input, index 0 is the root and node i sits at index i + 1.

`TreeBatch` is the contract: a cycle's trees, one per batch row, as [B, N] tensors on the device, from which the
verification input (ids, positions, ancestor masks) is built on the device. `DraftTree` is one row's tree, the
adapter for custom drafters and tests (`TreeBatch.of_trees`, `TreeBatch.row`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import constants
from ..errors import EagleError


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

    def ancestor_mask(self) -> torch.Tensor:
        """Bool [N+1, N+1] over flattened indices: row j may attend column c iff c is j or an ancestor of j."""
        return ancestor_masks(self.parents[None].cpu())[0]


@dataclass
class TreeBatch:
    """A cycle's draft trees, one per batch row, as [B, N] tensors on one device.

    Row b holds sizes[b] nodes in slots [0, sizes[b]), parents first, as a DraftTree does; the slots past it are
    padding: token 0, a child of the root at depth 0 (so verified at the root's position, seeing only the root and
    itself), prob 0, not copied, never accepted. Three host facts come with it, so nothing reads the device: `depth`,
    a bound on every row's depth (>= the deepest node); `full`, True only when every row holds N nodes; `distinct`,
    True only when siblings carry distinct tokens (every built-in drafter's trees; the verifier then skips looking
    for the first of equal siblings).

    tokens, parents, depths: LongTensor [B, N]; probs: float32 [B, N] (each node's own draft probability);
    copied: bool [B, N] (nodes prompt lookup proposed); sizes: LongTensor [B]. Read-only: its tensors may be shared
    constants (eagle_infer/constants.py: `full_rows`' sizes and copied flags), so every step builds new ones."""

    tokens: torch.Tensor
    parents: torch.Tensor
    depths: torch.Tensor
    probs: torch.Tensor
    copied: torch.Tensor
    sizes: torch.Tensor
    depth: int
    full: bool = False
    distinct: bool = False

    @property
    def batch(self) -> int:
        return self.tokens.shape[0]

    @property
    def width(self) -> int:
        return self.tokens.shape[1]

    @classmethod
    def full_rows(cls, tokens, parents, depths, probs, depth: int, copied=None, distinct: bool = False
                  ) -> "TreeBatch":
        """Trees of N nodes in every row ([B, N] tensors, no padding) drafted `depth` levels deep."""
        b, n = tokens.shape
        return cls(tokens, parents, depths, probs if probs.dtype == torch.float32 else probs.float(),
                   constants.filled((b, n), False, torch.bool, tokens.device) if copied is None else copied,
                   constants.filled((b,), n, torch.long, tokens.device), depth, True, distinct)

    @classmethod
    def of_trees(cls, trees: list[DraftTree], device, width: int | None = None) -> "TreeBatch":
        """Per-row DraftTrees (a custom drafter's, a test's) padded to `width` (default: the largest) on `device`."""
        sizes = [len(t) for t in trees]
        n = max(sizes + [width or 0])
        b = len(trees)
        tokens = torch.zeros(b, n, dtype=torch.long, device=device)
        parents = torch.full((b, n), -1, dtype=torch.long, device=device)
        depths = torch.zeros(b, n, dtype=torch.long, device=device)
        probs = torch.zeros(b, n, device=device)
        copied = torch.zeros(b, n, dtype=torch.bool, device=device)
        for i, t in enumerate(trees):
            k = len(t)
            tokens[i, :k], parents[i, :k], depths[i, :k], probs[i, :k] = t.tokens, t.parents, t.depths, t.probs
            if t.copied is not None:
                copied[i, :k] = t.copied
        return cls(tokens, parents, depths, probs, copied, torch.tensor(sizes, dtype=torch.long, device=device),
                   max([t.depth for t in trees] + [0]), min(sizes, default=0) == n)

    def padded(self, width: int) -> "TreeBatch":
        """The same trees padded with more empty slots up to `width` (>= N) nodes per row."""
        extra = width - self.width
        if extra <= 0:
            return self
        pad = lambda x, value=0: torch.nn.functional.pad(x, (0, extra), value=value)  # noqa: E731
        return TreeBatch(pad(self.tokens), pad(self.parents, -1), pad(self.depths), pad(self.probs), pad(self.copied),
                         self.sizes, self.depth, False, self.distinct)

    def valid(self) -> torch.Tensor:
        """bool [B, N]: which slots hold nodes (a node sits at depth >= 1, padding at 0)."""
        if self.full:
            return constants.filled((self.batch, self.width), True, torch.bool, self.tokens.device)
        return self.depths > 0

    def row(self, b: int) -> DraftTree:
        """Row b as a DraftTree (reads its size from the device: for adapters and tests, not the cycle)."""
        k = int(self.sizes[b])
        return DraftTree(self.tokens[b, :k], self.parents[b, :k], self.depths[b, :k], self.probs[b, :k],
                         self.copied[b, :k])

    def select(self, index: torch.Tensor, sizes: torch.Tensor, depth: int | None = None, distinct: bool = False
               ) -> "TreeBatch":
        """The nodes at slots index [B, M], renumbered: row b's sizes[b] kept nodes first (ascending, parents among
        them), then entries naming a padding slot of the row (one holding no node), which become its padding.
        distinct: the kept siblings carry distinct tokens (so do this tree's, or the caller knows)."""
        b, m = index.shape
        n = self.width
        # slot -> new slot; column n stays -1 (the root, which parents % (n + 1) reads for -1); the padding slot
        # takes some padding entry's number, which nothing reads (no node's parent is padding)
        renumber = constants.filled((b, n + 1), -1, torch.long, index.device).scatter(
            1, index, constants.slot_numbers(b, m, index.device))
        take = lambda x: x.gather(1, index)  # noqa: E731
        return TreeBatch(take(self.tokens), renumber.gather(1, self.parents % (n + 1)).gather(1, index),
                         take(self.depths), take(self.probs), take(self.copied), sizes,
                         self.depth if depth is None else depth, False, distinct or self.distinct)

    def values(self, valid: torch.Tensor | None = None) -> torch.Tensor:
        """float64 [B, N] EAGLE-2 path values: the product of probs from depth 1 down to each node, multiplied in
        the order path_values multiplies them; 0 outside `valid` (default: the padding slots)."""
        probs = self.probs.double() * (self.valid() if valid is None else valid)
        if self.depth <= 1:
            return probs
        up = self.parents + 1  # index into [1, values...]: a child of the root multiplies by 1
        held = torch.nn.functional.pad(probs, (1, 0), value=1.0)  # [B, 1 + N]: 1, then every node's value so far
        values = held[:, 1:]
        for _ in range(self.depth - 1):  # after d steps, nodes at depth <= d + 1 hold their final value
            torch.mul(probs, held.gather(1, up), out=values)
        return values


def path_values(parents: list[int], probs: list[float]) -> list[float]:
    """Products of probs along each node's path from depth 1 (parents[i] < i, -1 = child of the root)."""
    values: list[float] = []
    for par, prob in zip(parents, probs):
        values.append(prob * (1.0 if par < 0 else values[par]))
    return values


def ancestor_masks(parents: torch.Tensor) -> torch.Tensor:
    """parents: LongTensor [B, N] of trees, parents first (-1 = child of the root) -> bool [B, N+1, N+1] ancestor
    masks over flattened indices (0 = root, node i = i + 1), each row its own tree, on parents' device: row j sees
    j and its ancestors, the root's row itself only (`node_ancestors` with the root)."""
    return node_ancestors(parents, torch.float32, root=True) > 0


def node_ancestors(parents: torch.Tensor, dtype=torch.float64, root: bool = False) -> torch.Tensor:
    """parents: LongTensor [B, N] of trees, parents first (-1 = child of the root, a node without a parent among
    them) -> [B, N, N] of 0 and 1 in `dtype` (float32 or float64): (i, j) is 1 iff node j is node i or one of its
    ancestors (the root left out); with `root`, [B, N+1, N+1] over the flattened tree (0 = the root, an ancestor
    of every node; node i = i + 1).

    Two operators whatever the depth (three with the root), no host sync: with P the parent relation, strictly
    lower triangular since parents precede children, the closure I + P + P^2 + ... is (I - P)^-1, one unit lower
    triangular solve (whose diagonal is taken as 1, not read: its input is one index into a constant table). Exact:
    each row of I - P holds one off-diagonal -1, and each entry of the inverse counts the paths from i up to j, 0 or
    1 in a tree, so every sum a solver forms is of small integers."""
    n = parents.shape[1]
    device = torch.device(parents.device)
    if root:  # row p < n: -e_(p + 1), node p's flattened column; row n (what -1 reads): -e_0, the root's
        minus_parent = constants.built_once(("flattened parent rows", n, dtype, device), lambda: -torch.eye(
            n + 1, dtype=dtype, device=device).roll(-1, 0))
        rows = torch.nn.functional.pad(minus_parent[parents], (0, 0, 1, 0))  # the root's row first: no parent
        return torch.linalg.solve_triangular(rows, constants.eye(n + 1, dtype, device), upper=False,
                                             unitriangular=True)
    # row p < n: -e_p, the parent's column; row n (what -1 reads, a child of the root's): zeros
    minus_parent = constants.built_once(("parent rows", n, dtype, device),
                                  lambda: -torch.eye(n + 1, dtype=dtype, device=device)[:, :n].contiguous())
    eye = constants.eye(n, dtype, device)
    return torch.linalg.solve_triangular(minus_parent[parents], eye, upper=False, unitriangular=True)


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
