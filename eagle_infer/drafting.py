"""Drafters: grow a DraftTree with the draft head. `static` (EAGLE-1; `chain` is its one-path case) and `dynamic`
(EAGLE-2). Every drafter picks candidates deterministically (top-k), which is what the verifier assumes.

Positions: the root token sits at sequence position `base`; a node at depth d sits at base + d and is fed to the
head as the pair (its parent's predicted feature, its token) at head position base + d - 1 (with a head trained
on unshifted tokens, the pair carries the parent's token instead).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .draft_head import DraftHead
from .kv_cache import KVCache
from .tree import DraftTree, additive_mask, chain_paths, check_paths


@dataclass
class DraftRoot:
    """Where this cycle's tree starts: the head's predicted feature after the accepted context, and the root token."""

    feature: torch.Tensor  # [H], predicts the distribution of the tokens at depth 1
    token: int  # the root token (last emitted, at sequence position `base`)
    base: int


class TreeFeeder:
    """Feeds tree nodes to the head over its cache. Fed keys stay uncommitted past `cache.length` until `reset()`."""

    def __init__(self, head: DraftHead, cache: KVCache, root: DraftRoot):
        self.head, self.cache, self.root = head, cache, root
        self.prefix = cache.length
        self.outputs = root.feature.new_zeros(0, root.feature.shape[-1])  # [F, H] predicted features of fed nodes
        self.tokens: list[int] = []  # token of each fed node
        self.anc = torch.zeros(0, 0, dtype=torch.bool)  # [F, F] fed-node ancestry (incl. self)

    def root_logp(self) -> torch.Tensor:
        """[V] log-probabilities of depth-1 tokens."""
        return torch.log_softmax(self.head.logits(self.root.feature), dim=-1)

    @torch.inference_mode()
    def feed(self, parents: list[int], tokens: list[int], depth: int) -> tuple[list[int], torch.Tensor]:
        """Feed m nodes of one depth whose parents are fed slots (or -1 for the root).

        Returns the new slots and [m, V] log-probabilities of their children.
        """
        m, f = len(tokens), len(self.tokens)
        root = self.root
        parent_feat = torch.stack([root.feature if p < 0 else self.outputs[p] for p in parents])
        if self.head.config.token_shift == 0:
            fed_tokens = [root.token if p < 0 else self.tokens[p] for p in parents]
        else:
            fed_tokens = tokens
        anc = torch.zeros(f + m, f + m, dtype=torch.bool)
        anc[:f, :f] = self.anc
        for i, p in enumerate(parents):
            if p >= 0:
                anc[f + i, :f] = self.anc[p]
            anc[f + i, f + i] = True
        self.anc = anc
        device = root.feature.device
        mask = additive_mask(anc[f:], self.prefix, root.feature.dtype, device)
        positions = torch.full((1, m), root.base + depth - 1, dtype=torch.long, device=device)
        ids = torch.tensor([fed_tokens], dtype=torch.long, device=device)
        out = self.head(parent_feat[None], ids, positions, self.cache, mask)[0]
        self.cache.advance(m)
        self.outputs = torch.cat([self.outputs, out])
        self.tokens += tokens
        return list(range(f, f + m)), torch.log_softmax(self.head.logits(out), dim=-1)

    def reset(self) -> None:
        """Drop every fed node from the head's cache."""
        self.cache.truncate(self.prefix)


def draft_static(feeder: TreeFeeder, paths) -> DraftTree:
    """EAGLE-1: the tree shape is fixed; a node of rank r is the parent's r-th most likely token."""
    paths = check_paths(paths)
    index = {p: i for i, p in enumerate(paths)}
    tokens, probs = [0] * len(paths), [0.0] * len(paths)
    slot: dict[tuple, int] = {(): -1}  # fed slot of each path that has children
    logp_of: dict[tuple, torch.Tensor] = {(): feeder.root_logp()}
    max_depth = len(paths[-1])
    for depth in range(1, max_depth + 1):
        level = [p for p in paths if len(p) == depth]
        for p in level:
            lp = logp_of[p[:-1]]
            vals, toks = lp.topk(p[-1] + 1)
            tokens[index[p]], probs[index[p]] = int(toks[-1]), float(vals[-1].exp())
        parents_with_children = [p for p in level if depth < max_depth and any(q[:-1] == p for q in paths)]
        if parents_with_children:
            slots, logp = feeder.feed(
                [slot[p[:-1]] for p in parents_with_children], [tokens[index[p]] for p in parents_with_children], depth
            )
            for p, s, lp in zip(parents_with_children, slots, logp):
                slot[p], logp_of[p] = s, lp
    device = feeder.root.feature.device
    return DraftTree(
        torch.tensor(tokens, dtype=torch.long, device=device),
        torch.tensor([index[p[:-1]] if len(p) > 1 else -1 for p in paths], dtype=torch.long, device=device),
        torch.tensor([len(p) for p in paths], dtype=torch.long, device=device),
        torch.tensor(probs, device=device),
    )


def draft_chain(feeder: TreeFeeder, depth: int) -> DraftTree:
    """Top-1 for `depth` steps."""
    return draft_static(feeder, chain_paths(depth))


def draft_dynamic(
    feeder: TreeFeeder, depth: int, top_k: int, total_tokens: int, expand_by: str = "value", rerank: bool = True
) -> DraftTree:
    """EAGLE-2: grow `depth` levels, expanding the top_k newest nodes by path value (sum of draft log-probs) or by
    their own confidence; then keep the `total_tokens` best candidates by value (ties prefer shallower, then earlier
    nodes, so every kept node's parent is kept), or without rerank the expanded nodes level by level.
    """
    root_lp = feeder.root_logp().cpu()
    k = min(top_k, root_lp.numel())
    lp, tok = root_lp.topk(k)
    c_tok, c_par, c_dep, c_val, c_own = [tok], [torch.full((k,), -1)], [torch.ones(k, dtype=torch.long)], [lp], [lp]
    frontier = torch.arange(k)  # candidate indices chosen for expansion at the newest level
    chosen, slot_of, n_cand = [frontier], {}, k
    for d in range(2, depth + 1):
        f_idx = frontier.tolist()
        all_tok, all_par = torch.cat(c_tok), torch.cat(c_par)
        parent_slots = [slot_of.get(int(all_par[i]), -1) for i in f_idx]
        slots, logp = feeder.feed(parent_slots, all_tok[frontier].tolist(), d - 1)
        slot_of.update(zip(f_idx, slots))
        lp, tok = logp.cpu().topk(k, dim=-1)  # [m, k]
        val = torch.cat(c_val)[frontier][:, None] + lp
        m = len(f_idx)
        c_tok.append(tok.flatten())
        c_par.append(frontier.repeat_interleave(k))
        c_dep.append(torch.full((m * k,), d, dtype=torch.long))
        c_val.append(val.flatten())
        c_own.append(lp.flatten())
        score = val.flatten() if expand_by == "value" else lp.flatten()
        frontier = n_cand + torch.sort(-score, stable=True).indices[:k]
        chosen.append(frontier)
        n_cand += m * k
    values = torch.cat(c_val)
    if rerank:
        keep = torch.sort(-values, stable=True).indices[:total_tokens].sort().values
    else:
        keep = torch.cat(chosen)[:total_tokens].sort().values
    new_index = torch.full((n_cand,), -1, dtype=torch.long)
    new_index[keep] = torch.arange(keep.numel())
    parents = torch.cat(c_par)[keep]
    parents = torch.where(parents < 0, parents, new_index[parents.clamp(min=0)])
    device = feeder.root.feature.device
    return DraftTree(
        torch.cat(c_tok)[keep].to(device),
        parents.to(device),
        torch.cat(c_dep)[keep].to(device),
        torch.cat(c_own)[keep].exp().to(device),
    )
