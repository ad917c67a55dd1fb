"""Greedy decoding is lossless: every drafter's output equals the target's own greedy output (method vanilla).
The main tests run on both the eager and the compiled forward (infer.compile), and the compiled output is
compared with the eager vanilla one.

Random-head drafters rarely get a token accepted, so oracle drafters (tests/oracles.py) that know the vanilla
continuation drive long accepted paths of every shape through verification and KV-cache compaction; the number of
tokens accepted in each cycle is predicted exactly from what the oracle proposed.
"""
from __future__ import annotations

import random
from dataclasses import replace
from functools import lru_cache

import pytest
import torch

import eagle_infer.decoding.cycle as cycle_module
from eagle_infer.decoding.methods import resolve, tree_budget
from eagle_infer.decoding.build import measure_cost
from eagle_infer.head.dflash_head import random_dflash_head
from eagle_infer.head.draft_head import DraftHead, DraftHeadConfig, random_head
from eagle_infer.config import InferConf
from eagle_infer.decoding.engine import Engine
from eagle_infer.head.head_runner import HeadRunner
from eagle_infer.trees.cost import CostModel
from eagle_infer.trees.tree import check_paths
from eagle_infer.models.masks import causal_mask
from eagle_infer.models.kv_cache import KVCache
from eagle_infer.models.target import compile_target
from tests.oracles import (  # noqa: F401 (one_thread is an autouse fixture; distinct_checked a fixture)
    distinct_checked, distinct_enough, one_thread, oracle_drafter, scaled_target, vanilla_tokens,
)

VOCAB = 96


@lru_cache(maxsize=None)
def target_and_head(seed: int, arch: str = "llama", path: str = "eager"):
    """A tiny target and a random head; path "compiled": the same target (and head) decoding through a compiled
    forward (eagle_infer.models.compiled)."""
    if path == "compiled":
        target, head = target_and_head(seed, arch)
        return compile_target(target), head
    target = scaled_target(vocab=VOCAB, seed=seed, arch=arch, name=f"tiny-{arch}-{seed}")
    return target, random_head(target, seed=seed)


PATHS = ["eager", "compiled"]


@lru_cache(maxsize=None)
def case(seed: int, prompt_len: int, max_new: int, arch: str = "llama"):
    """(prompt, vanilla continuation) on the tiny target `seed`: the first seeded random prompt of that length whose
    greedy continuation is not degenerate (several distinct tokens, no long run of one token)."""
    target, _ = target_and_head(seed, arch)
    for attempt in range(20):
        prompt = random.Random(10_000 * seed + 100 * prompt_len + attempt).choices(range(VOCAB), k=prompt_len)
        out = vanilla_tokens(target, prompt, max_new)
        if distinct_enough(out):
            return tuple(prompt), tuple(out)
    raise AssertionError(f"no non-degenerate greedy continuation for seed {seed}, prompt length {prompt_len}")


# (target seed, prompt length, max_new_tokens): prompts of 1..40 tokens, various lengths of output.
CASES = [(2, 1, 40), (3, 7, 33), (1, 40, 24), (4, 13, 19)]
# The compiled forward's cases: the same prompt lengths on one target (seed 3), so the module compiles one target's
# graphs, not four (what the seeds vary, the weights, changes nothing the compiler sees but the frozen constants).
COMPILED_CASES = [(3, 1, 40), (3, 7, 33), (3, 40, 24), (3, 13, 19)]


def cases(path: str) -> list[tuple[int, int, int]]:
    return COMPILED_CASES if path == "compiled" else CASES

HEAD_CONFIGS = {
    "chain-d1": InferConf(method="chain", depth=1),
    "chain-d5": InferConf(method="chain", depth=5),
    "eagle1-default": InferConf(method="eagle1"),
    # Deliberately unsorted: the engine sorts it breadth-first.
    "eagle1-custom": InferConf(
        method="eagle1", static_paths=[[0, 0, 0], [1], [0], [2], [0, 1], [2, 0], [1, 0], [0, 0], [0, 0, 0, 0], [0, 1, 0]]
    ),
    "eagle2-default": InferConf(budget="fixed", method="eagle2"),
    "eagle2-d3-k4-t10-conf": InferConf(method="eagle2", depth=3, top_k=4, total_tokens=10, expand_by="confidence"),
    "eagle2-d5-k3-t60-norerank": InferConf(method="eagle2", depth=5, top_k=3, total_tokens=60, rerank=False),
    "eagle2-d4-k5-t7-conf-norerank": InferConf(
        method="eagle2", depth=4, top_k=5, total_tokens=7, expand_by="confidence", rerank=False
    ),
    "eagle2-d2-k10-t100": InferConf(method="eagle2", depth=2, top_k=10, total_tokens=100),
    "eagle2-d1-k1-t1": InferConf(method="eagle2", depth=1, top_k=1, total_tokens=1),
}


def run(target, head, config, prompt, max_new, drafter=None, **kw):
    """The engine's output (an auto budget's cost model measured first, as build_engine does)."""
    engine = Engine(target, head, config, drafter=drafter, cost=measure_cost(config, target, head))
    return engine.generate(list(prompt), max_new, **kw)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", HEAD_CONFIGS)
def test_random_head_drafters_match_vanilla(name, path, distinct_checked):
    config = HEAD_CONFIGS[name]
    for seed, prompt_len, max_new in cases(path):
        target, head = target_and_head(seed, path=path)
        prompt, expected = case(seed, prompt_len, max_new)
        result = run(target, head, config, prompt, max_new)
        assert result.tokens == list(expected), (name, seed, prompt_len)
        assert result.stop_reason == "length"
        assert sum(c.accepted + 1 for c in result.cycles) + 1 >= max_new
        # Each method's own bound: EAGLE-1 builds exactly its static tree, the others stay within their budget.
        if config.method == "eagle1":
            paths = check_paths(config.paths())
            size, depth = len(paths), max(map(len, paths))
            assert all(c.tree_size == size and c.tree_depth == depth for c in result.cycles), name
        for c in result.cycles:
            assert c.tree_size <= tree_budget(config) and c.tree_depth <= max_depth(config), name
            assert sum(c.tested_hit) == c.accepted
    assert distinct_checked  # the head drafters' trees claim distinct siblings, and have them


def max_depth(config: InferConf) -> int:
    """The deepest node a config's tree can hold: the static tree's deepest path for EAGLE-1, else its depth."""
    config = resolve(config)
    return max(map(len, config.paths())) if config.method == "eagle1" else config.depth


def check_oracle_cycles(result, oracle):
    """Every cycle accepted exactly what the oracle proposed correctly (at least that past the reference's end)."""
    assert oracle.root_mismatches == []
    assert len(result.cycles) == len(oracle.log)
    for cycle, draft in zip(result.cycles, oracle.log):
        assert cycle.tree_size == len(draft.tree)
        if draft.exact:
            assert cycle.accepted == draft.n_true, (draft.base, draft.path)
        else:
            assert cycle.accepted >= draft.n_true
        assert sum(cycle.tested_hit) == cycle.accepted


ORACLES = {
    # name: (depth, branch, wrong_rate)
    "perfect-chain": (5, 0, 0.0),
    "perfect-branchy": (4, 2, 0.0),
    "perfect-deep-wide": (7, 3, 0.0),
    "partly-wrong": (6, 1, 0.6),
    "always-wrong-branchy": (5, 3, 1.0),
    "depth1-branchy": (1, 4, 0.0),
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", ORACLES)
def test_oracle_drafters_match_vanilla_with_long_acceptance(name, path):
    depth, branch, wrong_rate = ORACLES[name]
    noncontiguous = first_not_first_child = partial = 0
    for i, (seed, prompt_len, max_new) in enumerate(cases(path)[:3]):
        target, head = target_and_head(seed, path=path)
        prompt, expected = case(seed, prompt_len, max_new)
        reference = list(prompt) + list(expected)
        oracle = oracle_drafter(reference, depth, branch=branch, wrong_rate=wrong_rate, seed=i, vocab=VOCAB)
        result = run(target, head, oracle.config(), prompt, max_new, drafter=oracle)
        assert result.tokens == list(expected), (name, seed)
        check_oracle_cycles(result, oracle)
        accepted = [c.accepted for c in result.cycles]
        if wrong_rate == 0:
            # Every cycle but the ones running past the reference accepts the whole path.
            assert sum(accepted) / len(accepted) >= 0.8 * depth, accepted
            assert result.tau > 0.8 * depth
        else:
            assert max(accepted) >= 1 and min(accepted) < depth
        for cycle, draft in zip(result.cycles, oracle.log):
            kept = draft.path[: cycle.accepted]
            noncontiguous += any(b != a + 1 for a, b in zip(kept, kept[1:]))
            first_not_first_child += bool(kept) and kept[0] != 0
            partial += 0 < cycle.accepted < depth
    if branch and depth > 1:
        assert noncontiguous and first_not_first_child  # compaction gathered scattered tree positions
    if wrong_rate:
        assert partial  # acceptance stopped part-way down the path


@pytest.mark.parametrize("max_new", [1, 2, 3, 6, 7, 11])
def test_max_new_tokens_truncation_matches_vanilla(max_new):
    seed, prompt_len, _ = CASES[0]
    target, head = target_and_head(seed)
    prompt, full = case(seed, prompt_len, 40)
    expected = vanilla_tokens(target, prompt, max_new)
    assert expected == list(full[:max_new])
    oracle = oracle_drafter(list(prompt) + list(full), 5, branch=1, vocab=VOCAB)
    for config, drafter in ((oracle.config(), oracle), (InferConf(budget="fixed", method="eagle2"), None)):
        result = run(target, head, config, prompt, max_new, drafter=drafter)
        assert result.tokens == expected and result.stop_reason == "length"


def test_stop_ids_truncation_matches_vanilla():
    seed, prompt_len, max_new = CASES[1]
    target, head = target_and_head(seed)
    prompt, full = case(seed, prompt_len, max_new)
    oracle = oracle_drafter(list(prompt) + list(full), 6, branch=2, vocab=VOCAB)
    firsts = {}
    for i, t in enumerate(full):
        firsts.setdefault(t, i)
    # A stop id first emitted mid-way (inside an accepted path), one emitted first, and a pair of stop ids.
    late = max(firsts, key=firsts.get)
    mid = sorted(firsts, key=firsts.get)[len(firsts) // 2]
    for stops in ([late], [full[0]], [mid, late], [VOCAB - 1 if VOCAB - 1 not in full else late]):
        expected = vanilla_tokens(target, prompt, max_new, stop_ids=stops)
        cut = min((firsts[s] for s in stops if s in firsts), default=None)
        assert expected == list(full if cut is None else full[: cut + 1])
        for config, drafter in ((oracle.config(), oracle), (InferConf(budget="fixed", method="eagle2", depth=4), None)):
            result = run(target, head, config, prompt, max_new, drafter=drafter, stop_ids=stops)
            assert result.tokens == expected, stops
            assert result.stop_reason == ("length" if cut is None else "stop")


def test_stream_receives_exactly_the_output():
    seed, prompt_len, max_new = CASES[2]
    target, head = target_and_head(seed)
    prompt, full = case(seed, prompt_len, max_new)
    oracle = oracle_drafter(list(prompt) + list(full), 4, branch=1, wrong_rate=0.3, vocab=VOCAB)
    for stops in (None, [full[17]]):
        chunks = []
        result = run(target, head, oracle.config(), prompt, max_new, drafter=oracle, stream=chunks.append,
                     stop_ids=stops)
        assert [t for c in chunks for t in c] == result.tokens
        assert all(chunks)
        # The prefill token alone, then accepted + 1 per cycle (the last chunk cut at the stop or length limit).
        sizes = [1] + [c.accepted + 1 for c in result.cycles]
        assert [len(c) for c in chunks[:-1]] == sizes[:-1] and len(chunks[-1]) <= sizes[-1]
        oracle.log.clear()
    chunks = []
    result = run(target, None, InferConf(method="vanilla"), prompt, 9, stream=chunks.append)
    assert chunks == [[t] for t in full[:9]] and result.tokens == list(full[:9])


def test_cycles_count_their_head_forwards():
    """A fixed-depth EAGLE-2 cycle pays one head forward per level: depth - 1 fed levels, plus, from the second
    cycle on, the forward over the previous cycle's accepted tokens (the prompt's is prefill); vanilla pays none."""
    seed, prompt_len, max_new = CASES[0]
    target, head = target_and_head(seed)
    prompt, _ = case(seed, prompt_len, max_new)
    result = run(target, head, InferConf(method="eagle2", depth=3, top_k=2, total_tokens=4), prompt, 12)
    assert [c.head_forwards for c in result.cycles] == [2] + [3] * (len(result.cycles) - 1)
    vanilla = run(target, None, InferConf(method="vanilla"), prompt, 4)
    assert {c.head_forwards for c in vanilla.cycles} == {0}


def test_draft_vocabulary_head_matches_vanilla():
    """A head drafting from a 6-id subset (top_k 8 > 6: some candidates have probability 0) stays lossless."""
    seed, prompt_len, max_new = CASES[0]
    target, _ = target_and_head(seed)
    prompt, expected = case(seed, prompt_len, max_new)
    ids = sorted(set(expected), key=expected.index)[:4] + [0, 1]
    config = DraftHeadConfig.of_target(target)
    config.draft_vocab_size = len(ids)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(11)
        head = DraftHead(config, target).eval()
    head.set_draft_vocab(torch.tensor(ids))
    for decode in (InferConf(method="eagle2", depth=4, top_k=8, total_tokens=20), InferConf(method="eagle1"),
                   InferConf(method="chain", depth=3)):
        result = run(target, head, decode, prompt, max_new)
        assert result.tokens == list(expected), decode


def test_full_vocabulary_drafting_of_a_draft_vocabulary_head(tmp_path):
    """infer.draft_vocab=full: a head saved with a 6-id draft vocabulary scores all 96 ids (finite logits everywhere)
    and stays lossless; an eagle3 head, whose own LM head covers its draft vocabulary only, is refused in one line."""
    from eagle_infer.decoding.build import build_head
    from eagle_infer.errors import EagleError

    seed, prompt_len, max_new = CASES[0]
    target, _ = target_and_head(seed)
    prompt, expected = case(seed, prompt_len, max_new)
    ids = [0, 1, 2, 3, 4, 5]
    random_head(target, seed=11, draft_vocab=torch.tensor(ids)).save(tmp_path / "eagle", torch.float32)
    decode = InferConf(method="eagle2", budget="fixed", depth=4, top_k=8, total_tokens=20, head=str(tmp_path / "eagle"))
    assert build_head(decode, target).draft_vocab is not None
    runner = build_head(replace(decode, draft_vocab="full"), target)
    assert runner.draft_vocab is None and runner.step.vocab_weight.shape[0] == VOCAB
    feature = torch.randn(1, runner.config.hidden_size, dtype=target.dtype)
    assert torch.isfinite(runner.logits(feature)).all()  # every id can be drafted, not only the 6
    assert run(target, runner, decode, prompt, max_new).tokens == list(expected)
    deep_target, eagle3_head, _, _ = eagle3_case()
    eagle3_head.save(tmp_path / "eagle3", torch.float32)
    with pytest.raises(EagleError) as error:
        build_head(replace(decode, head=str(tmp_path / "eagle3"), draft_vocab="full"), deep_target)
    message = str(error.value)
    assert "\n" not in message and "eagle3" in message and f"{eagle3_head.config.draft_vocab_size}-id" in message


@lru_cache(maxsize=None)
def eagle3_case(path: str = "eager"):
    """An 8-layer tiny target, a prompt with a varied greedy continuation (30 tokens), and a random EAGLE-3-block head
    (fused layers 1, 3, 4; its own norm and LM head, starting from the target's) over a draft vocabulary of the
    continuation's first 8 distinct ids and 2 others: an 8-wide tree level holds most of that vocabulary, so the
    target's next token is often drafted and acceptance is exercised. Returns (target, head, prompt, expected)."""
    if path == "compiled":
        target, head, prompt, expected = eagle3_case()
        return compile_target(target), head, prompt, expected
    target = scaled_target(vocab=VOCAB, layers=8, seed=6, name="tiny-deep-8")
    for attempt in range(20):
        prompt = random.Random(600 + attempt).choices(range(VOCAB), k=9)
        expected = vanilla_tokens(target, prompt, 30)
        if distinct_enough(expected):
            break
    firsts = sorted(set(expected), key=expected.index)[:8]
    ids = firsts + [i for i in range(VOCAB) if i not in firsts][:2]
    return target, random_head(target, seed=6, block="eagle3", draft_vocab=torch.tensor(ids)), prompt, expected


@pytest.mark.parametrize("path", PATHS)
def test_random_eagle3_block_head_matches_vanilla(path):
    """EAGLE-3's block drafts through every drafter, hybrids and batches included: float32 greedy output equals
    vanilla's, eager and compiled; drafts of the head itself (not only lookup's) are accepted."""
    target, head, prompt, expected = eagle3_case(path)
    assert head.config.block == "eagle3" and head.config.feature_layers == [1, 3, 4]
    configs = [HEAD_CONFIGS[name] for name in ("chain-d5", "eagle1-default", "eagle2-default",
                                               "eagle2-d3-k4-t10-conf", "eagle2-d2-k10-t100")]
    configs += [InferConf(method="eagle2", depth=4, top_k=4, total_tokens=16, lookup=True), InferConf(method="eagle2")]
    if path == "compiled":  # the compiled target's fused features; every tree shape would recompile (~15 s each)
        configs = [HEAD_CONFIGS["eagle2-default"]]
    accepted = {}
    for config in configs:
        result = run(target, head, config, prompt, 30)
        assert result.tokens == list(expected), config
        accepted[config.method, config.lookup] = accepted.get((config.method, config.lookup), 0) + sum(
            c.accepted for c in result.cycles)
    assert accepted["eagle2", False] > 0  # the head's own drafts were accepted: the check exercised acceptance
    if path == "compiled":
        return
    batch = Engine(target, head, InferConf(budget="fixed", method="eagle2")).generate_batch(
        [list(prompt), list(prompt[:4])], 30, batch_size=2)
    assert batch.results[0].tokens == list(expected)
    assert batch.results[1].tokens == vanilla_tokens(eagle3_case()[0], list(prompt[:4]), 30)


@lru_cache(maxsize=None)
def dflash_case(path: str = "eager"):
    """eagle3_case's 8-layer target, prompt and continuation, and a random DFlash drafter (blocks of 6, fused layers
    1, 3, 4) over a draft vocabulary of the continuation's first 4 distinct ids and 2 others, so that its drafts
    are sometimes the target's. Returns (target, head, prompt, expected)."""
    target, _, prompt, expected = eagle3_case(path)
    firsts = sorted(set(expected), key=expected.index)[:4]
    ids = firsts + [i for i in range(VOCAB) if i not in firsts][:2]
    head = random_dflash_head(eagle3_case()[0], VOCAB - 1, seed=7, block_size=6, draft_vocab=torch.tensor(ids))
    return target, head, prompt, expected


DFLASH_CONFIGS = {
    "dflash": InferConf(method="dflash", budget="fixed"),
    "dflash-d2": InferConf(method="dflash", budget="fixed", depth=2),
    "dflash-auto": InferConf(method="dflash"),
    "dflash-tree": InferConf(method="dflash-tree", budget="fixed", top_k=3, total_tokens=12),
    "dflash-tree-auto": InferConf(method="dflash-tree", top_k=3),
    "dflash+lookup": InferConf(method="dflash", lookup=True),
    "dflash-tree+lookup": InferConf(method="dflash-tree", budget="fixed", top_k=3, total_tokens=16, lookup=True),
}


@pytest.mark.parametrize("path", PATHS)
def test_random_dflash_drafter_matches_vanilla(path):
    """The block drafter (one forward a cycle) through its chain, its tree, their hybrids and the auto budget: float32
    greedy output equals vanilla's, alone and in a batch of rows of different lengths, eager and compiled (there the
    fixed chain and a fixed hybrid, alone: an auto budget's cost model would time a compiled forward of every
    size); the drafter's own drafts are accepted."""
    target, head, prompt, expected = dflash_case(path)
    names = list(DFLASH_CONFIGS) if path == "eager" else ["dflash", "dflash-tree+lookup"]
    accepted = 0
    for name in names:
        config = DFLASH_CONFIGS[name]
        result = run(target, head, config, prompt, 30)
        assert result.tokens == list(expected), name
        forwards = [c.head_forwards for c in result.cycles]  # the block, then a feed and the block; copies alone: 0
        assert forwards[0] == 1 and set(forwards[1:]) <= ({0, 2} if config.lookup else {2}), (name, forwards)
        accepted += 0 if config.lookup else sum(c.accepted for c in result.cycles)
        if path == "compiled":
            continue
        engine = Engine(target, head, config, cost=measure_cost(config, target, head))
        rows = engine.generate_batch([list(prompt), list(prompt[:4]), list(prompt[3:])], 30, batch_size=2).results
        assert [r.tokens for r in rows] == [list(expected)] + [vanilla_tokens(eagle3_case()[0], p, 30)
                                                               for p in (list(prompt[:4]), list(prompt[3:]))], name
    assert accepted > 0


@pytest.mark.parametrize("choose", [False, True])
def test_dflash_context_cache_holds_the_committed_tokens_states(monkeypatch, choose):
    """After cycles of a batch (lookup's copies accepted several tokens at a time, the rows at their own lengths)
    every row's context cache holds exactly the drafter's context keys and values of the target's fused states over
    the row's committed tokens, one position each: extended by the accepted tokens' states, never a drafted one's.
    With `choose` (an auto budget's hybrid choosing its way, copy_choice) some cycles draft both rows' copies alone
    and feed nothing: the states they committed wait and are fed, joined, before the next block forward."""
    target, head, prompt, expected = dflash_case()
    held = []  # the context cache after each feed while both rows decode (row b: prompts[b])
    feed = cycle_module.feed_pending

    def feeding(state, models):
        feed(state, models)
        if state.head_cache.batch == 2:
            held.append(state.head_cache.copy())

    monkeypatch.setattr(cycle_module, "feed_pending", feeding)
    prompts = [list(prompt), list(prompt[2:])]
    config, cost = DFLASH_CONFIGS["dflash-tree+lookup"], None
    if choose:  # verification dear beside a draft forward: the copies alone pay where they are found
        config, cost = InferConf(method="dflash", lookup=True), CostModel({}, [1, 64], [10.0, 80.0], 5.0)
    results = Engine(target, head, config, cost=cost).generate_batch(prompts, 30).results
    assert max(c.accepted for r in results for c in r.cycles) >= 2 and len(held) >= 4
    if choose:  # cycles of both rows' copies alone, each followed by a feed of more than one cycle's tokens
        assert sum(c.head_forwards == 0 and c.batch == 2 for c in results[0].cycles) >= 2
    with torch.inference_mode():
        for cache in (held[len(held) // 2], held[-1]):
            assert cache.lengths[0] - len(prompts[0]) != cache.lengths[1] - len(prompts[1])  # rows apart
            for b, (p, r) in enumerate(zip(prompts, results)):
                n = cache.lengths[b]
                sequence = (p + r.tokens)[:n]
                _, fused = target.forward(torch.tensor([sequence]), torch.arange(n)[None], target.new_cache(1, n),
                                          feature_layers=tuple(head.config.feature_layers))
                fresh = head.context_kv(fused, torch.arange(n)[None])
                torch.testing.assert_close(cache.store[:, :, b, :, :n], torch.stack((fresh.keys, fresh.values))[:, :, 0],
                                           rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("input_mode", ["feature+token", "feature", "token"])
def test_heads_of_every_input_mode_match_vanilla(input_mode):
    """A head trained on unshifted tokens is fed each node's parent's token (the feeder's choice, made once), one fed
    no token or no feature drafts alike: float32 greedy output equals vanilla's with chains, static and dynamic
    trees (confidence expansion without rerank included)."""
    seed, prompt_len, max_new = CASES[1]
    target, _ = target_and_head(seed)
    head = random_head(target, seed=seed, input_mode=input_mode)
    prompt, expected = case(seed, prompt_len, max_new)
    for name in ("chain-d5", "eagle1-default", "eagle2-default", "eagle2-d4-k5-t7-conf-norerank"):
        assert run(target, head, HEAD_CONFIGS[name], prompt, max_new).tokens == list(expected), (input_mode, name)


@pytest.mark.parametrize("arch,seed", [("qwen2", 0), ("mistral", 3), ("qwen3", 1), ("llama3", 2)])
def test_other_architectures_match_vanilla(arch, seed):
    target, head = target_and_head(seed, arch)
    family = arch.rstrip("3") if arch == "llama3" else arch
    assert target.config.model_type == family and type(head.layers[0]).__name__.lower().startswith(family)
    assert target.decoder is not None  # every layer a lean step (Qwen3's with its q/k norms)
    for prompt_len, max_new in ((7, 30), (25, 21)):
        prompt, expected = case(seed, prompt_len, max_new, arch)
        for config in (InferConf(method="eagle2", depth=4, top_k=4, total_tokens=16), InferConf(method="eagle1"),
                       InferConf(method="chain", depth=3), InferConf(method="lookup", budget="fixed"),
                       InferConf(method="eagle2", depth=4, top_k=4, total_tokens=16, lookup=True)):
            assert run(target, head if config.method != "lookup" else None, config, prompt, max_new).tokens == list(expected)
        oracle = oracle_drafter(list(prompt) + list(expected), 5, branch=2, wrong_rate=0.3, vocab=VOCAB)
        result = run(target, head, oracle.config(), prompt, max_new, drafter=oracle)
        assert result.tokens == list(expected)
        check_oracle_cycles(result, oracle)
        assert result.tau > 2


def test_caches_after_generation_equal_a_fresh_forward(monkeypatch):
    """After many draft/verify/compact cycles the committed target and head caches hold exactly what one causal
    pass over the committed sequence computes."""
    seed, prompt_len, max_new = CASES[0]
    target, head = target_and_head(seed)
    prompt, full = case(seed, prompt_len, max_new)
    reference = list(prompt) + list(full)
    made = {}

    def capture(owner, key):
        original = owner.new_cache

        def new_cache(*args):
            made[key] = original(*args)
            return made[key]

        monkeypatch.setattr(owner, "new_cache", new_cache)

    capture(target, "target")
    capture(HeadRunner, "head")
    oracle = oracle_drafter(reference, 5, branch=2, wrong_rate=0.4, vocab=VOCAB)
    for config, drafter in ((oracle.config(), oracle), (InferConf(budget="fixed", method="eagle2", depth=3), None)):
        result = run(target, head, config, prompt, max_new, drafter=drafter)
        assert result.tokens == list(full)
        tc, hc = made["target"], made["head"]
        n = tc.length
        assert len(prompt) + len(full) - 1 <= n <= len(reference)
        with torch.inference_mode():
            fresh = target.new_cache(1, n)
            _, feats = target.forward(torch.tensor([reference[:n]]), torch.arange(n)[None], fresh)
            assert_cache_close(tc, fresh, n)
            # The head's committed pairs (feature f_i, token x_{i+1}) for i < its length.
            m = hc.length
            assert 0 < m <= n
            runner = HeadRunner(head, target)
            fresh_head = runner.new_cache(1, m)
            runner(feats[:, :m], torch.tensor([reference[1 : m + 1]]), torch.arange(m)[None], fresh_head,
                 causal_mask(0, m, feats.dtype, feats.device))
            assert_cache_close(hc, fresh_head, m)


def assert_cache_close(cache: KVCache, fresh: KVCache, n: int) -> None:
    """Every layer's first n positions of `cache` equal `fresh`'s (which holds exactly n)."""
    for a, b in zip(cache.k + cache.v, fresh.k + fresh.v):
        torch.testing.assert_close(a[..., :n, :], b, rtol=1e-4, atol=1e-4)


def test_kv_cache_keep_paths_gathers_and_commits_every_row():
    """keep_paths moves each row's kept offsets to contiguous positions after its own length, in every layer at once,
    and leaves everything before that alone (slots past a row's count land past its new length, where nothing is
    read before a forward writes again)."""
    cache = KVCache(2, 2, 3, 4, 16, torch.float32, "cpu")
    pos = torch.arange(16.0)[None, None, :, None]
    for layer in range(2):
        cache.k[layer] += 1000 * layer + pos + 100 * torch.arange(2.0)[:, None, None, None]
        cache.v[layer] -= 1000 * layer + pos
    cache.truncate([5, 3])
    kept = torch.tensor([[0, 2, 3, 7], [0, 1, 9, 9]])
    cache.keep_paths(kept, [4, 2], torch.tensor([[4], [2]]))
    assert cache.lengths == [9, 5] and cache.length_column().tolist() == [[9], [5]]
    expected = [[0, 1, 2, 3, 4, 5, 7, 8, 12], [0, 1, 2, 3, 4]]  # each row's new length
    for layer_i in range(2):
        for b in range(2):
            for p, src in enumerate(expected[b]):
                assert torch.all(cache.k[layer_i][b, :, p] == 1000 * layer_i + src + 100 * b)
                assert torch.all(cache.v[layer_i][b, :, p] == -(1000 * layer_i + src))
    cache.truncate(4)
    assert cache.length == 4 and cache.length_column().tolist() == [[4], [4]]


def reference_walk(tokens: list[int], parents: list[int], best: list[int]) -> tuple[list[int], int, list[int]]:
    """Greedy acceptance by walking down one tree: (path, bonus, tested), the definition `follow` down the target's
    argmax batches."""
    children = [[] for _ in range(len(tokens) + 1)]
    for i, p in enumerate(parents):
        children[p + 1].append(i)
    path, tested, row = [], [], 0
    while True:
        tested += children[row]
        hit = next((c for c in children[row] if tokens[c] == best[row]), None)
        if hit is None:
            return path, best[row], tested
        path.append(hit)
        row = hit + 1


def test_batched_greedy_verifier_equals_walking_each_tree():
    """Random padded breadth-first trees (repeated sibling tokens, empty and full rows, long chains) in one batch:
    the tensor verifier gives each row exactly the walk's path and bonus, with the root reached before the path
    (what the commit sorts), and the host's tested_nodes the walk's tested nodes; the full rows give the same
    without sizes (sizes=None, as for TreeBatch.full)."""
    from eagle_infer.trees.tree import ancestor_masks
    from eagle_infer.decoding.verify import argmax, follow, tested_nodes

    def greedy_accept(tokens, parents, sizes, allowed, logits, distinct=False):  # the engine's greedy acceptance
        return follow(tokens, parents, sizes, allowed, argmax(logits), distinct)

    gen = torch.Generator().manual_seed(4)
    vocab = 3  # few tokens: siblings often repeat and logits often pick a drafted token
    deepest = repeats = 0
    for n in (1, 5, 17, 40):
        rows = []
        for b in range(6):
            size = [0, n, 1, n, n // 2, n][b]
            parents, level = [], [-1]  # breadth-first: each node's parent is on the level above, in any order
            while len(parents) < size:
                width = min(size - len(parents), int(torch.randint(1, 5, (), generator=gen)))
                start = len(parents)
                parents += [level[int(torch.randint(0, len(level), (), generator=gen))] for _ in range(width)]
                level = list(range(start, len(parents)))
            if b == 3:
                parents = list(range(-1, size - 1))  # a chain as deep as the tree
            rows.append((parents, torch.randint(0, vocab, (size,), generator=gen).tolist()))
        parents = torch.tensor([p + [-1] * (n - len(p)) for p, _ in rows])
        tokens = torch.tensor([t + [0] * (n - len(t)) for _, t in rows])
        sizes = torch.tensor([len(p) for p, _ in rows])
        logits = torch.randn(len(rows), n + 1, vocab, generator=gen)
        chain = rows[3][1]
        for row in range(min(n, 4)):  # the chain row's target agrees with its first four tokens
            logits[3, row, chain[row]] += 10
        g = greedy_accept(tokens, parents, sizes, ancestor_masks(parents), logits)
        best = logits.argmax(-1).tolist()
        assert g.reached[:, 0].all() and torch.equal(g.reached[:, 1:], g.on_path)
        for b, (p, t) in enumerate(rows):
            path, bonus, tested = reference_walk(t, p, best[b])
            assert g.on_path[b].nonzero()[:, 0].tolist() == path, (n, b)
            assert int(g.accepted[b]) == len(path) and int(g.bonus[b]) == bonus
            assert tested_nodes(path, p) == tested  # what the host reads off the path and the parents
        deepest = max(deepest, int(g.accepted.max()))
        full = [b for b, (p, _) in enumerate(rows) if len(p) == n]  # rows of n nodes: sizes may be left out
        alone = greedy_accept(tokens[full], parents[full], None, ancestor_masks(parents[full]), logits[full])
        for field in ("accepted", "bonus", "on_path", "reached"):
            assert torch.equal(getattr(alone, field), getattr(g, field)[full]), (n, field)
        # rows whose siblings are distinct: the same when the verifier is told so (TreeBatch.distinct)
        distinct = [b for b, (p, t) in enumerate(rows) if len(set(zip(p, t))) == len(p)]
        told = greedy_accept(tokens[distinct], parents[distinct], sizes[distinct], ancestor_masks(parents[distinct]),
                             logits[distinct], distinct=True)
        for field in ("accepted", "bonus", "on_path", "reached"):
            assert torch.equal(getattr(told, field), getattr(g, field)[distinct]), (n, field)
        repeats += len(rows) - len(distinct)
    assert deepest >= 3 and repeats > 0  # some rows accept deep paths; some repeat sibling tokens


@pytest.mark.parametrize("path", PATHS)
def test_padded_trees_match_vanilla_in_few_widths(path, monkeypatch):
    """pad_trees=on: every verification forward is padded to a bucket width (tree.padded_width) and the output is
    still vanilla's; the padding slots are never accepted. Without padding the same drafters verify more widths."""
    from eagle_infer.trees.tree import padded_width

    seed, prompt_len, max_new = CASES[1]
    target, head = target_and_head(seed, path=path)
    prompt, expected = case(seed, prompt_len, max_new)
    widths: list[int] = []
    forward = type(target).forward

    def recording(self, input_ids, *args, **kwargs):
        widths.append(input_ids.shape[1])
        return forward(self, input_ids, *args, **kwargs)

    monkeypatch.setattr(type(target), "forward", recording)
    seen = {}
    for pad in ("on", "off"):
        oracle = oracle_drafter(list(prompt) + list(expected), 6, branch=2, wrong_rate=0.5, vocab=VOCAB)
        configs = [(replace(oracle.config(), pad_trees=pad), oracle),
                   (InferConf(method="eagle2", depth=4, top_k=4, total_tokens=20, pad_trees=pad), None)]
        seen[pad] = set()
        for config, drafter in configs:
            widths.clear()
            result = run(target, head, config, prompt, max_new, drafter=drafter)
            assert result.tokens == list(expected), (pad, config.total_tokens)
            if drafter is not None:
                check_oracle_cycles(result, oracle)  # the padding slots took no acceptance away, nor added any
            verified = widths[1:]  # after the prefill: root + nodes per cycle
            assert len(verified) == len(result.cycles)
            if pad == "on":
                cap = tree_budget(config)
                assert all(w - 1 == padded_width(c.tree_size, cap) for w, c in zip(verified, result.cycles))
                assert {w - 1 for w in verified} <= {1, 2, 4, 8, 16, 32, cap}
            seen[pad] |= {(config.total_tokens, w) for w in verified}
    assert len(seen["on"]) < len(seen["off"])
