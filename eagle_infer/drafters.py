"""Drafters: what proposes a cycle's trees. One protocol, `Drafter.propose(DraftInput) -> list[DraftTree]` (a tree
per batch row, at most the cycle's tree budget), whatever builds them: the head's chain, EAGLE-1's static tree,
EAGLE-2's dynamic tree, prompt lookup, a hybrid of a head drafter and lookup, or any object with a `propose`
method handed to the engine (`Engine(..., drafter=...)`; tests pass oracles that know the target's answer).

Every built-in drafter picks candidates deterministically (top-k, copies), which is what the verifier assumes; the
tree is fixed before the cycle's random draws, so sampling stays exact. Writing a drafter: a class with
`propose(inp)` returning one DraftTree per row of `inp.feeder.root` (breadth-first, parents before children,
siblings distinct), drafting with `inp.feeder` (the head over its cache) or from `inp.contexts`; nothing else in
the engine changes.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Protocol

import torch

from .config import InferConf
from .cost import Budget, cut_trees, log_values
from .drafting import TreeFeeder, draft_chain, draft_dynamic, draft_static
from .lookup import CopyRates, lookup_chains
from .merge import merge_trees
from .tree import DraftTree


@dataclass
class DraftInput:
    """What a drafter may read in one cycle (the contract between the scheduler and the drafters).

    feeder: the head over its cache and the rows' roots (feeder.root: predicted features [B, H], root tokens, their
    positions, request indices); contexts[b]: row b's prompt and emitted tokens, ending with the root (built only
    when the config uses lookup); rates[b]: its
    measured acceptance of copied tokens per depth (lookup only); config: the settings at this batch size; budget:
    the auto budget's per-cycle chooser for this batch (None: fixed trees); extra: [B, E] path log-values of
    candidates another drafter proposes for the same verification (a hybrid's copies, -inf padding), which an auto
    budget counts beside the head's, so strong copies stop the head sooner."""

    feeder: TreeFeeder
    contexts: list[list[int]]
    rates: list[CopyRates | None]
    config: InferConf
    budget: Budget | None = None
    extra: torch.Tensor | None = None


class Drafter(Protocol):
    def propose(self, inp: DraftInput) -> list[DraftTree]: ...


class ChainDrafter:
    """EAGLE without a tree: the head's top-1, `depth` times."""

    def propose(self, inp: DraftInput) -> list[DraftTree]:
        return draft_chain(inp.feeder, inp.config.depth)


class StaticDrafter:
    """EAGLE-1: the fixed tree `config.paths()` of child ranks."""

    def propose(self, inp: DraftInput) -> list[DraftTree]:
        return draft_static(inp.feeder, inp.config.paths())


class DynamicDrafter:
    """EAGLE-2: expand the top_k best nodes per level by value, rerank to total_tokens (or, under an auto budget,
    stop and cut where expected tokens per ms peak, counting inp.extra's candidates too)."""

    def propose(self, inp: DraftInput) -> list[DraftTree]:
        c = inp.config
        return draft_dynamic(inp.feeder, c.depth, c.top_k, c.total_tokens, c.expand_by, c.rerank, inp.budget,
                             inp.extra)


class CustomDrafter:
    """A callable TreeFeeder -> list[DraftTree] as a drafter."""

    def __init__(self, fn: Callable[[TreeFeeder], list[DraftTree]]):
        self.fn = fn

    def propose(self, inp: DraftInput) -> list[DraftTree]:
        return self.fn(inp.feeder)


def copies(inp: DraftInput) -> list[DraftTree]:
    """Each row's prompt-lookup tree: every continuation found in its context as a chain, prefixes shared, cut to
    num_tokens x branches nodes; node probabilities are the row's copy rates."""
    conf, device = inp.config.lookup_conf, inp.feeder.root.feature.device
    return [merge_trees(lookup_chains(context, conf, rates, device), conf.num_tokens * conf.branches, device)
            for context, rates in zip(inp.contexts, inp.rates)]


class LookupDrafter:
    """Prompt lookup alone: the copies, cut per cycle by the auto budget (no head levels to pay)."""

    def propose(self, inp: DraftInput) -> list[DraftTree]:
        trees = copies(inp)  # already within the budget: num_tokens x branches is lookup's tree size
        return trees if inp.budget is None else cut_trees(trees, inp.budget, 0)


class HybridDrafter:
    """A head drafter's tree with the row's lookup copies merged in (one node per (parent, token)), cut to the
    method's budget by path value; under an auto budget the head sees the copies' values while it drafts, and the
    merged tree is cut to the number of nodes that pays."""

    def __init__(self, head: ChainDrafter | StaticDrafter | DynamicDrafter | CustomDrafter):
        self.head = head

    def propose(self, inp: DraftInput) -> list[DraftTree]:
        copied = copies(inp)
        found = any(len(c) for c in copied)  # nothing found: the head's trees as its drafter alone makes them
        heads = self.head.propose(inp if inp.budget is None or not found else replace(inp, extra=log_values(copied)))
        if len(heads) != len(copied) or not found:  # (a custom drafter's wrong count: the engine names it)
            return heads
        size, device = inp.config.tree_size(), inp.feeder.root.feature.device
        trees = [merge_trees([h, c], size, device) if len(c) else h for h, c in zip(heads, copied)]
        return trees if inp.budget is None else cut_trees(trees, inp.budget, 1 + inp.feeder.levels)


HEAD_DRAFTERS = {"chain": ChainDrafter, "eagle1": StaticDrafter, "eagle2": DynamicDrafter}


def drafter_for(config: InferConf, custom: Callable | Drafter | None = None) -> Drafter | None:
    """The drafter of a config's method (None for vanilla), or `custom` (an object with `propose`, or a callable
    TreeFeeder -> trees) in its place; with lookup (config.lookup, or a custom drafter under method lookup) the
    head's trees get the copies merged in."""
    if custom is not None and not hasattr(custom, "propose"):
        custom = CustomDrafter(custom)
    if custom is not None:
        return HybridDrafter(custom) if config.uses_lookup else custom
    if config.method == "vanilla":
        return None
    if config.method == "lookup":
        return LookupDrafter()
    head = HEAD_DRAFTERS[config.method]()
    return HybridDrafter(head) if config.lookup else head
