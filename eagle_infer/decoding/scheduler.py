"""The requests of one generate_batch call: which row of the caches each one decodes in, admitting (prefilling)
waiting requests into free rows, emitting accepted tokens, and finishing requests at a stop id or the length limit.
Continuous batching: a finished request's row goes to the next waiting one; with none waiting, free rows are
dropped so they stop costing compute. The cycles themselves are eagle_infer/decoding/cycle.py's; the batch's device
state is a batch_state.BatchState, handed to them.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Mapping

import torch

from ..config import InferConf, SamplingParams
from ..models.masks import causal_mask
from ..platform import sync
from ..trees.copy_choice import CopyChoice
from ..trees.lookup import CopyRates
from . import cycle
from .batch_state import BatchState, Models, Output, Request
from .methods import method_of
from .records import GenerationResult
from .verify import sample_device


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
    """One generate_batch call: the requests in the batch's rows, the queue, and the batch's device state
    (`state`). models: what it decodes with; config: the resolved settings; policies: what a cycle of each batch
    size 1..call.size runs under (None: vanilla, one target forward per token), decided by the engine."""

    def __init__(self, models: Models, config: InferConf, policies: Mapping[int, cycle.CyclePolicy] | None,
                 call: Call, head_room: int):
        self.models, self.config, self.policies, self.call = models, config, policies, call
        self.state = BatchState.empty(models, call.size, call.max_len, head_room)
        self.rows: list[Request | None] = [None] * call.size
        self.waiting = deque(range(len(call.prompts)))
        self.results: list[GenerationResult | None] = [None] * len(call.prompts)

    def run(self) -> list[GenerationResult]:
        self.refill()
        while self.rows:
            rows = list(self.rows)
            if self.policies is not None:
                emitted = cycle.draft_cycle(self.state, self.models, rows, self.policies[len(rows)],
                                            self.call.sampling)
            else:
                emitted = cycle.vanilla_cycle(self.state, self.models, rows, self.call.sampling)
            for b, (request, tokens) in enumerate(zip(rows, emitted)):
                self.emit(b, request, tokens)
            self.refill()
            if self.models.head is not None and not self.copies_alone():
                cycle.feed_pending(self.state, self.models)
        return self.results

    def copies_alone(self) -> bool:
        """Whether the next cycle drafts every row's copies alone (cycle.copies_alone): its head inputs then wait."""
        if self.policies is None or not self.rows:
            return False
        return cycle.copies_alone(self.rows, self.policies[len(self.rows)])

    def refill(self) -> None:
        """Admit waiting requests into free rows; then drop the rows left free."""
        for b in range(len(self.rows)):
            while self.rows[b] is None and self.waiting:
                self.admit(b, self.waiting.popleft())
        keep = [b for b, r in enumerate(self.rows) if r is not None]
        if keep and len(keep) < len(self.rows):
            self.state.select_rows(keep)
        if not keep:  # every request is done: nothing left to feed the head
            self.state.pending = None
        self.rows = [self.rows[b] for b in keep]

    def admit(self, b: int, i: int) -> None:
        """Prefill request i alone in row b: its first token, and for EAGLE the head's pass over its prompt."""
        call, state, target, head = self.call, self.state, self.models.target, self.models.head
        device = target.device
        relay = None if call.stream is None else (lambda tokens, i=i: call.stream(i, tokens))
        generator = torch.Generator(device=device).manual_seed(call.seed + i)
        prompt = call.prompts[i]
        request = Request(i, prompt, Output(call.max_new, call.stops, relay), generator, time.perf_counter())
        if method_of(self.config).lookup:
            request.rates = CopyRates(self.config.lookup_conf.num_tokens)
            choose = method_of(self.config).head and self.config.lookup_conf.choose
            request.choice = CopyChoice() if choose else None
        n = len(prompt)
        state.cache.lengths[b] = 0
        positions = torch.arange(n, device=device)[None]
        logits, feats = target.forward(torch.tensor([prompt], device=device), positions, state.cache.row(b),
                                       last_only=True, feature_layers=self.models.feature_layers)
        state.cache.lengths[b] = n
        root = sample_device(logits[0, -1:], call.sampling, [generator])
        request.root = int(root[0])
        state.roots[b] = root[0]
        if state.pending is not None:
            state.pending.clear(b)
        done = request.out.emit([request.root])
        if head is not None and not done:
            state.head_cache.lengths[b] = 0
            seq, shift = prompt + [request.root], head.config.token_shift
            pairs = torch.tensor([seq[shift : shift + n]], device=device)
            predicted = head(feats, pairs, positions, state.head_cache.row(b), causal_mask(0, n, feats.dtype, device))
            state.head_cache.lengths[b] = n
            state.features[b] = predicted[0, -1]
        sync(device)
        request.prefill_s = time.perf_counter() - request.start
        if done:
            self.finish(request)
        else:
            self.rows[b] = request

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
