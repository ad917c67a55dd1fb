"""The compiled forward (infer.compile, eagle_infer/models/compiled.py): the same logits as the eager forward over a static
cache, no graph compiled after warm-up, and an eager fallback with one warning when compiling fails. Decoding through
it is checked in the lossless, batch, sampling and head tests (their `path` parameter)."""
from __future__ import annotations

import logging
import shutil

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from eagle_infer.models.compiled import STATIC_ROUND
from eagle_infer.platform import HOST_READ_OPS
from eagle_infer.head.block_runner import BlockRunner
from eagle_infer.head.dflash_head import random_dflash_head
from eagle_infer.head.draft_head import random_head
from eagle_infer.config import InferConf
from eagle_infer.decoding.engine import Engine
from eagle_infer.models.target import compile_target, load_target
from eagle_infer.trees.tree import ancestor_masks
from eagle_infer.models.masks import additive_mask
from tests.oracles import one_thread, scaled_target, vanilla_tokens  # noqa: F401 (one_thread is autouse)

VOCAB = 96


@pytest.fixture(scope="module")
def pair():
    target = scaled_target(vocab=VOCAB, layers=6, seed=11, name="tiny-compiled")
    return target, compile_target(target)


def test_compiled_forward_matches_eager_over_a_static_cache(pair):
    """Prefill, then a tree forward under a tree mask, with fused layer outputs: eager (sliced cache) and compiled
    (every slot of a static cache, rounded up) agree."""
    eager, fast = pair
    ids = torch.randint(0, VOCAB, (1, 17), generator=torch.Generator().manual_seed(0))
    parents = torch.tensor([[-1, -1, 0, 0, 2]])
    tree_ids = torch.randint(0, VOCAB, (1, 6), generator=torch.Generator().manual_seed(1))
    tree_pos = 17 + torch.tensor([[0, 1, 1, 2, 2, 3]])
    outs = []
    for target in (eager, fast):
        cache = target.new_cache(1, 40)
        prefill = target.forward(ids, torch.arange(17)[None], cache, feature_layers=(1, 4))
        cache.advance(17)
        mask = additive_mask(ancestor_masks(parents), 17, target.dtype, "cpu")
        outs.append((prefill, target.forward(tree_ids, tree_pos, cache, mask, feature_layers=(1, 4)), cache))
    (p_eager, t_eager, c_eager), (p_fast, t_fast, c_fast) = outs
    assert c_fast.static and c_fast.max_len == STATIC_ROUND and not c_eager.static and c_eager.max_len == 40
    for a, b in zip(p_eager + t_eager, p_fast + t_fast):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert t_fast[1].shape == (1, 6, 2 * 64)  # two fused layers' outputs


HAS_COMPILER = any(shutil.which(c) for c in ("g++", "c++", "clang++"))


@pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler: inductor falls back to eager (the next test covers that)")
@pytest.mark.slow
def test_no_graph_is_compiled_after_warm_up(pair):
    """Two requests of different lengths per method compile what decoding needs; more requests compile nothing."""
    eager, fast = pair
    head = random_head(eager, seed=3)
    engines = [Engine(fast, None, InferConf(method="vanilla")),
               Engine(fast, head, InferConf(method="eagle2", depth=3, top_k=4, total_tokens=10))]
    for engine in engines:
        for prompt in ([5, 6, 7], list(range(20, 45))):
            engine.generate(prompt, 12)
    warm = fast.compiled_forward.compiles
    assert warm >= 2 and fast.compiled_forward.compile_s > 0 and not fast.compiled_forward.failed
    prompts = [[9], list(range(30, 41)), list(range(1, 60, 2))]
    for engine in engines:
        assert [engine.generate(p, 15).tokens for p in prompts] == [vanilla_tokens(eager, p, 15) for p in prompts]
    assert fast.compiled_forward.compiles == warm


def test_a_failed_compile_decodes_eagerly_with_one_warning(monkeypatch, caplog):
    """No C++ compiler (or any compile error): one warning, then the eager forward, same output."""
    import torch._inductor.compile_fx as compile_fx

    def broken(*args, **kwargs):
        raise RuntimeError("no working C++ compiler found\nsecond line")

    monkeypatch.setattr(compile_fx, "compile_fx", broken)
    target = scaled_target(vocab=VOCAB, seed=12, name="tiny-no-compiler")
    fast = compile_target(target)
    prompt = [4, 8, 15, 16, 23, 42]
    with caplog.at_level(logging.WARNING, logger="eagle_infer.models.compiled"):
        tokens = Engine(fast, None, InferConf(method="vanilla")).generate(prompt, 10).tokens
    assert tokens == vanilla_tokens(target, prompt, 10)
    warnings = [r.getMessage() for r in caplog.records if r.name == "eagle_infer.models.compiled"]
    assert len(warnings) == 1 and "the target's forward failed" in warnings[0] and "\n" not in warnings[0]
    assert "no working C++ compiler found" in fast.compiled_forward.failed


def test_load_target_compiles_without_packing_modules(tmp_path, smol_tok):
    """infer.compile: the weights stay plain modules (inductor's freezing packs them in the graph)."""
    from eagle_infer.models.packed import PackedLinear
    from tests.conftest import make_tiny_smol

    make_tiny_smol(smol_tok).model.save_pretrained(tmp_path)
    smol_tok.save_pretrained(tmp_path)
    target = load_target(str(tmp_path), "float32", "cpu", "auto", compile=True)
    assert target.compiled_forward is not None and target.new_cache(1, 10).static
    assert not any(isinstance(m, PackedLinear) for m in target.model.modules())
    assert load_target(str(tmp_path), "float32", "cpu", "auto").compiled_forward is None


def test_text_writing_stages_load_a_compiled_target_when_asked():
    """featurize.compile: the stages that write text (regenerated answers, self-written prompts) decode through the
    compiled target; training never compiles it, and the default is the eager target."""
    from eagle_train.cli import FeaturizeConfig, TrainRunConf, compiles_target

    asked = [compiles_target(TrainRunConf(stage=stage, featurize=FeaturizeConfig(compile=compile_)))
             for stage, compile_ in [("regenerate", True), ("featurize", True), ("train", True), ("regenerate", False)]]
    assert asked == [True, True, False, False]
    assert compiles_target(TrainRunConf(stage="regenerate")) is False


def test_feature_layers_outside_the_target_are_one_line_errors(pair):
    from eagle_infer.errors import EagleError

    eager, fast = pair
    for target in (eager, fast):
        cache = target.new_cache(1, 8)
        with pytest.raises(EagleError, match=r"^feature layer 6 is invalid: the target has decoder layers 0\.\.5$"):
            target.forward(torch.tensor([[1, 2]]), torch.arange(2)[None], cache, feature_layers=(1, 6))


class Recorded:
    """A HeadRunner's compiled step, recording the `after` (head_runner.AfterStep) of every call."""

    def __init__(self, inner):
        self.inner, self.afters = inner, []

    def __call__(self, *args):
        self.afters.append(args[7])
        return self.inner(*args)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler: inductor falls back to eager")
@pytest.mark.slow
def test_compiled_head_step_drafts_losslessly_with_no_graph_after_warm_up(pair):
    """The head's step compiled (what a HeadRunner does for a target compiled on a GPU, forced here on the CPU): it
    predicts what the eager head does over a static cache, every drafter's greedy output is vanilla's, EAGLE-2's
    levels run their bookkeeping in the compiled call, and more requests compile no graph."""
    from eagle_infer.trees.drafting import DraftRoot, TreeFeeder
    from eagle_infer.head.expansion import expanded
    from eagle_infer.head.head_runner import HeadRunner

    eager, fast = pair
    plain = HeadRunner(random_head(fast, seed=5, layers=2), fast)
    assert plain.compiled is None  # a CPU target: the head drafts eagerly unless asked
    head = HeadRunner(random_head(fast, seed=5, layers=2), fast, compile_step=True)
    assert head.new_cache(1, 10).static and head.new_cache(1, 10).max_len == STATIC_ROUND
    feats = torch.randn(1, 9, 64, generator=torch.Generator().manual_seed(2))
    levels = []
    for h in (plain, head):  # a prompt pass, then one tree level of 3 nodes under an ancestor mask
        cache = h.new_cache(1, 20)
        prompt = h(feats, torch.arange(1, 10)[None], torch.arange(9)[None], cache, None)
        cache.advance(9)
        feeder = TreeFeeder(h, cache, DraftRoot(prompt[:, -1], [3], [9], [0]))
        levels.append((prompt, feeder.feed(torch.full((1, 3), -1), torch.tensor([[4, 5, 6]]), 1)))
    for a, b in zip(*levels):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    configs = [InferConf(method="eagle2", depth=3, top_k=4, total_tokens=10), InferConf(method="eagle1"),
               InferConf(method="chain", depth=4)]
    engines = [Engine(fast, head, c) for c in configs]
    head.compiled = Recorded(head.compiled)
    for engine in engines:
        for prompt in ([5, 6, 7], list(range(20, 45))):
            engine.generate(prompt, 12)
    warm = head.compiled.compiles
    assert warm >= 2 and not head.compiled.failed
    prompts = [[9], list(range(30, 41)), list(range(1, 60, 2))]
    for engine in engines:
        assert [engine.generate(p, 15).tokens for p in prompts] == [vanilla_tokens(eager, p, 15) for p in prompts]
    assert head.compiled.compiles == warm
    assert expanded in head.compiled.afters and None in head.compiled.afters  # EAGLE-2 expands in the compiled call


@pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler: inductor falls back to eager")
@pytest.mark.slow
def test_compiled_block_forward_drafts_losslessly_with_no_graph_after_warm_up(pair):
    """A DFlash drafter's block forward compiled (what a BlockRunner does beside a target compiled on a GPU, forced
    here on the CPU): over its static context cache it drafts the eager forward's logits, dflash's greedy output is
    vanilla's, and more requests compile no graph."""
    eager, fast = pair
    module = random_dflash_head(fast, VOCAB - 1, seed=5, block_size=4)
    plain, runner = BlockRunner(module, fast), BlockRunner(module, fast, compile_step=True)
    assert plain.compiled is None  # a CPU target: the block drafts eagerly unless asked
    assert runner.new_cache(1, 10).static and runner.new_cache(1, 10).max_len == STATIC_ROUND
    fused = torch.randn(1, 9, 3 * 64, generator=torch.Generator().manual_seed(2))
    drafts = []
    for r in (plain, runner):  # a prompt's context, then the block after it
        cache = r.new_cache(1, 20)
        r(fused, None, torch.arange(9)[None], cache, None)
        cache.advance(9)
        drafts.append(r.draft(cache, torch.tensor([[3]]), cache.length_column()))
    torch.testing.assert_close(*drafts, rtol=1e-5, atol=1e-5)
    engine = Engine(fast, runner, InferConf(method="dflash", budget="fixed"))
    engine.generate([5, 6, 7], 12)
    warm = runner.compiled.compiles
    assert warm >= 1 and not runner.compiled.failed
    more = [list(range(30, 41)), list(range(1, 60, 2))]
    assert [engine.generate(p, 15).tokens for p in more] == [vanilla_tokens(eager, p, 15) for p in more]
    assert runner.compiled.compiles == warm


# ----------------------------------------------------------------------------------------------------------------
# The cycle's device steps compile whole: torch.compile(fullgraph=True) raises at the first graph break. Dynamo
# now traces host reads (.item(), .tolist(), data-dependent shapes) by specialising on the values read, so the eager
# run of the same steps also goes under `no_host_reads`, which fails at the first operator whose result the host
# would wait for. Dynamo's "eager" backend checks the capture without paying for inductor.


class no_host_reads(TorchDispatchMode):
    """Within it, an operator that reads a tensor's values to the host (or Tensor.tolist) raises."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if str(func).startswith(HOST_READ_OPS):
            raise AssertionError(f"{func} reads the device from the host")
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        self._tolist = torch.Tensor.tolist
        torch.Tensor.tolist = lambda _self: (_ for _ in ()).throw(AssertionError("tolist reads the device"))
        return super().__enter__()

    def __exit__(self, *exc):
        torch.Tensor.tolist = self._tolist
        return super().__exit__(*exc)


def _random_batch(gen: torch.Generator, b: int, n: int):
    """A TreeBatch of b random breadth-first trees of up to n nodes (last row full), tokens < VOCAB."""
    from eagle_infer.trees.tree import DraftTree, TreeBatch

    trees = []
    for row in range(b):
        size = n if row == b - 1 else int(torch.randint(1, n + 1, (), generator=gen))
        parents = [int(torch.randint(-1, i, (), generator=gen)) if i else -1 for i in range(size)]
        depths = []
        for p in parents:
            depths.append(1 if p < 0 else depths[p] + 1)
        trees.append(DraftTree(torch.randint(0, VOCAB, (size,), generator=gen), torch.tensor(parents),
                               torch.tensor(depths), torch.rand(size, generator=gen)))
    return TreeBatch.of_trees(trees, "cpu")


def test_verification_and_acceptance_compile_without_a_graph_break():
    """The verification input, greedy and sampled acceptance and the commit's index ops (accept_and_commit, the
    step the engine runs), traced as one graph at a padded width, give what the eager functions give."""
    from eagle_infer.trees.tree import TreeBatch
    from eagle_infer.decoding.verify import argmax, target_probs
    from eagle_infer.draws import inverse_cdf
    from eagle_infer.config import SamplingParams
    from eagle_infer.decoding.verify_batch import accept_and_commit, kept_columns, verification_input

    gen = torch.Generator().manual_seed(0)
    tree = _random_batch(gen, 3, 8).padded(8)
    roots, bases = torch.randint(0, VOCAB, (3, 1), generator=gen), torch.tensor([[5], [9], [7]])
    logits = torch.randn(3, 9, VOCAB, generator=gen) * 3
    uniforms = torch.rand(3, 9, generator=gen, dtype=torch.float64)
    params = SamplingParams(temperature=0.8, sampling_top_k=5)

    def step(tokens, parents, depths, sizes, roots, bases, logits, uniforms):
        trees = TreeBatch(tokens, parents, depths, torch.zeros(tokens.shape), torch.zeros_like(tokens, dtype=torch.bool),
                          sizes, tree.depth)
        batch = verification_input(trees, roots, bases)
        greedy = accept_and_commit(tokens, parents, sizes, batch.allowed, argmax(logits), batch.ids,
                                   kept_columns(trees, static=True), False)
        draws = inverse_cdf(target_probs(logits, params), uniforms)
        # (the commit fed from the draws themselves, as for a head trained on shifted tokens: one tensor, two inputs)
        sampled = accept_and_commit(tokens, parents, sizes, batch.allowed, draws, draws,
                                    kept_columns(trees, static=False), False)
        return (batch.positions, batch.allowed) + greedy + sampled

    args = (tree.tokens, tree.parents, tree.depths, tree.sizes, roots, bases, logits, uniforms)
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="eager")
    with no_host_reads():
        eager = step(*args)
    for got, want in zip(compiled(*args), eager):
        assert torch.equal(got, want)


@pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler: inductor falls back to eager")
def test_compiled_acceptance_decodes_as_the_eager_one(pair):
    """Acceptance + commit compiled (what an engine over a target compiled on a GPU runs, captured per width; forced
    here on the CPU): greedy output is vanilla's, sampled output and batches are the eager engine's, and more requests
    compile no graph."""
    from eagle_infer.config import SamplingParams
    from eagle_infer.decoding.verify_batch import accept_and_commit
    from eagle_infer.models.compiled import CompiledForward

    eager, _ = pair
    head = random_head(eager, seed=3)
    config = InferConf(method="eagle2", depth=3, top_k=4, total_tokens=10, pad_trees="on")
    plain, captured = Engine(eager, head, config), Engine(eager, head, config)
    assert plain.accept is accept_and_commit  # a CPU target: acceptance runs eagerly
    captured.accept = CompiledForward(None, accept_and_commit, torch.device("cpu"), "acceptance")
    sampled = SamplingParams(temperature=0.9)
    prompts = [[5, 6, 7], list(range(20, 45)), [9]]
    for p in prompts[:2]:
        captured.generate(p, 12), captured.generate(p, 12, sampled)
    captured.generate_batch(prompts, 12, batch_size=3)
    warm = captured.accept.compiles
    assert warm >= 1 and not captured.accept.failed
    for p in prompts:
        assert captured.generate(p, 15).tokens == vanilla_tokens(eager, p, 15)
        assert captured.generate(p, 15, sampled, seed=4).tokens == plain.generate(p, 15, sampled, seed=4).tokens
    both = [e.generate_batch(prompts, 15, sampled, seed=2, batch_size=3) for e in (captured, plain)]
    assert [r.tokens for r in both[0].results] == [r.tokens for r in both[1].results]
    assert captured.accept.compiles == warm


def test_a_draft_level_compiles_without_a_graph_break():
    """One EAGLE-2 level of a head with a draft vocabulary smaller than top-k: the level's inputs read from the
    feeder's buffers, the head's step over a static cache with the level's draft logits, log-softmax, top-k over the
    vocabulary and bookkeeping in the same call (head_step with `expanded`, as the engine runs it), and the auto
    budget's plan, traced as one graph, give what the eager level gives."""
    from eagle_infer.trees.cost import Budget, CostModel
    from eagle_infer.trees.drafting import level_inputs
    from eagle_infer.head.expansion import by_value, expanded
    from eagle_infer.head.head_runner import HeadRunner, head_step
    from eagle_infer.models.kv_cache import KVCache
    from eagle_infer.models.masks import causal_mask

    target = scaled_target(vocab=VOCAB, layers=2, seed=4, name="tiny-level")
    runner = HeadRunner(random_head(target, seed=4, draft_vocab=torch.arange(0, VOCAB, 16)), target)  # 6 ids < top-k 8
    gen = torch.Generator().manual_seed(1)
    feats = torch.randn(2, 8, target.hidden_size, generator=gen)
    tokens = torch.randint(0, VOCAB, (2, 8), generator=gen)
    values = torch.randn(2, 8, generator=gen).clamp(max=0)
    positions = (torch.tensor([[11], [14]]) + torch.zeros(2, 8, dtype=torch.long))

    # the feeder's buffers: 2 rows x [root, 8 fed slots] of features and attention rows over 11 + 9 keys
    outputs = torch.randn(2, 9, target.hidden_size, generator=gen)
    masks = torch.where(torch.rand(2, 9, 20, generator=gen) < 0.5, 0.0, torch.finfo(feats.dtype).min)
    up, keys = torch.randint(0, 9, (2, 8), generator=gen), torch.randint(0, 20, (2, 8), generator=gen)
    sizes = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128]
    budget = Budget(CostModel({}, sizes, [25 + 0.4 * t for t in sizes], 3.0), 2, 24)
    others = torch.randn(2, 5, generator=gen).clamp(max=0)

    def level(cache, feats, tokens, rope, mask, slots, values, outputs, masks, up, keys):
        parents, rows, head_mask = level_inputs(outputs, masks, torch.arange(2)[:, None], up, keys, 19)
        out, *children = head_step(runner.step, feats, tokens, rope, mask, cache.k, cache.v, slots, expanded,
                                   (values, 8, runner.vocab_order, by_value))
        children = tuple(children)
        more = budget.evidence(torch.cat([children[1], others], 1), 2, values, children[2], others).summary
        return (parents, rows, head_mask, out) + children + (more,)

    results = []
    def eager_level(*args):
        with no_host_reads():
            return level(*args)

    for fn in (eager_level, torch.compile(level, fullgraph=True, backend="eager")):
        # the compiled head step's cache: static (every slot attended, writes planned as tensors)
        cache = KVCache(runner.config.layers, *target.kv_shape(2)[1:], 32, feats.dtype, "cpu", static=True)
        cache.lengths = [11, 14]
        mask = cache.attention_mask(causal_mask([11, 14], 8, feats.dtype, "cpu"), 8, feats.dtype)
        rope = runner.rope.take(positions, feats.dtype, cache.max_len)
        with torch.inference_mode():
            results.append(fn(cache, feats, tokens, rope, mask, cache.slots(8), values, outputs, masks.clone(), up,
                              keys))
    torch._dynamo.reset()
    for got, want in zip(*results):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert (results[0][4] >= 0).all() and (results[0][4] < VOCAB).all()
