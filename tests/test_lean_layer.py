"""The draft head's lean drafting step (eagle_infer.models.lean_layer) computes what transformers' decoder layers compute."""
from __future__ import annotations

import pytest
import torch
from transformers.cache_utils import DynamicCache

from eagle_infer.head.draft_head import random_head
from eagle_infer.head.head_runner import HeadRunner
from eagle_infer.models.lean_layer import LeanLayer
from eagle_infer.models.target import Target, with_decoder
from eagle_infer.models.masks import additive_mask, causal_mask

from .tiny import tiny_target


def _both_paths(head, feats, tokens, positions, prefix: int, mask):
    """(lean output, transformers-layer output) of one cached forward after `prefix` committed positions: the head's
    runner (lean steps over a KVCache) against the trainable module (transformers' layers over a DynamicCache)."""
    runner = HeadRunner(head, head.target)
    lean_cache, hf_cache = runner.new_cache(feats.shape[0], 64), DynamicCache()
    first = causal_mask(0, prefix, feats.dtype, "cpu")
    runner(feats[:, :prefix], tokens[:, :prefix], positions[:, :prefix], lean_cache, first)
    lean_cache.advance(prefix)
    lean = runner(feats[:, prefix:], tokens[:, prefix:], positions[:, prefix:], lean_cache, mask)
    with torch.enable_grad():  # gradients enabled: the training path, transformers' layers
        head(feats[:, :prefix], tokens[:, :prefix], positions[:, :prefix], hf_cache, first)
        reference = head(feats[:, prefix:], tokens[:, prefix:], positions[:, prefix:], hf_cache, mask)
    return lean, reference.detach()


@pytest.mark.parametrize("arch,layers", [("llama", 1), ("llama", 2), ("qwen2", 1), ("mistral", 2), ("qwen3", 2),
                                         ("llama3", 1)])
def test_lean_step_equals_transformers_layers(arch, layers):
    target = tiny_target(arch=arch, layers=3)
    head = random_head(target, seed=1, layers=layers)
    assert all(isinstance(x, LeanLayer) for x in HeadRunner(head, target).step.layers)
    torch.manual_seed(0)
    feats, tokens = torch.randn(2, 11, 64), torch.randint(0, 96, (2, 11))
    positions = torch.arange(11)[None].expand(2, -1) + 3
    allowed = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)  # a tree
    for mask in (additive_mask(allowed, 7, torch.float32, "cpu"), causal_mask(7, 4, torch.float32, "cpu")):
        lean, reference = _both_paths(head, feats, tokens, positions, 7, mask)
        torch.testing.assert_close(lean, reference, atol=1e-5, rtol=1e-5)


def test_lean_step_follows_weight_updates():
    """Training updates weights in place between held-out checks: a runner built after the update drafts with the
    new weights (a runner is built once and never revalidated: the weights' owner builds a new one)."""
    target = tiny_target()
    head = random_head(target, seed=2)
    feats, tokens, positions = torch.randn(1, 6, 64), torch.randint(0, 96, (1, 6)), torch.arange(6)[None]
    mask = causal_mask(4, 2, torch.float32, "cpu")
    before, _ = _both_paths(head, feats, tokens, positions, 4, mask)
    with torch.no_grad():
        head.layers[0].self_attn.v_proj.weight.mul_(3.0)
        head.layers[0].mlp.up_proj.weight.add_(0.1)
    after, reference = _both_paths(head, feats, tokens, positions, 4, mask)
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, reference, atol=1e-5, rtol=1e-5)


def _transformers(model, ids, positions, mask, past):
    """transformers' own forward of `model` over a DynamicCache `past`, the additive 4-D mask given as it is (None:
    its own causal mask) -> (logits [B, T, V] float32, {i: the output of decoder layer i})."""
    out = model(input_ids=ids, position_ids=positions, attention_mask=mask, past_key_values=past, use_cache=True,
                output_hidden_states=True)
    return out.logits.float(), dict(enumerate(out.hidden_states[1:-1]))


@pytest.mark.parametrize("native_gqa", [True, False], ids=["cpu-gqa", "repeated-kv"])
@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral", "qwen3", "llama3"])
def test_target_forward_equals_transformers(arch, native_gqa, monkeypatch):
    """The target's forward (lean steps over a KVCache) against transformers' own forward over a DynamicCache: a
    prefill, one token (the grouped query heads attend as one key/value head's queries, as transformers does) and a
    tree, taps included. Unpacked weights are shared, not copied: transformers' modules then read row slices of the
    fused products."""
    import eagle_infer.models.lean_layer as lean_layer

    if not native_gqa:  # the path other devices take: keys and values repeated per head under a mask
        monkeypatch.setattr(lean_layer, "NATIVE_GQA_DEVICES", ())
    target = tiny_target(arch=arch, layers=5)
    attn = target.model.model.layers[0].self_attn
    fused = target.decoder.layers[0].qkv.weight
    assert attn.k_proj.weight.untyped_storage().data_ptr() == fused.untyped_storage().data_ptr()
    cache, past = target.new_cache(2, 64), DynamicCache()
    prompt, positions = torch.randint(0, 96, (2, 9)), torch.arange(9)[None].expand(2, -1)
    with torch.inference_mode():  # a prefill over an empty cache: no mask, causal
        mine, theirs = target.forward(prompt, positions, cache, feature_layers=(2,)), _transformers(
            target.model, prompt, positions, None, past)
    torch.testing.assert_close(mine[0], theirs[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mine[1], theirs[1][2], atol=1e-5, rtol=1e-5)
    cache.advance(9)
    allowed = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
    for t, mask in ((1, None), (1, causal_mask(9, 1, torch.float32, "cpu")), (4, additive_mask(allowed, 9, torch.float32, "cpu"))):
        ids, positions = torch.randint(0, 96, (2, t)), torch.arange(9, 9 + t)[None].expand(2, -1)
        with torch.inference_mode():
            logits, taps = target.forward(ids, positions, cache, mask, feature_layers=(1, 3))
            reference, layers = _transformers(target.model, ids, positions, mask, past)
        past.crop(-t)  # as the KVCache, which this forward wrote without committing
        torch.testing.assert_close(logits, reference, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(taps, torch.cat([layers[1], layers[3]], -1), atol=1e-5, rtol=1e-5)
        assert torch.equal(logits.argmax(-1), reference.argmax(-1))


def test_a_layer_class_without_a_lean_step_is_refused_in_one_line():
    from torch import nn

    from eagle_infer.errors import EagleError
    from eagle_infer.models.lean_layer import lean_layer

    class PhiDecoderLayer(nn.Module):
        pass

    with pytest.raises(EagleError, match="^decoder layer PhiDecoderLayer has no lean step: expected one of LlamaDecoder"):
        lean_layer(PhiDecoderLayer(), None, False)


def test_a_target_is_built_explicitly():
    """Constructing a Target does no work: the model's weights stay its own until with_decoder, the explicit build
    step, rewrites them as slices of the fused lean weights; before it a forward is a one-line error, after it the
    forward gives transformers' logits."""
    from eagle_infer.errors import EagleError

    model = tiny_target(layers=2, seed=1, lean=False).model
    before = model.model.layers[0].self_attn.k_proj.weight.untyped_storage().data_ptr()
    target = Target("fresh", model, None, "chatml", torch.float32, torch.device("cpu"))
    assert target.decoder is None and model.model.layers[0].self_attn.k_proj.weight.untyped_storage().data_ptr() == before
    prompt, positions = torch.randint(0, 96, (1, 7)), torch.arange(7)[None]
    with pytest.raises(EagleError, match="^target 'fresh' has no decoder built: build it with with_decoder"):
        target.forward(prompt, positions, target.new_cache(1, 16))
    built = with_decoder(target)
    assert built.decoder is not None and target.decoder is None  # a new object; the given one unchanged
    assert model.model.layers[0].self_attn.k_proj.weight.untyped_storage().data_ptr() != before
    with torch.inference_mode():
        logits = built.forward(prompt, positions, built.new_cache(1, 16))[0]
        reference = model(input_ids=prompt).logits
    torch.testing.assert_close(logits, reference, atol=1e-5, rtol=1e-5)


def test_a_layer_unlike_llama_is_refused_in_one_line():
    """A window shorter than the context (Mistral 7B v0.1's), or another activation, is named in one line rather
    than decoded without it."""
    from eagle_infer.errors import EagleError

    model = tiny_target(arch="mistral", lean=False).model
    model.config.sliding_window = 32
    with pytest.raises(EagleError, match="^decoder layer MistralDecoderLayer has no lean step: it attends in a "
                                         "sliding window of 32 positions, shorter than its context of 512$"):
        with_decoder(Target("windowed", model, None, "chatml", torch.float32, torch.device("cpu")))
    model.config.sliding_window, model.config.hidden_act = None, "gelu"
    with pytest.raises(EagleError, match="its activation is 'gelu', not 'silu'"):
        with_decoder(Target("gelu", model, None, "chatml", torch.float32, torch.device("cpu")))


@pytest.mark.parametrize("mode", ["feature+token", "token", "feature"])
def test_every_input_mode_drafts_as_it_trains(mode):
    """The runner's step applies the head's input mode as the trainable module does, chosen once when the runner is
    built: "token" reads no feature, "feature" no token."""
    target = tiny_target()
    head = random_head(target, seed=3, input_mode=mode)
    torch.manual_seed(0)
    feats, tokens, positions = torch.randn(1, 6, 64), torch.randint(0, 96, (1, 6)), torch.arange(6)[None]
    mask = causal_mask(4, 2, torch.float32, "cpu")
    lean, reference = _both_paths(head, feats, tokens, positions, 4, mask)
    torch.testing.assert_close(lean, reference, atol=1e-5, rtol=1e-5)
    other_feats, other_tokens = torch.randn(1, 6, 64), (tokens + 1) % 96
    changed = {"token": _both_paths(head, other_feats, tokens, positions, 4, mask)[0],
               "feature": _both_paths(head, feats, other_tokens, positions, 4, mask)[0]}.get(mode)
    if changed is not None:  # the half the mode leaves out changes nothing
        torch.testing.assert_close(changed, lean, atol=0, rtol=0)
