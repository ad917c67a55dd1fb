"""Drafters: grow a DraftTree with the draft head. `static` (EAGLE-1; `chain` is its one-path case) and `dynamic`
(EAGLE-2). Every drafter picks candidates deterministically (top-k), which is what the verifier assumes.

Batches: every drafter drafts one tree per batch row in lockstep (the same number of nodes fed per level, so each
level is one batched head forward) and returns a list of DraftTrees, one per row.

Positions: a row's root token sits at sequence position `base`; a node at depth d sits at base + d and is fed to
the head as the pair (its parent's predicted feature, its token) at head position base + d - 1 (with a head
trained on unshifted tokens, the pair carries the parent's token instead).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .draft_head import DraftHead
from .kv_cache import KVCache
from .tree import DraftTree, additive_mask, chain_paths, check_paths


@dataclass
class DraftRoot:
    """Where this cycle's trees start, one per batch row: the head's predicted feature after the accepted context,
    the root token (last emitted, at sequence position base), and which request of the batch call the row serves."""

    feature: torch.Tensor  # [B, H], predicts the distribution of the tokens at depth 1 ([B, 0] without a head)
    tokens: list[int]
    bases: list[int]
    requests: list[int]

    @property
    def batch(self) -> int:
        return len(self.tokens)


class TreeFeeder:
    """Feeds tree nodes to the head over its cache, the same number per row. Fed keys stay uncommitted past each
    row's committed length until `reset()`; a row's fed slots are numbered 0, 1, ... in feeding order. Headless
    methods (prompt lookup) get a feeder without head and cache: only `root` is meaningful."""

    def __init__(self, head: DraftHead | None, cache: KVCache | None, root: DraftRoot):
        self.head, self.cache, self.root = head, cache, root
        self.prefix = list(cache.lengths) if cache is not None else []
        b, h = root.feature.shape
        device = root.feature.device
        self.outputs = root.feature.new_zeros(b, 0, h)  # [B, F, H] predicted features of fed nodes
        self.tokens = torch.zeros(b, 0, dtype=torch.long, device=device)  # [B, F] token of each fed node
        self.anc = torch.zeros(b, 0, 0, dtype=torch.bool, device=device)  # [B, F, F] fed-node ancestry (incl. self)
        self._root_tokens = torch.tensor(root.tokens, dtype=torch.long, device=device)[:, None]
        self._bases = torch.tensor(root.bases, dtype=torch.long, device=device)[:, None]

    def root_logp(self) -> torch.Tensor:
        """[B, V] log-probabilities of depth-1 tokens."""
        return torch.log_softmax(self.head.logits(self.root.feature), dim=-1)

    @torch.inference_mode()
    def feed(self, parents: torch.Tensor, tokens: torch.Tensor, depth: int) -> torch.Tensor:
        """Feed m nodes per row, all at `depth`, whose parents are fed slots (or -1 for the root).

        parents, tokens: LongTensor [B, m]. The new slots are F..F+m-1 (F = nodes fed before). Returns [B, m, V]
        log-probabilities of their children.
        """
        b, m = tokens.shape
        f = self.tokens.shape[1]
        device = self.root.feature.device
        parents, tokens = parents.to(device), tokens.to(device)
        up = (parents + 1)[:, :, None]  # index into [root, fed...]
        parent_feat = torch.cat([self.root.feature[:, None], self.outputs], 1).gather(
            1, up.expand(b, m, self.outputs.shape[-1])
        )
        if self.head.config.token_shift == 0:
            fed_tokens = torch.cat([self._root_tokens, self.tokens], 1).gather(1, parents + 1)
        else:
            fed_tokens = tokens
        old = torch.cat([self.anc.new_zeros(b, 1, f), self.anc], 1).gather(1, up.expand(b, m, f))  # parents' rows
        new_rows = torch.cat([old, torch.eye(m, dtype=torch.bool, device=device).expand(b, m, m)], 2)  # [B, m, F+m]
        anc = self.anc.new_zeros(b, f + m, f + m)
        anc[:, :f, :f] = self.anc
        anc[:, f:] = new_rows
        self.anc = anc
        mask = additive_mask(new_rows, self.prefix, self.root.feature.dtype, device)
        positions = (self._bases + depth - 1).expand(b, m)
        out = self.head(parent_feat, fed_tokens, positions, self.cache, mask)
        self.cache.advance(m)
        self.outputs = torch.cat([self.outputs, out], 1)
        self.tokens = torch.cat([self.tokens, tokens], 1)
        return torch.log_softmax(self.head.logits(out), dim=-1)

    def reset(self) -> None:
        """Drop every fed node from the head's cache."""
        if self.cache is not None:
            self.cache.truncate(self.prefix)


def _split(tokens, parents, depths, probs, device) -> list[DraftTree]:
    """[B, N] tensors -> one DraftTree per row."""
    return [
        DraftTree(tokens[b].to(device), parents[b].to(device), depths[b].to(device), probs[b].to(device))
        for b in range(tokens.shape[0])
    ]


def draft_static(feeder: TreeFeeder, paths) -> list[DraftTree]:
    """EAGLE-1: the tree shape is fixed; a node of rank r is the parent's r-th most likely token."""
    paths = check_paths(paths)
    index = {p: i for i, p in enumerate(paths)}
    b = feeder.root.batch
    tokens = torch.zeros(b, len(paths), dtype=torch.long)
    probs = torch.zeros(b, len(paths))
    slot: dict[tuple, int] = {(): -1}  # fed slot of each path that has children
    logp_of: dict[tuple, torch.Tensor] = {(): feeder.root_logp().cpu()}  # [B, V] each
    max_depth = len(paths[-1])
    for depth in range(1, max_depth + 1):
        level = [p for p in paths if len(p) == depth]
        for p in level:
            vals, toks = logp_of[p[:-1]].topk(p[-1] + 1, dim=-1)
            tokens[:, index[p]], probs[:, index[p]] = toks[:, -1], vals[:, -1].exp()
        parents_with_children = [p for p in level if depth < max_depth and any(q[:-1] == p for q in paths)]
        if parents_with_children:
            fed_parents = torch.tensor([slot[p[:-1]] for p in parents_with_children]).expand(b, -1)
            fed_tokens = tokens[:, [index[p] for p in parents_with_children]]
            first = feeder.tokens.shape[1]
            logp = feeder.feed(fed_parents, fed_tokens, depth).cpu()
            for j, p in enumerate(parents_with_children):
                slot[p], logp_of[p] = first + j, logp[:, j]
    parents = torch.tensor([index[p[:-1]] if len(p) > 1 else -1 for p in paths]).expand(b, -1)
    depths = torch.tensor([len(p) for p in paths]).expand(b, -1)
    return _split(tokens, parents, depths, probs, feeder.root.feature.device)


def draft_chain(feeder: TreeFeeder, depth: int) -> list[DraftTree]:
    """Top-1 for `depth` steps."""
    return draft_static(feeder, chain_paths(depth))


def draft_dynamic(
    feeder: TreeFeeder, depth: int, top_k: int, total_tokens: int, expand_by: str = "value", rerank: bool = True
) -> list[DraftTree]:
    """EAGLE-2: grow `depth` levels, expanding the top_k newest nodes by path value (sum of draft log-probs) or by
    their own confidence; then keep the `total_tokens` best candidates by value (ties prefer shallower, then earlier
    nodes, so every kept node's parent is kept), or without rerank the expanded nodes level by level. Every row
    expands the same number of nodes per level, so the head sees one [B, top_k] batch per level.
    """
    root_lp = feeder.root_logp().cpu()
    b, k = root_lp.shape[0], min(top_k, root_lp.shape[-1])
    lp, tok = root_lp.topk(k, dim=-1)  # [B, k]
    c_tok, c_par, c_dep, c_val, c_own = [tok], [torch.full((b, k), -1)], [torch.ones(b, k, dtype=torch.long)], [lp], [lp]
    n_all = k + (depth - 1) * k * k
    slot_of = torch.full((b, n_all), -1, dtype=torch.long)  # fed slot of each candidate that was expanded
    frontier = torch.arange(k).expand(b, k)  # [B, k] candidate indices chosen for expansion at the newest level
    chosen, n_cand = [frontier], k
    for d in range(2, depth + 1):
        all_tok, all_par = torch.cat(c_tok, 1), torch.cat(c_par, 1)
        par = all_par.gather(1, frontier)
        parent_slots = torch.where(par < 0, par, slot_of.gather(1, par.clamp(min=0)))
        first = feeder.tokens.shape[1]
        logp = feeder.feed(parent_slots, all_tok.gather(1, frontier), d - 1).cpu()
        slot_of.scatter_(1, frontier, torch.arange(first, first + k).expand(b, k))
        lp, tok = logp.topk(k, dim=-1)  # [B, k, k]
        val = torch.cat(c_val, 1).gather(1, frontier)[:, :, None] + lp
        c_tok.append(tok.flatten(1))
        c_par.append(frontier.repeat_interleave(k, dim=1))
        c_dep.append(torch.full((b, k * k), d, dtype=torch.long))
        c_val.append(val.flatten(1))
        c_own.append(lp.flatten(1))
        score = val.flatten(1) if expand_by == "value" else lp.flatten(1)
        frontier = n_cand + torch.sort(-score, dim=1, stable=True).indices[:, :k]
        chosen.append(frontier)
        n_cand += k * k
    values = torch.cat(c_val, 1)
    if rerank:
        keep = torch.sort(-values, dim=1, stable=True).indices[:, :total_tokens].sort(dim=1).values
    else:
        keep = torch.cat(chosen, 1)[:, :total_tokens].sort(dim=1).values
    new_index = torch.full((b, n_cand), -1, dtype=torch.long)
    new_index.scatter_(1, keep, torch.arange(keep.shape[1]).expand(b, -1))
    parents = torch.cat(c_par, 1).gather(1, keep)
    parents = torch.where(parents < 0, parents, new_index.gather(1, parents.clamp(min=0)))
    return _split(
        torch.cat(c_tok, 1).gather(1, keep), parents, torch.cat(c_dep, 1).gather(1, keep),
        torch.cat(c_own, 1).gather(1, keep).exp(), feeder.root.feature.device,
    )
