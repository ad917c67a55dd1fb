"""Prompt lookup drafting: copy what followed an earlier occurrence of the context's last n tokens.

Matching (transformers' PromptLookupCandidateGenerator rule): for n from max_ngram down to min_ngram, the leftmost
earlier occurrence of the context's last n tokens (prompt + everything emitted, ending with the root) proposes the
up to num_tokens tokens that followed it; the longest n with a match wins. With branches > 1 further matches (the
next occurrences of that n, then shorter n) add their continuations, skipping ones that add no new path.

Node values: a copied token at depth j gets the request's measured acceptance rate of copied tokens at depth j
(`CopyRates`: accepted / tested copied nodes at that depth, from a prior of PRIOR_HITS / PRIOR_TRIES), so a chain's
path value estimates the chance that it is accepted that far, on the same scale as a head's path probabilities.
"""
from __future__ import annotations

import math
from array import array
from dataclasses import dataclass

import numpy
import torch

from .. import constants
from ..config import LookupConf
from .tree import TreeBatch, path_values


PRIOR_HITS, PRIOR_TRIES = 1.0, 2.0  # a rate of 0.5 before any copied token was tested, weighing two tests


def continuations(context: list[int], conf: LookupConf) -> list[list[int]]:
    """Up to conf.branches continuations of `context` (each 1..num_tokens tokens), the first one transformers' own."""
    found: list[list[int]] = []
    size = len(context)
    for n in range(min(conf.max_ngram, size - 1), conf.min_ngram - 1, -1):
        suffix, first = context[size - n :], context[size - n]
        start = 0
        while len(found) < conf.branches:
            try:
                i = context.index(first, start, size - n)  # occurrences before the suffix itself
            except ValueError:
                break
            start = i + 1
            if context[i : i + n] != suffix:
                continue
            cont = context[i + n : i + n + conf.num_tokens]
            if not any(old[: len(cont)] == cont for old in found):
                found.append(cont)
        if len(found) == conf.branches:
            break
    return found


class CopyRates:
    """A request's acceptance rate of copied tokens per depth: rate(j) = (hits_j + PRIOR_HITS) / (tries_j +
    PRIOR_TRIES), over copied nodes at depth j whose parent was accepted (tested)."""

    def __init__(self, depth: int):
        self.hits, self.tries = [0] * (depth + 1), [0] * (depth + 1)

    def rates(self, length: int) -> list[float]:
        """Rates at depths 1..length."""
        return [(self.hits[j] + PRIOR_HITS) / (self.tries[j] + PRIOR_TRIES) for j in range(1, length + 1)]

    def update(self, tested: list[int], accepted: set[int], copied: list[bool], depths: list[int]) -> None:
        """Count the tested copied nodes of a verified tree (node indices `tested`, their copied flags and depths
        indexed by node) and which were accepted."""
        for i in tested:
            if copied[i]:
                self.tries[depths[i]] += 1
                self.hits[depths[i]] += i in accepted


def copy_trie(context: list[int], conf: LookupConf, rates: CopyRates) -> tuple[list[int], list[int], list[int]]:
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
    one transfer. A node's prob is the row's copy rate at its depth."""
    tries = [copy_trie(c, conf, r) for c, r in zip(contexts, rates)]
    width = max([len(t[0]) for t in tries] + [1])
    if not any(t[0] for t in tries):  # nothing found: no transfer
        return no_copies(len(tries), device)
    ints, floats = numpy.zeros((3, len(tries), width), numpy.int64), numpy.zeros((3, len(tries), width))
    ints[1], floats[2] = -1, -numpy.inf  # padding: a child of the root; log-value -inf
    for b, ((tokens, parents, depths), r) in enumerate(zip(tries, rates)):
        n = len(tokens)
        probs = list(array("f", [r.rates(max(depths, default=0))[d - 1] for d in depths]))  # as the float32 probs
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
