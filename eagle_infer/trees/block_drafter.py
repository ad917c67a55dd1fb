"""The block drafter's trees (methods dflash, dflash-tree and their +lookup hybrids): a cycle's one forward of a block
drafter (TreeFeeder.draft_block: logits of the T - 1 positions after each row's root, head.block=dflash) becomes a
TreeBatch, on the device, nothing read by the host.

- `dflash`: one token at each of the first `depth` positions, one chain. Greedy: each position's top-1, verified as
  the longest prefix the target's argmax agrees with, then the bonus token. Sampled (temperature > 0): each
  position's token drawn from the drafter's softmax at the same temperature, q, which travels with the chain
  (Drafted.proposal, over the target's ids) to the verifier's rejection sampling with q as the proposal
  (decoding/verify.proposal_choices), so the output is distributed as the target's.
- `dflash-tree`: the positions' top_k candidates grown as EAGLE-2 grows a tree (trees/drafting.py): depth 1 holds
  position 1's k best; each deeper level extends the k best paths so far (by path value, or `expand_by`) with the
  next position's k best (every node of a level gets the same children: the block's positions do not see the
  drafted tokens), and the total_tokens best candidates by path value are kept, every ancestor with them.
The chain is the tree's k = 1 case: one function grows both. A path's value is the product of its positions'
probabilities, as EAGLE-2's is of its levels', so prompt lookup's copies merge in by value (`+lookup`) and an auto
budget cuts the candidates to the nodes that pay, pricing the block's one forward as one draft level whatever the
depth: to its plan (planning ahead, the evidence for the next plan gathered here) or to what it decides now (one
host read).
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from ..draws import inverse_cdf, uniforms
from ..head.expansion import expand_children, top_tokens
from .drafters import DraftInput, Drafted
from .drafting import DynamicDraft, Growth, growth, joined, kept_draft, root_front

LEVELS = 1  # the draft forwards a cycle of a block drafter pays, whatever its tree's depth


class Grown(NamedTuple):
    """A block's candidates, numbered as grow_dynamic numbers its own (drafting.kept_draft): per level their target
    ids `toks` and own log-probs `owns` ([B, k] at depth 1, [B, k*k] below), `fronts` (root_front, then each deeper
    level's k expanded picks [B, k]), values [B, C] every candidate's path log-value, front_val [B, k] the last
    level's picks'."""

    toks: list[torch.Tensor]
    owns: list[torch.Tensor]
    fronts: list[torch.Tensor]
    values: torch.Tensor
    front_val: torch.Tensor

    def kept(self, k: int, total_tokens: int, grow: Growth) -> DynamicDraft:
        """The trees of the total_tokens best candidates (grow.keep)."""
        return kept_draft(self.toks, self.owns, self.fronts, self.values, self.front_val, k, total_tokens, grow)


def grow_block(own: torch.Tensor, tok: torch.Tensor, grow: Growth) -> Grown:
    """The candidates of a block's positions, k a position: their own draft log-probs and target ids [B, D, k]
    (expansion.top_tokens' k best, or k = 1 tokens sampled): position 1's k at depth 1, then at each depth d > 1 the
    k best paths of depth d - 1 (grow.expand) extended by position d's k."""
    b, depth, k = own.shape
    toks, owns, vals, front_val = [tok[:, 0]], [own[:, 0]], [own[:, 0]], own[:, 0]
    fronts = [root_front(b, k, own.device)]
    for d in range(1, depth):
        children = own[:, d, None].expand(-1, k, -1), tok[:, d, None].expand(-1, k, -1)  # [B, k, k]: each parent's
        t, v, o, pick = expand_children(*children, front_val, k, grow.expand)
        toks.append(t), vals.append(v), owns.append(o), fronts.append(pick)
        front_val = v.gather(1, pick)
    return Grown(toks, owns, fronts, joined(vals), front_val)


def sampled_block(logits: torch.Tensor, temperature: float, order: torch.Tensor | None, vocab: int,
                  generators: list[torch.Generator]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A token a position drawn from the drafter's softmax at `temperature` (logits [B, D, Vd]; order: the draft
    vocabulary's target ids, HeadRunner.vocab_order; D uniforms a row from generators[b]) -> (own log-probs
    [B, D, 1], target ids [B, D, 1], the distributions q over the target's `vocab` ids [B, D, V])."""
    logq = torch.log_softmax(logits.float() / temperature, dim=-1)
    q = logq.exp()
    drawn = inverse_cdf(q, uniforms(generators, logq.shape[1], logq.device))[..., None]  # [B, D, 1] draft ids
    if order is not None:  # the draft vocabulary's ids first: q over the target's ids, 0 outside it
        q = q.new_zeros(*q.shape[:2], vocab).index_copy_(-1, order[: q.shape[-1]], q)
    return logq.gather(-1, drawn), (drawn if order is None else order[drawn]), q


class BlockDrafter:
    """A block drafter's chain (`tree` False: `depth` positions, top-1, or sampled where DraftInput.sampling asks)
    or tree (`tree` True: top_k per position, total_tokens nodes, at most `depth` deep) from its one forward a
    cycle; under an auto budget cut to its plan's nodes, or to the nodes that pay now (the module's docstring)."""

    def __init__(self, tree: bool = False):
        self.tree = tree

    def propose(self, inp: DraftInput) -> Drafted:
        c, budget, plan, feeder = inp.config, inp.budget, inp.plan, inp.feeder
        logits = feeder.draft_block()[:, : c.depth]  # [B, D, Vd]
        k, total = (min(c.top_k, feeder.head.config.vocab_size), c.total_tokens) if self.tree else (1, c.depth)
        grow = growth(c.expand_by, c.rerank)
        order, proposal = feeder.head.vocab_order, None
        if inp.sampling is not None and not inp.sampling.greedy and not self.tree:
            own, tok, proposal = sampled_block(logits, inp.sampling.temperature, order,
                                               feeder.head.config.vocab_size, inp.generators)
        else:
            own, tok = top_tokens(torch.log_softmax(logits, dim=-1), k, order)  # [B, D, k]: every position at once
        grown = grow_block(own, tok, grow)
        evidence = None
        if budget is not None:
            counted = grown.values if inp.extra is None else torch.cat([grown.values, inp.extra], 1)
            if plan is None:  # decide now: a host read
                total = min(total, budget.next_plan(counted, LEVELS, ahead=False)[1])
            else:
                total, evidence = min(total, plan.nodes), budget.evidence(counted, LEVELS)
        d = grown.kept(k, total, grow)
        return Drafted(d.trees, evidence, d.kept_values, LEVELS, proposal)
