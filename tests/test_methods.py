"""The method registry (eagle_infer.decoding.methods): every registered method decodes losslessly from its entry alone, a
method registered here is usable end to end (engine, lookup hybrid, eval), unknown names are one-line errors, the
default is EAGLE-2 with prompt lookup merged in, and the block drafter's methods (dflash, dflash-tree, their hybrids)
take a DFlash drafter only, its block bounding their depth."""
from __future__ import annotations

import pytest

from eagle_infer.decoding import methods
from eagle_infer.decoding.build import build_head
from eagle_infer.config import InferConf, LookupConf
from eagle_infer.trees.drafters import DraftInput
from eagle_infer.trees.drafting import draft_chain
from eagle_infer.head.dflash_head import random_dflash_head
from eagle_infer.head.draft_head import random_head
from eagle_infer.decoding.engine import Engine
from eagle_infer.decoding.methods import Method, hybrid, method_named, method_names, method_of, register, resolve
from eagle_infer.head.block_runner import BlockRunner
from eagle_infer.head.head_runner import HeadRunner
from eagle_infer.config import DEFAULT_METHOD
from eval.cli import DEFAULT_METHODS
from eval.methods import make_methods
from tests.oracles import one_thread, scaled_target, vanilla_tokens  # noqa: F401 (one_thread: autouse fixture)
from tests.test_engine_errors import one_line_error

PROMPT = [5, 9, 2, 7, 5, 9, 2, 7, 5, 9]  # repeats, so prompt lookup finds copies
FIXED = dict(budget="fixed", depth=3, top_k=3, total_tokens=10, max_new_tokens=16, lookup_conf=LookupConf(num_tokens=3))


@pytest.fixture(scope="module")
def target():
    return scaled_target(vocab=96, seed=3, name="tiny-methods")


@pytest.fixture
def registry(monkeypatch):
    """The registry as a copy this test may extend (restored afterwards)."""
    monkeypatch.setattr(methods, "METHODS", dict(methods.METHODS))
    return methods.METHODS


class TwoTokenDrafter:
    """A new method's drafter: the head's top-1 twice, whatever the config's depth."""

    def propose(self, inp: DraftInput):
        return draft_chain(inp.feeder, 2)


PAIR = Method("pair", head=True, tree="chain", drafter=TwoTokenDrafter, tree_size=lambda c: 2,
              feed_budget=lambda c: 2, chains=lambda c: True)


def test_the_default_is_eagle2_with_lookup():
    assert DEFAULT_METHOD == "eagle2+lookup" == InferConf().method
    spec = method_of(InferConf())
    assert spec.head and spec.tree == "hybrid" and spec.merges_lookup and spec.takes_auto(InferConf())
    assert resolve(InferConf()).budget == "auto"  # the default tree is chosen per cycle, lookup's copies counted
    assert DEFAULT_METHODS[:3] == ["vanilla", "eagle2+lookup", "eagle2"]  # eval compares it with EAGLE-2 and vanilla
    assert method_named("eagle2").tree == "dynamic" and not method_named("eagle2").lookup  # eagle2 stays selectable


def drafter_for(target, name: str):
    """A random head of the first block method `name` drafts with (None for a headless method): an EAGLE head, or a
    DFlash drafter of blocks of 4 fused over both layers of the 2-layer target."""
    method = method_named(name)
    if not method.head:
        return None
    if method.blocks[0] == "dflash":
        return random_dflash_head(target, 95, seed=3, block_size=4, feature_layers=[0, 1])
    return random_head(target, seed=3)


@pytest.mark.parametrize("name", method_names())
def test_every_registered_method_decodes_losslessly(target, name):
    head = drafter_for(target, name)
    config = InferConf(method=name, **FIXED)
    engine = Engine(target, head, config)
    assert method_of(engine.config) is method_named(name) and (engine.head is None) == (not method_named(name).head)
    assert engine.generate(PROMPT, 16).tokens == vanilla_tokens(target, PROMPT, 16)


def test_the_lookup_flag_names_the_hybrid(target):
    """infer.lookup=true beside a head method is its "+lookup" entry; beside one without a hybrid, a one-line error."""
    config = Engine(target, random_head(target), InferConf(method="chain", lookup=True, **FIXED)).config
    assert (config.method, config.lookup) == ("chain+lookup", True) and method_of(config) is method_named("chain+lookup")
    assert resolve(InferConf(method="eagle2+lookup", lookup=True)).method == "eagle2+lookup"
    one_line_error(lambda: resolve(InferConf(method="vanilla", lookup=True)), "lookup=true", "'vanilla'",
                   "chain, eagle1, eagle2")


def test_unknown_method_is_one_line(target):
    message = one_line_error(lambda: Engine(target, None, InferConf(method="eagle4")), "unknown method 'eagle4'")
    assert all(name in message for name in method_names())
    one_line_error(lambda: make_methods(["eagle4"], target, InferConf(), None, None, "float32"),
                   "unknown method 'eagle4'", "eagle2+lookup", "pld")
    one_line_error(lambda: Method("odd", head=False, tree="forest", drafter=None, tree_size=len), "'forest'",
                   "dynamic")
    one_line_error(lambda: register(method_named("eagle2")), "'eagle2' is already registered")
    one_line_error(lambda: hybrid(method_named("lookup")), "'lookup' has no head drafter")


def test_a_registered_method_is_usable_end_to_end(target, registry, tmp_path, monkeypatch):
    """A new entry (its own drafter and tree arithmetic) decodes losslessly through the engine, its hybrid through
    infer.lookup=true, and both through eval; the scheduler verifies its chains causally (entry.chains)."""
    monkeypatch.setenv("EAGLE_CACHE", str(tmp_path))
    register(PAIR)
    register(hybrid(PAIR))
    head = random_head(target, seed=3)
    reference = vanilla_tokens(target, PROMPT, 16)
    result = Engine(target, head, InferConf(method="pair", **FIXED)).generate(PROMPT, 16)
    assert result.tokens == reference and max(c.tree_size for c in result.cycles) == 2
    two = LookupConf(num_tokens=2)
    merged = Engine(target, head, InferConf(method="pair", lookup=True, **{**FIXED, "lookup_conf": two}))
    assert merged.config.method == "pair+lookup" and merged.generate(PROMPT, 16).tokens == reference
    one_line_error(lambda: Engine(target, head, InferConf(method="pair+lookup", **FIXED)), "lookup.num_tokens 3",
                   "pair+lookup", "infer.method=pair")  # the copies (3) do not fit the pair's 2 nodes
    assert build_head(InferConf(method="pair", head="random"), target) is not None
    pair, lookup = make_methods(["pair", "lookup"], target, InferConf(**FIXED), head, None, "float32")
    answer = pair.generate_batch([PROMPT], 16, InferConf().sampling(), [], 0)
    assert answer.results[0].tokens == reference and method_of(pair.engine.config) is PAIR


def test_without_a_head_the_default_says_what_decodes(target):
    """A model with no shipped head: the default method names the way out, headless methods included."""
    one_line_error(lambda: build_head(InferConf(), target), "no shipped draft head for model 'tiny-methods'",
                   "infer.head=random", "infer.method=lookup")
    assert build_head(InferConf(method="lookup"), target) is None


def test_eval_resumes_a_run_made_under_another_default_method(tmp_path):
    """eval's `methods` set each engine's method, so a run directory whose config.yaml names another infer.method
    (an earlier default) resumes; another infer setting is still refused."""
    from omegaconf import OmegaConf

    from eval.cli import EvalRunConf, _check_same_settings

    earlier = EvalRunConf()
    earlier.infer.method, earlier.infer.lookup = "eagle2", True
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(earlier)))
    _check_same_settings(EvalRunConf(), tmp_path)
    other = EvalRunConf()
    other.infer.top_k = 4
    one_line_error(lambda: _check_same_settings(other, tmp_path), "other infer settings")


def test_the_block_drafter_methods_are_registered_with_their_hybrids():
    """dflash verifies one chain (causally), dflash-tree a tree; both take the auto budget and a DFlash drafter only,
    and each has its +lookup hybrid (dflash+lookup's budget: the longer of the block's chain and the copies)."""
    for name in ("dflash", "dflash-tree", "dflash+lookup", "dflash-tree+lookup"):
        assert method_named(name).blocks == ("dflash",) and method_named(name).head
    assert method_named("dflash").chains(InferConf()) and not method_named("dflash-tree").chains(InferConf())
    assert method_named("dflash+lookup").merges_lookup and method_of(InferConf(method="dflash", lookup=True)).name \
        == "dflash+lookup"
    assert all(method_named(m).blocks == ("eagle", "eagle3") for m in ("chain", "eagle1", "eagle2", "eagle2+lookup"))
    hybrid_size = methods.tree_size(InferConf(method="dflash+lookup", depth=7, budget="fixed"))
    assert hybrid_size == max(7, LookupConf().num_tokens)


def test_a_block_drafters_block_bounds_the_depth(target):
    """depth "auto" is every token the block drafts (B - 1), under either budget; an integer is a cap."""
    head = random_dflash_head(target, 95, seed=3, block_size=6, feature_layers=[0, 1])
    for config, depth, budget in ((InferConf(method="dflash"), 5, "auto"),
                                  (InferConf(method="dflash", budget="fixed"), 5, "fixed"),
                                  (InferConf(method="dflash", depth=3), 3, "auto"),
                                  (InferConf(method="dflash-tree", depth=12, total_tokens=9), 5, "fixed")):
        resolved = resolve(config, head.config)
        assert (resolved.depth, resolved.budget) == (depth, budget), config
    engine = Engine(target, head, InferConf(method="dflash", budget="fixed"))
    result = engine.generate(PROMPT, 12)
    assert {c.tree_size for c in result.cycles} == {5} and result.tokens == vanilla_tokens(target, PROMPT, 12)


def test_a_head_of_another_block_is_one_line(target):
    """A DFlash drafter given to an EAGLE method, and an EAGLE head given to a block drafter's method."""
    dflash = random_dflash_head(target, 95, seed=3, block_size=4, feature_layers=[0, 1])
    one_line_error(lambda: Engine(target, dflash, InferConf(method="eagle2", **FIXED)),
                   "method 'eagle2' drafts with a head of block eagle or eagle3, not head.block='dflash'",
                   "infer.method=dflash / dflash-tree / dflash+lookup / dflash-tree+lookup")
    one_line_error(lambda: Engine(target, random_head(target), InferConf(method="dflash", **FIXED)),
                   "method 'dflash' drafts with a head of block dflash, not head.block='eagle'", "infer.head=random",
                   "infer.method=chain / eagle1 / eagle2")


def test_a_random_head_is_of_the_methods_block():
    """infer.head=random builds an untrained DFlash drafter of the target's shape for the block drafter's methods
    (fused over EAGLE-3's layers, masking with the target's default mask token), an EAGLE head for the others."""
    deep = scaled_target(vocab=96, layers=6, seed=3, name="tiny-methods-6")
    runner = build_head(InferConf(method="dflash", head="random"), deep)
    assert isinstance(runner, BlockRunner) and runner.config.block == "dflash" and runner.block_size == 8
    assert runner.config.feature_layers == [1, 2, 2] and runner.config.mask_token_id == 95  # (no tokenizer: last id)
    assert isinstance(build_head(InferConf(method="eagle2", head="random"), deep), HeadRunner)
    assert Engine(deep, runner, InferConf(method="dflash", budget="fixed")).config.depth == 7
