"""The measured cost model behind `infer.total_tokens=auto` / `infer.depth=auto` (InferConf.budget = "auto"), and the
per-cycle choice it makes. Measuring one is eagle_infer/decoding/cost_measure.py's job.

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
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..trees.merge import cut
from ..platform import cache_root
from ..trees.tree import TreeBatch, padded_width

SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128)  # verified tokens per forward at which the forward is timed
# Part of every cache key: raise it when a change to the engine changes what a forward or a draft level costs (2: the
# lean drafting step; 3: the head's step compiled beside a target compiled on a GPU; 4: trees drafted, merged and
# verified as device batches, one KV tensor per cache), so cost models measured before are measured again rather
# than reused.
COST_REVISION = 4


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
        tmp = path.with_suffix(f".{os.getpid()}.partial")  # processes measuring at once each write whole
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


@dataclass
class Budget:
    """Per-cycle choices of an auto budget for `batch` rows: how many candidates to verify, whether to draft on.
    Built once per (batch, max_nodes): verify_ms[n - 1] is the forward of batch x (1 + n) tokens, or with
    `padded` trees of batch x (1 + tree.padded_width(n)) tokens (so n stops only at the top of a bucket, where the
    padding it would carry costs the same as real nodes). The cycle costs of every n are host arithmetic, kept on
    the device per (levels, candidates[, frontier]) so a decision is a few tensor ops and one host read."""

    cost: CostModel
    batch: int
    max_nodes: int
    padded: bool = False
    verify_ms: list[float] = field(init=False)

    def __post_init__(self):
        width = (lambda n: padded_width(n, self.max_nodes)) if self.padded else (lambda n: n)
        self.verify_ms = [self.cost.forward(self.batch * (1 + width(n))) for n in range(1, self.max_nodes + 1)]
        self._tables: dict[tuple, torch.Tensor] = {}

    def _table(self, levels: int, m: int, grown: int, device) -> torch.Tensor:
        """float64 [m] on `device`: ms of a cycle verifying n = 1..m nodes with `levels` draft levels paid; with
        grown > 0, of the cycle after one more level whose `grown` children join the n (at most max_nodes)."""
        key = (levels, m, grown, str(device))
        if key not in self._tables:
            v, level = self.verify_ms, self.cost.level_ms
            ms = [level * levels + v[n - 1] for n in range(1, m + 1)]
            if grown:
                ms = [now + (level + v[min(n + grown, self.max_nodes) - 1] - v[n - 1]) for n, now in enumerate(ms, 1)]
            self._tables[key] = torch.tensor(ms, dtype=torch.float64, device=device)
        return self._tables[key]

    def _best(self, values: torch.Tensor, levels: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """-> (expected tokens per cycle over the batch with n = 1, 2, ... [m], the best ratio tokens / ms [1], its
        index n - 1 [1]: the first best, fewer nodes on a tie), on the values' device (one-element tensors index
        without a host read, where a 0-dim index would be read as a Python int)."""
        m = min(values.shape[-1], self.max_nodes)
        probs = values.double().exp().topk(m, dim=-1).values  # each row's m best, descending
        tokens = self.batch + probs.sum(0).cumsum(0)  # expected tokens with n = 1, 2, ...
        ratio, best = (tokens / self._table(levels, m, 0, values.device)).max(0, keepdim=True)
        return tokens, ratio, best

    def nodes(self, values: torch.Tensor, levels: int) -> int:
        """How many nodes per row to verify (one host read)."""
        return int(self._best(values, levels)[2]) + 1

    def decision(self, values: torch.Tensor, frontier: torch.Tensor, levels: int,
                 mass: torch.Tensor | float = 1.0) -> torch.Tensor:
        """`decide`'s answer on the device, tensor ops only: LongTensor [1], 2 x (n - 1) + (1 if drafting on)."""
        tokens, ratio, best = self._best(values, levels)
        gain = frontier.double().exp().sum() * mass  # (a float32 mass is promoted to float64 inside the product)
        grown_ms = self._table(levels, tokens.shape[0], frontier.shape[-1], values.device)[best]
        return best * 2 + ((tokens[best] + gain) / grown_ms > ratio)

    def decide(self, values: torch.Tensor, frontier: torch.Tensor, levels: int, mass: torch.Tensor | float = 1.0
               ) -> tuple[bool, int]:
        """Whether one more level pays, and the nodes per row to verify if drafting stops now (one host read for
        both). One more level's children are expected to add `mass` x the frontier's [B, F] path probabilities
        (mass: the mean probability the head gave its top-k children at the last level, at most 1) and to join
        the verified nodes, at the cost of one more level and a larger verification forward."""
        code = int(self.decision(values, frontier, levels, mass))  # the one host read
        return bool(code % 2), code // 2 + 1


def cache_path(key: dict) -> Path:
    """Where the cost model measured under `key` is cached (cost_measure.load_or_measure)."""
    name = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_root() / "cost-models" / f"{key['model']}-{name}.json"


def cut_trees(trees: TreeBatch, budget: Budget, levels: int) -> TreeBatch:
    """Every row's tree cut to the best n nodes by path value, n chosen by `budget` over the whole batch with
    `levels` draft levels paid (one host read)."""
    if trees.depth == 0:  # no row holds a node
        return trees
    values = trees.values()
    return cut(trees, budget.nodes(values.log(), levels), values)
