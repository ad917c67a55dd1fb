"""scripts/draft_vocab_coverage.py counts, per benchmark, the answer tokens inside a head's draft vocabulary."""
from __future__ import annotations

from tests.scripts import load_script


def test_coverage_counts_every_turn_per_benchmark():
    coverage = load_script("draft_vocab_coverage").coverage
    records = [{"benchmark": "mt_bench", "turns": ["abc", "ad"]}, {"benchmark": "gsm8k", "turns": ["zz"]},
               {"benchmark": "mt_bench", "turns": ["b"]}]
    encode = lambda text: [ord(c) for c in text]  # noqa: E731
    counts = coverage(records, {ord("a"), ord("b")}, encode)
    assert counts == {"mt_bench": (6, 4), "gsm8k": (2, 0)}
