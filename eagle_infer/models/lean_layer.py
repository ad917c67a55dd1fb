"""A Llama-family decoder layer's inference step in few ops: every target's and draft head's forward at inference.

A decode step or draft level runs each decoder layer over a handful of tokens; on a CPU a small layer's products
take ~0.4 ms and transformers' layer wraps them in ~70 small ops and as much Python again (rotary halves,
per-projection views, the attention interface's dispatch). `LeanLayer` holds the same weights fused for inference
(q/k/v in one product, gate/up in one; packed for oneDNN when the model is) and `step` runs the layer's math in
~20 ops: the same function as transformers' LlamaDecoderLayer (Mistral and Qwen2 alike; Qwen3's with its per-head
RMSNorm of queries and keys before the rotary embedding, as a DFlash drafter's layers have too) under the engine's
explicit additive masks, with the same ops in the same order, so equal to it up to how a matmul kernel blocks a
wider product (tests/test_lean_layer.py; bit for bit where measured). The target's forward, the draft head's
drafting and a block drafter's block forward run it, eagerly and compiled alike (eagle_infer/models/compiled.py
compiles these steps); training and featurize keep transformers' layers, which load the weights.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import EagleError
from .kv_cache import Slots, write
from .packed import PackedLinear


NATIVE_GQA_DEVICES = ("cpu",)  # where masked grouped-query SDPA runs with enable_gqa (see step)
# The decoder-layer classes a lean step computes, each handled explicitly (Qwen3's: its q/k norms); another class is
# refused in one line rather than run with a part of its function silently left out.
LAYER_CLASSES = ("LlamaDecoderLayer", "MistralDecoderLayer", "Qwen2DecoderLayer", "Qwen3DecoderLayer", "Eagle3Layer")


class LeanLayer(nn.Module):
    """One decoder layer's weights for `step`; shapes for hidden size H, heads nh, kv_heads kvh, head_dim D. A module,
    so that a compiled forward reaches its products and norms as the model's own (freezing folds them in)."""

    def __init__(self, qkv: nn.Module, o: nn.Module, gate_up: nn.Module, down: nn.Module,
                 norm_in: torch.Tensor | None, norm_post: torch.Tensor, eps: float, heads: int, kv_heads: int,
                 head_dim: int, q_norm: torch.Tensor | None = None, k_norm: torch.Tensor | None = None,
                 qk_eps: float = 0.0, norm_embed: torch.Tensor | None = None):
        super().__init__()
        self.qkv = qkv  # H (EAGLE-3: 2H) -> (nh + 2 kvh) * D, q then k then v
        self.o = o  # nh * D -> H
        self.gate_up = gate_up  # H -> 2 I, gate then up
        self.down = down  # I -> H
        self.register_buffer("norm_in", norm_in, persistent=False)  # [H]; None: no input norm (EAGLE's first layer)
        self.register_buffer("norm_post", norm_post, persistent=False)  # [H]
        # [D] per-head RMSNorm of queries and keys before rotary (Qwen3); None: none
        self.register_buffer("q_norm", q_norm, persistent=False)
        self.register_buffer("k_norm", k_norm, persistent=False)
        # [H] EAGLE-3's layer: attention reads [norm(embeds) ; norm_in(hidden)]
        self.register_buffer("norm_embed", norm_embed, persistent=False)
        self.eps, self.heads, self.kv_heads, self.head_dim, self.qk_eps = eps, heads, kv_heads, head_dim, qk_eps


class _Fused(nn.Module):
    """y = x W^T + b over weights stacked by rows (W [N, K], b [N] or None), eagerly or packed for oneDNN. The
    packed form keeps only the packed copy."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, packed: bool):
        super().__init__()
        self.register_buffer("weight", weight, persistent=False)
        self.register_buffer("bias", bias, persistent=False)
        self.packed = None
        if packed:
            self.packed, self.weight = PackedLinear(weight, bias), None
            self.packed.weight = None  # inference only (lean steps run without gradients): the packed copy alone

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.packed(x) if self.packed is not None else F.linear(x, self.weight, self.bias)


def fuse(modules: list[nn.Module], packed: bool, share: bool) -> nn.Module:
    """One product for several linear layers of one input. share (unpacked only): the layers' own weights become
    row slices of the stacked tensor, so the fused product costs no memory and the layers compute what they did."""
    weight = torch.cat([m.weight.detach() for m in modules])
    bias = None if modules[0].bias is None else torch.cat([m.bias.detach() for m in modules])
    if share and not packed:
        row = 0
        for m in modules:
            n = m.weight.shape[0]
            m.weight.data = weight[row : row + n]
            if bias is not None:
                m.bias.data = bias[row : row + n]
            row += n
    return _Fused(weight, bias, packed)


def _unlike_llama(layer: nn.Module, config) -> str | None:
    """What in a decoder layer of a LAYER_CLASSES class departs from the Llama form a lean step computes (another
    activation, norm, attention scale or a sliding window), or None."""
    attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
    parts = ("q_proj", "k_proj", "v_proj", "o_proj")
    if attn is None or not all(hasattr(attn, p) for p in parts):
        return "its attention has no q/k/v/o projections"
    if mlp is None or not all(hasattr(mlp, p) for p in ("gate_proj", "up_proj", "down_proj")):
        return "its MLP has no gate/up/down projections"
    if config.hidden_act != "silu":
        return f"its activation is {config.hidden_act!r}, not 'silu'"
    norms = (layer.hidden_norm if hasattr(layer, "hidden_norm") else layer.input_layernorm, layer.post_attention_layernorm)
    if not all(isinstance(n, nn.Identity) or hasattr(n, "variance_epsilon") for n in norms):
        return "its norms are not RMSNorms"
    if attn.scaling != attn.head_dim ** -0.5:
        return f"its attention scale is {attn.scaling}, not head_dim ** -0.5"
    window = getattr(attn, "sliding_window", None)
    if window is None and type(layer).__name__ == "MistralDecoderLayer":  # Mistral's window is the config's
        window = getattr(config, "sliding_window", None)
    context = getattr(config, "max_position_embeddings", None)
    if window is not None and (context is None or window < context):  # (a window over the whole context is none)
        return f"it attends in a sliding window of {window} positions, shorter than its context of {context}"
    return None


def lean_layer(layer: nn.Module, config, packed: bool, share: bool = False) -> LeanLayer:
    """The LeanLayer of a transformers Llama/Mistral/Qwen2/Qwen3 decoder layer or an EAGLE-3 layer (LAYER_CLASSES);
    a layer of another class or form is a one-line error. q/k/v and gate/up become one product each: copies (packed
    for oneDNN when `packed`), or with `share` on unpacked weights the layer's own storage (see fuse); o and down
    are the layer's modules, packed when `packed` (a packed model's are already)."""
    kind = type(layer).__name__
    if kind not in LAYER_CLASSES:
        raise EagleError(f"decoder layer {kind} has no lean step: expected one of {', '.join(LAYER_CLASSES)}")
    unlike = _unlike_llama(layer, config)
    if unlike is not None:
        raise EagleError(f"decoder layer {kind} has no lean step: {unlike}")
    attn, mlp = layer.self_attn, layer.mlp
    norm_in, norm_post = layer.input_layernorm, layer.post_attention_layernorm
    norm_embed = None
    if kind == "Eagle3Layer":  # draft_head.Eagle3Layer: the input norm is the hidden state's, beside the embedding's
        norm_in, norm_embed = layer.hidden_norm, layer.input_layernorm.weight.detach()
    pack = PackedLinear.of if packed else (lambda m: m)  # noqa: E731
    # per-head norms of queries and keys wherever the attention has them: Qwen3's, a DFlash drafter's (dflash_head)
    q_norm, k_norm = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)
    q, k, v = attn.q_proj, attn.k_proj, attn.v_proj
    return LeanLayer(
        qkv=fuse([q, k, v], packed, share),
        o=pack(attn.o_proj),
        gate_up=fuse([mlp.gate_proj, mlp.up_proj], packed, share),
        down=pack(mlp.down_proj),
        norm_in=None if isinstance(norm_in, nn.Identity) else norm_in.weight.detach(),
        norm_post=norm_post.weight.detach(),
        eps=norm_post.variance_epsilon,
        heads=q.weight.shape[0] // attn.head_dim,
        kv_heads=k.weight.shape[0] // attn.head_dim,
        head_dim=attn.head_dim,
        q_norm=None if q_norm is None else q_norm.weight.detach(),
        k_norm=None if k_norm is None else k_norm.weight.detach(),
        qk_eps=0.0 if q_norm is None else q_norm.variance_epsilon,
        norm_embed=norm_embed,
    )


def fused_bytes(model: nn.Module) -> int:
    """Bytes of the fused q/k/v and gate/up copies that lean_layer makes of a model's decoder layers when packed."""
    names = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
    return sum(m.weight.numel() * m.weight.element_size() for n, m in model.named_modules() if n.split(".")[-1] in names)


class RopeTable:
    """cos and sign-folded sin of a rotary module for positions 0..n-1, [2, n, D], grown on demand: `take` is one
    index op instead of the module's per-call trigonometry. sin's first half is negated, so that rotating x is
    x rolled by half its width (x2, x1) * sin instead of cat(-x2, x1) * sin (the same products: negation is exact)."""

    def __init__(self, rotary: nn.Module):
        self.rotary, self.table = rotary, None

    def take(self, positions: torch.Tensor, dtype: torch.dtype, bound: int) -> torch.Tensor:
        """positions [B, T] -> [2, B, T, D] (cos, signed sin) in `dtype` on the positions' device. bound: a host
        bound on the positions (> every one: the cache's length), so the table's size needs no read of the device."""
        device = positions.device
        stale = self.table is None or self.table.dtype != dtype or self.table.device != device
        if stale or self.table.shape[1] < bound:
            size = max(bound, 2 * (0 if self.table is None else self.table.shape[1]), 256)
            index = torch.arange(size, device=device)[None]
            cos, sin = self.rotary(torch.empty(0, device=device, dtype=dtype), index)
            half = cos.shape[-1] // 2
            sign = torch.cat([-torch.ones(half), torch.ones(half)]).to(device, sin.dtype)
            self.table = torch.stack([cos[0], sin[0] * sign]).to(dtype)
        return self.table[:, positions]


def cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x in `dtype`: x itself when it already is (Tensor.to would still dispatch an operator: two per norm of a
    float32 forward)."""
    return x if x.dtype == dtype else x.to(dtype)


def rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' LlamaRMSNorm: normalised in float32, scaled in x's dtype (the same bits)."""
    return weight * cast(F.rms_norm(cast(x, torch.float32), (x.shape[-1],), eps=eps), x.dtype)


def rotated(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, T, h, D] rotated by the rotary embedding: cos and signed sin [B, T, 1, D] (RopeTable.take's, split)."""
    return x * cos + x.roll(x.shape[-1] // 2, -1) * sin


def step(layer: LeanLayer, hidden: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], k: torch.Tensor,
         v: torch.Tensor, slots: Slots, mask: torch.Tensor | None, embeds: torch.Tensor | None = None) -> torch.Tensor:
    """hidden [B, T, H], rope: (cos, signed sin) [B, T, 1, D] each (`run` splits RopeTable.take's once for every
    layer), k, v: the layer's cache views [B, kvh, max_len, D],
    written at `slots` (kv_cache.write), mask additive [B or 1, 1, T, S] over the S keys the slots attend, or None:
    causal over T new tokens and nothing before them; embeds [B, T, H]: the token embeddings an EAGLE-3 layer
    (norm_embed) reads beside hidden -> hidden [B, T, H]."""
    b, t, _ = hidden.shape
    nh, kvh, d = layer.heads, layer.kv_heads, layer.head_dim
    x = hidden if layer.norm_in is None else rms(hidden, layer.norm_in, layer.eps)
    if layer.norm_embed is not None:
        x = torch.cat((rms(embeds, layer.norm_embed, layer.eps), x), dim=-1)
    qkv = layer.qkv(x).view(b, t, nh + 2 * kvh, d)
    qk = qkv[:, :, : nh + kvh]
    if layer.q_norm is not None:  # Qwen3: queries and keys normalised per head before the rotary embedding
        qk = torch.cat([rms(qk[:, :, :nh], layer.q_norm, layer.qk_eps), rms(qk[:, :, nh:], layer.k_norm, layer.qk_eps)], 2)
    qk = rotated(qk, *rope).transpose(1, 2)  # [B, nh+kvh, T, D]
    keys, values = write(k, v, qk[:, nh:], qkv[:, :, nh + kvh :].transpose(1, 2), slots)
    # Grouped-query attention as transformers' SDPA path takes it: without a mask, SDPA's own grouped-query support
    # (causal over several new tokens: an empty cache's prefill); one masked query's nh / kvh heads attend as their
    # key/value head's queries; several masked queries attend to keys and values repeated per head, except on a
    # CPU, where SDPA's grouped-query support gives the same bits faster (bench-engine compares the logits).
    g = nh // kvh
    if mask is not None and g > 1 and t == 1 and mask.shape[1] == 1:
        att = F.scaled_dot_product_attention(qk[:, :nh].reshape(b, kvh, g, d), keys, values, attn_mask=mask)
        att = att.reshape(b, nh, 1, d)
    elif mask is None or g == 1 or hidden.device.type in NATIVE_GQA_DEVICES:
        att = F.scaled_dot_product_attention(qk[:, :nh], keys, values, attn_mask=mask, enable_gqa=g > 1,
                                             is_causal=mask is None and t > 1)
    else:
        repeat = lambda x: x[:, :, None].expand(b, kvh, g, *x.shape[2:]).reshape(b, nh, *x.shape[2:])  # noqa: E731
        att = F.scaled_dot_product_attention(qk[:, :nh], repeat(keys), repeat(values), attn_mask=mask)
    hidden = hidden + layer.o(att.transpose(1, 2).reshape(b, t, nh * d))
    gate, up = layer.gate_up(rms(hidden, layer.norm_post, layer.eps)).chunk(2, dim=-1)
    return hidden + layer.down(F.silu(gate) * up)


def run(layers, hidden: torch.Tensor, rope: torch.Tensor, k: list[torch.Tensor], v: list[torch.Tensor], slots: Slots,
        mask: torch.Tensor | None, taps: tuple[int, ...] = (), embeds: torch.Tensor | None = None
        ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    """A decoder stack's lean steps: hidden [B, T, H] through every layer, layer i writing and reading cache views
    k[i], v[i] at `slots` (rope [2, B, T, D] from RopeTable.take; mask and embeds as in `step`) -> (hidden [B, T, H],
    {i: the hidden after layer i} for i in taps)."""
    tapped = {}
    split = rope.unsqueeze(3).unbind(0)  # (cos, signed sin) [B, T, 1, D]: broadcast over the heads, made once
    for index, layer in enumerate(layers):
        hidden = step(layer, hidden, split, k[index], v[index], slots, mask, embeds)
        if index in taps:
            tapped[index] = hidden
    return hidden, tapped
