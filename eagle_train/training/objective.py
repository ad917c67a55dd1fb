"""The EAGLE training objective and held-out measures, shared by training, validation and tests.

A batch is B conversations right-padded to T tokens: input_ids [B, T], loss_mask [B, T], hidden [B, T, H] (the
target's post-norm last hidden states: every head's regression and distillation target) and inputs [B, T, F] (what
the head reads: hidden itself, or a fused head's k*H layer outputs). Head pair i = (f_i, x_{i+shift}) at position i
predicts f_{i+1}, whose LM head predicts x_{i+2}; pair i counts in the loss when x_{i+2} is an assistant token
(loss_mask[i + 2] = 1), so i runs over 0..T-3.

Training-time test (EAGLE-3, `ttt_steps` = K): after step 0 on the real pairs, step k feeds pair i the head's own
step-(k-1) output at i - 1 with the data's token x_{i+shift}: it is depth k+1 of a draft chain started from the
real pair s = i - k, so it attends the real pairs <= s and the chain's earlier steps (step j at position s + j)
only — the pattern drafting uses (eagle_infer.head.chain_attention computes it without materialising it). Keys and
values of earlier steps stay in a cache that gradients flow through.
Step k's loss is weighted decay^k and counts positions i >= k. This is the unrolling of EAGLE-3's reference trainer
relabelled (it keeps a chain at its start s and shifts the tokens and targets left each step); on the same inputs
both give the same numbers (tests/test_eagle3_reference.py).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from eagle_infer.errors import EagleError
from eagle_infer.models.masks import additive_mask, causal_mask

from ..features.shards import Sample


@dataclass
class Batch:
    input_ids: torch.Tensor  # [B, T] long
    loss_mask: torch.Tensor  # [B, T] float, 0 on padding
    hidden: torch.Tensor  # [B, T, H] post-norm last hidden states
    inputs: torch.Tensor  # [B, T, F] the head's input features (hidden, or fused layer outputs)
    lengths: torch.Tensor  # [B] long: each row's real tokens (the rest is padding)
    target_top: torch.Tensor | None = None  # [B, T] long: the target's argmax after each position, when precomputed


@dataclass
class Objective:
    """The loss: step weights decay^k over steps 0..ttt_steps, each w_reg * SmoothL1(feature) + w_cls * CE.

    per: what each step's sum is divided by, "loss_token" (its loss tokens: EAGLE-1/2's reference) or "position"
    (every position of the padded batch, B x T: EAGLE-3's reference trainer and SpecForge). draftable_only: count
    only positions whose target argmax is in the draft vocabulary (EAGLE-3's reference); the others still count in
    the divisor and as misses in top-1. compiled: each step's loss terms run as one torch.compile graph (dynamic
    shapes: one graph for every batch). unpadded: run the head over the rows' real tokens packed end to end
    (packed_outputs) or over the padded batch (ttt_outputs), equal to rounding; None picks by device: packed on a
    CPU, where padding costs compute, padded elsewhere, where a GPU pays per kernel launch (packed attention is one
    call per row), not for padding."""

    w_cls: float = 0.1
    w_reg: float = 1.0  # EAGLE-1/2 keep the feature regression; EAGLE-3 drops it (0)
    ttt_steps: int = 0  # extra unrolled draft steps (training-time test); 0 = the EAGLE-1/2 objective
    decay: float = 0.8
    per: str = "loss_token"
    draftable_only: bool = False
    unpadded: bool | None = None
    compiled: bool = False  # each step's loss through torch.compile (train.compile)

    def __post_init__(self):
        if self.per not in ("loss_token", "position"):
            raise EagleError(f"unknown loss normalisation {self.per!r}: expected loss_token or position")


def collate(samples: list[Sample], dtype: torch.dtype, device, fused: bool = False) -> Batch:
    """Right-pad samples into a Batch; fused=True takes each sample's aux features as the head's inputs."""
    longest = max(s.input_ids.numel() for s in samples)
    b, h = len(samples), samples[0].hidden.shape[-1]
    if fused and any(s.aux is None for s in samples):
        raise EagleError("a fused head needs features made with featurize.features=fused (these hold no aux layers)")
    width = samples[0].aux.shape[-1] if fused else h
    ids = torch.zeros(b, longest, dtype=torch.long)
    mask = torch.zeros(b, longest)
    hidden = torch.zeros(b, longest, h, dtype=dtype)
    inputs = torch.zeros(b, longest, width, dtype=dtype) if fused else hidden
    for row, s in enumerate(samples):
        n = s.input_ids.numel()
        ids[row, :n], mask[row, :n], hidden[row, :n] = s.input_ids, s.loss_mask, s.hidden.to(dtype)
        if fused:
            inputs[row, :n] = s.aux.to(dtype)
    hidden = hidden.to(device)
    lengths = torch.tensor([s.input_ids.numel() for s in samples], dtype=torch.long)
    top = None
    if all(s.target_top is not None for s in samples):
        top = torch.zeros(b, longest, dtype=torch.long)
        for row, s in enumerate(samples):
            top[row, : s.input_ids.numel()] = s.target_top
        top = top.to(device)
    return Batch(ids.to(device), mask.to(device), hidden, inputs.to(device) if fused else hidden, lengths, top)


@torch.no_grad()
def with_target_top(samples: list[Sample], target, autocast: bool, progress: bool = True,
                    chunk: int = 4096, cache: Path | None = None) -> list[Sample]:
    """The samples with target_top set: the target's LM-head argmax over the full vocabulary after every position,
    computed once (in chunks of `chunk` positions, under bfloat16 autocast when training uses it) instead of in
    every epoch's batches, where draftable_only needs it (a full-vocabulary product per batch).

    With `cache` (a safetensors path in the run directory) a resumed run reads what its first run computed instead
    of computing it again; the file holds a fingerprint of the features, the LM head's weights and `autocast`, and
    one that does not match them (or cannot be read) is computed again and replaced."""
    from tqdm import tqdm

    device = target.lm_head.weight.device
    key = _top_fingerprint(samples, target.lm_head.weight, autocast)
    if cache is not None and cache.exists():
        try:
            stored = load_file(str(cache))
        except (SafetensorError, OSError):
            stored = {}  # unreadable: computed again and replaced, like a stale one
        if "fingerprint" in stored and bytes(stored["fingerprint"].tolist()) == key:
            tops = stored["target_top"].long().split([s.input_ids.numel() for s in samples])
            return [dataclasses.replace(s, target_top=t) for s, t in zip(samples, tops)]
    out = []
    for s in tqdm(samples, desc="target argmax", unit="conv", mininterval=10, disable=not progress):
        tops = []
        for start in range(0, s.hidden.shape[0], chunk):
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                logits = target.lm_head(s.hidden[start : start + chunk].to(device, target.lm_head.weight.dtype))
            tops.append(logits.argmax(-1).cpu())
        out.append(dataclasses.replace(s, target_top=torch.cat(tops)))
    if cache is not None:
        partial = cache.with_name(cache.name + ".partial")
        save_file({"target_top": torch.cat([s.target_top for s in out]).int(),
                   "fingerprint": torch.tensor(list(key), dtype=torch.uint8)}, str(partial))
        partial.replace(cache)
    return out


def _top_fingerprint(samples: list[Sample], weight: torch.Tensor, autocast: bool) -> bytes:
    """sha256 over every sample's token ids (with its length) and first and last hidden state, the LM head's weight
    bytes and the autocast flag."""
    digest = hashlib.sha256(b"autocast" if autocast else b"float")
    digest.update(weight.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    for s in samples:
        digest.update(s.input_ids.numel().to_bytes(8, "little"))
        digest.update(s.input_ids.cpu().long().numpy().tobytes())
        digest.update(s.hidden[[0, -1]].cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.digest()


def head_inputs(batch: Batch, shift: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(features [B, T-2, F], tokens [B, T-2], positions [B, T-2], weight [B, T-2]) for pairs i = 0..T-3."""
    t = batch.input_ids.shape[1]
    feats = batch.inputs[:, : t - 2]
    tokens = batch.input_ids[:, shift : shift + t - 2]
    positions = torch.arange(t - 2, device=feats.device).expand(feats.shape[0], -1)
    return feats, tokens, positions, batch.loss_mask[:, 2:]


def _step_loss(head, pred, goal, target_p, counted, divisor: float, w_reg: float, w_cls: float):
    """pred, goal [N, H] at the batch's loss positions; target_p [N, Vd] the target's distribution there; counted [N]
    float 0/1: the positions whose terms this step sums (multiplied, not selected, so no position's row of target_p
    is copied and no count waits for the device); each sum is divided by `divisor`."""
    reg = (F.smooth_l1_loss(pred.float(), goal.float(), reduction="none").mean(-1) * counted).sum() / divisor
    cls = (-(target_p * head.draft_logits(pred).log_softmax(-1)).sum(-1) * counted).sum() / divisor
    return w_reg * reg + w_cls * cls, reg, cls


def _compile_settings() -> None:
    """Process-wide dynamo settings for train.compile: a compile that fails (no C++ compiler) runs eagerly after
    dynamo's warning, and one graph per training-time-test step, for training and held-out scoring, fits under the
    recompile limit (dynamo's default, 8, would quietly run the rest eagerly)."""
    torch._dynamo.config.suppress_errors = True
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)


@functools.cache
def compiled_step_loss():
    """_step_loss compiled once per process (dynamic shapes, so batches of any size share its graphs)."""
    _compile_settings()
    return torch.compile(_step_loss, dynamic=True)


def compile_layers(head) -> None:
    """train.compile: each decoder layer of the head runs through torch.compile (dynamic shapes; the training-time
    test's attention stays eager between its graphs, eagle_infer.head.chain_attention), in place, so parameter names and
    checkpoints are unchanged."""
    _compile_settings()
    for layer in head.layers:
        layer.compile(dynamic=True)


def ttt_outputs(head, feats, tokens, positions, steps: int,
                segments: tuple[int, ...] | None = None) -> list[torch.Tensor]:
    """The head's predicted features [B, n, H] at steps 0..steps (see the module docstring): step 0 on the real
    pairs, step k on step k-1's outputs shifted one position right. Gradients flow through every step. segments:
    the lengths of rows packed end to end along n (B = 1, packed_outputs): each is its own sequence, attention
    and shift alike."""
    from transformers.cache_utils import DynamicCache

    n = feats.shape[1]
    cache = DynamicCache() if steps else None
    mask = causal_mask(0, n, feats.dtype, feats.device) if segments is None else None
    outputs = [head(feats, tokens, positions, cache, mask, segments=segments)]
    # position i gets step k-1's output at i - 1; a sequence's first position its own (it starts no chain)
    prior = torch.arange(-1, n - 1, device=feats.device)
    starts = torch.tensor([0, *(segments or ())[:-1]], device=feats.device).cumsum(0)
    prior[starts] = starts
    for k in range(1, min(steps, n - 1) + 1):
        outputs.append(head(outputs[-1].index_select(1, prior), tokens, positions, cache, chain_step=k,
                            segments=segments))
    return outputs


def packed_outputs(head, feats, tokens, positions, lengths: list[int], steps: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    """ttt_outputs over each row's own pairs only (the first length - 2), packed end to end into one sequence of N
    pairs with attention kept within each row (chain_attention's segments): every layer runs once a step over real
    pairs, never over padding. Every attention is causal, so at every real position the outputs are the padded
    batch's (to rounding). Returns, per step 0..min(steps, n - 1), [1, N, H], and [B * n] long: the packed position
    of each pair of the padded batch (flattened; 0 at padding)."""
    b, n = tokens.shape
    real = torch.arange(n)[None] < (torch.tensor(lengths) - 2)[:, None]  # [B, n]
    flat = real.flatten().nonzero()[:, 0].to(feats.device)
    segments = tuple(int(m) for m in real.sum(1).tolist() if m > 0)
    packed = torch.zeros(b * n, dtype=torch.long, device=feats.device)
    packed[flat] = torch.arange(flat.numel(), device=feats.device)
    outputs = ttt_outputs(head, feats.flatten(0, 1)[flat][None], tokens.flatten()[flat][None],
                          positions.flatten()[flat][None], min(steps, n - 1), segments)
    return outputs, packed


def losses(head, batch: Batch, noise: float = 0.0, objective: Objective = Objective(), accuracy: bool = False) -> dict[str, torch.Tensor]:
    """The objective over loss tokens, summed over steps 0..ttt_steps with weights decay^k.

    Both distributions live on the head's draft vocabulary (the target's renormalised there when it is a subset).
    noise: half-width of uniform noise added to the real input features (training only). reg_loss / cls_loss are
    step 0's (comparable across objectives); loss_k is step k's unweighted term. accuracy=True adds top1_k, step k's
    agreement of the head's argmax with the target's over the full vocabulary at its loss positions (top1 and top3:
    step 0's); it and draftable_only cost a full LM-head product, unless the batch holds target_top.
    """
    feats, tokens, positions, weight = head_inputs(batch, head.config.token_shift)
    if noise > 0:
        feats = feats + (torch.rand_like(feats) * 2 - 1) * noise
    goal_all = batch.hidden[:, 1:-1]
    unpadded = feats.device.type == "cpu" if objective.unpadded is None else objective.unpadded
    keep = weight > 0
    where = keep.flatten().nonzero()[:, 0]  # the loss positions in the flattened [B, n]: the batch's one nonzero
    if unpadded:
        outputs, packed = packed_outputs(head, feats, tokens, positions, batch.lengths.tolist(), objective.ttt_steps)
        rows = packed[where]  # the loss positions in the packed sequence
    else:
        outputs, rows = ttt_outputs(head, feats, tokens, positions, objective.ttt_steps), where
    goal0 = goal_all.flatten(0, 1)[where].to(outputs[0].dtype)
    with torch.no_grad():  # the target's distribution at every loss position, shared by all steps
        target_p = head.target_draft_logits(goal0).softmax(-1)
        if batch.target_top is not None:
            target_top = batch.target_top[:, 1:-1].flatten()[where]
        else:
            target_top = head.target.lm_head(goal0).argmax(-1) if accuracy or objective.draftable_only else None
    draftable = (torch.isin(target_top, head.draft_vocab) if objective.draftable_only and head.draft_vocab is not None
                 else torch.ones_like(goal0[:, 0], dtype=torch.bool))
    column = where % keep.shape[1]  # step k predicts only at positions >= k
    # [n]: how many loss positions step k counts (column >= k); with the nonzero, the batch's only waits for the
    # device (steps select their positions by multiplying, not indexing)
    per_step = torch.bincount(column, minlength=keep.shape[1]).flip(0).cumsum(0).flip(0).tolist()
    out = {"tokens": torch.tensor(float(len(where)))}
    total = 0.0
    for k, predicted in enumerate(outputs):
        at = column >= k
        divisor = float(batch.input_ids.numel()) if objective.per == "position" else max(float(per_step[k]), 1.0)
        pred = predicted.flatten(0, 1)[rows]
        step_loss = compiled_step_loss() if objective.compiled else _step_loss
        step, reg, cls = step_loss(head, pred, goal0, target_p, (at & draftable).to(target_p.dtype), divisor,
                                   objective.w_reg, objective.w_cls)
        total = total + objective.decay**k * step
        if k == 0:
            out.update(reg_loss=reg.detach(), cls_loss=cls.detach())
        else:
            out[f"loss_{k}"] = step.detach()
        if accuracy:
            with torch.no_grad():
                top3 = head.logits(pred.detach()).topk(3, dim=-1).indices

            def share(hits: torch.Tensor) -> torch.Tensor:  # of step k's loss positions; NaN when it has none
                return (hits & at).sum() / per_step[k] if per_step[k] else torch.tensor(float("nan"))

            out[f"top1_{k}" if k else "top1"] = share(top3[:, 0] == target_top)
            if k == 0:
                out["top3"] = share((top3 == target_top[:, None]).any(-1))
    out["loss"] = total
    return out


def frequent_tokens(samples: list[Sample], size: int) -> torch.Tensor:
    """The `size` token ids most frequent among the tokens the head learns to predict (ties: lower id first)."""
    vocab = max(int(s.input_ids.max()) for s in samples) + 1
    counts = torch.zeros(max(vocab, size), dtype=torch.long)
    for s in samples:
        counts += torch.bincount(s.input_ids[2:][s.loss_mask[2:] > 0], minlength=counts.numel())
    order = sorted(range(counts.numel()), key=lambda i: (-int(counts[i]), i))
    return torch.tensor(sorted(order[:size]), dtype=torch.long)


@torch.no_grad()
def chain_acceptance(head, sample: Sample, steps: int = 7, max_starts: int = 64, dtype=torch.float32) -> list[tuple[int, int]]:
    """Simulated chain drafting on one conversation: (tried, accepted) per chain position 0..steps-1.

    From start s (a pair whose predicted token is an assistant token), step 0 is the head's token from the real
    pair s; step k feeds the head its own predicted feature from step k-1 with the data's next token, attending the
    real pairs <= s and its own earlier steps, exactly as drafting does. A step is tried only when all earlier steps
    matched the target's argmax. Approximation: the tokens fed are the data's, which equal the accepted drafts only
    when the data was generated by the target (regenerate=true).
    """
    t = sample.input_ids.numel()
    device = next(head.parameters()).device
    ids, hidden = sample.input_ids.to(device), sample.hidden.to(device, dtype)
    # The real pairs' features as the head's layers see them (a fused head projects its k*H inputs first), so its
    # own predicted features [H] can sit beside them in one forward, as in drafting.
    if head.config.fused:
        if sample.aux is None:
            raise EagleError("a fused head needs features made with featurize.features=fused (these hold no aux layers)")
        real = head.fuse(sample.aux.to(device, dtype))
    else:
        real = hidden
    shift = head.config.token_shift
    n_pairs = t - 2
    candidates = [s for s in range(n_pairs) if sample.loss_mask[s + 2] > 0]
    starts = candidates[:: max(1, len(candidates) // max_starts)][:max_starts]
    target_top = head.target.lm_head(hidden).argmax(-1)  # [T]: target's choice after each position
    stats = [[0, 0] for _ in range(steps)]
    alive = {s: True for s in starts}
    prev = {}  # start -> predicted feature of the last step
    node_feats, node_tokens, node_pos, node_start = [], [], [], []
    for k in range(steps):
        live = [s for s in starts if alive[s] and s + k + 2 < t]
        if not live:
            break
        if k > 0:
            for s in live:
                node_feats.append(prev[s])
                node_tokens.append(ids[s + k + shift])
                node_pos.append(s + k)
                node_start.append(s)
        m = len(node_feats)
        feats = torch.cat([real[:n_pairs]] + ([torch.stack(node_feats)] if m else []))
        tokens = torch.cat([ids[shift : shift + n_pairs]] + ([torch.stack(node_tokens)] if m else []))
        positions = torch.cat([torch.arange(n_pairs, device=device), torch.tensor(node_pos, dtype=torch.long, device=device)])
        allowed = torch.ones(n_pairs + m, n_pairs + m, dtype=torch.bool, device=device).tril()
        for j, (s, p) in enumerate(zip(node_start, node_pos)):
            row = n_pairs + j
            allowed[row] = False
            allowed[row, : s + 1] = True
            same = [n_pairs + i for i in range(j + 1) if node_start[i] == s]
            allowed[row, same] = True
        out = head(feats[None], tokens[None], positions[None], mask=additive_mask(allowed, 0, feats.dtype, device))[0]
        for s in live:
            j = s if k == 0 else n_pairs + max(i for i in range(m) if node_start[i] == s)
            guess = int(head.logits(out[j]).argmax())
            stats[k][0] += 1
            hit = guess == int(target_top[s + k + 1])
            stats[k][1] += int(hit)
            alive[s] = hit
            prev[s] = out[j]
    return [tuple(x) for x in stats]
