"""A block drafter as it drafts for one target: the inference side of `dflash_head.DFlashHead` (head.block=dflash).

A block drafter reads no predicted feature and feeds no tree: its state is its context cache, every draft layer's
keys and values of the target's fused states of the committed tokens (dflash_head.ContextKV, one position per
committed token), held in a KVCache of its N layers, one row per batch row, with the row's committed length. The
cycle writes it where it feeds an EAGLE head (the same call): the prompt's states at prefill, the accepted tokens'
states after each verification (the target's states at the kept positions, the cycle's pending head inputs), and
it never holds a drafted token, so nothing is ever trimmed from it. A cycle's one draft forward (`draft`) reads the
rows' committed contexts and their bonus tokens and returns the block's logits.

Built once per (drafter, target) and read-only afterwards: the target's LM-head rows of the draft vocabulary are
copied once (packed for oneDNN on a packed target), not gathered every cycle. On a target compiled on a GPU the
block forward is compiled too (over a static cache: one graph per batch size), as a HeadRunner compiles an EAGLE
head's step there.
"""
from __future__ import annotations

import torch
from torch import nn

from ..models.compiled import CompiledForward, static_length
from ..models.kv_cache import KVCache, write
from ..models.packed import PackedLinear, vocab_logits
from .dflash_head import ContextKV, DFlashHead
from .draft_head import vocab_order

BLOCK_DRAFTERS = ("dflash",)  # the head blocks that draft a whole block a forward (head_runner.runner_for)


class BlockStep(nn.Module):
    """What a cycle's block forward runs: the drafter and the target's LM-head rows of its draft vocabulary,
    vocab_weight [Vd, H] (a buffer: a compiled forward reads it in place), packed as vocab_packed or None."""

    def __init__(self, module: DFlashHead, vocab_weight: torch.Tensor, vocab_packed: PackedLinear | None):
        super().__init__()
        self.module, self.vocab_packed = module, vocab_packed
        self.register_buffer("vocab_weight", vocab_weight, persistent=False)


def block_logits(step: BlockStep, keys: torch.Tensor, values: torch.Tensor, bonus: torch.Tensor,
                 lengths: torch.Tensor) -> torch.Tensor:
    """The block forward, eager and compiled alike: context keys, values [N, B, kvh, L, D], bonus, lengths [B, 1]
    -> float32 logits [B, T - 1, Vd] (DFlashHead.draft_block's, over the step's copy of the vocabulary rows)."""
    hidden = step.module.block_hidden(ContextKV(keys, values), bonus, lengths)
    return vocab_logits(hidden, step.vocab_weight, step.vocab_packed)


class BlockRunner:
    """`module` (a DFlashHead) drafting for `target`: its context cache written (`__call__`), the block forward
    (`draft`), new caches. compile_step: the block forward compiled (default: a target compiled on a GPU)."""

    def __init__(self, module: DFlashHead, target, compile_step: bool | None = None):
        self.module, self.target, self.config = module.eval(), target, module.config
        if compile_step is None:
            compile_step = target.compiled_forward is not None and target.device.type == "cuda"
        self.vocab_order = vocab_order(module.draft_vocab, self.config.vocab_size)
        rows = target.lm_head.weight.detach()
        rows = rows if module.draft_vocab is None else rows[module.draft_vocab]  # [Vd, H], gathered once
        self.step = BlockStep(module, rows, PackedLinear(rows) if target.packed else None)
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
        """A context cache of at least max_len positions: static and rounded up (compiled.static_length) when the
        block forward is compiled (it then attends every slot, the rows' lengths masking the rest)."""
        weight, static = self.module.weight, self.compiled is not None  # (its layers are of the target's form)
        return KVCache(self.config.layers, *self.target.kv_shape(batch)[1:],
                       static_length(max_len) if static else max_len, weight.dtype, weight.device, static)

    @torch.inference_mode()
    def __call__(self, features: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache,
                 mask: torch.Tensor | None) -> torch.Tensor:
        """Newly committed tokens' fused target states [B, T, k*H] at positions [B, T] -> their context [B, T, H]
        (fc, hidden_norm: what the cycle keeps as a row's newest feature, as a head's prediction; nothing drafts from
        it); every layer's context keys and values written after what `cache` holds (not committed: the caller
        advances it). tokens and mask, what an EAGLE head is fed beside the states, go unread: a context position
        attends nothing."""
        hidden = self.module.context(features)
        context, slots = self.module.projected(hidden, positions), cache.slots(features.shape[1])
        for i in range(self.config.layers):
            write(cache.k[i], cache.v[i], context.keys[i], context.values[i], slots)
        return hidden

    @torch.inference_mode()
    def draft(self, cache: KVCache, bonus: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The cycle's one draft forward: each row's committed context in `cache`, its bonus token [B, 1] at
        position lengths [B, 1] (the row's committed length) -> float32 logits [B, T - 1, Vd] of the tokens at
        lengths + 1 .. lengths + T - 1 over the draft vocabulary."""
        span = cache.max_len if cache.static else max(cache.lengths)
        keys, values = cache.store[0, :, :, :, :span], cache.store[1, :, :, :, :span]
        if self.compiled is not None and cache.static:
            return self.compiled(keys, values, bonus, lengths)
        return block_logits(self.step, keys, values, bonus, lengths)
