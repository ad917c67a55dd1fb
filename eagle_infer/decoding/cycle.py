"""One decoding cycle over every row of a batch: propose -> verify -> commit -> record.

- propose: the drafter's TreeBatch (eagle_infer.trees.drafters), a tree per row, fixed before any random draw;
- verify: one target forward of [B, 1 + N] tokens under the trees' masks, then acceptance of every row at once on
  the device, greedy or by the exact batched tree sampler (eagle_infer.decoding.verify);
- commit: the accepted paths gathered into the target's cache and the head's inputs for them gathered, all rows at
  once by index ops (fed in one batched forward by `feed_pending` after the scheduler refills rows);
- record: the cycle's one device-to-host copy (accepted lengths, bonus tokens, the trees), a CycleStats per row, copy
  rates updated, the accepted tokens and the bonus token emitted.
With a fixed tree, or an auto budget planning ahead (infer.plan_ahead, a GPU's default: its plan for the next
cycle, cost.Plan, travels in that copy), a cycle reads the device once and drafting never (tests/test_cost.py counts
it); an auto budget deciding as it drafts (a CPU's default) also reads its choice before each level and at the end.
A vanilla cycle is one target forward of the roots and one token each. `run` is the scheduler's BatchRun: its
rows' roots, the head's features and the pending head inputs are [B, ...] tensors on the device, kept row for row
with the caches. What the engine decides for the batch size (the config cut to its tree budget, the drafter, the
auto budget) arrives as a `CyclePolicy`; a cycle returns each row's new tokens, which the scheduler emits.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import torch

from .. import constants
from ..config import InferConf
from ..trees.drafters import DraftInput, Drafter, as_batch, plan_evidence
from ..trees.drafting import DraftRoot, TreeFeeder
from ..errors import EagleError
from ..platform import sync
from ..trees.cost import Budget, Evidence, Plan
from .methods import method_of
from .records import CycleStats
from ..trees.tree import TreeBatch, padded_width
from ..models.masks import additive_mask, causal_mask
from .verify import BatchAcceptance, argmax, sample_device, sampled_choices
from .verify_batch import Commit, HostRow, as_verdict, kept_columns, to_host, verification_input

if TYPE_CHECKING:  # type-only: the scheduler runs these cycles
    from .scheduler import BatchRun


@dataclass(frozen=True)
class CyclePolicy:
    """What the engine decided for cycles of a batch size (Engine.policy_at): the config with its tree cut to the
    batch's budget and the draft nodes its tree holds (methods.tree_size), the drafter, the auto budget's chooser (None: a fixed tree), whether trees are padded to bucket
    widths and whether the auto budget plans ahead, the tree budget a drafter's trees may not exceed, the
    uniforms a sampled verification draws per row (the largest tree + 1, whatever the batch size), and the
    acceptance step (verify_batch.accept_and_commit, or the same compiled: Engine)."""

    config: InferConf
    tree_size: int
    drafter: Drafter
    budget: Budget | None
    pad_trees: bool
    plan_ahead: bool
    tree_budget: int
    draws: int
    accept: Callable[..., tuple[torch.Tensor, ...]]


@dataclass
class Pending:
    """The head's inputs committed by the last cycle, not yet fed: features [B, W, H or k*H], pair tokens [B, W];
    row b's first counts[b] are real (counts: host list, on_device: the same as a LongTensor [B, 1]); newest:
    LongTensor [B], each row's last real index (counts - 1; 0 for a row with none)."""

    features: torch.Tensor
    tokens: torch.Tensor
    counts: list[int]
    on_device: torch.Tensor
    newest: torch.Tensor

    def select(self, rows: torch.Tensor, kept: list[int]) -> "Pending":
        """These rows only (rows: LongTensor of the kept row indices, kept: the same on the host)."""
        return Pending(self.features.index_select(0, rows), self.tokens.index_select(0, rows),
                       [self.counts[r] for r in kept], self.on_device.index_select(0, rows),
                       self.newest.index_select(0, rows))

    def clear(self, b: int) -> None:
        """Row b has nothing to feed (a request admitted in it). (on_device and newest are the commit's counts and
        acceptance counts themselves, written here in place: nothing reads those after the commit.)"""
        self.counts[b] = 0
        self.on_device[b] = 0
        self.newest[b] = 0


def target_mask(run: BatchRun, lengths: list[int], allowed: torch.Tensor, causal: bool) -> torch.Tensor | None:
    """The target's additive mask over `allowed` (bool [T, S] or [B, T, S], see tree.additive_mask), or None when
    the new tokens attend plainly causally (`causal`) and every row is equally long: transformers then builds the
    causal mask itself, its own fastest path (scripts/bench_engine.py times bare forwards that way)."""
    if causal and min(lengths) == max(lengths):
        return None
    return additive_mask(allowed, lengths, run.target.dtype, run.target.device, run.cache.length_column())


def vanilla_cycle(run: BatchRun) -> list[list[int]]:
    """One token per row from one target forward of the roots -> each row's new tokens."""
    target, rows = run.target, list(run.rows)
    t0 = time.perf_counter()
    lengths = list(run.cache.lengths)
    positions = run.cache.length_column()
    mask = target_mask(run, lengths, torch.ones(1, 1, dtype=torch.bool), causal=True)
    logits, _ = target.forward(run.roots, positions, run.cache, mask, last_only=True)
    run.cache.advance(1)
    chosen = sample_device(logits[:, -1], run.call.sampling, [r.generator for r in rows])
    run.roots = chosen[:, None]
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
    size; lengths: each row's committed cache length before the cycle; draft_s: seconds spent; plan: the auto
    budget's plan the drafter followed, and evidence: what the budget decides the next cycle's plan by, on the
    device (None: fixed trees)."""

    trees: TreeBatch
    feeder: TreeFeeder
    lengths: list[int]
    config: InferConf
    draft_s: float
    plan: Plan | None = None
    evidence: Evidence | None = None


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


def draft_cycle(run: BatchRun, policy: CyclePolicy) -> list[list[int]]:
    """propose -> verify -> commit -> record, for every row at once -> each row's new tokens."""
    rows = list(run.rows)
    proposal = propose(run, rows, policy)
    verdict = verify(run, rows, proposal, policy)
    verify_s = commit(run, verdict)
    return record(run, rows, proposal, verdict, verify_s)


def propose(run: BatchRun, rows, policy: CyclePolicy) -> Proposal:
    """Every row's tree from the drafter, within the tree budget at this batch size."""
    t0 = time.perf_counter()
    device, batch = run.target.device, len(rows)
    lengths, config, budget = list(run.cache.lengths), policy.config, policy.budget
    features = run.features if run.head else torch.zeros(batch, 0, device=device)
    root = DraftRoot(features, [r.root for r in rows], lengths, [r.index for r in rows], run.roots,
                     run.cache.length_column())
    feeder = TreeFeeder(run.head, run.head_cache, root)
    plan = None
    if budget is not None and policy.plan_ahead:
        caps = (config.depth if run.head else 0, budget.max_nodes)
        plan = Plan(*caps) if run.plan is None else run.plan.bounded(*caps)  # the first cycle: the caps
    contexts = [run.context(r) for r in rows] if method_of(config).lookup else []
    inp = DraftInput(feeder, contexts, [r.rates for r in rows], config, policy.tree_size, budget, plan)
    drafted = policy.drafter.propose(inp)
    trees = as_batch(drafted, device)
    feeder.reset()
    limit = policy.tree_budget
    if trees.batch != batch or trees.width > limit:
        raise EagleError(f"drafter returned {trees.batch} trees of up to {trees.width} nodes: expected one per batch "
                         f"row ({batch}) of at most the tree budget {limit}")
    sync(device)
    return Proposal(trees, feeder, lengths, config, time.perf_counter() - t0, plan, plan_evidence(drafted))


def verify(run: BatchRun, rows, proposal: Proposal, policy: CyclePolicy) -> Verdict:
    """One target forward over every row's [root, tree...] (padded to a bucket width when trees are padded), then
    acceptance, and the cycle's one copy to the host."""
    t0 = time.perf_counter()
    trees, lengths = proposal.trees, proposal.lengths
    if policy.pad_trees:
        trees = trees.padded(padded_width(trees.width, policy.tree_size))
    batch = verification_input(trees, run.roots, run.cache.length_column())
    causal = run.chains and trees.full  # no padding slots: a chain attends causally
    mask = target_mask(run, lengths, batch.allowed, causal=causal)
    logits, features = run.target.forward(batch.ids, batch.positions, run.cache, mask,
                                          feature_layers=run.feature_layers)
    sampling = run.call.sampling
    # greedy: the target's argmax at every node; sampling: the exact batched sampler's draws (verify.sampled_choices;
    # tests/test_engine_sampling.py enumerates its outcomes)
    chosen = argmax(logits) if sampling.greedy else sampled_choices(logits, sampling, [r.generator for r in rows],
                                                                    policy.draws)
    fed = chosen if run.head is not None and run.head.config.token_shift == 1 else batch.ids  # (Commit.tokens)
    accepted, commit_ = as_verdict(policy.accept(
        trees.tokens, trees.parents, None if trees.full else trees.sizes, batch.allowed, chosen, fed,
        kept_columns(trees, policy.pad_trees), trees.distinct))
    evidence = proposal.evidence
    rows_, read = to_host(trees, accepted, None if evidence is None else evidence.summary)
    plan = None if evidence is None else policy.budget.choose(evidence, read)
    return Verdict(accepted, commit_, rows_, features, t0, plan)


def commit(run: BatchRun, verdict: Verdict) -> float:
    """Keep every row's accepted path in the target's cache, queue the head's inputs for it and make the bonus
    tokens the next roots, all rows at once on the device. -> seconds since verification began."""
    device, c = run.target.device, verdict.commit
    counts = [len(r.acceptance.path) + 1 for r in verdict.rows]
    width = max(counts)  # the longest path kept: the columns past it hold nothing any row keeps
    cut = width < c.kept.shape[1]
    kept = c.kept[:, :width] if cut else c.kept
    run.cache.keep_paths(kept, counts, c.counts)
    if run.head is not None:
        feats = verdict.features[constants.row_index(len(counts), device), kept]  # [B, width, H or k*H]
        run.pending = Pending(feats, c.tokens[:, :width] if cut else c.tokens, counts, c.counts,
                              verdict.accepted.accepted)  # (counts - 1: each row's newest pair)
    run.roots = verdict.accepted.bonus
    sync(device)
    return time.perf_counter() - verdict.started


def record(run: BatchRun, rows, proposal: Proposal, verdict: Verdict, verify_s: float) -> list[list[int]]:
    """A CycleStats per row (the head's time fed after the last verification counts in this cycle's draft time) and
    copy rates updated -> each row's accepted tokens and its bonus token."""
    draft_s, head_forwards = run.carry_s + proposal.draft_s, run.carry_forwards + proposal.feeder.levels
    run.carry_s, run.carry_forwards = 0.0, 0
    if verdict.plan is not None and proposal.plan is not None:
        run.plan = proposal.plan.then(*verdict.plan)
    emitted = []
    for request, row in zip(rows, verdict.rows):
        acc, on_path = row.acceptance, set(row.acceptance.path)
        request.cycles.append(CycleStats(
            tree_size=row.size, tree_depth=max(row.depths, default=0), accepted=len(acc.path), draft_s=draft_s,
            verify_s=verify_s, tested_conf=[row.probs[i] for i in acc.tested],
            tested_hit=[i in on_path for i in acc.tested], batch=len(rows), lookup_size=sum(row.copied),
            lookup_accepted=sum(row.copied[i] for i in acc.path), head_forwards=head_forwards))
        if request.rates is not None:
            request.rates.update(acc.tested, on_path, row.copied, row.depths)
        request.root = acc.bonus
        emitted.append([row.tokens[i] for i in acc.path] + [acc.bonus])
    return emitted


def feed_pending(run: BatchRun) -> None:
    """One batched head forward over every row's newly committed (feature, token) pairs; rows admitted since the last
    cycle have none and ride along as masked padding."""
    pending, device = run.pending, run.target.device
    width = max(pending.counts, default=0) if pending is not None else 0
    if width == 0:
        return
    t0 = time.perf_counter()
    feats, tokens = pending.features, pending.tokens
    if width < feats.shape[1]:  # rows admitted since the commit hold nothing: the longest left
        feats, tokens = feats[:, :width], tokens[:, :width]
    cache = run.head_cache
    lengths, starts = list(cache.lengths), cache.length_column()
    positions = starts + constants.arange(0, width, device)
    mask = causal_mask(lengths, width, feats.dtype, device, positions)
    predicted = run.head(feats, tokens, positions, cache, mask)
    cache.advance(pending.counts, pending.on_device)
    rows = constants.arange(0, predicted.shape[0], device)
    last = predicted[rows, pending.newest]  # [B, H] each row's newest prediction
    run.features = last if min(pending.counts) > 0 else torch.where(pending.on_device > 0, last, run.features)
    run.pending = None
    sync(device)
    run.carry_s, run.carry_forwards = time.perf_counter() - t0, 1
