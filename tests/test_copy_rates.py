"""scripts/copy_rates.py walks answers as lookup alone decodes them and counts, per depth, copies tried and held."""
from __future__ import annotations

from eagle_infer.config import LookupConf
from tests.scripts import load_script


def test_chain_rates_count_tries_and_hits_by_depth():
    chain_rates = load_script("copy_rates").chain_rates
    # The prompt [1, 2, 3, 4, 1] proposes [2, 3, 4, 1] after its last 1: the answer [2, 3, 9] holds it 2 deep,
    # misses at depth 3; the bonus (9) ends the cycle, then nothing earlier ends with 9: a cycle without copies.
    hits, tries, tau = chain_rates([([1, 2, 3, 4, 1], [2, 3, 9, 5])], LookupConf(num_tokens=4))
    assert hits[:3] == [1, 1, 0] and tries[:3] == [1, 1, 1]
    assert tau == 4 / 2  # cycles: [2, 3] + bonus 9, then 5 alone
