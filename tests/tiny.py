"""Tiny random-weight targets for unit tests (no downloads)."""
from __future__ import annotations

import torch

from eagle_infer.models.target import Target, with_decoder


LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64}  # Llama 3.x's rope scaling, at a tiny context


def tiny_target(vocab: int = 96, hidden: int = 64, layers: int = 2, seed: int = 0, dtype=torch.float32,
                arch: str = "llama", name: str = "tiny-llama", rope_theta: float | None = None,
                lean: bool = True) -> Target:
    """A random Llama-family causal LM wrapped as a Target (tokenizer None). arch: llama, mistral, qwen2, qwen3
    (per-head q/k norms), or llama3 (a Llama with Llama 3.x's rope scaling); rope_theta: None = the family's
    default. lean: with its decoder built (with_decoder), as load_target builds a target."""
    from transformers import AutoConfig, AutoModelForCausalLM

    extra = {"llama3": {"rope_scaling": LLAMA3_ROPE}, "qwen3": {"head_dim": hidden // 4}}.get(arch, {})
    if rope_theta is not None:
        extra = {**extra, "rope_theta": rope_theta}
    config = AutoConfig.for_model(
        "llama" if arch == "llama3" else arch, vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        tie_word_embeddings=False, **extra,
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa").eval().requires_grad_(False)
    # Sharpen the output distribution so greedy paths are not near-ties and a few tokens dominate.
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    target = Target(name, model, None, "chatml", dtype, torch.device("cpu"))
    return with_decoder(target) if lean else target
