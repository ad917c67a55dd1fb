"""Drafters: what proposes a cycle's trees. One protocol, `Drafter.propose(DraftInput) -> TreeBatch` (a tree per
batch row as [B, N] tensors on the device, at most the cycle's tree budget), whatever builds them: the head's
chain, EAGLE-1's static tree, EAGLE-2's dynamic tree, prompt lookup, a hybrid of a head drafter and lookup, or any
object with a `propose` method handed to the engine (`Engine(..., drafter=...)`; tests pass oracles that know the
target's answer).

Every built-in drafter but one picks candidates deterministically (top-k, copies), which is what the tree verifier
assumes; the tree is fixed before the cycle's random draws, so sampling stays exact. The exception, a block
drafter's sampled chain (method dflash at temperature > 0), hands the verifier the distributions it drew from.
Writing a drafter: a class with `propose(inp)` returning a TreeBatch, or simply one DraftTree per row of
`inp.feeder.root` (parents before children, siblings distinct; `as_batch` pads them into a TreeBatch), drafting with
`inp.feeder` (the head over its cache) or from `inp.contexts`; nothing else in the engine changes.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Protocol

import torch

from ..config import InferConf, SamplingParams
from .cost import Budget, Evidence, Plan
from .drafting import TreeFeeder, draft_chain, draft_static, grow_dynamic, growth
from .lookup import Copies, CopyRates, copy_batch
from .merge import cut, merge
from .tree import DraftTree, TreeBatch


@dataclass
class DraftInput:
    """What a drafter may read in one cycle (the contract between the scheduler and the drafters).

    feeder: the head over its cache and the rows' roots (feeder.root: predicted features [B, H], root tokens, their
    positions, request indices); contexts[b]: row b's prompt and emitted tokens, ending with the root (built only
    when the config uses lookup); rates[b]: its measured acceptance of copied tokens per depth (lookup only);
    config: the settings at this batch size, tree_size: the draft nodes its tree holds (methods.tree_size);
    budget: the auto budget for this batch (None: fixed trees) and plan: what it decided for this cycle (levels,
    nodes), to be followed without reading the device (None beside a budget: decide now, reading the device);
    extra: [B, E] path log-values of candidates another drafter proposes for the same verification (a hybrid's
    copies, -inf padding), which the budget counts beside the head's when it plans the next cycle; sampling and
    generators: the request's sampling and each row's generator, for a drafter that samples its chain (None: pick
    candidates deterministically); copies_alone: a hybrid drafts every row's copies alone this cycle, as lookup
    does (trees.copy_choice: its head was not fed and drafts nothing)."""

    feeder: TreeFeeder
    contexts: list[list[int]]
    rates: list[CopyRates | None]
    config: InferConf
    tree_size: int
    budget: Budget | None = None
    plan: Plan | None = None
    extra: torch.Tensor | None = None
    sampling: SamplingParams | None = None
    generators: list[torch.Generator] | None = None
    copies_alone: bool = False


@dataclass
class Drafted:
    """A drafter's trees with what it knows beside them: evidence, what an auto budget decides the next cycle's plan
    by (Budget.evidence, on the device, read with the cycle's one host copy; None: the trees alone); values, a
    function computing the trees' path log-values [B, N] (-inf on padding) where the drafter has them (a hybrid
    merges by them; None: TreeBatch.values); levels: the draft forwards the trees cost, each priced as a level by an
    auto budget (None: one a level of depth, as a head drafting level by level pays); proposal: for a chain whose
    tokens were sampled, the distribution each node's token was drawn from, over the target's ids [B, N, V] (node j
    at depth j + 1; the verifier rejects against it: verify.proposal_choices; None: fixed candidates)."""

    trees: TreeBatch
    evidence: Evidence | None = None
    values: Callable[[], torch.Tensor] | None = None
    levels: int | None = None
    proposal: torch.Tensor | None = None


class Drafter(Protocol):
    def propose(self, inp: DraftInput) -> TreeBatch | list[DraftTree] | Drafted: ...


class ChainDrafter:
    """EAGLE without a tree: the head's top-1, `depth` times."""

    def propose(self, inp: DraftInput) -> TreeBatch:
        return draft_chain(inp.feeder, inp.config.depth)


class StaticDrafter:
    """EAGLE-1: the fixed tree `config.paths()` of child ranks."""

    def propose(self, inp: DraftInput) -> TreeBatch:
        return draft_static(inp.feeder, inp.config.paths())


class DynamicDrafter:
    """EAGLE-2: expand the top_k best nodes per level by value, rerank to total_tokens. Under an auto budget that
    plans ahead, draft the plan's levels, keep its nodes and plan the next cycle from these candidates (inp.extra's
    too); one that decides as it drafts stops before a level that cannot pay and keeps the nodes that pay."""

    def propose(self, inp: DraftInput) -> Drafted:
        c, plan, budget = inp.config, inp.plan, inp.budget
        grow = growth(c.expand_by, c.rerank)
        if budget is None:
            d = grow_dynamic(inp.feeder, c.depth, c.top_k, c.total_tokens, grow)
            return Drafted(d.trees, None, d.kept_values)
        if plan is None:  # decide now: one host read before each level and at the end
            d = grow_dynamic(inp.feeder, c.depth, c.top_k, c.total_tokens, grow, budget, inp.extra)
            return Drafted(d.trees, None, d.kept_values)
        d = grow_dynamic(inp.feeder, plan.levels, c.top_k, plan.nodes, grow)
        values = d.values if inp.extra is None else torch.cat([d.values, inp.extra], 1)
        older = None if d.levels == 1 else d.older(values)
        return Drafted(d.trees, budget.evidence(values, d.levels, d.frontier, d.newest_own, older), d.kept_values)


class CustomDrafter:
    """A callable TreeFeeder -> TreeBatch (or a list of DraftTrees, one per row) as a drafter."""

    def __init__(self, fn: Callable[[TreeFeeder], TreeBatch | list[DraftTree]]):
        self.fn = fn

    def propose(self, inp: DraftInput) -> TreeBatch | list[DraftTree]:
        return self.fn(inp.feeder)


def as_batch(trees: TreeBatch | list[DraftTree] | Drafted, device) -> TreeBatch:
    """A drafter's trees as the cycle's contract: a TreeBatch as is, per-row DraftTrees (custom drafters) padded
    into one."""
    if isinstance(trees, Drafted):
        return trees.trees
    return trees if isinstance(trees, TreeBatch) else TreeBatch.of_trees(trees, device)


def plan_evidence(drafted: TreeBatch | list[DraftTree] | Drafted) -> Evidence | None:
    """What the auto budget decides the next cycle's plan by, as a drafter returned it (None: trees alone)."""
    return drafted.evidence if isinstance(drafted, Drafted) else None


def sampled_proposal(drafted: TreeBatch | list[DraftTree] | Drafted) -> torch.Tensor | None:
    """The distributions a drafter sampled its chain from (Drafted.proposal), or None for fixed candidates."""
    return drafted.proposal if isinstance(drafted, Drafted) else None


def tree_values(drafted: TreeBatch | list[DraftTree] | Drafted, trees: TreeBatch) -> torch.Tensor:
    """The path log-values [B, N] of a drafter's `trees` (as_batch(drafted)): the drafter's own where it has them."""
    if isinstance(drafted, Drafted) and drafted.values is not None:
        return drafted.values()
    return trees.values().log()


def draft_levels(drafted: TreeBatch | list[DraftTree] | Drafted, trees: TreeBatch) -> int:
    """The draft forwards a drafter's `trees` (as_batch(drafted)) cost, as it says, else their depth."""
    if isinstance(drafted, Drafted) and drafted.levels is not None:
        return drafted.levels
    return trees.depth


def copies(inp: DraftInput) -> Copies:
    """Each row's prompt-lookup tree: every continuation found in its context as a chain, prefixes shared; node
    probabilities are the row's copy rates (lookup.copy_batch)."""
    return copy_batch(inp.contexts, inp.config.lookup_conf, inp.rates, inp.feeder.root.feature.device)


class LookupDrafter:
    """Prompt lookup alone: the copies, cut per cycle by the auto budget (no head levels to pay): to its plan, or to
    what it decides now."""

    def propose(self, inp: DraftInput) -> TreeBatch | Drafted:
        found = copies(inp)  # already within the budget: num_tokens x branches is lookup's tree size
        trees = found.trees()
        if inp.budget is None or trees.depth == 0:  # (no copies: nothing to plan by)
            return trees
        if inp.plan is None:  # the host read
            return cut(trees, inp.budget.next_plan(found.log_values, 0, ahead=False)[1], found.values)
        return Drafted(cut(trees, inp.plan.nodes, found.values), inp.budget.evidence(found.log_values, 0))


class HybridDrafter:
    """A head drafter's tree with the row's lookup copies merged in (one node per path of tokens), cut to the
    method's budget by path value (`merge`); under an auto budget the head's drafter counts the copies' values
    beside its own candidates, and the merged tree is cut to the plan's nodes (planning ahead) or to the number that
    pays (deciding now); where DraftInput.copies_alone says so, the copies alone (LookupDrafter)."""

    def __init__(self, head: Drafter):
        self.head = head

    def propose(self, inp: DraftInput) -> TreeBatch | Drafted:
        if inp.copies_alone:
            return LookupDrafter().propose(inp)
        copied = copies(inp)
        found = copied.depth > 0  # nothing found: the head's trees as its drafter alone makes them
        device = inp.feeder.root.feature.device
        extra = inp.budget is not None and found
        # the head's candidates fixed (not sampled): the merged tree is verified as fixed candidates
        drafted = self.head.propose(replace(inp, extra=copied.log_values if extra else None, sampling=None))
        heads, evidence = as_batch(drafted, device), plan_evidence(drafted)
        if heads.batch != copied.tokens.shape[0] or not found:  # (a custom drafter's wrong count: the engine names it)
            return drafted
        budget, levels, values = inp.budget, draft_levels(drafted, heads), tree_values(drafted, heads)
        if budget is not None and inp.plan is None:  # decide now: the merged candidates' count (a host read)
            return merge(heads, values, copied, copied.log_values, inp.tree_size,
                         lambda union: budget.next_plan(union, levels, ahead=False)[1]).tree
        limit = inp.tree_size if inp.plan is None else min(inp.tree_size, inp.plan.nodes)
        merged = merge(heads, values, copied, copied.log_values, limit)
        if budget is None:
            return merged.tree
        if evidence is None:  # a head drafter that does not plan: the merged candidates decide the count
            evidence = budget.evidence(merged.values(), levels)
        return Drafted(merged.tree, evidence)
