"""Merging and cutting draft trees on the device: a head's trees and prompt lookup's copies, one batch of rows each,
become one tree per row, cut to a budget by path value.

Nodes with the same path of tokens from the root become one node, so siblings stay distinct, as the verifier's
sequential rejection over deterministically chosen candidates requires. A merged node's value is the highest of its
path values in the trees holding it (the head's EAGLE-2 path value, the copies' product of copy rates: the values
the auto budget plans by); values never grow down a path in any tree, so neither do merged ones. The `budget`
highest values survive, ties going to the earlier node of the union (the first tree's nodes, then the second's), so
every survivor's parent survives; merged trees keep the union's order, in which parents precede children (the first
tree's nodes, then the second's nodes that it lacks).
Everything is tensor ops over [B, N] (no per-node or per-row Python, no host read but an auto budget's count).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import torch

from .. import constants
from .lookup import Copies
from .tree import TreeBatch, node_ancestors



def cut(tree: TreeBatch, budget: int, values: torch.Tensor | None = None) -> TreeBatch:
    """Every row cut to its `budget` best nodes by path value, ties to the earlier slot, kept in slot order (a row
    within the budget keeps all of them); values: tree.values() where the caller has them."""
    if tree.width <= budget:
        return tree
    values = tree.values() if values is None else values
    nodes = torch.nn.functional.pad(tree.valid(), (0, 1))  # slot N, added: padding in every row
    kept, real = best_slots(torch.nn.functional.pad(values, (0, 1)), nodes, budget)
    return tree.padded(tree.width + 1).select(kept, real.sum(1), tree.depth)


def best_slots(values: torch.Tensor, nodes: torch.Tensor, keep: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The `keep` best nodes of each row by value, ties to the earlier slot: values [B, M], no slot off the nodes
    (bool [B, M]) valued above a node; the last slot holds no node in any row. -> (kept [B, keep]: the chosen nodes
    ascending, parents before children where values never grow down a path, then the last slot as the padding of a
    row with fewer; real: bool [B, keep], which of the chosen are nodes)."""
    m = values.shape[1]
    order = (~nodes).sort(dim=1, stable=True).indices  # stable sorts: the last key is the first criterion
    order = order.gather(1, values.gather(1, order).sort(dim=1, descending=True, stable=True).indices)
    chosen = order[:, :keep]
    real = nodes.gather(1, chosen)
    return torch.where(real, chosen, 2 * m - 1).sort(dim=1).values % m, real  # (the nodes ascending, then padding)


def merge(first: TreeBatch, first_values: torch.Tensor, second: TreeBatch | Copies, second_values: torch.Tensor,
          budget: int, nodes: Callable[[torch.Tensor], int] | None = None) -> Merged:
    """Row b: the union of first's and second's trees, cut to at most `budget` nodes by path value. first_values,
    second_values: float64 [B, N1], [B, N2], each tree's path log-values (-inf on padding); second: a TreeBatch, or
    lookup's Copies (every node copied). probs: the first tree's own prob where it holds the node, else the
    second's; copied: True where the second tree holds the node or the first marks it. nodes: given the union's
    path log-values [B, M] (-inf off its nodes), how many of the best to keep per row (an auto budget's choice, at
    most `budget`)."""
    n1, n2, depth = first.width, second.tokens.shape[1], max(first.depth, second.depth)
    b, device = first.batch, first.tokens.device
    pad = lambda value, dtype: constants.filled((b, 1), value, dtype, device)  # noqa: E731
    # second's parent p as a union slot: n1 + p, and -1 (the root, indexing the last entry) stays -1
    shifted = constants.built_once(("shifted parents", n1, n2, torch.device(device)), lambda: torch.nn.functional.pad(
        torch.arange(n1, n1 + n2, device=device), (0, 1), value=-1))
    # the union's slots: first's, second's, then one padding slot (a general cut's padding is read from it)
    parents = torch.cat([first.parents, shifted[second.parents], pad(-1, torch.long)], 1)
    tokens = torch.cat([first.tokens, second.tokens, pad(0, torch.long)], 1)
    depths = torch.cat([first.depths, second.depths, pad(0, torch.long)], 1)
    m = n1 + n2 + 1
    # Path of tokens from depth 1 to each node, [B, M, depth]: its ancestors' (and its own) tokens by depth.
    one_hot = constants.built_once(("depth one-hot", depth, torch.device(device)), lambda: torch.eye(
        depth + 1, dtype=torch.float64, device=device)[:, 1:].contiguous())  # row d: depth d's column (row 0: none)
    at_depth = one_hot[depths]  # [B, M, depth] one-hot (padding: 0)
    # token + 1 at each depth on the path (exact in float64), 0 below the node: a padding slot's path is all 0
    paths = node_ancestors(parents) @ torch.addcmul(at_depth, at_depth, tokens[:, :, None])
    # [B, M, M]: how far apart two slots' paths are, 0 where they are the same (exact: differences of small integers)
    apart = torch.cdist(paths, paths, compute_mode="donot_use_mm_for_euclid_dist")
    rep = apart.min(-1).indices  # [B, M] first slot holding each slot's path (min: the first of equal values)
    values = torch.cat([first_values, second_values, pad(float("-inf"), torch.float64)], 1)
    # the first slot of each path holds the highest of its values; every other slot -inf (nothing reduced into it)
    values = constants.filled((b, m), float("-inf"), torch.float64, device).scatter_reduce(1, rep, values, "amax")
    probs = torch.cat([first.probs, second.probs, pad(0.0, torch.float32)], 1)
    # held by the second tree: the first slots of its paths (its padding's is a padding slot, never kept as a node)
    copied = constants.filled((b, m), False, torch.bool, device).scatter(1, rep[:, n1 : n1 + n2], True)
    if first.copied is not unmarked(first):
        copied |= torch.nn.functional.pad(first.copied, (0, n2 + 1))
    keep = min(m, budget if nodes is None else min(budget, nodes(values)))
    if first.full and first.distinct and keep <= n1:  # the first tree's nodes alone fill every row: no padding
        # the best `keep` by value, ties to the earlier slot, then ascending: parents before children
        kept = values.sort(dim=1, descending=True, stable=True).indices[:, :keep].sort(dim=1).values
        # each union slot's rank among the kept (-1: not kept); a kept node's parent is the first slot of its
        # parent's path, kept too; a child of the root's (-1) reads the padding slot's path, never kept: -1
        rank = constants.filled((b, m), -1, torch.long, device).scatter(1, kept, constants.slot_numbers(b, keep, device))
        kept_parents = rank.gather(1, rep[constants.row_index(b, device), parents.gather(1, kept)])
        take = lambda x: x.gather(1, kept)  # noqa: E731
        tree = TreeBatch.full_rows(take(tokens), kept_parents, take(depths), take(probs), depth, take(copied),
                                   distinct=True)
        return Merged(tree, lambda: take(values))
    # Some row may hold fewer nodes than `keep`: the same choice among the nodes, their padding read from the
    # padding slot m - 1.
    up = torch.cat([rep, pad(-1, torch.long)], 1).gather(1, parents % (m + 1))  # each parent's first slot (-1: root)
    nodes_at = (rep == constants.arange(0, m, device)) & (depths > 0)  # each path's first slot, if a node's
    kept, real = best_slots(values, nodes_at, keep)
    union = TreeBatch(tokens, up, depths, probs, copied & nodes_at, nodes_at.sum(1), depth)
    return Merged(union.select(kept, real.sum(1), depth, distinct=True), lambda: values.gather(1, kept))


class Merged(NamedTuple):
    """merge's answer: the merged trees, and values() their nodes' path log-values [B, K] (-inf on padding),
    computed when asked."""

    tree: TreeBatch
    values: Callable[[], torch.Tensor]


def unmarked(tree: TreeBatch) -> torch.Tensor:
    """The shared all-False copied flags of a tree's shape (TreeBatch.full_rows' default): a tree holding them marks
    no node copied, and merge skips reading them."""
    return constants.filled((tree.batch, tree.width), False, torch.bool, tree.tokens.device)
