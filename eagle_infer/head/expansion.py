"""What a head's drafting step computes from its predictions, in the same call as the step (so that it compiles
with it where the step is compiled): an EAGLE-2 level's expansion, the k best children of each of k expanded nodes
and which k of them expand next. Tensor ops and static shapes only (tests/test_compiled.py compiles them whole)."""
from __future__ import annotations

from typing import Callable

import torch

from .head_runner import HeadStep, step_logits


def top_tokens(logp: torch.Tensor, k: int, order: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The k best of draft-vocabulary log-probs [..., Vd]: (values [..., k], target token ids [..., k]); order: the
    draft vocabulary's target ids then every other id (HeadRunner.vocab_order; None: the whole vocabulary). With
    k > Vd the missing candidates are ids outside the draft vocabulary at -inf (probability 0), so tree shapes do
    not depend on the head's vocabulary."""
    if k > logp.shape[-1]:
        logp = torch.cat([logp, logp.new_full((*logp.shape[:-1], k - logp.shape[-1]), float("-inf"))], -1)
    values, index = logp.topk(k, dim=-1)
    return values, (index if order is None else order[index])


def by_value(values: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
    """EAGLE-2's expansion key: a node's path log-value."""
    return values


def by_confidence(values: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
    """The ablation's expansion key (EAGLE-2 Table 3): a node's own log-probability."""
    return own


def expand_level(logp: torch.Tensor, parent_values: torch.Tensor, k: int, order: torch.Tensor | None,
                 key: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = by_value,
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One EAGLE-2 level's bookkeeping, static shapes and tensor ops only (compiled whole in tests/test_compiled.py):
    the k best children of each of k expanded nodes. logp [B, k, Vd]: their children's log-probs; parent_values
    [B, k]: their path log-values. -> the children's target ids, path values and own log-probs [B, k*k] (parent
    by parent), and which k of them expand next [B, k] (best by `key` of (values, own); ties: earlier)."""
    return expand_children(*top_tokens(logp, k, order), parent_values, k, key)


def expand_children(own: torch.Tensor, tokens: torch.Tensor, parent_values: torch.Tensor, k: int,
                    key: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = by_value,
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """expand_level given the k expanded nodes' k best children, own log-probs and target ids [B, k, k], and their
    path log-values parent_values [B, k] -> the same four tensors (a block drafter's positions give every node of a
    level the same children: trees.block_drafter)."""
    own = own.flatten(1)
    values = parent_values.repeat_interleave(k, dim=1) + own  # (each parent's value beside its k children's)
    pick = torch.sort(key(values, own), dim=1, descending=True, stable=True).indices[:, :k]
    return tokens.flatten(1), values, own, pick


def expanded(step: HeadStep, out: torch.Tensor, parent_values: torch.Tensor, k: int, order: torch.Tensor | None,
             key: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """A fed EAGLE-2 level in the head's call (TreeFeeder.feed_below's `after`, so that it compiles with the head's
    step where the step is compiled): the predicted features [B, k, H], then expand_level over their children's
    draft log-probs."""
    return (out,) + expand_level(torch.log_softmax(step_logits(step, out), dim=-1), parent_values, k, order, key)


EXPAND_BY = {"value": by_value, "confidence": by_confidence}  # the settings' expand_by
