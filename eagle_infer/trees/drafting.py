"""Drafting with the draft head: grow a TreeBatch, one tree per row. `static` (EAGLE-1; `chain` is its one-path
case) and `dynamic` (EAGLE-2). Every drafter picks candidates deterministically (top-k), which is what the verifier
assumes.

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
from typing import Callable

import torch

from .. import constants
from ..head.expansion import EXPAND_BY, by_value, expanded, top_tokens
from ..head.block_runner import BlockRunner
from ..head.head_runner import AfterStep, HeadRunner
from ..models.kv_cache import KVCache
from .cost import Budget
from .tree import TreeBatch, chain_paths, check_paths
from ..models.masks import additive


@dataclass
class DraftRoot:
    """Where this cycle's trees start, one per batch row: the head's predicted feature after the accepted context,
    the root token (last emitted, at sequence position base), and which request of the batch call the row serves.
    token_ids, positions: the same roots and bases as LongTensors [B, 1] on the device (built from the lists
    when not given; the engine passes the ones it keeps on the device)."""

    feature: torch.Tensor  # [B, H], predicts the distribution of the tokens at depth 1 ([B, 0] without a head)
    tokens: list[int]
    bases: list[int]
    requests: list[int]
    token_ids: torch.Tensor | None = None
    positions: torch.Tensor | None = None

    def __post_init__(self):
        device = self.feature.device
        if self.token_ids is None:
            self.token_ids = torch.tensor([[t] for t in self.tokens], dtype=torch.long, device=device)
        if self.positions is None:
            self.positions = torch.tensor(self.bases, dtype=torch.long, device=device)[:, None]

    @property
    def batch(self) -> int:
        return len(self.tokens)


class TreeFeeder:
    """Feeds tree nodes to the head over its cache, the same number per row. Fed keys stay uncommitted past each
    row's committed length until `reset()`; a row's fed slots are numbered 0, 1, ... in feeding order. Headless
    methods (prompt lookup) get a feeder without head and cache: only `root` is meaningful. A block drafter
    (head.block=dflash: a BlockRunner over its context cache) is fed nothing: it drafts by `draft_block`.

    What a level needs of earlier ones lives in buffers indexed [root, fed slot 0, 1, ...] (built at the first
    feed, grown by doubling), so a level reads its parents by one index op and writes its nodes in place: predicted
    features, tokens, and each node's additive attention row over the head's keys (its prefix and its ancestors incl.
    itself visible), which a child copies and unmasks its own slot in. Which token a node is fed with (its own, or
    its parent's for a head trained on unshifted tokens) is chosen once, here, not per level."""

    def __init__(self, head: HeadRunner | BlockRunner | None, cache: KVCache | None, root: DraftRoot,
                 capacity: int = 64):
        self.head, self.cache, self.root = head, cache, root
        self.levels = 0  # feed() calls so far: head forwards of one tree level each
        self.fed = 0  # nodes fed so far
        self.prefix = list(cache.lengths) if cache is not None else []
        self._keys = cache.length_column() if cache is not None else None  # [B, 1]: each row's slot 0's key
        self._capacity = capacity
        self._cap = 0  # fed slots the buffers hold (0: not built yet)
        self._feed = OwnTokens if head is None or head.config.token_shift == 1 else ParentTokens

    def _build(self, cap: int) -> None:
        """Buffers for `cap` fed slots: [B, 1 + cap, ...] rows (root, then slots)."""
        root, b = self.root, self.root.batch
        device, dtype = root.feature.device, root.feature.dtype
        width = max(self.prefix) + cap  # the head's keys when every slot is fed: row b's slot j is key prefix[b] + j
        masks = torch.empty(b, 1 + cap, width, dtype=dtype, device=device)  # a slot's row is written when it is fed
        additive(constants.arange(0, width, device) < self._keys, dtype, out=masks[:, 0])  # the root's row: its prefix
        outputs = root.feature.new_empty(b, 1 + cap, root.feature.shape[1])
        outputs[:, 0] = root.feature
        tokens = self._feed.kept(root.token_ids, cap, self._tokens if self._cap else None, 1 + self.fed)
        if self._cap:  # growing: keep what earlier levels wrote
            n = 1 + self.fed
            masks[:, :n, : self._masks.shape[2]] = self._masks[:, :n]
            masks[:, :n, self._masks.shape[2] :] = torch.finfo(dtype).min  # keys past every fed row's own
            outputs[:, :n] = self._outputs[:, :n]
        self._masks, self._outputs, self._tokens, self._cap = masks, outputs, tokens, cap
        self._rows = constants.row_index(b, device)  # [B, 1]: row index beside a [B, m] slot index

    def root_logp(self) -> torch.Tensor:
        """[B, Vd] log-probabilities of depth-1 tokens over the head's draft vocabulary (see `top`)."""
        return torch.log_softmax(self.head.draft_logits(self.root.feature), dim=-1)

    def top(self, logp: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """top_tokens over the head's vocabulary."""
        return top_tokens(logp, k, self.head.vocab_order)

    def feed(self, parents: torch.Tensor, tokens: torch.Tensor, depth: int) -> torch.Tensor:
        """Feed m nodes per row, all at `depth`, whose parents are fed slots (or -1 for the root).

        parents, tokens: LongTensor [B, m] on the feeder's device. The new slots are F..F+m-1 (F = nodes fed before).
        Returns [B, m, Vd] log-probabilities of their children over the draft vocabulary (`top` maps them to target
        ids)."""
        return self.feed_below(parents + 1, tokens, depth)

    @torch.inference_mode()
    def feed_below(self, up: torch.Tensor, tokens: torch.Tensor, depth: int, after: AfterStep | None = None,
                   extra: tuple = (), last: bool = False):
        """`feed` with the parents as rows of the buffers [root, fed slot 0, 1, ...]: up = parents + 1 [B, m]. after:
        computed from the nodes' predicted features in the head's call instead of the log-probs (head_runner.AfterStep:
        expansion.expanded, an EAGLE-2 level), returned without the features it returns first. last: no later feed is
        below these nodes, so their rows of the buffers are left unwritten (a later feed may not name them)."""
        m = tokens.shape[1]
        f = self.fed
        if f + m > self._cap:
            self._build(max(f + m, 2 * self._cap, self._capacity))
        keys = self._keys + constants.arange(f, f + m, tokens.device)  # [B, m] the new nodes' own keys
        parent_feat, rows, mask = level_inputs(self._outputs, self._masks, self._rows, up, keys,
                                               max(self.prefix) + f + m)
        fed_tokens = self._feed.fed(self._tokens, self._rows, up, tokens, None if last else 1 + f)
        slots = constants.arange(1 + f, 1 + f + m, tokens.device)  # the new nodes' rows of the buffers
        if not last:
            self._masks.index_copy_(1, slots, rows)
        # [B, 1]: the level's nodes share their row's head position, base + depth - 1 (see the module's docstring)
        positions = self.root.positions if depth == 1 else self.root.positions + (depth - 1)
        out = self.head(parent_feat, fed_tokens, positions, self.cache, mask, after, extra)
        if after is not None:
            out, *rest = out
        self.cache.advance(m)
        self.levels += 1
        self.fed += m
        if not last:
            self._outputs.index_copy_(1, slots, out)
        return torch.log_softmax(self.head.draft_logits(out), dim=-1) if after is None else rest

    def draft_block(self) -> torch.Tensor:
        """A block drafter's one forward (block_runner.BlockRunner.draft, a level of its own): the rows' committed
        contexts in the cache and their roots -> float32 logits [B, T - 1, Vd] of the tokens after each root."""
        self.levels += 1
        return self.head.draft(self.cache, self.root.token_ids, self.root.positions)

    def reset(self) -> None:
        """Drop every fed node from the head's cache."""
        if self.cache is not None:
            self.cache.truncate(self.prefix, self._keys)  # (slot 0's keys: the prefixes' lengths)


class OwnTokens:
    """How a head trained on shifted tokens (token_shift 1) is fed: each node with its own token; nothing is kept."""

    @staticmethod
    def kept(root: torch.Tensor, cap: int, old: torch.Tensor | None, n: int) -> None:
        return None

    @staticmethod
    def fed(kept: None, rows: torch.Tensor, up: torch.Tensor, tokens: torch.Tensor, start: int | None
            ) -> torch.Tensor:
        """`tokens` [B, m], the nodes' own."""
        return tokens


class ParentTokens:
    """How a head trained on unshifted tokens (token_shift 0) is fed: each node with its parent's token, read from
    the tokens kept per row of the feeder's buffers [B, 1 + cap] (the root's, then each fed slot's)."""

    @staticmethod
    def kept(root: torch.Tensor, cap: int, old: torch.Tensor | None, n: int) -> torch.Tensor:
        """The buffer for `cap` slots: the root tokens [B, 1], and the first n rows of `old` (None: a first build)."""
        tokens = torch.empty(root.shape[0], 1 + cap, dtype=torch.long, device=root.device)
        tokens[:, :1] = root
        if old is not None:
            tokens[:, :n] = old[:, :n]
        return tokens

    @staticmethod
    def fed(kept: torch.Tensor, rows: torch.Tensor, up: torch.Tensor, tokens: torch.Tensor, start: int | None
            ) -> torch.Tensor:
        """The parents' tokens (rows `up` [B, m] of `kept`); the nodes' own `tokens` go to its slots from `start`
        (None: nowhere, no feed is below them)."""
        parents = kept[rows, up]
        if start is not None:
            kept.index_copy_(1, constants.arange(start, start + tokens.shape[1], tokens.device), tokens)
        return parents


def level_inputs(outputs: torch.Tensor, masks: torch.Tensor, rows: torch.Tensor, up: torch.Tensor, keys: torch.Tensor,
                 width: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What a level of nodes below rows `up` [B, m] of a feeder's buffers (outputs [B, R, H], masks [B, R, W]; rows:
    arange(B) [B, 1]) feeds the head, by index ops: their parents' predicted features [B, m, H], their attention rows
    [B, m, W] (the parent's, with each node's own key `keys` [B, m] seen) and the head's mask, those rows cut to the
    keys a forward attends [B, 1, m, width]. Static shapes, tensor ops only (tests/test_compiled.py)."""
    attention = masks[rows, up]
    seen = constants.filled((), 0.0, attention.dtype, attention.device)
    attention.index_put_((rows, constants.arange(0, up.shape[1], up.device), keys), seen)
    return outputs[rows, up], attention, attention[:, None, :, :width]


def best_by_value(values: torch.Tensor, fronts: torch.Tensor, total: int) -> torch.Tensor:
    """EAGLE-2's rerank: the `total` candidates of best path value [B, total], ascending (ties prefer shallower,
    then earlier candidates, so every kept node's parent is kept)."""
    return torch.sort(values, dim=1, descending=True, stable=True).indices[:, :total].sort(dim=1).values


def expanded_first(values: torch.Tensor, fronts: torch.Tensor, total: int) -> torch.Tensor:
    """The ablation without rerank: the first `total` expanded candidates, level by level [B, total], ascending."""
    return fronts[:, 1 : 1 + total].sort(dim=1).values


@dataclass(frozen=True)
class Growth:
    """How EAGLE-2 grows and cuts its trees, chosen once per setting (`growth`), so a level runs no branch on it:
    `expand(values, own)`, the key its top_k expanded nodes per level are picked by; `keep(values, fronts, total)`,
    the candidates kept at the end (fronts [B, 1 + (L - 1) k]: the root's number -1, then the numbers of the
    candidates expanded, level by level)."""

    expand: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = by_value
    keep: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor] = best_by_value




@lru_cache(maxsize=None)
def growth(expand_by: str = "value", rerank: bool = True) -> Growth:
    """The Growth of the settings expand_by (EXPAND_BY) and rerank."""
    return Growth(EXPAND_BY[expand_by], best_by_value if rerank else expanded_first)


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
            up = torch.tensor([p + 1 for p in fed_parents], device=device).expand(b, -1)
            rows = torch.cat([rows, feeder.feed_below(up, tokens[:, fed_nodes], depth)], 1)
    as_rows = lambda x: torch.tensor(x, device=device).expand(b, -1)  # noqa: E731 (host constants of the plan)
    return TreeBatch.full_rows(tokens, as_rows(parents), as_rows(depths), probs, len(plan), distinct=True)


def draft_chain(feeder: TreeFeeder, depth: int) -> TreeBatch:
    """Top-1 for `depth` steps."""
    return draft_static(feeder, chain_paths(depth))


@dataclass
class DynamicDraft:
    """One cycle of EAGLE-2 drafting: the trees, and what an auto budget judges the next cycle by
    (cost.Budget.evidence): values [B, C] every candidate's path log-value, level by level, the last level's L
    last; newest_own [B, L] their own log-probs (k children of each of L / k expanded nodes); frontier [B, k] the
    path log-values of the nodes one more level would expand; levels: levels of candidates drafted (the depth);
    kept [B, N]: the candidates the trees hold, ascending."""

    trees: TreeBatch
    values: torch.Tensor
    newest_own: torch.Tensor
    frontier: torch.Tensor
    levels: int
    kept: torch.Tensor

    def kept_values(self) -> torch.Tensor:
        """[B, N] the path log-values of the trees' nodes."""
        return self.values.gather(1, self.kept)

    def older(self, values: torch.Tensor) -> torch.Tensor:
        """values [B, C + E]: these candidates' path log-values, then E >= 0 others' (a hybrid's copies) -> the same
        with the last level's at -inf: the candidates drafted before it (one operator)."""
        c, width, last = self.values.shape[1], values.shape[1], self.newest_own.shape[1]
        columns = constants.built_once(("last level", c, last, width, values.device), lambda: (
            torch.arange(width, device=values.device) >= c - last) & (torch.arange(width, device=values.device) < c))
        return values.masked_fill(columns, float("-inf"))


def joined(parts: list[torch.Tensor]) -> torch.Tensor:
    """[B, ...] parts joined along dim 1 (one part as it is: no copy)."""
    return parts[0] if len(parts) == 1 else torch.cat(parts, 1)


def candidate_numbering(k: int, levels: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Constants of EAGLE-2 trees grown `levels` levels with top-k k, whose candidates are numbered level by level
    (k at depth 1, then k² per level): LongTensor [1 + k + (levels - 1) k] added to the expanded nodes' entries
    (the root's -1 and 0..k-1, then each level's k picks among its k² children) to number them; LongTensor
    [k + (levels - 1) k²] every candidate's depth."""
    device = torch.device(device)
    offsets = constants.built_once(("front offsets", k, levels, device), lambda: torch.tensor(
        [0] * (k + 1) + [k + j * k * k for j in range(levels - 1) for _ in range(k)], device=device))
    depths = constants.built_once(("candidate depths", k, levels, device), lambda: torch.tensor(
        [1] * k + [2 + j for j in range(levels - 1) for _ in range(k * k)], device=device))
    return offsets, depths


def decided(budget: Budget, values: torch.Tensor, extra: torch.Tensor | None, frontier: torch.Tensor,
            newest_own: torch.Tensor, levels: int) -> tuple[bool, int]:
    """An auto budget deciding as the head drafts (one host read): after `levels` levels of candidates with path
    log-values `values` [B, C] (beside `extra` [B, E], another drafter's for the same verification, or None),
    whether to draft one more level, and how many nodes to keep if not (Budget.next_plan)."""
    more, nodes = budget.next_plan(values if extra is None else torch.cat([values, extra], 1), levels, frontier,
                                   newest_own, ahead=False)
    return more > levels, nodes


def grow_dynamic(feeder: TreeFeeder, depth: int, top_k: int, total_tokens: int, grow: Growth = Growth(),
                 deciding: Budget | None = None, extra: torch.Tensor | None = None) -> DynamicDraft:
    """EAGLE-2: grow `depth` levels, expanding the top_k newest nodes by path value (sum of draft log-probs; or,
    `grow` says, by their own confidence); then keep the `total_tokens` best candidates by value (`grow`: or the
    expanded nodes level by level). Every row expands the same number of nodes per level, so the head sees one
    [B, top_k] batch per level. Everything stays on the device: one top-k over the draft vocabulary per level, no
    host copies.

    Candidates are numbered level by level: the k children of the root, then k*k per level (the k children of each
    expanded node, parent by parent), so a candidate's depth and parent follow from its number and the expanded
    nodes' numbers, and a level only reads the newest one.

    deciding (an auto budget deciding as it drafts, one host read a call; `extra` the values it counts beside the
    head's): asked before each level whether to draft it, and for the nodes to keep when drafting stops (then in
    place of total_tokens)."""
    device = feeder.root.feature.device
    root_lp = feeder.root_logp()
    b, k = root_lp.shape[0], min(top_k, feeder.head.config.vocab_size)
    lp, tok = feeder.top(root_lp, k)  # [B, k]
    toks, vals, owns = [tok], [lp], [lp]  # per level: candidates' target ids, path log-values, own log-probs
    fronts = [root_front(b, k, device)]  # the root and the depth-1 candidates, then each level's picks (numbered
    # from the level's first candidate at the end)
    front_tok, front_val, up = tok, lp, constants.filled((b, k), 0, torch.long, device)  # up: the parents' feeder rows
    nodes = values = None
    for d in range(2, depth + 1):
        if deciding is not None:
            values = joined(vals)
            more, nodes = decided(deciding, values, extra, front_val, owns[-1], d - 1)
            if not more:
                break
            nodes = None  # decided before this level: asked again after the last one
        tok, val, own, pick = feeder.feed_below(up, front_tok, d - 1, expanded,
                                                (front_val, k, feeder.head.vocab_order, grow.expand), d == depth)
        toks.append(tok), vals.append(val), owns.append(own), fronts.append(pick)
        # the picked nodes' parents are the k just fed, feeder rows fed - k + 1 ... fed: child c's is c // k of them
        rows = constants.built_once(("rows of picks' parents", k, feeder.fed, device),
                              lambda: torch.arange(k * k, device=device) // k + (feeder.fed - k + 1))
        front_tok, front_val, up = tok.gather(1, pick), val.gather(1, pick), rows[pick]
    if nodes is None:  # (else drafting stopped right after `values` was joined)
        values = joined(vals)
    if deciding is not None:
        total_tokens = nodes if nodes is not None else decided(deciding, values, extra, front_val, owns[-1],
                                                               len(toks))[1]
    return kept_draft(toks, owns, fronts, values, front_val, k, total_tokens, grow)


def root_front(b: int, k: int, device) -> torch.Tensor:
    """[B, 1 + k]: how grown candidates number the root's expansion: the root (-1), then its k children (0 .. k - 1),
    all expanded (a grown tree's first `fronts` entry, kept_draft)."""
    return constants.built_once(("root's front", b, k, device),
                                lambda: torch.arange(-1, k, device=device).expand(b, k + 1).contiguous())


def kept_draft(toks: list[torch.Tensor], owns: list[torch.Tensor], fronts: list[torch.Tensor], values: torch.Tensor,
               front_val: torch.Tensor, k: int, total_tokens: int, grow: Growth) -> DynamicDraft:
    """EAGLE-2's trees from candidates grown level by level with top-k k (grow_dynamic's numbering), per level their
    target ids `toks` and own log-probs `owns` ([B, k] at depth 1, [B, k*k] below), and `fronts`: root_front, then
    each deeper level's k expanded picks [B, k]; values [B, C]: every candidate's path log-value (joined);
    front_val [B, k]: the last picks' -> the DynamicDraft keeping the `total_tokens` best (grow.keep)."""
    levels = len(toks)
    offsets, depth_of = candidate_numbering(k, levels, values.device)
    numbered = joined(fronts) if levels == 1 else joined(fronts) + offsets
    keep = grow.keep(values, numbered, total_tokens)
    # candidate c's parent is numbered[c // k]; parents renumbered among the kept (ascending)
    parents = torch.searchsorted(keep, numbered.gather(1, keep // k), right=True) - 1
    depths = depth_of[keep]
    trees = TreeBatch.full_rows(joined(toks).gather(1, keep), parents, depths, joined(owns).gather(1, keep).exp(),
                                levels, distinct=True)  # (top-k: a node's children are distinct)
    return DynamicDraft(trees, values, owns[-1], front_val, levels, keep)
