"""One decoding cycle over every row of a batch: propose -> verify -> commit -> record.

- propose: the drafter's trees (eagle_infer.drafters), one per row, fixed before any random draw;
- verify: one target forward of [B, 1 + N] tokens under the trees' masks, then greedy acceptance of every row at
  once, or the exact per-tree sampler (eagle_infer.verify);
- commit: the accepted paths gathered into the target's cache, the head's inputs for them queued (fed in one
  batched forward by `feed_pending` after the scheduler refills rows), copy rates updated;
- record: a CycleStats per row, the accepted tokens and the bonus token emitted.
A vanilla cycle is one target forward of the roots and one token each. `run` is the scheduler's BatchRun.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from .config import InferConf
from .drafters import DraftInput
from .drafting import DraftRoot, TreeFeeder
from .errors import EagleError
from .platform import sync
from .records import CycleStats
from .tree import DraftTree, additive_mask, causal_mask, padded_width
from .verify import Acceptance, sample_tokens, target_probs, verify_sampling
from .verify_batch import greedy_outcomes, host_rows, verification_input


def target_mask(run, lengths: list[int], allowed: torch.Tensor, causal: bool) -> torch.Tensor | None:
    """The target's additive mask over `allowed` (bool [T, S] or [B, T, S], see tree.additive_mask), or None when
    the new tokens attend plainly causally (`causal`) and every row is equally long: transformers then builds the
    causal mask itself, its own fastest path (scripts/bench_engine.py times bare forwards that way)."""
    if causal and min(lengths) == max(lengths):
        return None
    return additive_mask(allowed, lengths, run.target.dtype, run.target.device)


def vanilla_cycle(run) -> None:
    """One token per row from one target forward of the roots."""
    target, device, rows = run.target, run.target.device, list(run.rows)
    t0 = time.perf_counter()
    lengths = list(run.cache.lengths)
    ids = torch.tensor([[r.root] for r in rows], device=device)
    positions = torch.tensor(lengths, device=device)[:, None]
    mask = target_mask(run, lengths, torch.ones(1, 1, dtype=torch.bool), causal=True)
    logits, _ = target.forward(ids, positions, run.cache, mask, last_only=True)
    run.cache.advance(1)
    tokens = sample_tokens(logits[:, -1], run.call.sampling, [r.generator for r in rows])  # the cycle's one host sync
    verify_s = time.perf_counter() - t0
    for b, (request, token) in enumerate(zip(rows, tokens)):
        request.cycles.append(CycleStats(tree_size=0, tree_depth=0, accepted=0, draft_s=0.0, verify_s=verify_s,
                                         batch=len(rows)))
        request.root = token
        run.emit(b, request, [token])


@dataclass
class Proposal:
    """A cycle's trees [B] and what drafted them: the feeder (its levels were head forwards) and the config at
    this batch size; lengths: each row's committed cache length before the cycle; draft_s: seconds spent."""

    trees: list[DraftTree]
    feeder: TreeFeeder
    lengths: list[int]
    config: InferConf
    draft_s: float


@dataclass
class Verdict:
    """What verification decided, per row: the Acceptance, the tree's tokens and draft probabilities on the host,
    and the target's features at every verified position [B, 1 + N, H or k*H]; started: when verification began
    (perf_counter seconds)."""

    outcomes: list[Acceptance]
    tokens: list[list[int]]
    probs: list[list[float]]
    features: torch.Tensor
    started: float


def draft_cycle(run) -> None:
    rows = list(run.rows)
    proposal = propose(run, rows)
    verdict = verify(run, rows, proposal)
    verify_s = commit(run, rows, proposal, verdict)
    record(run, rows, proposal, verdict, verify_s)


def propose(run, rows) -> Proposal:
    """Every row's tree from the drafter, within the tree budget at this batch size."""
    t0 = time.perf_counter()
    engine, device, batch = run.engine, run.target.device, len(rows)
    lengths, config = list(run.cache.lengths), engine.config_at(batch)
    features = torch.stack([r.feature for r in rows]) if run.head else torch.zeros(batch, 0, device=device)
    root = DraftRoot(features, [r.root for r in rows], lengths, [r.index for r in rows])
    feeder = TreeFeeder(run.head, run.head_cache, root)
    budget = engine.budget_at(batch, config.tree_size()) if config.budget == "auto" else None
    contexts = [run.context(r) for r in rows] if config.uses_lookup else []
    inp = DraftInput(feeder, contexts, [r.rates for r in rows], config, budget)
    trees = engine.drafter.propose(inp)
    feeder.reset()
    limit, largest = engine.config.tree_budget(batch), max((len(t) for t in trees), default=0)
    if len(trees) != batch or largest > limit:
        raise EagleError(f"drafter returned {len(trees)} trees of up to {largest} nodes: expected one per batch row "
                         f"({batch}) of at most the tree budget {limit}")
    sync(device)
    return Proposal(trees, feeder, lengths, config, time.perf_counter() - t0)


def verify(run, rows, proposal: Proposal) -> Verdict:
    """One target forward over every row's [root, tree...] (padded to a bucket width when trees are padded), then
    acceptance."""
    t0 = time.perf_counter()
    trees, lengths, device = proposal.trees, proposal.lengths, run.target.device
    largest = max(len(t) for t in trees)
    width = padded_width(largest, proposal.config.tree_size()) if run.engine.pad_trees else largest
    batch = verification_input(trees, [r.root for r in rows], lengths, device, width)
    causal = run.chains and width == min(len(t) for t in trees)  # no padding slots: a chain attends causally
    mask = target_mask(run, lengths, batch.allowed, causal=causal)
    logits, features = run.target.forward(batch.ids, batch.positions, run.cache, mask,
                                          feature_layers=run.feature_layers)
    sampling = run.call.sampling
    if sampling.greedy:
        outcomes, tokens, probs = greedy_outcomes(batch, logits)
    else:  # the exact per-tree sampler (tests/test_engine_sampling.py enumerates its draws)
        outcomes = [verify_sampling(tree, target_probs(logits[b, : len(tree) + 1], sampling), r.generator)
                    for b, (r, tree) in enumerate(zip(rows, trees))]
        _, tokens, probs = host_rows(batch, [])
    return Verdict(outcomes, tokens, probs, features, t0)


def commit(run, rows, proposal: Proposal, verdict: Verdict) -> float:
    """Keep every row's accepted path in the target's cache, queue the head's pairs for it, update copy rates, and
    make the bonus token the next root. -> seconds since verification began."""
    device = run.target.device
    kept = [[0] + [i + 1 for i in acc.path] for acc in verdict.outcomes]  # flattened indices committed per row
    run.cache.keep_rows(list(range(len(rows))), proposal.lengths, kept)
    if run.head is not None:
        width = max(map(len, kept))
        index = torch.tensor([k + [k[-1]] * (width - len(k)) for k in kept], device=device)
        feats = verdict.features
        feats = feats.gather(1, index[:, :, None].expand(-1, -1, feats.shape[-1]))  # [B, width, H or k*H]
        shift = run.head.config.token_shift
    for b, (request, tree, acc) in enumerate(zip(rows, proposal.trees, verdict.outcomes)):
        if run.head is not None:
            seq = [request.root] + [verdict.tokens[b][i] for i in acc.path] + [acc.bonus]
            request.pending = (feats[b, : len(kept[b])], seq[shift : shift + len(kept[b])])
        if request.rates is not None and tree.copied is not None:
            request.rates.update(tree, acc.tested, acc.path)
        request.root = acc.bonus
    sync(device)
    return time.perf_counter() - verdict.started


def record(run, rows, proposal: Proposal, verdict: Verdict, verify_s: float) -> None:
    """A CycleStats per row (the head's time fed after the last verification counts in this cycle's draft time),
    then the accepted tokens and the bonus token emitted."""
    draft_s, head_forwards = run.carry_s + proposal.draft_s, run.carry_forwards + proposal.feeder.levels
    run.carry_s, run.carry_forwards = 0.0, 0
    for b, (request, tree, acc) in enumerate(zip(rows, proposal.trees, verdict.outcomes)):
        probs, on_path, tokens = verdict.probs[b], set(acc.path), verdict.tokens[b]
        copied = [] if tree.copied is None else tree.copied.tolist()
        request.cycles.append(CycleStats(
            tree_size=len(tree), tree_depth=tree.depth, accepted=len(acc.path), draft_s=draft_s,
            verify_s=verify_s, tested_conf=[probs[i] for i in acc.tested],
            tested_hit=[i in on_path for i in acc.tested], batch=len(rows), lookup_size=sum(copied),
            lookup_accepted=sum(copied[i] for i in acc.path) if copied else 0, head_forwards=head_forwards))
        run.emit(b, request, [tokens[i] for i in acc.path] + [acc.bonus])


def feed_pending(run) -> None:
    """One batched head forward over every row's newly committed (feature, token) pairs; rows admitted since the last
    cycle have none and ride along as masked padding."""
    rows, device = run.rows, run.target.device
    counts = [0 if r.pending is None else len(r.pending[1]) for r in rows]
    width = max(counts, default=0)
    if width == 0:
        return
    t0 = time.perf_counter()
    example = rows[counts.index(width)].pending[0]  # [m, H], or [m, k*H] for a fused head
    feats = example.new_zeros(len(rows), width, example.shape[-1])
    tokens = torch.zeros(len(rows), width, dtype=torch.long, device=device)
    for b, (r, m) in enumerate(zip(rows, counts)):
        if m:
            feats[b, :m] = r.pending[0]
            tokens[b, :m] = torch.tensor(r.pending[1], device=device)
    lengths = list(run.head_cache.lengths)
    positions = torch.tensor(lengths, device=device)[:, None] + torch.arange(width, device=device)
    mask = causal_mask(lengths, width, feats.dtype, device)
    predicted = run.head(feats, tokens, positions, run.head_cache, mask)
    run.head_cache.advance(counts)
    for b, (r, m) in enumerate(zip(rows, counts)):
        if m:
            r.feature, r.pending = predicted[b, m - 1], None
    sync(device)
    run.carry_s, run.carry_forwards = time.perf_counter() - t0, 1
