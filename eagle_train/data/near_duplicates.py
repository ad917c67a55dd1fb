"""Exact and near duplicates among short texts (prompts), in pure Python and numpy.

- normalised text: lower case, every run of whitespace one space, stripped; two texts with the same normalised
  text are exact duplicates.
- shingles: the set of character `shingle`-grams (5 by default) of the normalised text (the text itself when
  shorter). Two texts are near duplicates when the Jaccard similarity |A ∩ B| / |A ∪ B| of their shingle sets is
  at least `threshold` (0.7 by default: "Can you suggest some good books about sustainable living?" and "… books
  on sustainable living?" score 0.75, "… books about ancient history?" 0.49; short prompts score high on their
  shared frame alone: "Write a poem about the sea." and "… the moon." 0.68).
- candidates: a MinHash signature of 64 values, cut into 16 bands of 4, finds the texts sharing a band (a pair at
  Jaccard 0.7 shares one with probability 1 − (1 − 0.7⁴)¹⁶ ≈ 0.99, at 0.5 ≈ 0.64); each candidate's Jaccard is
  then computed exactly, so a pair below the threshold is never called a near duplicate.
"""
from __future__ import annotations

import re
import zlib

import numpy as np

from eagle_infer.errors import EagleError

PERMUTATIONS, BANDS = 64, 16
_PRIME = 4294967311  # > 2**32: (a * h + b) % p over 32-bit shingle hashes, with a, b < 2**31 (no uint64 overflow)
_rng = np.random.default_rng(0)
_A = _rng.integers(1, 2**31, PERMUTATIONS, dtype=np.uint64)
_B = _rng.integers(0, 2**31, PERMUTATIONS, dtype=np.uint64)


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text.lower()).strip()


def shingles(text: str, size: int) -> frozenset[str]:
    """Character `size`-grams of the normalised text (a shorter text is its own single shingle)."""
    norm = normalise(text)
    return frozenset(norm[i : i + size] for i in range(max(1, len(norm) - size + 1)))


def jaccard(a: frozenset, b: frozenset) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def _bands(grams: frozenset[str]) -> list[bytes]:
    """The MinHash signature's BANDS band keys (band index + its rows' minima)."""
    hashes = np.fromiter((zlib.crc32(g.encode()) for g in grams), dtype=np.uint64, count=len(grams))
    signature = ((_A[:, None] * hashes[None, :] + _B[:, None]) % _PRIME).min(axis=1)  # [PERMUTATIONS]
    rows = PERMUTATIONS // BANDS
    return [bytes([b]) + signature[b * rows : (b + 1) * rows].tobytes() for b in range(BANDS)]


class DuplicateIndex:
    """Texts added so far, queried for an exact or near duplicate of a new text."""

    def __init__(self, threshold: float = 0.7, shingle: int = 5):
        if not 0.0 < threshold <= 1.0:
            raise EagleError(f"near-duplicate threshold {threshold} is invalid: expected a Jaccard similarity in (0, 1]")
        if shingle < 1:
            raise EagleError(f"shingle size {shingle} is invalid: expected >= 1 characters")
        self.threshold, self.shingle = threshold, shingle
        self._exact: set[str] = set()
        self._grams: list[frozenset[str]] = []
        self._buckets: dict[bytes, list[int]] = {}

    def __len__(self) -> int:
        return len(self._grams)

    def match(self, text: str) -> str | None:
        """"exact" when a text added has the same normalised text, "near" when one is at least `threshold` similar,
        else None."""
        if normalise(text) in self._exact:
            return "exact"
        grams = shingles(text, self.shingle)
        candidates = {i for key in _bands(grams) for i in self._buckets.get(key, ())}
        return "near" if any(jaccard(grams, self._grams[i]) >= self.threshold for i in candidates) else None

    def add(self, text: str) -> None:
        self._exact.add(normalise(text))
        grams = shingles(text, self.shingle)
        for key in _bands(grams):
            self._buckets.setdefault(key, []).append(len(self._grams))
        self._grams.append(grams)
