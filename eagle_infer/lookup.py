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

import torch

from .config import LookupConf
from .tree import DraftTree

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

    def update(self, tree: DraftTree, tested: list[int], path: list[int]) -> None:
        """Count the tested copied nodes of a verified tree and which were accepted (on `path`)."""
        copied, depths, kept = tree.copied.tolist(), tree.depths.tolist(), set(path)
        for i in tested:
            if copied[i]:
                self.tries[depths[i]] += 1
                self.hits[depths[i]] += i in kept


def lookup_chains(context: list[int], conf: LookupConf, rates: CopyRates, device) -> list[DraftTree]:
    """One chain DraftTree per continuation of `context`, its probs the request's copy rates, every node copied."""
    chains = []
    for cont in continuations(context, conf):
        n = len(cont)
        chains.append(DraftTree(
            torch.tensor(cont, dtype=torch.long, device=device), torch.arange(-1, n - 1, device=device),
            torch.arange(1, n + 1, device=device), torch.tensor(rates.rates(n), device=device),
            torch.ones(n, dtype=torch.bool, device=device),
        ))
    return chains
