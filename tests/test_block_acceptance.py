"""scripts/block_acceptance.py: the training's simulated acceptance of a block drafter, scored at the positions where
decoding's cycles began, equals what those cycles accepted."""
from __future__ import annotations

import pytest
import torch

from eagle_infer.config import InferConf
from eagle_infer.decoding.engine import Engine
from eagle_infer.head.dflash_head import random_dflash_head
from tests.scripts import load_script
from tests.tiny import tiny_target

BLOCK = 4


@pytest.mark.parametrize("seed", [0, 1])
def test_simulated_acceptance_at_the_cycles_starts_is_what_they_accepted(seed):
    """A random drafter over three ids the tiny target's greedy answer repeats (so some of its drafts are accepted);
    every cycle whose block fits in the answer is scored at its bonus token's position."""
    simulated = load_script("block_acceptance").simulated
    target = tiny_target(vocab=96, layers=6)
    head = random_dflash_head(target, 95, seed=seed, block_size=BLOCK, draft_vocab=torch.tensor([74, 46, 32]))
    prompt = list(range(5, 20))
    result = Engine(target, head, InferConf(method="dflash", budget="fixed")).generate(prompt, 40)
    starts, accepted, offset = [], 0, 0
    for cycle in result.cycles:
        if offset + BLOCK <= len(result.tokens):
            starts.append(offset)
            accepted += cycle.accepted + 1
        offset += cycle.accepted + 1
    assert accepted > len(starts) > 5  # drafts were accepted: the comparison can fail
    assert simulated(head, target, prompt, result.tokens, at=starts) == (len(starts), accepted)
    scored, _ = simulated(head, target, prompt, result.tokens)
    assert scored == len(result.tokens) - BLOCK + 1
