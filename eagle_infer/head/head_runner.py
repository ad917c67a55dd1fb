"""A draft head as it drafts for one target: the inference side of `draft_head.DraftHead`.

Built once per (head, target) and read-only afterwards, it holds what drafting needs beside the trainable module:
- packed copies of the head's products for a packed target (eagle_infer.models.packed), and of the target's LM-head rows
  over the draft vocabulary;
- the head's decoder layers as lean steps (eagle_infer.models.lean_layer), the same function in fewer ops, and
  with its fuse, fc and the target's embedding the one forward a head runs at inference (`head_step`);
- on a target compiled on a GPU, that step compiled (a level is launch-bound there), with what a caller computes
  from its predictions in the same call (`AfterStep`: an EAGLE-2 level's draft logits and bookkeeping), over static
  caches that `new_cache` makes.
Nothing here is rebuilt behind the caller's back: a head whose weights change (training) gets a new runner.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from ..models.compiled import CompiledForward, mark_dynamic_step, static_length
from .block_runner import BLOCK_DRAFTERS, BlockRunner
from .draft_head import INPUT_HALVES, DraftHead, SavedHead, full_vocabulary, head_inputs, vocab_order
from ..models.kv_cache import KVCache
from ..models.lean_layer import RopeTable, lean_layer
from ..models.lean_layer import run as lean_run
from ..models.packed import PackedLinear, vocab_logits


class HeadStep(nn.Module):
    """What one drafting step of a head runs (head_step): [its fuse,] the target's embedding, [its fc,] and its
    layers as lean steps (eagle_infer.models.lean_layer), packed or not, and what turns its predictions into draft
    logits (step_logits: [its norm,] the products over the draft vocabulary, vocab_weight [Vd, H], packed for oneDNN
    as vocab_packed or None); a module, so that a compiled step reaches the weights as its own. Its input mode's
    halves (draft_head.INPUT_HALVES) are chosen here, once."""

    def __init__(self, config, embed: nn.Module, fuse: nn.Module | None, fc: nn.Module | None, layers: list,
                 norm: nn.Module | None, vocab_weight: torch.Tensor, vocab_packed: PackedLinear | None,
                 fc_norm: nn.ModuleList | None = None, out_norm: nn.Module | None = None):
        super().__init__()
        self.embed, self.fuse, self.fc, self.layers = embed, fuse, fc, nn.ModuleList(layers)
        self.norm, self.vocab_packed = norm, vocab_packed
        self.fc_norm, self.out_norm = fc_norm, out_norm  # EAGLE-3.1: fused layers' norms; the prediction's norm
        # a buffer, as the weights are parameters: a compiled step reads it in place (a plain tensor attribute
        # would be a graph input that CUDA graphs copy in at every replay)
        self.register_buffer("vocab_weight", vocab_weight, persistent=False)
        self.halves, self.hidden_size = INPUT_HALVES[config.input_mode], config.hidden_size


# after(step, predicted [B, T, H], *extra) -> tuple: what a step computes from its predicted features in the same
# call, compiled with the step where it is compiled (expansion.expanded: an EAGLE-2 level's draft logits and
# bookkeeping, a function of this floor, handed its data by the drafter)
AfterStep = Callable[..., tuple]


def head_step(step: HeadStep, features: torch.Tensor, tokens: torch.Tensor, rope: torch.Tensor,
              mask: torch.Tensor | None, k: list, v: list, slots, after: AfterStep | None = None, extra: tuple = ()):
    """The head's forward at inference, eager and compiled alike (arguments as in HeadRunner.__call__; rope, k, v,
    slots as in lean_layer.run) -> predicted features [B, T, H], or after(step, them, *extra) when given."""
    features, embeds = head_inputs(step.halves, step.hidden_size, features, tokens, step.embed, step.fuse, step.fc_norm)
    if step.fc is None:  # EAGLE-3's layer reads the embeddings beside the feature
        out = lean_run(step.layers, features, rope, k, v, slots, mask, embeds=embeds)[0]
        if step.out_norm is not None:  # EAGLE-3.1's norm_output: the normalised state is the prediction
            out = step.out_norm(out)
    else:
        out = lean_run(step.layers, step.fc(torch.cat((embeds, features), dim=-1)), rope, k, v, slots, mask)[0]
    return out if after is None else after(step, out, *extra)


def step_logits(step: HeadStep, predicted: torch.Tensor) -> torch.Tensor:
    """Predicted features [..., H] -> float32 logits [..., Vd] over the draft vocabulary."""
    if step.norm is not None:
        predicted = step.norm(predicted)
    return vocab_logits(predicted, step.vocab_weight, step.vocab_packed)


class HeadRunner:
    """`module` drafting for `target`: forward over KVCaches, draft logits over the draft vocabulary, new caches.

    packed: products packed for oneDNN (default: as the target is); compile_step: the head's step compiled (default:
    a target compiled on a GPU; on a CPU compiling the step did not pay, docs/design.md "Compiled forward")."""

    def __init__(self, module: DraftHead, target, packed: bool | None = None, compile_step: bool | None = None):
        self.module, self.target, self.config = module.eval(), target, module.config
        self.packed = target.packed if packed is None else packed
        if compile_step is None:
            compile_step = target.compiled_forward is not None and target.device.type == "cuda"
        fc, fuse = (PackedLinear.of(module.fc), PackedLinear.of(module.fuse)) if self.packed else (module.fc, module.fuse)
        layers = [lean_layer(x, target.config, self.packed) for x in module.layers]
        if module.lm_head is None:  # the target's LM-head rows of the draft vocabulary
            sub = target.lm_head.weight.detach()
            vocab_weight = sub if module.draft_vocab is None else sub[module.draft_vocab]  # [Vd, H]
        else:  # an EAGLE-3 head drafts with its own norm and LM head
            vocab_weight = module.lm_head.weight.detach()
        norm_output = self.config.norm_output
        self.step = HeadStep(self.config, target.embed_tokens, fuse, fc, layers, None if norm_output else module.norm,
                             vocab_weight, PackedLinear(vocab_weight) if self.packed else None, module.fc_norm,
                             module.norm if norm_output else None)
        self.rope = RopeTable(module.rotary)
        self.vocab_order = vocab_order(module.draft_vocab, self.config.vocab_size)
        self.compiled = (CompiledForward(self.step, head_step, target.device, "the draft head's step")
                         if compile_step else None)

    @property
    def draft_vocab(self) -> torch.Tensor | None:
        """[Vd] target ids of the draft vocabulary (None: the whole vocabulary)."""
        return self.module.draft_vocab

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        """A cache of at least max_len positions: static and rounded up (compiled.static_length) when the step is
        compiled."""
        weight, static = self.module.weight, self.compiled is not None
        return KVCache(self.config.layers, *self.target.kv_shape(batch)[1:],
                       static_length(max_len) if static else max_len, weight.dtype, weight.device, static)

    @torch.inference_mode()
    def __call__(self, features: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache,
                 mask: torch.Tensor | None, after: AfterStep | None = None, extra: tuple = ()):
        """features [B, T, H] (or [B, T, k*H] fused target features), tokens [B, T], positions [B, T] (or [B, 1]:
        one position for a row's every token, as a tree level's siblings share) -> predicted features [B, T, H];
        the T new keys/values are written after what `cache` holds (not committed). mask: additive
        [B or 1, 1, T, held + T]. after: what to compute from the predicted features in the same call (head_step;
        compiled with the step where it is compiled), returned in their place. Inference only: it runs under
        torch.inference_mode, as Target.forward does (the caches' per-layer views share one tensor, which autograd
        could not write in place)."""
        t = tokens.shape[1]
        mask, slots = cache.attention_mask(mask, t, features.dtype), cache.slots(t)
        rope = self.rope.take(positions, features.dtype, cache.max_len)
        args = (features, tokens, rope, mask, cache.k, cache.v, slots, after, extra)
        if self.compiled is not None and cache.static:
            mark_dynamic_step(mask, rope, features, tokens)
            return self.compiled(*args)
        return head_step(self.step, *args)

    def draft_logits(self, predicted: torch.Tensor) -> torch.Tensor:
        """Predicted features [..., H] -> float32 logits [..., Vd] over the draft vocabulary (step_logits)."""
        return step_logits(self.step, predicted)

    def logits(self, predicted: torch.Tensor) -> torch.Tensor:
        """Predicted features [..., H] -> float32 logits [..., V]; -inf outside the draft vocabulary."""
        return full_vocabulary(self.draft_logits(predicted), self.draft_vocab, self.config.vocab_size)


def runner_for(head: SavedHead | HeadRunner | BlockRunner | None, target) -> HeadRunner | BlockRunner | None:
    """`head` ready to draft for `target`: the runner its block drafts through (a BlockRunner for the block drafters,
    block_runner.BLOCK_DRAFTERS; a HeadRunner for an EAGLE head) built for it, or the runner given."""
    if head is None or isinstance(head, (HeadRunner, BlockRunner)):
        return head
    return BlockRunner(head, target) if head.config.block in BLOCK_DRAFTERS else HeadRunner(head, target)
