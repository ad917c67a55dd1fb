"""The one decoding engine: prefill, then cycles of draft -> verify -> accept -> compact, over a batch of requests.

Methods: `vanilla` (one target forward per token, the baseline), `chain` (EAGLE without a tree), `eagle1` (static
tree), `eagle2` (dynamic tree) and `lookup` (prompt lookup, no head); `lookup=True` merges prompt lookup branches
into a head's tree (eagle_infer.lookup, eagle_infer.merge). All share the target adapter, the caches and the
samplers, so greedy output is the target's own greedy output and sampled output is distributed as the target's.

Batches (`generate_batch`): up to `batch_size` requests decode together, each in one row of the caches with its own
length, tree, accepted length and stop condition; the rest wait and take the row of a request that finishes
(continuous batching), and when none is waiting, finished rows are dropped so they stop costing compute. A new
request is prefilled alone in its row; every cycle then drafts all rows in one batched head forward per tree level
and verifies all trees in one batched target forward. Trees of one cycle have the same size for the built-in
drafters; a custom drafter's smaller trees are padded with masked slots. `generate` is a batch of one.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from typing import Callable

import torch

from .config import LookupConf
from .cost import Budget, CostModel, load_or_measure
from .draft_head import DraftHead
from .drafting import DraftRoot, TreeFeeder, draft_chain, draft_dynamic, draft_static
from .errors import EagleError
from .kv_cache import KVCache
from .lookup import CopyRates, lookup_chains
from .merge import merge_trees
from .tree import (
    DEFAULT_STATIC_PATHS, DraftTree, additive_mask, ancestor_masks, causal_mask, check_paths, padded_width, path_values,
)
from .verify import Acceptance, SamplingParams, argmax, sample_token, target_probs, verify_greedy, verify_sampling

METHODS = ("vanilla", "chain", "eagle1", "eagle2", "lookup")
HEADLESS = ("vanilla", "lookup")  # methods that draft without a head
EXPAND_BY = ("value", "confidence")
BUDGETS = ("fixed", "auto")
PAD_TREES = ("auto", "on", "off")


@dataclass
class DecodeConfig:
    """How to draft. depth: longest draft path; top_k: EAGLE-2 expansion width (nodes expanded per level and
    children kept per expanded node; the sampling filter is SamplingParams.sampling_top_k); total_tokens: EAGLE-2
    draft budget (root excluded); static_paths: EAGLE-1 tree (None = DEFAULT_STATIC_PATHS). max_batch_size: most requests decoded
    at once. batch_token_budget: most tokens one verification forward holds over the whole batch (B rows x (tree +
    root)); the tree shrinks to fit as the batch grows (EAGLE notes smaller trees suit larger batches); 0 = off.
    lookup: merge prompt lookup (settings lookup_conf) into the head's tree within the same budget.
    budget: "fixed" verifies total_tokens nodes every cycle; "auto" (EAGLE-2, with or without lookup, and lookup
    alone) treats depth and total_tokens (lookup: num_tokens x branches) as caps and picks, per cycle, the depth and
    the number of nodes from a cost model measured on this machine (eagle_infer/cost.py).
    pad_trees: "on" pads every cycle's verification to tree.padded_width (a power of two of nodes, at most the tree
    budget) with slots that see only the root and themselves and are never accepted; "auto" pads exactly when the
    target's forward is compiled on a GPU, where each new width would record another CUDA graph; "off" never."""

    method: str = "eagle2"
    depth: int = 6
    top_k: int = 8
    total_tokens: int = 32
    static_paths: list | None = None
    expand_by: str = "value"
    rerank: bool = True
    max_batch_size: int = 16
    batch_token_budget: int = 0
    lookup: bool = False
    lookup_conf: LookupConf = field(default_factory=LookupConf)
    budget: str = "fixed"
    pad_trees: str = "auto"

    @property
    def uses_lookup(self) -> bool:
        return self.method == "lookup" or self.lookup

    def validate(self, vocab_size: int) -> None:
        if self.method not in METHODS:
            raise EagleError(f"unknown method {self.method!r}: expected one of {', '.join(METHODS)}")
        for name in ("depth", "top_k", "total_tokens"):
            if not isinstance(getattr(self, name), int):
                raise EagleError(f"{name} {getattr(self, name)!r} is invalid: expected an integer (or 'auto' for "
                                 "infer.depth / infer.total_tokens)")
        if self.pad_trees not in PAD_TREES:
            raise EagleError(f"unknown pad_trees {self.pad_trees!r}: expected one of {', '.join(PAD_TREES)}")
        if self.budget not in BUDGETS:
            raise EagleError(f"unknown budget {self.budget!r}: expected one of {', '.join(BUDGETS)}")
        if self.budget == "auto" and self.method != "lookup" and (self.method != "eagle2" or not self.rerank):
            raise EagleError(f"budget 'auto' needs method eagle2 with rerank, or lookup: got method {self.method!r}, "
                             f"rerank {self.rerank}")
        if self.depth < 1:
            raise EagleError(f"depth {self.depth} is invalid: expected >= 1")
        if not 1 <= self.top_k <= vocab_size:
            raise EagleError(f"top_k {self.top_k} is invalid: expected 1 <= top_k <= vocabulary size {vocab_size}")
        if self.total_tokens < 1:
            raise EagleError(f"total_tokens {self.total_tokens} is invalid: expected >= 1")
        if self.max_batch_size < 1:
            raise EagleError(f"max_batch_size {self.max_batch_size} is invalid: expected >= 1")
        if self.batch_token_budget < 0:
            raise EagleError(f"batch_token_budget {self.batch_token_budget} is invalid: expected >= 0 (0 = off)")
        if self.expand_by not in EXPAND_BY:
            raise EagleError(f"unknown expand_by {self.expand_by!r}: expected one of {', '.join(EXPAND_BY)}")
        if self.method == "eagle1":
            widest = max(max(p) for p in check_paths(self.paths()))
            if widest >= vocab_size:
                raise EagleError(f"static tree rank {widest} is invalid: expected ranks below the vocabulary size {vocab_size}")
        if self.lookup and self.method in HEADLESS:
            raise EagleError(f"lookup=true merges prompt lookup into a head's tree: expected method chain, eagle1 or "
                             f"eagle2, not {self.method!r} (method lookup drafts by lookup alone)")
        if self.uses_lookup:
            self.lookup_conf.validate()
        if self.lookup and self.lookup_conf.num_tokens > self.tree_size():
            raise EagleError(f"lookup.num_tokens {self.lookup_conf.num_tokens} is beyond the tree budget: expected <= "
                             f"the {self.tree_size()} draft tokens of the {self.method} tree")

    def paths(self):
        return DEFAULT_STATIC_PATHS if self.static_paths is None else self.static_paths

    def tree_size(self) -> int:
        """Draft nodes of this config's tree, before any batch budget."""
        lookup = self.lookup_conf.num_tokens * self.lookup_conf.branches
        return {"vanilla": 0, "chain": self.depth, "eagle1": len(self.paths()), "eagle2": self.total_tokens,
                "lookup": lookup}[self.method]

    def tree_budget(self, batch: int = 1) -> int:
        """Most draft nodes one cycle verifies per row when `batch` rows decode together."""
        if self.method == "vanilla" or not self.batch_token_budget:
            return self.tree_size()
        return min(self.tree_size(), max(1, self.batch_token_budget // batch - 1))

    def feed_budget(self) -> int:
        """Most tree nodes one cycle feeds to the draft head (its cache needs that much room past the context)."""
        return {"vanilla": 0, "chain": self.depth, "eagle1": len(self.paths()), "eagle2": self.top_k * (self.depth - 1),
                "lookup": 0}[self.method]

    def at_batch(self, batch: int) -> "DecodeConfig":
        """This config with the tree cut to tree_budget(batch): EAGLE-2 keeps fewer nodes (and drafts no deeper
        than it can keep), EAGLE-1 keeps its first paths in breadth-first order, a chain gets shorter, lookup
        copies fewer tokens (a merged tree is cut to the smaller budget as well)."""
        n = self.tree_budget(batch)
        if n == self.tree_size():
            return self
        if self.method == "eagle2":
            return replace(self, total_tokens=n, depth=min(self.depth, n))
        if self.method == "eagle1":
            return replace(self, static_paths=[list(p) for p in check_paths(self.paths())[:n]])
        if self.method == "lookup":
            tokens = min(self.lookup_conf.num_tokens, n)
            return replace(self, lookup_conf=replace(self.lookup_conf, num_tokens=tokens, branches=n // tokens))
        return replace(self, depth=n)


@dataclass
class CycleStats:
    """One target forward after prefill. accepted: draft tokens kept (the cycle emits accepted + 1 before any stop
    truncation); tested_conf/tested_hit: draft confidence of each node whose parent was accepted, and whether it was."""

    tree_size: int
    tree_depth: int
    accepted: int
    draft_s: float
    verify_s: float
    tested_conf: list[float] = field(default_factory=list)
    tested_hit: list[bool] = field(default_factory=list)
    batch: int = 1  # requests in the cycle's batched forwards (the times are the batch's, shared by all of them)
    lookup_size: int = 0  # tree nodes proposed by prompt lookup (alone or together with the head)
    lookup_accepted: int = 0  # accepted tokens among them
    head_forwards: int = 0  # draft-head forwards in draft_s: one per level fed, plus feeding last cycle's accepted tokens


@dataclass
class GenerationResult:
    tokens: list[int]
    cycles: list[CycleStats]
    prefill_s: float
    wall_s: float
    stop_reason: str  # "stop" (a stop id), "length" (max_new_tokens)

    @property
    def tau(self) -> float:
        """Tokens per target forward after prefill: mean of accepted + 1."""
        return sum(c.accepted + 1 for c in self.cycles) / max(len(self.cycles), 1)

    @property
    def tok_s(self) -> float:
        return len(self.tokens) / self.wall_s if self.wall_s > 0 else 0.0

    def stats(self) -> dict:
        return {
            "new_tokens": len(self.tokens),
            "tau": self.tau,
            "tok_s": self.tok_s,
            "wall_s": self.wall_s,
            "prefill_s": self.prefill_s,
            "stop_reason": self.stop_reason,
            "cycles": [asdict(c) for c in self.cycles],
        }


@dataclass
class BatchResult:
    """One generate_batch call: a result per prompt (in prompt order), the call's wall time, the most requests
    decoded at once, and the bytes of the KV caches it allocated."""

    results: list[GenerationResult]
    wall_s: float
    batch_size: int
    cache_bytes: int

    @property
    def new_tokens(self) -> int:
        return sum(len(r.tokens) for r in self.results)

    @property
    def tok_s(self) -> float:
        """Output tokens per second of the whole batch (throughput)."""
        return self.new_tokens / self.wall_s if self.wall_s > 0 else 0.0


class _Output:
    """Collects emitted tokens; knows when to stop."""

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


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def available_memory(device: torch.device) -> int:
    """Bytes free for new tensors on `device`: CUDA's free memory, or the kernel's MemAvailable on a CPU."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62  # unknown: refuse nothing


@dataclass
class _Request:
    """A request decoding in one batch row: its output, sampler and stats, and what its next cycle starts from."""

    index: int
    out: _Output
    generator: torch.Generator
    start: float
    prefill_s: float = 0.0
    cycles: list = field(default_factory=list)
    root: int = 0  # the newest emitted token, not yet in the target's cache
    feature: torch.Tensor | None = None  # [H] the head's predicted feature after the committed context
    pending: tuple | None = None  # (target features [m, H], pair tokens [m]) committed, not yet fed to the head
    rates: CopyRates | None = None  # acceptance of copied tokens per depth, when drafting with lookup


class Engine:
    """Decodes with `target` (a target.Target) and, for the EAGLE methods, a DraftHead.

    `drafter` replaces the config's head drafter with any callable TreeFeeder -> list[DraftTree] (one tree per batch
    row; tests use oracles that know the target's continuation); with lookup its trees are merged with the copies.
    """

    def __init__(
        self, target, head: DraftHead | None, config: DecodeConfig,
        drafter: Callable[[TreeFeeder], list[DraftTree]] | None = None, cost: CostModel | None = None,
    ):
        """cost: the cost model of an auto budget (default: this machine's, measured once and cached)."""
        config.validate(target.vocab_size)
        if config.method not in HEADLESS and head is None:
            raise EagleError(f"method {config.method!r} needs a draft head: give head=<dir> or head=random")
        if config.budget == "auto" and cost is None:
            cost = load_or_measure(target, head, config.top_k, 1 + config.tree_size())
        self.target, self.head, self.config, self.drafter, self.cost = target, head, config, drafter, cost
        self.pad_trees = config.pad_trees == "on" or (
            config.pad_trees == "auto" and target.compiled is not None and target.device.type == "cuda")
        self._budgets: dict[tuple[int, int], Budget] = {}  # per (batch, max nodes), built once from `cost`

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
        need = prompt_len + max_new_tokens - 1 + self.config.tree_budget()
        if need > ctx:
            raise EagleError(
                f"{which}tree budget of {self.config.tree_budget()} tokens does not fit: the cache holds {ctx} "
                f"positions and this request already needs {prompt_len + max_new_tokens}"
            )
        return need

    def cache_bytes(self, batch: int, max_len: int) -> int:
        """Memory of the target's and the head's KV caches for `batch` rows of `max_len` positions."""
        shape = self.target.kv_shape(batch)
        total = KVCache.bytes_needed(*shape, max_len, self.target.dtype)
        if self.config.method not in HEADLESS:
            total += KVCache.bytes_needed(1, *shape[1:], max_len + self.config.feed_budget(), self.target.dtype)
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
    ) -> BatchResult:
        """Generate for every prompt, at most batch_size (default min(len(prompts), max_batch_size)) at a time;
        stream(i, tokens) gets request i's tokens as they are accepted. Request i samples with seed + i, so its
        output is what generate(prompts[i], seed=seed + i) gives. Every input is checked before any work starts."""
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
        run = _BatchRun(self, prompts, max_new_tokens, sampling, set(stop_ids or ()), stream, seed, size, max_len)
        results = run.run()
        _sync(self.target.device)
        return BatchResult(results, time.perf_counter() - start, size, need)

    def _auto_budget(self, batch: int, max_nodes: int) -> Budget:
        """The auto budget's per-cycle chooser for this batch size, built once from the cost model."""
        if (batch, max_nodes) not in self._budgets:
            self._budgets[batch, max_nodes] = Budget(self.cost, batch, max_nodes, self.pad_trees)
        return self._budgets[batch, max_nodes]

    def _draft(self, feeder: TreeFeeder, config: DecodeConfig, copies: list[DraftTree] | None) -> list[DraftTree]:
        """One tree per row: the head's (or the custom drafter's), merged with the row's lookup tree `copies[b]`. An
        auto budget sees the copies' values while the head drafts and then cuts each merged tree to the number of
        nodes that maximises expected tokens per ms (levels paid: the head's; none for lookup alone)."""
        auto = self._auto_budget(feeder.root.batch, config.tree_size()) if config.budget == "auto" else None
        if self.drafter is not None:
            heads = self.drafter(feeder)
        elif config.method == "lookup":
            heads = [None] * feeder.root.batch
        elif config.method == "chain":
            heads = draft_chain(feeder, config.depth)
        elif config.method == "eagle1":
            heads = draft_static(feeder, config.paths())
        else:
            extra = None if auto is None or copies is None else _log_values(copies)
            heads = draft_dynamic(feeder, config.depth, config.top_k, config.total_tokens, config.expand_by, config.rerank,
                                  auto, extra)
        trees = heads
        if copies is not None and len(heads) == len(copies):
            trees = [merge_trees(([] if head is None else [head]) + [c], config.tree_size(), self.target.device)
                     for head, c in zip(heads, copies)]
            if auto is not None:  # the head has drafted: choose how many of the merged candidates to verify
                trees = _cut(trees, auto, 0 if config.method == "lookup" else 1 + feeder.levels)
        budget, largest = self.config.tree_budget(feeder.root.batch), max((len(t) for t in trees), default=0)
        if len(trees) != feeder.root.batch or largest > budget:
            raise EagleError(
                f"drafter returned {len(trees)} trees of up to {largest} nodes: expected one per batch row "
                f"({feeder.root.batch}) of at most the tree budget {budget}"
            )
        return trees


class _BatchRun:
    """The state of one generate_batch call: caches whose rows hold the decoding requests, and the queue."""

    def __init__(self, engine: Engine, prompts, max_new, sampling, stops, stream, seed, size: int, max_len: int):
        self.engine, self.target, self.head = engine, engine.target, engine.head
        self.prompts, self.max_new, self.sampling, self.stops, self.stream, self.seed = (
            prompts, max_new, sampling, stops, stream, seed
        )
        self.drafting = engine.config.method != "vanilla"
        self.uses_head = engine.config.method not in HEADLESS
        self.feature_layers = tuple(self.head.config.feature_layers) if self.uses_head else ()  # a fused head's inputs
        config = engine.config  # methods whose trees are always one chain, verified causally (_target_mask)
        self.chains = (config.method == "chain" and not config.lookup) or (
            config.method == "lookup" and config.lookup_conf.branches == 1)
        self.cache = self.target.new_cache(size, max_len)
        self.head_cache = self.head.new_cache(size, max_len + engine.config.feed_budget()) if self.uses_head else None
        self.rows: list[_Request | None] = [None] * size
        self.waiting = deque(range(len(prompts)))
        self.results: list[GenerationResult | None] = [None] * len(prompts)
        self.configs: dict[int, DecodeConfig] = {}
        self.carry_s = 0.0  # head time spent after the last verification, counted in the next cycle's draft time
        self.carry_forwards = 0  # ... and its head forwards

    def run(self) -> list[GenerationResult]:
        self._refill()
        while self.rows:
            if self.drafting:
                self._eagle_cycle()
            else:
                self._vanilla_cycle()
            self._refill()
            if self.uses_head:
                self._feed_pending()
        return self.results

    def _finish(self, request: _Request) -> None:
        out = request.out
        self.results[request.index] = GenerationResult(
            out.tokens, request.cycles, request.prefill_s, time.perf_counter() - request.start, out.reason
        )

    def _refill(self) -> None:
        """Admit waiting requests into free rows; then drop the rows left free."""
        for b in range(len(self.rows)):
            while self.rows[b] is None and self.waiting:
                self._admit(b, self.waiting.popleft())
        keep = [b for b, r in enumerate(self.rows) if r is not None]
        if keep and len(keep) < len(self.rows):
            self.cache.select_rows(keep)
            if self.uses_head:
                self.head_cache.select_rows(keep)
        self.rows = [self.rows[b] for b in keep]

    def _admit(self, b: int, i: int) -> None:
        """Prefill request i alone in row b: its first token, and for EAGLE the head's pass over its prompt."""
        target, device = self.target, self.target.device
        relay = None if self.stream is None else (lambda tokens, i=i: self.stream(i, tokens))
        generator = torch.Generator(device=device).manual_seed(self.seed + i)
        request = _Request(i, _Output(self.max_new, self.stops, relay), generator, time.perf_counter())
        if self.engine.config.uses_lookup:
            request.rates = CopyRates(self.engine.config.lookup_conf.num_tokens)
        prompt = self.prompts[i]
        n = len(prompt)
        self.cache.lengths[b] = 0
        view = self.cache.row(b)
        positions = torch.arange(n, device=device)[None]
        logits, feats = target.forward(torch.tensor([prompt], device=device), positions, view, last_only=True,
                                       feature_layers=self.feature_layers)
        self.cache.lengths[b] = n
        request.root = sample_token(logits[0, -1], self.sampling, generator)
        done = request.out.emit([request.root])
        if self.uses_head and not done:
            self.head_cache.lengths[b] = 0
            view = self.head_cache.row(b)
            seq = prompt + [request.root]
            shift = self.head.config.token_shift
            pairs = torch.tensor([seq[shift : shift + n]], device=device)
            predicted = self.head(feats, pairs, positions, view, causal_mask(0, n, feats.dtype, device))
            self.head_cache.lengths[b] = n
            request.feature = predicted[0, -1]
        _sync(device)
        request.prefill_s = time.perf_counter() - request.start
        if done:
            self._finish(request)
        else:
            self.rows[b] = request

    def _emit(self, b: int, request: _Request, tokens: list[int]) -> None:
        """Emit a row's tokens; a finished request gets its result and frees the row."""
        if request.out.emit(tokens):
            self._finish(request)
            self.rows[b] = None

    def _target_mask(self, lengths: list[int], allowed: torch.Tensor, causal: bool) -> torch.Tensor | None:
        """The target's additive mask over `allowed` (bool [T, S] or [B, T, S], see tree.additive_mask), or None
        when the new tokens attend plainly causally (`causal`) and every row is equally long: transformers then
        builds the causal mask itself, its own fastest path (scripts/bench_engine.py times bare forwards that way)."""
        if causal and min(lengths) == max(lengths):
            return None
        return additive_mask(allowed, lengths, self.target.dtype, self.target.device)

    def _vanilla_cycle(self) -> None:
        target, device, rows = self.target, self.target.device, list(self.rows)
        t0 = time.perf_counter()
        lengths = list(self.cache.lengths)
        ids = torch.tensor([[r.root] for r in rows], device=device)
        positions = torch.tensor(lengths, device=device)[:, None]
        mask = self._target_mask(lengths, torch.ones(1, 1, dtype=torch.bool), causal=True)
        logits, _ = target.forward(ids, positions, self.cache, mask, last_only=True)
        self.cache.advance(1)
        if self.sampling.greedy:
            tokens = argmax(logits[:, -1]).tolist()  # the cycle's one host sync
        else:
            tokens = [sample_token(logits[b, -1], self.sampling, r.generator) for b, r in enumerate(rows)]
        verify_s = time.perf_counter() - t0
        for b, (request, token) in enumerate(zip(rows, tokens)):
            request.cycles.append(CycleStats(0, 0, 0, 0.0, verify_s, batch=len(rows)))
            request.root = token
            self._emit(b, request, [token])

    def _config(self, batch: int) -> DecodeConfig:
        if batch not in self.configs:
            self.configs[batch] = self.engine.config.at_batch(batch)
        return self.configs[batch]

    def _eagle_cycle(self) -> None:
        target, device, rows = self.target, self.target.device, list(self.rows)
        t0 = time.perf_counter()
        lengths = list(self.cache.lengths)
        config = self._config(len(rows))
        if self.uses_head:
            features = torch.stack([r.feature for r in rows])
        else:  # headless methods have no predicted feature: [B, 0]
            features = torch.zeros(len(rows), 0, device=device)
        root = DraftRoot(features, [r.root for r in rows], lengths, [r.index for r in rows])
        feeder = TreeFeeder(self.head, self.head_cache, root)
        copies = None
        if config.uses_lookup:
            conf = config.lookup_conf
            copies = [merge_trees(lookup_chains(self.prompts[r.index] + r.out.tokens, conf, r.rates, device),
                                  conf.num_tokens * conf.branches, device) for r in rows]  # every chain, prefixes shared
        trees = self.engine._draft(feeder, config, copies)
        feeder.reset()
        _sync(device)
        t1 = time.perf_counter()

        largest = max(len(t) for t in trees)
        width = padded_width(largest, config.tree_size()) if self.engine.pad_trees else largest
        batch = _verification_input(trees, root, device, width)
        causal = self.chains and width == min(len(t) for t in trees)  # no padding slots: a chain attends causally
        mask = self._target_mask(lengths, batch.allowed, causal=causal)
        logits, tree_feats = target.forward(batch.ids, batch.positions, self.cache, mask,
                                            feature_layers=self.feature_layers)
        if self.sampling.greedy:
            outcomes, host_tokens, host_probs = _greedy_outcomes(batch, logits)
        else:  # the exact per-tree sampler (tests/test_engine_sampling.py enumerates its draws)
            outcomes = [
                verify_sampling(tree, target_probs(logits[b, : len(tree) + 1], self.sampling), request.generator)
                for b, (request, tree) in enumerate(zip(rows, trees))
            ]
            _, host_tokens, host_probs = _host_rows(batch, [])
        kept = [[0] + [i + 1 for i in acc.path] for acc in outcomes]  # flattened indices committed per row
        self.cache.keep_rows(list(range(len(rows))), lengths, kept)
        if self.uses_head:
            width = max(map(len, kept))
            index = torch.tensor([k + [k[-1]] * (width - len(k)) for k in kept], device=device)
            feats = tree_feats.gather(1, index[:, :, None].expand(-1, -1, tree_feats.shape[-1]))  # [B, width, H or k*H]
            shift = self.head.config.token_shift
        for b, (request, tree, acc) in enumerate(zip(rows, trees, outcomes)):
            if self.uses_head:
                seq = [request.root] + [host_tokens[b][i] for i in acc.path] + [acc.bonus]
                request.pending = (feats[b, : len(kept[b])], seq[shift : shift + len(kept[b])])
            if request.rates is not None and tree.copied is not None:
                request.rates.update(tree, acc.tested, acc.path)
            request.root = acc.bonus
        _sync(device)
        draft_s, verify_s = self.carry_s + t1 - t0, time.perf_counter() - t1
        head_forwards = self.carry_forwards + feeder.levels
        self.carry_s, self.carry_forwards = 0.0, 0
        for b, (request, tree, acc) in enumerate(zip(rows, trees, outcomes)):
            probs, on_path, tokens = host_probs[b], set(acc.path), host_tokens[b]
            copied = [] if tree.copied is None else tree.copied.tolist()
            request.cycles.append(
                CycleStats(
                    len(tree), tree.depth, len(acc.path), draft_s, verify_s,
                    [probs[i] for i in acc.tested], [i in on_path for i in acc.tested], len(rows),
                    sum(copied), sum(copied[i] for i in acc.path) if copied else 0, head_forwards,
                )
            )
            self._emit(b, request, [tokens[i] for i in acc.path] + [acc.bonus])

    def _feed_pending(self) -> None:
        """One batched head forward over every row's newly committed (feature, token) pairs; rows admitted since
        the last cycle have none and ride along as masked padding."""
        rows, device = self.rows, self.target.device
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
        lengths = list(self.head_cache.lengths)
        positions = torch.tensor(lengths, device=device)[:, None] + torch.arange(width, device=device)
        mask = causal_mask(lengths, width, feats.dtype, device)
        predicted = self.head(feats, tokens, positions, self.head_cache, mask)
        self.head_cache.advance(counts)
        for b, (r, m) in enumerate(zip(rows, counts)):
            if m:
                r.feature, r.pending = predicted[b, m - 1], None
        _sync(device)
        self.carry_s, self.carry_forwards = time.perf_counter() - t0, 1


def _log_values(trees: list[DraftTree]) -> torch.Tensor:
    """[B, max N] path log-values of each row's tree (EAGLE-2's values, -inf padding), on the host."""
    width = max((len(t) for t in trees), default=0)
    rows = [path_values(t.parents.tolist(), t.probs.tolist()) + [0.0] * (width - len(t)) for t in trees]
    return torch.tensor(rows, dtype=torch.float64).reshape(len(trees), width).log()


def _cut(trees: list[DraftTree], auto: Budget, levels: int) -> list[DraftTree]:
    """Every row's tree cut to the best n nodes by path value, n chosen by the auto budget over the whole batch."""
    if not any(len(t) for t in trees):
        return trees
    n = auto.nodes(_log_values(trees), levels)
    return [merge_trees([t], n, t.tokens.device) if len(t) > n else t for t in trees]


@dataclass
class _TreeBatch:
    """A cycle's trees padded to [B, N] on the device and the target's verification input built from them."""

    tokens: torch.Tensor  # [B, N]; padding slots hold the root token
    parents: torch.Tensor  # [B, N]; padding slots are children of the root
    sizes: torch.Tensor  # [B] real nodes per row
    ids: torch.Tensor  # [B, 1 + N] root then nodes
    positions: torch.Tensor  # [B, 1 + N]
    allowed: torch.Tensor  # bool [B, 1 + N, 1 + N] tree attention (ancestors and self)
    probs: torch.Tensor  # [B, N] draft probabilities (padding: 0)


def _verification_input(trees: list[DraftTree], root: DraftRoot, device, width: int) -> _TreeBatch:
    """Each row's [root, tree...] padded to `width` nodes (>= the largest tree). A padding slot sits at the root's
    position and sees only the root and itself. Built-in drafters give every row the same size, so without
    padding this is one stack per field."""
    b, sizes = len(trees), [len(t) for t in trees]
    n = width
    roots = torch.tensor(root.tokens, dtype=torch.long, device=device)[:, None]
    if min(sizes) == n:
        stack = lambda field: torch.stack([getattr(t, field).to(device) for t in trees])  # noqa: E731
        tokens, parents, depths, probs = stack("tokens"), stack("parents"), stack("depths"), stack("probs").float()
    else:
        tokens = roots.repeat(1, n)
        parents = torch.full((b, n), -1, dtype=torch.long, device=device)
        depths = torch.zeros(b, n, dtype=torch.long, device=device)
        probs = torch.zeros(b, n, device=device)
        for i, t in enumerate(trees):
            k = len(t)
            tokens[i, :k], parents[i, :k], depths[i, :k], probs[i, :k] = t.tokens, t.parents, t.depths, t.probs
    ids = torch.cat([roots, tokens], 1)
    bases = torch.tensor(root.bases, dtype=torch.long, device=device)[:, None]
    positions = bases + torch.cat([depths.new_zeros(b, 1), depths], 1)
    return _TreeBatch(tokens, parents, torch.tensor(sizes, device=device), ids, positions, ancestor_masks(parents),
                      probs)


def _host_rows(batch: _TreeBatch, first: list[torch.Tensor]) -> tuple[list[list[float]], list[list[int]], list[list[float]]]:
    """One device-to-host copy of `first` (tensors [B, *]) and the trees' tokens and probabilities: (the rows of
    `first` concatenated, tokens [B][N], probs [B][N]); float64 holds every token id exactly."""
    n = batch.tokens.shape[1]
    host = torch.cat([x.double() for x in first] + [batch.tokens.double(), batch.probs.double()], 1).tolist()
    m = len(host[0]) - 2 * n
    return [r[:m] for r in host], [[int(x) for x in r[m : m + n]] for r in host], [r[m + n :] for r in host]


def _greedy_outcomes(batch: _TreeBatch, logits: torch.Tensor):
    """Batched greedy acceptance (verify.verify_greedy) and the trees, copied to the host in one transfer: one
    Acceptance per row (path and tested node indices ascending = root-to-leaf and visiting order), tokens, probs."""
    g = verify_greedy(batch.tokens, batch.parents, batch.sizes, batch.allowed, logits)
    n = batch.tokens.shape[1]
    head, tokens, probs = _host_rows(batch, [g.bonus[:, None], g.on_path, g.tested])
    outcomes = [
        Acceptance([i for i in range(n) if row[1 + i]], int(row[0]), [i for i in range(n) if row[1 + n + i]])
        for row in head
    ]
    return outcomes, tokens, probs
