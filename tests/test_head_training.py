"""EAGLE-3 additions to the head and its training: training-time test, fused features, deeper heads, and the data
pipeline at scale (regeneration through the engine, mix ratio, fused features on disk, shards over ranks).

Decoding stays lossless whatever the head: random fused and two-layer heads give vanilla's greedy output, alone and
in batches; the training-time test's unrolled steps compute exactly what drafting computes.
"""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch

import eagle_train.data.regenerate as regenerate_mod
from eagle_infer.models.chat import Message, prompt_ids, stop_ids
from eagle_infer.head.draft_head import random_head
from eagle_infer.head.head_checkpoint import load_head
from eagle_infer.config import InferConf
from eagle_infer.decoding.engine import Engine
from eagle_infer.errors import EagleError
from eagle_infer.head.draft_head import eagle3_layers
from eagle_infer.platform import cpu
from eagle_infer.models.target import compile_target
from eagle_infer.models.masks import additive_mask
from eagle_train.features.featurize import FeaturizeConfig, featurize
from eagle_train.features.shards import Manifest, read_samples
from eagle_train.export.formats import export
from eagle_train.training.objective import Objective, collate, compile_layers, head_inputs, losses, packed_outputs, ttt_outputs, with_target_top
from eagle_train.data.regenerate import RegenerateSettings, answer_shards, is_regenerated, regenerated_shard
from eagle_train.training.train import HeadConf, TrainConfig, build_head_config, objective, train, use_autocast
from tests.oracles import chain_mask, one_thread, scaled_target, vanilla_tokens  # noqa: F401 (one_thread is autouse)
from tests.test_train import DS_CPU, conversations

VOCAB = 96
FUSED = [1, 2, 4]


@pytest.fixture(scope="module")
def deep_target():
    return scaled_target(vocab=VOCAB, layers=6, seed=5, name="tiny-deep")


def heads(target):
    return {
        "two-layer": random_head(target, seed=1, layers=2),
        "fused": random_head(target, seed=2, feature_layers=FUSED),
        "fused-two-layer": random_head(target, seed=3, layers=2, feature_layers=FUSED),
    }


# --- training-time test ----------------------------------------------------------------------------------------------


def test_chain_mask_is_the_drafting_pattern():
    allowed = chain_mask(5, 2, torch.float32, "cpu")[0, 0] == 0
    # query i = 4 at step 2: chain from real pair s = 2; sees real 0..2, its step-1 node (at 3) and itself (at 4).
    assert allowed[4].nonzero().flatten().tolist() == [0, 1, 2, 5 + 3, 10 + 4]
    assert allowed[2].nonzero().flatten().tolist() == [0, 5 + 1, 10 + 2]
    assert allowed[1].nonzero().flatten().tolist() == [5 + 0, 10 + 1]  # no chain (left out of the loss): no real pair
    assert chain_mask(4, 0, torch.float32, "cpu").shape == (1, 1, 4, 4)


@pytest.mark.parametrize("step", [1, 2, 5])
def test_chain_attention_is_sdpa_under_the_chain_mask(step):
    """The training-time test's attention without the mask: equal to SDPA over every stacked key under the pattern's
    mask (grouped-query heads, queries before the first chain included), values and gradients."""
    from eagle_infer.head.chain_attention import chain_attention

    g = torch.Generator().manual_seed(step)
    n, heads, kv, d = 7, 4, 2, 8
    q = torch.randn(2, heads, n, d, generator=g, requires_grad=True)
    k = torch.randn(2, kv, (step + 1) * n, d, generator=g, requires_grad=True)
    v = torch.randn(2, kv, (step + 1) * n, d, generator=g, requires_grad=True)
    got = chain_attention(None, q, k, v, None, scaling=d**-0.5, chain_step=step)[0]
    want = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), attn_mask=chain_mask(n, step, torch.float32, "cpu"))
    torch.testing.assert_close(got, want.transpose(1, 2))
    grads = torch.autograd.grad(got.square().sum(), (q, k, v))
    for a, b in zip(grads, torch.autograd.grad(want.transpose(1, 2).square().sum(), (q, k, v))):
        torch.testing.assert_close(a, b)
    with pytest.raises(EagleError, match=f"chain step {step} over {n} positions needs {(step + 1) * n} cached keys"):
        chain_attention(None, q, k[:, :, :n], v[:, :, :n], None, chain_step=step)


@pytest.mark.parametrize("name", ["two-layer", "fused"])
def test_ttt_steps_equal_drafting(deep_target, name):
    """Step k at position i is depth k+1 of a chain drafted from real pair i - k: recompute it the way drafting does
    (real prefix, then the chain's own nodes fed the previous node's predicted feature)."""
    head = heads(deep_target)[name]
    n, steps = 9, 3
    g = torch.Generator().manual_seed(0)
    width = len(head.config.feature_layers) * 64 if head.config.fused else 64
    feats = torch.randn(1, n, width, generator=g)
    tokens = torch.randint(0, VOCAB, (1, n), generator=g)
    positions = torch.arange(n)[None]
    with torch.no_grad():
        outs = ttt_outputs(head, feats, tokens, positions, steps)
        real = head.fuse(feats) if head.config.fused else feats
        for k in range(1, steps + 1):
            for i in range(k, n):
                s = i - k
                seq_feats, seq_tok, seq_pos = [real[0, : s + 1]], [tokens[0, : s + 1]], [positions[0, : s + 1]]
                prev = head(real[:, : s + 1], tokens[:, : s + 1], positions[:, : s + 1])[0, -1]
                nodes = []
                for j in range(1, k + 1):
                    nodes.append(prev)
                    m = s + 1 + j
                    allowed = torch.zeros(m, m, dtype=torch.bool)
                    allowed[: s + 1, : s + 1] = torch.ones(s + 1, s + 1).tril().bool()
                    allowed[s + 1 :, : s + 1] = True
                    allowed[s + 1 :, s + 1 :] = torch.ones(j, j).tril().bool()
                    f = torch.cat(seq_feats + [torch.stack(nodes)])[None]
                    t = torch.cat(seq_tok + [tokens[0, s + 1 : s + 1 + j]])[None]
                    p = torch.cat(seq_pos + [positions[0, s + 1 : s + 1 + j]])[None]
                    prev = head(f, t, p, mask=additive_mask(allowed, 0, f.dtype, "cpu"))[0, -1]
                torch.testing.assert_close(outs[k][0, i], prev, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name", ["two-layer", "fused"])
def test_packed_outputs_equal_the_padded_batch(deep_target, name):
    """Training on a CPU runs the head over the rows' real pairs packed end to end; at every real position of every
    step the outputs and the gradients they send back are the padded batch's (rows of 9, 4 and 2 pairs, and one of
    none: rows shorter than the steps; a row's first position takes its own output, not the previous row's)."""
    head = heads(deep_target)[name].train()
    steps, lengths = 3, [11, 6, 4, 2]
    g = torch.Generator().manual_seed(0)
    width = len(head.config.feature_layers) * 64 if head.config.fused else 64
    feats = torch.randn(4, 9, width, generator=g, requires_grad=True)
    tokens = torch.randint(0, VOCAB, (4, 9), generator=g)
    positions = torch.arange(9).expand(4, -1)
    real = torch.arange(9)[None] < torch.tensor(lengths)[:, None] - 2  # [B, n] the rows' real pairs
    padded = ttt_outputs(head, feats, tokens, positions, steps)
    packed, at_packed = packed_outputs(head, feats, tokens, positions, lengths, steps)
    assert len(packed) == len(padded) == steps + 1 and packed[0].shape[:2] == (1, 15)
    for k, (a, b) in enumerate(zip(padded, packed)):
        at = real & (torch.arange(9)[None] >= k)  # step k's real positions
        torch.testing.assert_close(b[0, at_packed[at.flatten()]], a[at], atol=1e-5, rtol=1e-4)
    # Each row alone, as a batch of one: the same at every real position, those a chain never reaches included.
    for r, length in enumerate(lengths[:3]):
        alone = ttt_outputs(head, feats[r : r + 1, : length - 2], tokens[r : r + 1, : length - 2],
                            positions[r : r + 1, : length - 2], min(steps, length - 3))
        for k, a in enumerate(alone):
            torch.testing.assert_close(packed[k][0, at_packed[r * 9 : r * 9 + length - 2]], a[0], atol=1e-5, rtol=1e-4)
    weight = torch.randn(steps + 1, 9, 64, generator=g)
    grads = []
    for outs, pick in ((padded, lambda o, at: o[at]), (packed, lambda o, at: o[0, at_packed[at.flatten()]])):
        total = sum((pick(o, real & (torch.arange(9)[None] >= k)) * weight[k, :1]).sum() for k, o in enumerate(outs))
        grads.append(torch.autograd.grad(total, feats)[0])
    torch.testing.assert_close(grads[1], grads[0], atol=1e-5, rtol=1e-4)


def test_ttt_gradients_flow_through_steps(deep_target):
    head = random_head(deep_target, seed=4).train()
    feats = torch.randn(1, 6, 64, requires_grad=True)
    outs = ttt_outputs(head, feats, torch.randint(0, VOCAB, (1, 6)), torch.arange(6)[None], 2)
    grad = torch.autograd.grad(outs[2].sum(), outs[0], retain_graph=True)[0]
    assert grad.abs().sum() > 0  # step 2 depends on step 0's outputs, not only on the real features


def test_ttt_loss_weights_and_regression_weight(tiny_smol6):
    convs = conversations(4)
    samples = [_sample(tiny_smol6, c) for c in convs]
    batch = collate(samples, torch.float32, "cpu")
    batch.loss_mask[:, 2:4] = 1.0  # loss positions at columns 0 and 1 too, which step 2 must not count
    head = random_head(tiny_smol6, seed=0)
    torch.manual_seed(0)
    out = losses(head, batch, objective=Objective(ttt_steps=2))
    expected = 1.0 * out["reg_loss"] + 0.1 * out["cls_loss"] + 0.8 * out["loss_1"] + 0.64 * out["loss_2"]
    torch.testing.assert_close(out["loss"].detach(), expected)
    # Step 2's term from first principles: its outputs at loss positions >= 2 against the target's next feature
    # and the target's LM-head distribution there.
    feats, tokens, positions, weight = head_inputs(batch, 1)
    with torch.no_grad():
        pred = ttt_outputs(head, feats, tokens, positions, 2)[2]
    keep = weight > 0
    keep[:, :2] = False
    pred, goal = pred[keep], batch.hidden[:, 1:-1][keep]
    reg = torch.nn.functional.smooth_l1_loss(pred, goal, reduction="none").mean(-1).mean()
    p = tiny_smol6.lm_head(goal).softmax(-1)
    cls = -(p * tiny_smol6.lm_head(pred).log_softmax(-1)).sum(-1).mean()
    torch.testing.assert_close(out["loss_2"], reg + 0.1 * cls)
    plain = losses(head, batch, objective=Objective(w_reg=0.0))
    torch.testing.assert_close(plain["loss"].detach(), 0.1 * plain["cls_loss"])
    assert "loss_1" not in plain


def test_precomputed_target_argmax_gives_the_same_losses(tiny_smol6):
    """draftable_only and the accuracies read the target's argmax; training computes it once per conversation
    (with_target_top) instead of per batch: every loss and accuracy is the same either way."""
    samples = [_sample(tiny_smol6, c) for c in conversations(4)]
    # Half the vocabulary as draft tokens: some positions drop out of the loss.
    head = random_head(tiny_smol6, seed=0, draft_vocab=torch.arange(0, tiny_smol6.vocab_size, 2))
    obj = Objective(ttt_steps=1, draftable_only=True, per="position")
    with torch.no_grad():
        fresh = losses(head, collate(samples, torch.float32, "cpu"), objective=obj, accuracy=True)
        batch = collate(with_target_top(samples, tiny_smol6, autocast=False), torch.float32, "cpu")
        assert batch.target_top is not None
        stored = losses(head, batch, objective=obj, accuracy=True)
    assert fresh.keys() == stored.keys()
    for key in fresh:
        torch.testing.assert_close(stored[key], fresh[key])


def test_target_argmax_is_kept_in_the_run_directory_for_a_resume(tiny_smol6, tmp_path):
    """with_target_top(cache=...) writes the argmax once; a second call on the same features and LM head reads it
    (the head is never run), and features or an LM head that differ from the fingerprint compute it again."""
    samples = [_sample(tiny_smol6, c) for c in conversations(3)]
    cache = tmp_path / "target-top-rank0.safetensors"
    first = with_target_top(samples, tiny_smol6, autocast=False, progress=False, cache=cache)
    assert cache.exists()

    def refuse(_):
        raise AssertionError("the cached argmax was computed again")

    weight = tiny_smol6.lm_head.weight
    cached = with_target_top(samples, _LmHead(weight, refuse), autocast=False, progress=False, cache=cache)
    for a, b in zip(first, cached):
        assert torch.equal(a.target_top, b.target_top)

    flipped = -weight.detach().clone()  # another LM head: every argmax moves to the old argmin
    calls = []
    again = with_target_top(samples, _LmHead(flipped, lambda h: calls.append(1) or h @ flipped.T), autocast=False,
                            progress=False, cache=cache)
    assert calls and not torch.equal(again[0].target_top, first[0].target_top)
    shorter = [dataclasses.replace(s, input_ids=s.input_ids[:-1], hidden=s.hidden[:-1]) for s in samples]
    calls.clear()
    with_target_top(shorter, _LmHead(flipped, lambda h: calls.append(1) or h @ flipped.T), autocast=False,
                    progress=False, cache=cache)
    assert calls
    cache.write_bytes(b"not a safetensors file")  # unreadable: computed again, not an error
    calls.clear()
    with_target_top(samples, _LmHead(flipped, lambda h: calls.append(1) or h @ flipped.T), autocast=False,
                    progress=False, cache=cache)
    assert calls and cache.stat().st_size > 100


class _LmHead:
    """A stand-in target with only the LM head with_target_top reads: `weight`, and the product as given."""

    def __init__(self, weight, product):
        self.weight, self.product, self.lm_head = weight, product, self

    def __call__(self, h):
        return self.product(h)


def test_losses_run_packed_on_a_cpu_and_padded_when_asked(tiny_smol6, monkeypatch):
    """Objective.unpadded=None runs the head over the rows' real tokens packed on a CPU (packed_outputs); False runs
    it over the padded batch, as on a GPU: the same losses to rounding."""
    import eagle_train.training.objective as objective_mod

    samples = [_sample(tiny_smol6, c) for c in conversations(4)]
    batch = collate(samples, torch.float32, "cpu")
    assert len(set(batch.lengths.tolist())) > 1  # rows of several lengths: the padded batch holds padding
    head = random_head(tiny_smol6, seed=0)
    calls = []
    packed = objective_mod.packed_outputs
    monkeypatch.setattr(objective_mod, "packed_outputs", lambda *a: calls.append(1) or packed(*a))
    with torch.no_grad():
        by_device = losses(head, batch, objective=Objective(ttt_steps=2))
        assert calls == [1]
        wide = losses(head, batch, objective=Objective(ttt_steps=2, unpadded=False))
        assert calls == [1]
    for key in by_device:
        torch.testing.assert_close(wide[key], by_device[key], atol=1e-5, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("block", ["eagle", "eagle3"])
def test_compiled_training_gives_the_eager_losses_without_new_graphs(tiny_smol6, block):
    """train.compile: the head's layers and each step's loss through torch.compile give the eager losses and
    gradients (to rounding), packed and padded, and a batch of other row lengths compiles nothing new (the unrolled
    steps' attention stays eager: traced, the cache's growing key length made new graphs every batch)."""
    from torch._dynamo.utils import counters

    samples = [_sample(tiny_smol6, c) for c in conversations(8)]
    vocab = torch.arange(0, tiny_smol6.vocab_size, 2) if block == "eagle3" else None
    eager, compiled = (random_head(tiny_smol6, seed=0, block=block, draft_vocab=vocab).train() for _ in range(2))
    compile_layers(compiled)
    obj = Objective(ttt_steps=2, w_reg=0.0 if block == "eagle3" else 1.0)
    graphs = []
    for rows, unpadded in ((samples[:4], True), (samples[4:], True), (samples[2:6], False), (samples[:4], False)):
        batch = collate(rows, torch.float32, "cpu", fused=block == "eagle3")
        got = [losses(head, batch, objective=dataclasses.replace(obj, unpadded=unpadded, compiled=head is compiled))
               for head in (eager, compiled)]
        for result in got:
            result["loss"].backward()
        torch.testing.assert_close(got[1]["loss"], got[0]["loss"], atol=1e-5, rtol=1e-4)
        for (name, a), b in zip(eager.named_parameters(), compiled.parameters()):
            if a.grad is not None:
                torch.testing.assert_close(b.grad, a.grad, atol=1e-5, rtol=1e-4, msg=name)
                a.grad, b.grad = None, None
        graphs.append(counters["stats"]["unique_graphs"])
    assert len({len(r.input_ids) for r in samples[:4]} | {len(r.input_ids) for r in samples[4:]}) > 1
    assert max(len(r.input_ids) for r in samples[2:6]) != max(len(r.input_ids) for r in samples[:4])
    # rows of other lengths, packed or padded, make no new graph
    assert graphs[0] > 0 and graphs[1] == graphs[0] and graphs[3] == graphs[2]


def _sample(target, conv):
    from eagle_infer.models.chat import loss_mask, render
    from eagle_train.features.shards import Sample

    ids, mask = loss_mask(target.tokenizer, render(conv, target.tokenizer, target.template, False), None)
    hidden, aux = target.features(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long),
                                  eagle3_layers(target.config.num_hidden_layers))
    return Sample(torch.tensor(ids), torch.tensor(mask, dtype=torch.float), hidden[0], aux[0])


# --- decoding with fused and deeper heads stays lossless ------------------------------------------------------------


@pytest.fixture(scope="module")
def deep_compiled(deep_target):
    return compile_target(deep_target)


DEEP_CONFIGS = {"eagle2": InferConf(budget="fixed", method="eagle2"), "chain": InferConf(method="chain", depth=3),
                "eagle1": InferConf(method="eagle1")}


# Every head drafts each tree kind on the eager forward; on the compiled forward each head runs EAGLE-2's tree only:
# what the compiled path adds for these heads is its fused-feature and deep-head outputs, the same for every tree
# kind, while each tree kind's widths compile graphs of their own (tests/test_engine_lossless.py runs every tree
# kind compiled with the standard head).
@pytest.mark.parametrize("path, config", [("eager", c) for c in DEEP_CONFIGS] + [("compiled", "eagle2")])
@pytest.mark.parametrize("name", ["two-layer", "fused", "fused-two-layer"])
def test_fused_and_deep_heads_are_lossless(deep_target, request, name, config, path):
    """Eager vanilla's output, drafting with each head on the eager or the compiled forward (infer.compile)."""
    target = request.getfixturevalue("deep_compiled") if path == "compiled" else deep_target
    head, config = heads(deep_target)[name], DEEP_CONFIGS[config]
    prompts = [[3, 14, 15, 92, 65], [35, 89], list(range(10, 40))]
    want = [vanilla_tokens(deep_target, p, 20) for p in prompts]
    engine = Engine(target, head, config)
    assert [engine.generate(p, 20).tokens for p in prompts] == want
    batch = engine.generate_batch(prompts, 20, batch_size=2)
    assert [r.tokens for r in batch.results] == want


def test_head_save_load_records_layers_and_features(deep_target, tmp_path):
    head = heads(deep_target)["fused-two-layer"]
    head.save(tmp_path / "h", dtype=torch.float32)
    saved = json.loads((tmp_path / "h" / "config.json").read_text())
    assert (saved["layers"], saved["feature_layers"], saved["target_layers"]) == (2, FUSED, 6)
    loaded = load_head(tmp_path / "h", deep_target)
    x = torch.randn(1, 4, 3 * 64)
    ids, pos = torch.randint(0, VOCAB, (1, 4)), torch.arange(4)[None]
    with torch.no_grad():
        torch.testing.assert_close(loaded(x, ids, pos), head(x, ids, pos))
    shallow = scaled_target(vocab=VOCAB, layers=4, seed=5, name="tiny-deep")
    with pytest.raises(EagleError, match=r"fuses layers \[1, 2, 4\] of a 6-layer target, but the target has 4 layers"):
        load_head(tmp_path / "h", shallow)


def test_heads_saved_with_one_layer_key_names_still_load(deep_target, tmp_path):
    """Heads saved before head.layers existed name their layer `layer.*` (earlier shipped heads among them)."""
    from safetensors.torch import load_file, save_file

    head = random_head(deep_target, seed=7)
    head.save(tmp_path / "h", dtype=torch.float32)
    state = load_file(str(tmp_path / "h" / "model.safetensors"))
    save_file({k.replace("layers.0.", "layer."): v for k, v in state.items()}, str(tmp_path / "h" / "model.safetensors"))
    cfg = json.loads((tmp_path / "h" / "config.json").read_text())
    for key in ("layers", "feature_layers", "target_layers"):
        cfg.pop(key)
    (tmp_path / "h" / "config.json").write_text(json.dumps(cfg))
    loaded = load_head(tmp_path / "h", deep_target)
    assert loaded.config.layers == 1
    torch.testing.assert_close(loaded.layers[0].mlp.up_proj.weight, head.layers[0].mlp.up_proj.weight)


# --- bad input -------------------------------------------------------------------------------------------------------


def test_bad_head_and_objective_settings(deep_target):
    cfg = TrainConfig()
    with pytest.raises(EagleError, match="head.layers 0 is invalid: expected >= 1"):
        build_head_config(deep_target, cfg, HeadConf(layers=0))
    with pytest.raises(EagleError, match="unknown head.features 'middle': expected last or fused"):
        build_head_config(deep_target, cfg, HeadConf(features="middle"))
    with pytest.raises(EagleError, match="unknown draft head block 'eagle2': expected one of eagle, eagle3"):
        build_head_config(deep_target, cfg, HeadConf(block="eagle2"))
    with pytest.raises(EagleError, match="an eagle3 draft head has one decoder layer, not 2"):
        build_head_config(deep_target, cfg, HeadConf(block="eagle3", layers=2, features="fused"))
    with pytest.raises(EagleError, match="expected train.w_reg=0 and train.draft_vocab_size > 0, got 1.0 and 0"):
        build_head_config(deep_target, cfg, HeadConf(block="eagle3", features="fused"))
    with pytest.raises(EagleError, match="head.block=eagle3 reads EAGLE-3's fused .*expected head.features=fused, got 'last'"):
        build_head_config(deep_target, cfg, HeadConf(block="eagle3"))
    with pytest.raises(EagleError, match=r"train.ttt_steps -1 gives EAGLE-3's block K = 0 unrolled steps: expected K >= 1"):
        build_head_config(deep_target, dataclasses.replace(cfg, ttt_steps=-1), HeadConf(block="eagle3", features="fused"))
    too_many = deep_target.vocab_size + 1
    with pytest.raises(EagleError, match=f"train.draft_vocab_size {too_many} is larger than the target's vocabulary of "
                                         f"{deep_target.vocab_size}: expected at most {deep_target.vocab_size}"):
        build_head_config(deep_target, dataclasses.replace(cfg, draft_vocab_size=too_many), HeadConf())
    with pytest.raises(EagleError, match="unknown loss normalisation 'batch': expected loss_token or position"):
        objective(dataclasses.replace(cfg, loss_per="batch"), 512)
    for bad in (-1, 512):
        with pytest.raises(EagleError, match=f"train.ttt_steps {bad} is invalid: expected 0 <= ttt_steps < max_length 512"):
            objective(dataclasses.replace(cfg, ttt_steps=bad), 512)
    with pytest.raises(EagleError, match="a fused head needs a target of at least 5 layers, not 2"):
        eagle3_layers(2)
    with pytest.raises(EagleError, match="unknown train.autocast 'yes': expected auto, on or off"):
        use_autocast("yes", torch.float32, torch.device("cpu"))
    with pytest.raises(EagleError, match="unknown featurize.features 'all'"):
        FeaturizeConfig(features="all").feature_layers(deep_target)


def test_autocast_only_for_float32_training(monkeypatch):
    import eagle_infer.platform as target_mod

    cpu = torch.device("cpu")
    assert not use_autocast("on", torch.bfloat16, cpu) and not use_autocast("off", torch.float32, cpu)
    assert use_autocast("on", torch.float32, cpu)
    for native in (True, False):
        monkeypatch.setattr(target_mod, "cpu_has_bf16_matmul", lambda native=native: native)
        assert use_autocast("auto", torch.float32, cpu) is native


# --- data: fused features, ranks, regeneration ------------------------------------------------------------------------

FEAT = FeaturizeConfig(max_length=96, shard_size=4, features="fused")


def test_fused_features_on_disk_and_ranks_merge(tiny_smol6, tmp_path):
    convs = conversations(10)
    one = featurize(convs, tiny_smol6, tmp_path / "one", FEAT)
    for rank in (1, 0):  # either order: each rank writes its own shards, the manifest merges them
        featurize(convs, tiny_smol6, tmp_path / "two", dataclasses.replace(FEAT, rank=rank, world=2))
    two = Manifest.load(tmp_path / "two")
    assert [(s["file"], s["tokens"]) for s in two.shards] == [(s["file"], s["tokens"]) for s in one.shards]
    assert (two.conversations, two.tokens, two.loss_tokens) == (one.conversations, one.tokens, one.loss_tokens) == (
        10, one.tokens, one.loss_tokens)
    assert one.feature_layers == [1, 2, 2] == list(eagle3_layers(6))
    samples = read_samples(tmp_path / "two")
    ids = samples[3].input_ids[None]
    with torch.inference_mode():
        states = tiny_smol6.model.model(input_ids=ids, output_hidden_states=True).hidden_states
    want = torch.cat([states[i + 1] for i in one.feature_layers], -1)[0]  # outputs of layers 1, 2, 2
    assert samples[3].aux.shape == (ids.shape[1], 3 * 32)
    torch.testing.assert_close(samples[3].aux.float(), want.to(torch.bfloat16).float())


def test_featurize_resume_with_other_layers_mix_or_dtype_is_refused(tiny_smol6, tmp_path):
    convs = conversations(6)
    featurize(convs, tiny_smol6, tmp_path, FEAT)
    files = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(EagleError, match=r"feature_layers=\[1, 2, 2\], not \[\]"):
        featurize(convs, tiny_smol6, tmp_path, dataclasses.replace(FEAT, features="last"))
    with pytest.raises(EagleError, match="featurize.max_shards 0 is invalid"):
        featurize(convs, tiny_smol6, tmp_path, dataclasses.replace(FEAT, max_shards=0))
    with pytest.raises(EagleError, match="regenerate=False, not True"):
        featurize(convs, tiny_smol6, tmp_path, dataclasses.replace(FEAT, regenerate=True, regenerate_max_new_tokens=8))
    assert Manifest.load(tmp_path).forward_dtype == "float32"  # the target's dtype in the forwards
    with pytest.raises(EagleError, match="forward_dtype='float32', not 'bfloat16'"):
        featurize(convs, dataclasses.replace(tiny_smol6, dtype=torch.bfloat16), tmp_path, FEAT)
    assert sorted(p.name for p in tmp_path.iterdir()) == files  # nothing already featurized was lost


def test_mix_ratio_spreads_regenerated_conversations():
    assert [is_regenerated(j, 0.5) for j in range(6)] == [False, True, False, True, False, True]
    assert sum(is_regenerated(j, 0.3) for j in range(100)) == 30
    assert all(is_regenerated(j, 1.0) for j in range(10)) and not any(is_regenerated(j, 0.0) for j in range(10))
    with pytest.raises(EagleError, match="regenerate fraction 1.5 is invalid"):
        RegenerateSettings(1.5, 1, 8, 96).check()


def test_regeneration_answers_with_the_engine_and_is_reused(tiny_smol, tmp_path, monkeypatch):
    convs = conversations(4)
    settings = RegenerateSettings(fraction=0.5, turns=1, max_new_tokens=8, max_length=96)
    engine = Engine(tiny_smol, None, InferConf(method="vanilla", max_batch_size=4))
    out, info = regenerated_shard(convs, 0, tmp_path, engine, settings, batch_size=4)
    assert info["regenerated"] == 2 and out[0] == convs[0] and out[2] == convs[2]  # kept the dataset's answers
    for j in (1, 3):
        prompt = prompt_ids(tiny_smol.tokenizer, convs[j][:1], tiny_smol.template)
        alone = vanilla_tokens(tiny_smol, prompt, 8, stop_ids(tiny_smol))
        assert out[j] == [convs[j][0], Message("assistant", tiny_smol.tokenizer.decode(alone, skip_special_tokens=True).strip())]
    monkeypatch.setattr(regenerate_mod, "answer_turns", lambda *a, **k: pytest.fail("answered again"))
    again, info = regenerated_shard(convs, 0, tmp_path, engine, settings, batch_size=4)
    assert again == out and info["regenerate_s"] == 0.0
    record = json.loads((tmp_path / "regenerated" / "shard-00000.json").read_text())  # what stage_times reads
    assert record["regenerate_s"] > 0 and (record["machine"], record["threads"]) == (cpu().label, torch.get_num_threads())
    with pytest.raises(EagleError, match="was regenerated with fraction=0.5, not 1.0"):
        regenerated_shard(convs, 0, tmp_path, engine, dataclasses.replace(settings, fraction=1.0), batch_size=4)
    with pytest.raises(EagleError, match="was regenerated with fingerprint="):
        regenerated_shard(convs[::-1], 0, tmp_path, engine, settings, batch_size=4)


def test_answers_across_shards_are_the_shard_by_shard_answers(tiny_smol, tmp_path):
    """answer_shards (one continuous batch over several shards' prompts, each shard written when its last answer is
    in) writes what regenerated_shard writes shard by shard: the same conversations, overlong prompts dropped, mix
    ratio applied, and skips a shard already answered."""
    convs = conversations(6) + [[Message("user", "word " * 200), Message("assistant", "ok")]] + conversations(8)
    chunks = {i: convs[i * 5 : (i + 1) * 5] for i in range(3)}  # shard 1 holds the overlong prompt
    settings = RegenerateSettings(fraction=0.6, turns=1, max_new_tokens=8, max_length=96)
    engine = Engine(tiny_smol, None, InferConf(method="vanilla", max_batch_size=4))
    regenerated_shard(chunks[2], 2, tmp_path / "one", engine, settings, batch_size=4)
    (tmp_path / "many" / "regenerated").mkdir(parents=True)
    (tmp_path / "one" / "regenerated" / "shard-00002.json").rename(tmp_path / "many" / "regenerated" / "shard-00002.json")
    assert answer_shards(chunks, tmp_path / "many", engine, settings, batch_size=4) == 2  # shard 2 was there
    for i in (0, 1):
        by_shard, info = regenerated_shard(chunks[i], i, tmp_path / "one", engine, settings, batch_size=4)
        across, again = regenerated_shard(chunks[i], i, tmp_path / "many", engine, settings, batch_size=4)
        assert across == by_shard and again["regenerate_s"] == 0.0
        assert {k: again[k] for k in ("regenerated", "answer_tokens")} == {k: info[k] for k in ("regenerated", "answer_tokens")}
    assert across[1] is None and across[2] == chunks[1][2]  # shard 1's overlong prompt, picked, dropped; one kept
    with pytest.raises(EagleError, match="first turns only"):
        answer_shards(chunks, tmp_path / "x", engine, dataclasses.replace(settings, turns=2), batch_size=4)


def test_heldout_questions_are_the_first_turns_regeneration_answers(tiny_smol):
    """stage=heldout-questions: the first user turn of each conversation whose prompt leaves room for an answer, keyed
    by the conversation's index, in the FastChat shape eval reads."""
    from eagle_train.data.regenerate import first_turn_questions

    convs = conversations(3) + [[Message("user", "word " * 200), Message("assistant", "ok")]] + conversations(1)
    settings = RegenerateSettings(fraction=1.0, turns=1, max_new_tokens=8, max_length=96)
    questions = first_turn_questions(convs, tiny_smol, settings)
    assert [q["question_id"] for q in questions] == ["0", "1", "2", "4"]  # the overlong prompt (3) is left out
    assert questions[1] == {"question_id": "1", "category": "heldout", "turns": [convs[1][0].content]}


@pytest.mark.parametrize("block", ["eagle", "eagle3"])
def test_train_fused_head_with_ttt_then_decode_losslessly(tiny_smol6, deepspeed_cpu_env, tmp_path, block):
    """A fused head trained with the training-time test: the EAGLE-1 block (two layers) and EAGLE-3's block (with
    the reference trainer's loss settings) both decode losslessly; the EAGLE-3 head exported in SGLang's layout loads
    back through the published-checkpoint loader to the same draft logits."""
    convs = conversations(12)
    featurize(convs[:10], tiny_smol6, tmp_path / "train", FEAT)
    featurize(convs[10:], tiny_smol6, tmp_path / "heldout", FEAT)
    reference = {"loss_per": "position", "draftable_only": True, "w_cls": 1.0} if block == "eagle3" else {}
    cfg = TrainConfig(features_dir=str(tmp_path / "train"), heldout=str(tmp_path / "heldout"), out_dir=str(tmp_path / "run"),
                      deepspeed_config=DS_CPU, max_steps=6, batch_size=2, lr=1e-3, warmup_steps=1, eval_every=6,
                      save_every=6, wandb_mode="disabled", draft_vocab_size=256, ttt_steps=2, w_reg=0.0, **reference)
    layers = 2 if block == "eagle" else 1
    metrics = train(cfg, tiny_smol6, HeadConf(layers=layers, features="fused", block=block))
    assert metrics["step"] == 6 and "heldout/alpha_6" in metrics and "loss_2" in metrics
    # held-out per-step accuracy and loss of the training-time test (the curves an EAGLE-3 reading needs)
    assert {"heldout/top1_1", "heldout/top1_2", "heldout/loss_1", "heldout/loss_2"} <= set(metrics)
    assert 0 <= metrics["heldout/top1_2"] <= 1
    head = load_head(tmp_path / "run" / "head", tiny_smol6)
    assert (head.config.block, head.config.layers, head.config.feature_layers) == (block, layers, [1, 2, 2])
    prompt = prompt_ids(tiny_smol6.tokenizer, [Message("user", "Count from 3.")], tiny_smol6.template)
    want = vanilla_tokens(tiny_smol6, prompt, 16)
    assert Engine(tiny_smol6, head, InferConf(budget="fixed", method="eagle2")).generate(prompt, 16).tokens == want
    if block == "eagle3":
        export(head, "sglang", tmp_path / "sglang")
        served = load_head(tmp_path / "sglang", tiny_smol6)
        features = torch.randn(1, 3, 3 * tiny_smol6.hidden_size)
        tokens, positions = torch.tensor([[5, 6, 7]]), torch.arange(3)[None]
        with torch.no_grad():
            torch.testing.assert_close(served.draft_logits(served(features, tokens, positions)),
                                       head.draft_logits(head(features, tokens, positions)), rtol=2e-2, atol=2e-2)
        return
    with pytest.raises(EagleError, match="holds no fused layers"):
        featurize(convs[:4], tiny_smol6, tmp_path / "last", dataclasses.replace(FEAT, features="last"))
        train(dataclasses.replace(cfg, features_dir=str(tmp_path / "last"), out_dir=str(tmp_path / "r2")), tiny_smol6,
              HeadConf(features="fused"))


@pytest.mark.parametrize("arch", ["qwen3", "llama3"])
def test_other_targets_featurize_train_and_decode_losslessly(arch, smol_tok, deepspeed_cpu_env, tmp_path):
    """Qwen3 (per-head q/k norms) and a Llama with Llama 3.x's rope scaling, through featurize, training and the
    engine: the trained head is of the target's own layer class and drafts losslessly."""
    from tests.conftest import make_tiny_smol

    target = make_tiny_smol(smol_tok, name=f"tiny-{arch}", arch=arch)
    convs = conversations(8)
    last = dataclasses.replace(FEAT, features="last")
    featurize(convs[:6], target, tmp_path / "train", last)
    featurize(convs[6:], target, tmp_path / "heldout", last)
    cfg = TrainConfig(features_dir=str(tmp_path / "train"), heldout=str(tmp_path / "heldout"), out_dir=str(tmp_path / "run"),
                      deepspeed_config=DS_CPU, max_steps=4, batch_size=2, lr=1e-3, warmup_steps=1, eval_every=4,
                      save_every=4, wandb_mode="disabled")
    assert train(cfg, target)["step"] == 4
    head = load_head(tmp_path / "run" / "head", target)
    assert type(head.layers[0]).__name__.lower().startswith(arch.rstrip("3") if arch == "llama3" else arch)
    prompt = prompt_ids(target.tokenizer, [Message("user", "Count from 3.")], target.template)
    want = vanilla_tokens(target, prompt, 16)
    for config in (InferConf(budget="fixed", method="eagle2"), InferConf(method="eagle1")):
        assert Engine(target, head, config).generate(prompt, 16).tokens == want
