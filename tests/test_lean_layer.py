"""The draft head's lean drafting step (eagle_infer.models.lean_layer) computes what transformers' decoder layers compute."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from eagle_infer.head.draft_head import random_head
from eagle_infer.head.head_runner import HeadRunner
from eagle_infer.models.lean_layer import LeanLayer
from eagle_infer.models.target import Target, with_lean_decoder
from eagle_infer.trees.tree import additive_mask, causal_mask

from .tiny import tiny_target


def _both_paths(head, feats, tokens, positions, prefix: int, mask):
    """(lean output, transformers-layer output) of one cached forward after `prefix` committed positions: the head's
    runner (lean steps) against the trainable module (transformers' layers)."""
    runner = HeadRunner(head, head.target)
    lean_cache = runner.new_cache(feats.shape[0], 64)
    runner(feats[:, :prefix], tokens[:, :prefix], positions[:, :prefix], lean_cache, causal_mask(0, prefix, feats.dtype, "cpu"))
    lean_cache.advance(prefix)
    hf_cache = lean_cache.copy()
    lean = runner(feats[:, prefix:], tokens[:, prefix:], positions[:, prefix:], lean_cache, mask)
    with torch.enable_grad():  # gradients enabled: the training path, transformers' layers
        reference = head(feats[:, prefix:], tokens[:, prefix:], positions[:, prefix:], hf_cache, mask)
    return lean, reference.detach()


@pytest.mark.parametrize("arch,layers", [("llama", 1), ("llama", 2), ("qwen2", 1), ("mistral", 2), ("qwen3", 2),
                                         ("llama3", 1)])
def test_lean_step_equals_transformers_layers(arch, layers):
    target = tiny_target(arch=arch, layers=3)
    head = random_head(target, seed=1, layers=layers)
    assert all(isinstance(x, LeanLayer) for x in HeadRunner(head, target).lean)
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


@pytest.mark.parametrize("native_gqa", [True, False], ids=["cpu-gqa", "repeated-kv"])
@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral", "qwen3", "llama3"])
def test_target_lean_forward_equals_transformers_layers(arch, native_gqa, monkeypatch):
    """The target's eager forward (lean steps) against transformers' layers over one cache: one token (the grouped
    query heads attend as one key/value head's queries, as transformers does) and a tree, taps included. Unpacked
    weights are shared, not copied: transformers' modules then read row slices of the fused products."""
    import eagle_infer.models.lean_layer as lean_layer

    from eagle_infer.models.target import decode

    if not native_gqa:  # the path other devices take: keys and values repeated per head under a mask
        monkeypatch.setattr(lean_layer, "NATIVE_GQA_DEVICES", ())
    target = tiny_target(arch=arch, layers=5)
    assert target.lean is not None
    attn = target.model.model.layers[0].self_attn
    fused = target.lean.layers[0].qkv.weight
    assert attn.k_proj.weight.untyped_storage().data_ptr() == fused.untyped_storage().data_ptr()
    cache, other = target.new_cache(2, 64), target.new_cache(2, 64)
    prompt, positions = torch.randint(0, 96, (2, 9)), torch.arange(9)[None].expand(2, -1)
    with torch.inference_mode():  # a prefill over an empty cache: no mask, causal
        prefills = (decode(target.model, prompt, positions, None, cache.hf, (2,), False, target.lean),
                    decode(target.model, prompt, positions, None, other.hf, (2,), False))
    for mine, theirs in zip(*prefills):
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=1e-5)
    cache.advance(9)
    allowed = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
    for t, mask in ((1, None), (1, causal_mask(9, 1, torch.float32, "cpu")), (4, additive_mask(allowed, 9, torch.float32, "cpu"))):
        ids, positions = torch.randint(0, 96, (2, t)), torch.arange(9, 9 + t)[None].expand(2, -1)
        with torch.inference_mode():
            lean = decode(target.model, ids, positions, mask, cache.hf, (1, 3), False, target.lean)
            reference = decode(target.model, ids, positions, mask, cache.hf, (1, 3), False)
        for mine, theirs in zip(lean, reference):
            torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=1e-5)
        assert torch.equal(lean[0].argmax(-1), reference[0].argmax(-1))


def test_a_layer_class_without_a_lean_step_is_refused_in_one_line():
    from torch import nn

    from eagle_infer.errors import EagleError
    from eagle_infer.models.lean_layer import lean_layer

    class PhiDecoderLayer(nn.Module):
        pass

    with pytest.raises(EagleError, match="^decoder layer PhiDecoderLayer has no lean step: expected one of LlamaDecoder"):
        lean_layer(PhiDecoderLayer(), None, False)


def test_a_target_is_built_explicitly():
    """Constructing a Target does no work: the model's weights stay its own until with_lean_decoder, the explicit
    build step, rewrites them as slices of the fused lean weights; transformers' layers (lean None) give the same
    logits."""
    model = tiny_target(layers=2, seed=1, lean=False).model
    before = model.model.layers[0].self_attn.k_proj.weight.untyped_storage().data_ptr()
    target = Target("fresh", model, None, "chatml", torch.float32, torch.device("cpu"))
    assert target.lean is None and model.model.layers[0].self_attn.k_proj.weight.untyped_storage().data_ptr() == before
    built = with_lean_decoder(target)
    assert built.lean is not None and target.lean is None  # a new object; the given one unchanged
    assert model.model.layers[0].self_attn.k_proj.weight.untyped_storage().data_ptr() != before
    prompt = torch.randint(0, 96, (1, 7))
    logits = [t.forward(prompt, torch.arange(7)[None], t.new_cache(1, 16))[0] for t in (built, replace(built, lean=None))]
    torch.testing.assert_close(*logits, atol=1e-5, rtol=1e-5)
