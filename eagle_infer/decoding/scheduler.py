"""The requests of one generate_batch call: which row of the caches each one decodes in, admitting (prefilling)
waiting requests into free rows, emitting accepted tokens, and finishing requests at a stop id or the length limit.
Continuous batching: a finished request's row goes to the next waiting one; with none waiting, free rows are
dropped so they stop costing compute. The cycles themselves are eagle_infer/decoding/cycle.py's.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import torch

from . import cycle
from ..trees.lookup import CopyRates
from ..platform import sync
from ..trees.cost import Plan
from .methods import feed_budget, method_of
from .records import GenerationResult
from ..models.masks import causal_mask
from .verify import sample_device
from ..config import SamplingParams


class Output:
    """Collects a request's emitted tokens; knows when to stop."""

    def __init__(self, max_new: int, stop_ids: set[int], stream: Callable[[list[int]], None] | None):
        self.tokens: list[int] = []
        self.max_new, self.stop_ids, self.stream = max_new, stop_ids, stream
        self.reason = ""

    def emit(self, new: list[int]) -> bool:
        """Append tokens up to a stop id or the length limit; True when generation is over."""
        taken = []
        for t in new:
            taken.append(t)
            if t in self.stop_ids:
                self.reason = "stop"
                break
            if len(self.tokens) + len(taken) >= self.max_new:
                self.reason = "length"
                break
        self.tokens += taken
        if self.stream and taken:
            self.stream(taken)
        return bool(self.reason)


@dataclass
class Request:
    """A request decoding in one batch row: its output, sampler and stats, and what its next cycle starts from."""

    index: int
    out: Output
    generator: torch.Generator
    start: float
    prefill_s: float = 0.0
    cycles: list = field(default_factory=list)
    root: int = 0  # the newest emitted token, not yet in the target's cache (on the device: BatchRun.roots)
    rates: CopyRates | None = None  # acceptance of copied tokens per depth, when drafting with lookup


@dataclass(kw_only=True)
class Call:
    """What a generate_batch call asked for: prompts (token ids), the limit of new tokens, sampling, stop ids,
    stream(i, tokens) (or None), the seed (request i samples with seed + i), rows decoded at once, cache length, and
    on_finish(i, result) (or None), called as each request finishes."""

    prompts: list[list[int]]
    max_new: int
    sampling: SamplingParams
    stops: set[int]
    stream: Callable[[int, list[int]], None] | None
    seed: int
    size: int
    max_len: int
    on_finish: Callable[[int, GenerationResult], None] | None = None


class BatchRun:
    """The state of one generate_batch call: caches whose rows hold the decoding requests, and the queue. Beside the
    caches, row for row on the device: roots [B, 1] (each row's newest token), features [B, H] (the head's predicted
    feature after the committed context) and pending (cycle.Pending: the head's inputs not yet fed)."""

    def __init__(self, engine, call: Call):
        self.engine, self.call = engine, call
        self.target, self.head, self.config = engine.target, engine.head, engine.config
        self.feature_layers = tuple(self.head.config.feature_layers) if self.head else ()  # a fused head's inputs
        config = self.config  # methods whose trees are always one chain, verified causally (cycle.target_mask)
        self.chains = method_of(config).chains(config)
        self.cache = self.target.new_cache(call.size, call.max_len)
        self.head_cache = self.head.new_cache(call.size, call.max_len + feed_budget(config)) if self.head else None
        self.rows: list[Request | None] = [None] * call.size
        device = self.target.device
        self.roots = torch.zeros(call.size, 1, dtype=torch.long, device=device)
        self.features = self.head.module.weight.new_zeros(call.size, self.head.config.hidden_size) if self.head else None
        self.pending: cycle.Pending | None = None
        self.plan: Plan | None = None  # an auto budget's plan for the next cycle (cost.Plan), read by the last cycle
        self.waiting = deque(range(len(call.prompts)))
        self.results: list[GenerationResult | None] = [None] * len(call.prompts)
        self.carry_s = 0.0  # head time spent after the last verification, counted in the next cycle's draft time
        self.carry_forwards = 0  # ... and its head forwards

    def run(self) -> list[GenerationResult]:
        self.refill()
        while self.rows:
            rows = list(self.rows)
            if self.engine.drafter is not None:
                emitted = cycle.draft_cycle(self, self.engine.policy_at(len(rows)))
            else:
                emitted = cycle.vanilla_cycle(self)
            for b, (request, tokens) in enumerate(zip(rows, emitted)):
                self.emit(b, request, tokens)
            self.refill()
            if self.head is not None:
                cycle.feed_pending(self)
        return self.results

    def refill(self) -> None:
        """Admit waiting requests into free rows; then drop the rows left free."""
        for b in range(len(self.rows)):
            while self.rows[b] is None and self.waiting:
                self.admit(b, self.waiting.popleft())
        keep = [b for b, r in enumerate(self.rows) if r is not None]
        if keep and len(keep) < len(self.rows):
            self.cache.select_rows(keep)
            index = torch.tensor(keep, device=self.target.device)
            self.roots = self.roots.index_select(0, index)
            if self.head is not None:
                self.head_cache.select_rows(keep)
                self.features = self.features.index_select(0, index)
                if self.pending is not None:
                    self.pending = self.pending.select(index, keep)
        if not keep:  # every request is done: nothing left to feed the head
            self.pending = None
        self.rows = [self.rows[b] for b in keep]

    def admit(self, b: int, i: int) -> None:
        """Prefill request i alone in row b: its first token, and for EAGLE the head's pass over its prompt."""
        call, target, device = self.call, self.target, self.target.device
        relay = None if call.stream is None else (lambda tokens, i=i: call.stream(i, tokens))
        generator = torch.Generator(device=device).manual_seed(call.seed + i)
        request = Request(i, Output(call.max_new, call.stops, relay), generator, time.perf_counter())
        if method_of(self.config).lookup:
            request.rates = CopyRates(self.config.lookup_conf.num_tokens)
        prompt = call.prompts[i]
        n = len(prompt)
        self.cache.lengths[b] = 0
        positions = torch.arange(n, device=device)[None]
        logits, feats = target.forward(torch.tensor([prompt], device=device), positions, self.cache.row(b),
                                       last_only=True, feature_layers=self.feature_layers)
        self.cache.lengths[b] = n
        root = sample_device(logits[0, -1:], call.sampling, [generator])
        request.root = int(root[0])
        self.roots[b] = root[0]
        if self.pending is not None:
            self.pending.clear(b)
        done = request.out.emit([request.root])
        if self.head is not None and not done:
            self.head_cache.lengths[b] = 0
            seq, shift = prompt + [request.root], self.head.config.token_shift
            pairs = torch.tensor([seq[shift : shift + n]], device=device)
            predicted = self.head(feats, pairs, positions, self.head_cache.row(b), causal_mask(0, n, feats.dtype, device))
            self.head_cache.lengths[b] = n
            self.features[b] = predicted[0, -1]
        sync(device)
        request.prefill_s = time.perf_counter() - request.start
        if done:
            self.finish(request)
        else:
            self.rows[b] = request

    def context(self, request: Request) -> list[int]:
        """A request's prompt and every token emitted so far (the last one is the next cycle's root)."""
        return self.call.prompts[request.index] + request.out.tokens

    def emit(self, b: int, request: Request, tokens: list[int]) -> None:
        """Emit a row's tokens; a finished request gets its result and frees the row."""
        if request.out.emit(tokens):
            self.finish(request)
            self.rows[b] = None

    def finish(self, request: Request) -> None:
        out = request.out
        self.results[request.index] = GenerationResult(
            tokens=out.tokens, cycles=request.cycles, prefill_s=request.prefill_s,
            wall_s=time.perf_counter() - request.start, stop_reason=out.reason)
        if self.call.on_finish is not None:
            self.call.on_finish(request.index, self.results[request.index])
