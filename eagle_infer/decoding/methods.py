"""The method registry: every decoding method by name (`infer.method`, eval's `methods`), each entry saying what the
method needs, so the engine, the scheduler, the builders and eval ask the entry instead of comparing names.

An entry says whether the method drafts with a head, its tree kind (TREE_KINDS), how its drafter is built, how
big its tree is and how many nodes a cycle feeds the head for a resolved InferConf, whether it can choose its tree
per cycle (the auto budget), how its tree shrinks to a batch's token budget, and whether every tree is one chain
(verified causally). Hybrids ("<method>+lookup": prompt lookup's copies merged into a head method's tree) are built
from their head method by `hybrid`. DEFAULT_METHOD is the fastest lossless method measured (README): EAGLE-2 with
prompt lookup merged in. `register` adds an entry (a new method is one entry: its drafter and its tree arithmetic).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

from ..trees.drafters import ChainDrafter, Drafter, DynamicDrafter, HybridDrafter, LookupDrafter, StaticDrafter
from ..errors import EagleError
from ..trees.tree import check_paths

if TYPE_CHECKING:  # type-only: config imports this module
    from ..config import InferConf

TREE_KINDS = ("none", "chain", "static", "dynamic", "lookup", "hybrid")
HYBRID = "+lookup"  # suffix of a head method's hybrid: its trees with prompt lookup's copies merged in
DEFAULT_METHOD = "eagle2" + HYBRID


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
    vocab_size) (its own one-line errors)."""

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
EAGLE2 = Method("eagle2", head=True, tree="dynamic", drafter=DynamicDrafter, tree_size=lambda c: c.total_tokens,
                feed_budget=lambda c: c.top_k * (c.depth - 1), takes_auto=lambda c: c.rerank,
                cut=lambda c, n: replace(c, total_tokens=n, depth=min(c.depth, n)))
LOOKUP = Method("lookup", head=False, tree="lookup", drafter=LookupDrafter, tree_size=_lookup_tokens,
                takes_auto=lambda c: True, cut=_fewer_copies, chains=lambda c: c.lookup_conf.branches == 1,
                lookup=True)

METHODS: dict[str, Method] = {m.name: m for m in (VANILLA, CHAIN, EAGLE1, EAGLE2, LOOKUP,
                                                  hybrid(CHAIN), hybrid(EAGLE1), hybrid(EAGLE2))}


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
