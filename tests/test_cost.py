"""The auto tree budget (eagle_infer/trees/cost.py): the per-cycle choice maximises expected tokens per ms, drafting stops
when a level cannot pay, decoding stays lossless whatever the cost model says, and a cost model measured on another
machine is never reused."""
from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch

from eagle_infer.decoding.methods import resolve, tree_size
from eagle_infer.config import AUTO_MAX_DEPTH, AUTO_MAX_TOKENS, FIXED_DEPTH, FIXED_TOKENS, InferConf
from eagle_infer.trees.cost import COST_REVISION, Budget, CostModel, cache_path
from eagle_infer.trees.cost_measure import load_or_measure
from eagle_infer.platform import machine_key
from eagle_infer.decoding.engine import Engine
from tests.oracles import one_thread, vanilla_tokens  # noqa: F401 (autouse fixture)
from tests.test_engine_errors import one_line_error
from tests.test_engine_lossless import CASES, case, target_and_head
from tests.test_lookup import copy_prompt, target_and_head as lookup_target_and_head

SIZES = [1, 2, 4, 8, 16, 32, 64, 128]


def cost(per_token: float, level_ms: float = 1.0, base: float = 10.0) -> CostModel:
    """A synthetic model: a forward of t tokens costs base + per_token * t ms."""
    return CostModel({}, SIZES, [base + per_token * t for t in SIZES], level_ms)


def test_forward_interpolates_and_extends():
    model = CostModel({}, [1, 4, 8], [10.0, 16.0, 18.0], 1.0)
    assert model.forward(1) == 10.0 and model.forward(0) == 10.0
    assert model.forward(2) == pytest.approx(12.0) and model.forward(6) == pytest.approx(17.0)
    assert model.forward(12) == pytest.approx(20.0)  # the last segment's slope, extended


def nodes(budget: Budget, values: torch.Tensor, levels: int) -> int:
    """The nodes per row the budget plans to verify after drafting `values` in `levels` levels."""
    return int(budget.next_plan(values, levels)[1])


def deeper(budget: Budget, values, frontier, levels: int, mass=1.0) -> bool:
    """Whether the budget plans one level more than `levels`, the frontier's children expected to hold `mass` (one
    frontier node's top-k children: one child of that probability)."""
    children = None if mass == 1.0 else torch.tensor([[math.log(mass)]])
    return int(budget.next_plan(values, levels, frontier, children)[0]) == levels + 1


def test_plan_maximises_expected_tokens_per_ms():
    gen = torch.Generator().manual_seed(0)
    values = torch.rand(2, 40, generator=gen).log() * 3  # path log-probabilities of 40 candidates in 2 rows
    for per_token, levels in ((0.0, 3), (0.05, 2), (0.5, 4), (5.0, 1)):
        model = cost(per_token)
        probs = values.exp().sort(-1, descending=True).values
        rates = [(2 + float(probs[:, :m].sum())) / (levels + model.forward(2 * (1 + m))) for m in range(1, 33)]
        assert nodes(Budget(model, 2, 32), values, levels) == 1 + max(range(32), key=rates.__getitem__)
    assert nodes(Budget(cost(0.0), 2, 32), values, 3) == 32  # free verification: verify every candidate allowed
    assert nodes(Budget(cost(50.0), 2, 32), values, 3) == 1  # dear verification: the best node only
    # Fewer candidates than the cap, each worth verifying, and one more as likely would be too: the cap, for the
    # next cycle may draft more; weak ones at a dear cost: the best only.
    likely, weak = torch.full((1, 3), 0.99).log(), torch.full((1, 3), 0.3).log()
    assert nodes(Budget(cost(0.01), 1, 8), likely, 1) == 8
    assert nodes(Budget(cost(0.01), 1, 8), likely[:, :0].new_full((1, 3), -torch.inf), 1) == 1  # none: nothing pays
    assert nodes(Budget(cost(50.0), 1, 8), weak, 1) == 1


def test_plan_goes_deeper_only_when_a_level_pays():
    values = torch.tensor([[-0.1, -2.0, -3.0]])
    likely, unlikely = torch.tensor([[-0.2]]), torch.tensor([[-9.0]])
    assert deeper(Budget(cost(0.1, level_ms=1.0), 1, 8), values, likely, 1)
    assert not deeper(Budget(cost(0.1, level_ms=1.0), 1, 8), values, unlikely, 1)
    assert not deeper(Budget(cost(0.1, level_ms=1e4), 1, 8), values, likely, 1)
    # The children's expected mass scales the gain: a head spreading its probability thin stops sooner.
    assert not deeper(Budget(cost(0.1, level_ms=1.0), 1, 8), values, likely, 1, mass=0.01)
    # Verifying the new level's nodes costs too: with dear tokens a doubtful level does not pay, with free ones it does.
    doubtful = torch.tensor([[-1.0]])
    assert not deeper(Budget(cost(10.0, level_ms=0.0), 1, 8), values, doubtful, 1)
    assert deeper(Budget(cost(0.0, level_ms=0.0), 1, 8), values, doubtful, 1)
    # The count planned with the depth is what the candidates alone decide.
    for per_token in (0.0, 0.1, 10.0):
        budget = Budget(cost(per_token, level_ms=1.0), 1, 8)
        assert int(budget.next_plan(values, 2, unlikely)[1]) == nodes(budget, values, 2)


def test_plan_goes_shallower_when_the_last_level_did_not_pay():
    """Without its last level, a level cheaper, the candidates are worth more tokens per ms: one level fewer. A
    level whose candidates are likely, or one that costs nothing, stays; the first level always does."""
    older = torch.tensor([[-0.1, -0.5, -3.0]])
    weak, strong = torch.tensor([[-6.0, -7.0]]), torch.tensor([[-0.2, -0.3]])
    plan = lambda budget, newest, levels=3: int(budget.next_plan(  # noqa: E731
        torch.cat([older, newest], 1), levels, older=older)[0])
    assert plan(Budget(cost(0.1, level_ms=5.0), 1, 8), weak) == 2
    assert plan(Budget(cost(0.1, level_ms=0.01), 1, 8), strong) == 3
    assert plan(Budget(cost(0.1, level_ms=0.0), 1, 8), weak) == 3
    assert plan(Budget(cost(0.1, level_ms=5.0), 1, 8), weak, levels=1) == 1


@pytest.mark.parametrize("per_token,level_ms", [(0.0, 0.0), (0.3, 1.0), (50.0, 1.0), (0.1, 1e5)])
@pytest.mark.parametrize("plan_ahead", ["off", "on"])
def test_auto_budget_is_lossless_and_follows_the_cost(per_token, level_ms, plan_ahead):
    """Deciding as it drafts, every cycle's count and depth are where the costs put them. Planning ahead, each cycle
    follows the plan the one before made (the first drafts and verifies up to the caps): the count rises at once
    and falls by half a cycle, the depth moves a level a cycle, so after a few cycles both are there."""
    config = InferConf(method="eagle2", depth=5, top_k=4, total_tokens=24, budget="auto", plan_ahead=plan_ahead)
    settled = 6 if plan_ahead == "on" else 0  # 24 nodes halving down to 1, 5 levels down to 1
    sizes, depths = [], []
    for seed, prompt_len, max_new in CASES:
        target, head = target_and_head(seed)
        prompt, expected = case(seed, prompt_len, max_new)
        result = Engine(target, head, config, cost=cost(per_token, level_ms)).generate(list(prompt), max_new)
        assert result.tokens == list(expected)
        assert all(c.tree_size <= 24 and c.tree_depth <= 5 for c in result.cycles)
        if plan_ahead == "on":
            assert result.cycles[0].tree_size == 24
        sizes += [c.tree_size for c in result.cycles[settled:]]
        depths += [c.tree_depth for c in result.cycles[settled:]]
    if per_token == 0 and level_ms == 0:
        assert sizes and set(sizes) == {24}  # everything is free: the whole budget
    if per_token == 50:
        assert set(sizes) == {1}
    if level_ms == 1e5:
        assert depths and set(depths) == {1}  # no level beyond the root's can pay


@pytest.mark.parametrize("method", ["eagle2", "lookup", "eagle2+lookup"])
def test_auto_budget_batch_equals_its_batch_of_one(method):
    config = InferConf(method=method.split("+")[0], depth=4, top_k=4, total_tokens=16, budget="auto",
                          lookup=method.endswith("+lookup"))
    target, head = target_and_head(2)
    prompts = [copy_prompt(1, 9), list(case(2, 1, 40)[0]), list(case(2, 7, 20)[0])]
    engine = Engine(target, head, config, cost=cost(0.3))
    singles = [engine.generate(p, 20).tokens for p in prompts]
    assert singles == [vanilla_tokens(target, p, 20) for p in prompts]
    assert [r.tokens for r in engine.generate_batch(prompts, 20, batch_size=2).results] == singles


LOOKUP_AUTO = {
    "lookup": InferConf(budget="fixed", method="lookup"),
    "eagle2+lookup": InferConf(method="eagle2", depth=3, top_k=4, total_tokens=12, lookup=True),
}


@pytest.mark.parametrize("per_token,level_ms", [(0.0, 0.0), (0.3, 1.0), (50.0, 1.0)])
@pytest.mark.parametrize("name", LOOKUP_AUTO)
@pytest.mark.parametrize("plan_ahead", ["off", "on"])
def test_auto_budget_with_lookup_is_lossless_and_follows_the_cost(name, per_token, level_ms, plan_ahead):
    """Prompt lookup under an auto budget: the copies' path values (their measured acceptance rates) compete with
    the head's candidates for the verified nodes. With free verification and drafting it verifies what the fixed
    budget does, cycle for cycle; with dear verification one node at most, or planning ahead mostly one once the
    count has fallen from the caps (a cycle with candidates plans it; it halves its fall a cycle); output is always
    vanilla's."""
    fixed = LOOKUP_AUTO[name]
    auto = replace(fixed, budget="auto", plan_ahead=plan_ahead)
    sizes = []
    for seed, prompt in ((2, copy_prompt(1)), (3, copy_prompt(2, 9))):
        target, head = lookup_target_and_head(seed)
        head = None if fixed.method == "lookup" else head
        result = Engine(target, head, auto, cost=cost(per_token, level_ms)).generate(prompt, 40)
        assert result.tokens == vanilla_tokens(target, prompt, 40)
        assert all(c.tree_size <= tree_size(fixed) for c in result.cycles)
        if per_token == 0:  # (a hybrid's choice to draft without its copies set aside: lookup.choose)
            unchosen = replace(auto, lookup_conf=replace(auto.lookup_conf, choose=False))
            result = Engine(target, head, unchosen, cost=cost(per_token, level_ms)).generate(prompt, 40)
            same = Engine(target, head, fixed).generate(prompt, 40)
            assert [c.tree_size for c in result.cycles] == [c.tree_size for c in same.cycles]
        settled = 0
        if plan_ahead == "on":
            settled = next((i for i, c in enumerate(result.cycles) if c.tree_size), len(result.cycles)) + 1
            settled += tree_size(fixed).bit_length()
        sizes += [c.tree_size for c in result.cycles[settled:]]
    if per_token == 50 and plan_ahead == "off":
        assert set(sizes) <= {0, 1}
    elif per_token == 50:  # (a run of reliable copies may still earn one more node than the last cycle's)
        assert sorted(sizes)[len(sizes) // 2] <= 1 and max(sizes) < tree_size(fixed)
    else:
        assert max(sizes) > 1


def test_a_hybrid_drafts_the_way_that_emits_more_per_predicted_ms():
    """CopyChoice: WARM cycles merged, WARM with the head alone, then the way that emitted more tokens per predicted
    ms, another tried once every EXPLORE cycles; the copies alone are scored by the merged cycles (no exploring),
    and a request whose text turns to a loop, and back, is followed within a few cycles."""
    from eagle_infer.trees.copy_choice import COPIES, EXPLORE, HEAD, MERGED, WARM, CopyChoice

    def ways(choice, emitted, cycles):
        """`cycles` cycles as the choice says; emitted(way) -> (tokens, ms), and for a merged cycle what its copies
        alone would have emitted and cost."""
        taken = []
        for _ in range(cycles):
            way = choice.way()
            taken.append(way)
            choice.update(way, *emitted(way))
        return taken

    def text(head, merged, alone):
        return lambda way: {HEAD: (*head, None), MERGED: (*merged, alone), COPIES: (*alone, None)}[way]

    period = EXPLORE + 1
    choice = CopyChoice()
    head_pays = ways(choice, text((2, 38.0), (1, 40.0), (1, 36.0)), 2 * WARM + 3 * period)
    assert head_pays[: 2 * WARM] == [MERGED] * WARM + [HEAD] * WARM
    assert head_pays[2 * WARM :] == ([HEAD] * EXPLORE + [MERGED]) * 3
    # The text turns to a loop: merged trees emit 5 tokens a cycle, the copies alone as many without the head's
    # forwards. The next merged cycle (an exploration) scores both; the copies alone take over, merged explored.
    loop = ways(choice, text((2, 38.0), (5, 60.0), (5, 45.0)), 4 * period)
    first = loop.index(COPIES)
    assert first <= EXPLORE + 1 and HEAD not in loop[first:]
    assert loop[first : first + period] == [COPIES] * EXPLORE + [MERGED]
    # The loop ends: the next merged exploration sees the copies emit one token; the head's ways take over again.
    back = ways(choice, text((2, 38.0), (2, 42.0), (1, 36.0)), 4 * period)
    assert back.index(MERGED) <= EXPLORE and COPIES not in back[back.index(MERGED) + 3 :]
    # a way never scored is never best; ties keep the merged tree
    assert CopyChoice().best() == MERGED and CopyChoice(tokens=[1.0, 1.0, 1.0], ms=[2.0, 2.0, 2.0],
                                                        cycles=[1, 1, 1]).best() == MERGED


def test_strong_copies_stop_the_head_sooner():
    """A hybrid's copies counted beside the head's candidates (DraftInput.extra): likely copies (path values near
    1) never make the budget plan deeper trees, and at some level cost they make a level not pay that pays without
    them."""
    from eagle_infer.head.head_runner import HeadRunner
    from eagle_infer.trees.drafting import DraftRoot, TreeFeeder, grow_dynamic

    target, head = target_and_head(2)
    head = HeadRunner(head, target)
    cache = head.new_cache(1, 64)
    root = DraftRoot(torch.randn(1, target.hidden_size, generator=torch.Generator().manual_seed(0)), [3], [0], [0])
    feeder = TreeFeeder(head, cache, root)
    d = grow_dynamic(feeder, 3, 4, 24)
    feeder.reset()

    def levels(extra, level_ms):
        values = d.values if extra is None else torch.cat([d.values, extra], 1)
        budget = Budget(cost(0.0, level_ms), 1, 24)
        plan = budget.next_plan(values, d.levels, d.frontier, d.newest_own, d.older(values))
        # the older candidates masked in place (DynamicDraft.older) plan as the ones before the last level, cut out
        c, last = d.values.shape[1], d.newest_own.shape[1]
        cut_out = values[:, [j for j in range(values.shape[1]) if not c - last <= j < c]]
        assert plan == budget.next_plan(values, d.levels, d.frontier, d.newest_own, cut_out)
        return int(plan[0])

    copies = torch.full((1, 10), 0.95).log().cumsum(-1)  # a 10-token chain, each copy accepted at 0.95
    pairs = [(levels(copies, ms), levels(None, ms)) for ms in 10.0 ** torch.arange(-8, 2).double()]
    assert all(with_copies <= alone for with_copies, alone in pairs)
    assert any(with_copies < alone for with_copies, alone in pairs), pairs


def test_infer_auto_keys_and_errors():
    """The defaults are the auto budget (depth and total_tokens "auto"); an integer is a cap beside an "auto", a
    fixed setting beside another integer; budget=fixed gives the fixed tree; methods that cannot choose per cycle
    read "auto" as the fixed values."""
    auto = resolve(InferConf(total_tokens="auto", depth=5))
    assert (auto.budget, auto.total_tokens, auto.depth) == ("auto", AUTO_MAX_TOKENS, 5)
    default = resolve(InferConf())
    assert (default.budget, default.total_tokens, default.depth) == ("auto", AUTO_MAX_TOKENS, AUTO_MAX_DEPTH)
    for fixed in (InferConf(budget="fixed"), InferConf(method="eagle2", rerank=False), InferConf(method="chain"),
                  InferConf(method="eagle1", lookup=True)):
        f = resolve(fixed)
        assert (f.budget, f.total_tokens, f.depth) == ("fixed", FIXED_TOKENS, FIXED_DEPTH)
    assert resolve(InferConf(depth=6, total_tokens=32)).budget == "fixed"
    assert resolve(InferConf(method="lookup")).budget == "auto"
    target, head = target_and_head(2)
    one_line_error(lambda: Engine(target, head, InferConf(method="eagle1", budget="auto")), "budget 'auto'", "eagle1")
    one_line_error(lambda: Engine(target, head, InferConf(budget="sometimes")), "'sometimes'")
    one_line_error(lambda: Engine(target, head, InferConf(method="chain", budget="auto", lookup=True)),
                   "budget 'auto'", "'chain+lookup'")
    one_line_error(lambda: Engine(target, head, InferConf(budget="fixed", total_tokens="many")), "total_tokens 'many'")
    one_line_error(lambda: Engine(target, head, InferConf(plan_ahead="later"), cost=cost(0.3)), "plan_ahead 'later'")
    # Planning ahead is the GPU's: on a CPU "auto" decides as it drafts.
    assert not Engine(target, head, InferConf(), cost=cost(0.3)).plan_ahead
    assert Engine(target, head, InferConf(plan_ahead="on"), cost=cost(0.3)).plan_ahead


def test_cost_model_is_cached_per_machine_and_never_reused_elsewhere(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE_CACHE", str(tmp_path))
    from eagle_infer.head.head_runner import HeadRunner
    from eagle_infer.trees import cost_measure

    # Caching, not the disturbance check (the next test's): a busy machine must not leave this model uncached.
    monkeypatch.setattr(cost_measure, "disturbed", lambda sizes, times: None)

    target, head = target_and_head(2)
    head = HeadRunner(head, target)
    first = load_or_measure(target, head, 4, 9)
    assert first.key["model"] == target.name and first.key == {**machine_key(target.device), **{
        k: first.key[k] for k in ("revision", "model", "dtype", "top_k", "head")}}
    assert first.sizes[-1] >= 9 and all(ms > 0 for ms in first.forward_ms) and first.level_ms > 0
    path = cache_path(first.key)
    assert path.exists() and load_or_measure(target, head, 4, 9) == first  # read back, not re-measured
    # The same file claiming another machine (copied over, or the CPU changed) is measured anew and replaced.
    raw = json.loads(path.read_text())
    raw["key"] = {**raw["key"], "cpu": "Another CPU"}
    raw["level_ms"] = 12345.0
    path.write_text(json.dumps(raw))
    again = load_or_measure(target, head, 4, 9)
    assert again.level_ms != 12345.0 and again.key == first.key
    assert json.loads(path.read_text())["key"] == first.key
    # So is one measured before the engine's costs changed (an older revision).
    raw = json.loads(path.read_text())
    raw["key"], raw["level_ms"] = {**raw["key"], "revision": COST_REVISION - 1}, 12345.0
    path.write_text(json.dumps(raw))
    assert load_or_measure(target, head, 4, 9).level_ms != 12345.0
    # Prompt lookup alone drafts without a head: its model has no level cost and a key of its own.
    headless = load_or_measure(target, None, 4, 9)
    assert headless.level_ms == 0.0 and headless.key["head"] == "none" and cache_path(headless.key) != path
    # Packed weights (model.pack) change every cost: a packed target never reads the unpacked target's model.
    packed = load_or_measure(replace(target, packed=True), head, 4, 9)
    assert packed.key == {**first.key, "packed": True} and cache_path(packed.key) != path


def test_timings_disturbed_by_other_work_are_measured_again_and_never_cached(tmp_path, monkeypatch):
    """A model measured beside other work (SmolLM2's, timed beside a training: 1,624 ms for one token, 948 ms for
    16) would steer every later run; such timings are named, measured again, and never cached."""
    from eagle_infer.trees import cost_measure
    from eagle_infer.trees.cost_measure import Measured, disturbed

    sizes = [1, 2, 4, 8, 16]
    quiet = [[31.1, 31.9, 33.0], [34.1, 34.5, 36.0], [51.9, 52.0, 55.1], [64.4, 64.9, 66.0], [63.9, 65.0, 64.2]]
    assert disturbed(sizes, quiet) is None  # (8 -> 16 tokens a little faster: within a fifth)
    busy = [[1623.8], [2240.2], [2267.8], [2735.3], [947.6]]
    assert disturbed(sizes, busy) == "a forward of 16 tokens took 947.6 ms, one of 8 tokens 2735.3 ms"
    spread = [t[:] for t in quiet]
    spread[2] = [51.9, 130.0, 140.0]
    assert disturbed(sizes, spread) == "the forward of 4 tokens took 51.9 to 140.0 ms"
    assert disturbed([1, 2], [[0.4, 0.4], [0.2, 1.3]]) is None  # sub-millisecond jitter: no choice depends on it
    # Measured again while disturbed; cached once settled.
    monkeypatch.setenv("EAGLE_CACHE", str(tmp_path))
    target, head = target_and_head(2)
    verdicts = ["a forward of 16 tokens took 947.6 ms, one of 8 tokens 2735.3 ms", None]
    calls = []

    def fake(*args, **kwargs):
        calls.append(1)
        return Measured(cost(0.5), verdicts[min(len(calls), len(verdicts)) - 1])

    monkeypatch.setattr(cost_measure, "measure", fake)
    said: list[str] = []
    model = load_or_measure(target, None, 4, 9, say=said.append)
    assert len(calls) == 2 and cache_path(model.key).exists()
    assert said[1] == "  the machine looks busy (a forward of 16 tokens took 947.6 ms, one of 8 tokens 2735.3 ms): " \
                      "measuring again"
    # Never settled: used for this run, not cached, the user told.
    from eagle_infer.head.head_runner import HeadRunner

    verdicts[1], calls[:], said[:] = verdicts[0], [], []
    model = load_or_measure(target, HeadRunner(head, target), 4, 9, say=said.append)
    assert len(calls) == cost_measure.ATTEMPTS and not cache_path(model.key).exists()
    assert "still disturbed" in said[-1] and "not cached" in said[-1]


def test_padded_budget_verifies_whole_buckets():
    """With padded trees a verification of n nodes costs its bucket's forward, so the budget stops only at the top
    of a bucket (or the cap), and maximises expected tokens per ms over those costs."""
    from eagle_infer.trees.tree import padded_width

    gen = torch.Generator().manual_seed(1)
    values = torch.rand(1, 40, generator=gen).log() * 2
    for per_token in (0.05, 0.5, 2.0):
        model, budget = cost(per_token), Budget(cost(per_token), 1, 24, padded=True)
        n = nodes(budget, values, 2)
        assert n in (1, 2, 4, 8, 16, 24)
        probs = values.exp().sort(-1, descending=True).values
        rates = [(1 + float(probs[:, :m].sum())) / (2 + model.forward(1 + padded_width(m, 24))) for m in range(1, 25)]
        assert n == 1 + max(range(24), key=rates.__getitem__)
    assert nodes(Budget(cost(0.5), 1, 24, padded=True), values, 2) != nodes(Budget(cost(0.5), 1, 24), values, 2)


def test_first_measurement_says_what_it_does_and_how_long(tmp_path, monkeypatch):
    """The first use of a model, dtype or head shape measures its costs: the user is told what, where it is cached,
    about how long it takes (from its first timings) and how long it took; a cached model is read silently."""
    monkeypatch.setenv("EAGLE_CACHE", str(tmp_path))
    from eagle_infer.trees.cost_measure import estimate_seconds
    from eagle_infer.head.head_runner import HeadRunner

    target, head = target_and_head(2)
    said: list[str] = []
    model = load_or_measure(target, HeadRunner(head, target), 4, 9, say=said.append)
    assert len(said) == 3 and said[0].startswith("measuring this machine's decoding costs for tiny")
    assert str(cache_path(model.key)) in said[0]
    assert said[1].startswith("  about ") and "forwards of 1, 2, 4, 8, 9 tokens" in said[1]
    assert said[2].startswith("  measured in ")
    load_or_measure(target, HeadRunner(head, target), 4, 9, say=said.append)
    assert len(said) == 3
    # the estimate: each size priced between the 1-token and the prefill timing, reps + 1 timings, a fifth added
    assert estimate_seconds(257.0, 1.0, 257, [1, 257], 3) == pytest.approx(1.2 * (1 + 257) * 4 / 1000)


def test_the_engine_measures_nothing_and_the_build_step_does(tmp_path, monkeypatch):
    """Engine's constructor takes the cost model as a value (no timing, no file); build.measure_cost is the explicit
    step: None under a fixed budget, a refused config refused before any timing, else measured once and cached,
    which build_engine calls."""
    from eagle_infer.decoding.build import build_engine, measure_cost

    monkeypatch.setenv("EAGLE_CACHE", str(tmp_path))
    target, head = target_and_head(2)
    one_line_error(lambda: Engine(target, head, InferConf(method="eagle2")), "budget 'auto'", "cost model",
                   "build_engine")
    assert measure_cost(InferConf(method="eagle2", budget="fixed"), target, head) is None
    one_line_error(lambda: measure_cost(InferConf(method="eagle2", top_k=0), target, head), "top_k 0")
    one_line_error(lambda: measure_cost(InferConf(method="eagle2"), target, None), "needs a draft head")
    assert not list(tmp_path.rglob("*.json"))  # nothing measured so far
    config = InferConf(method="eagle2", depth=3, top_k=2, total_tokens="auto", max_new_tokens=8)
    engine = build_engine(config, target, head)
    files = list(tmp_path.rglob("*.json"))
    assert engine.cost is not None and engine.config.budget == "auto" and len(files) == 1
    model = measure_cost(config, target, head)  # read back from the cache: the same timings
    assert model.forward_ms == engine.cost.forward_ms
    assert Engine(target, head, config, cost=model).cost is model


@pytest.mark.parametrize("method", ["eagle2", "lookup", "eagle2+lookup"])
@pytest.mark.parametrize("budget", ["auto", "fixed"])
def test_a_cycle_reads_the_device_once(method, budget, monkeypatch):
    """Every cycle reads the device once, an auto budget planning ahead included (its plan for the next cycle
    travels in that copy): host reads counted at dispatch (.item(), .tolist() and the like) inside the cycles and
    the head's feeding between them, batch of one and of two. (Deciding as it drafts, the CPU's default, an auto
    budget reads more: `plan_ahead` in eagle_infer/config.py.)"""
    from torch.utils._python_dispatch import TorchDispatchMode

    from eagle_infer.decoding import cycle
    from eagle_infer.platform import HOST_READ_OPS

    class Reads(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            counted[0] += str(func).startswith(HOST_READ_OPS)
            return func(*args, **(kwargs or {}))

    counted, cycles, tolist = [0], [0], torch.Tensor.tolist

    def counting(step, is_cycle):
        def run(*args):
            cycles[0] += is_cycle
            monkeypatch.setattr(torch.Tensor, "tolist", lambda t: (counted.__setitem__(0, counted[0] + 1), tolist(t))[1])
            try:
                with Reads():
                    return step(*args)
            finally:
                monkeypatch.setattr(torch.Tensor, "tolist", tolist)
        return run

    monkeypatch.setattr(cycle, "draft_cycle", counting(cycle.draft_cycle, True))
    monkeypatch.setattr(cycle, "feed_pending", counting(cycle.feed_pending, False))
    config = InferConf(method=method.split("+")[0], depth=4, top_k=4, total_tokens=12, budget=budget,
                       lookup=method.endswith("+lookup"), plan_ahead="on")
    target, head = target_and_head(2)
    engine = Engine(target, None if method == "lookup" else head, config, cost=cost(0.3))
    prompts = [copy_prompt(1, 9), list(case(2, 7, 20)[0])]
    engine.generate(prompts[0], 24)
    engine.generate_batch(prompts, 24, batch_size=2)
    assert cycles[0] > 10 and counted[0] == cycles[0]


def test_planned_count_rises_at_once_and_falls_by_halves():
    """One unlikely cycle says little of the next: a plan's count follows a rise at once and halves a fall."""
    from eagle_infer.trees.cost import Plan

    assert Plan(3, 24).then(4, 8) == Plan(4, 16)
    assert Plan(3, 16).then(2, 30) == Plan(2, 30)
    assert Plan(3, 2).then(3, 1) == Plan(3, 1)
