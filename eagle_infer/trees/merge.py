"""Merging and cutting draft trees on the device: a head's trees and prompt lookup's copies, one batch of rows each,
become one tree per row, cut to a budget by EAGLE-2's path value.

Nodes with the same path of tokens from the root become one node, so siblings stay distinct, as the verifier's
sequential rejection over deterministically chosen candidates requires. A merged node's prob is the highest own
prob over the trees that hold it, and its value is EAGLE-2's path value in the merged tree (the product of the
probs from depth 1 down to it, `TreeBatch.values`); the `budget` highest values survive, ties going to the
shallower, then the earlier node (the first tree's nodes before the second's). Values never grow down a path, so
every survivor's parent survives, and cutting a merged tree again (`cut`) keeps the n best by the same values.
Everything is tensor ops over [B, N] (no per-node or per-row Python, no host read but an auto budget's count).
"""
from __future__ import annotations

from typing import Callable

import torch

from .. import constants
from .tree import TreeBatch, node_ancestors


def best(tree: TreeBatch, candidates: torch.Tensor, budget: int, depth: int, padding: int,
         values: torch.Tensor | None = None, distinct: bool = False) -> TreeBatch:
    """The at most `budget` candidates (bool [B, N], parents among them) of highest path value per row, ties to the
    shallower then the earlier slot, kept in (depth, slot) order; padding: a slot holding no node in any row, which
    the rows' padding is read from. values: tree.values(candidates) where the caller has them; distinct: the
    candidates' siblings carry distinct tokens."""
    b, n = tree.tokens.shape
    keep = min(budget, n)
    values = tree.values(candidates) if values is None else values
    order = tree.depths.sort(dim=1, stable=True).indices  # stable sorts: the last key is the first criterion
    key = torch.where(candidates, values, -1.0)  # by value, every other slot after the candidates (values >= 0)
    order = order.gather(1, key.gather(1, order).sort(dim=1, descending=True, stable=True).indices)
    chosen = order[:, :keep]
    sizes = candidates.sum(1).clamp(max=keep)
    real = candidates.gather(1, chosen)  # (the candidates come first in `order`)
    # (depth, slot) as one number, the padding slot after every node: sorted, its remainder is the slot
    rank = torch.where(real, tree.depths.gather(1, chosen) * n + chosen, (depth + 1) * n + padding)
    return tree.select(rank.sort(dim=1).values % n, sizes, depth, distinct)


def cut(tree: TreeBatch, budget: int, values: torch.Tensor | None = None) -> TreeBatch:
    """Every row cut to its `budget` best nodes by path value (a row within the budget keeps all of them); values:
    tree.values() where the caller has them."""
    if tree.width <= budget:
        return tree
    n = tree.width
    values = tree.values() if values is None else values
    tree = tree.padded(n + 1)  # slot n: padding in every row
    return best(tree, tree.valid(), budget, tree.depth, n, torch.nn.functional.pad(values, (0, 1)))


def merge(first: TreeBatch, second: TreeBatch, budget: int,
          nodes: Callable[[torch.Tensor], int] | None = None) -> TreeBatch:
    """Row b: the union of first's and second's trees, cut to at most `budget` nodes. probs: the highest own prob
    over the trees holding a node; copied: True where any of them marks it copied. nodes: given the union's path
    values [B, M] (0 off its nodes), how many of the best to keep per row (an auto budget's choice, at most
    `budget`): the union cut once, as `cut` would cut the merged tree."""
    n1, n2, depth = first.width, second.width, max(first.depth, second.depth)
    b, device = first.batch, first.tokens.device
    pad = lambda value, dtype: constants.filled((b, 1), value, dtype, device)  # noqa: E731
    # second's parent p as a union slot: n1 + p, and -1 (the root, indexing the last entry) stays -1
    shifted = constants.made(("shifted parents", n1, n2, torch.device(device)), lambda: torch.nn.functional.pad(
        torch.arange(n1, n1 + n2, device=device), (0, 1), value=-1))
    # the union's slots: first's, second's, then one padding slot (the cut trees' padding is read from it)
    parents = torch.cat([first.parents, shifted[second.parents], pad(-1, torch.long)], 1)
    tokens = torch.cat([first.tokens, second.tokens, pad(0, torch.long)], 1)
    depths = torch.cat([first.depths, second.depths, pad(0, torch.long)], 1)
    valid = depths > 0  # (nodes sit at depth >= 1, padding at 0)
    m = tokens.shape[1]
    # Path of tokens from depth 1 to each node, [B, M, depth]: its ancestors' (and its own) tokens by depth.
    ancestors = node_ancestors(parents)  # float64 [B, M, M]
    one_hot = constants.made(("depth one-hot", depth, torch.device(device)), lambda: torch.eye(
        depth + 1, dtype=torch.float64, device=device)[:, 1:].contiguous())  # row d: depth d's column (row 0: none)
    at_depth = one_hot[depths]  # [B, M, depth] one-hot (padding: 0)
    # token + 1 at each depth on the path (exact in float64), 0 below the node: a padding slot's path is all 0
    paths = ancestors @ torch.addcmul(at_depth, at_depth, tokens[:, :, None])
    same = (paths[:, :, None] == paths[:, None]).all(-1)
    slots = constants.arange(0, m, device)
    rep = torch.where(same, slots, m - 1).amin(-1)  # [B, M] first slot holding each node's path (padding: padding's)
    is_rep = valid & (rep == slots)
    # (padding slots hold prob 0 and are not copied: amax over them changes nothing)
    probs = torch.cat([first.probs, second.probs, pad(0.0, torch.float32)], 1)
    merged_probs = constants.filled((b, m), 0.0, torch.float32, device).scatter_reduce(1, rep, probs, "amax")
    copied = torch.cat([first.copied, second.copied, pad(False, torch.bool)], 1)
    merged_copied = constants.filled((b, m), False, torch.bool, device).scatter_reduce(1, rep, copied, "amax")
    up = torch.cat([rep, pad(-1, torch.long)], 1).gather(1, parents % (m + 1))  # each parent's slot (-1 at m)
    union = TreeBatch(tokens, up, depths, merged_probs, merged_copied, valid.sum(1), depth)
    # EAGLE-2's path values of the merged nodes, exactly as union.values(is_rep) multiplies them (depth 1 down, one
    # factor a step: cumprod is that scan on a CPU), from each node's ancestors' merged probs by depth (1 below it)
    along = ancestors @ (at_depth * merged_probs.gather(1, rep).double()[:, :, None])  # exact: one term a depth
    values = torch.where(is_rep, torch.where(paths > 0, along, 1.0).cumprod(-1)[..., -1], 0.0)
    return best(union, is_rep, budget if nodes is None else min(budget, nodes(values)), depth, m - 1, values,
                distinct=True)  # (one node per path of tokens)
