"""Verification: which draft nodes the target accepts, and the token it emits after them.

Terms (as in vLLM's rejection sampler): an *accepted* token is a draft node the target keeps; the *bonus* token is
the one the target emits after the last accepted node (its own choice at a leaf, or the *recovered* token drawn
from the residual distribution when every candidate child was rejected). A cycle always emits accepted + 1 tokens.

Greedy: follow the child equal to the target's argmax. Sampling: candidates are chosen deterministically (top-k),
so at a node the children x1, x2, ... are tried in order: accept x with probability p(x) under the current p; on
rejection set p(x) = 0 and renormalise; if all are rejected the bonus is drawn from what is left. The emitted token
is then distributed exactly as p, whatever the draft proposed (EAGLE appendix A.2 / SpecInfer); `sampled_choices`
and `follow` do this for a whole batch by tensor ops (sampled_choices' docstring says why one draw per node is the
same thing; the per-node loop is tests/oracles.verify_sampling, which the exact-enumeration tests hold them to).
A chain whose tokens the drafter *sampled* from its own distributions q (a block drafter at temperature > 0) is
verified by speculative sampling's rejection instead: keep x with probability min(1, p(x) / q(x)), else draw from
max(0, p - q) renormalised (`proposal_choices`), which `follow` walks the same way.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import constants
from ..config import SamplingParams
from ..draws import inverse_cdf, uniforms
from ..trees.tree import TreeBatch


def target_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Float logits [..., V] -> the target's sampling distribution [..., V] after temperature, top-k, top-p."""
    x = logits.float() / params.temperature
    if params.sampling_top_k > 0:
        kth = x.topk(min(params.sampling_top_k, x.shape[-1]), dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    if params.top_p < 1.0:
        x = x.masked_fill(x < nucleus_floor(x, params.top_p), float("-inf"))
    return x.softmax(dim=-1)


NUCLEUS_WINDOWS = (256, 4096)  # how many of the most likely tokens a CPU ranks first for top-p (nucleus_floor)


def nucleus_floor(x: torch.Tensor, top_p: float) -> torch.Tensor:
    """Logits [..., V] -> [..., 1]: the lowest logit of the nucleus, the shortest run of most likely tokens whose
    probability reaches top_p (a token is in it while the tokens ranked above it hold less than top_p); every token
    at or above the floor is kept, so tokens tied at the boundary stay or go together, whatever order a sort gives.
    Ranking the whole vocabulary costs a CPU ~1-3 ms a row (49,152 ids, much of a sampled step there): on a CPU the
    rows are ranked among their NUCLEUS_WINDOWS[0] most likely tokens first, the rows whose nucleus is longer among
    the next window's, and only the rest over the whole vocabulary; a GPU sorts every row at once."""
    lse = x.logsumexp(dim=-1, keepdim=True)

    def floor(ranked: torch.Tensor, lse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p = (ranked - lse).exp()
        inside = (p.cumsum(dim=-1) - p) < top_p  # a prefix: the first token is always inside
        return ranked.gather(-1, inside.sum(-1, keepdim=True) - 1), inside[..., -1]

    vocab = x.shape[-1]
    windows = [w for w in NUCLEUS_WINDOWS if w < vocab] if x.device.type == "cpu" else []
    if not windows:
        return floor(x.sort(dim=-1, descending=True).values, lse)[0]
    result, longer = floor(x.topk(windows[0], dim=-1).values, lse)
    for window in windows[1:] + [vocab]:
        if not longer.any():
            break
        rows = longer.nonzero(as_tuple=True)
        ranked = x[rows].sort(dim=-1, descending=True).values if window == vocab else x[rows].topk(window, dim=-1).values
        result[rows], longer[rows] = floor(ranked, lse[rows])
    return result


def argmax(logits: torch.Tensor) -> torch.Tensor:
    """The first maximal index along the last dimension. torch's CPU argmax over [B, T, V] logits is ~10x slower than
    max (11 ms vs 0.8 ms for 33 x 49152, torch 2.13), and ties resolve the same way (the first maximal index)."""
    return logits.max(dim=-1).indices


def sample_device(logits: torch.Tensor, params: SamplingParams, generators: list[torch.Generator]) -> torch.Tensor:
    """One token per row of float logits [B, V], LongTensor [B] on their device: the argmax when greedy, else an
    inverse-CDF draw from row b's target_probs with one uniform from generators[b], so a row's draw depends only on
    its logits and its generator and the whole batch reads nothing back, where a per-row torch.multinomial synced
    B times (batch-256 prompt sampling on an H100 took ~137 ms a step that way, docs/gpu.md). The CDF is float64;
    only tokens of probability > 0 are drawn."""
    if params.greedy:
        return argmax(logits)
    return inverse_cdf(target_probs(logits, params), uniforms(generators, 1, logits.device)[:, 0])


@dataclass
class Acceptance:
    """path: accepted node indices, root to leaf; bonus: the token emitted after them; tested: every node whose
    parent was on the accepted path (so it was compared against the target), in visiting order."""

    path: list[int]
    bonus: int
    tested: list[int]


@dataclass
class BatchAcceptance:
    """Acceptance of a batch of padded trees, greedy or sampled, as tensors on the device (nothing per node or per
    row in Python).

    accepted: [B] draft tokens kept; bonus: [B, 1] the target's token after them; on_path: bool [B, N] nodes accepted
    (their indices ascending are the path, root to leaf); reached: bool [B, 1 + N], the root (True) then on_path,
    over the verified positions. (Which nodes were tested, those whose parent is the root or on the path, the host
    reads off the path and the parents: `tested_nodes`.)"""

    accepted: torch.Tensor
    bonus: torch.Tensor
    on_path: torch.Tensor
    reached: torch.Tensor


def sampled_choices(logits: torch.Tensor, params: SamplingParams, generators: list[torch.Generator],
                    draws: int = 0) -> torch.Tensor:
    """What the exact tree rejection sampler follows, by tensor ops: every flattened node j of row b draws y_j
    [B, N+1] from the target's distribution there (target_probs of logits [B, N+1, V]; uniform j of `draws` >= N + 1
    taken from generators[b] (default N + 1), inverse CDF as sample_device); `follow` then walks from the root down
    the first child whose token is its parent's draw, and the bonus is the draw at the last accepted node. The engine
    takes the same number of uniforms every cycle (its largest tree + 1), so a row's draws never depend on the other
    rows' trees and a request samples in a batch what it samples alone.

    Why it is exact: the draft's candidates are fixed (top-k, copies), so sequential rejection at a node (accept
    child x with p(x), else zero it, renormalise, try the next; draw from what is left when all fail; verify_sampling,
    the per-node definition, kept as the tests' oracle) accepts child x with probability p(x) and emits a token y
    outside the children with probability p(y): exactly one draw y ~ p, descended into when a child carries it.
    Draws at nodes off the accepted path are never read, and each node's draw is independent, so every emitted
    token is distributed as the target's, given the ones before it."""
    probs = target_probs(logits, params)
    return inverse_cdf(probs, uniforms(generators, max(draws, probs.shape[1]), probs.device)[:, : probs.shape[1]])


def sampled_nodes(sampled_from: torch.Tensor, tree: TreeBatch) -> torch.Tensor:
    """A sampled chain's distributions [B, D, V] (position d - 1 for the node at depth d) laid out over the
    TreeBatch `tree`'s slots [B, N, V] as verified: a cut or padded chain keeps its nodes in depth order; a padding
    slot (depth 0) gets position 0's, never read (it sits past its row's size)."""
    at = (tree.depths - 1).clamp_min(0)[..., None].expand(-1, -1, sampled_from.shape[-1])
    return sampled_from.gather(1, at)


def proposal_choices(logits: torch.Tensor, proposal: torch.Tensor, tokens: torch.Tensor, sizes: torch.Tensor | None,
                     params: SamplingParams, generators: list[torch.Generator], draws: int = 0) -> torch.Tensor:
    """What the exact rejection sampler follows for chains whose tokens were *sampled* from a drafter's
    distributions (Leviathan et al. / Chen et al.): node j's token x_j ~ proposal[b, j] (q, float [B, N, V] over
    the target's ids; node j's parent is node j - 1), logits [B, N + 1, V] the target's at [root, nodes...], tokens
    [B, N], sizes [B] nodes per row (None: N everywhere). At position j < sizes[b] the target keeps x_j with
    probability min(1, p(x_j) / q(x_j)) (chosen = x_j), else chooses a draw from the residual max(0, p - q)
    renormalised, which never equals x_j; at the leaf, position sizes[b], a draw from p (the bonus). `follow` then
    walks the chain. Each emitted token is distributed as p given the ones before it, whatever q is, and a q close
    to p keeps a node with probability sum(min(p, q)) where a fixed candidate keeps it with p(x) (sampled_choices).
    Uniforms: 2 x max(draws, N + 1) a row from generators[b] (accept tests first, then draws), so a row's draws
    never depend on the other rows. -> chosen [B, N + 1]."""
    probs = target_probs(logits, params)  # [B, N + 1, V]
    n = tokens.shape[1]
    count = max(draws, n + 1)
    u = uniforms(generators, 2 * count, probs.device)
    tests, draws_u = u[:, :n], u[:, count: count + n + 1]
    inner, q = probs[:, :n], proposal.to(probs.dtype)
    p_x, q_x = inner.gather(-1, tokens[..., None])[..., 0], q.gather(-1, tokens[..., None])[..., 0]
    kept = tests * q_x < p_x  # [B, N]: probability min(1, p / q) (q_x > 0: x was drawn from q)
    residual = (inner - q).clamp_min(0)
    residual = torch.where(residual.sum(-1, keepdim=True) > 0, residual, inner)  # (p == q: never rejected)
    chosen = torch.where(kept, tokens, inverse_cdf(residual, draws_u[:, :n]))
    bonus = inverse_cdf(probs, draws_u)  # [B, N + 1]: a draw from p at every position, read at the leaf
    chosen = torch.cat([chosen, bonus[:, n:]], 1)
    if sizes is not None:  # a row's leaf sits at its size: the bonus there
        leaf = constants.arange(0, n + 1, tokens.device) >= sizes[:, None]
        chosen = torch.where(leaf, bonus, chosen)
    return chosen


def follow(tokens: torch.Tensor, parents: torch.Tensor, sizes: torch.Tensor | None, allowed: torch.Tensor,
           chosen: torch.Tensor, distinct: bool = False) -> BatchAcceptance:
    """The walk from the root down the children whose token is the token chosen at their parent (chosen: [B, N+1]
    at [root, nodes...]; the first such sibling), every row at once; the bonus is the choice at its end. sizes:
    [B] nodes per row, or None when every slot holds a node (TreeBatch.full); distinct: siblings carry distinct
    tokens (TreeBatch.distinct), so every hit is the first."""
    b, n = tokens.shape
    index = constants.arange(1, n + 1, tokens.device)  # each node's flattened index
    up = parents + 1  # flattened index of each node's parent (0 = root)
    hit = tokens == chosen.gather(1, up)
    valid = None if sizes is None else index <= sizes[:, None]  # (None: every slot holds a node)
    if valid is not None:
        hit &= valid
    first = hit
    if not distinct:  # the first hit among equal siblings
        first_hit = constants.filled((b, n + 1), n + 1, torch.long, tokens.device).scatter_reduce(
            1, up, torch.where(hit, index, n + 1), "amin")  # per parent
        first = hit & (first_hit.gather(1, up) == index)
    # [B, 1 + N]: the root, and every node whose ancestors (and itself) are first hits
    reached = (allowed <= torch.nn.functional.pad(first, (1, 0), value=True)[:, None, :]).all(-1)
    on_path = reached[:, 1:]
    leaf = (on_path * index).amax(-1, keepdim=True) if n else on_path.new_zeros(b, 1, dtype=torch.long)  # 0 = root
    return BatchAcceptance(on_path.sum(-1), chosen.gather(1, leaf), on_path, reached)


def tested_nodes(path: list[int], parents: list[int]) -> list[int]:
    """A tree's nodes whose parent is the root or on the accepted `path` (so they were compared against the
    target), ascending; parents: the tree's, over its nodes (-1: a child of the root)."""
    on = set(path)
    return [i for i, p in enumerate(parents) if p < 0 or p in on]
