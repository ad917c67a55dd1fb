"""Measuring a cost model (eagle_infer.trees.cost) on the running machine: timed target forwards and draft levels, cached
per machine, model, dtype, weight packing, compiling and head shape. A measurement says on standard error what it is
doing, about how long it will take (estimated from its first timings) and how long it took.

Other work on the machine (a training beside it, a test suite) would skew a model that every later run then trusts,
so the sizes are timed in interleaved rounds and each keeps its fastest; timings that still look disturbed (a larger
forward faster than a smaller one, one size's rounds far apart) are measured again, and a model that never settles is
used for this run only, never cached."""
from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable

import torch

from .cost import COST_REVISION, SIZES, CostModel, cache_path
from ..head.block_runner import BlockRunner
from ..head.expansion import top_tokens
from .drafting import DraftRoot, TreeFeeder
from ..platform import machine_key, sync, writable_cache
from ..models.masks import causal_mask


ATTEMPTS = 3  # measurements before an unsettled model is used uncached
SLACK_MS = 1.0  # timer and cache jitter: differences below it never mark timings as disturbed


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def estimate_seconds(prefill_ms: float, one_ms: float, context: int, sizes: list[int], reps: int) -> float:
    """Seconds a measurement will take, from its first two timings: a forward of t tokens priced on the line through
    (1, one_ms) and (context, prefill_ms), each size timed reps + 1 times, plus a fifth for the draft levels and
    the first calls' warm-up (SmolLM2 in float16 on a CPU: 51 s estimated so, 55 s measured)."""
    slope = max(0.0, (prefill_ms - one_ms) / max(1, context - 1))
    forwards = sum(one_ms + slope * (t - 1) for t in sizes) * (reps + 1)
    return 1.2 * forwards / 1000


@dataclass
class Measured:
    """A measured cost model and, when its timings look disturbed by other work on the machine, why (`disturbed`)."""

    model: CostModel
    disturbed: str | None


def timed_rounds(calls: list[Callable[[], object]], rounds: int, device: torch.device) -> list[list[float]]:
    """ms of every call in each of `rounds` rounds after a warm-up round, the calls interleaved within a round (a
    disturbance spreads over the calls rather than landing on one): times[i][r] is calls[i]'s in round r."""
    times: list[list[float]] = [[] for _ in calls]
    for r in range(rounds + 1):
        for i, fn in enumerate(calls):
            sync(device)
            start = time.perf_counter()
            fn()
            sync(device)
            if r:
                times[i].append((time.perf_counter() - start) * 1000)
    return times


def disturbed(sizes: list[int], times: list[list[float]]) -> str | None:
    """Why forward timings (times[i]: the rounds of a forward of sizes[i] tokens) look disturbed by other work on
    the machine, or None: a forward of more tokens markedly faster than one of fewer (by a fifth and SLACK_MS), or
    the rounds of one size far apart (their median above 1.5x their fastest, plus SLACK_MS)."""
    fastest = [min(t) for t in times]
    for j in range(1, len(sizes)):
        i = max(range(j), key=fastest.__getitem__)
        if fastest[j] < 0.8 * fastest[i] - SLACK_MS:
            return (f"a forward of {sizes[j]} tokens took {fastest[j]:.1f} ms, one of {sizes[i]} tokens "
                    f"{fastest[i]:.1f} ms")
    for size, t in zip(sizes, times):
        if statistics.median(t) > 1.5 * min(t) + SLACK_MS:
            return f"the forward of {size} tokens took {min(t):.1f} to {max(t):.1f} ms"
    return None


@torch.inference_mode()
def measure(target, head, top_k: int, max_tokens: int, context: int = 256, reps: int = 3,
            say: Callable[[str], None] = _stderr) -> Measured:
    """Time target forwards of 1.. max_tokens tokens (the SIZES up to the first one >= max_tokens) over a `context`
    token cache in `reps` interleaved rounds, and one draft level of top_k nodes (head forward, draft logits, top-k;
    0 ms without a head; a block drafter's level: its block forward and a top-k at every position, block_level);
    each keeps its fastest timing. `say` gets the estimated duration after the first timings."""
    device = target.device
    context = min(context, max(1, target.max_context - max_tokens - 1))
    sizes = [s for s in SIZES if s < max_tokens] + [max(max_tokens, 2)]
    cache = target.new_cache(1, context + sizes[-1])
    start = time.perf_counter()
    _, feats = target.forward(torch.randint(0, target.vocab_size, (1, context), device=device),
                              torch.arange(context, device=device)[None], cache)
    cache.advance(context)
    prefill_ms = (time.perf_counter() - start) * 1000

    def forward(t: int) -> Callable[[], object]:
        ids = torch.randint(0, target.vocab_size, (1, t), device=device)
        positions = (context + torch.arange(t, device=device))[None]
        mask = causal_mask(context, t, target.dtype, device)
        return lambda: target.forward(ids, positions, cache, mask, last_only=t == 1)

    calls = [forward(t) for t in sizes]
    one_ms = min(timed_rounds(calls[:1], 1, device)[0])
    say(f"  about {estimate_seconds(prefill_ms, one_ms, context, sizes, reps):.0f} s "
        f"(forwards of {', '.join(map(str, sizes))} tokens, {reps} timings each)")
    times = timed_rounds(calls, reps, device)
    why = disturbed(sizes, times)
    forward_ms = [min(t) for t in times]
    if head is None:  # prompt lookup drafts without a head: nothing to time per level
        return Measured(CostModel({}, sizes, forward_ms, 0.0, context), why)
    if isinstance(head, BlockRunner):
        fused = target.forward(torch.randint(0, target.vocab_size, (1, context), device=device),
                               torch.arange(context, device=device)[None], target.new_cache(1, context),
                               feature_layers=tuple(head.config.feature_layers))[1]
        level_ms = min(timed_rounds([block_level(head, fused, top_k)], reps * 2, device)[0])
        return Measured(CostModel({}, sizes, forward_ms, level_ms, context), why)
    head_cache = head.new_cache(1, context + top_k + 1)
    head_cache.lengths[0] = context
    root = DraftRoot(feats[:, -1], [0], [context], [0])
    parents = torch.full((1, top_k), -1, dtype=torch.long, device=device)
    tokens = torch.arange(top_k, device=device)[None]

    def level():
        feeder = TreeFeeder(head, head_cache, root)
        feeder.top(feeder.feed(parents, tokens, 1), top_k)
        feeder.reset()

    level_ms = min(timed_rounds([level], reps * 2, device)[0])
    return Measured(CostModel({}, sizes, forward_ms, level_ms, context), why)


def block_level(head: BlockRunner, fused: torch.Tensor, top_k: int) -> Callable[[], None]:
    """A block drafter's draft level to time: its block forward after a context of the fused states [1, L, k*H] and
    the top_k of every position's log-probs (what block_drafter.grow_block reads)."""
    context = fused.shape[1]
    cache = head.new_cache(1, context)
    head(fused, None, torch.arange(context, device=fused.device)[None], cache, None)
    cache.advance(context)
    bonus, lengths = torch.zeros(1, 1, dtype=torch.long, device=fused.device), cache.length_column()
    return lambda: top_tokens(torch.log_softmax(head.draft(cache, bonus, lengths), -1), top_k, head.vocab_order)


def load_or_measure(target, head, top_k: int, max_tokens: int, say: Callable[[str], None] = _stderr) -> CostModel:
    """The cached cost model of this machine, model, dtype, weight packing, compiling and head shape, measured (and
    cached) when there is none, saying so through `say` (standard error)."""
    hc = None if head is None else head.config
    shape = "none" if hc is None else (
        f"{hc.block} block{f' of {hc.block_size}' if hc.block_size else ''}, {hc.layers} layer(s), draft vocabulary "
        f"{hc.draft_vocab_size or hc.vocab_size}")
    key = {**machine_key(target.device), "revision": COST_REVISION, "model": target.name,
           "dtype": str(target.dtype).removeprefix("torch."), "top_k": top_k, "head": shape}
    if target.packed:  # packed weights change every cost (unpacked keys stay as they were)
        key["packed"] = True
    if target.compiled_forward is not None:  # so does a compiled forward
        key["compiled"] = True
    path = cache_path(key)
    model = CostModel.load(path, key)
    if model is None or model.sizes[-1] < max_tokens:
        writable_cache(1 << 20, "the cost model that infer.total_tokens=auto measures")
        say(f"measuring this machine's decoding costs for {target.name} {key['dtype']} (head: {shape}), once: "
            f"infer.total_tokens=auto sizes each tree from them; cached in {path}")
        start = time.perf_counter()
        for attempt in range(1, ATTEMPTS + 1):
            measured = measure(target, head, top_k, max_tokens, say=say)
            if measured.disturbed is None or attempt == ATTEMPTS:
                break
            say(f"  the machine looks busy ({measured.disturbed}): measuring again")
        model = measured.model
        model.key = key
        if measured.disturbed is None:
            model.save(path)
            say(f"  measured in {time.perf_counter() - start:.0f} s")
        else:
            say(f"  measured in {time.perf_counter() - start:.0f} s, still disturbed ({measured.disturbed}): used "
                "for this run only, not cached; measure on a quiet machine")
    return model


