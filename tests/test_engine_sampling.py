"""Sampling is lossless: the engine's output is distributed exactly as the target's own samples.

Two levels:
* the verifiers alone, exactly: the per-node sequential rejection (tests/oracles.verify_sampling) with every random
  draw it makes turned into a branch point (a scripted stand-in for torch inside tests/oracles), and the engine's
  batched sampler (verify.sampled_choices, then verify.follow) with every node draw it reads enumerated, so the probability of each
  (accepted path, bonus) outcome is computed exactly and compared with the target's autoregressive probability of
  the same tokens.
* the whole engine, statistically: on a target with an 8-token vocabulary the joint distribution of the first three
  generated tokens is enumerated exactly with the target's own forward and target_probs, and compared by a
  chi-square test with the tokens of many seeded generate() calls, for every drafter and several sampling settings.
  Deliberately broken verifiers must fail the same check, so the check has the power it claims.
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import replace
from functools import lru_cache

import pytest
import torch

import eagle_infer.decoding.cycle as cycle_module
import eagle_infer.decoding.engine as engine_module
import eagle_infer.decoding.verify as verify
import tests.oracles as oracles
from eagle_infer.head.dflash_head import random_dflash_head
from eagle_infer.head.draft_head import random_head
from eagle_infer.config import InferConf
from eagle_infer.decoding.engine import Engine
from eagle_infer.models.target import compile_target
from eagle_infer.trees.tree import DraftTree, TreeBatch, ancestor_masks
from eagle_infer.decoding.verify import follow, proposal_choices, sampled_choices, target_probs
from eagle_infer.draws import inverse_cdf
from eagle_infer.config import SamplingParams
from eagle_infer.decoding.verify_batch import accept_and_commit
from tests.oracles import children_of, one_thread, oracle_drafter, scaled_target, vanilla_tokens, verify_sampling  # noqa: F401




# ----------------------------------------------------------------------------------------------------------------
# Exact analysis of verify_sampling.


class _Uniform:
    """What the scripted torch.rand returns: `u < px` is a branch point with outcomes True (prob px) / False."""

    def __init__(self, owner: "_ScriptedTorch"):
        self.owner = owner

    def __lt__(self, px):
        px = float(px)
        return self.owner.choose([(True, px), (False, 1.0 - px)])


class _ScriptedTorch:
    """Stands in for the `torch` module inside tests/oracles (verify_sampling's). Each draw (torch.rand, torch.multinomial) is a
    branch point: its outcome is taken from `script` (indices into the list of positive-probability outcomes;
    past the script, the first outcome), and `trace` records every branch point met."""

    def __init__(self, script: list[int]):
        self.script, self.trace = script, []

    def __getattr__(self, name):
        return getattr(torch, name)

    def choose(self, options):
        options = [(value, prob) for value, prob in options if prob > 0]
        i = len(self.trace)
        k = self.script[i] if i < len(self.script) else 0
        self.trace.append((options, k))
        return options[k][0]

    def rand(self, *args, **kwargs):
        return _Uniform(self)

    def multinomial(self, p, n, generator=None):
        assert n == 1
        index = self.choose([(i, float(v)) for i, v in enumerate(p.tolist())])
        return torch.tensor([index])


def exact_outcomes(verifier, tree: DraftTree, probs: torch.Tensor) -> dict[tuple, float]:
    """{(accepted path, bonus): probability} of `verifier(tree, probs, None)`, enumerating every branch of its draws."""
    out: dict[tuple, float] = {}
    stack = [[]]
    original = oracles.torch
    try:
        while stack:
            script = stack.pop()
            fake = _ScriptedTorch(script)
            oracles.torch = fake
            acc = verifier(tree, probs, None)
            prob = 1.0
            for options, k in fake.trace:
                prob *= options[k][1]
            key = (tuple(acc.path), acc.bonus)
            out[key] = out.get(key, 0.0) + prob
            for depth in range(len(script), len(fake.trace)):
                options, k = fake.trace[depth]
                prefix = [kk for _, kk in fake.trace[:depth]]
                stack += [prefix + [alt] for alt in range(k + 1, len(options))]
    finally:
        oracles.torch = original
    return out


def batched_outcome(tree: DraftTree, draws: dict[int, int], filler: int = -1) -> tuple[tuple, int]:
    """(accepted path, bonus) of verify.follow, the batched sampler's walk, on one tree whose flattened node j drew
    draws[j] (the other nodes draw `filler`)."""
    batch = TreeBatch.of_trees([tree], "cpu")
    chosen = torch.full((1, len(tree) + 1), filler, dtype=torch.long)
    for j, v in draws.items():
        chosen[0, j] = v
    g = follow(batch.tokens, batch.parents, batch.sizes, ancestor_masks(batch.parents), chosen)
    return tuple(g.on_path[0].nonzero()[:, 0].tolist()), int(g.bonus[0])


def exact_batched_outcomes(tree: DraftTree, probs: torch.Tensor) -> dict[tuple, float]:
    """{(accepted path, bonus): probability} of the batched sampler when node j draws v with probability probs[j, v]
    (inverse_cdf's exactness is tested apart): the draws an outcome reads (the root's and each accepted node's) are
    enumerated, and the outcome must not change whatever the unread ones drew (two fillers: no token, and the
    first child's token at every node)."""
    out: dict[tuple, float] = {}
    first_child = {}
    for i, p in enumerate(tree.parents.tolist()):
        first_child.setdefault(p + 1, int(tree.tokens[i]))

    def walk(draws: dict[int, int], prob: float) -> None:
        path, bonus = batched_outcome(tree, draws)
        missing = [j for j in [0] + [i + 1 for i in path] if j not in draws]
        if missing:
            for v, pv in enumerate(probs[missing[0]].tolist()):
                if pv > 0:
                    walk({**draws, missing[0]: v}, prob * pv)
            return
        adversarial = {j: first_child.get(j, 0) for j in range(len(tree) + 1)} | draws
        assert batched_outcome(tree, adversarial) == (path, bonus)
        out[(path, bonus)] = out.get((path, bonus), 0.0) + prob

    walk({}, 1.0)
    return out


def target_outcomes(tree: DraftTree, probs: torch.Tensor) -> dict[tuple, float]:
    """What the target itself would do: draw tokens autoregressively down the tree (row of the current node); the
    outcome is the path of tree nodes matched and the first token that leaves the tree."""
    tokens, children = tree.tokens.tolist(), children_of(tree)
    out: dict[tuple, float] = {}

    def walk(row: int, path: tuple, prob: float):
        kid_of = {}
        for c in children[row]:
            kid_of.setdefault(tokens[c], c)
        for v, pv in enumerate(probs[row].tolist()):
            if pv <= 0:
                continue
            if v in kid_of:
                walk(kid_of[v] + 1, path + (kid_of[v],), prob * pv)
            else:
                out[(path, v)] = prob * pv

    walk(0, (), 1.0)
    return out


def same_outcomes(a: dict, b: dict, tol: float = 2e-6) -> bool:
    keys = {k for k, v in a.items() if v > tol} | {k for k, v in b.items() if v > tol}
    return all(abs(a.get(k, 0.0) - b.get(k, 0.0)) <= tol for k in keys) and abs(sum(a.values()) - 1) <= tol


def make_tree(parents: list[int], tokens: list[int]) -> DraftTree:
    depths = []
    for p in parents:
        depths.append(1 if p < 0 else depths[p] + 1)
    n = len(parents)
    return DraftTree(torch.tensor(tokens, dtype=torch.long), torch.tensor(parents, dtype=torch.long),
                     torch.tensor(depths, dtype=torch.long), torch.full((n,), 0.5))


def random_rows(n: int, vocab: int, gen: torch.Generator, zero_frac: float = 0.3) -> torch.Tensor:
    x = torch.rand(n, vocab, generator=gen, dtype=torch.float64) ** 3
    x[torch.rand(n, vocab, generator=gen) < zero_frac] = 0
    x[:, 0] += 1e-3  # keep every row non-empty
    return (x / x.sum(-1, keepdim=True)).float()


def random_tree(gen: torch.Generator, vocab: int, max_nodes: int) -> DraftTree:
    """Breadth-first tree of random shape with distinct sibling tokens."""
    parents, tokens, frontier, level = [], [], [-1], 0
    while frontier and len(parents) < max_nodes and level < 4:
        nxt = []
        for p in frontier:
            k = int(torch.randint(0, 4, (), generator=gen))
            for tok in torch.randperm(vocab, generator=gen)[:k].tolist():
                if len(parents) < max_nodes:
                    parents.append(p)
                    tokens.append(tok)
                    nxt.append(len(parents) - 1)
        frontier, level = nxt, level + 1
    return make_tree(parents, tokens)


# Hand-drawn trees (parents, tokens) over a 5-token vocabulary.
HAND_TREES = {
    "empty": ([], []),
    "one": ([-1], [2]),
    "chain": ([-1, 0, 1], [0, 1, 2]),
    "wide-root": ([-1, -1, -1, -1], [3, 0, 4, 1]),
    "all-tokens-at-root": ([-1, -1, -1, -1, -1], [4, 3, 2, 1, 0]),
    "branchy": ([-1, -1, -1, 0, 0, 1, 3, 3, 5], [1, 0, 3, 2, 4, 0, 0, 1, 2]),
    "duplicate-siblings": ([-1, -1, 0], [2, 2, 3]),
}


def broken_accept_always(tree, probs, generator):
    """Wrong on purpose: takes the first child that has any probability, never rejects."""
    tokens, children = tree.tokens.tolist(), children_of(tree)
    path, row = [], 0
    while True:
        hit = next((c for c in children[row] if probs[row, tokens[c]] > 0), None)
        if hit is None:
            p = probs[row]
            return verify.Acceptance(path, int(oracles.torch.multinomial(p, 1, generator=generator)), [])
        path.append(hit)
        row = hit + 1


def broken_bonus_from_p(tree, probs, generator):
    """Wrong on purpose: accepts with probability p(x) but draws the bonus from p, not from the residual."""
    tokens, children = tree.tokens.tolist(), children_of(tree)
    path, row = [], 0
    while True:
        p = probs[row]
        hit = None
        for c in children[row]:
            px = p[tokens[c]]
            if px > 0 and oracles.torch.rand((), generator=generator) < px:
                hit = c
                break
        if hit is None:
            return verify.Acceptance(path, int(oracles.torch.multinomial(p, 1, generator=generator)), [])
        path.append(hit)
        row = hit + 1


def broken_no_renormalise(tree, probs, generator):
    """Wrong on purpose: after a rejection, later siblings are still accepted with their original p(x)."""
    tokens, children = tree.tokens.tolist(), children_of(tree)
    path, row = [], 0
    while True:
        p = probs[row].clone()
        hit = None
        for c in children[row]:
            px = probs[row, tokens[c]]
            if px > 0 and oracles.torch.rand((), generator=generator) < px:
                hit = c
                break
            p[tokens[c]] = 0
        if hit is None:
            return verify.Acceptance(path, int(oracles.torch.multinomial(p / p.sum(), 1, generator=generator)), [])
        path.append(hit)
        row = hit + 1


def broken_parent_rows(tree, probs, generator):
    """Wrong on purpose: judges each node's children with its parent's row (an off-by-one in the tree rows)."""
    return verify_sampling(tree, torch.cat([probs[:1], probs[:-1]]), generator)


BROKEN = [broken_accept_always, broken_bonus_from_p, broken_no_renormalise, broken_parent_rows]


@pytest.mark.parametrize("name", HAND_TREES)
def test_verify_sampling_exact_on_hand_trees(name):
    tree = make_tree(*HAND_TREES[name])
    gen = torch.Generator().manual_seed(len(name))
    for zero_frac in (0.0, 0.4):
        probs = random_rows(len(tree) + 1, 5, gen, zero_frac)
        got, want = exact_outcomes(verify_sampling, tree, probs), target_outcomes(tree, probs)
        assert same_outcomes(got, want), (name, got, want)
    # Degenerate rows: a one-hot target (the candidate must always be accepted) and a candidate of probability 0.
    probs = torch.zeros(len(tree) + 1, 5)
    probs[:, 2] = 1.0
    assert same_outcomes(exact_outcomes(verify_sampling, tree, probs), target_outcomes(tree, probs))


def test_verify_sampling_exact_on_random_trees():
    gen = torch.Generator().manual_seed(123)
    for _ in range(25):
        tree = random_tree(gen, 6, 10)
        probs = random_rows(len(tree) + 1, 6, gen, 0.25)
        got, want = exact_outcomes(verify_sampling, tree, probs), target_outcomes(tree, probs)
        assert same_outcomes(got, want)
        # The first emitted token (first accepted node, or the bonus) is distributed exactly as the root row.
        first = Counter()
        for (path, bonus), prob in got.items():
            first[int(tree.tokens[path[0]]) if path else bonus] += prob
        assert all(abs(first.get(v, 0.0) - float(probs[0, v])) < 2e-6 for v in range(6))


@pytest.mark.parametrize("broken", BROKEN)
def test_exact_analysis_rejects_broken_verifiers(broken):
    tree = make_tree(*HAND_TREES["branchy"])
    probs = random_rows(len(tree) + 1, 5, torch.Generator().manual_seed(7), 0.0)
    assert same_outcomes(exact_outcomes(verify_sampling, tree, probs), target_outcomes(tree, probs))
    assert not same_outcomes(exact_outcomes(broken, tree, probs), target_outcomes(tree, probs))


def test_verify_sampling_draws_match_exact_outcomes():
    """The real draws (a real generator) agree with the exact outcome probabilities."""
    tree = make_tree(*HAND_TREES["branchy"])
    probs = random_rows(len(tree) + 1, 5, torch.Generator().manual_seed(3), 0.2)
    exact = target_outcomes(tree, probs)
    gen = torch.Generator().manual_seed(0)
    n = 8000
    counts = Counter()
    for _ in range(n):
        acc = verify_sampling(tree, probs, gen)
        counts[(tuple(acc.path), acc.bonus)] += 1
    assert same_distribution(counts, exact)[0]


@pytest.mark.parametrize("name", HAND_TREES)
def test_batched_sampler_exact_on_hand_trees(name):
    """The batched sampler's walk, every draw it reads enumerated, emits exactly the target's distribution, as the
    per-node oracle does on the same trees (one-hot and zero-probability rows included)."""
    tree = make_tree(*HAND_TREES[name])
    gen = torch.Generator().manual_seed(len(name))
    for zero_frac in (0.0, 0.4):
        probs = random_rows(len(tree) + 1, 5, gen, zero_frac)
        got, want = exact_batched_outcomes(tree, probs), target_outcomes(tree, probs)
        assert same_outcomes(got, want), (name, got, want)
    probs = torch.zeros(len(tree) + 1, 5)
    probs[:, 2] = 1.0
    assert same_outcomes(exact_batched_outcomes(tree, probs), target_outcomes(tree, probs))


def test_batched_sampler_exact_on_random_trees():
    gen = torch.Generator().manual_seed(321)
    for _ in range(25):
        tree = random_tree(gen, 6, 10)
        probs = random_rows(len(tree) + 1, 6, gen, 0.25)
        assert same_outcomes(exact_batched_outcomes(tree, probs), target_outcomes(tree, probs))


def test_inverse_cdf_draws_each_token_with_its_probability():
    """Exactly: the uniforms mapped to token v fill an interval of length p(v) / total (float64 CDF), and a token
    of probability 0 is never drawn, not even at the ends of [0, 1)."""
    gen = torch.Generator().manual_seed(4)
    probs = random_rows(6, 7, gen, 0.4)
    cdf = probs.double().cumsum(-1)
    total = cdf[:, -1]
    for row in range(6):
        for v in range(7):
            low = (cdf[row, v - 1] if v else torch.tensor(0.0, dtype=torch.float64)) / total[row]
            high = cdf[row, v] / total[row]
            if probs[row, v] > 0:
                inside = torch.stack([low, (low + high) / 2, torch.nextafter(high, low)])
                assert inverse_cdf(probs[row].expand(3, -1), inside).tolist() == [v] * 3
    edges = torch.tensor([0.0, 1.0 - 2**-53], dtype=torch.float64)
    for row in range(6):
        drawn = inverse_cdf(probs[row].expand(2, -1), edges).tolist()
        assert all(probs[row, t] > 0 for t in drawn)


def broken_sampled_parent_rows(logits, params, generators, draws=0):
    """Wrong on purpose (in place of verify.sampled_choices): each node's children are judged with its parent's
    row."""
    return verify.sampled_choices(torch.cat([logits[:, :1], logits[:, :-1]], 1), params, generators, draws)


def broken_sampled_greedy_root(logits, params, generators, draws=0):
    """Wrong on purpose (in place of verify.sampled_choices): the root's draw is the target's argmax."""
    chosen = verify.sampled_choices(logits, params, generators, draws)
    return torch.cat([logits[:, :1].argmax(-1), chosen[:, 1:]], 1)


def broken_sampled_accept_first_child(tokens, parents, sizes, allowed, chosen, ids, columns, distinct):
    """Wrong on purpose (in place of verify_batch.accept_and_commit): every node draws its first child's token when
    it has one (never rejects)."""
    b, n = tokens.shape
    slot = torch.arange(n).expand(b, n)
    first = torch.full((b, n + 2), n, dtype=torch.long).scatter_reduce(1, parents + 1, slot, "amin")[:, : n + 1]
    has = first < n
    chosen = torch.where(has, tokens.gather(1, first.clamp(max=n - 1)), chosen)
    return accept_and_commit(tokens, parents, sizes, allowed, chosen, ids, columns, distinct)


def test_batched_sampler_draws_match_exact_outcomes():
    """Real draws: 6000 rows of one tree, each row with its own generator, follow the exact outcome probabilities."""
    tree = make_tree(*HAND_TREES["branchy"])
    probs = random_rows(len(tree) + 1, 5, torch.Generator().manual_seed(3), 0.2)
    n = 6000
    batch = TreeBatch.of_trees([tree] * n, "cpu")
    draws = sampled_choices(probs.log()[None].expand(n, -1, -1), SamplingParams(temperature=1.0),
                            [torch.Generator().manual_seed(i) for i in range(n)])
    g = follow(batch.tokens, batch.parents, batch.sizes, ancestor_masks(batch.parents), draws)
    counts = Counter((tuple(row.nonzero()[:, 0].tolist()), int(bonus)) for row, bonus in zip(g.on_path, g.bonus))
    assert same_distribution(counts, target_outcomes(tree, probs))[0]


# ----------------------------------------------------------------------------------------------------------------
# The statistical check.

ALPHA = 1e-4


def same_distribution(counts: Counter, exact: dict, alpha: float = ALPHA, min_expected: float = 5.0):
    """Chi-square goodness of fit of observed outcome counts to exact probabilities -> (same?, p-value, stat).

    Outcomes whose expected count is below `min_expected` are pooled into one cell (Cochran's rule keeps the
    chi-square approximation good); an observed outcome of probability 0 is an immediate "different".
    Threshold: under the null hypothesis the p-value is (asymptotically) uniform, so a correct engine fails one
    check with probability ~alpha = 1e-4 for a random set of seeds; with the fixed seeds used here the test is
    deterministic, and even if every seed were changed the ~15 checks in this file would spuriously fail with
    probability < 0.2%. The broken verifiers below reach p-values many orders of magnitude smaller.
    """
    n = sum(counts.values())
    if any(exact.get(k, 0.0) <= 0 for k in counts):
        return False, 0.0, float("inf")
    cells, pooled_obs, pooled_exp = [], 0.0, 0.0
    for k, p in exact.items():
        e = n * p
        if e >= min_expected:
            cells.append((counts.get(k, 0), e))
        else:
            pooled_obs, pooled_exp = pooled_obs + counts.get(k, 0), pooled_exp + e
    if pooled_exp > 0:
        if pooled_exp >= min_expected or not cells:
            cells.append((pooled_obs, pooled_exp))
        else:  # merge the small remainder into the smallest cell
            o, e = cells.pop(min(range(len(cells)), key=lambda i: cells[i][1]))
            cells.append((o + pooled_obs, e + pooled_exp))
    stat = sum((o - e) ** 2 / e for o, e in cells)
    df = max(len(cells) - 1, 1)
    p_value = float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                            torch.tensor(stat / 2, dtype=torch.float64)))
    return p_value >= alpha, p_value, stat


def test_same_distribution_check():
    exact = {("a",): 0.5, ("b",): 0.3, ("c",): 0.2}
    assert same_distribution(Counter({("a",): 500, ("b",): 300, ("c",): 200}), exact)[0]
    assert same_distribution(Counter({("a",): 520, ("b",): 285, ("c",): 195}), exact)[0]
    assert not same_distribution(Counter({("a",): 600, ("b",): 250, ("c",): 150}), exact)[0]
    assert not same_distribution(Counter({("a",): 500, ("b",): 300, ("d",): 1}), exact)[0]


# ----------------------------------------------------------------------------------------------------------------
# The engine, statistically.

VOCAB, PROMPT, GENERATED = 8, (1, 5, 2, 7), 3
# generate() calls per check (see same_distribution for the threshold). 300 keeps the file near 40 s on two shared
# cores; the broken verifiers below are still caught with p-values < 1e-10. Set EAGLE_SAMPLING_N=3000 for a
# thorough run.
N_SAMPLES = int(os.environ.get("EAGLE_SAMPLING_N", "300"))


@lru_cache(maxsize=None)
def small(path: str = "eager"):
    """An 8-token target whose 3-token continuations are neither near-uniform nor near-deterministic (entropy of
    the 3-token joint ~3.3 nats at temperature 0.7 and ~4.9 at 1.3, of log(512) = 6.2 possible), and a random
    head; path "compiled": the same pair decoding through a compiled forward (infer.compile)."""
    if path == "compiled":
        target, head = small()
        return compile_target(target), head
    target = scaled_target(vocab=VOCAB, hidden=32, layers=2, seed=2, scale=16.0, name="tiny-sampling")
    return target, random_head(target, seed=2)


@lru_cache(maxsize=None)
def exact_joint(params: SamplingParams, prompt: tuple = PROMPT) -> dict[tuple, float]:
    """P(first GENERATED tokens after `prompt`) under the target with `params`, by enumerating every continuation."""
    target, _ = small()
    joint = {(): 1.0}
    for _ in range(GENERATED):
        prefixes = list(joint)
        ids = torch.tensor([list(prompt) + list(s) for s in prefixes])
        with torch.inference_mode():
            logits = target.model(input_ids=ids).logits[:, -1].float()
        rows = target_probs(logits, params).double().tolist()
        joint = {s + (v,): joint[s] * pv for s, row in zip(prefixes, rows) for v, pv in enumerate(row) if pv > 0}
    return joint


def drafter_setup(name: str):
    """Trees of depth 2: with one token from prefill and three generated, deeper nodes can never be emitted."""
    target, _ = small()
    if name == "oracle":
        reference = list(PROMPT) + vanilla_tokens(target, PROMPT, 8)
        oracle = oracle_drafter(reference, 2, branch=2, seed=5, vocab=VOCAB)
        return oracle.config(), oracle
    if name == "oracle-padded":  # trees of 6 nodes in a budget of 8: every verification carries 2 padding slots
        reference = list(PROMPT) + vanilla_tokens(target, PROMPT, 8)
        oracle = oracle_drafter(reference, 2, branch=2, seed=5, vocab=VOCAB, subtrees=False)
        return replace(oracle.config(), pad_trees="on"), oracle
    return {
        "vanilla": InferConf(method="vanilla"),
        "chain": InferConf(method="chain", depth=2),
        "eagle1": InferConf(method="eagle1", static_paths=[[0], [1], [2], [0, 0], [0, 1], [1, 0], [2, 0]]),
        "eagle2": InferConf(method="eagle2", depth=2, top_k=4, total_tokens=9, expand_by="confidence"),
        "dflash": InferConf(method="dflash", budget="fixed"),
        "dflash-tree": InferConf(method="dflash-tree", budget="fixed", top_k=3, total_tokens=7),
    }[name], None


@lru_cache(maxsize=None)
def small_eagle3_head():
    """EAGLE-3's block for the small target, untrained: fused over both its layers, drafting from 6 of its 8 ids."""
    target, _ = small()
    return random_head(target, seed=3, block="eagle3", feature_layers=[0, 1], draft_vocab=torch.tensor([0, 2, 3, 5, 6, 7]))


@lru_cache(maxsize=None)
def small_dflash_head():
    """A DFlash drafter for the small target, untrained: blocks of 3 (two drafted tokens: depth 2), fused over both
    its layers, drafting from 6 of its 8 ids (a seed whose top-1 the target often draws)."""
    target, _ = small()
    return random_dflash_head(target, VOCAB - 1, seed=6, block_size=3, feature_layers=[0, 1],
                              draft_vocab=torch.arange(6))


def engine_counts(name: str, params: SamplingParams, n: int = N_SAMPLES, first_seed: int = 0,
                  path: str = "eager", head=None) -> tuple[Counter, list]:
    target, small_head = small(path)
    head = small_head if head is None else head
    config, drafter = drafter_setup(name)
    engine = Engine(target, head, config, drafter=drafter)
    counts, accepted = Counter(), []
    for seed in range(first_seed, first_seed + n):
        result = engine.generate(list(PROMPT), GENERATED, sampling=params, seed=seed)
        assert len(result.tokens) == GENERATED and result.stop_reason == "length"
        counts[tuple(result.tokens)] += 1
        accepted += [c.accepted for c in result.cycles]
    return counts, accepted


SETTINGS = [
    ("vanilla", SamplingParams(temperature=0.7)),
    ("vanilla", SamplingParams(temperature=1.0, top_p=0.8, sampling_top_k=5)),
    ("chain", SamplingParams(temperature=0.7)),
    ("eagle1", SamplingParams(temperature=0.7)),
    ("eagle2", SamplingParams(temperature=0.7)),
    ("oracle", SamplingParams(temperature=0.7)),
    ("chain", SamplingParams(temperature=1.3)),
    ("eagle1", SamplingParams(temperature=1.3)),
    ("eagle2", SamplingParams(temperature=1.3)),
    ("oracle", SamplingParams(temperature=1.3)),
    ("eagle2", SamplingParams(temperature=1.0, top_p=0.8, sampling_top_k=5)),
    ("oracle", SamplingParams(temperature=0.9, top_p=0.7)),
    ("oracle-padded", SamplingParams(temperature=0.7)),
]


@pytest.mark.parametrize("name,params", [("eagle2", SamplingParams(temperature=0.7)),
                                         ("chain", SamplingParams(temperature=1.3))])
def test_eagle3_block_samples_follow_the_target(name, params):
    """A random EAGLE-3-block head (its own LM head over a draft vocabulary) drafts; samples stay exact."""
    counts, accepted = engine_counts(name, params, head=small_eagle3_head())
    same, p_value, stat = same_distribution(counts, exact_joint(params))
    assert same, (name, params, p_value, stat)
    assert any(accepted)  # its drafts were accepted sometimes: the check exercised acceptance


DFLASH_SETTINGS = [("dflash", SamplingParams(temperature=0.7), "eager"),
                   ("dflash", SamplingParams(temperature=1.0, top_p=0.8, sampling_top_k=5), "compiled"),
                   ("dflash-tree", SamplingParams(temperature=1.3), "eager")]


@pytest.mark.parametrize("name,params,path", DFLASH_SETTINGS,
                         ids=[f"{n}-T{p.temperature}-{path}" for n, p, path in DFLASH_SETTINGS])
def test_dflash_samples_follow_the_target(name, params, path):
    """A random DFlash drafter's block, as one chain of tokens sampled from its positions' distributions and
    verified against them (dflash), or as a tree of its positions' top-3 verified by the exact tree sampler
    (dflash-tree): samples follow the target's exact joint distribution, and its drafts are accepted often enough
    that acceptance, not only the bonus token, is what is tested."""
    counts, accepted = engine_counts(name, params, path=path, head=small_dflash_head())
    same, p_value, stat = same_distribution(counts, exact_joint(params))
    assert same, (name, params, p_value, stat)
    assert sum(a > 0 for a in accepted) >= 0.1 * len(accepted), accepted[:50]


def broken_proposal_residual_from_p(logits, proposal, tokens, sizes, params, generators, draws=0):
    """After a rejection, a draw from p itself instead of the residual max(0, p - q): p(x) is counted twice."""
    n, count = tokens.shape[1], max(draws, tokens.shape[1] + 1)
    probs = target_probs(logits, params)
    u = verify.uniforms(generators, 2 * count, probs.device)
    p_x = probs[:, :n].gather(-1, tokens[..., None])[..., 0]
    q_x = proposal.to(probs.dtype).gather(-1, tokens[..., None])[..., 0]
    drawn = inverse_cdf(probs, u[:, count: count + n + 1])
    return torch.cat([torch.where(u[:, :n] * q_x < p_x, tokens, drawn[:, :n]), drawn[:, n:]], 1)


def broken_proposal_accept_always(logits, proposal, tokens, sizes, params, generators, draws=0):
    """Every sampled draft kept, as if q were the target's distribution."""
    chosen = proposal_choices(logits, proposal, tokens, sizes, params, generators, draws)
    return torch.cat([tokens, chosen[:, tokens.shape[1]:]], 1)


def test_proposal_choices_emit_the_target_distribution_exactly():
    """Speculative sampling against a chain's own proposal, enumerated: node 0's token x drawn from q (every x,
    weight q(x)), the accept test's and the residual draw's uniforms on midpoint grids of G cells. The first emitted
    token (x when kept, else the residual draw) is distributed as p to within the grid's resolution, for q near p,
    far from it and with zeros where p has mass; the broken rules miss by far more."""
    G, vocab = 400, 5
    grid = (torch.arange(G, dtype=torch.float64) + 0.5) / G
    cases = [([0.4, 0.3, 0.2, 0.1, 0.0], [0.35, 0.3, 0.25, 0.05, 0.05]),
             ([0.1, 0.1, 0.6, 0.1, 0.1], [0.7, 0.2, 0.0, 0.05, 0.05]),
             ([0.2, 0.2, 0.2, 0.2, 0.2], [0.0, 0.0, 0.0, 0.5, 0.5])]

    def first_token_law(p, q, rule):
        logits = torch.tensor([p, p], dtype=torch.float64).clamp_min(1e-30).log()  # [N + 1 = 2, V]
        law = torch.zeros(vocab, dtype=torch.float64)
        for x in range(vocab):
            if q[x] == 0:
                continue
            # every (accept uniform, draw uniform) pair as a row: the generator stand-in returns the row's pair
            u_test, u_draw = (t.flatten() for t in torch.meshgrid(grid, grid, indexing="ij"))
            rows = u_test.numel()
            fixed = torch.stack([u_test, torch.zeros(rows, dtype=torch.float64), u_draw, u_draw], 1)
            chosen = rule(logits.expand(rows, -1, -1), torch.tensor([q], dtype=torch.float64).expand(rows, -1, -1),
                          torch.full((rows, 1), x), None, SamplingParams(temperature=1.0), fixed)
            law += q[x] * torch.bincount(chosen[:, 0], minlength=vocab).double() / rows
        return law

    def with_uniforms(rule):
        def run(logits, q, tokens, sizes, params, fixed):
            original = verify.uniforms
            verify.uniforms = lambda generators, count, device: fixed[:, : 2 * count]
            try:
                return rule(logits, q, tokens, sizes, params, [None] * fixed.shape[0])
            finally:
                verify.uniforms = original
        return run

    for p, q in cases:
        law = first_token_law(p, q, with_uniforms(proposal_choices))
        assert torch.allclose(law, torch.tensor(p, dtype=torch.float64), atol=3 / G), (p, q, law)
    p, q = cases[1]
    for rule in (broken_proposal_accept_always, broken_proposal_residual_from_p):
        broken = first_token_law(p, q, with_uniforms(rule))
        assert (broken - torch.tensor(p, dtype=torch.float64)).abs().max() > 0.05, rule.__name__


@pytest.mark.parametrize("name,module,attribute,broken", [
    ("dflash", cycle_module, "proposal_choices", broken_proposal_accept_always),
    ("dflash-tree", cycle_module, "sampled_choices", broken_sampled_parent_rows)],
    ids=["accept-always", "parent-rows"])
def test_dflash_check_detects_a_broken_verifier(monkeypatch, name, module, attribute, broken):
    """The same check over the DFlash drafter's sampled chain and its tree has the power to reject a broken
    sampler."""
    params = SamplingParams(temperature=0.7)
    monkeypatch.setattr(module, attribute, broken)
    counts, _ = engine_counts(name, params, head=small_dflash_head())
    same, p_value, _ = same_distribution(counts, exact_joint(params))
    assert not same and p_value < ALPHA * 1e-3, p_value


@pytest.mark.parametrize("path", ["eager", "compiled"])
@pytest.mark.parametrize("name,params", SETTINGS, ids=[f"{n}-T{p.temperature}-p{p.top_p}-k{p.sampling_top_k}" for n, p in SETTINGS])
def test_engine_samples_follow_the_target(name, params, path):
    """Sampled outputs follow the eager target's exact distribution, drafting on the eager or compiled forward."""
    exact = exact_joint(params)
    assert abs(sum(exact.values()) - 1) < 1e-5
    counts, accepted = engine_counts(name, params, path=path)
    same, p_value, stat = same_distribution(counts, exact)
    assert same, (name, params, p_value, stat)
    # Drafts do get accepted, so the verifier's acceptance branch (not only the bonus) is what is being tested.
    assert name == "vanilla" or sum(a > 0 for a in accepted) >= 0.1 * len(accepted), accepted[:50]
    if params.sampling_top_k or params.top_p < 1:
        assert all(exact.get(k, 0) > 0 for k in counts)  # nothing outside the filtered support


@pytest.mark.parametrize("module,name,broken", [
    (engine_module, "accept_and_commit", broken_sampled_accept_first_child),
    (cycle_module, "sampled_choices", broken_sampled_greedy_root),
    (cycle_module, "sampled_choices", broken_sampled_parent_rows)], ids=["first-child", "greedy-root", "parent-rows"])
def test_engine_check_detects_a_broken_verifier(monkeypatch, module, name, broken):
    params = SamplingParams(temperature=0.7)
    monkeypatch.setattr(module, name, broken)
    counts, _ = engine_counts("oracle", params)
    same, p_value, _ = same_distribution(counts, exact_joint(params))
    assert not same and p_value < ALPHA * 1e-3, p_value


def plain_nucleus(logits: torch.Tensor, top_p: float) -> set[int]:
    """The top-p nucleus written plainly, in float64: rank the tokens, keep them while the tokens ranked above hold
    less than top_p, then every token tied with the last one kept."""
    p = torch.softmax(logits.double(), -1).tolist()
    ranked, above, floor = sorted(range(len(p)), key=lambda t: -p[t]), 0.0, None
    for t in ranked:
        if above >= top_p:
            break
        floor, above = p[t], above + p[t]
    return {t for t in range(len(p)) if p[t] >= floor}


@pytest.mark.parametrize("windows", [(16,), (4, 64), ()])
def test_top_p_nucleus(monkeypatch, windows):
    """target_probs keeps exactly the nucleus, ties at its boundary together, whether a CPU ranks windows of the
    most likely tokens first (of 1000: peaked rows fit a small one, flat ones fall back to a full sort) or all."""
    gen = torch.Generator().manual_seed(0)
    rows = [torch.randn(1000, generator=gen) * scale for scale in (8.0, 4.0, 1.0, 0.05)]
    rows.append((torch.randn(1000, generator=gen) * 3).round())  # many exact ties
    rows.append(torch.randn(1000, generator=gen).masked_fill(torch.arange(1000) % 3 > 0, float("-inf")))
    logits = torch.stack(rows)
    monkeypatch.setattr(verify, "NUCLEUS_WINDOWS", windows)
    for top_p in (0.5, 0.9, 0.95):
        probs = target_probs(logits, SamplingParams(temperature=1.0, top_p=top_p))
        for row, p in zip(logits, probs):
            assert set((p > 0).nonzero()[:, 0].tolist()) == plain_nucleus(row, top_p), top_p
    sizes = (target_probs(logits, SamplingParams(temperature=1.0, top_p=0.9)) > 0).sum(-1)
    assert sizes.min() <= 16 < sizes.max()  # both the window and the fallback were exercised


def inverse_cdf_draw(probs: torch.Tensor, generator: torch.Generator) -> int:
    """The draw sample_tokens promises, written plainly: the first token whose cumulative probability exceeds a
    float64 uniform from the generator, scaled to the total."""
    u = float(torch.rand((), generator=generator, dtype=torch.float64))
    total, acc = float(probs.double().sum()), 0.0
    for token, p in enumerate(probs.double().tolist()):
        acc += p
        if p > 0 and u * total < acc:
            return token
    return max(t for t, p in enumerate(probs.tolist()) if p > 0)


def test_first_token_is_the_targets_seeded_draw():
    """The prefill token is the target's own draw from the request's generator (seeded with `seed`), computed here
    without the engine: generate(seed=s) starts with the inverse-CDF draw of Generator().manual_seed(s)."""
    target, head = small()
    params = SamplingParams(temperature=1.0)
    with torch.inference_mode():
        probs = target_probs(target.model(input_ids=torch.tensor([list(PROMPT)])).logits[0, -1].float(), params)
    for seed in range(5):
        expected = inverse_cdf_draw(probs, torch.Generator().manual_seed(seed))
        engine = Engine(target, head, InferConf(method="eagle2", depth=2, top_k=2, total_tokens=4))
        assert engine.generate(list(PROMPT), 1, sampling=params, seed=seed).tokens == [expected]


def test_sample_tokens_rows_draw_independently():
    """A batch of rows draws what each row draws alone with the same generator state, never a filtered-out token,
    and follows target_probs (chi-square over 4,000 draws of one row)."""
    params = SamplingParams(temperature=0.8, top_p=0.9, sampling_top_k=4)
    logits = torch.randn(6, 11, generator=torch.Generator().manual_seed(0))
    probs = target_probs(logits, params)
    batch = oracles.sample_tokens(logits, params, [torch.Generator().manual_seed(7 + b) for b in range(6)])
    alone = [oracles.sample_tokens(logits[b:b + 1], params, [torch.Generator().manual_seed(7 + b)])[0] for b in range(6)]
    plain = [inverse_cdf_draw(probs[b], torch.Generator().manual_seed(7 + b)) for b in range(6)]
    assert batch == alone == plain
    generator = torch.Generator().manual_seed(1)
    draws = Counter((oracles.sample_tokens(logits[:1], params, [generator])[0],) for _ in range(4000))
    exact = {(t,): p for t, p in enumerate(probs[0].tolist()) if p > 0}
    assert same_distribution(draws, exact)[0], draws
    assert oracles.sample_tokens(logits, SamplingParams(), [generator] * 6) == logits.argmax(-1).tolist()


@pytest.mark.parametrize("name", ["vanilla", "chain", "eagle1", "eagle2", "oracle"])
def test_every_draw_comes_from_the_request_generator(name):
    """What differs between methods is how verification draws after the first token: every method must take all
    its draws from the request's seeded generator, so a seed reproduces the whole output whatever the global RNG
    does in between, and different seeds give different outputs."""
    target, head = small()
    config, drafter = (InferConf(method="vanilla"), None) if name == "vanilla" else drafter_setup(name)
    engine = Engine(target, head, config, drafter=drafter)
    params = SamplingParams(temperature=1.3)
    outputs = {}
    for seed in range(6):
        torch.manual_seed(1000 + seed)
        first = engine.generate(list(PROMPT), 12, sampling=params, seed=seed)
        torch.manual_seed(2000 + seed)
        torch.rand(17)
        again = engine.generate(list(PROMPT), 12, sampling=params, seed=seed)
        assert first.tokens == again.tokens, (name, seed)
        assert [c.accepted for c in first.cycles] == [c.accepted for c in again.cycles]
        outputs[seed] = tuple(first.tokens)
    assert len(set(outputs.values())) > 1
