"""A block drafter as it drafts for one target: the inference side of `dflash_head.DFlashHead` (head.block=dflash).

A block drafter reads no predicted feature and feeds no tree: its state is its context cache, every draft layer's
keys and values of the target's fused states of the committed tokens (dflash_head.ContextKV, one position per
committed token), held in a KVCache of its N layers, one row per batch row, with the row's committed length. The
cycle writes it where it feeds an EAGLE head (the same call): the prompt's states at prefill, the accepted tokens'
states after each verification (the target's states at the kept positions, the cycle's pending head inputs), and
it never commits a drafted token, so nothing is ever trimmed from it. The write (`__call__`, `context_write`) runs
the drafter's fc and each layer's k and v as one product (packed on a packed target), its norms and rotary
embedding as the lean steps do theirs. A cycle's one draft forward (`draft`) runs the rows' bonus and mask tokens
through the drafter's layers as lean steps (models/lean_layer.py: q/k/v and gate/up fused, packed for oneDNN on a
packed target), their keys and values written into the cache's slots right after each row's committed context,
uncommitted (the next context write overwrites them), so the block attends its context and itself in place
(dflash_head.cached_block_mask) and nothing is concatenated; it returns the block's logits, the function
DFlashHead.draft_block defines.

Built once per (drafter, target) and read-only afterwards: the lean steps and the target's LM-head rows of the draft
vocabulary are made once (packed on a packed target), not gathered every cycle. On a target compiled on a GPU the
block forward is compiled too (over a static cache: one graph per batch size), as a HeadRunner compiles an EAGLE
head's step there.
"""
from __future__ import annotations

import torch
from torch import nn

from ..models.compiled import CompiledForward, static_length
from ..models.kv_cache import KVCache, Slots, write
from ..models.lean_layer import RopeTable, cast, fuse, lean_layer, rms, rotated
from ..models.lean_layer import run as lean_run
from ..models.masks import additive
from ..models.packed import PackedLinear, vocab_logits
from .dflash_head import DFlashHead, cached_block_mask
from .draft_head import vocab_order

BLOCK_DRAFTERS = ("dflash",)  # the head blocks that draft a whole block a forward (head_runner.runner_for)


class BlockStep(nn.Module):
    """What a cycle's drafter forwards run. The context write: the drafter's fc (packed or not), hidden_norm's weight
    [H] and eps, each layer's k and v in one product `kv` (packed or not). The block forward: the target's embedding,
    the drafter's layers as lean steps (their k_norm too), its final norm, and the target's LM-head rows of its draft
    vocabulary, vocab_weight [Vd, H] (a buffer: a compiled forward reads it in place), packed as vocab_packed or
    None."""

    def __init__(self, module: DFlashHead, embed: nn.Module, packed: bool, vocab_weight: torch.Tensor):
        super().__init__()
        self.fc = PackedLinear.of(module.fc) if packed else module.fc
        self.register_buffer("hidden_norm", module.hidden_norm.weight.detach(), persistent=False)
        self.eps = module.hidden_norm.variance_epsilon
        self.kv = nn.ModuleList(fuse([x.self_attn.k_proj, x.self_attn.v_proj], packed, share=False)
                                for x in module.layers)
        self.embed, self.norm = embed, module.norm
        self.layers = nn.ModuleList(lean_layer(x, module.target.config, packed) for x in module.layers)
        self.vocab_packed = PackedLinear(vocab_weight) if packed else None
        self.register_buffer("vocab_weight", vocab_weight, persistent=False)


def context_write(step: BlockStep, features: torch.Tensor, rope: torch.Tensor, k: list, v: list,
                  slots: Slots) -> torch.Tensor:
    """Newly committed tokens' fused target states [B, T, k*H], rope [2, B, T, D] at their positions: every layer's
    context keys (k_norm, rotated) and values written into its cache views k[i], v[i] at `slots` -> their context
    [B, T, H] (fc, hidden_norm): DFlashHead.context_kv's keys and values in fewer ops."""
    hidden = rms(step.fc(features), step.hidden_norm, step.eps)
    b, t, _ = hidden.shape
    cos, sin = rope.unsqueeze(3).unbind(0)  # [B, T, 1, D]: broadcast over the heads
    for layer, kv, keys, values in zip(step.layers, step.kv, k, v):
        kvh = layer.kv_heads
        both = kv(hidden).view(b, t, 2 * kvh, layer.head_dim)
        new = rotated(rms(both[:, :, :kvh], layer.k_norm, layer.qk_eps), cos, sin)
        write(keys, values, new.transpose(1, 2), both[:, :, kvh:].transpose(1, 2), slots)
    return hidden


def block_logits(step: BlockStep, tokens: torch.Tensor, rope: torch.Tensor, mask: torch.Tensor, k: list, v: list,
                 slots: Slots) -> torch.Tensor:
    """The block forward, eager and compiled alike: tokens [B, T] (each row's bonus token, then T - 1 mask tokens),
    rope [2, B, T, D] at their positions (RopeTable.take), mask additive [B, 1, T, S] (cached_block_mask's), k, v the
    context cache's per-layer views, the block's keys and values written at `slots` -> float32 logits [B, T - 1, Vd]
    of the slots after the bonus token."""
    x = cast(step.embed(tokens), step.norm.weight.dtype)
    hidden = lean_run(step.layers, x, rope, k, v, slots, mask)[0]
    return vocab_logits(step.norm(hidden[:, 1:]), step.vocab_weight, step.vocab_packed)


class BlockRunner:
    """`module` (a DFlashHead) drafting for `target`: its context cache written (`__call__`), the block forward
    (`draft`), new caches. packed: the lean steps' products and the vocabulary rows packed for oneDNN (default: as
    the target is); compile_step: the block forward compiled (default: a target compiled on a GPU)."""

    def __init__(self, module: DFlashHead, target, packed: bool | None = None, compile_step: bool | None = None):
        self.module, self.target, self.config = module.eval(), target, module.config
        packed = target.packed if packed is None else packed
        if compile_step is None:
            compile_step = target.compiled_forward is not None and target.device.type == "cuda"
        self.vocab_order = vocab_order(module.draft_vocab, self.config.vocab_size)
        rows = target.lm_head.weight.detach()
        rows = rows if module.draft_vocab is None else rows[module.draft_vocab]  # [Vd, H], gathered once
        self.step = BlockStep(module, target.embed_tokens, packed, rows)
        self.rope = RopeTable(module.rotary)
        self.compiled = (CompiledForward(self.step, block_logits, target.device, "the block drafter's forward")
                         if compile_step else None)

    @property
    def draft_vocab(self) -> torch.Tensor | None:
        """[Vd] target ids of the draft vocabulary (None: the whole vocabulary)."""
        return self.module.draft_vocab

    @property
    def block_size(self) -> int:
        """B: the bonus token and the B - 1 tokens a forward drafts after it."""
        return self.config.block_size

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        """A context cache of at least max_len committed positions and a block's scratch slots after them: static
        and rounded up (compiled.static_length) when the block forward is compiled (it then attends every slot, the
        rows' lengths masking the rest)."""
        weight, static = self.module.weight, self.compiled is not None  # (its layers are of the target's form)
        length = max_len + self.block_size
        return KVCache(self.config.layers, *self.target.kv_shape(batch)[1:],
                       static_length(length) if static else length, weight.dtype, weight.device, static)

    @torch.inference_mode()
    def __call__(self, features: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache,
                 mask: torch.Tensor | None) -> torch.Tensor:
        """Newly committed tokens' fused target states [B, T, k*H] at positions [B, T] -> their context [B, T, H]
        (fc, hidden_norm: what the cycle keeps as a row's newest feature, as a head's prediction; nothing drafts from
        it); every layer's context keys and values written after what `cache` holds (not committed: the caller
        advances it). tokens and mask, what an EAGLE head is fed beside the states, go unread: a context position
        attends nothing."""
        rope = self.rope.take(positions, self.module.weight.dtype, cache.max_len)
        return context_write(self.step, features, rope, cache.k, cache.v, cache.slots(features.shape[1]))

    @torch.inference_mode()
    def draft(self, cache: KVCache, bonus: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The cycle's one draft forward: each row's committed context in `cache`, its bonus token [B, 1] at
        position lengths [B, 1] (the row's committed length: cache.lengths on the device) -> float32 logits
        [B, T - 1, Vd] of the tokens at lengths + 1 .. lengths + T - 1 over the draft vocabulary. The block's keys
        and values land in the slots after each row's context, left uncommitted."""
        t, c, dtype = self.block_size, self.config, self.module.weight.dtype
        tokens, positions = self.module.block_inputs(bonus, lengths)
        slots = cache.slots(t)
        seen = cached_block_mask(lengths, cache.max_len if cache.static else cache.span(t), t,
                                 c.block_attention == "causal", c.sliding_window)
        args = (tokens, self.rope.take(positions, dtype, cache.max_len), additive(seen, dtype), cache.k, cache.v, slots)
        if self.compiled is not None and cache.static:
            return self.compiled(*args)
        return block_logits(self.step, *args)
