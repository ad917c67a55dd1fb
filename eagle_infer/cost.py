"""The measured cost model behind `infer.total_tokens=auto` / `infer.depth=auto` (DecodeConfig.budget = "auto").

A CostModel holds what one cycle costs on the running machine: the target's forward ms per number of verified tokens
(measured at a few sizes, interpolated between them) and the draft head's ms per tree level (one head forward of
top_k nodes plus its draft-vocabulary logits and top-k). It is measured once per machine, model, dtype and head
shape and cached as JSON under `cache_root()/cost-models/`; the file records its key (CPU model, flags and threads,
or the GPU's name; torch version; the engine's cost revision; model; dtype; top_k; head layers and draft vocabulary),
and a file whose key differs from the running one's is never used.

Per cycle, `Budget` picks how many of the drafted candidates to verify: EAGLE-2's path value of a candidate (the
product of the draft probabilities along its path) estimates the probability that the target accepts it, so verifying
the n best candidates of B rows is expected to emit B + (sum of their path probabilities) tokens, at a cost of the
draft levels plus a forward of B (1 + n) tokens; n maximises the ratio. Drafting stops early when one more level is
expected to lower that ratio (its children add the frontier's path probabilities times the mass the head gave its
top-k children at the last level, and cost a level plus a larger forward).
"""
from __future__ import annotations

import hashlib
import json
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128)  # verified tokens per forward at which the forward is timed
# Part of every cache key: raise it when a change to the engine changes what a forward or a draft level costs (2: the
# lean drafting step; 3: the head's step compiled beside a target compiled on a GPU), so cost models measured before
# are measured again rather than reused.
COST_REVISION = 3


def machine_key(device: torch.device) -> dict:
    """What makes timings comparable: the GPU's name, or the CPU's model, flags and thread count; torch version."""
    if device.type == "cuda":
        where = {"gpu": torch.cuda.get_device_name(device)}
    else:
        model, flags = platform.processor() or platform.machine(), ""
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name") and ":" in line:
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and ":" in line:
                    flags = " ".join(sorted(line.split(":", 1)[1].split()))
        except OSError:
            pass
        where = {"cpu": model, "flags_sha1": hashlib.sha1(flags.encode()).hexdigest()[:12],
                 "threads": torch.get_num_threads()}
    return {**where, "torch": torch.__version__.split("+")[0]}


@dataclass
class CostModel:
    """forward_ms[i]: ms of one target forward of sizes[i] tokens (batch rows x tokens per row, over a cache of
    `context` tokens); level_ms: ms of one draft level of top_k nodes. `key` says where it was measured."""

    key: dict
    sizes: list[int]
    forward_ms: list[float]
    level_ms: float
    context: int = 256

    def forward(self, tokens: int) -> float:
        """ms of a forward of `tokens` tokens: linear between measured sizes, extended linearly past the last."""
        s, f = self.sizes, self.forward_ms
        if tokens <= s[0]:
            return f[0]
        for i in range(1, len(s)):
            if tokens <= s[i] or i == len(s) - 1:
                return f[i - 1] + (f[i] - f[i - 1]) * (tokens - s[i - 1]) / (s[i] - s[i - 1])
        return f[-1]

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".partial")
        tmp.write_text(json.dumps(asdict(self), indent=1) + "\n")
        tmp.rename(path)

    @classmethod
    def load(cls, path: Path, key: dict) -> "CostModel | None":
        """The model stored at `path` if it was measured where `key` says (another machine's file: None)."""
        try:
            raw = json.loads(path.read_text())
            model = cls(**raw)
        except (OSError, ValueError, TypeError):
            return None
        return model if model.key == key else None


def cache_path(key: dict) -> Path:
    from .target import cache_root

    name = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_root() / "cost-models" / f"{key['model']}-{name}.json"


def median_ms(fn, reps: int, device) -> float:
    """Median ms of fn() over reps calls after one warm-up call (CUDA synchronised around each)."""
    times = []
    for i in range(reps + 1):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i:
            times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


@torch.inference_mode()
def measure(target, head, top_k: int, max_tokens: int, context: int = 256, reps: int = 3) -> CostModel:
    """Time target forwards of 1.. max_tokens tokens (the SIZES up to the first one >= max_tokens) over a `context`
    token cache, and one draft level of top_k nodes (head forward, draft logits, top-k; 0 ms without a head)."""
    from .drafting import DraftRoot, TreeFeeder
    from .tree import causal_mask

    device = target.device
    context = min(context, max(1, target.max_context - max_tokens - 1))
    sizes = [s for s in SIZES if s < max_tokens] + [max(max_tokens, 2)]
    cache = target.new_cache(1, context + sizes[-1])
    _, feats = target.forward(torch.randint(0, target.vocab_size, (1, context), device=device),
                              torch.arange(context, device=device)[None], cache)
    cache.advance(context)
    forward_ms = []
    for t in sizes:
        ids = torch.randint(0, target.vocab_size, (1, t), device=device)
        positions = (context + torch.arange(t, device=device))[None]
        mask = causal_mask(context, t, target.dtype, device)
        forward_ms.append(median_ms(lambda: target.forward(ids, positions, cache, mask, last_only=t == 1), reps, device))
    if head is None:  # prompt lookup drafts without a head: nothing to time per level
        return CostModel({}, sizes, forward_ms, 0.0, context)
    head_cache = head.new_cache(1, context + top_k + 1)
    head_cache.lengths[0] = context
    root = DraftRoot(feats[:, -1], [0], [context], [0])
    parents = torch.full((1, top_k), -1, dtype=torch.long, device=device)
    tokens = torch.arange(top_k, device=device)[None]

    def level():
        feeder = TreeFeeder(head, head_cache, root)
        feeder.top(feeder.feed(parents, tokens, 1), top_k)
        feeder.reset()

    level_ms = median_ms(level, reps * 2, device)
    return CostModel({}, sizes, forward_ms, level_ms, context)


def load_or_measure(target, head, top_k: int, max_tokens: int) -> CostModel:
    """The cached cost model of this machine, model, dtype, weight packing, compiling and head shape, measured (and
    cached) when there is none."""
    hc = None if head is None else head.config
    shape = "none" if hc is None else (
        f"{hc.block} block, {hc.layers} layer(s), draft vocabulary {hc.draft_vocab_size or hc.vocab_size}")
    key = {**machine_key(target.device), "revision": COST_REVISION, "model": target.name,
           "dtype": str(target.dtype).removeprefix("torch."), "top_k": top_k, "head": shape}
    if target.packed:  # packed weights change every cost (unpacked keys stay as they were)
        key["packed"] = True
    if target.compiled is not None:  # so does a compiled forward
        key["compiled"] = True
    path = cache_path(key)
    model = CostModel.load(path, key)
    if model is None or model.sizes[-1] < max_tokens:
        model = measure(target, head, top_k, max_tokens)
        model.key = key
        model.save(path)
    return model


@dataclass
class Budget:
    """Per-cycle choices of an auto budget for `batch` rows: how many candidates to verify, whether to draft on.
    Built once per (batch, max_nodes): verify_ms[n - 1] is the forward of batch x (1 + n) tokens, or with
    `padded` trees of batch x (1 + tree.padded_width(n)) tokens (so n stops only at the top of a bucket, where the
    padding it would carry costs the same as real nodes)."""

    cost: CostModel
    batch: int
    max_nodes: int
    padded: bool = False
    verify_ms: torch.Tensor = field(init=False)

    def __post_init__(self):
        from .tree import padded_width

        width = (lambda n: padded_width(n, self.max_nodes)) if self.padded else (lambda n: n)
        self.verify_ms = torch.tensor(
            [self.cost.forward(self.batch * (1 + width(n))) for n in range(1, self.max_nodes + 1)], dtype=torch.float64)

    def plan(self, values: torch.Tensor, levels: int) -> tuple[int, float, float]:
        """values: [B, M] path log-values of every candidate so far. -> (n nodes per row, expected tokens per
        cycle over the batch, cycle ms) of the best n <= max_nodes, with `levels` draft levels paid."""
        probs = values.double().exp().sort(dim=-1, descending=True).values[:, : self.max_nodes]
        tokens = self.batch + probs.sum(0).cumsum(0)  # expected tokens with n = 1, 2, ...
        ms = self.cost.level_ms * levels + self.verify_ms[: tokens.numel()].to(tokens.device)
        best = int((tokens / ms).argmax())  # the first best: fewer nodes on a tie
        n, expected, cycle_ms = torch.stack([torch.tensor(best + 1.0, dtype=torch.float64, device=tokens.device),
                                             tokens[best], ms[best]]).tolist()
        return int(n), expected, cycle_ms

    def nodes(self, values: torch.Tensor, levels: int) -> int:
        return self.plan(values, levels)[0]

    def draft_on(self, values: torch.Tensor, frontier: torch.Tensor, levels: int, mass: float = 1.0) -> bool:
        """Whether one more level pays: its children are expected to add `mass` x the frontier's path probabilities
        (mass: the mean probability the head gave its top-k children at the last level, at most 1) and to join
        the verified nodes, at the cost of one more level and a larger verification forward."""
        n, tokens, ms = self.plan(values, levels)
        gain = mass * float(frontier.double().exp().sum())
        grown = min(n + frontier.shape[-1], self.max_nodes)
        more_ms = self.cost.level_ms + float(self.verify_ms[grown - 1] - self.verify_ms[n - 1])
        return (tokens + gain) / (ms + more_ms) > tokens / ms
