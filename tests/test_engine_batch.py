"""Batched decoding is lossless per request: in a batch of mixed prompts (different lengths, stop times, trees and
accepted lengths; more prompts than rows, so finished rows are refilled and then dropped), each request's output
equals its own batch-size-1 output, for every method, on the eager and the compiled forward (infer.compile); bad
batches are refused before any work starts.
"""
from __future__ import annotations

import random
from functools import lru_cache

import pytest
import torch

from eagle_infer.decoding.methods import at_batch, tree_budget
from eagle_infer.decoding import engine as engine_module
from eagle_infer.head.dflash_head import random_dflash_head
from eagle_infer.head.draft_head import random_head
from eagle_infer.config import InferConf
from eagle_infer.decoding.engine import Engine
from eagle_infer.models.target import compile_target
from eagle_infer.trees.tree import check_paths
from eagle_infer.config import SamplingParams
from tests.oracles import one_thread, oracle_drafter, scaled_target, vanilla_tokens  # noqa: F401 (fixture)
from tests.test_engine_errors import one_line_error

VOCAB = 96
# Prompt lengths 1..37: rows of very different lengths share every batched forward.
PROMPTS = [random.Random(i).choices(range(VOCAB), k=n) for i, n in enumerate((9, 1, 37, 4, 16, 2, 25))]


@lru_cache(maxsize=None)
def target_and_head(seed: int = 5, path: str = "eager"):
    """A tiny target and random head; path "compiled": the same ones decoding through a compiled forward."""
    if path == "compiled":
        target, head = target_and_head(seed)
        return compile_target(target), head
    target = scaled_target(vocab=VOCAB, seed=seed, name=f"tiny-batch-{seed}")
    return target, random_head(target, seed=seed)


@lru_cache(maxsize=None)
def stops_and_references(max_new: int = 30) -> tuple[list[int], list[list[int]]]:
    """A stop id that ends some requests early (at different steps), and every prompt's vanilla output."""
    target, _ = target_and_head()
    outputs = [vanilla_tokens(target, p, max_new) for p in PROMPTS]
    stop = outputs[0][len(outputs[0]) // 2]
    return [stop], [vanilla_tokens(target, p, max_new, stop_ids=[stop]) for p in PROMPTS]


CONFIGS = {
    "vanilla": InferConf(method="vanilla"),
    "chain-d4": InferConf(method="chain", depth=4),
    "eagle1": InferConf(method="eagle1"),
    "eagle2-d4-k4-t12": InferConf(method="eagle2", depth=4, top_k=4, total_tokens=12),
    "eagle2-norerank-conf": InferConf(method="eagle2", depth=3, top_k=5, total_tokens=9, expand_by="confidence",
                                         rerank=False),
    "eagle2-budget-40": InferConf(method="eagle2", depth=5, top_k=4, total_tokens=16, batch_token_budget=40),
}


@pytest.mark.parametrize("path", ["eager", "compiled"])
@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("batch_size", [2, 3, 7])
def test_each_request_equals_its_batch_of_one(name, batch_size, path):
    """Batch of one = eager vanilla greedy (also on the compiled forward), and each request of a batch = that."""
    target, head = target_and_head(path=path)
    stops, references = stops_and_references()
    engine = Engine(target, head, CONFIGS[name])
    singles = [engine.generate(p, 30, stop_ids=stops).tokens for p in PROMPTS]
    assert singles == references  # batch of one = vanilla greedy
    batch = engine.generate_batch(PROMPTS, 30, stop_ids=stops, batch_size=batch_size)
    assert [r.tokens for r in batch.results] == references
    assert batch.batch_size == batch_size and batch.new_tokens == sum(map(len, references))
    assert {r.stop_reason for r in batch.results} == {"stop", "length"}  # requests end at different times
    sizes = [c.batch for r in batch.results for c in r.cycles]
    assert max(sizes) == batch_size and min(sizes) < batch_size  # full rows, then finished rows dropped


def test_oracle_drafts_give_every_row_its_own_accepted_lengths():
    """Oracles that know each request's continuation (with corrupted tokens) make rows accept different numbers of
    tokens in the same cycle; every cycle accepts exactly what its row's oracle proposed correctly."""
    target, head = target_and_head()
    stops, references = stops_and_references()
    refs = [list(p) + r for p, r in zip(PROMPTS, references)]
    oracle = oracle_drafter(None, 5, branch=2, wrong_rate=0.4, vocab=VOCAB, references=refs)
    batch = Engine(target, head, oracle.config(), drafter=oracle).generate_batch(PROMPTS, 30, stop_ids=stops,
                                                                                   batch_size=4)
    assert [r.tokens for r in batch.results] == references
    assert not oracle.root_mismatches
    accepted = [c.accepted for r in batch.results for c in r.cycles]
    exact = [d.n_true for d in oracle.log if d.exact]
    assert len(set(accepted)) >= 3 and max(accepted) == 5 and min(accepted) == 0
    assert len(exact) > len(oracle.log) // 2 and sum(accepted) >= sum(exact)


@pytest.mark.parametrize("path", ["eager", "compiled"])
@pytest.mark.parametrize("name", ["vanilla", "eagle2-d4-k4-t12", "eagle1"])
def test_sampled_requests_equal_their_seeded_batch_of_one(name, path):
    """Request i of a batch samples with seed + i: the same tokens as generate(prompt_i, seed=seed + i)."""
    target, head = target_and_head(path=path)
    engine = Engine(target, head, CONFIGS[name])
    sampling = SamplingParams(temperature=0.9, top_p=0.95)
    batch = engine.generate_batch(PROMPTS, 20, sampling, seed=11, batch_size=3)
    for i, (prompt, result) in enumerate(zip(PROMPTS, batch.results)):
        assert result.tokens == engine.generate(prompt, 20, sampling, seed=11 + i).tokens


def test_sampled_dflash_requests_equal_their_seeded_batch_of_one():
    """A DFlash drafter's sampled chains (its draws and the verifier's from each row's own generator): request i of
    a batch samples what generate(prompt_i, seed=seed + i) samples. (Under the auto budget a row's tree depends on
    the batch's cost, so its draws are exact in distribution but not the same tokens.)"""
    target, _ = target_and_head()
    head = random_dflash_head(target, VOCAB - 1, seed=3, block_size=5, feature_layers=[0, 1])
    engine = Engine(target, head, InferConf(method="dflash", budget="fixed"))
    sampling = SamplingParams(temperature=0.8)
    batch = engine.generate_batch(PROMPTS, 20, sampling, seed=11, batch_size=3)
    assert any(c.accepted for r in batch.results for c in r.cycles)  # sampled drafts were kept, not only bonuses
    for i, (prompt, result) in enumerate(zip(PROMPTS, batch.results)):
        assert result.tokens == engine.generate(prompt, 20, sampling, seed=11 + i).tokens


def test_stream_reports_each_request():
    target, head = target_and_head()
    got: dict[int, list[int]] = {}
    batch = Engine(target, head, CONFIGS["eagle2-d4-k4-t12"]).generate_batch(
        PROMPTS[:4], 25, stream=lambda i, tokens: got.setdefault(i, []).extend(tokens), batch_size=2
    )
    assert got == {i: r.tokens for i, r in enumerate(batch.results)}


def test_tree_budget_shrinks_as_the_batch_grows():
    config = InferConf(method="eagle2", depth=6, top_k=8, total_tokens=32, batch_token_budget=64)
    assert [tree_budget(config, b) for b in (1, 2, 4, 8, 64, 200)] == [32, 31, 15, 7, 1, 1]
    small = at_batch(config, 8)
    assert (small.total_tokens, small.depth, small.top_k) == (7, 6, 8)
    assert at_batch(config, 16).depth == 3 and at_batch(config, 1) is config
    static = at_batch(InferConf(method="eagle1", batch_token_budget=24), 2)
    assert len(static.static_paths) == 11 and check_paths(static.static_paths)  # a closed breadth-first prefix
    assert at_batch(InferConf(method="chain", depth=5, batch_token_budget=8), 2).depth == 3
    assert at_batch(InferConf(budget="fixed", method="eagle2"), 8).total_tokens == 32  # budget 0: no shrinking
    tight = InferConf(method="eagle2", depth=2, top_k=4, total_tokens=8, batch_token_budget=8)
    assert at_batch(tight, 1).total_tokens == 7 == tree_budget(tight, 1)  # a budget below the tree cuts batch 1 too
    # In a run, each cycle's tree fits the budget at that cycle's batch size.
    target, head = target_and_head()
    config = InferConf(method="eagle2", depth=4, top_k=4, total_tokens=16, batch_token_budget=24)
    batch = Engine(target, head, config).generate_batch(PROMPTS, 20, batch_size=4)
    cycles = [c for r in batch.results for c in r.cycles]
    assert all(c.tree_size <= tree_budget(config, c.batch) for c in cycles)
    assert {c.tree_size for c in cycles if c.batch == 4} == {5}
    fewest = min(c.batch for c in cycles)
    assert fewest < 4 and {c.tree_size for c in cycles if c.batch == fewest} == {tree_budget(config, fewest)}


def test_bad_batches_are_refused_before_any_work(monkeypatch):
    target, head = target_and_head()
    engine = Engine(target, head, InferConf(method="eagle2", depth=3, top_k=2, total_tokens=4, max_batch_size=4))

    def no_work(*args, **kwargs):
        raise AssertionError("work started before the batch was checked")

    monkeypatch.setattr(target, "new_cache", no_work)
    one_line_error(lambda: engine.generate_batch([], 8), "empty")
    one_line_error(lambda: engine.generate_batch(PROMPTS, 8, batch_size=5), "batch_size 5", "max_batch_size 4")
    one_line_error(lambda: engine.generate_batch(PROMPTS, 8, batch_size=0), "batch_size 0")
    one_line_error(lambda: engine.generate_batch([PROMPTS[0], [], PROMPTS[1]], 8), "request 1", "empty")
    one_line_error(lambda: engine.generate_batch([PROMPTS[0], [1] * 600], 8), "request 1", "600", "512")
    monkeypatch.setattr(engine_module, "available_memory", lambda device: 10_000)
    need = engine.cache_bytes(4, max(map(len, PROMPTS)) + 8 - 1 + 4)
    one_line_error(lambda: engine.generate_batch(PROMPTS, 8, batch_size=4), "batch_size 4", "GiB", "cpu")
    assert need > 10_000
    one_line_error(lambda: Engine(target, head, InferConf(budget="fixed", max_batch_size=0)), "max_batch_size 0")
    one_line_error(lambda: Engine(target, head, InferConf(batch_token_budget=-1)), "batch_token_budget -1")


def test_default_batch_size_is_capped_by_max_batch_size():
    target, head = target_and_head()
    engine = Engine(target, head, InferConf(method="vanilla", max_batch_size=3))
    batch = engine.generate_batch(PROMPTS, 5)
    assert batch.batch_size == 3 and all(len(r.tokens) == 5 for r in batch.results)
    assert batch.cache_bytes == engine.cache_bytes(3, max(map(len, PROMPTS)) + 5 - 1)


def test_cache_rows_of_different_lengths_see_only_their_own_tokens():
    """A batched target forward over rows of different lengths gives each row the logits of its own forward."""
    target, _ = target_and_head()
    from eagle_infer.models.masks import causal_mask

    prompts = [PROMPTS[0], PROMPTS[2], PROMPTS[3]]
    nxt = [[3, 4, 5], [6, 7, 8], [9, 10, 11]]
    with torch.inference_mode():
        cache = target.new_cache(3, 64)
        for b, p in enumerate(prompts):
            target.forward(torch.tensor([p]), torch.arange(len(p))[None], cache.row(b))
            cache.lengths[b] = len(p)
        lengths = list(cache.lengths)
        positions = torch.tensor(lengths)[:, None] + torch.arange(3)
        logits, _ = target.forward(torch.tensor(nxt), positions, cache, causal_mask(lengths, 3, torch.float32, "cpu"))
        for b, p in enumerate(prompts):
            seq = p + nxt[b]
            alone, _ = target.forward(torch.tensor([seq]), torch.arange(len(seq))[None], target.new_cache(1, 64))
            torch.testing.assert_close(logits[b], alone[0, -3:], rtol=1e-4, atol=1e-4)


def test_custom_drafter_is_held_to_the_per_batch_tree_budget():
    """A drafter's trees are checked against the budget of the cycle's batch size, not the batch-of-one budget: with
    batch_token_budget 24, a 5-node tree fits at batch 4 and a 6-node one does not (it would overflow the forward)."""
    target, head = target_and_head()
    stops, references = stops_and_references()
    refs = [list(p) + r for p, r in zip(PROMPTS, references)]
    config = InferConf(method="eagle2", depth=4, top_k=1, total_tokens=16, batch_token_budget=24)
    assert tree_budget(config, 4) == 5
    fits = oracle_drafter(None, 5, branch=0, vocab=VOCAB, references=refs)
    batch = Engine(target, head, config, drafter=fits).generate_batch(PROMPTS[:4], 12, batch_size=4)
    assert all(len(d.tree) == 5 for d in fits.log) and all(len(r.tokens) == 12 for r in batch.results)
    too_big = oracle_drafter(None, 6, branch=0, vocab=VOCAB, references=refs)
    one_line_error(lambda: Engine(target, head, config, drafter=too_big).generate_batch(PROMPTS[:4], 12, batch_size=4),
                   "6 nodes", "tree budget 5")
