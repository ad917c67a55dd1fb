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

from array import array
from typing import TYPE_CHECKING

import numpy
import torch

from .. import constants
from .tree import TreeBatch, path_values

if TYPE_CHECKING:  # type-only: config imports the method registry, whose drafters use this module
    from ..config import LookupConf

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


def copy_batch(contexts: list[list[int]], conf: LookupConf, rates: list[CopyRates], device
               ) -> tuple[TreeBatch, torch.Tensor]:
    """Every row's prompt-lookup trie as one TreeBatch (padded to the largest, at least one slot), built on the host
    from the contexts (host data) and copied to the device in two transfers, with its path values (float64 [B, N],
    exactly what `TreeBatch.values()` computes, multiplied on the host). A node's prob is the row's copy rate at its
    depth; every node is copied."""
    tries = [copy_trie(c, conf, r) for c, r in zip(contexts, rates)]
    width = max([len(t[0]) for t in tries] + [1])
    if not any(t[0] for t in tries):  # nothing found: no transfer
        return no_copies(len(tries), device)
    fields = [[], [], [], [], []]  # tokens, parents, depths, probs, values: [B, width] each
    for (tokens, parents, depths), r in zip(tries, rates):
        pad = width - len(tokens)
        probs = list(array("f", [r.rates(max(depths, default=0))[d - 1] for d in depths]))  # as the float32 probs
        for field, row in zip(fields, (tokens + [0] * pad, parents + [-1] * pad, depths + [0] * pad,
                                       probs + [0.0] * pad, path_values(parents, probs) + [0.0] * pad)):
            field.append(row)
    # two host arrays (float64 holds each float32 prob exactly), each copied to the device in one transfer
    on_device = lambda rows, dtype: torch.from_numpy(numpy.array(rows, dtype=dtype)).to(  # noqa: E731
        device, non_blocking=True).unbind(0)
    tokens, parents, depths = on_device(fields[:3], numpy.int64)
    probs, values = on_device(fields[3:], numpy.float64)
    copied = depths > 0  # the real nodes (depth >= 1)
    trees = TreeBatch(tokens, parents, depths, probs.float(), copied, copied.sum(1),
                      max([max(t[2], default=0) for t in tries] + [0]), distinct=True)  # (a trie)
    return trees, values


def no_copies(batch: int, device) -> tuple[TreeBatch, torch.Tensor]:
    """copy_batch's answer when no row found a continuation: one padding slot a row, and its value 0, as shared
    read-only constants (eagle_infer/constants.py)."""
    def filled(value, dtype, shape=(batch, 1)):
        return constants.filled(shape, value, dtype, device)
    trees = TreeBatch(filled(0, torch.long), filled(-1, torch.long), filled(0, torch.long), filled(0.0, torch.float32),
                      filled(False, torch.bool), filled(0, torch.long, (batch,)), 0, distinct=True)
    return trees, filled(0.0, torch.float64)
