"""The measured cost model behind `infer.total_tokens=auto` / `infer.depth=auto` (InferConf.budget = "auto"), and the
per-cycle choice it makes. Measuring one is eagle_infer/trees/cost_measure.py's job.

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
cheaper, are worth more tokens per ms. The device reduces a cycle's candidates to a few numbers (`Evidence`), read with
that cycle's one host copy; the choice is host arithmetic on them, and the next cycle drafts and verifies by it
(`Plan`): drafting never waits for the device.
A batch call's first cycle, with nothing decided yet, drafts and verifies up to the method's caps.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..platform import cache_root
from .tree import padded_width

SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128)  # verified tokens per forward at which the forward is timed
# Part of every cache key: raise it when a change to the engine changes what a forward or a draft level costs (2: the
# lean drafting step; 3: the head's step compiled beside a target compiled on a GPU; 4: trees drafted, merged and
# verified as device batches, one KV tensor per cache; 5: sizes timed in interleaved rounds, the fastest kept, a
# disturbed model never cached; 6: a block drafter's forward over LM-head rows copied once, not gathered each call;
# 7: a block drafter's forward as lean steps over its context cache), so cost models measured before are measured
# again rather than reused.
COST_REVISION = 7


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

    def cycle_ms(self, head_forwards: int, verified: int) -> float:
        """ms of a decoding cycle: `head_forwards` draft-head forwards (levels drafted, accepted tokens fed) and one
        target forward of `verified` tokens (the batch's roots and tree nodes)."""
        return head_forwards * self.level_ms + self.forward(verified)

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


@dataclass(frozen=True)
class Evidence:
    """What an auto budget decides a plan by, gathered on the device (`Budget.evidence`) and read with a host copy
    (the cycle's one, or a read while drafting): `summary` float64 [1, m + m' + F + L] on the device, sums over the
    batch's rows of, per rank, each row's m best path probabilities (descending) and its m' best without the last
    level (m' = 0: no such set), then per column the frontier's F path probabilities and the last level's L
    children's own probabilities (F = L = 0: no frontier); the rest is the layout to read it by (`Budget.choose`)."""

    summary: torch.Tensor
    m: int
    m_older: int
    frontier: int
    children: int
    levels: int
    ahead: bool


class Budget:
    """Per-cycle choices of an auto budget for `batch` rows: how many candidates to verify, whether to draft on.
    Built once per (batch, max_nodes): verify_ms[n - 1] is the forward of batch x (1 + n) tokens, or with
    `padded` trees of batch x (1 + tree.padded_width(n)) tokens (so n stops only at the top of a bucket, where the
    padding it would carry costs the same as real nodes). The device reduces a cycle's candidates to a few numbers
    (`evidence`, a handful of tensor ops); the choice is host arithmetic on them once they are read (`choose`)."""

    def __init__(self, cost: CostModel, batch: int, max_nodes: int, padded: bool = False):
        self.cost, self.batch, self.max_nodes = cost, batch, max_nodes
        width = (lambda n: padded_width(n, max_nodes)) if padded else (lambda n: n)
        # ms of a forward verifying n = 1..max_nodes nodes per row, then one past the cap (a candidate beyond it)
        self.verify_ms = [cost.forward(batch * (1 + width(n))) for n in range(1, max_nodes + 1)]
        self.verify_ms.append(cost.forward(batch * (2 + max_nodes)))

    def evidence(self, values: torch.Tensor, levels: int, frontier: torch.Tensor | None = None,
                 children: torch.Tensor | None = None, older: torch.Tensor | None = None, ahead: bool = True
                 ) -> Evidence:
        """The device's part of the next plan (tensor ops only, at most six; see `choose` for what they decide).

        values [B, C] (B: the budget's batch): every candidate's path log-value (the head's and any other
        drafter's), drafted in `levels` levels (the head's trees' depth; 0 without a head); frontier [B, F]: the
        path log-values of the nodes one more level would expand; children [B, L]: the own log-probs of the last
        level's candidates, the top-k children of L / F expanded nodes, whose mean mass scales what the frontier's
        children are expected to add (None: 1); older [B, C']: the candidates without the last level. Not `ahead`:
        a choice for the cycle that drafted these candidates."""
        m = min(values.shape[-1], self.max_nodes)
        parts = [values.topk(m, dim=-1).values]  # (exp is monotonic: the m best log-values are the m best)
        m_older = min(older.shape[-1], m) if older is not None and levels > 1 else 0
        if m_older:
            parts.append(older.topk(m_older, dim=-1).values)
        if frontier is not None:
            parts += [frontier] if children is None else [frontier, children]
        joined = parts[0] if len(parts) == 1 else torch.cat(parts, -1)
        probs = (joined if joined.dtype == torch.float64 else joined.double()).exp()  # (a hybrid's copies: float64)
        summary = probs if probs.shape[0] == 1 else probs.sum(0, keepdim=True)  # per column, summed over the rows
        return Evidence(summary, m, m_older, 0 if frontier is None else frontier.shape[-1],
                        0 if frontier is None or children is None else children.shape[-1], levels, ahead)

    def choose(self, evidence: Evidence, read: list[float]) -> tuple[int, int]:
        """(levels, nodes per row) for the next cycle from `read`, evidence.summary as host floats (see `Plan`).

        Nodes: the n whose best candidates maximise expected tokens per ms (batch + the sum of their path
        probabilities, over the draft levels paid plus the forward verifying n per row), or the cap when one more
        candidate, as likely as the least likely one, would still raise it (`ahead`: every candidate paid, and the
        next cycle may have more; not ahead, nodes are the best n of these, never the cap). Levels go up by one
        when one more level pays: the frontier's expected gain joins the n verified at the cost of a level and a
        larger forward. They go down by one when the last level did not pay: the candidates without it, a level
        cheaper, beat these in tokens per ms. Ties keep fewer nodes and the same depth."""
        m, levels, level = evidence.m, evidence.levels, float(self.cost.level_ms)
        v = self.verify_ms
        sets = [read[:m]]  # per set: the rows' m best path probabilities, summed per rank
        if evidence.m_older:  # (fewer than m: the rest have probability 0)
            sets.append(read[m : m + evidence.m_older] + [0.0] * (m - evidence.m_older))
        best = []  # per set: (best tokens per ms, its n - 1, expected tokens at every n)
        least = min((p for p in read[:m] if p != 0), default=0.0)  # the least likely of these candidates
        for s, probs in enumerate(sets):
            if evidence.ahead:  # one more candidate, as likely as the least likely one
                probs = probs + [least]
            tokens, total = [], 0.0
            for p in probs:
                total += p
                tokens.append(total + self.batch)
            ms = [level * levels + x for x in v[: len(tokens)]]  # the cycle's ms at each n
            curve = [t / (x - level if s else x) for t, x in zip(tokens, ms)]  # the second set: a level fewer
            n = max(range(m), key=curve.__getitem__)  # the first of equal ones: fewer nodes
            best.append((curve[n], n, tokens, curve))
        top, n, tokens, curve = best[0]
        nodes = self.max_nodes if evidence.ahead and curve[m] > top else n + 1
        step = 0
        if evidence.frontier:  # one more level: a level and a forward with its children among the n
            at = m + evidence.m_older
            gain = sum(read[at : at + evidence.frontier])  # the frontier's probability, times the children's mass
            if evidence.children:  # (the mean over the rows' expanded nodes of their k children's probability)
                gain *= sum(read[at + evidence.frontier :]) * evidence.frontier / (self.batch * evidence.children)
            grow = level * levels + v[n] + level + v[min(n + 1 + evidence.frontier, self.max_nodes) - 1] - v[n]
            step += (tokens[n] + gain) / grow > top
        if len(sets) == 2:
            step -= best[1][0] > top
        return levels + step, nodes

    def next_plan(self, values: torch.Tensor, levels: int, frontier: torch.Tensor | None = None,
                  children: torch.Tensor | None = None, older: torch.Tensor | None = None, ahead: bool = True
                  ) -> tuple[int, int]:
        """`choose` on this `evidence` at once, reading it from the device (a host read)."""
        evidence = self.evidence(values, levels, frontier, children, older, ahead)
        return self.choose(evidence, evidence.summary.tolist()[0])


@dataclass(frozen=True)
class Plan:
    """An auto budget's choice for one cycle, made by the cycle before it from the evidence its one host copy
    read (`Budget.evidence`, `Budget.choose`), so drafting never reads the device: `levels` levels of candidates to
    draft (the head's trees' depth; 0 for a drafter without a head) and `nodes` per row to verify."""

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
