"""Drafting with the draft head: grow a TreeBatch, one tree per row. `static` (EAGLE-1; `chain` is its one-path case) and `dynamic`
(EAGLE-2). Every drafter picks candidates deterministically (top-k), which is what the verifier assumes.

Batches: every drafter drafts one tree per batch row in lockstep (the same number of nodes fed per level, so each
level is one batched head forward) and returns one TreeBatch ([B, N] tensors on the device). Nothing here reads the
device from the host (no .item(), .tolist(), host tensors of device values): a level is tensor ops only.

Positions: a row's root token sits at sequence position `base`; a node at depth d sits at base + d and is fed to
the head as the pair (its parent's predicted feature, its token) at head position base + d - 1 (with a head
trained on unshifted tokens, the pair carries the parent's token instead).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

from .head_runner import HeadRunner
from .kv_cache import KVCache
from .tree import TreeBatch, additive_mask, chain_paths, check_paths


@dataclass
class DraftRoot:
    """Where this cycle's trees start, one per batch row: the head's predicted feature after the accepted context,
    the root token (last emitted, at sequence position base), and which request of the batch call the row serves.
    token_ids, positions: the same roots and bases as LongTensors [B] on the device (built from the lists when not
    given; the engine passes the ones it keeps on the device)."""

    feature: torch.Tensor  # [B, H], predicts the distribution of the tokens at depth 1 ([B, 0] without a head)
    tokens: list[int]
    bases: list[int]
    requests: list[int]
    token_ids: torch.Tensor | None = None
    positions: torch.Tensor | None = None

    def __post_init__(self):
        device = self.feature.device
        if self.token_ids is None:
            self.token_ids = torch.tensor(self.tokens, dtype=torch.long, device=device)
        if self.positions is None:
            self.positions = torch.tensor(self.bases, dtype=torch.long, device=device)

    @property
    def batch(self) -> int:
        return len(self.tokens)


class TreeFeeder:
    """Feeds tree nodes to the head over its cache, the same number per row. Fed keys stay uncommitted past each
    row's committed length until `reset()`; a row's fed slots are numbered 0, 1, ... in feeding order. Headless
    methods (prompt lookup) get a feeder without head and cache: only `root` is meaningful.

    What a level needs of earlier ones lives in buffers indexed [root, fed slot 0, 1, ...] (grown by doubling),
    so a level gathers and writes slices instead of concatenating: predicted features, tokens, and each fed
    node's ancestry (incl. itself) over fed slots."""

    def __init__(self, head: HeadRunner | None, cache: KVCache | None, root: DraftRoot, capacity: int = 64):
        self.head, self.cache, self.root = head, cache, root
        self.levels = 0  # feed() calls so far: head forwards of one tree level each
        self.fed = 0  # nodes fed so far
        self.prefix = list(cache.lengths) if cache is not None else []
        self._prefix_ids = cache.device_lengths() if cache is not None else None
        b, h = root.feature.shape
        device = root.feature.device
        self._outputs = root.feature.new_zeros(b, 1 + capacity, h)  # [B, 1 + cap, H] root feature, then fed nodes'
        self._outputs[:, 0] = root.feature
        self._tokens = torch.zeros(b, 1 + capacity, dtype=torch.long, device=device)  # [B, 1 + cap]
        self._tokens[:, 0] = root.token_ids
        self._anc = torch.zeros(b, 1 + capacity, capacity, dtype=torch.bool, device=device)  # row 0: the root's
        self._bases = root.positions[:, None]
        self._eye = torch.eye(capacity, dtype=torch.bool, device=device)  # a fed node's own bit in its ancestry

    def _grow(self, need: int) -> None:
        """Make room for `need` fed nodes."""
        cap = self._anc.shape[2]
        if need <= cap:
            return
        new = max(need, 2 * cap)
        pad = lambda x, dims: torch.nn.functional.pad(x, dims)  # noqa: E731 (zeros/False after the used part)
        self._outputs = pad(self._outputs, (0, 0, 0, new - cap))
        self._tokens = pad(self._tokens, (0, new - cap))
        self._anc = pad(self._anc, (0, new - cap, 0, new - cap))
        self._eye = torch.eye(new, dtype=torch.bool, device=self._anc.device)

    def root_logp(self) -> torch.Tensor:
        """[B, Vd] log-probabilities of depth-1 tokens over the head's draft vocabulary (see `top`)."""
        return torch.log_softmax(self.head.draft_logits(self.root.feature), dim=-1)

    def top(self, logp: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """top_tokens over the head's vocabulary."""
        return top_tokens(logp, k, self.head.vocab_order)

    @torch.inference_mode()
    def feed(self, parents: torch.Tensor, tokens: torch.Tensor, depth: int) -> torch.Tensor:
        """Feed m nodes per row, all at `depth`, whose parents are fed slots (or -1 for the root).

        parents, tokens: LongTensor [B, m] on the feeder's device. The new slots are F..F+m-1 (F = nodes fed before). Returns [B, m, Vd]
        log-probabilities of their children over the draft vocabulary (`top` maps them to target ids).
        """
        b, m = tokens.shape
        f = self.fed
        self._grow(f + m)
        device = self.root.feature.device
        up = parents + 1  # [B, m] index into [root, fed...]
        parent_feat = self._outputs.gather(1, up[:, :, None].expand(b, m, self._outputs.shape[-1]))
        fed_tokens = self._tokens.gather(1, up) if self.head.config.token_shift == 0 else tokens
        rows = self._anc.gather(1, up[:, :, None].expand(b, m, self._anc.shape[2]))  # parents' ancestry [B, m, cap]
        rows[:, :, f : f + m] |= self._eye[:m, :m]
        self._anc[:, 1 + f : 1 + f + m] = rows
        mask = additive_mask(rows[:, :, : f + m], self.prefix, self.root.feature.dtype, device, self._prefix_ids)
        positions = (self._bases + depth - 1).expand(b, m)
        out = self.head(parent_feat, fed_tokens, positions, self.cache, mask)
        self.cache.advance(m)
        self.levels += 1
        self.fed += m
        self._outputs[:, 1 + f : 1 + f + m] = out
        self._tokens[:, 1 + f : 1 + f + m] = tokens
        return torch.log_softmax(self.head.draft_logits(out), dim=-1)

    def reset(self) -> None:
        """Drop every fed node from the head's cache."""
        if self.cache is not None:
            self.cache.truncate(self.prefix, self._prefix_ids)


def top_tokens(logp: torch.Tensor, k: int, order: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The k best of draft-vocabulary log-probs [..., Vd]: (values [..., k], target token ids [..., k]); order: the
    draft vocabulary's target ids then every other id (HeadRunner.vocab_order; None: the whole vocabulary). With
    k > Vd the missing candidates are ids outside the draft vocabulary at -inf (probability 0), so tree shapes do
    not depend on the head's vocabulary."""
    if k > logp.shape[-1]:
        logp = torch.cat([logp, logp.new_full((*logp.shape[:-1], k - logp.shape[-1]), float("-inf"))], -1)
    values, index = logp.topk(k, dim=-1)
    return values, (index if order is None else order[index])


def expand_level(logp: torch.Tensor, parent_values: torch.Tensor, k: int, order: torch.Tensor | None,
                 by_value: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One EAGLE-2 level's bookkeeping, static shapes and tensor ops only (compiled whole in tests/test_compiled.py):
    the k best children of each of k expanded nodes. logp [B, k, Vd]: their children's log-probs; parent_values
    [B, k]: their path log-values. -> the children's target ids, path values and own log-probs [B, k*k] (parent
    by parent), and which k of them expand next [B, k] (best by value, or by own confidence; ties: earlier)."""
    own, tokens = top_tokens(logp, k, order)
    values = parent_values[:, :, None] + own
    score = values if by_value else own
    pick = torch.sort(-score.flatten(1), dim=1, stable=True).indices[:, :k]
    return tokens.flatten(1), values.flatten(1), own.flatten(1), pick


@lru_cache(maxsize=64)
def _static_plan(paths: tuple[tuple[int, ...], ...]) -> tuple[list[tuple], list[int], list[int]]:
    """A checked static tree's drafting plan, built once per tree: per depth (node indices, parent row of each node
    in [root, fed...], rank of each node, fed slot of the parent of each node fed at this depth (-1 = root), node
    indices fed at this depth); then every node's parent index and depth."""
    index = {p: i for i, p in enumerate(paths)}
    has_children = {p[:-1] for p in paths}
    slot: dict[tuple, int] = {(): -1}
    plan, fed = [], 0
    for depth in range(1, len(paths[-1]) + 1):
        level = [p for p in paths if len(p) == depth]
        feeding = [p for p in level if p in has_children]
        plan.append((
            [index[p] for p in level], [slot[p[:-1]] + 1 for p in level], [p[-1] for p in level],
            [slot[p[:-1]] for p in feeding], [index[p] for p in feeding],
        ))
        for j, p in enumerate(feeding):
            slot[p] = fed + j
        fed += len(feeding)
    return plan, [index[p[:-1]] if len(p) > 1 else -1 for p in paths], [len(p) for p in paths]


def draft_static(feeder: TreeFeeder, paths) -> TreeBatch:
    """EAGLE-1: the tree shape is fixed; a node of rank r is the parent's r-th most likely token. One top-k over the
    draft vocabulary per level, on the device."""
    paths = check_paths(paths)
    device = feeder.root.feature.device
    b = feeder.root.batch
    tokens = torch.zeros(b, len(paths), dtype=torch.long, device=device)
    probs = torch.zeros(b, len(paths), device=device)
    plan, parents, depths = _static_plan(paths)
    rows = feeder.root_logp()[:, None]  # [B, 1 + fed, Vd]: the root's and every fed node's child log-probs
    for depth, (nodes, parent_rows, ranks, fed_parents, fed_nodes) in enumerate(plan, start=1):
        lp = rows[:, parent_rows]  # [B, n, Vd]
        vals, toks = feeder.top(lp, max(ranks) + 1)
        pick = torch.tensor(ranks, device=device)[None, :, None].expand(b, -1, 1)
        tokens[:, nodes], probs[:, nodes] = toks.gather(2, pick)[..., 0], vals.gather(2, pick)[..., 0].exp()
        if fed_nodes:
            fed = torch.tensor(fed_parents, device=device).expand(b, -1)
            rows = torch.cat([rows, feeder.feed(fed, tokens[:, fed_nodes], depth)], 1)
    as_rows = lambda x: torch.tensor(x, device=device).expand(b, -1)  # noqa: E731 (host constants of the plan)
    return TreeBatch.full_rows(tokens, as_rows(parents), as_rows(depths), probs, len(plan))


def draft_chain(feeder: TreeFeeder, depth: int) -> TreeBatch:
    """Top-1 for `depth` steps."""
    return draft_static(feeder, chain_paths(depth))


def draft_dynamic(
    feeder: TreeFeeder, depth: int, top_k: int, total_tokens: int, expand_by: str = "value", rerank: bool = True,
    budget=None, extra: torch.Tensor | None = None,
) -> TreeBatch:
    """EAGLE-2: grow `depth` levels, expanding the top_k newest nodes by path value (sum of draft log-probs) or by
    their own confidence; then keep the `total_tokens` best candidates by value (ties prefer shallower, then earlier
    nodes, so every kept node's parent is kept), or without rerank the expanded nodes level by level. Every row
    expands the same number of nodes per level, so the head sees one [B, top_k] batch per level. Everything stays
    on the device: one top-k over the draft vocabulary per level, no host copies.

    budget (a cost.Budget, with rerank): per cycle, stop drafting before a level that cannot pay and keep the number
    of candidates that maximises expected tokens per second instead of total_tokens (one small host read per level).
    extra: [B, E] path log-values of candidates another drafter proposes for the same verification (prompt lookup's
    copies, -inf padding): the budget counts them beside the head's, so strong copies stop the head sooner.
    """
    device = feeder.root.feature.device
    root_lp = feeder.root_logp()
    b, k = root_lp.shape[0], min(top_k, feeder.head.config.vocab_size)
    lp, tok = feeder.top(root_lp, k)  # [B, k]
    c_tok, c_par, c_dep, c_val, c_own = (
        [tok], [torch.full((b, k), -1, device=device)], [torch.ones(b, k, dtype=torch.long, device=device)], [lp], [lp]
    )
    n_all = k + (depth - 1) * k * k
    slot_of = torch.full((b, n_all), -1, dtype=torch.long, device=device)  # fed slot of each expanded candidate
    frontier = torch.arange(k, device=device).expand(b, k)  # [B, k] candidates chosen for expansion, newest level
    chosen, n_cand = [frontier], k
    others = [] if extra is None else [extra.to(device)]
    for d in range(2, depth + 1):
        if budget is not None:
            values = torch.cat(c_val + others, 1)
            mass = c_own[-1].exp().view(b, -1, k).sum(-1).mean()  # top-k children's mass per expanded node
            if not budget.draft_on(values, values.gather(1, frontier), d - 1, mass):
                break
        all_tok, all_par = torch.cat(c_tok, 1), torch.cat(c_par, 1)
        par = all_par.gather(1, frontier)
        parent_slots = torch.where(par < 0, par, slot_of.gather(1, par.clamp(min=0)))
        first = feeder.fed
        logp = feeder.feed(parent_slots, all_tok.gather(1, frontier), d - 1)
        slot_of.scatter_(1, frontier, torch.arange(first, first + k, device=device).expand(b, k))
        tok, val, own, pick = expand_level(logp, torch.cat(c_val, 1).gather(1, frontier), k, feeder.head.vocab_order,
                                           expand_by == "value")
        c_tok.append(tok)
        c_par.append(frontier.repeat_interleave(k, dim=1))
        c_dep.append(torch.full((b, k * k), d, dtype=torch.long, device=device))
        c_val.append(val)
        c_own.append(own)
        frontier = n_cand + pick
        chosen.append(frontier)
        n_cand += k * k
    values = torch.cat(c_val, 1)
    if budget is not None:
        total_tokens = budget.nodes(torch.cat([values] + others, 1), len(chosen))
    if rerank:
        keep = torch.sort(-values, dim=1, stable=True).indices[:, :total_tokens].sort(dim=1).values
    else:
        keep = torch.cat(chosen, 1)[:, :total_tokens].sort(dim=1).values
    new_index = torch.full((b, n_cand), -1, dtype=torch.long, device=device)
    new_index.scatter_(1, keep, torch.arange(keep.shape[1], device=device).expand(b, -1))
    parents = torch.cat(c_par, 1).gather(1, keep)
    parents = torch.where(parents < 0, parents, new_index.gather(1, parents.clamp(min=0)))
    return TreeBatch.full_rows(
        torch.cat(c_tok, 1).gather(1, keep), parents, torch.cat(c_dep, 1).gather(1, keep),
        torch.cat(c_own, 1).gather(1, keep).exp(), len(chosen),
    )
