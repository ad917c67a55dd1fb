"""Prompt lookup drafting and hybrid trees: transformers' matching rule, tree merging, and losslessness (greedy equal
to vanilla, batches equal to their batch of one, exact sampling on merged trees); bad lookup settings are refused
before any work."""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from functools import lru_cache

import pytest
import torch

from eagle_infer.decoding.methods import tree_budget, tree_size
from eagle_infer.config import InferConf, LookupConf
from eagle_infer.trees.cost import CostModel
from eagle_infer.head.draft_head import random_head
from eagle_infer.decoding.engine import Engine
from eagle_infer.trees.lookup import CopyRates, continuations, copy_batch
from eagle_infer.trees.merge import cut, merge
from eagle_infer.trees.tree import DraftTree, TreeBatch
from eagle_infer.config import SamplingParams
from tests.oracles import (  # noqa: F401 (one_thread is an autouse fixture; distinct_checked a fixture)
    children_of, distinct_checked, merge_oracle, rows_of, one_thread, oracle_drafter, scaled_target, vanilla_tokens, verify_sampling,
)
from tests.test_engine_errors import one_line_error
from tests.test_engine_sampling import (
    GENERATED, N_SAMPLES, exact_batched_outcomes, exact_joint, exact_outcomes, make_tree, random_rows, random_tree,
    same_distribution,
    same_outcomes, small, target_outcomes,
)

VOCAB = 96


def tree_of(parents, tokens, probs, copied=None) -> DraftTree:
    t = make_tree(parents, tokens)
    return DraftTree(t.tokens, t.parents, t.depths, torch.tensor(probs, dtype=torch.float32),
                     None if copied is None else torch.tensor(copied))


def log_values(batch: TreeBatch) -> torch.Tensor:
    """A TreeBatch's path log-values (-inf on padding), as drafters hand them to merge."""
    return batch.values().log()


def merge_trees(trees: list[DraftTree], budget: int, distinct: bool = False) -> DraftTree:
    """eagle_infer.trees.merge over one row: the trees merged in order, each valued by its path values (the last
    merge, or a tree alone, cut to the budget), as a DraftTree. distinct: the first tree's siblings are distinct
    (merge's path for the engine's head trees)."""
    batches = [TreeBatch.of_trees([t], "cpu") for t in trees]
    merged, values = replace(batches[0], distinct=distinct), log_values(batches[0])
    for i, more in enumerate(batches[1:], start=2):
        done = merge(merged, values, more, log_values(more), budget if i == len(batches) else merged.width + more.width)
        merged, values = done.tree, done.values()
    return cut(merged, budget).row(0)


def paths(tree: DraftTree) -> set[tuple[int, ...]]:
    """Every node as the token path from the root."""
    toks, pars, out = tree.tokens.tolist(), tree.parents.tolist(), []
    for i, p in enumerate(pars):
        out.append((out[p] if p >= 0 else ()) + (toks[i],))
    return set(out)


def check_well_formed(tree: DraftTree) -> None:
    """Parents before children, depths consistent, siblings distinct."""
    pars, depths, toks = tree.parents.tolist(), tree.depths.tolist(), tree.tokens.tolist()
    for i, p in enumerate(pars):
        assert p < i and depths[i] == (1 if p < 0 else depths[p] + 1)
    for kids in children_of(tree):
        assert len({toks[k] for k in kids}) == len(kids)


# ----------------------------------------------------------------------------------------------------------------
# Matching and merging.


def test_first_continuation_is_transformers_own():
    """Equal settings, equal proposals: our first continuation is what transformers' prompt lookup proposes."""
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    rng = random.Random(0)
    checked = 0
    for trial in range(300):
        context = rng.choices(range(rng.choice([3, 6, 12])), k=rng.randint(1, 60))
        conf = LookupConf(max_ngram=rng.randint(1, 4), num_tokens=rng.randint(1, 12))
        hf = PromptLookupCandidateGenerator(num_output_tokens=conf.num_tokens, max_matching_ngram_size=conf.max_ngram,
                                            max_length=10_000)
        ids, _ = hf.get_candidates(torch.tensor([context]))
        theirs = ids[0, len(context):].tolist()
        ours = continuations(context, conf)
        assert (ours[0] if ours else []) == theirs, (context, conf)
        checked += bool(theirs)
    assert checked > 150


def test_continuations_longest_match_then_branches():
    ctx = [1, 2, 3, 9, 2, 3, 8, 7, 1, 2, 3]
    assert continuations(ctx, LookupConf(max_ngram=3, num_tokens=2)) == [[9, 2]]  # the 3-gram [1, 2, 3]
    assert continuations(ctx, LookupConf(max_ngram=2, num_tokens=3)) == [[9, 2, 3]]  # leftmost [2, 3]
    assert continuations(ctx, LookupConf(max_ngram=2, num_tokens=3, branches=3)) == [[9, 2, 3], [8, 7, 1]]
    # Shorter n-grams add branches once the longest is used up.
    assert continuations([1, 2, 3, 9, 4, 3, 8, 7, 2, 3], LookupConf(num_tokens=3, branches=3)) == [[9, 4, 3], [8, 7, 2]]
    assert continuations(ctx, LookupConf(max_ngram=3, min_ngram=3, num_tokens=4, branches=5)) == [[9, 2, 3, 8]]
    assert continuations([4, 5, 6], LookupConf()) == []  # no earlier occurrence
    assert continuations([4], LookupConf()) == []
    # A continuation that is a prefix of one already found adds no path and is skipped.
    assert continuations([5, 6, 7, 5, 6, 7, 5], LookupConf(max_ngram=1, num_tokens=2, branches=3)) == [[6, 7]]
    # match "recent": the latest occurrence first, then earlier ones.
    assert continuations(ctx, LookupConf(max_ngram=2, num_tokens=3, match="recent")) == [[8, 7, 1]]
    assert continuations(ctx, LookupConf(max_ngram=2, num_tokens=3, branches=3, match="recent")) == [[8, 7, 1],
                                                                                                      [9, 2, 3]]
    assert continuations([1, 1, 1], LookupConf(num_tokens=3, match="recent")) == [[1]]  # (overlapping the suffix)


def test_merge_dedupes_prefixes_and_keeps_the_best_values():
    head = tree_of([-1, -1, 0, 0, 1], [4, 7, 5, 6, 2], [0.6, 0.3, 0.5, 0.2, 0.9])
    chain = tree_of([-1, 0, 1, 2], [4, 5, 9, 9], [0.8, 0.8, 0.8, 0.8], [True] * 4)
    for distinct in (False, True):  # (the general cut, and the engine's for head trees)
        merged = merge_trees([head, chain], 100, distinct)
        check_well_formed(merged)
        assert paths(merged) == paths(head) | paths(chain)
        assert len(merged) == 5 + 2  # (4,) and (4, 5) are shared
        assert merged.tokens.tolist() == [4, 7, 5, 6, 2, 9, 9]  # the head's nodes, then the chain's it lacks
        assert merged.copied.tolist() == [True, False, True, False, False, True, True]
        assert merged.probs.tolist() == pytest.approx([0.6, 0.3, 0.5, 0.2, 0.9, 0.8, 0.8])  # the first tree's own
        # Values, the higher of the trees': (4,) .8, (7,) .3, (4,5) .64, (4,6) .12, (7,2) .27, (4,5,9) .512,
        # (4,5,9,9) .4096.
        cut = merge_trees([head, chain], 5, distinct)
        check_well_formed(cut)
        assert paths(cut) == {(4,), (7,), (4, 5), (4, 5, 9), (4, 5, 9, 9)}
        assert paths(merge_trees([head, chain], 3, distinct)) == {(4,), (4, 5), (4, 5, 9)}
    # A head tree alone comes back unchanged; no trees give an empty tree.
    alone = merge_trees([head], 5)
    assert alone.tokens.tolist() == head.tokens.tolist() and alone.parents.tolist() == head.parents.tolist()
    assert not alone.copied.any()


def same_tree(tree: DraftTree, oracle: DraftTree) -> None:
    """Node for node the oracle's tree (copied flags: where the oracle has them)."""
    assert tree.tokens.tolist() == oracle.tokens.tolist() and tree.parents.tolist() == oracle.parents.tolist()
    assert tree.depths.tolist() == oracle.depths.tolist() and tree.probs.tolist() == oracle.probs.tolist()
    assert tree.copied.tolist() == (oracle.copied.tolist() if oracle.copied is not None else [False] * len(oracle))


def random_chains(gen: torch.Generator, count: int) -> list[DraftTree]:
    """`count` copied chains of 1..5 tokens < 6, prob 0.7 each."""
    return [tree_of(list(range(-1, n - 1)), torch.randint(0, 6, (n,), generator=gen).tolist(), [0.7] * n, [True] * n)
            for n in torch.randint(1, 6, (count,), generator=gen).tolist()]


def test_merged_random_trees_are_closed_and_distinct():
    """The batched merge on random head trees and copied chains: closed, distinct, node for node the per-row
    oracle's union cut to the budget (tests/oracles.merge_oracle), by both of merge's cuts."""
    gen = torch.Generator().manual_seed(1)
    for _ in range(40):
        head = random_tree(gen, 6, 12)
        head = DraftTree(head.tokens, head.parents, head.depths, torch.rand(len(head), generator=gen))
        chains = random_chains(gen, 1 + int(torch.randint(0, 2, (), generator=gen)))  # (one: merge's first cut)
        budget = int(torch.randint(1, 16, (), generator=gen))
        union = paths(head) | set().union(*map(paths, chains))
        oracle = merge_oracle([head] + chains, [log_values(TreeBatch.of_trees([t], "cpu"))[0].tolist()
                                                for t in [head] + chains], budget)
        for distinct in (False, True):
            merged = merge_trees([head] + chains, budget, distinct)
            check_well_formed(merged)
            same_tree(merged, oracle)
            assert len(merged) == min(budget, len(union)) and paths(merged) <= union


def ranked(values: torch.Tensor) -> list[float]:
    """A row's finite values, highest first."""
    return [x for x in torch.sort(values, descending=True).values.tolist() if x > float("-inf")]


def test_merge_with_a_count_keeps_that_many():
    """merge(..., nodes=f) over rows of unequal trees: the union cut to min(budget, f(values)) nodes, node for node
    (how the hybrid drafter takes an auto budget's count); f sees the union's values of its nodes (-inf elsewhere)."""
    gen = torch.Generator().manual_seed(2)
    for _ in range(30):
        heads = [random_tree(gen, 6, 12) for _ in range(2)]
        heads = [DraftTree(h.tokens, h.parents, h.depths, torch.rand(len(h), generator=gen)) for h in heads]
        first, second = TreeBatch.of_trees(heads, "cpu"), TreeBatch.of_trees(random_chains(gen, 2), "cpu")
        budget, count = int(torch.randint(2, 16, (), generator=gen)), int(torch.randint(1, 16, (), generator=gen))
        seen = []
        once = merge(first, log_values(first), second, log_values(second), budget,
                     lambda values: seen.append(values) or count).tree
        direct = merge(first, log_values(first), second, log_values(second), min(budget, count)).tree
        for a, b in zip(rows_of(once), rows_of(direct)):
            same_tree(a, b)
        everything = merge(first, log_values(first), second, log_values(second), 100).values()
        assert [ranked(row) for row in seen[0]] == [ranked(row) for row in everything]


def test_sampling_exact_on_merged_trees():
    """Sequential rejection (the per-node oracle and the engine's batched sampler) over a merged tree (head tree + copied chains sharing prefixes with it) emits exactly the
    target's distribution: every outcome's probability, enumerated exactly, equals the target's own."""
    gen = torch.Generator().manual_seed(5)
    for _ in range(20):
        head = random_tree(gen, 5, 8)
        chain = tree_of([-1, 0, 1], torch.randint(0, 5, (3,), generator=gen).tolist(), [0.9] * 3, [True] * 3)
        merged = merge_trees([head, chain], int(torch.randint(2, 12, (), generator=gen)))
        probs = random_rows(len(merged) + 1, 5, gen, 0.2)
        want = target_outcomes(merged, probs)
        assert same_outcomes(exact_outcomes(verify_sampling, merged, probs), want)
        assert same_outcomes(exact_batched_outcomes(merged, probs), want)


def test_copy_rates_count_tested_copied_nodes():
    rates = CopyRates(3)
    assert rates.rates(3) == [0.25, 0.625, 0.75]  # the prior: 1 - 0.75 / depth
    tree = tree_of([-1, -1, 0, 2], [4, 7, 5, 6], [0.5] * 4, [True, False, True, True])
    rates.update([0, 1, 2, 3], {0, 2}, tree.copied.tolist(), tree.depths.tolist(), tree.parents.tolist())  # depth 1 hit, depth 2 hit, depth 3 missed; node 1 not copied
    assert rates.rates(3) == pytest.approx([1.5 / 3, 2.25 / 3, 1.5 / 3])  # (hits + 2 prior) / (tries + 2)
    # Copied siblings exclude one another: tested together they are one try, a hit if one was accepted.
    siblings = CopyRates(3)
    fork = tree_of([-1, -1, -1, 0], [4, 7, 5, 6], [0.5] * 4, [True, True, True, True])
    siblings.update([0, 1, 2, 3], {0}, fork.copied.tolist(), fork.depths.tolist(), fork.parents.tolist())
    assert siblings.rates(2) == pytest.approx([1.5 / 3, 1.25 / 3])
    siblings.update([0, 1, 2], set(), fork.copied.tolist(), fork.depths.tolist(), fork.parents.tolist())
    assert siblings.rates(1) == pytest.approx([1.5 / 4])
    # ... and share their depth's rate: two continuations of one context, each half of it at depth 1.
    forked = copy_batch([[1, 2, 8, 1, 2, 9, 1, 2]], LookupConf(num_tokens=2, branches=2), [rates], "cpu").trees().row(0)
    assert forked.tokens.tolist() == [8, 9, 1, 1] and forked.parents.tolist() == [-1, -1, 0, 1]
    assert forked.probs.tolist() == pytest.approx([rates.rates(1)[0] / 2] * 2 + [rates.rates(2)[1]] * 2)
    found = copy_batch([[1, 2, 3, 1, 2]], LookupConf(num_tokens=3), [rates], "cpu")
    batch = found.trees()
    chain = batch.row(0)
    assert chain.tokens.tolist() == [3, 1, 2] and chain.parents.tolist() == [-1, 0, 1]
    assert chain.probs.tolist() == pytest.approx(rates.rates(3)) and chain.copied.all()
    assert torch.equal(found.values, batch.values())  # the host's path values are the device's, bit for bit
    torch.testing.assert_close(found.log_values, batch.values().log(), rtol=1e-15, atol=0)  # (the host's log)
    # Rows without a continuation are padding (one slot, depth 0); when no row has one, the same from constants.
    found = copy_batch([[1, 2, 3, 1, 2], [5, 6, 7]], LookupConf(num_tokens=3), [rates, CopyRates(3)], "cpu")
    batch = found.trees()
    assert batch.sizes.tolist() == [3, 0] and batch.depth == 3
    assert batch.tokens[1].tolist() == [0] * 3 and batch.parents[1].tolist() == [-1] * 3
    assert found.values[1].sum() == 0 and found.log_values[1].tolist() == [float("-inf")] * 3
    nothing = copy_batch([[5, 6, 7], [8]], LookupConf(num_tokens=3), [rates, CopyRates(3)], "cpu")
    empty = nothing.trees()
    assert (empty.width, empty.depth, empty.sizes.tolist(), nothing.values.tolist()) == (1, 0, [0, 0], [[0.0], [0.0]])
    assert nothing.log_values.tolist() == [[float("-inf")]] * 2
    for field in ("tokens", "parents", "depths", "probs", "copied"):
        assert getattr(empty, field).tolist() == getattr(batch, field)[1:, :1].expand(2, 1).tolist(), field


# ----------------------------------------------------------------------------------------------------------------
# The engine.


@lru_cache(maxsize=None)
def target_and_head(seed: int):
    target = scaled_target(vocab=VOCAB, seed=seed, name=f"tiny-lookup-{seed}")
    return target, random_head(target, seed=seed)


def copy_prompt(seed: int, length: int = 24) -> list[int]:
    """A random text said twice and begun a third time: the target continues by copying from it (tiny random models
    do copy an induction-like pattern only sometimes, so acceptance through lookup nodes is checked separately)."""
    text = random.Random(seed).choices(range(VOCAB), k=length)
    return text + text + text[: length // 3]


CONFIGS = {
    "lookup": InferConf(budget="fixed", method="lookup"),
    "lookup-3gram-branches": InferConf(budget="fixed", method="lookup", lookup_conf=LookupConf(max_ngram=3, num_tokens=6, branches=3)),
    "chain+lookup": InferConf(method="chain", depth=5, lookup=True, lookup_conf=LookupConf(num_tokens=5)),
    "eagle1+lookup": InferConf(method="eagle1", lookup=True),
    "eagle2+lookup": InferConf(method="eagle2", depth=3, top_k=4, total_tokens=12, lookup=True),
    "eagle2+lookup-tight": InferConf(method="eagle2", depth=2, top_k=4, total_tokens=4, lookup=True,
                                        lookup_conf=LookupConf(num_tokens=4, branches=2)),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_greedy_equals_vanilla(name, distinct_checked):
    config = CONFIGS[name]
    copied = 0
    for seed, prompt in ((2, copy_prompt(1)), (3, copy_prompt(2, 9)), (4, [7])):
        target, head = target_and_head(seed)
        expected = vanilla_tokens(target, prompt, 40)
        result = Engine(target, head if config.method != "lookup" else None, config).generate(prompt, 40)
        assert result.tokens == expected, (name, seed)
        for c in result.cycles:
            assert c.tree_size <= tree_budget(config) and c.lookup_size <= c.tree_size
            assert c.lookup_accepted <= c.accepted and sum(c.tested_hit) == c.accepted
        copied += sum(c.lookup_accepted for c in result.cycles)
    assert copied > 0
    assert distinct_checked  # every built-in drafter's trees claim distinct siblings, and have them


def test_long_copies_through_lookup_nodes():
    """An oracle head tree merged with lookup: where the target's output repeats itself, long paths are accepted
    through copied nodes (several copied tokens in one cycle), and the output stays the target's."""
    target, head = target_and_head(2)
    seen = 0
    for seed in range(4):
        prompt = copy_prompt(10 + seed)
        expected = vanilla_tokens(target, prompt, 48)
        oracle = oracle_drafter(list(prompt) + expected, 2, branch=1, wrong_rate=1.0, seed=seed, vocab=VOCAB)
        config = InferConf(method="eagle2", depth=1, top_k=1, total_tokens=oracle.max_nodes + 6, lookup=True,
                              lookup_conf=LookupConf(max_ngram=3, num_tokens=8))
        for drafter, cfg in ((oracle, config), (None, InferConf(budget="fixed", method="lookup", lookup_conf=config.lookup_conf))):
            result = Engine(target, head, cfg, drafter=drafter).generate(prompt, 48)
            assert result.tokens == expected
            seen += sum(c.lookup_accepted >= 2 for c in result.cycles)
    assert seen >= 4


@pytest.mark.parametrize("name", ["lookup", "eagle2+lookup", "eagle2+lookup-tight"])
def test_batch_equals_batch_of_one(name):
    target, head = target_and_head(5)
    config = CONFIGS[name]
    engine = Engine(target, head if config.method != "lookup" else None, config)
    prompts = [copy_prompt(i, n) for i, n in enumerate((3, 12, 1, 20, 7))]
    singles = [engine.generate(p, 30).tokens for p in prompts]
    assert singles == [vanilla_tokens(target, p, 30) for p in prompts]
    batch = engine.generate_batch(prompts, 30, batch_size=3)
    assert [r.tokens for r in batch.results] == singles
    sampling = SamplingParams(temperature=0.9)
    batch = engine.generate_batch(prompts, 20, sampling, seed=4, batch_size=2)
    assert [r.tokens for r in batch.results] == [engine.generate(p, 20, sampling, seed=4 + i).tokens
                                                 for i, p in enumerate(prompts)]


def test_batch_token_budget_cuts_merged_trees():
    target, head = target_and_head(5)
    prompts = [copy_prompt(i, 10) for i in range(4)]
    for config in (InferConf(method="lookup", budget="fixed", batch_token_budget=12),
                   InferConf(method="eagle2", depth=3, top_k=4, total_tokens=12, lookup=True, batch_token_budget=24)):
        batch = Engine(target, head, config).generate_batch(prompts, 24, batch_size=4)
        assert [r.tokens for r in batch.results] == [vanilla_tokens(target, p, 24) for p in prompts]
        assert all(c.tree_size <= tree_budget(config, c.batch) for r in batch.results for c in r.cycles)


# ----------------------------------------------------------------------------------------------------------------
# Bad input.


@pytest.mark.parametrize(
    "config,needles",
    [
        (InferConf(budget="fixed", method="lookup", lookup_conf=LookupConf(min_ngram=0)), ["lookup.min_ngram 0", ">= 1"]),
        (InferConf(budget="fixed", method="lookup", lookup_conf=LookupConf(min_ngram=3, max_ngram=2)),
         ["lookup.min_ngram 3", "lookup.max_ngram 2"]),
        (InferConf(budget="fixed", method="lookup", lookup_conf=LookupConf(num_tokens=0)), ["lookup.num_tokens 0"]),
        (InferConf(budget="fixed", method="lookup", lookup_conf=LookupConf(branches=0)), ["lookup.branches 0"]),
        (InferConf(budget="fixed", method="lookup", lookup_conf=LookupConf(match="middle")),
         ["lookup.match 'middle'", "leftmost, recent"]),
        (InferConf(budget="fixed", method="eagle2", total_tokens=8, lookup=True), ["lookup.num_tokens 10", "tree budget", "8"]),
        (InferConf(method="chain", depth=3, lookup=True, lookup_conf=LookupConf(num_tokens=4)),
         ["lookup.num_tokens 4", "3"]),
        (InferConf(method="vanilla", lookup=True), ["'vanilla'", "lookup"]),
        (InferConf(budget="fixed", method="lookup", lookup=True), ["'lookup'"]),
    ],
)
def test_bad_lookup_settings_are_refused_before_any_work(monkeypatch, config, needles):
    target, head = target_and_head(2)

    def no_work(*args, **kwargs):
        raise AssertionError("work started before the settings were checked")

    monkeypatch.setattr(target, "new_cache", no_work)
    one_line_error(lambda: Engine(target, head, config).generate([1, 2, 3], 4), *needles)


def test_lookup_needs_no_head_and_builds_from_config():
    target, _ = target_and_head(2)
    conf = LookupConf(max_ngram=3, num_tokens=4)
    config = Engine(target, random_head(target), InferConf(budget="fixed", method="eagle2", total_tokens=8, lookup=True,
                                                           lookup_conf=conf)).config
    assert config.lookup and config.lookup_conf == conf
    engine = Engine(target, None, InferConf(budget="fixed", method="lookup"))
    assert engine.cache_bytes(1, 64) == Engine(target, None, InferConf(method="vanilla")).cache_bytes(1, 64)
    one_line_error(lambda: Engine(target, None, InferConf(budget="fixed", method="eagle2", lookup=True, total_tokens=16)),
                   "'eagle2+lookup'", "head")


# ----------------------------------------------------------------------------------------------------------------
# Sampling through the engine (the statistical check of tests/test_engine_sampling.py).

COPY_PROMPT = (3, 6, 1, 4, 3, 6, 1, 4, 3)  # on the 8-token target, lookup proposes 6, 1, 4, ... every cycle
SAMPLED = {
    "lookup": InferConf(budget="fixed", method="lookup", lookup_conf=LookupConf(num_tokens=2, branches=2)),
    # Merged trees: copied chains share prefixes with the head's candidates and compete for a budget of 4.
    "eagle2+lookup": InferConf(method="eagle2", depth=2, top_k=2, total_tokens=4, lookup=True,
                                  lookup_conf=LookupConf(num_tokens=2, branches=2)),
}
SAMPLED["lookup-auto"] = replace(SAMPLED["lookup"], budget="auto")
SAMPLED["eagle2+lookup-auto"] = replace(SAMPLED["eagle2+lookup"], budget="auto")
SAMPLED["eagle2+lookup-ahead"] = replace(SAMPLED["eagle2+lookup"], budget="auto", plan_ahead="on")
# A synthetic cost model under which a fourth verified node never pays (a forward of 5 tokens costs 19 ms, of 4
# tokens 12): the auto budget cuts the 4-node trees to 1-3 nodes, a number that varies by cycle.
SAMPLING_COST = CostModel({}, [1, 2, 4, 8], [10.0, 11.0, 12.0, 40.0], 0.5)


@pytest.mark.parametrize("name,temperature", [("lookup", 0.7), ("eagle2+lookup", 0.7), ("eagle2+lookup", 1.3),
                                              ("lookup-auto", 0.7), ("eagle2+lookup-auto", 1.3),
                                              ("eagle2+lookup-ahead", 0.7)])
def test_engine_samples_follow_the_target(name, temperature):
    target, head = small()
    params = SamplingParams(temperature=temperature)
    config = SAMPLED[name]
    engine = Engine(target, head, config, cost=SAMPLING_COST if config.budget == "auto" else None)
    counts, copied, sizes = Counter(), 0, set()
    for seed in range(N_SAMPLES):
        result = engine.generate(list(COPY_PROMPT), GENERATED, sampling=params, seed=seed)
        counts[tuple(result.tokens)] += 1
        copied += sum(c.lookup_accepted for c in result.cycles)
        planned = next((i for i, c in enumerate(result.cycles) if c.tree_size), len(result.cycles)) + 1
        sizes |= {c.tree_size for c in result.cycles[planned if config.plan_ahead == "on" else 0:]}  # (planning
        # ahead, cycles before one with candidates have nothing planned: the caps)
    same, p_value, stat = same_distribution(counts, exact_joint(params, COPY_PROMPT))
    assert same, (name, temperature, p_value, stat)
    assert copied >= 0.1 * N_SAMPLES  # copied tokens do get accepted, so their acceptance branch is tested
    if config.budget == "auto":  # the per-cycle cut is exercised: trees of several sizes, all below the 4 nodes
        assert len(sizes) > 1 and max(sizes) < tree_size(config) == 4, sizes


# ----------------------------------------------------------------------------------------------------------------
# Eval: method names and the lookup share.


def test_eval_methods_and_lookup_share(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE_CACHE", str(tmp_path))  # the auto methods below measure and cache a cost model
    from eagle_infer.errors import EagleError
    from eval.methods import engine_method, make_methods, needs_head
    from eval.metrics import summarize

    assert engine_method("eagle2+lookup:h100").name == "eagle2+lookup" and engine_method("eagle2+lookup").merges_lookup
    assert engine_method("lookup").name == "lookup" and engine_method("pld") is None
    assert [needs_head(m) for m in ("vanilla", "lookup", "chain+lookup", "eagle2", "pld")] == [False, False, True, True,
                                                                                               False]
    target, head = target_and_head(2)
    conf = LookupConf(max_ngram=3, num_tokens=6)
    lookup, hybrid, pld = make_methods(["lookup", "eagle2+lookup", "pld"], target,
                                       InferConf(budget="fixed", total_tokens=12, lookup_conf=conf), head, None, "float32")
    assert lookup.engine.config.method == "lookup" and lookup.engine.head is None
    assert (hybrid.engine.config.method, hybrid.engine.config.lookup, hybrid.engine.config.lookup_conf) == (
        "eagle2+lookup", True, conf)
    assert pld.lookup == conf  # transformers' prompt lookup runs at the same max_ngram and num_tokens
    with pytest.raises(EagleError, match="'lookup\\+lookup'"):
        make_methods(["lookup+lookup"], target, InferConf(budget="fixed"), head, None, "float32")
    # An auto tree budget: vanilla beside it in one table ignores it, lookup cuts its copies by it, the hybrid too.
    vanilla, lookup, eagle2, hybrid = make_methods(["vanilla", "lookup", "eagle2", "eagle2+lookup"], target,
                                                   InferConf(depth="auto", total_tokens="auto"), head, None, "float32")
    assert [m.engine.config.budget for m in (vanilla, lookup, eagle2, hybrid)] == ["fixed", "auto", "auto", "auto"]
    assert tree_size(lookup.engine.config) == LookupConf().num_tokens and lookup.engine.cost.level_ms == 0.0

    def rec(method, cycles):
        return {"benchmark": "b", "method": method, "question_id": "1", "turns": [], "new_tokens": 4, "wall_s": 1.0,
                "cycles": cycles, "temperature": 0.0, "tokens": [1]}

    cycle = {"tree_depth": 2, "draft_s": 0.0, "verify_s": 0.0, "tested_conf": [], "tested_hit": []}
    rows = {r.method: r for r in summarize([
        rec("eagle2", [{**cycle, "accepted": 2}]),  # an older record without lookup fields
        rec("eagle2+lookup", [{**cycle, "accepted": 3, "lookup_size": 5, "lookup_accepted": 2},
                              {**cycle, "accepted": 1, "lookup_size": 0, "lookup_accepted": 0}]),
        rec("lookup", [{**cycle, "accepted": 0, "lookup_size": 4, "lookup_accepted": 0}]),
    ]) if r.benchmark == "b"}
    assert rows["eagle2"].lookup_share is None and rows["lookup"].lookup_share is None  # nothing accepted
    assert rows["eagle2+lookup"].lookup_share == pytest.approx(0.5)
