"""The one decoding engine: prefill, then cycles of draft -> verify -> accept -> compact.

Methods: `vanilla` (one target forward per token, the baseline), `chain` (EAGLE without a tree), `eagle1` (static
tree) and `eagle2` (dynamic tree). All share the target adapter, the caches and the samplers, so greedy output is
the target's own greedy output and sampled output is distributed as the target's.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch

from .draft_head import DraftHead
from .drafting import DraftRoot, TreeFeeder, draft_chain, draft_dynamic, draft_static
from .errors import EagleError
from .tree import DEFAULT_STATIC_PATHS, DraftTree, additive_mask, causal_mask, check_paths
from .verify import SamplingParams, sample_token, target_probs, verify_greedy, verify_sampling

METHODS = ("vanilla", "chain", "eagle1", "eagle2")
EXPAND_BY = ("value", "confidence")


@dataclass
class DecodeConfig:
    """How to draft. depth: longest draft path; top_k: EAGLE-2 expansion width; total_tokens: EAGLE-2 draft budget
    (root excluded); static_paths: EAGLE-1 tree (None = DEFAULT_STATIC_PATHS)."""

    method: str = "eagle2"
    depth: int = 6
    top_k: int = 8
    total_tokens: int = 32
    static_paths: list | None = None
    expand_by: str = "value"
    rerank: bool = True

    def validate(self, vocab_size: int) -> None:
        if self.method not in METHODS:
            raise EagleError(f"unknown method {self.method!r}: expected one of {', '.join(METHODS)}")
        if self.depth < 1:
            raise EagleError(f"depth {self.depth} is invalid: expected >= 1")
        if not 1 <= self.top_k <= vocab_size:
            raise EagleError(f"top_k {self.top_k} is invalid: expected 1 <= top_k <= vocabulary size {vocab_size}")
        if self.total_tokens < 1:
            raise EagleError(f"total_tokens {self.total_tokens} is invalid: expected >= 1")
        if self.expand_by not in EXPAND_BY:
            raise EagleError(f"unknown expand_by {self.expand_by!r}: expected one of {', '.join(EXPAND_BY)}")
        if self.method == "eagle1":
            widest = max(max(p) for p in check_paths(self.paths()))
            if widest >= vocab_size:
                raise EagleError(f"static tree rank {widest} is invalid: expected ranks below the vocabulary size {vocab_size}")

    def paths(self):
        return DEFAULT_STATIC_PATHS if self.static_paths is None else self.static_paths

    def tree_budget(self) -> int:
        """Most draft nodes one cycle can verify."""
        return {"vanilla": 0, "chain": self.depth, "eagle1": len(self.paths()), "eagle2": self.total_tokens}[self.method]

    def feed_budget(self) -> int:
        """Most tree nodes one cycle feeds to the draft head (its cache needs that much room past the context)."""
        return {"vanilla": 0, "chain": self.depth, "eagle1": len(self.paths()), "eagle2": self.top_k * (self.depth - 1)}[
            self.method
        ]


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


class Engine:
    """Decodes with `target` (a target.Target) and, for the EAGLE methods, a DraftHead.

    `drafter` replaces the config's drafter with any callable TreeFeeder -> DraftTree (tests use oracles that know
    the target's continuation; a prompt-lookup drafter would fit the same slot).
    """

    def __init__(
        self, target, head: DraftHead | None, config: DecodeConfig, drafter: Callable[[TreeFeeder], DraftTree] | None = None
    ):
        config.validate(target.vocab_size)
        if config.method != "vanilla" and head is None:
            raise EagleError(f"method {config.method!r} needs a draft head: give head=<dir> or head=random")
        self.target, self.head, self.config, self.drafter = target, head, config, drafter

    def _check_room(self, prompt_len: int, max_new_tokens: int) -> int:
        """The cache length this request needs; a clear error when the context cannot hold it."""
        ctx = self.target.max_context
        if prompt_len < 1:
            raise EagleError("the prompt is empty: expected at least one token")
        if max_new_tokens < 1:
            raise EagleError(f"max_new_tokens {max_new_tokens} is invalid: expected >= 1")
        if prompt_len >= ctx:
            raise EagleError(f"prompt of {prompt_len} tokens is longer than the model's context of {ctx} tokens")
        if prompt_len + max_new_tokens > ctx:
            raise EagleError(
                f"prompt of {prompt_len} tokens + max_new_tokens {max_new_tokens} exceeds the model's context of {ctx} tokens"
            )
        # At a cycle start the cache holds every emitted token but the newest (the root, at most max_new - 1 of
        # them after the prompt), and the cycle writes the root and its tree after them.
        need = prompt_len + max_new_tokens - 1 + self.config.tree_budget()
        if need > ctx:
            raise EagleError(
                f"tree budget of {self.config.tree_budget()} tokens does not fit: the cache holds {ctx} positions and "
                f"this request already needs {prompt_len + max_new_tokens}"
            )
        return need

    @torch.inference_mode()
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
        target, device = self.target, self.target.device
        max_len = self._check_room(len(prompt_ids), max_new_tokens)
        generator = torch.Generator(device=device).manual_seed(seed)
        out = _Output(max_new_tokens, set(stop_ids or ()), stream)
        start = time.perf_counter()
        cache = target.new_cache(1, max_len)
        n = len(prompt_ids)
        ids = torch.tensor([prompt_ids], dtype=torch.long, device=device)
        logits, feats = target.forward(ids, torch.arange(n, device=device)[None], cache, last_only=True)
        cache.advance(n)
        token = sample_token(logits[0, -1], sampling, generator)
        _sync(device)
        prefill_s = time.perf_counter() - start
        done = out.emit([token])
        if self.config.method == "vanilla":
            cycles = [] if done else self._vanilla(cache, token, sampling, generator, out)
        else:
            cycles = [] if done else self._eagle(cache, feats[0], prompt_ids + [token], sampling, generator, out)
        _sync(device)
        return GenerationResult(out.tokens, cycles, prefill_s, time.perf_counter() - start, out.reason)

    def _vanilla(self, cache, token, sampling, generator, out) -> list[CycleStats]:
        target, device, cycles = self.target, self.target.device, []
        while True:
            t0 = time.perf_counter()
            pos = torch.tensor([[cache.length]], device=device)
            logits, _ = target.forward(torch.tensor([[token]], device=device), pos, cache, last_only=True)
            cache.advance(1)
            token = sample_token(logits[0, -1], sampling, generator)
            cycles.append(CycleStats(0, 0, 0, 0.0, time.perf_counter() - t0))
            if out.emit([token]):
                return cycles

    def _draft(self, feeder: TreeFeeder) -> DraftTree:
        c = self.config
        if self.drafter is not None:
            return self.drafter(feeder)
        if c.method == "chain":
            return draft_chain(feeder, c.depth)
        if c.method == "eagle1":
            return draft_static(feeder, c.paths())
        return draft_dynamic(feeder, c.depth, c.top_k, c.total_tokens, c.expand_by, c.rerank)

    def _eagle(self, cache, feats, seq, sampling, generator, out) -> list[CycleStats]:
        """feats: [m, H] target features of the newest m committed positions; seq: their tokens + the next token."""
        target, head, device = self.target, self.head, self.target.device
        head_cache = head.new_cache(1, cache.max_len + self.config.feed_budget())
        shift, cycles = head.config.token_shift, []
        while True:
            t0 = time.perf_counter()
            m, n, root = feats.shape[0], cache.length, seq[-1]
            pair_tokens = torch.tensor([seq[shift : shift + m]], device=device)
            positions = torch.arange(head_cache.length, head_cache.length + m, device=device)[None]
            mask = causal_mask(head_cache.length, m, feats.dtype, device)
            predicted = head(feats[None], pair_tokens, positions, head_cache, mask)[0, -1]
            head_cache.advance(m)
            feeder = TreeFeeder(head, head_cache, DraftRoot(predicted, root, n))
            tree = self._draft(feeder)
            feeder.reset()
            _sync(device)
            t1 = time.perf_counter()

            ids = torch.cat([torch.tensor([root], device=device), tree.tokens])[None]
            positions = (n + torch.cat([torch.zeros(1, dtype=torch.long, device=device), tree.depths]))[None]
            mask = additive_mask(tree.ancestor_mask(), n, target.dtype, device)
            logits, tree_feats = target.forward(ids, positions, cache, mask)
            if sampling.greedy:
                acc = verify_greedy(tree, logits[0])
            else:
                acc = verify_sampling(tree, target_probs(logits[0], sampling), generator)
            keep = torch.tensor([0] + [i + 1 for i in acc.path], device=device)
            cache.keep(n, keep)
            _sync(device)
            accepted = tree.tokens[acc.path].tolist() if acc.path else []
            probs = tree.probs.tolist()
            on_path = set(acc.path)
            cycles.append(
                CycleStats(
                    len(tree), tree.depth, len(accepted), t1 - t0, time.perf_counter() - t1,
                    [probs[i] for i in acc.tested], [i in on_path for i in acc.tested],
                )
            )
            if out.emit(accepted + [acc.bonus]):
                return cycles
            feats = tree_feats[0, keep]
            seq = [root] + accepted + [acc.bonus]
