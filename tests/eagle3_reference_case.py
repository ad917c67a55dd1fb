"""The fixed case of the EAGLE-3 reference check (tests/test_eagle3_reference.py).

A tiny Llama target and an EAGLE-3 draft model whose every weight is a deterministic function of its name, one batch
of two right-padded rows, and the training settings. Pure torch, so tests/fixtures/make_eagle3_reference.py builds the
same case in the reference trainer's own environment (another transformers) and the test builds it here.

Names are the published ones: the target's are LlamaForCausalLM's, the draft model's are EAGLE-3's (`midlayer.*`,
`fc`, `norm`, `lm_head`; its embedding is the target's). `loss_mask` is in the reference's convention (position i
counts when token i + 2 is an assistant token); this toolkit's marks the token itself, two positions later.
"""
from __future__ import annotations

import zlib

import torch

TARGET = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=8, num_attention_heads=4,
              num_key_value_heads=2, hidden_act="silu", rms_norm_eps=1e-5, rope_theta=10000.0,
              max_position_embeddings=64, tie_word_embeddings=False)
DRAFT_VOCAB = 48  # draft tokens: half the vocabulary, so about half the positions are not draftable
LENGTH = 7  # unrolled steps of the training-time test (the reference's `length`; this toolkit's ttt_steps = 6)
ROWS = (20, 15)  # tokens per row; the second is right-padded to 20
LOSS_SPANS = ((5, 18), (3, 13))  # [start, end) of each row's loss positions, reference convention
ITERATIONS = 3  # optimizer steps recorded
SGD_LR = 0.5  # plain SGD: the check is of the objective and its gradients, not of an optimizer
STEP_WEIGHT = 0.8  # step k's loss weight is 0.8 ** k


def tensor(name: str, shape: tuple[int, ...]) -> torch.Tensor:
    """The weight called `name`: N(0, 0.1^2) (norms: 1 + that), from a generator seeded by the name alone."""
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    values = torch.randn(*shape, generator=g) * (0.5 if name == "lm_head.weight" else 0.1)
    return 1 + values if name.endswith("norm.weight") else values


def target_state() -> dict[str, torch.Tensor]:
    """LlamaForCausalLM's parameters for TARGET."""
    c = TARGET
    h, inter, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    kv = c["num_key_value_heads"] * h // c["num_attention_heads"]
    shapes = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,), "lm_head.weight": (v, h)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes |= {p + "self_attn.q_proj.weight": (h, h), p + "self_attn.k_proj.weight": (kv, h),
                   p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, h),
                   p + "mlp.gate_proj.weight": (inter, h), p + "mlp.up_proj.weight": (inter, h),
                   p + "mlp.down_proj.weight": (h, inter), p + "input_layernorm.weight": (h,),
                   p + "post_attention_layernorm.weight": (h,)}
    return {name: tensor(name, shape) for name, shape in shapes.items()}


def draft_ids() -> torch.Tensor:
    """The draft vocabulary's target ids [DRAFT_VOCAB], sorted."""
    g = torch.Generator().manual_seed(zlib.crc32(b"draft_ids"))
    return torch.randperm(TARGET["vocab_size"], generator=g)[:DRAFT_VOCAB].sort().values


def draft_state() -> dict[str, torch.Tensor]:
    """The EAGLE-3 draft model's trainable parameters, published names (d2t / t2d not included)."""
    c = TARGET
    h, inter = c["hidden_size"], c["intermediate_size"]
    kv = c["num_key_value_heads"] * h // c["num_attention_heads"]
    shapes = {"midlayer.self_attn.q_proj.weight": (h, 2 * h), "midlayer.self_attn.k_proj.weight": (kv, 2 * h),
              "midlayer.self_attn.v_proj.weight": (kv, 2 * h), "midlayer.self_attn.o_proj.weight": (h, h),
              "midlayer.mlp.gate_proj.weight": (inter, h), "midlayer.mlp.up_proj.weight": (inter, h),
              "midlayer.mlp.down_proj.weight": (h, inter), "midlayer.input_layernorm.weight": (h,),
              "midlayer.hidden_norm.weight": (h,), "midlayer.post_attention_layernorm.weight": (h,),
              "fc.weight": (h, 3 * h), "norm.weight": (h,), "lm_head.weight": (DRAFT_VOCAB, h)}
    return {name: tensor(name, shape) for name, shape in shapes.items()}


def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids [2, T], attention_mask [2, T], loss_mask [2, T]) right-padded with 0, reference convention."""
    g = torch.Generator().manual_seed(zlib.crc32(b"batch"))
    t = max(ROWS)
    ids = torch.zeros(len(ROWS), t, dtype=torch.long)
    attention = torch.zeros(len(ROWS), t, dtype=torch.long)
    loss = torch.zeros(len(ROWS), t, dtype=torch.long)
    for row, (n, (start, end)) in enumerate(zip(ROWS, LOSS_SPANS)):
        ids[row, :n] = torch.randint(1, TARGET["vocab_size"], (n,), generator=g)
        attention[row, :n] = 1
        loss[row, start:end] = 1
    return ids, attention, loss
