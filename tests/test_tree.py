"""Draft trees: static-tree validation, the ancestor mask, and the shape of what the drafters build.

Drafted trees are also checked against the head itself: every node's children must be the top tokens (with their
probabilities) of the head's distribution computed by feeding the node's path one token at a time over a copy of the
committed cache, so the tree-attention mask and positions the feeder uses are checked too.
"""
from __future__ import annotations

from functools import lru_cache

import pytest
import torch

from eagle_infer.head.draft_head import DraftHead, DraftHeadConfig, random_head
from eagle_infer.head.head_runner import HeadRunner
from eagle_infer.trees.drafting import DraftRoot, TreeFeeder, draft_chain, draft_static, growth
from eagle_infer.head.expansion import expand_level
from eagle_infer.errors import EagleError
from eagle_infer.models.kv_cache import KVCache
from eagle_infer.trees.tree import DraftTree, ancestor_masks, chain_paths, check_paths, node_ancestors
from eagle_infer.config import DEFAULT_STATIC_PATHS
from eagle_infer.models.masks import additive_mask, causal_mask
from tests.oracles import children_of, draft_dynamic, one_thread, rows_of  # noqa: F401 (one_thread: autouse fixture)
from tests.tiny import tiny_target

# ----------------------------------------------------------------------------------------------------------------
# check_paths


@pytest.mark.parametrize(
    "paths,needles",
    [
        ([], ["empty"]),
        ((), ["empty"]),
        ([[0], [1], [0]], ["twice"]),
        ([[0], [0, -1]], ["[0, -1]", ">= 0"]),
        ([[0], []], ["[]", "non-empty"]),
        ([[0], [1, 0]], ["[1, 0]", "[1]"]),
        ([[0], [0, 0], [0, 0, 1, 0]], ["[0, 0, 1, 0]", "[0, 0, 1]"]),
    ],
)
def test_check_paths_errors(paths, needles):
    with pytest.raises(EagleError) as info:
        check_paths(paths)
    message = str(info.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message


def test_check_paths_sorts_breadth_first():
    assert check_paths([[1, 0], [0, 0, 0], [1], [0], [0, 0], [0, 1]]) == (
        (0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)
    )
    assert check_paths(((2,), (0,), (1,))) == ((0,), (1,), (2,))
    assert check_paths(DEFAULT_STATIC_PATHS) == tuple(sorted(DEFAULT_STATIC_PATHS, key=lambda p: (len(p), p)))
    assert len(DEFAULT_STATIC_PATHS) == 26 and max(map(len, DEFAULT_STATIC_PATHS)) == 6
    assert chain_paths(3) == ((0,), (0, 0), (0, 0, 0)) and check_paths(chain_paths(3)) == chain_paths(3)


# ----------------------------------------------------------------------------------------------------------------
# DraftTree


def hand_tree() -> DraftTree:
    """
    root
    ├── n0 ── n2 ── n5
    │    └─── n3
    └── n1 ── n4
    """
    parents = [-1, -1, 0, 0, 1, 2]
    return DraftTree(torch.tensor([10, 11, 12, 13, 14, 15]), torch.tensor(parents),
                     torch.tensor([1, 1, 2, 2, 2, 3]), torch.rand(6))


def test_ancestor_mask_hand_drawn():
    tree = hand_tree()
    # Flattened indices: 0 = root, node i = i + 1. Row j sees itself and its ancestors.
    expected = torch.tensor([
        # r  0  1  2  3  4  5
        [1, 0, 0, 0, 0, 0, 0],  # root
        [1, 1, 0, 0, 0, 0, 0],  # n0
        [1, 0, 1, 0, 0, 0, 0],  # n1
        [1, 1, 0, 1, 0, 0, 0],  # n2
        [1, 1, 0, 0, 1, 0, 0],  # n3
        [1, 0, 1, 0, 0, 1, 0],  # n4
        [1, 1, 0, 1, 0, 0, 1],  # n5
    ], dtype=torch.bool)
    assert torch.equal(tree.ancestor_mask(), expected)
    assert children_of(tree) == [[0, 1], [2, 3], [4], [5], [], [], []]
    assert len(tree) == 6 and tree.depth == 3


def test_additive_mask():
    allowed = hand_tree().ancestor_mask()
    mask = additive_mask(allowed, 3, torch.float32, "cpu")
    assert mask.shape == (1, 1, 7, 10)
    assert torch.all(mask[0, 0, :, :3] == 0)  # every row sees the committed prefix
    low = torch.finfo(torch.float32).min
    assert torch.equal(mask[0, 0, :, 3:] == 0, allowed) and torch.all(mask[0, 0, :, 3:][~allowed] == low)


# ----------------------------------------------------------------------------------------------------------------
# Drafters, with a random head over a committed context.

PROMPT = [5, 17, 3, 88, 41, 2, 9, 60, 33]
ROOT = 71


@lru_cache(maxsize=None)
def setup(input_mode: str = "feature+shifted_token", draft_vocab: tuple = ()):
    target = tiny_target(seed=1)
    if draft_vocab:
        config = DraftHeadConfig.of_target(target, input_mode)
        config.draft_vocab_size = len(draft_vocab)
        torch.manual_seed(3)
        head = DraftHead(config, target).eval()
        head.set_draft_vocab(torch.tensor(draft_vocab))
    else:
        head = random_head(target, seed=3, input_mode=input_mode)
    return target, head


def committed_feeder(head: DraftHead, target, room: int = 200) -> TreeFeeder:
    """A feeder over a head cache holding the prompt's pairs, as the engine builds it after prefill."""
    head = HeadRunner(head, target)
    n = len(PROMPT)
    with torch.inference_mode():
        tcache = target.new_cache(1, n)
        _, feats = target.forward(torch.tensor([PROMPT]), torch.arange(n)[None], tcache)
        seq = PROMPT + [ROOT]
        shift = head.config.token_shift
        cache = head.new_cache(1, n + room)
        out = head(feats, torch.tensor([seq[shift : shift + n]]), torch.arange(n)[None], cache,
                   causal_mask(0, n, feats.dtype, feats.device))
        cache.advance(n)
    return TreeFeeder(head, cache, DraftRoot(out[:, -1], [ROOT], [n], [0]))


@torch.inference_mode()
def sequential_logp(feeder: TreeFeeder, path_tokens: list[int]) -> torch.Tensor:
    """[V] log-probs of the children of the node reached by path_tokens, feeding the path one node at a time with
    a plain causal mask over a copy of the committed cache (no tree mask involved)."""
    head, root = feeder.head, feeder.root
    if not path_tokens:
        return torch.log_softmax(head.logits(root.feature[0]), -1)
    cache = KVCache.copy(feeder.cache)
    cache.truncate(feeder.prefix)
    feature, parent_token = root.feature[0], root.tokens[0]
    for d, tok in enumerate(path_tokens, start=1):
        fed = tok if head.config.token_shift else parent_token
        out = head(feature[None, None], torch.tensor([[fed]]), torch.tensor([[root.bases[0] + d - 1]]), cache,
                   causal_mask(cache.length, 1, feature.dtype, feature.device))
        cache.advance(1)
        feature, parent_token = out[0, -1], tok
    return torch.log_softmax(head.logits(feature), -1)


def check_tree_shape(tree: DraftTree, max_depth: int):
    parents, depths, tokens = tree.parents.tolist(), tree.depths.tolist(), tree.tokens.tolist()
    assert tree.tokens.dtype == tree.parents.dtype == tree.depths.dtype == torch.long
    assert len(parents) == len(depths) == len(tokens) == tree.probs.numel()
    for i, (p, d) in enumerate(zip(parents, depths)):
        assert -1 <= p < i  # parents precede children: breadth-first, connected
        assert d == (1 if p < 0 else depths[p] + 1)
        assert 1 <= d <= max_depth
    assert depths == sorted(depths)
    for kids in children_of(tree):
        assert len({tokens[c] for c in kids}) == len(kids)  # siblings are distinct tokens
    assert torch.all((tree.probs >= 0) & (tree.probs <= 1))


def path_tokens(tree: DraftTree, node: int) -> list[int]:
    parents, tokens, out = tree.parents.tolist(), tree.tokens.tolist(), []
    while node >= 0:
        out.append(tokens[node])
        node = parents[node]
    return out[::-1]


def check_against_head(feeder: TreeFeeder, tree: DraftTree, top_k: int, ranks: dict | None = None):
    """Each node's children are among the top_k tokens of the head's own distribution at that node (exactly the
    listed ranks for a static tree), with that probability, in rank order."""
    tokens, probs = tree.tokens.tolist(), tree.probs.tolist()
    for row, kids in enumerate(children_of(tree)):
        if not kids:
            continue
        logp = sequential_logp(feeder, path_tokens(tree, row - 1) if row else [])
        order = logp.topk(top_k).indices.tolist()
        positions = []
        for c in kids:
            assert tokens[c] in order, (row, c)
            assert probs[c] == pytest.approx(float(logp[tokens[c]].exp()), abs=1e-5)
            positions.append(order.index(tokens[c]))
            if ranks is not None:
                assert positions[-1] == ranks[c] or probs[c] == pytest.approx(float(logp[order[ranks[c]]].exp()),
                                                                             abs=1e-6)  # a tie
        assert positions == sorted(positions)


DYNAMIC = [
    # depth, top_k, total_tokens, expand_by, rerank
    (6, 8, 32, "value", True),
    (4, 4, 10, "confidence", True),
    (3, 5, 1000, "value", True),
    (5, 3, 60, "value", False),
    (4, 5, 7, "confidence", False),
    (3, 6, 1000, "confidence", False),
    (1, 8, 5, "value", True),
    (1, 8, 50, "value", False),
    (5, 1, 3, "value", True),
    (2, 96, 40, "value", True),
]


@pytest.mark.parametrize("input_mode", ["feature+shifted_token", "feature+token"])
@pytest.mark.parametrize("depth,top_k,total,expand_by,rerank", DYNAMIC)
def test_draft_dynamic_properties(input_mode, depth, top_k, total, expand_by, rerank):
    target, head = setup(input_mode)
    feeder = committed_feeder(head, target)
    prefix = feeder.cache.length
    tree = draft_dynamic(feeder, depth, top_k, total, growth(expand_by, rerank)).row(0)
    check_tree_shape(tree, depth)
    candidates = top_k + (depth - 1) * top_k * top_k
    if rerank:
        assert len(tree) == min(total, candidates)
    else:
        assert len(tree) == min(total, top_k * depth) <= top_k * depth
    assert tree.depth <= depth
    # Fed nodes stay uncommitted: reset drops them and drafting again gives the same tree.
    assert feeder.cache.length == prefix + top_k * (depth - 1)
    feeder.reset()
    assert feeder.cache.length == prefix
    check_against_head(feeder, tree, top_k)
    again = draft_dynamic(committed_feeder(head, target), depth, top_k, total, growth(expand_by, rerank)).row(0)
    assert all(torch.equal(getattr(tree, f), getattr(again, f)) for f in ("tokens", "parents", "depths"))
    if rerank:
        # The root's children are the head's top tokens, in order.
        kids = children_of(tree)[0]
        assert tree.tokens[kids].tolist() == sequential_logp(feeder, []).topk(len(kids)).indices.tolist()


def test_draft_dynamic_rerank_keeps_the_best_paths():
    """With rerank, no dropped expansion of a kept node has a higher path value than a kept node."""
    target, head = setup()
    depth, top_k, total = 3, 4, 9
    feeder = committed_feeder(head, target)
    tree = draft_dynamic(feeder, depth, top_k, total).row(0)
    feeder.reset()
    logp_sum = {}
    tokens, parents = tree.tokens.tolist(), tree.parents.tolist()
    for i in range(len(tree)):
        logp_sum[i] = (logp_sum[parents[i]] if parents[i] >= 0 else 0.0) + float(tree.probs[i].log())
    worst_kept = min(logp_sum.values())
    children = children_of(tree)
    for row in range(len(tree) + 1):
        node = row - 1
        if node >= 0 and tree.depths[node] == depth:
            continue
        base_value = logp_sum[node] if node >= 0 else 0.0
        logp = sequential_logp(feeder, path_tokens(tree, node) if node >= 0 else [])
        kept = {tokens[c] for c in children[row]}
        if node >= 0 and not kept:
            continue  # an unexpanded node: its candidates may never have existed
        for tok in logp.topk(top_k).indices.tolist():
            if tok not in kept:
                assert base_value + float(logp[tok]) <= worst_kept + 1e-5


def test_the_expansion_key_and_the_kept_nodes_follow_the_settings():
    """growth(expand_by, rerank), chosen once per setting: by value a level expands the children of the best paths,
    by confidence those the head is surest of; rerank keeps the best paths, no rerank the expanded nodes in order."""
    logp = torch.tensor([[[-1.0, -2.0, -3.0], [-0.1, -0.2, -9.0]]])  # [B 1, k 2 expanded nodes, Vd 3]
    parents = torch.tensor([[0.0, -5.0]])  # their path log-values
    for expand_by, picked in (("value", [0, 1]), ("confidence", [2, 3])):
        tokens, values, own, pick = expand_level(logp, parents, 2, None, growth(expand_by).expand)
        assert pick.tolist() == [picked] and torch.allclose(values, torch.tensor([[-1.0, -2.0, -5.1, -5.2]])), expand_by
    values = torch.tensor([[-0.5, -0.1, -0.3, -0.2]])
    fronts = torch.tensor([[-1, 0, 1, 3, 2]])  # the root, then the nodes expanded per level
    assert growth(rerank=True).keep(values, fronts, 2).tolist() == [[1, 3]]  # the two best values
    assert growth(rerank=False).keep(values, fronts, 3).tolist() == [[0, 1, 3]]  # the first three expanded


def test_draft_dynamic_with_a_draft_vocabulary():
    """A head drafting from 5 ids with top_k 6: the sixth candidate of every node has probability 0; the tree is
    still well formed and every token of positive probability is in the draft vocabulary."""
    ids = (4, 90, 17, 33, 61)
    target, head = setup(draft_vocab=ids)
    for rerank in (True, False):
        feeder = committed_feeder(head, target)
        tree = draft_dynamic(feeder, 3, 6, 40, growth(rerank=rerank)).row(0)
        feeder.reset()
        check_tree_shape(tree, 3)
        assert not torch.isnan(tree.probs).any()
        positive = tree.tokens[tree.probs > 0].tolist()
        assert positive and set(positive) <= set(ids)


@pytest.mark.parametrize("paths", [DEFAULT_STATIC_PATHS, chain_paths(4), ((0,), (1,), (2,), (1, 0), (1, 1), (2, 0), (1, 1, 0))])
def test_draft_static_follows_the_paths(paths):
    target, head = setup()
    feeder = committed_feeder(head, target)
    tree = draft_static(feeder, paths).row(0)
    feeder.reset()
    check_tree_shape(tree, max(len(p) for p in paths))
    norm = check_paths(paths)
    index = {p: i for i, p in enumerate(norm)}
    assert tree.depths.tolist() == [len(p) for p in norm]
    assert tree.parents.tolist() == [index[p[:-1]] if len(p) > 1 else -1 for p in norm]
    ranks = {i: p[-1] for i, p in enumerate(norm)}
    check_against_head(feeder, tree, max(ranks.values()) + 1, ranks)
    if paths == chain_paths(4):
        chain = draft_chain(committed_feeder(head, target), 4).row(0)
        assert torch.equal(chain.tokens, tree.tokens) and torch.equal(chain.parents, tree.parents)


# ----------------------------------------------------------------------------------------------------------------
# Batches: rows of different lengths draft in lockstep, each row as if it were alone.

def test_additive_mask_per_row_prefixes():
    allowed = torch.rand(2, 4, 3) > 0.5
    mask = additive_mask(allowed, [3, 5], torch.float32, "cpu")
    assert mask.shape == (2, 1, 4, 8)
    seen = mask[:, 0] == 0
    assert seen[0, :, :3].all() and torch.equal(seen[0, :, 3:6], allowed[0]) and not seen[0, :, 6:].any()
    assert seen[1, :, :5].all() and torch.equal(seen[1, :, 5:8], allowed[1])


def test_causal_mask_is_the_lower_triangle_over_each_rows_prefix():
    """causal_mask's comparison for rows of unequal prefixes gives additive_mask's table of the lower triangle, value
    for value (0 where seen, the dtype's lowest elsewhere), from the prefixes or from the new tokens' keys."""
    triangle = lambda t: torch.ones(t, t, dtype=torch.bool).tril()  # noqa: E731
    for prefix in ([3, 5, 1], [0, 4], [7, 2, 2, 9], [4, 4]):
        for t in (1, 2, 5):
            for dtype in (torch.float32, torch.bfloat16):
                want = additive_mask(triangle(t), prefix, dtype, "cpu")
                assert torch.equal(causal_mask(prefix, t, dtype, "cpu"), want), (prefix, t, dtype)
                keys = torch.tensor(prefix)[:, None] + torch.arange(t)  # the new tokens' keys, as a caller has them
                assert torch.equal(causal_mask(prefix, t, dtype, "cpu", keys), want), (prefix, t, dtype)


def test_ancestor_masks_batch_equals_each_tree():
    trees = [hand_tree(), DraftTree(torch.arange(6), torch.tensor([-1, -1, -1, 2, 3, 3]), torch.tensor([1, 1, 1, 2, 3, 3]),
                                    torch.ones(6))]
    batch = ancestor_masks(torch.stack([t.parents for t in trees]))
    for i, tree in enumerate(trees):
        assert torch.equal(batch[i], tree.ancestor_mask())


PROMPTS = [PROMPT, PROMPT[:4], PROMPT[2:8]]
ROOTS = [ROOT, 12, 50]


def batch_feeder(head: DraftHead, target, room: int = 200) -> TreeFeeder:
    """A feeder over one head cache holding PROMPTS in three rows of different lengths (prefilled row by row)."""
    head = HeadRunner(head, target)
    cache = head.new_cache(len(PROMPTS), max(map(len, PROMPTS)) + room)
    features = []
    with torch.inference_mode():
        for b, (prompt, root) in enumerate(zip(PROMPTS, ROOTS)):
            n = len(prompt)
            _, feats = target.forward(torch.tensor([prompt]), torch.arange(n)[None], target.new_cache(1, n))
            seq = prompt + [root]
            shift = head.config.token_shift
            view = cache.row(b)
            out = head(feats, torch.tensor([seq[shift : shift + n]]), torch.arange(n)[None], view,
                       causal_mask(0, n, feats.dtype, feats.device))
            cache.lengths[b] = n
            features.append(out[0, -1])
    return TreeFeeder(head, cache, DraftRoot(torch.stack(features), ROOTS, [len(p) for p in PROMPTS], [0, 1, 2]))


def single_feeder(feeder: TreeFeeder, b: int) -> TreeFeeder:
    """Row b of a batch feeder, alone."""
    cache = feeder.cache.row(b)
    root = feeder.root
    return TreeFeeder(feeder.head, cache, DraftRoot(root.feature[b : b + 1], [root.tokens[b]], [root.bases[b]], [b]))


@pytest.mark.parametrize("input_mode", ["feature+shifted_token", "feature+token"])
@pytest.mark.parametrize("kind", ["dynamic", "dynamic-norerank", "static", "chain"])
def test_batched_drafting_equals_each_row_alone(input_mode, kind):
    target, head = setup(input_mode)
    draft = {
        "dynamic": lambda f: draft_dynamic(f, 4, 4, 12),
        "dynamic-norerank": lambda f: draft_dynamic(f, 3, 5, 9, growth("confidence", False)),
        "static": lambda f: draft_static(f, DEFAULT_STATIC_PATHS),
        "chain": lambda f: draft_chain(f, 5),
    }[kind]
    feeder = batch_feeder(head, target)
    trees = rows_of(draft(feeder))
    feeder.reset()
    assert feeder.cache.lengths == [len(p) for p in PROMPTS]
    assert len(trees) == len(PROMPTS)
    for b, tree in enumerate(trees):
        alone = draft(single_feeder(feeder, b)).row(0)
        assert tree.tokens.tolist() == alone.tokens.tolist()
        assert tree.parents.tolist() == alone.parents.tolist() and tree.depths.tolist() == alone.depths.tolist()
        torch.testing.assert_close(tree.probs, alone.probs, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("input_mode", ["feature+shifted_token", "feature+token"])
def test_feeder_buffers_grow_without_changing_the_trees(input_mode):
    """A feeder whose buffers start with room for one fed node grows them level by level and drafts the trees a
    roomy one drafts (batch rows of different lengths, so every row's attention row is shifted differently)."""
    target, head = setup(input_mode)
    first = batch_feeder(head, target)
    for draft in (lambda f: draft_dynamic(f, 4, 4, 12), lambda f: draft_static(f, DEFAULT_STATIC_PATHS)):
        feeder = TreeFeeder(first.head, first.cache, first.root)  # (a feeder serves one cycle)
        roomy = rows_of(draft(feeder))
        feeder.reset()
        small = TreeFeeder(first.head, first.cache, first.root, capacity=1)
        grown = rows_of(draft(small))
        small.reset()
        assert small.fed > 2 and small._cap >= small.fed
        for a, b in zip(roomy, grown):
            assert a.tokens.tolist() == b.tokens.tolist() and a.parents.tolist() == b.parents.tolist()
            torch.testing.assert_close(a.probs, b.probs, rtol=1e-5, atol=1e-6)


def test_ancestor_masks_match_walking_up_the_parents():
    """The tensor closure equals the per-node definition on random breadth-first trees, deep chains included, and
    holds exact 0s and 1s in float32 and float64."""
    gen = torch.Generator().manual_seed(0)
    for n in (1, 2, 7, 33, 64, 130):
        parents = torch.stack([torch.tensor([int(torch.randint(-1, i, (), generator=gen)) if i else -1
                                             for i in range(n)]) for _ in range(3)] + [torch.arange(-1, n - 1)])
        masks = ancestor_masks(parents)
        for b, row in enumerate(parents.tolist()):
            for i in range(n):
                expected, j = {0, i + 1}, row[i]
                while j >= 0:
                    expected.add(j + 1)
                    j = row[j]
                assert set(masks[b, i + 1].nonzero()[:, 0].tolist()) == expected
            assert masks[b, 0].nonzero()[:, 0].tolist() == [0]
        assert torch.equal(node_ancestors(parents), masks[:, 1:, 1:].double())  # the nodes' block, as 0/1
        assert torch.equal(node_ancestors(parents, torch.float32), masks[:, 1:, 1:].float())


def test_padded_width_is_a_capped_power_of_two():
    from eagle_infer.trees.tree import padded_width

    assert [padded_width(n, 20) for n in range(0, 21)] == [0, 1, 2, 4, 4] + [8] * 4 + [16] * 8 + [20] * 4
    assert padded_width(7, 8) == 8 and padded_width(5, 5) == 5 and padded_width(9, 6) == 9  # never below n
