"""The DFlash block drafter (head.block=dflash): one forward drafts a block of B tokens.

The architecture of vLLM speculators' `DFlashDraftModel` (0.9.0, `speculators/models/dflash`) and z-lab's reference
(`dflash/model.py`), checked against the former's own code (tests/test_dflash_head.py, scripts/check_export.py):
- context: the target's outputs of decoder layers `feature_layers` (0-based: z-lab's `target_layer_ids`;
  speculators' `aux_hidden_state_layer_ids` are these + 1) side by side [.., k*H] -> `fc` (no bias) -> RMSNorm
  `hidden_norm` -> [.., H]. Every draft layer projects it with its own k_proj (then its per-head k_norm and the
  rotary embedding at the context token's position) and v_proj, and prepends the result to its keys and values:
  context positions are attended, never queried.
- block: [bonus token, B - 1 mask tokens] at positions p .. p + B - 1 (p: the bonus token's position), embedded by
  the target's frozen embedding, through N decoder layers of the target's form (q/k/v/o, gated MLP, RMSNorms; with
  per-head RMSNorms of queries and keys, as speculators' DFlash layer has for every family), attending the context
  positions < p and the whole block (bidirectional; causal inside the block on sliding-window layers, whose window
  bounds the context too), then the final RMSNorm `norm` and the target's frozen LM head (its rows of the draft
  vocabulary, when the drafter has one). Slot j >= 1 predicts the token at position p + j; slot 0 predicts nothing.

State lives in plain tensors the caller passes (nothing is cached on the module):
- `ContextKV(keys, values)`, each [N, B, kvh, L, D]: every layer's keys (normed, rotated) and values of L context
  positions 0 .. L - 1 (a cache index is the token's position). `context_kv` makes them from fused states,
  `extend` appends new positions' and `trim` cuts them to a committed length.
- `block_mask(anchors, L, T, ...)`: which keys each block query sees, bool [B, 1, A*T, L + A*T] for A blocks of T
  tokens per row, block a of row b starting at position anchors[b, a] (it sees context positions < anchors[b, a]);
  `cached_block_mask` is the same for decoding's one block a row, whose keys sit in the context cache after it.
Decoding drafts one block a row after a context of the committed tokens' states (`draft_block`); training runs A
anchored blocks per row over the row's whole context in one forward (eagle_train.training.block_objective); both go
through `DFlashHead.forward`.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from transformers.models.llama.modeling_llama import rotate_half

from .draft_head import DraftHeadConfig, SavedHead, eagle3_layers, full_vocabulary
from ..errors import EagleError
from ..models.lean_layer import cast


class ContextKV(NamedTuple):
    """The drafter's context keys and values, each [N, B, kvh, L, D] (N draft layers, L context positions)."""

    keys: torch.Tensor
    values: torch.Tensor

    @property
    def length(self) -> int:
        return self.keys.shape[3]


def extend(context: ContextKV, new: ContextKV) -> ContextKV:
    """`context` followed by `new`'s positions (both [N, B, kvh, *, D]): positions L .. L + L' - 1."""
    return ContextKV(torch.cat((context.keys, new.keys), dim=3), torch.cat((context.values, new.values), dim=3))


def trim(context: ContextKV, length: int) -> ContextKV:
    """The first `length` positions of `context` (a committed length; views, no copy)."""
    return ContextKV(context.keys[:, :, :, :length], context.values[:, :, :, :length])


def block_mask(anchors: torch.Tensor, context: int, block: int, causal: bool = False, window: int = 0) -> torch.Tensor:
    """anchors [B, A] long: block a of row b holds positions anchors[b, a] .. + block - 1 -> bool [B, 1, A*block,
    context + A*block]: a block query sees the context positions before its block's first one (within `window` of it
    when > 0) and its own block's queries (all, or those at or before it when `causal`); no other block. Rows with
    fewer committed positions give a smaller anchor: the cache's positions past it are unseen."""
    b, a = anchors.shape
    q = a * block
    device = anchors.device
    start = anchors.repeat_interleave(block, dim=1)[..., None]  # [B, Q, 1]: each query's block start
    position = torch.arange(context, device=device)
    sees_context = position < start
    if window:
        sees_context = sees_context & (position >= start - window)
    index = torch.arange(q, device=device)
    same = (index[:, None] // block) == (index[None, :] // block)
    if causal:
        same = same & (index[None, :] <= index[:, None])
    return torch.cat((sees_context, same.expand(b, q, q)), dim=-1)[:, None]


def cached_block_mask(lengths: torch.Tensor, span: int, block: int, causal: bool = False,
                      window: int = 0) -> torch.Tensor:
    """block_mask for decoding's one block a row, its keys written into the context cache right after the row's
    committed context (lengths [B, 1] long: the block's first position) -> bool [B, 1, block, span] over the cache's
    first `span` positions: block query i of row b sees the context positions < lengths[b] (within `window` of it
    when > 0) and its block's, lengths[b] .. + block - 1 (those at or before its own when `causal`); nothing past
    them (the cache's scratch slots, other rows' longer contexts)."""
    position = torch.arange(span, device=lengths.device)
    start = lengths[..., None]  # [B, 1, 1]
    sees_context = position < start
    if window:
        sees_context = sees_context & (position >= start - window)
    end = start + (torch.arange(1, block + 1, device=lengths.device)[:, None] if causal else block)  # [B, 1|T, 1]
    sees_block = (position >= start) & (position < end)
    return (sees_context | sees_block).expand(-1, block, -1)[:, None]


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, h, T, D] rotated at cos, sin [B, T, D] (transformers' rotary embedding)."""
    return x * cos[:, None] + rotate_half(x) * sin[:, None]


def _heads(linear: nn.Module, x: torch.Tensor, head_dim: int) -> torch.Tensor:
    """x [B, T, H] -> linear(x) as heads [B, h, T, D]."""
    b, t, _ = x.shape
    return linear(x).view(b, t, -1, head_dim).transpose(1, 2)


class DFlashHead(SavedHead):
    """The trainable DFlash drafter for `target` (module docstring): fc, hidden_norm, N layers, norm; the target's
    embedding and LM head borrowed (frozen, never saved). Weight names are speculators' (layers.i.self_attn.q_norm,
    ...), so its checkpoints map one to one."""

    def __init__(self, config: DraftHeadConfig, target):
        super().__init__()
        config.check()
        if config.block != "dflash":
            raise EagleError(f"a DFlash drafter needs head.block=dflash, not {config.block!r}")
        self.config = config
        layer_config = target.config.__class__.from_dict(target.config.to_dict())
        layer_config.num_hidden_layers = config.layers
        h = config.hidden_size
        eps = getattr(target.config, "rms_norm_eps", 1e-6)
        norm = type(target.model.model.norm)
        # Creation order fixes which random weights a seeded drafter gets: fc, hidden_norm, layers, norm.
        self.fc = nn.Linear(len(config.feature_layers) * h, h, bias=False)
        self.hidden_norm = norm(h, eps=eps)
        layer_class = type(target.model.model.layers[0])
        self.layers = nn.ModuleList(layer_class(layer_config, layer_idx=i) for i in range(config.layers))
        self.head_dim = self.layers[0].self_attn.head_dim
        for layer in self.layers:
            if not hasattr(layer.self_attn, "q_norm"):  # a Llama/Mistral layer: DFlash normalises q and k per head
                layer.self_attn.q_norm, layer.self_attn.k_norm = norm(self.head_dim, eps=eps), norm(self.head_dim, eps=eps)
        self.norm = norm(h, eps=eps)
        self.rotary = type(target.model.model.rotary_emb)(config=layer_config)
        self._target = (target,)  # a tuple keeps the target's modules out of this module's parameters
        vd = config.draft_vocab_size
        self.register_buffer("draft_vocab", torch.arange(vd, dtype=torch.long) if vd else None)
        self.to(device=target.device, dtype=target.dtype)

    @property
    def target(self):
        return self._target[0]

    @property
    def weight(self) -> torch.Tensor:
        """A weight of the drafter's own (its device and dtype are the drafter's)."""
        return self.fc.weight

    @property
    def block_size(self) -> int:
        return self.config.block_size

    def set_draft_vocab(self, token_ids: torch.Tensor) -> None:
        """Draft from these target ids only ([Vd] long, distinct); Vd must equal config.draft_vocab_size."""
        if token_ids.numel() != self.config.draft_vocab_size:
            raise EagleError(f"draft vocabulary has {token_ids.numel()} ids, expected {self.config.draft_vocab_size}")
        self.draft_vocab = token_ids.to(self.weight.device)

    def use_full_vocabulary(self) -> None:
        """Draft from the target's whole vocabulary instead of draft_vocab (infer.draft_vocab=full): the drafter
        borrows the target's LM head, so any of its rows can score a position."""
        self.draft_vocab = None
        self.config.draft_vocab_size = 0

    def context_kv(self, fused: torch.Tensor, positions: torch.Tensor) -> ContextKV:
        """Fused target states [B, L, k*H] of the tokens at positions [B, L] -> their ContextKV [N, B, kvh, L, D]:
        the context fc, hidden_norm make of them [B, L, H], and every layer's keys (k_norm, rotated) and values of
        it (decoding writes the same into its cache: block_runner.context_write)."""
        hidden = self.hidden_norm(self.fc(fused))
        cos, sin = self.rotary(hidden, positions)
        keys, values = [], []
        for layer in self.layers:
            attn = layer.self_attn
            keys.append(_rotate(attn.k_norm(_heads(attn.k_proj, hidden, self.head_dim)), cos, sin))
            values.append(_heads(attn.v_proj, hidden, self.head_dim))
        return ContextKV(torch.stack(keys), torch.stack(values))

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, context: ContextKV,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        """tokens, positions [B, Q] (Q = A blocks of T), context [N, B, kvh, L, D], mask bool [B or 1, 1, Q, L + Q]
        (block_mask; None: every query sees every key) -> the final norm's output [B, Q, H] (draft_logits scores it)."""
        x = cast(self.target.embed_tokens(tokens), self.weight.dtype)
        cos, sin = self.rotary(x, positions)
        for i, layer in enumerate(self.layers):
            x = self._layer(layer, x, cos, sin, context.keys[i], context.values[i], mask)
        return self.norm(x)

    def _layer(self, layer: nn.Module, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, keys: torch.Tensor,
               values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """One DFlash layer: x [B, Q, H]; keys, values [B, kvh, L, D] of the context -> [B, Q, H]."""
        attn, d = layer.self_attn, self.head_dim
        h = layer.input_layernorm(x)
        q = _rotate(attn.q_norm(_heads(attn.q_proj, h, d)), cos, sin)  # per-head norms: over D, the last dim
        k = _rotate(attn.k_norm(_heads(attn.k_proj, h, d)), cos, sin)
        v = _heads(attn.v_proj, h, d)
        keys, values = torch.cat((keys, k), dim=2), torch.cat((values, v), dim=2)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=d**-0.5,
                                             enable_gqa=q.shape[1] != keys.shape[1])
        x = x + attn.o_proj(out.transpose(1, 2).reshape(*x.shape[:2], -1))
        return x + layer.mlp(layer.post_attention_layernorm(x))

    def draft_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """forward's output [..., H] -> float32 logits [..., Vd] over the draft vocabulary (the target's frozen LM head
        rows of draft_vocab; all of it when there is none)."""
        weight = self.target.lm_head.weight.detach()
        if self.draft_vocab is not None:
            weight = weight[self.draft_vocab]
        return F.linear(hidden, cast(weight, hidden.dtype)).float()

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """forward's output [..., H] -> float32 logits [..., V]; -inf outside the draft vocabulary."""
        return full_vocabulary(self.draft_logits(hidden), self.draft_vocab, self.config.vocab_size)

    def block_inputs(self, bonus: torch.Tensor, start: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """bonus, start [B, A] (each block's first token and its position) -> tokens, positions [B, A*T]: the bonus
        token then T - 1 mask tokens, at start .. start + T - 1."""
        t = self.block_size
        tokens = torch.full((*bonus.shape, t), self.config.mask_token_id, dtype=torch.long, device=bonus.device)
        tokens[..., 0] = bonus
        offsets = torch.arange(t, device=start.device)
        return tokens.flatten(1), (start[..., None] + offsets).flatten(1)

    def draft_block(self, context: ContextKV, bonus: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """A decoding cycle's block forward, as this module defines it: context [N, B, kvh, L, D] (row b's first
        lengths[b] positions committed), bonus [B, 1] (each row's last committed token, at position lengths[b]),
        lengths [B, 1] long -> float32 draft logits [B, T - 1, Vd] of the tokens at positions lengths + 1 ..
        lengths + T - 1 (draft_vocab maps a column to its target id). Decoding runs the same function in fewer ops
        over its context cache (block_runner.BlockRunner.draft)."""
        tokens, positions = self.block_inputs(bonus, lengths)
        c = self.config
        mask = block_mask(lengths, context.length, c.block_size, c.block_attention == "causal", c.sliding_window)
        return self.draft_logits(self(tokens, positions, context, mask)[:, 1:])


def random_dflash_head(target, mask_token_id: int, seed: int = 0, layers: int = 1, block_size: int = 8,
                       feature_layers: list[int] | None = None, draft_vocab: torch.Tensor | None = None,
                       sliding_window: int = 0, block_attention: str = "bidirectional") -> DFlashHead:
    """An untrained DFlash drafter (deterministic for a seed), fused over `feature_layers` (default: EAGLE-3's
    low/middle/high layers, speculators' default aux layers); `draft_vocab` ([Vd] distinct target ids) restricts
    its drafts."""
    config = DraftHeadConfig.of_target(target)
    config.block, config.layers, config.block_size, config.mask_token_id = "dflash", layers, block_size, mask_token_id
    config.feature_layers = list(feature_layers or eagle3_layers(target.config.num_hidden_layers))
    config.sliding_window, config.block_attention = sliding_window, block_attention
    config.draft_vocab_size = 0 if draft_vocab is None else draft_vocab.numel()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        head = DFlashHead(config, target).eval()
    if draft_vocab is not None:
        head.set_draft_vocab(draft_vocab)
    return head
