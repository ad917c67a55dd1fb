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
draft levels plus a forward of B (1 + n) tokens; n maximises the ratio. It also judges the depth: one more level pays
when its children (the frontier's path probabilities times the mass the head gave its top-k children at the last
level) are worth a level plus a larger forward; the last level did not pay when the candidates without it, a level
cheaper, are worth more tokens per ms. The choice is made on the device from a cycle's candidates and read with that
cycle's one host copy, and the next cycle drafts and verifies by it (`Plan`): drafting never waits for the device.
A batch call's first cycle, with nothing decided yet, drafts and verifies up to the method's caps.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..platform import cache_root
from ..trees.tree import padded_width

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
    the device per (levels, candidates[, frontier]) so a decision is a few tensor ops and no host read."""

    cost: CostModel
    batch: int
    max_nodes: int
    padded: bool = False
    verify_ms: list[float] = field(init=False)

    def __post_init__(self):
        width = (lambda n: padded_width(n, self.max_nodes)) if self.padded else (lambda n: n)
        self.verify_ms = [self.cost.forward(self.batch * (1 + width(n))) for n in range(1, self.max_nodes + 1)]
        self._tables: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    def _table(self, levels: int, grown: int, device, sets: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """float64 on `device`, ms of a cycle verifying n = 1..width nodes (width <= max_nodes + 1): [sets, width]
        with `levels` draft levels paid and (second row) with one fewer; and [width] after one more level whose
        `grown` children join the n (at most max_nodes). Built once per key, so a decision slices nothing."""
        key = (levels, grown, str(device), sets, width)
        if key not in self._tables:
            v, level = self.verify_ms + [self.cost.forward(self.batch * (2 + self.max_nodes))], self.cost.level_ms
            now = [level * levels + x for x in v][:width]
            grow = [t + level + v[min(n + grown, self.max_nodes) - 1] - v[n - 1] for n, t in enumerate(now, 1)]
            rows = torch.tensor([now, [t - level for t in now], grow], dtype=torch.float64, device=device)
            self._tables[key] = (rows[:sets], rows[2])
        return self._tables[key]

    def next_plan(self, values: torch.Tensor, levels: int, frontier: torch.Tensor | None = None,
                  mass: torch.Tensor | float = 1.0, older: torch.Tensor | None = None, ahead: bool = True
                  ) -> torch.Tensor:
        """What the next cycle drafts and verifies, decided on the device from this cycle's candidates (tensor ops
        only, about 40 of them; the cycle's one host copy reads it): LongTensor [2] = (levels, nodes per row), see `Plan`.

        values [B, C]: every candidate's path log-value (the head's and any other drafter's), drafted in `levels`
        levels (the head's trees' depth; 0 without a head). Nodes: the n whose best candidates maximise expected
        tokens per ms, or the cap when one more candidate, as likely as the least likely one, would still raise it
        (every candidate paid: the next cycle may have more). Levels go up by one when one more level pays:
        frontier [B, F] are the path log-values of the nodes it would expand, whose children are expected to add
        `mass` x their probabilities (mass: the mean probability the head gave its top-k children at the last level,
        at most 1) and to join the verified nodes, at the cost of a level and a larger verification forward. They go
        down by one when the last level did not pay: older [B, C'] are the candidates without it, whose best tokens
        per ms with a level fewer beat these. Ties keep fewer nodes and the same depth. Not `ahead` (a choice for the
        cycle that drafted these candidates): nodes are the best n of them, never the cap."""
        c, m = values.shape[-1], min(values.shape[-1], self.max_nodes)
        if older is not None and levels > 1:  # [S, B, C]: these candidates, and those without the last level
            sets = torch.stack([values, torch.nn.functional.pad(older, (0, c - older.shape[-1]), value=-torch.inf)])
        else:
            sets = values[None]
        s = sets.shape[0]
        probs = sets.double().exp().topk(m, dim=-1).values.sum(1)  # [S, m] the rows' m best, descending, summed
        if ahead:  # one more candidate, as likely as the least likely one
            first = probs[:1]
            least = first.masked_fill(first == 0, torch.inf).amin(1, keepdim=True).nan_to_num(posinf=0.0)
            probs = torch.cat([probs, least.expand(s, 1)], 1)
        tokens = probs.cumsum(1) + self.batch  # [S, m (+ 1)] expected tokens with n = 1, 2, ...
        now, grow = self._table(levels, 0 if frontier is None else frontier.shape[-1], values.device, s,
                                tokens.shape[1])
        curve = tokens / now  # tokens per ms
        ratio, best = (curve[:, :m] if ahead else curve).max(1, keepdim=True)  # [S, 1]: the best over the candidates
        top, n = ratio[0], best[0]
        nodes = n + 1
        if ahead:  # one more would raise it: the cap
            nodes = torch.where(curve[0, m:] > top, self.max_nodes, nodes)
        step = None
        if frontier is not None:
            gain = frontier.double().exp().sum() * mass  # (a float32 mass is promoted to float64 inside the product)
            step = ((tokens[0][n] + gain) / grow[n] > top).long()
        if s == 2:
            fewer = (ratio[1] > top).long()
            step = -fewer if step is None else step - fewer
        if step is None:
            return torch.nn.functional.pad(nodes, (1, 0), value=levels)
        return torch.cat([levels + step, nodes])


@dataclass(frozen=True)
class Plan:
    """An auto budget's choice for one cycle, made on the device by the cycle before it (`Budget.next_plan`) and
    read with that cycle's one host copy, so drafting never reads the device: `levels` levels of candidates to draft
    (the head's trees' depth; 0 for a drafter without a head) and `nodes` per row to verify."""

    levels: int
    nodes: int

    def then(self, levels: int, nodes: int) -> "Plan":
        """The plan after this one, given what the budget decided from its cycle: those levels; those nodes when
        they are more, else half way down (one unlikely cycle says little of the next: a falling count halves
        its fall a cycle, a rising one is followed at once)."""
        return Plan(levels, max(nodes, (self.nodes + nodes) // 2))

    def bounded(self, max_levels: int, max_nodes: int) -> "Plan":
        """Within the method's caps: 1..max_levels levels (0 without a head), 1..max_nodes nodes."""
        levels = min(max(self.levels, 1), max_levels) if max_levels else 0
        return Plan(levels, min(max(self.nodes, 1), max_nodes))


def cache_path(key: dict) -> Path:
    """Where the cost model measured under `key` is cached (cost_measure.load_or_measure)."""
    name = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_root() / "cost-models" / f"{key['model']}-{name}.json"
