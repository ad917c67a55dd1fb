"""The block drafters' training objective and held-out acceptance (head.block=dflash), as speculators and SpecForge
train DFlash.

A batch (eagle_train.training.objective.Batch) is B rows right-padded to T tokens with the target's fused states (inputs)
and post-norm last hidden states (hidden). Each step samples up to `anchors` positions a row among its loss
positions (a block of T_b tokens must fit in the row: p + T_b <= length); the block at anchor p is [x_p, mask x
(T_b - 1)] at positions p .. p + T_b - 1, sees the row's context positions < p, and its slot j >= 1 is trained on
the target's distribution after position p + j - 1 (its next token), over the draft vocabulary, where p + j is a loss
position. All of a batch's blocks run in one forward (DFlashHead.forward with block_mask).

Loss: the KL divergence from the target's distribution to the drafter's at each counted slot (speculators' kl_div;
cross-entropy less the target's entropy: the same gradient), weighted by slot (`weights`: DFlash's
w_j = exp(-(j - 1) / gamma), or D-PACE's detached acceptance weights), summed and divided by the counted slots
(speculators' normalisation; tests/test_block_objective.py compares both with speculators' functions).

Held-out acceptance (`block_acceptance`): at evenly spaced anchors, the drafter's greedy block against the target's
argmax after each position: the longest matching prefix, plus the bonus token.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from eagle_infer.errors import EagleError
from eagle_infer.head.dflash_head import block_mask

from ..features.shards import Sample
from .objective import Batch, collate

WEIGHTINGS = ("decay", "dpace")


@dataclass
class BlockObjective:
    """anchors: blocks sampled a row each step; weighting: "decay" (exp(-(j - 1) / gamma)) or "dpace" (D-PACE,
    smoothed by dpace_alpha)."""

    anchors: int = 512
    gamma: float = 7.0
    weighting: str = "decay"
    dpace_alpha: float = 0.5

    def __post_init__(self):
        if self.weighting not in WEIGHTINGS:
            raise EagleError(f"unknown train.position_weights {self.weighting!r}: expected one of {', '.join(WEIGHTINGS)}")
        if self.anchors < 1 or not self.gamma > 0 or not 0 <= self.dpace_alpha <= 1:
            raise EagleError(f"train.anchors {self.anchors}, train.decay_gamma {self.gamma}, train.dpace_alpha "
                             f"{self.dpace_alpha}: expected anchors >= 1, gamma > 0 and alpha in [0, 1]")


def decay_weights(block: int, gamma: float) -> torch.Tensor:
    """[block]: slot 0 (the bonus token) 0, slot j >= 1 exp(-(j - 1) / gamma)."""
    j = torch.arange(block, dtype=torch.float32)
    return torch.exp(-(j - 1).clamp(min=0) / gamma) * (j > 0)


def dpace_weights(loss: torch.Tensor, counted: torch.Tensor, alpha: float) -> torch.Tensor:
    """D-PACE: loss, counted [..., block] (a slot's loss, and 0/1 whether it counts) -> detached weights [..., block]:
    slot j's weight is the expected number of accepted slots from j on, sum_{i >= j} prod_{k <= i} c_k, with c_k the
    slot's smoothed confidence (1 - alpha) exp(-loss_k) + alpha (1 at slots that do not count)."""
    with torch.no_grad():
        smooth = torch.where(counted > 0, (1 - alpha) * torch.exp(-loss.float()) + alpha, torch.ones_like(counted))
        prefix = torch.cumprod(smooth, dim=-1) * counted
        return prefix.flip(-1).cumsum(-1).flip(-1) * counted


def sample_anchors(loss_mask: torch.Tensor, lengths: torch.Tensor, count: int, block: int,
                   generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """loss_mask [B, T], lengths [B] -> (anchors [B, A] long, valid [B, A] bool), A = min(count, most valid in a
    row): each row's anchors drawn without replacement among its loss positions p with p + block <= length, sorted
    (a row with fewer has the rest invalid, at 0)."""
    t = loss_mask.shape[1]
    allowed = (loss_mask > 0) & (torch.arange(t, device=loss_mask.device) + block <= lengths.to(loss_mask.device)[:, None])
    a = max(1, min(count, int(allowed.sum(1).max())))
    keys = torch.rand(allowed.shape, generator=generator).to(loss_mask.device).masked_fill(~allowed, 2.0)
    chosen = keys.topk(a, dim=1, largest=False).indices  # random order among the allowed, then the rest
    valid = allowed.gather(1, chosen)
    anchors = torch.where(valid, chosen, torch.zeros_like(chosen))
    order = torch.where(valid, anchors, torch.full_like(anchors, t)).sort(dim=1).indices
    return anchors.gather(1, order), valid.gather(1, order)


def block_logits(head, batch: Batch, anchors: torch.Tensor) -> torch.Tensor:
    """The drafter's float32 logits [B, A, T_b, Vd] of the block at each anchor [B, A] of the batch's rows."""
    b, t = batch.input_ids.shape
    c = head.config
    context = head.context_kv(batch.inputs, torch.arange(t, device=anchors.device).expand(b, -1))
    tokens, positions = head.block_inputs(batch.input_ids.gather(1, anchors), anchors)
    mask = block_mask(anchors, t, c.block_size, c.block_attention == "causal", c.sliding_window)
    return head.draft_logits(head(tokens, positions, context, mask)).view(b, anchors.shape[1], c.block_size, -1)


def slot_positions(anchors: torch.Tensor, block: int, length: int) -> torch.Tensor:
    """anchors [B, A] -> [B, A, block]: each slot's position (capped at length - 1: only counted slots are read)."""
    return (anchors[..., None] + torch.arange(block, device=anchors.device)).clamp(max=length - 1)


def block_loss(logits: torch.Tensor, target_p: torch.Tensor, counted: torch.Tensor,
               objective: BlockObjective) -> torch.Tensor:
    """logits [..., block, Vd], the target's distribution target_p [..., block, Vd], counted [..., block] 0/1 -> the
    weighted KL divergence summed over counted slots, divided by their number."""
    kl = (target_p * (target_p.clamp_min(1e-30).log() - logits.log_softmax(-1))).sum(-1)  # [..., block]
    if objective.weighting == "decay":
        weights = decay_weights(logits.shape[-2], objective.gamma).to(kl.device)
    else:
        weights = dpace_weights(kl, counted, objective.dpace_alpha)
    return (kl * weights * counted).sum() / counted.sum().clamp(min=1.0)


def block_losses(head, batch: Batch, objective: BlockObjective, accuracy: bool = False,
                 generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """The module docstring's loss over one batch ("loss", "tokens": counted slots); accuracy=True adds top1_j, the
    share of counted slots j whose draft argmax is the target's over the draft vocabulary. Anchors come from torch's
    global generator unless `generator` is given."""
    block = head.config.block_size
    b, t = batch.input_ids.shape
    anchors, valid = sample_anchors(batch.loss_mask, batch.lengths, objective.anchors, block, generator)
    logits = block_logits(head, batch, anchors)  # [B, A, block, Vd]
    where = slot_positions(anchors, block, t)
    previous = (where - 1).clamp(min=0)
    with torch.no_grad():
        goal = batch.hidden.gather(1, previous.flatten(1)[..., None].expand(-1, -1, batch.hidden.shape[-1]))
        target_logits = head.draft_logits(goal).view(logits.shape)
        target_p = target_logits.softmax(-1)
    counted = (valid[..., None] & (torch.arange(block, device=where.device) > 0)
               & (batch.loss_mask.gather(1, where.flatten(1)).view(where.shape) > 0)).float()
    out = {"loss": block_loss(logits, target_p, counted, objective), "tokens": counted.sum().detach()}
    if accuracy:
        with torch.no_grad():
            hits = (logits.argmax(-1) == target_logits.argmax(-1)).float() * counted
            for j in range(1, block):
                n = counted[..., j].sum()
                out[f"top1_{j}"] = hits[..., j].sum() / n if n else torch.tensor(float("nan"))
    return out


@torch.no_grad()
def block_acceptance(head, sample: Sample, max_anchors: int = 64, dtype=torch.float32) -> tuple[int, int]:
    """Simulated greedy acceptance on one held-out conversation: (anchors, their accepted lengths summed, bonus
    included). At up to max_anchors evenly spaced loss positions p (with p + block <= T), the block's greedy drafts
    are the draft argmax's target ids at slots 1..; draft j is accepted when it and every one before it equal the
    target's argmax over its whole vocabulary after position p + j - 1. Approximation: the context is the data's
    states, which are the decoded tokens' when the data was generated by the target (regenerate=true)."""
    block, t = head.config.block_size, sample.input_ids.numel()
    device = head.weight.device
    candidates = [p for p in range(t - block + 1) if sample.loss_mask[p] > 0]
    starts = candidates[:: max(1, math.ceil(len(candidates) / max_anchors))][:max_anchors]
    if not starts:
        return 0, 0
    batch = collate([sample], dtype, device, fused=True)
    anchors = torch.tensor([starts], device=device)
    drafts = block_logits(head, batch, anchors)[0, :, 1:].argmax(-1)  # [A, block - 1] draft-vocabulary columns
    if head.draft_vocab is not None:
        drafts = head.draft_vocab[drafts]
    top = head.target.lm_head(batch.hidden[0]).argmax(-1)  # [T]: the target's choice after each position
    wanted = top[slot_positions(anchors[0], block, t)[:, :-1]]  # after positions p .. p + block - 2
    accepted = (drafts == wanted).long().cumprod(-1).sum(-1)
    return len(starts), int(accepted.sum()) + len(starts)


def acceptance_of_chains(tried: list[int], hits: list[int]) -> float:
    """An EAGLE head's simulated acceptance length from its chain statistics (objective.chain_acceptance: chains
    tried and accepted at each depth, a depth tried only after every earlier one matched): 1 + the mean accepted
    depth, sum_k hits_k / tried_0 (NaN without chains)."""
    return 1.0 + sum(hits) / tried[0] if tried and tried[0] else float("nan")
