"""A cycle's TreeBatch verified as one batch on the device: the target's input built from it, greedy acceptance of
every row at once, what commits the accepted paths (cache compaction, the head's next inputs), and the cycle's one
device-to-host copy."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import constants
from ..trees.tree import TreeBatch, ancestor_masks
from .verify import Acceptance, BatchAcceptance, follow, tested_nodes


@dataclass
class VerifyInput:
    """The target's verification input for a TreeBatch of width N: ids and positions [B, 1 + N] (the root, then the
    slots; a padding slot sits at the root's position), allowed: bool [B, 1 + N, 1 + N] tree attention (ancestors
    and self; a padding slot sees only the root and itself)."""

    ids: torch.Tensor
    positions: torch.Tensor
    allowed: torch.Tensor


def verification_input(tree: TreeBatch, roots: torch.Tensor, bases: torch.Tensor) -> VerifyInput:
    """roots: LongTensor [B, 1], each row's root token; bases: LongTensor [B, 1], its sequence position."""
    ids = torch.cat([roots, tree.tokens], 1)
    positions = bases + torch.nn.functional.pad(tree.depths, (1, 0))
    return VerifyInput(ids, positions, ancestor_masks(tree.parents))


@dataclass
class Commit:
    """What the accepted paths commit, on the device, W columns (commit_paths: at least 1 + the longest path): kept
    [B, W] flattened indices (0 = root, then the accepted nodes root to leaf; slots past 1 + accepted[b] are
    arbitrary); tokens [B, W]: the token each kept position is fed to the head with (its own, or the one after
    it: the next accepted token, the bonus token after the leaf; then arbitrary); counts [B, 1] = accepted + 1."""

    kept: torch.Tensor
    tokens: torch.Tensor
    counts: torch.Tensor


def kept_columns(tree: TreeBatch, static: bool) -> int:
    """The columns a commit of `tree` keeps: 1 + its depth bound (no path is longer), or 1 + its width where the
    shape must not depend on the depth (static: one captured graph per width)."""
    return 1 + (tree.width if static else min(tree.depth, tree.width))


def commit_paths(fed: torch.Tensor, reached: torch.Tensor, columns: int) -> Commit:
    """fed [B, 1 + N]: the token each verified position would be fed to the head with: the verified ids (its own
    token, a head trained on unshifted tokens) or the target's choices there (the token after it: on the accepted
    path, the next accepted token or the bonus); reached bool [B, 1 + N] (BatchAcceptance.reached); columns: the W
    kept (kept_columns)."""
    n = fed.shape[1] - 1
    path = torch.where(reached, constants.arange(0, n + 1, fed.device), n)  # the root, the accepted nodes, then n
    kept = path.topk(columns, dim=1, largest=False).values  # the W smallest ascending: the root, the path, then n
    return Commit(kept, fed.gather(1, kept), reached.sum(-1, keepdim=True))  # (the root and the accepted)


def accept_and_commit(tokens: torch.Tensor, parents: torch.Tensor, sizes: torch.Tensor | None,
                      allowed: torch.Tensor, chosen: torch.Tensor, fed: torch.Tensor, columns: int,
                      distinct: bool) -> tuple[torch.Tensor, ...]:
    """Acceptance (verify.follow down `chosen` [B, 1 + N], the target's argmax or draws at every verified position)
    and what it commits (commit_paths, of `fed`), one static-shape step of tensors in and out: what a GPU compiles
    and captures once per (batch, width) (Engine: CompiledForward). -> BatchAcceptance's fields, then Commit's
    (as_verdict)."""
    accepted = follow(tokens, parents, sizes, allowed, chosen, distinct)
    commit = commit_paths(fed, accepted.reached, columns)
    return accepted.accepted, accepted.bonus, accepted.on_path, accepted.reached, commit.kept, commit.tokens, \
        commit.counts


def as_verdict(fields: tuple[torch.Tensor, ...]) -> tuple[BatchAcceptance, Commit]:
    """accept_and_commit's tensors as (BatchAcceptance, Commit)."""
    return BatchAcceptance(*fields[:4]), Commit(*fields[4:])


@dataclass
class HostRow:
    """One row's verdict on the host: its Acceptance, and the tree's size, tokens, draft probabilities, copied flags,
    depths and parents (lists over its nodes)."""

    acceptance: Acceptance
    size: int
    tokens: list[int]
    probs: list[float]
    copied: list[bool]
    depths: list[int]
    parents: list[int]


def to_host(tree: TreeBatch, accepted: BatchAcceptance, summary: torch.Tensor | None = None
            ) -> tuple[list[HostRow], list[float] | None]:
    """The cycle's one device-to-host copy: every row's acceptance (bonus and accepted nodes; the tested ones are
    read off the tree's parents, `tested_nodes`) and its tree, as one float64 tensor (which holds every token id
    exactly), and with it `summary` (an auto budget's evidence for the next cycle's plan, cost.Evidence.summary:
    float64 [1, P], copied beside every row) as a list of floats."""
    n = tree.width
    fields = [accepted.bonus, accepted.on_path, tree.parents, tree.tokens,
              tree.probs if summary is not None else tree.probs.double(), tree.copied, tree.depths]
    if summary is not None:
        fields.append(summary if tree.batch == 1 else summary.expand(tree.batch, -1))
    host = torch.cat(fields, 1).tolist()  # (cat promotes every field to float64: the summary's, or probs')
    read = None if summary is None else host[0][len(host[0]) - summary.shape[1]:]
    rows = []
    for row in host:
        depths = row[1 + 5 * n : 1 + 6 * n]
        size = n if tree.full else next((i for i, d in enumerate(depths) if d == 0), n)  # (padding: depth 0)
        part = lambda i: row[1 + i * n : 1 + i * n + size]  # noqa: E731 (field i over the row's nodes)
        on_path = part(0)
        path = [i for i in range(size) if on_path[i]]
        parents = [int(p) for p in part(1)]
        acceptance = Acceptance(path, int(row[0]), tested_nodes(path, parents))
        rows.append(HostRow(acceptance, size, [int(x) for x in part(2)], part(3), [bool(x) for x in part(4)],
                            [int(x) for x in part(5)], parents))
    return rows, read
