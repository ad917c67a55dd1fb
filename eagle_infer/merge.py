"""Merging draft trees that hang below the same root (a head's tree and prompt lookup branches) into one tree.

Nodes with the same token under the same merged parent become one node, so siblings stay distinct, as the
verifier's sequential rejection over deterministically chosen candidates requires. A merged node's prob is the
highest own prob over the input trees that hold it, and its value is EAGLE-2's path value in the merged tree (the
product of the probs from depth 1 down to it, `tree.path_values`); the `budget` highest values survive, ties
going to the shallower, then the earlier node. Values never grow down a path, so every survivor's parent survives,
and cutting a merged tree again (`merge_trees([tree], n)`) keeps the n best by the same values.
"""
from __future__ import annotations

import torch

from .tree import DraftTree, path_values


def merge_trees(trees: list[DraftTree], budget: int, device) -> DraftTree:
    """The union of `trees` cut to at most `budget` nodes, breadth-first, siblings in the order of the first tree
    that holds them (earlier trees first). probs: the highest own prob over the trees holding a node; copied: True
    where any tree holding the node marks it copied (None when no input tree says)."""
    index: dict[tuple[int, int], int] = {}  # (merged parent, token) -> merged node
    tokens, parents, depths, probs, copied = [], [], [], [], []
    for tree in trees:
        marks = tree.copied.tolist() if tree.copied is not None else [False] * len(tree)
        where = []
        for tok, par, own, mark in zip(tree.tokens.tolist(), tree.parents.tolist(), tree.probs.tolist(), marks):
            up = -1 if par < 0 else where[par]
            j = index.setdefault((up, tok), len(tokens))
            if j == len(tokens):
                tokens.append(tok)
                parents.append(up)
                depths.append(1 if up < 0 else depths[up] + 1)
                probs.append(own)
                copied.append(mark)
            else:
                probs[j], copied[j] = max(probs[j], own), copied[j] or mark
            where.append(j)
    values = path_values(parents, probs)  # parents precede children in the union too
    best = sorted(range(len(tokens)), key=lambda j: (-values[j], depths[j], j))[:budget]
    keep = sorted(best, key=lambda j: (depths[j], j))
    new = {j: i for i, j in enumerate(keep)}
    return DraftTree(
        torch.tensor([tokens[j] for j in keep], dtype=torch.long, device=device),
        torch.tensor([-1 if parents[j] < 0 else new[parents[j]] for j in keep], dtype=torch.long, device=device),
        torch.tensor([depths[j] for j in keep], dtype=torch.long, device=device),
        torch.tensor([probs[j] for j in keep], dtype=torch.float32, device=device),
        None if all(t.copied is None for t in trees) else torch.tensor([copied[j] for j in keep], dtype=torch.bool,
                                                                        device=device),
    )
