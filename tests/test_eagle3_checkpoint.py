"""Published EAGLE-3 checkpoints (SafeAILab EAGLE-3, SpecForge layout) load for a matching target.

The checkpoint is written in the published layout (midlayer.*, fc, norm, lm_head, d2t, t2d, embed_tokens) with
random weights; an independent plain-torch forward of EAGLE-3's draft model checks what the loaded head computes,
and decoding with it stays lossless.
"""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from eagle_infer.head.head_checkpoint import load_head
from eagle_infer.head.head_runner import HeadRunner
from eagle_infer.config import InferConf
from eagle_infer.decoding.engine import Engine
from eagle_infer.errors import EagleError
from eagle_infer.head.draft_head import eagle3_layers
from tests.oracles import one_thread, scaled_target, vanilla_tokens  # noqa: F401 (one_thread is autouse)

VOCAB, HIDDEN, DRAFT = 96, 64, 40


@pytest.fixture(scope="module")
def target():
    return scaled_target(vocab=VOCAB, layers=6, seed=5, name="tiny-deep")


def eagle3_checkpoint(directory, target, seed: int = 0, **config_overrides) -> dict[str, torch.Tensor]:
    """Write a random EAGLE-3 head in the published layout; returns its tensors."""
    c = target.config
    g = torch.Generator().manual_seed(seed)
    h, heads, kv, hd, inter = HIDDEN, c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.intermediate_size

    def w(*shape, scale=0.2):
        return torch.randn(*shape, generator=g) * scale

    draft_ids = torch.randperm(VOCAB, generator=g)[:DRAFT].sort().values
    t2d = torch.zeros(VOCAB, dtype=torch.bool)
    t2d[draft_ids] = True
    state = {
        "midlayer.self_attn.q_proj.weight": w(heads * hd, 2 * h),
        "midlayer.self_attn.k_proj.weight": w(kv * hd, 2 * h),
        "midlayer.self_attn.v_proj.weight": w(kv * hd, 2 * h),
        "midlayer.self_attn.o_proj.weight": w(h, heads * hd),
        "midlayer.mlp.gate_proj.weight": w(inter, h),
        "midlayer.mlp.up_proj.weight": w(inter, h),
        "midlayer.mlp.down_proj.weight": w(h, inter),
        "midlayer.input_layernorm.weight": 1 + w(h, scale=0.1),
        "midlayer.hidden_norm.weight": 1 + w(h, scale=0.1),
        "midlayer.post_attention_layernorm.weight": 1 + w(h, scale=0.1),
        "fc.weight": w(h, 3 * h),
        "norm.weight": 1 + w(h, scale=0.1),
        "lm_head.weight": w(DRAFT, h, scale=1.0),
        "d2t": draft_ids - torch.arange(DRAFT),
        "t2d": t2d,
        "embed_tokens.weight": w(VOCAB, h),
    }
    config = {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": h, "vocab_size": VOCAB,
        "draft_vocab_size": DRAFT, "num_hidden_layers": 1, "num_attention_heads": heads,
        "num_key_value_heads": kv, "intermediate_size": inter, "rms_norm_eps": c.rms_norm_eps,
        **config_overrides,
    }
    directory.mkdir(parents=True, exist_ok=True)
    save_file(state, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps(config))
    return state


def eagle3_reference(w, target, aux, tokens, positions):
    """EAGLE-3's draft model written out in plain torch: (pre-norm output [1, T, H], draft logits [1, T, Vd])."""
    c = target.config
    heads, kv, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim

    def rms(x, g):
        return g * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + c.rms_norm_eps))

    def proj(x, name):
        return x @ w[f"midlayer.self_attn.{name}.weight"].T

    h = aux @ w["fc.weight"].T
    both = torch.cat((rms(target.embed_tokens(tokens), w["midlayer.input_layernorm.weight"]),
                      rms(h, w["midlayer.hidden_norm.weight"])), dim=-1)
    t = tokens.shape[1]
    q = proj(both, "q_proj").view(1, t, heads, hd).transpose(1, 2)
    k = proj(both, "k_proj").view(1, t, kv, hd).transpose(1, 2)
    v = proj(both, "v_proj").view(1, t, kv, hd).transpose(1, 2)
    cos, sin = LlamaRotaryEmbedding(c)(v, positions)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    k, v = (x.repeat_interleave(heads // kv, dim=1) for x in (k, v))
    attn = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(1, t, heads * hd)
    h = h + attn @ w["midlayer.self_attn.o_proj.weight"].T
    x = rms(h, w["midlayer.post_attention_layernorm.weight"])
    mlp = (F.silu(x @ w["midlayer.mlp.gate_proj.weight"].T) * (x @ w["midlayer.mlp.up_proj.weight"].T))
    h = h + mlp @ w["midlayer.mlp.down_proj.weight"].T
    return h, rms(h, w["norm.weight"]) @ w["lm_head.weight"].T


def test_eagle3_checkpoint_computes_eagle3s_draft_model(target, tmp_path):
    w = eagle3_checkpoint(tmp_path / "e3", target)
    head = load_head(tmp_path / "e3", target)
    assert head.config.block == "eagle3" and head.config.feature_layers == list(eagle3_layers(6))
    assert head.config.draft_vocab_size == DRAFT
    assert torch.equal(head.draft_vocab, torch.nonzero(w["t2d"]).flatten())
    torch.manual_seed(1)
    aux, tokens, positions = torch.randn(1, 7, 3 * HIDDEN), torch.randint(0, VOCAB, (1, 7)), torch.arange(7)[None]
    with torch.no_grad():
        out = head(aux, tokens, positions)
        want, want_logits = eagle3_reference(w, target, aux, tokens, positions)
        torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(head.draft_logits(out), want_logits, rtol=1e-4, atol=1e-4)
        full = head.logits(out)
    assert torch.isinf(full[..., ~w["t2d"]]).all() and torch.equal(full[..., w["t2d"]], head.draft_logits(out))
    # Drafting runs the layer as a lean step (packed or not) computing the same.
    for packed in (False, True):
        runner = HeadRunner(head, target, packed=packed)
        assert runner.step.layers[0].norm_embed is not None
        with torch.no_grad():
            lean = runner(aux, tokens, positions, runner.new_cache(1, 16), None)
            torch.testing.assert_close(lean, want, rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(runner.draft_logits(lean), want_logits, rtol=1e-4, atol=1e-4)
    # Saved in this toolkit's format (block, draft vocabulary and all), it loads back computing the same.
    head.save(tmp_path / "saved", dtype=torch.float32)
    again = load_head(tmp_path / "saved", target)
    assert again.config.block == "eagle3" and torch.equal(again.draft_vocab, head.draft_vocab)
    with torch.no_grad():
        torch.testing.assert_close(again.draft_logits(again(aux, tokens, positions)), want_logits, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("config", [InferConf(method="eagle2", depth=4, top_k=4, total_tokens=12),
                                    InferConf(method="chain", depth=3)], ids=["eagle2", "chain"])
def test_eagle3_checkpoint_decodes_losslessly(target, tmp_path, config):
    eagle3_checkpoint(tmp_path / "e3", target, seed=3)
    head = load_head(tmp_path / "e3", target)
    prompts = [[3, 14, 15, 92, 65], list(range(10, 40))]
    engine = Engine(target, head, config)
    assert [engine.generate(p, 20).tokens for p in prompts] == [vanilla_tokens(target, p, 20) for p in prompts]


def _drop(key):
    def edit(state):
        del state[key]
    return edit


def _shift_d2t(state):
    state["d2t"] = state["d2t"] + VOCAB


@pytest.mark.parametrize("overrides,edit,needle", [
    ({"hidden_size": 128}, None, "hidden size 128, but the target has 64"),
    ({"target_hidden_size": 4096}, None, "target hidden size 4096, but the target has 64"),
    ({"vocab_size": 128256}, None, "vocabulary size 128256, but the target has 96"),
    ({}, _drop("d2t"), "drafts 40 of 96 tokens but has no d2t map"),
    ({}, _shift_d2t, "maps draft tokens outside the target's 96 ids"),
    ({}, _drop("lm_head.weight"), "missing .*lm_head.weight"),
], ids=["hidden", "target-hidden", "vocab", "no-d2t", "bad-d2t", "no-lm-head"])
def test_eagle3_checkpoint_that_does_not_fit_is_refused_in_one_line(target, tmp_path, overrides, edit, needle):
    state = eagle3_checkpoint(tmp_path / "e3", target, **overrides)
    if edit is not None:
        edit(state)
        save_file(state, str(tmp_path / "e3" / "model.safetensors"))
    with pytest.raises(EagleError, match=needle) as err:
        load_head(tmp_path / "e3", target)
    assert "\n" not in str(err.value)
