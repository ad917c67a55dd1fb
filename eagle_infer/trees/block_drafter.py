"""The block drafter's trees (methods dflash, dflash-tree and their +lookup hybrids): a cycle's one forward of a block
drafter (TreeFeeder.draft_block: logits of the T - 1 positions after each row's root, head.block=dflash) becomes a
TreeBatch, on the device, nothing read by the host.

- `dflash`: the top-1 token at each of the first `depth` positions, one chain. Verified as a chain: greedy, the
  longest prefix the target's argmax agrees with, then the bonus token; sampled, the verifier's exact rejection over
  these deterministic candidates (decoding/verify.py), so the output is distributed as the target's.
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


def grow_block(logp: torch.Tensor, k: int, order: torch.Tensor | None, grow: Growth) -> Grown:
    """The candidates of a block's positions' draft log-probs [B, D, Vd] with top-k k (order: the draft vocabulary's
    target ids, expansion.top_tokens): position 1's k best at depth 1, then at each depth d > 1 the k best paths of
    depth d - 1 (grow.expand) extended by position d's k best."""
    b, depth = logp.shape[:2]
    own, tok = top_tokens(logp, k, order)  # [B, D, k]: one top-k over every position at once
    toks, owns, vals, front_val = [tok[:, 0]], [own[:, 0]], [own[:, 0]], own[:, 0]
    fronts = [root_front(b, k, logp.device)]
    for d in range(1, depth):
        children = own[:, d, None].expand(-1, k, -1), tok[:, d, None].expand(-1, k, -1)  # [B, k, k]: each parent's
        t, v, o, pick = expand_children(*children, front_val, k, grow.expand)
        toks.append(t), vals.append(v), owns.append(o), fronts.append(pick)
        front_val = v.gather(1, pick)
    return Grown(toks, owns, fronts, joined(vals), front_val)


class BlockDrafter:
    """A block drafter's chain (`tree` False: top-1, `depth` positions) or tree (`tree` True: top_k per position,
    total_tokens nodes, at most `depth` deep) from its one forward a cycle; under an auto budget cut to its plan's
    nodes, or to the nodes that pay now (the module's docstring)."""

    def __init__(self, tree: bool = False):
        self.tree = tree

    def propose(self, inp: DraftInput) -> Drafted:
        c, budget, plan, feeder = inp.config, inp.budget, inp.plan, inp.feeder
        logp = torch.log_softmax(feeder.draft_block()[:, : c.depth], dim=-1)  # [B, D, Vd]
        k, total = (min(c.top_k, feeder.head.config.vocab_size), c.total_tokens) if self.tree else (1, c.depth)
        grow = growth(c.expand_by, c.rerank)
        grown = grow_block(logp, k, feeder.head.vocab_order, grow)
        evidence = None
        if budget is not None:
            counted = grown.values if inp.extra is None else torch.cat([grown.values, inp.extra], 1)
            if plan is None:  # decide now: a host read
                total = min(total, budget.next_plan(counted, LEVELS, ahead=False)[1])
            else:
                total, evidence = min(total, plan.nodes), budget.evidence(counted, LEVELS)
        d = grown.kept(k, total, grow)
        return Drafted(d.trees, evidence, d.kept_values, LEVELS)
