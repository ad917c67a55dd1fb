"""Test drafters and targets for the engine tests.

An *oracle* drafter knows a reference sequence (prompt + the target's vanilla greedy continuation) and proposes
the true continuation as one path of a tree, hidden among distractor siblings and their subtrees, optionally with a
corrupted token so acceptance stops part-way. It uses only `feeder.root.token` and `feeder.root.base` and records
what it proposed, so tests can predict exactly how many tokens the target must accept in every cycle.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
import torch

from eagle_infer.config import InferConf, SamplingParams
from eagle_infer.decoding.engine import Engine
from eagle_infer.decoding.verify import Acceptance, sample_device
from eagle_infer.trees.drafting import Growth, TreeFeeder, grow_dynamic
from eagle_infer.trees.tree import DraftTree, TreeBatch
from tests.tiny import tiny_target


@dataclass
class OracleDraft:
    """What one oracle call proposed.

    path: flattened node indices of the proposed continuation, root to leaf; n_true: how many leading path tokens
    equal the reference; exact: whether the target's greedy acceptance is then known to be exactly n_true (the first
    wrong token lies inside the reference, or the whole path is right), rather than at least n_true (the path ran
    past the end of the reference, where tokens are arbitrary and may match by chance).
    """

    base: int
    root: int
    tree: DraftTree
    path: list[int]
    n_true: int
    exact: bool


class _Node:
    __slots__ = ("token", "prob", "children", "on_path")

    def __init__(self, token: int, prob: float, on_path: bool = False):
        self.token, self.prob, self.children, self.on_path = token, prob, [], on_path


class OracleDrafter:
    """Callable TreeFeeder -> [DraftTree per row] proposing reference[base+1 : base+1+depth] (see oracle_drafter);
    in a batch, the row serving request i uses references[i]."""

    def __init__(self, references, depth: int, branch: int = 0, wrong_rate: float = 0.0, seed: int = 0,
                 vocab: int | None = None, subtrees: bool = True):
        if depth < 1:
            raise ValueError("depth must be >= 1")
        self.references = [[int(t) for t in ref] for ref in references]
        self.depth, self.branch, self.wrong_rate, self.seed = depth, branch, wrong_rate, seed
        top = max(max(ref) for ref in self.references)
        self.vocab = vocab if vocab is not None else max(top + 1, branch + 3)
        self.subtrees = subtrees
        self.log: list[OracleDraft] = []
        self.root_mismatches: list[tuple[int, int, int]] = []  # (base, root token, reference[base])

    @property
    def max_nodes(self) -> int:
        """Largest tree this drafter can return: the path plus, at each depth d, `branch` distractors each carrying
        a chain of at most depth - d nodes."""
        d = self.depth
        return d + self.branch * (d + d * (d - 1) // 2)

    def config(self) -> InferConf:
        """A config whose tree budget holds every tree this drafter returns (the drafter replaces its drafting)."""
        return InferConf(method="eagle2", depth=1, top_k=1, total_tokens=self.max_nodes)

    def _other(self, rng: random.Random, avoid: set[int]) -> int | None:
        choices = [t for t in range(self.vocab) if t not in avoid]
        return rng.choice(choices) if choices else None

    def __call__(self, feeder) -> list[DraftTree]:
        root, device = feeder.root, feeder.root.feature.device
        return [self._draft(base, token, request, device)
                for base, token, request in zip(root.bases, root.tokens, root.requests)]

    def _draft(self, base: int, root: int, request: int, device) -> DraftTree:
        ref, depth = self.references[request], self.depth
        if base < len(ref) and ref[base] != root:
            self.root_mismatches.append((base, root, ref[base]))
        # Deterministic in (seed, request, base): the proposal never depends on the verifier's random draws.
        rng = random.Random(self.seed * 1_000_003 + base + 7919 * request)
        truth = [ref[base + d] if base + d < len(ref) else None for d in range(1, depth + 1)]
        path_tokens = [t if t is not None else rng.randrange(self.vocab) for t in truth]
        if self.wrong_rate > 0 and rng.random() < self.wrong_rate:
            j = rng.randrange(depth)
            bad = self._other(rng, {path_tokens[j]} | ({truth[j]} if truth[j] is not None else set()))
            if bad is not None:
                path_tokens[j] = bad
        n_true = 0
        while n_true < depth and truth[n_true] is not None and path_tokens[n_true] == truth[n_true]:
            n_true += 1
        exact = n_true == depth or truth[n_true] is not None

        top = _Node(root, 1.0)
        parent = top
        for d in range(1, depth + 1):
            node = _Node(path_tokens[d - 1], rng.uniform(0.05, 1.0), on_path=True)
            siblings = [node]
            avoid = {path_tokens[d - 1]} | ({truth[d - 1]} if truth[d - 1] is not None else set())
            for _ in range(self.branch):
                tok = self._other(rng, avoid)
                if tok is None:
                    break
                avoid.add(tok)
                distractor = _Node(tok, rng.uniform(0.05, 1.0))
                siblings.append(distractor)
                if self.subtrees:  # a chain of random length below the distractor: varied shapes
                    below, length = distractor, rng.randint(0, depth - d)
                    for _ in range(length):
                        child = _Node(rng.randrange(self.vocab), rng.uniform(0.05, 1.0))
                        below.children.append(child)
                        below = child
            rng.shuffle(siblings)  # the true child is not always the first one
            parent.children = siblings
            parent = node

        tokens, parents, depths, probs, path = [], [], [], [], []
        queue = [(c, -1, 1) for c in top.children]
        while queue:  # breadth-first flattening
            nxt = []
            for node, par, d in queue:
                i = len(tokens)
                tokens.append(node.token)
                parents.append(par)
                depths.append(d)
                probs.append(node.prob)
                if node.on_path:
                    path.append(i)
                nxt += [(c, i, d + 1) for c in node.children]
            queue = nxt
        tree = DraftTree(
            torch.tensor(tokens, dtype=torch.long, device=device),
            torch.tensor(parents, dtype=torch.long, device=device),
            torch.tensor(depths, dtype=torch.long, device=device),
            torch.tensor(probs, dtype=torch.float32, device=device),
        )
        assert len(tree) <= self.max_nodes
        self.log.append(OracleDraft(base, root, tree, path, n_true, exact))
        return tree


def oracle_drafter(reference, depth, branch=0, wrong_rate=0.0, seed=0, vocab=None, subtrees=True,
                   references=None) -> OracleDrafter:
    """Propose the true continuation reference[base+1 : base+1+depth] as a path (references: one reference per
    request of a batch, instead of `reference`).

    branch: distractor siblings at every depth (tokens other than the true one, each with a random chain below it),
    shuffled so the true child's position varies and the accepted path has non-contiguous flattened indices.
    wrong_rate: probability that one path token (at a random depth) is corrupted, so acceptance stops there.
    Past the end of the reference the path holds arbitrary tokens. vocab: token ids to draw from (default: enough
    to cover the reference).
    """
    return OracleDrafter(references or [reference], depth, branch, wrong_rate, seed, vocab, subtrees)


def scaled_target(vocab: int = 96, hidden: int = 64, layers: int = 2, seed: int = 0, scale: float = 8.0,
                  arch: str = "llama", name: str | None = None):
    """tiny_target with the LM head scaled by `scale` instead of tiny_target's x8 (lower = flatter distributions)."""
    target = tiny_target(vocab=vocab, hidden=hidden, layers=layers, seed=seed, arch=arch,
                         name=name or f"tiny-{arch}")
    if scale != 8.0:
        with torch.no_grad():
            target.model.lm_head.weight.mul_(scale / 8.0)
    return target


def vanilla_tokens(target, prompt, max_new_tokens, stop_ids=None) -> list[int]:
    """The target's own greedy continuation (method vanilla)."""
    engine = Engine(target, None, InferConf(method="vanilla"))
    return engine.generate(list(prompt), max_new_tokens, stop_ids=stop_ids).tokens


def distinct_enough(tokens, minimum: int = 5, max_run: int = 6) -> bool:
    """A continuation worth testing on: several distinct tokens and no long run of one repeated token."""
    run = longest = 1
    for a, b in zip(tokens, tokens[1:]):
        run = run + 1 if a == b else 1
        longest = max(longest, run)
    return len(set(tokens)) >= minimum and longest <= max_run


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models run fastest on one thread, and the test machine's cores are shared: import this fixture into a
    test module to run that module single-threaded (restored afterwards)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def distinct_checked(monkeypatch):
    """Every verification that trusts its trees' siblings to be distinct (TreeBatch.distinct, which skips the walk's
    search for the first of equal siblings) checks that they are; yields how many it checked."""
    from eagle_infer.decoding import verify, verify_batch

    follow, checked = verify.follow, []

    def checking(tokens, parents, sizes, allowed, chosen, distinct=False):
        if distinct:
            for b in range(tokens.shape[0]):
                n = tokens.shape[1] if sizes is None else int(sizes[b])
                pairs = list(zip(parents[b, :n].tolist(), tokens[b, :n].tolist()))
                assert len(set(pairs)) == len(pairs), f"row {b}: siblings repeat a token {pairs}"
            checked.append(tokens.shape[0])
        return follow(tokens, parents, sizes, allowed, chosen, distinct)
    monkeypatch.setattr(verify_batch, "follow", checking)  # (the engine's acceptance step walks with it)
    yield checked


def chain_mask(n: int, step: int, dtype, device) -> torch.Tensor:
    """The training-time test's attention pattern as one additive mask [1, 1, n, (step + 1) n] (the oracle
    eagle_infer.head.chain_attention is checked against): query i sees real pairs j <= i - step (block 0) and, in block
    j = 1..step, the chain's step-j node at i - step + j."""
    i = torch.arange(n, device=device)[:, None]
    j = torch.arange(n, device=device)[None]
    allowed = torch.cat([j <= i - step] + [j == i - step + k for k in range(1, step + 1)], dim=1)
    return torch.zeros(n, (step + 1) * n, dtype=dtype, device=device).masked_fill_(~allowed, torch.finfo(dtype).min)[None, None]


def merge_oracle(trees: list[DraftTree], values: list[list[float]], budget: int, device="cpu") -> DraftTree:
    """The per-row definition eagle_infer.trees.merge batches, node by node on the host: the union of `trees` (each
    node once, in order of first appearance: earlier trees first), each node valued by the highest of its values in
    the trees holding it (values[t][i]: node i of tree t), cut to its `budget` best, ties to the earlier node, in
    union order. probs: the own prob of the first tree holding a node; copied: True where any tree holding it marks it
    copied (None when no input tree says)."""
    index: dict[tuple[int, int], int] = {}  # (merged parent, token) -> merged node
    tokens, parents, depths, probs, copied, best = [], [], [], [], [], []
    for tree, tree_values in zip(trees, values):
        marks = tree.copied.tolist() if tree.copied is not None else [False] * len(tree)
        where = []
        for tok, par, own, mark, value in zip(tree.tokens.tolist(), tree.parents.tolist(), tree.probs.tolist(), marks,
                                              tree_values):
            up = -1 if par < 0 else where[par]
            j = index.setdefault((up, tok), len(tokens))
            if j == len(tokens):
                tokens.append(tok)
                parents.append(up)
                depths.append(1 if up < 0 else depths[up] + 1)
                probs.append(own)
                copied.append(mark)
                best.append(value)
            else:
                copied[j], best[j] = copied[j] or mark, max(best[j], value)
            where.append(j)
    keep = sorted(sorted(range(len(tokens)), key=lambda j: (-best[j], j))[:budget])
    new = {j: i for i, j in enumerate(keep)}
    return DraftTree(
        torch.tensor([tokens[j] for j in keep], dtype=torch.long, device=device),
        torch.tensor([-1 if parents[j] < 0 else new[parents[j]] for j in keep], dtype=torch.long, device=device),
        torch.tensor([depths[j] for j in keep], dtype=torch.long, device=device),
        torch.tensor([probs[j] for j in keep], dtype=torch.float32, device=device),
        None if all(t.copied is None for t in trees) else torch.tensor([copied[j] for j in keep], dtype=torch.bool,
                                                                        device=device),
    )


def verify_sampling(tree: DraftTree, probs: torch.Tensor, generator: torch.Generator | None) -> Acceptance:
    """Sequential rejection over one tree, node by node (the definition verify.sampled_choices and verify.follow batch; the exact
    tests script its draws through this module's `torch`). probs: [N+1, V] target sampling distributions at the
    flattened tree (row 0 = root)."""
    tokens, children = tree.tokens.tolist(), children_of(tree)
    path, tested, row = [], [], 0
    while True:
        p = probs[row].clone()
        hit = None
        for c in children[row]:
            tested.append(c)
            x = tokens[c]
            px = p[x]
            if px > 0 and (torch.rand((), generator=generator, device=p.device) < px or p.sum() - px <= 0):
                hit = c
                break
            p[x] = 0
            p /= p.sum()
        if hit is None:
            return Acceptance(path, int(torch.multinomial(p, 1, generator=generator)), tested)
        path.append(hit)
        row = hit + 1


def children_of(tree: DraftTree) -> list[list[int]]:
    """children_of(tree)[j] lists the node indices under flattened index j (0 = root, node i = i + 1), in order."""
    out: list[list[int]] = [[] for _ in range(len(tree) + 1)]
    for i, p in enumerate(tree.parents.tolist()):
        out[p + 1].append(i)
    return out


def sample_tokens(logits: torch.Tensor, params: SamplingParams, generators: list[torch.Generator]) -> list[int]:
    """The engine's sampler (verify.sample_device) with its tokens on the host."""
    return sample_device(logits, params, generators).tolist()


def draft_dynamic(feeder: TreeFeeder, depth: int, top_k: int, total_tokens: int, grow: Growth = Growth()) -> TreeBatch:
    """EAGLE-2's trees alone, as the engine grows them (drafting.grow_dynamic)."""
    return grow_dynamic(feeder, depth, top_k, total_tokens, grow).trees


def rows_of(trees: TreeBatch) -> list[DraftTree]:
    """Every row of a TreeBatch as a DraftTree."""
    return [trees.row(b) for b in range(trees.batch)]
