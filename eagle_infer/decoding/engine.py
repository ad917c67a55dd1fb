"""The one decoding engine: prefill, then cycles of draft -> verify -> accept -> compact, over a batch of requests.

Methods (the registry, eagle_infer.decoding.methods): `vanilla` (one target forward per token, the baseline), `chain` (EAGLE
without a tree), `eagle1` (static tree), `eagle2` (dynamic tree), `lookup` (prompt lookup, no head), and the hybrids
`chain+lookup`, `eagle1+lookup`, `eagle2+lookup` (the default), prompt lookup's copies merged into a head's tree
(eagle_infer.trees.lookup, eagle_infer.trees.merge); `dflash` and `dflash-tree` (a DFlash block drafter: one
forward a cycle drafts a block, verified as a chain or as a tree of its positions' top-k) and their hybrids. All
share the target adapter, the caches and the samplers, so greedy output is the target's own greedy output and
sampled output is distributed as the target's.

Batches (`generate_batch`): up to `batch_size` requests decode together, each in one row of the caches with its own
length, tree, accepted length and stop condition; the rest wait and take the row of a request that finishes
(continuous batching), and when none is waiting, finished rows are dropped so they stop costing compute. A new
request is prefilled alone in its row; every cycle then drafts all rows in one batched head forward per tree level
and verifies all trees in one batched target forward, the trees passed as one TreeBatch of [B, N] tensors (smaller
trees padded with masked slots) and accepted and committed on the device with one read back per cycle. `generate` is a batch of one.

Where the parts live: the settings (config.InferConf), the drafters behind one protocol (drafters), the head as it
drafts (head_runner), the cycle's steps propose -> verify -> commit -> record (cycle), the requests' rows and queue
(scheduler), the records (records).
"""
from __future__ import annotations

import time
from typing import Callable

import torch

from ..config import InferConf, SamplingParams
from ..trees.cost import Budget, CostModel
from ..trees.drafters import Drafter
from ..head.block_runner import BlockRunner
from ..head.draft_head import SavedHead
from ..trees.drafting import TreeFeeder
from ..errors import EagleError
from ..head.head_runner import HeadRunner, runner_for
from ..models.kv_cache import KVCache
from ..platform import available_memory, sync
from .cycle import CyclePolicy
from .methods import at_batch, drafter_for, feed_budget, method_of, resolve, tree_budget, tree_size, validate
from ..models.compiled import CompiledForward
from .verify_batch import accept_and_commit
from .records import BatchResult, GenerationResult
from .batch_state import Models
from .scheduler import BatchRun, Call
from ..trees.tree import DraftTree, TreeBatch


def checked(config: InferConf, target, head) -> InferConf:
    """`config` resolved for `head` (methods.resolve: a block drafter's block bounds the depth), with one-line errors
    for what cannot decode with `target` and `head` (a head method without a head, or with a head of a block it does
    not draft with, among them)."""
    config = resolve(config, None if head is None else head.config)
    validate(config, target.vocab_size)
    if method_of(config).head and head is None:
        raise EagleError(f"method {config.method!r} needs a draft head: give head=<dir> or head=random")
    return config


class Engine:
    """Decodes with `target` (a target.Target) and, for the head methods, a draft head (a DraftHead, run through a
    HeadRunner built for the target; a block drafter, DFlashHead, through a BlockRunner; or a runner).

    config: the InferConf (its "auto" settings resolved here). drafter: replaces the method's drafter with any
    Drafter (drafters.Drafter: `propose(DraftInput) -> TreeBatch`, or a list of DraftTrees) or callable
    TreeFeeder -> TreeBatch or list[DraftTree] (one tree per batch row; tests use oracles that know the target's
    continuation); with lookup its trees are merged with the copies. cost: the cost model of an auto budget (this
    machine's: eagle_infer.decoding.build.measure_cost, which build_engine calls), None under a fixed budget. The constructor
    does no I/O and measures nothing."""

    def __init__(
        self, target, head: SavedHead | HeadRunner | BlockRunner | None, config: InferConf,
        drafter: Drafter | Callable[[TreeFeeder], TreeBatch | list[DraftTree]] | None = None,
        cost: CostModel | None = None,
    ):
        config = checked(config, target, head)
        if config.budget == "auto" and cost is None:
            raise EagleError("budget 'auto' needs this machine's cost model: build the engine with "
                             "eagle_infer.decoding.build.build_engine, or give cost=eagle_infer.decoding.build.measure_cost(...)")
        self.target, self.config = target, config
        self.head = runner_for(head, target) if method_of(config).head else None
        self.drafter, self.cost = drafter_for(config, drafter), cost
        captured = target.compiled_forward is not None and target.device.type == "cuda"  # CUDA graphs
        self.pad_trees = config.pad_trees == "on" or (config.pad_trees == "auto" and captured)
        # acceptance + commit: one static-shape step, captured beside the target's forward (one graph per width)
        self.accept = (CompiledForward(None, accept_and_commit, target.device, "acceptance") if captured
                       else accept_and_commit)
        self.plan_ahead = config.plan_ahead == "on" or (config.plan_ahead == "auto" and target.device.type == "cuda")
        self.chains = method_of(config).chains(config)  # every tree one chain: verified causally (cycle.target_mask)
        self._policies: dict[int, CyclePolicy] = {}  # per batch size (policy_at)

    def _check_room(self, prompt_len: int, max_new_tokens: int, which: str = "") -> int:
        """The cache length this request needs; a clear error when the context cannot hold it."""
        ctx = self.target.max_context
        if prompt_len < 1:
            raise EagleError(f"{which}the prompt is empty: expected at least one token")
        if max_new_tokens < 1:
            raise EagleError(f"max_new_tokens {max_new_tokens} is invalid: expected >= 1")
        if prompt_len >= ctx:
            raise EagleError(f"{which}prompt of {prompt_len} tokens is longer than the model's context of {ctx} tokens")
        if prompt_len + max_new_tokens > ctx:
            raise EagleError(
                f"{which}prompt of {prompt_len} tokens + max_new_tokens {max_new_tokens} exceeds the model's context "
                f"of {ctx} tokens"
            )
        # At a cycle start the cache holds every emitted token but the newest (the root, at most max_new - 1 of
        # them after the prompt), and the cycle writes the root and its tree after them.
        need = prompt_len + max_new_tokens - 1 + tree_budget(self.config)
        if need > ctx:
            raise EagleError(
                f"{which}tree budget of {tree_budget(self.config)} tokens does not fit: the cache holds {ctx} "
                f"positions and this request already needs {prompt_len + max_new_tokens}"
            )
        return need

    def cache_bytes(self, batch: int, max_len: int) -> int:
        """Memory of the target's and the head's KV caches for `batch` rows of `max_len` positions."""
        shape = self.target.kv_shape(batch)
        total = KVCache.bytes_needed(*shape, max_len, self.target.dtype)
        if self.head is not None:
            total += KVCache.bytes_needed(self.head.config.layers, *shape[1:], max_len + feed_budget(self.config),
                                          self.target.dtype)
        return total

    def generate(
        self,
        prompt_ids: list[int],
        max_new_tokens: int = 128,
        sampling: SamplingParams = SamplingParams(),
        stop_ids: list[int] | None = None,
        stream: Callable[[list[int]], None] | None = None,
        seed: int = 0,
    ) -> GenerationResult:
        """Generate up to max_new_tokens after prompt_ids (stop ids are included in the output)."""
        relay = None if stream is None else (lambda _request, tokens: stream(tokens))
        return self.generate_batch([prompt_ids], max_new_tokens, sampling, stop_ids, relay, seed, 1).results[0]

    @torch.inference_mode()
    def generate_batch(
        self,
        prompts: list[list[int]],
        max_new_tokens: int = 128,
        sampling: SamplingParams = SamplingParams(),
        stop_ids: list[int] | None = None,
        stream: Callable[[int, list[int]], None] | None = None,
        seed: int = 0,
        batch_size: int | None = None,
        on_finish: Callable[[int, GenerationResult], None] | None = None,
    ) -> BatchResult:
        """Generate for every prompt, at most batch_size (default min(len(prompts), max_batch_size)) at a time;
        stream(i, tokens) gets request i's tokens as they are accepted, on_finish(i, result) its result as soon as
        it is done (requests are admitted in prompt order). Request i samples with seed + i, so its output is what
        generate(prompts[i], seed=seed + i) gives. Every input is checked before any work starts."""
        if not prompts:
            raise EagleError("the batch is empty: expected at least one prompt")
        limit = self.config.max_batch_size
        size = min(len(prompts), limit) if batch_size is None else batch_size
        if size < 1:
            raise EagleError(f"batch_size {size} is invalid: expected >= 1")
        if size > limit:
            raise EagleError(f"batch_size {size} exceeds max_batch_size {limit}: lower it or raise max_batch_size")
        size = min(size, len(prompts))
        which = (lambda i: f"request {i}: ") if len(prompts) > 1 else (lambda i: "")
        max_len = max(self._check_room(len(p), max_new_tokens, which(i)) for i, p in enumerate(prompts))
        need, free = self.cache_bytes(size, max_len), available_memory(self.target.device)
        if need > free:
            raise EagleError(
                f"KV caches for batch_size {size} x {max_len} positions need {need / 2**30:.2f} GiB but "
                f"{self.target.device} has {free / 2**30:.2f} GiB free: lower the batch size, max_new_tokens or the prompts"
            )
        start = time.perf_counter()
        call = Call(prompts=prompts, max_new=max_new_tokens, sampling=sampling, stops=set(stop_ids or ()),
                    stream=stream, seed=seed, size=size, max_len=max_len, on_finish=on_finish)
        policies = None if self.drafter is None else {b: self.policy_at(b) for b in range(1, size + 1)}
        run = BatchRun(Models(self.target, self.head), self.config, policies, call, feed_budget(self.config))
        results = run.run()
        sync(self.target.device)
        return BatchResult(results=results, wall_s=time.perf_counter() - start, batch_size=size, cache_bytes=need)

    def policy_at(self, batch: int) -> CyclePolicy:
        """What a cycle of `batch` rows runs under, built once per size: the config with its tree cut to the
        batch's budget (methods.at_batch) and, under an auto budget, its chooser from the cost model."""
        if batch not in self._policies:
            config = at_batch(self.config, batch)
            budget = Budget(self.cost, batch, tree_size(config), self.pad_trees) if config.budget == "auto" else None
            self._policies[batch] = CyclePolicy(config, tree_size(config), self.drafter, budget, self.pad_trees,
                                                self.plan_ahead, tree_budget(self.config, batch),
                                                1 + tree_size(self.config), self.accept, self.chains)
        return self._policies[batch]
