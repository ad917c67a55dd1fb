"""The method registry: every decoding method by name (`infer.method`, eval's `methods`), each entry saying what the
method needs, so the engine, the scheduler, the builders and eval ask the entry instead of comparing names.

An entry says whether the method drafts with a head and with which head blocks (EAGLE heads, or a block drafter:
head.block=dflash), its tree kind (TREE_KINDS), how its drafter is built, how big its tree is and how many nodes a
cycle feeds the head for a resolved InferConf, whether it can choose its tree per cycle (the auto budget), how its
tree shrinks to a batch's token budget, and whether every tree is one chain (verified causally). Hybrids
("<method>+lookup": prompt lookup's copies merged into a head method's tree) are built from their head method by
`hybrid`. DEFAULT_METHOD is the fastest lossless method measured (README): EAGLE-2 with
prompt lookup merged in. `register` adds an entry (a new method is one entry: its drafter and its tree arithmetic).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from ..config import (AUTO_MAX_DEPTH, AUTO_MAX_TOKENS, AUTO_ON_OFF, BUDGETS, DEFAULT_METHOD, DRAFT_VOCABS, FIXED_DEPTH,
                      FIXED_TOKENS, InferConf)
from ..errors import EagleError
from ..trees.block_drafter import BlockDrafter
from ..trees.drafters import (ChainDrafter, CustomDrafter, Drafter, DynamicDrafter, HybridDrafter, LookupDrafter,
                              StaticDrafter)
from ..head.block_runner import BLOCK_DRAFTERS
from ..head.draft_head import DraftHeadConfig
from ..head.expansion import EXPAND_BY
from ..trees.tree import check_paths

TREE_KINDS = ("none", "chain", "static", "dynamic", "lookup", "hybrid")
EAGLE_BLOCKS = ("eagle", "eagle3")  # the head blocks the EAGLE methods draft with, a level a forward
HYBRID = "+lookup"  # suffix of a head method's hybrid: its trees with prompt lookup's copies merged in


def _none(config: InferConf) -> int:
    return 0


def _never(config: InferConf) -> bool:
    return False


def _no_check(config: InferConf, vocab_size: int) -> None:
    return None


def _shorter_chain(config: InferConf, n: int) -> InferConf:
    return replace(config, depth=n)


@dataclass(frozen=True)
class Method:
    """One decoding method. name: what `infer.method` says; head: whether it drafts with a draft head; tree: its tree
    kind (TREE_KINDS); drafter: builds its drafter (None: no drafter, one target forward per token); lookup: whether
    its drafter reads prompt lookup's copies (the rows' contexts are kept for it; a custom drafter's trees get the
    copies merged in); merges_lookup: a hybrid. The callables take a resolved InferConf: tree_size (draft nodes a
    cycle verifies before any batch budget), feed_budget (most nodes a cycle feeds the head: the head cache's room
    past the context), takes_auto (whether it can choose its tree per cycle: budget="auto"), cut(config, n) (the
    config with its tree cut to n < tree_size nodes), chains (whether every tree is one chain) and check(config,
    vocab_size) (its own one-line errors). blocks: the head blocks (head.block) it drafts with, when it has a head:
    EAGLE_BLOCKS, or the block drafters', whose block of B tokens bounds the depth (resolve)."""

    name: str
    head: bool
    tree: str
    drafter: Callable[[], Drafter] | None
    tree_size: Callable[[InferConf], int]
    feed_budget: Callable[[InferConf], int] = _none
    takes_auto: Callable[[InferConf], bool] = _never
    cut: Callable[[InferConf, int], InferConf] = _shorter_chain
    chains: Callable[[InferConf], bool] = _never
    check: Callable[[InferConf, int], None] = _no_check
    lookup: bool = False
    merges_lookup: bool = False
    blocks: tuple[str, ...] = EAGLE_BLOCKS

    def __post_init__(self):
        if self.tree not in TREE_KINDS:
            raise EagleError(f"method {self.name!r}: unknown tree kind {self.tree!r}: expected one of "
                             f"{', '.join(TREE_KINDS)}")


def hybrid(base: Method) -> Method:
    """`base` (a head method) with prompt lookup's copies merged into its trees, cut to base's budget: "<base>+lookup"."""
    if not base.head or base.drafter is None:
        raise EagleError(f"method {base.name!r} has no head drafter to merge prompt lookup into: expected a head method")
    return replace(base, name=base.name + HYBRID, tree="hybrid", drafter=lambda: HybridDrafter(base.drafter()),
                   chains=_never, lookup=True, merges_lookup=True)


def _lookup_tokens(config: InferConf) -> int:
    return config.lookup_conf.num_tokens * config.lookup_conf.branches


def _fewer_copies(config: InferConf, n: int) -> InferConf:
    tokens = min(config.lookup_conf.num_tokens, n)
    return replace(config, lookup_conf=replace(config.lookup_conf, num_tokens=tokens, branches=n // tokens))


def _first_paths(config: InferConf, n: int) -> InferConf:
    return replace(config, static_paths=[list(p) for p in check_paths(config.paths())[:n]])


def _static_ranks(config: InferConf, vocab_size: int) -> None:
    widest = max(max(p) for p in check_paths(config.paths()))
    if widest >= vocab_size:
        raise EagleError(f"static tree rank {widest} is invalid: expected ranks below the vocabulary size {vocab_size}")


def _depth(config: InferConf) -> int:
    return config.depth


def _static_size(config: InferConf) -> int:
    return len(config.paths())


VANILLA = Method("vanilla", head=False, tree="none", drafter=None, tree_size=_none)
CHAIN = Method("chain", head=True, tree="chain", drafter=ChainDrafter, tree_size=_depth, feed_budget=_depth,
               chains=lambda config: True)
EAGLE1 = Method("eagle1", head=True, tree="static", drafter=StaticDrafter, tree_size=_static_size,
                feed_budget=_static_size, cut=_first_paths, check=_static_ranks)


def _fewer_nodes(config: InferConf, n: int) -> InferConf:
    return replace(config, total_tokens=n, depth=min(config.depth, n))


EAGLE2 = Method("eagle2", head=True, tree="dynamic", drafter=DynamicDrafter, tree_size=lambda c: c.total_tokens,
                feed_budget=lambda c: c.top_k * (c.depth - 1), takes_auto=lambda c: c.rerank, cut=_fewer_nodes)
LOOKUP = Method("lookup", head=False, tree="lookup", drafter=LookupDrafter, tree_size=_lookup_tokens,
                takes_auto=lambda c: True, cut=_fewer_copies, chains=lambda c: c.lookup_conf.branches == 1,
                lookup=True)
# A block drafter (DFlash): one forward a cycle drafts B - 1 tokens after the bonus token; depth is how many of them
# a cycle verifies (resolve: "auto" all of them). dflash verifies the top-1 chain, dflash-tree the top_k per
# position grown to total_tokens nodes by path value (trees/block_drafter.py).
DFLASH = Method("dflash", head=True, tree="chain", drafter=BlockDrafter, tree_size=_depth, takes_auto=lambda c: True,
                chains=lambda c: True, blocks=BLOCK_DRAFTERS)
DFLASH_TREE = Method("dflash-tree", head=True, tree="dynamic", drafter=lambda: BlockDrafter(tree=True),
                     tree_size=lambda c: c.total_tokens, takes_auto=lambda c: c.rerank, cut=_fewer_nodes,
                     blocks=BLOCK_DRAFTERS)


def _chain_or_copies(config: InferConf) -> int:
    return max(config.depth, _lookup_tokens(config))


def _shorter_chain_and_copies(config: InferConf, n: int) -> InferConf:
    config = replace(config, depth=min(config.depth, n))
    return config if _lookup_tokens(config) <= n else _fewer_copies(config, n)


# dflash+lookup: the block's chain and lookup's copies merged, cut to the longer of the two (a block of 8 drafts 7,
# lookup copies 10 by default: each fits whole, and the best of both by path value when they differ)
DFLASH_LOOKUP = replace(hybrid(DFLASH), tree_size=_chain_or_copies, cut=_shorter_chain_and_copies)

METHODS: dict[str, Method] = {m.name: m for m in (VANILLA, CHAIN, EAGLE1, EAGLE2, LOOKUP,
                                                  hybrid(CHAIN), hybrid(EAGLE1), hybrid(EAGLE2),
                                                  DFLASH, DFLASH_TREE, DFLASH_LOOKUP, hybrid(DFLASH_TREE))}


def method_names() -> tuple[str, ...]:
    """The registered methods' names, in registration order."""
    return tuple(METHODS)


def method_named(name: str) -> Method:
    """The registered method `name`; a one-line error listing the registered ones otherwise."""
    if name not in METHODS:
        raise EagleError(f"unknown method {name!r}: expected one of {', '.join(METHODS)}")
    return METHODS[name]


def register(method: Method) -> Method:
    """Add `method` to the registry (a name already taken is a one-line error); returns it."""
    if method.name in METHODS:
        raise EagleError(f"method {method.name!r} is already registered: expected a new name")
    METHODS[method.name] = method
    return method


def with_lookup(name: str) -> Method:
    """Method `name` with prompt lookup merged in (`infer.lookup=true`): its hybrid, or itself when it is one; a
    one-line error for a method without a hybrid."""
    method = method_named(name)
    if method.merges_lookup:
        return method
    if name + HYBRID not in METHODS:
        bases = [m.name.removesuffix(HYBRID) for m in METHODS.values() if m.merges_lookup]
        raise EagleError(f"lookup=true merges prompt lookup into a head's tree: expected method {', '.join(bases)}, "
                         f"not {name!r} (method lookup drafts by lookup alone)")
    return METHODS[name + HYBRID]

if DEFAULT_METHOD not in METHODS:  # config names the default; the registry must hold it
    raise EagleError(f"default method {DEFAULT_METHOD!r} is not registered: expected one of {', '.join(METHODS)}")


def method_of(config: InferConf) -> Method:
    """The registry's entry of a config's method (its hybrid with lookup=true); unknown: a one-line error."""
    return with_lookup(config.method) if config.lookup else method_named(config.method)


def takes_auto(config: InferConf) -> bool:
    """Whether the config's method can take an auto budget (its registry entry's takes_auto)."""
    return method_of(config).takes_auto(config)


def resolve(config: InferConf, head: DraftHeadConfig | None = None) -> InferConf:
    """`config` with its method named as registered (lookup=true: method X -> "X+lookup", and lookup true exactly
    for hybrids), its budget decided (InferConf.budget) and "auto" depth / total_tokens turned into integers:
    AUTO_MAX_DEPTH / AUTO_MAX_TOKENS caps under an auto budget, FIXED_DEPTH / FIXED_TOKENS under a fixed one; static
    paths as lists. Given the head it decodes with (its config): a one-line error when the method does not draft
    with its block, and a block drafter's block of B tokens bounds the depth: "auto" is B - 1 (every token a forward
    drafts), an integer at most that."""
    method, budget = method_of(config), config.budget
    if head is not None and method.head and head.block not in method.blocks:
        takers = [m.name for m in METHODS.values() if m.head and head.block in m.blocks]
        raise EagleError(f"method {method.name!r} drafts with a head of block {' or '.join(method.blocks)}, not "
                         f"head.block={head.block!r}: give it such a head (infer.head=<its directory> or "
                         f"infer.head=random), or decode this head with infer.method={' / '.join(takers)}")
    if budget is None:
        automatic = "auto" in (config.depth, config.total_tokens) and method.takes_auto(config)
        budget = "auto" if automatic else "fixed"
    values = {}
    for name, cap, fixed in (("depth", AUTO_MAX_DEPTH, FIXED_DEPTH), ("total_tokens", AUTO_MAX_TOKENS, FIXED_TOKENS)):
        if getattr(config, name) == "auto":
            values[name] = cap if budget == "auto" else fixed
    if head is not None and method.head and head.block_size:  # a block drafter: at most its block's drafts
        drafts = head.block_size - 1
        if config.depth == "auto" or isinstance(config.depth, int):  # (anything else: validate's one line)
            values["depth"] = drafts if config.depth == "auto" else min(config.depth, drafts)
    paths = None if config.static_paths is None else [list(p) for p in config.static_paths]
    return replace(config, **values, method=method.name, lookup=method.merges_lookup, budget=budget, static_paths=paths)


def _one_of(name: str, value, choices) -> None:
    if value not in choices:
        raise EagleError(f"unknown {name} {value!r}: expected one of {', '.join(map(str, choices))}")


def validate(config: InferConf, vocab_size: int) -> None:
    """One-line errors for a resolved config that cannot decode with a vocabulary of vocab_size."""
    method = method_of(config)  # an unknown method, or lookup=true beside one without a hybrid: one-line errors
    for name in ("depth", "top_k", "total_tokens"):
        if not isinstance(getattr(config, name), int):
            raise EagleError(f"{name} {getattr(config, name)!r} is invalid: expected an integer (or 'auto' for "
                             "infer.depth / infer.total_tokens)")
    _one_of("draft_vocab", config.draft_vocab, DRAFT_VOCABS)
    _one_of("pad_trees", config.pad_trees, AUTO_ON_OFF)
    _one_of("plan_ahead", config.plan_ahead, AUTO_ON_OFF)
    _one_of("budget", config.budget, BUDGETS)
    if config.budget == "auto" and not method.takes_auto(config):
        raise EagleError(f"budget 'auto' needs a method that chooses its tree per cycle (eagle2 or dflash-tree "
                         f"with rerank, dflash, lookup, or their hybrids): got method {method.name!r}, rerank "
                         f"{config.rerank}")
    if config.depth < 1:
        raise EagleError(f"depth {config.depth} is invalid: expected >= 1")
    if not 1 <= config.top_k <= vocab_size:
        raise EagleError(f"top_k {config.top_k} is invalid: expected 1 <= top_k <= vocabulary size {vocab_size}")
    if config.total_tokens < 1:
        raise EagleError(f"total_tokens {config.total_tokens} is invalid: expected >= 1")
    if config.max_batch_size < 1:
        raise EagleError(f"max_batch_size {config.max_batch_size} is invalid: expected >= 1")
    if not 1 <= config.batch_size <= config.max_batch_size:
        raise EagleError(f"batch_size {config.batch_size} is invalid: expected 1 <= batch_size <= max_batch_size "
                         f"{config.max_batch_size}")
    if config.batch_token_budget < 0:
        raise EagleError(f"batch_token_budget {config.batch_token_budget} is invalid: expected >= 0 (0 = off)")
    _one_of("expand_by", config.expand_by, tuple(EXPAND_BY))
    method.check(config, vocab_size)
    if method.lookup:
        config.lookup_conf.validate()
    if method.merges_lookup and config.lookup_conf.num_tokens > tree_size(config):
        raise EagleError(f"lookup.num_tokens {config.lookup_conf.num_tokens} is beyond the tree budget: expected <= "
                         f"the {tree_size(config)} draft tokens of the {method.name} tree (lower lookup.num_tokens, "
                         f"or drop lookup: infer.method={method.name.removesuffix(HYBRID)})")


def _resolved(config: InferConf) -> InferConf:
    return config if config.is_resolved else resolve(config)


def tree_size(config: InferConf) -> int:
    """Draft nodes of the config's tree (resolved first), before any batch budget."""
    config = _resolved(config)
    return method_of(config).tree_size(config)


def tree_budget(config: InferConf, batch: int = 1) -> int:
    """Most draft nodes one cycle verifies per row when `batch` rows decode together."""
    size = tree_size(config)
    return size if not config.batch_token_budget else min(size, max(1, config.batch_token_budget // batch - 1))


def feed_budget(config: InferConf) -> int:
    """Most tree nodes one cycle feeds to the draft head (its cache needs that much room past the context)."""
    config = _resolved(config)
    return method_of(config).feed_budget(config)


def at_batch(config: InferConf, batch: int) -> InferConf:
    """The config with its tree cut to tree_budget(batch): EAGLE-2 keeps fewer nodes (and drafts no deeper than it
    can keep), EAGLE-1 keeps its first paths in breadth-first order, a chain gets shorter, lookup copies fewer
    tokens (a merged tree is cut to the smaller budget as well)."""
    config = _resolved(config)
    n = tree_budget(config, batch)
    return config if n == tree_size(config) else method_of(config).cut(config, n)


def drafter_for(config: InferConf, custom: Callable | Drafter | None = None) -> Drafter | None:
    """The drafter of a config's method as its registry entry builds it (None for vanilla), or `custom` (an object
    with `propose`, or a callable TreeFeeder -> trees) in its place; under a method that uses lookup (a hybrid, or
    lookup) a custom drafter's trees get the copies merged in."""
    if custom is not None and not hasattr(custom, "propose"):
        custom = CustomDrafter(custom)
    method = method_of(config)
    if custom is not None:
        return HybridDrafter(custom) if method.lookup else custom
    return None if method.drafter is None else method.drafter()
