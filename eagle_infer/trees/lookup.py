"""Prompt lookup drafting: copy what followed an earlier occurrence of the context's last n tokens.

Matching (transformers' PromptLookupCandidateGenerator rule): for n from max_ngram down to min_ngram, the leftmost
earlier occurrence of the context's last n tokens (prompt + everything emitted, ending with the root) proposes the
up to num_tokens tokens that followed it; the longest n with a match wins. With match "recent" the latest occurrence
proposes instead. With branches > 1 further matches (the next occurrences of that n, then shorter n) add their
continuations, skipping ones that add no new path.

Node values: the copied tokens that continue one node at depth j share the request's measured rate of accepting a
copy there (`CopyRates`: of the times copies at depth j were tested, below an accepted parent, the share in which
one of them was accepted, from a prior `prior_rate(j)` weighing PRIOR_TRIES tests), split evenly among them:
siblings exclude one another, so their values sum to that rate, and a chain's path value estimates the chance that
it is accepted that far, on the same scale as a head's path probabilities.
"""
from __future__ import annotations

import math
from array import array
from collections import Counter
from dataclasses import dataclass

import numpy
import torch

from .. import constants
from ..config import LookupConf
from .tree import TreeBatch, path_values


PRIOR_TRIES = 2.0  # the prior rates weigh two tests
PRIOR_MISS = 0.75  # prior_rate(j) = 1 - PRIOR_MISS / j


def prior_rate(depth: int) -> float:
    """A copy's acceptance rate at `depth` before any was tested there: 1 - 0.75 / depth, the longer a copy has
    held the likelier it goes on (0.25, 0.62, 0.75, 0.81, 0.85 at depths 1-5). Fit to greedy chains of 10 copies
    over SmolLM2's answers to its 64 held-out self-written requests (`python scripts/copy_rates.py`): 0.24, 0.62,
    0.73, 0.75, 0.80, then 0.86-0.92. A flat prior of 0.5 priced a second copy so low that an auto budget never
    verified one, and so never measured that it is accepted far more often than the first."""
    return 1.0 - PRIOR_MISS / depth


def continuations(context: list[int], conf: LookupConf) -> list[list[int]]:
    """Up to conf.branches continuations of `context` (each 1..num_tokens tokens), the first one that of the
    leftmost occurrence of the longest matching n (transformers' own) or, conf.match "recent", the latest."""
    found: list[list[int]] = []
    size = len(context)
    for n in range(min(conf.max_ngram, size - 1), conf.min_ngram - 1, -1):
        suffix = context[size - n :]
        for i in occurrences(context, suffix, conf.match == "recent"):
            cont = context[i + n : i + n + conf.num_tokens]
            if not any(old[: len(cont)] == cont for old in found):
                found.append(cont)
            if len(found) == conf.branches:
                return found
    return found


def occurrences(context: list[int], suffix: list[int], latest_first: bool):
    """The starts of `suffix`'s earlier occurrences in `context` (before the suffix itself), leftmost first or
    latest first."""
    n, first, end = len(suffix), suffix[0], len(context) - len(suffix)
    if latest_first:
        for i in range(end - 1, -1, -1):
            if context[i] == first and context[i : i + n] == suffix:
                yield i
        return
    start = 0
    while True:
        try:
            i = context.index(first, start, end)
        except ValueError:
            return
        start = i + 1
        if context[i : i + n] == suffix:
            yield i


class CopyRates:
    """A request's acceptance rate of copies per depth: rate(j) = (hits_j + PRIOR_TRIES * prior_rate(j)) / (tries_j +
    PRIOR_TRIES), where a try is a tested parent's copied children at depth j (tested: below an accepted parent) and a
    hit, one of them accepted."""

    def __init__(self, depth: int):
        self.hits, self.tries = [0] * (depth + 1), [0] * (depth + 1)

    def rates(self, length: int) -> list[float]:
        """Rates at depths 1..length."""
        return [(self.hits[j] + PRIOR_TRIES * prior_rate(j)) / (self.tries[j] + PRIOR_TRIES)
                for j in range(1, length + 1)]

    def update(self, tested: list[int], accepted: set[int], copied: list[bool], depths: list[int],
               parents: list[int]) -> None:
        """Count the tested copied nodes of a verified tree (node indices `tested`; copied flags, depths and parents
        indexed by node) by parent: a try per parent with tested copied children, a hit where one was accepted."""
        groups: dict[int, bool] = {}
        for i in tested:
            if copied[i]:
                groups[parents[i]] = groups.get(parents[i], False) or i in accepted
        for parent, hit in groups.items():
            depth = 1 if parent < 0 else depths[parent] + 1
            self.tries[depth] += 1
            self.hits[depth] += hit


def copy_trie(context: list[int], conf: LookupConf) -> tuple[list[int], list[int], list[int]]:
    """A context's continuations as one trie on the host, breadth-first (siblings in order of first appearance):
    (tokens, parents, depths) of its nodes; a continuation sharing a prefix with an earlier one adds only its rest."""
    index: dict[tuple[int, int], int] = {}  # (parent, token) -> node, in order of first appearance
    parents, depths = [], []
    tokens: list[int] = []
    for cont in continuations(context, conf):
        up = -1
        for tok in cont:
            j = index.setdefault((up, tok), len(tokens))
            if j == len(tokens):
                tokens.append(tok)
                parents.append(up)
                depths.append(1 if up < 0 else depths[up] + 1)
            up = j
    order = sorted(range(len(tokens)), key=lambda j: (depths[j], j))
    new = {j: i for i, j in enumerate(order)}
    return ([tokens[j] for j in order], [-1 if parents[j] < 0 else new[parents[j]] for j in order],
            [depths[j] for j in order])


@dataclass
class Copies:
    """Every row's prompt-lookup trie on the device, padded to the widest (at least one slot): tokens, parents,
    depths LongTensor [B, N] as a TreeBatch holds them (padding: token 0, parent -1, depth 0); probs float32 [B, N],
    each node's copy rate; values float64 [B, N], its path value (exactly what `TreeBatch.values()` computes,
    multiplied on the host; padding 0) and log_values, their logs (padding -inf); depth: the deepest node (0: no row
    found a continuation). Every node is copied."""

    tokens: torch.Tensor
    parents: torch.Tensor
    depths: torch.Tensor
    probs: torch.Tensor
    values: torch.Tensor
    log_values: torch.Tensor
    depth: int

    def trees(self) -> TreeBatch:
        """The tries as a TreeBatch (every node copied; siblings distinct)."""
        copied = self.depths > 0  # the real nodes (depth >= 1)
        return TreeBatch(self.tokens, self.parents, self.depths, self.probs, copied, copied.sum(1), self.depth,
                         distinct=True)


def copy_batch(contexts: list[list[int]], conf: LookupConf, rates: list[CopyRates], device) -> Copies:
    """Every row's prompt-lookup trie, built on the host from the contexts (host data) and copied to the device in
    one transfer. A node's prob is the row's copy rate at its depth over the number of copies sharing its parent."""
    tries = [copy_trie(c, conf) for c in contexts]
    width = max([len(t[0]) for t in tries] + [1])
    if not any(t[0] for t in tries):  # nothing found: no transfer
        return no_copies(len(tries), device)
    ints, floats = numpy.zeros((3, len(tries), width), numpy.int64), numpy.zeros((3, len(tries), width))
    ints[1], floats[2] = -1, -numpy.inf  # padding: a child of the root; log-value -inf
    for b, ((tokens, parents, depths), r) in enumerate(zip(tries, rates)):
        n = len(tokens)
        rate, siblings = r.rates(max(depths, default=0)), Counter(parents)
        probs = list(array("f", [rate[d - 1] / siblings[p] for d, p in zip(depths, parents)]))  # as float32 probs
        values = path_values(parents, probs)
        ints[:, b, :n] = tokens, parents, depths
        floats[:, b, :n] = probs, values, [math.log(v) for v in values]  # (rates > 0: every value is)
    # one host array (the float64 fields as int64 bits: float64 holds each float32 prob exactly), one transfer
    fields = torch.from_numpy(numpy.concatenate([ints, floats.view(numpy.int64)]))
    if fields.device != torch.device(device):
        fields = fields.to(device, non_blocking=True)
    tokens, parents, depths = fields.unbind(0)[:3]
    probs, values, log_values = fields.view(torch.float64).unbind(0)[3:]
    return Copies(tokens, parents, depths, probs.float(), values, log_values,
                  max([max(t[2], default=0) for t in tries] + [0]))


def no_copies(batch: int, device) -> Copies:
    """copy_batch's answer when no row found a continuation: one padding slot a row, as shared read-only constants
    (eagle_infer/constants.py)."""
    def filled(value, dtype):
        return constants.filled((batch, 1), value, dtype, device)
    return Copies(filled(0, torch.long), filled(-1, torch.long), filled(0, torch.long), filled(0.0, torch.float32),
                  filled(0.0, torch.float64), filled(float("-inf"), torch.float64), 0)
