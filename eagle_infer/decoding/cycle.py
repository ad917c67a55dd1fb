"""One decoding cycle over every row of a batch, read top to bottom in `draft_cycle`: propose -> verify -> commit
-> record.

- propose: the drafter's TreeBatch (eagle_infer.trees.drafters), a tree per row, fixed before any random draw;
- verify: one target forward of [B, 1 + N] tokens under the trees' masks, then acceptance of every row at once on
  the device, greedy or by the exact batched tree sampler (eagle_infer.decoding.verify);
- commit: the accepted paths gathered into the target's cache, the head's inputs for them gathered, all rows at
  once by index ops (fed in one batched forward by `feed_pending` after the scheduler refills rows; where the next
  cycle drafts every row's copies alone, `copies_alone`, they wait, joined with that cycle's, for a later feed);
- record: from the cycle's one device-to-host copy (accepted lengths, bonus tokens, the trees), a CycleStats per
  row, copy rates updated, the accepted tokens and the bonus token emitted.

State: the stages read a `BatchState` (batch_state.py: the caches, roots [B, 1], features [B, H], pending head
inputs, the next cycle's plan) and return what they produced; `draft_cycle` and `feed_pending` write it back, in one
place each. What the engine decided for the batch size arrives as a `CyclePolicy`; nothing here calls back into the
engine or the scheduler.

Indices, worked once: a row whose tree has N = 4 nodes (parents [-1, 0, 0, 1]) is verified as 1 + N = 5 positions,
flattened index 0 the root and node i at i + 1. If the target accepts nodes 0 and 1 (a path root -> 0 -> 1), the
commit keeps flattened [0, 1, 2] (kept [B, W], W >= 3: the root, then the path), counts = 3, and the bonus token is
the target's choice at flattened 2; the cache keeps those three positions after the row's committed length, and
the head is next fed the three (feature, token) pairs at those positions.

With a fixed tree, or an auto budget planning ahead (infer.plan_ahead, a GPU's default: its plan for the next
cycle, cost.Plan, travels in that copy), a cycle reads the device once and drafting never (tests/test_cost.py counts
it); an auto budget deciding as it drafts (a CPU's default) also reads its choice before each level and at the end.
A vanilla cycle is one target forward of the roots and one token each.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch

from .. import constants
from ..config import InferConf, SamplingParams
from ..errors import EagleError
from ..models.masks import additive_mask, causal_mask
from ..platform import sync
from ..trees.copy_choice import COPIES, HEAD, MERGED
from ..trees.cost import Budget, Evidence, Plan
from ..trees.drafters import DraftInput, Drafter, as_batch, plan_evidence, sampled_proposal
from ..trees.drafting import DraftRoot, TreeFeeder
from ..trees.tree import TreeBatch, padded_width
from .batch_state import BatchState, Models, Pending, Request
from .methods import method_of
from .records import CycleStats
from .verify import BatchAcceptance, argmax, proposal_choices, sample_device, sampled_choices, sampled_nodes
from .verify_batch import Commit, HostRow, as_verdict, kept_columns, to_host, verification_input


@dataclass(frozen=True)
class CyclePolicy:
    """What the engine decided for cycles of a batch size (Engine.policies): the config with its tree cut to the
    batch's budget and the draft nodes its tree holds (methods.tree_size), the drafter, the auto budget's chooser
    (None: a fixed tree), whether trees are padded to bucket widths and whether the auto budget plans ahead, the
    tree budget a drafter's trees may not exceed, the uniforms a sampled verification draws per row (the largest
    tree + 1, whatever the batch size), the acceptance step (verify_batch.accept_and_commit, or the same compiled:
    Engine) and whether every tree is one chain (verified causally: target_mask)."""

    config: InferConf
    tree_size: int
    drafter: Drafter
    budget: Budget | None
    pad_trees: bool
    plan_ahead: bool
    tree_budget: int
    draws: int
    accept: Callable[..., tuple[torch.Tensor, ...]]
    chains: bool


def target_mask(target, state: BatchState, lengths: list[int], allowed: torch.Tensor,
                causal: bool) -> torch.Tensor | None:
    """The target's additive mask over `allowed` (bool [T, S] or [B, T, S], see masks.additive_mask), or None when
    the new tokens attend plainly causally (`causal`) and every row is equally long: transformers then builds the
    causal mask itself, its own fastest path (scripts/bench_engine.py times bare forwards that way)."""
    if causal and min(lengths) == max(lengths):
        return None
    return additive_mask(allowed, lengths, target.dtype, target.device, state.cache.length_column())


def vanilla_cycle(state: BatchState, models: Models, rows: list[Request],
                  sampling: SamplingParams) -> list[list[int]]:
    """One token per row from one target forward of the roots [B, 1] -> each row's new tokens."""
    target = models.target
    t0 = time.perf_counter()
    lengths = list(state.cache.lengths)
    positions = state.cache.length_column()  # [B, 1]
    mask = target_mask(target, state, lengths, torch.ones(1, 1, dtype=torch.bool), causal=True)
    logits, _ = target.forward(state.roots, positions, state.cache, mask, last_only=True)
    state.cache.advance(1)
    chosen = sample_device(logits[:, -1], sampling, [r.generator for r in rows])  # [B]
    state.roots = chosen[:, None]
    tokens = chosen.tolist()  # the cycle's one host read
    verify_s = time.perf_counter() - t0
    for request, token in zip(rows, tokens):
        request.cycles.append(CycleStats(tree_size=0, tree_depth=0, accepted=0, draft_s=0.0, verify_s=verify_s,
                                         batch=len(rows)))
        request.root = token
    return [[token] for token in tokens]


@dataclass
class Proposal:
    """A cycle's trees and what drafted them: the feeder (its levels were head forwards) and the config at this batch
    size; lengths: each row's committed cache length before the cycle; draft_s: seconds spent; ways: per row, how
    it drafted (a hybrid's copy_choice way: HEAD, MERGED or COPIES; MERGED for every other drafter); plan: the auto
    budget's plan the drafter followed, and evidence: what the budget decides the next cycle's plan by, on the
    device (None: fixed trees); sampled_from: the distributions a sampled chain's tokens were drawn from [B, N, V]
    (Drafted.proposal; None: fixed candidates)."""

    trees: TreeBatch
    feeder: TreeFeeder
    lengths: list[int]
    config: InferConf
    draft_s: float
    ways: list[int]
    plan: Plan | None = None
    evidence: Evidence | None = None
    sampled_from: torch.Tensor | None = None


@dataclass
class Verdict:
    """What verification decided, on the device (acceptance of every row, and what it commits) and on the host (a
    HostRow per row, from the cycle's one copy); features: the target's at every verified position
    [B, 1 + N, H or k*H]; started: when verification began (perf_counter seconds); plan: the auto budget's plan for
    the next cycle (levels, nodes), decided from what the same copy read (None: fixed trees)."""

    accepted: BatchAcceptance
    commit: Commit
    rows: list[HostRow]
    features: torch.Tensor
    started: float
    plan: tuple[int, int] | None = None


@dataclass
class Committed:
    """What a commit leaves for the next cycle: roots [B, 1] (each row's bonus token), pending (the head's inputs
    for the kept positions; None headless) and the seconds since verification began."""

    roots: torch.Tensor
    pending: Pending | None
    verify_s: float


def draft_cycle(state: BatchState, models: Models, rows: list[Request], policy: CyclePolicy,
                sampling: SamplingParams) -> list[list[int]]:
    """propose -> verify -> commit -> record, for every row at once -> each row's new tokens. The one writer of
    the state's roots, pending inputs, plan and carried head time in a cycle."""
    proposal = propose(state, models, rows, policy, sampling)
    verdict = verify(state, models, rows, proposal, policy, sampling)
    committed = commit(state, models, verdict)
    emitted = record(rows, proposal, verdict, committed.verify_s, state.carry_s, state.carry_forwards, policy.budget)
    state.roots = committed.roots
    # after copies alone the head's inputs wait, joined, for the next cycle that drafts with the head
    waiting = state.pending is not None and committed.pending is not None
    state.pending = state.pending.then(committed.pending) if waiting else committed.pending
    state.carry_s, state.carry_forwards = 0.0, 0
    if verdict.plan is not None and proposal.plan is not None:
        state.plan = proposal.plan.then(*verdict.plan)
    return emitted


def way_of(request: Request, budget: Budget | None) -> int:
    """The way a row drafts next (copy_choice): its CopyChoice's under an auto budget, else MERGED (every
    drafter but a choosing hybrid drafts as it always does)."""
    return MERGED if request.choice is None or budget is None else request.choice.way()


def copies_alone(rows: list[Request], policy: CyclePolicy) -> bool:
    """Whether the next cycle drafts every row's copies alone: each row's CopyChoice says so. Then the head is
    neither fed nor run (the scheduler leaves the pending inputs waiting); a batch whose rows disagree drafts those
    rows merged instead."""
    return bool(rows) and all(way_of(r, policy.budget) == COPIES for r in rows)


def propose(state: BatchState, models: Models, rows: list[Request], policy: CyclePolicy,
            sampling: SamplingParams) -> Proposal:
    """Every row's tree from the drafter, within the tree budget at this batch size (a drafter that samples reads
    the request's sampling and each row's generator)."""
    t0 = time.perf_counter()
    head, device, batch = models.head, models.target.device, len(rows)
    lengths, config, budget = list(state.cache.lengths), policy.config, policy.budget
    features = state.features if head else torch.zeros(batch, 0, device=device)
    root = DraftRoot(features, [r.root for r in rows], lengths, [r.index for r in rows], state.roots,
                     state.cache.length_column())
    feeder = TreeFeeder(head, state.head_cache, root)
    plan = None
    if budget is not None and policy.plan_ahead:
        caps = (config.depth if head else 0, budget.max_nodes)
        plan = Plan(*caps) if state.plan is None else state.plan.bounded(*caps)  # the first cycle: the caps
    # a hybrid's rows draft the way their CopyChoice says (under an auto budget): the head's tree alone, the
    # copies merged in, or (every row agreeing: the head was not fed, see copies_alone) the copies alone
    alone = copies_alone(rows, policy)
    ways = [COPIES if alone else way_of(r, budget) for r in rows]
    contexts = [r.context() if w != HEAD else [] for r, w in zip(rows, ways)] if method_of(config).lookup else []
    inp = DraftInput(feeder, contexts, [r.rates for r in rows], config, policy.tree_size, budget, plan,
                     sampling=None if sampling.greedy else sampling, generators=[r.generator for r in rows],
                     copies_alone=alone)
    drafted = policy.drafter.propose(inp)
    trees = as_batch(drafted, device)
    feeder.reset()
    limit = policy.tree_budget
    if trees.batch != batch or trees.width > limit:
        raise EagleError(f"drafter returned {trees.batch} trees of up to {trees.width} nodes: expected one per batch "
                         f"row ({batch}) of at most the tree budget {limit}")
    sync(device)
    return Proposal(trees, feeder, lengths, config, time.perf_counter() - t0, ways, plan,
                    plan_evidence(drafted), sampled_proposal(drafted))


def verify(state: BatchState, models: Models, rows: list[Request], proposal: Proposal, policy: CyclePolicy,
           sampling: SamplingParams) -> Verdict:
    """One target forward over every row's [root, tree...] (padded to a bucket width when trees are padded), then
    acceptance, and the cycle's one copy to the host."""
    t0 = time.perf_counter()
    target, head, trees, lengths = models.target, models.head, proposal.trees, proposal.lengths
    if policy.pad_trees:
        trees = trees.padded(padded_width(trees.width, policy.tree_size))
    batch = verification_input(trees, state.roots, state.cache.length_column())  # ids, positions [B, 1 + N]
    causal = policy.chains and trees.full  # no padding slots: a chain attends causally
    mask = target_mask(target, state, lengths, batch.allowed, causal=causal)
    logits, features = target.forward(batch.ids, batch.positions, state.cache, mask,
                                      feature_layers=models.feature_layers)
    # greedy: the target's argmax at every node; sampling: the exact batched sampler's draws (verify.sampled_choices;
    # tests/test_engine_sampling.py enumerates its outcomes), or rejection against a sampled chain's own proposal
    generators = [r.generator for r in rows]
    if sampling.greedy:
        chosen = argmax(logits)
    elif proposal.sampled_from is None:
        chosen = sampled_choices(logits, sampling, generators, policy.draws)
    else:
        chosen = proposal_choices(logits, sampled_nodes(proposal.sampled_from, trees), trees.tokens,
                                  None if trees.full else trees.sizes, sampling, generators, policy.draws)
    fed = chosen if head is not None and head.config.token_shift == 1 else batch.ids  # (Commit.tokens)
    accepted, to_commit = as_verdict(policy.accept(
        trees.tokens, trees.parents, None if trees.full else trees.sizes, batch.allowed, chosen, fed,
        kept_columns(trees, policy.pad_trees), trees.distinct))
    evidence = proposal.evidence
    host_rows, read = to_host(trees, accepted, None if evidence is None else evidence.summary)
    plan = None if evidence is None else policy.budget.choose(evidence, read)
    return Verdict(accepted, to_commit, host_rows, features, t0, plan)


def commit(state: BatchState, models: Models, verdict: Verdict) -> Committed:
    """Keep every row's accepted path in the target's cache and gather the head's inputs for it, all rows at once
    on the device -> the next roots (the bonus tokens), those inputs, and the seconds since verification began."""
    device, paths = models.target.device, verdict.commit
    counts = [len(r.acceptance.path) + 1 for r in verdict.rows]
    width = max(counts)  # the longest path kept: the columns past it hold nothing any row keeps
    cut = width < paths.kept.shape[1]
    kept = paths.kept[:, :width] if cut else paths.kept  # [B, width] flattened indices
    state.cache.keep_paths(kept, counts, paths.counts)
    pending = None
    if models.head is not None:
        feats = verdict.features[constants.row_index(len(counts), device), kept]  # [B, width, H or k*H]
        pending = Pending(feats, paths.tokens[:, :width] if cut else paths.tokens, counts, paths.counts,
                          verdict.accepted.accepted)  # (counts - 1: each row's newest pair)
    sync(device)
    return Committed(verdict.accepted.bonus, pending, time.perf_counter() - verdict.started)


def record(rows: list[Request], proposal: Proposal, verdict: Verdict, verify_s: float, carry_s: float,
           carry_forwards: int, budget: Budget | None) -> list[list[int]]:
    """A CycleStats per row (the head's time fed after the last verification, carry_s over carry_forwards
    forwards, counts in this cycle's draft time), copy rates updated and a hybrid's choice scored (tokens emitted,
    and the cycle's price under the auto budget's cost model: its head forwards and a forward verifying the row's
    tree alone; a merged cycle also scores its copies alone: the path's leading copied nodes and the bonus, priced
    as a forward verifying the copied nodes) -> each row's accepted tokens and its bonus token."""
    draft_s, head_forwards = carry_s + proposal.draft_s, carry_forwards + proposal.feeder.levels
    emitted = []
    for request, row, way in zip(rows, verdict.rows, proposal.ways):
        acc, on_path = row.acceptance, set(row.acceptance.path)
        request.cycles.append(CycleStats(
            tree_size=row.size, tree_depth=max(row.depths, default=0), accepted=len(acc.path), draft_s=draft_s,
            verify_s=verify_s, tested_conf=[row.probs[i] for i in acc.tested],
            tested_hit=[i in on_path for i in acc.tested], batch=len(rows), lookup_size=sum(row.copied),
            lookup_accepted=sum(row.copied[i] for i in acc.path), head_forwards=head_forwards))
        if request.rates is not None:
            request.rates.update(acc.tested, on_path, row.copied, row.depths, row.parents)
        if request.choice is not None and budget is not None:
            alone = None
            if way == MERGED:  # what its copies alone would have emitted: the path's leading copied nodes, bonus
                lead = next((i for i, node in enumerate(acc.path) if not row.copied[node]), len(acc.path))
                alone = lead + 1, budget.cost.cycle_ms(0, 1 + sum(row.copied))
            request.choice.update(way, len(acc.path) + 1, budget.cost.cycle_ms(head_forwards, 1 + row.size), alone)
        request.root = acc.bonus
        emitted.append([row.tokens[i] for i in acc.path] + [acc.bonus])
    return emitted


def feed_pending(state: BatchState, models: Models) -> None:
    """One batched head forward over every row's newly committed (feature, token) pairs; rows admitted since the last
    cycle have none and ride along as masked padding. Writes the state's features, pending and carried time."""
    pending, device = state.pending, models.target.device
    width = max(pending.counts, default=0) if pending is not None else 0
    if width == 0:
        return
    t0 = time.perf_counter()
    feats, tokens = pending.features, pending.tokens  # [B, W, H or k*H], [B, W]
    if width < feats.shape[1]:  # rows admitted since the commit hold nothing: the longest left
        feats, tokens = feats[:, :width], tokens[:, :width]
    cache = state.head_cache
    lengths, starts = list(cache.lengths), cache.length_column()
    positions = starts + constants.arange(0, width, device)  # [B, width]
    mask = causal_mask(lengths, width, feats.dtype, device, positions)
    predicted = models.head(feats, tokens, positions, cache, mask)
    cache.advance(pending.counts, pending.on_device)
    rows = constants.arange(0, predicted.shape[0], device)
    last = predicted[rows, pending.newest]  # [B, H] each row's newest prediction
    state.features = last if min(pending.counts) > 0 else torch.where(pending.on_device > 0, last, state.features)
    state.pending = None
    sync(device)
    state.carry_s, state.carry_forwards = time.perf_counter() - t0, 1
