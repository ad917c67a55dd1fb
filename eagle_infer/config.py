"""The typed configuration of inference, the one schema Hydra reads and the engine runs on (`InferConf`), with the
model and prompt-lookup groups. Schemas only: building targets, heads and engines is `eagle_infer.decoding.build`'s job.

Tree settings: `depth` and `total_tokens` default to "auto", the measured-fastest lossless setting: EAGLE-2, prompt
lookup and their hybrid then choose their tree per cycle from a cost model measured on the running machine
(eagle_infer/decoding/cost.py), with depth <= AUTO_MAX_DEPTH and at most AUTO_MAX_TOKENS nodes. Methods that cannot choose
per cycle (chain, eagle1, eagle2 without rerank) read "auto" as the paper's fixed values, FIXED_DEPTH and
FIXED_TOKENS; so does `budget="fixed"` (the fixed tree, one override away). An integer is a fixed setting, or a cap
when the other one is "auto" or budget is "auto"; `resolved()` turns the schema into the integers and the budget
the engine runs.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Optional

from .models.config_limits import check_number
from .errors import EagleError
from .decoding.methods import DEFAULT_METHOD, HYBRID, Method, method_named, with_lookup
from .trees.drafting import EXPAND_BY, Growth, growth
from .trees.tree import DEFAULT_STATIC_PATHS
from .decoding.verify import SamplingParams

BUDGETS = ("fixed", "auto")
AUTO_ON_OFF = ("auto", "on", "off")  # infer.pad_trees, infer.plan_ahead
DRAFT_VOCABS = ("head", "full")  # infer.draft_vocab
AUTO_MAX_DEPTH, AUTO_MAX_TOKENS = 8, 64  # the caps of infer.depth=auto / infer.total_tokens=auto
FIXED_DEPTH, FIXED_TOKENS = 6, 32  # "auto" where a method cannot choose per cycle (EAGLE-2's paper tree, CPU-sized)


@dataclass
class ModelConf:
    """name: registry name, Hugging Face id or local directory."""

    name: str = "smollm2-135m"
    dtype: str = "auto"  # bfloat16 on GPUs and CPUs with native bfloat16 matmuls, else float32 (platform.resolve_dtype)
    device: str = "auto"
    # auto | on | off: linear weights packed once for oneDNN; auto packs the CPU's native dtype (bfloat16 with native
    # bfloat16 matmuls, float32 without: eagle_infer.models.packed)
    pack: str = "auto"


@dataclass
class LookupConf:
    """Prompt lookup (n-gram) drafting, the `lookup` group: the longest suffix of the context (n from max_ngram down
    to min_ngram) found earlier in the prompt and the text generated so far proposes the num_tokens tokens that
    followed it (transformers' rule: leftmost match of the longest n). branches: most distinct continuations
    proposed per cycle (further matches, merged as a trie)."""

    max_ngram: int = 2  # transformers' max_matching_ngram_size default
    min_ngram: int = 1
    num_tokens: int = 10
    branches: int = 1

    def validate(self) -> None:
        if self.min_ngram < 1:
            raise EagleError(f"lookup.min_ngram {self.min_ngram} is invalid: expected >= 1")
        if self.min_ngram > self.max_ngram:
            raise EagleError(f"lookup.min_ngram {self.min_ngram} is invalid: expected <= lookup.max_ngram {self.max_ngram}")
        if self.num_tokens < 1:
            raise EagleError(f"lookup.num_tokens {self.num_tokens} is invalid: expected >= 1")
        if self.branches < 1:
            raise EagleError(f"lookup.branches {self.branches} is invalid: expected >= 1")


@dataclass
class InferConf:
    """How to decode: the `infer` group, and what Engine takes (each field's meaning beside it; "auto" tree settings:
    the module docstring)."""

    # a registered method (eagle_infer.decoding.methods): eagle2+lookup (the default: EAGLE-2 with prompt lookup merged in),
    # eagle2, eagle1, chain (and their +lookup hybrids), lookup (prompt lookup alone, no head) or vanilla
    method: str = DEFAULT_METHOD
    head: str = "shipped"  # "shipped" (eagle_infer/heads/<model>), "random" (untrained) or a head directory
    # "head": draft from the head's own draft vocabulary; "full": from the target's whole vocabulary (a head that
    # borrows the target's LM head only: an EAGLE-1/2 block, never an eagle3 one with its own LM head)
    draft_vocab: str = "head"
    depth: Any = "auto"  # longest draft path
    top_k: int = 8  # EAGLE-2's expansion width: nodes expanded per level, children kept per node
    total_tokens: Any = "auto"  # EAGLE-2's draft budget (root excluded)
    static_paths: Optional[list[Any]] = None  # EAGLE-1's tree of child ranks (None: tree.DEFAULT_STATIC_PATHS)
    expand_by: str = "value"  # EAGLE-2 expands by path value or by the node's own confidence
    rerank: bool = True  # EAGLE-2 keeps the best total_tokens by value (else the expanded nodes level by level)
    lookup: bool = False  # merge prompt lookup's copies into a head's tree (method X -> X+lookup) within its budget
    lookup_conf: LookupConf = field(default_factory=LookupConf)  # the command line's `lookup` group
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    sampling_top_k: int = 0  # the sampling filter (top_k is EAGLE-2's width); 0: off
    max_new_tokens: int = 128
    seed: int = 0
    batch_size: int = 1  # requests decoded together (eval answers in batches of it), at most max_batch_size
    max_batch_size: int = 16
    batch_token_budget: int = 0  # most tokens of one verification forward over the batch (trees shrink); 0: off
    # "fixed": total_tokens nodes every cycle; "auto": depth and total_tokens are caps, the tree chosen per cycle;
    # None: "auto" where depth or total_tokens is "auto" and the method can choose per cycle, else "fixed"
    budget: Optional[str] = None
    compile: bool = False  # the target's forward compiled by torch.compile (minutes of warm-up on a CPU)
    # "on": verifications padded to tree.padded_width nodes (slots that see only the root and themselves, never
    # accepted); "auto": exactly where the target is compiled on a GPU (one CUDA graph per width); "off"
    pad_trees: str = "auto"
    # With budget "auto", when the budget's choice is read: "on": once a cycle, beside acceptance, the next cycle
    # following it (no host read while drafting; what CUDA graphs and an asynchronous GPU queue need); "off": as
    # the cycle drafts, before each level and at its end (the cycle's own candidates decide, a read each); "auto":
    # "on" on a GPU, "off" on a CPU (where a host read costs nothing and deciding late costs speed)
    plan_ahead: str = "auto"

    @property
    def spec(self) -> Method:
        """The registry's entry of this config's method (its hybrid with lookup=true); unknown: a one-line error."""
        return with_lookup(self.method) if self.lookup else method_named(self.method)

    @property
    def growth(self) -> Growth:
        """How EAGLE-2 grows its trees under expand_by and rerank, chosen once per setting (drafting.growth)."""
        return growth(self.expand_by, self.rerank)

    @property
    def uses_lookup(self) -> bool:
        return self.spec.lookup

    @property
    def can_choose_per_cycle(self) -> bool:
        """Whether the method can take an auto budget (its entry's takes_auto: EAGLE-2 with rerank, alone or with
        lookup, or lookup)."""
        return self.spec.takes_auto(self)

    def resolved(self) -> "InferConf":
        """This config with its method named as registered (lookup=true: method X -> "X+lookup", and lookup true
        exactly for hybrids), its budget decided (see `budget`) and "auto" depth / total_tokens turned into
        integers: AUTO_MAX_DEPTH / AUTO_MAX_TOKENS caps under an auto budget, FIXED_DEPTH / FIXED_TOKENS under a
        fixed one; static paths as lists."""
        spec = self.spec
        budget = self.budget
        if budget is None:
            automatic = "auto" in (self.depth, self.total_tokens) and self.can_choose_per_cycle
            budget = "auto" if automatic else "fixed"
        values = {}
        for name, cap, fixed in (("depth", AUTO_MAX_DEPTH, FIXED_DEPTH), ("total_tokens", AUTO_MAX_TOKENS, FIXED_TOKENS)):
            if getattr(self, name) == "auto":
                values[name] = cap if budget == "auto" else fixed
        paths = None if self.static_paths is None else [list(p) for p in self.static_paths]
        return replace(self, **values, method=spec.name, lookup=spec.merges_lookup, budget=budget, static_paths=paths)

    def sampling(self) -> SamplingParams:
        """The verifier's SamplingParams of temperature, top_p and sampling_top_k."""
        check_number("temperature", self.temperature, 0)  # NaN and infinity, which SamplingParams' range test passes
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, sampling_top_k=self.sampling_top_k)

    def validate(self, vocab_size: int) -> None:
        """One-line errors for a resolved config that cannot decode with a vocabulary of vocab_size."""
        spec = self.spec  # an unknown method, or lookup=true beside one without a hybrid: one-line errors
        for name in ("depth", "top_k", "total_tokens"):
            if not isinstance(getattr(self, name), int):
                raise EagleError(f"{name} {getattr(self, name)!r} is invalid: expected an integer (or 'auto' for "
                                 "infer.depth / infer.total_tokens)")
        if self.draft_vocab not in DRAFT_VOCABS:
            raise EagleError(f"unknown draft_vocab {self.draft_vocab!r}: expected one of {', '.join(DRAFT_VOCABS)}")
        if self.pad_trees not in AUTO_ON_OFF:
            raise EagleError(f"unknown pad_trees {self.pad_trees!r}: expected one of {', '.join(AUTO_ON_OFF)}")
        if self.plan_ahead not in AUTO_ON_OFF:
            raise EagleError(f"unknown plan_ahead {self.plan_ahead!r}: expected one of {', '.join(AUTO_ON_OFF)}")
        if self.budget not in BUDGETS:
            raise EagleError(f"unknown budget {self.budget!r}: expected one of {', '.join(BUDGETS)}")
        if self.budget == "auto" and not self.can_choose_per_cycle:
            raise EagleError(f"budget 'auto' needs a method that chooses its tree per cycle (eagle2 with rerank, "
                             f"lookup, or their hybrids): got method {spec.name!r}, rerank {self.rerank}")
        if self.depth < 1:
            raise EagleError(f"depth {self.depth} is invalid: expected >= 1")
        if not 1 <= self.top_k <= vocab_size:
            raise EagleError(f"top_k {self.top_k} is invalid: expected 1 <= top_k <= vocabulary size {vocab_size}")
        if self.total_tokens < 1:
            raise EagleError(f"total_tokens {self.total_tokens} is invalid: expected >= 1")
        if self.max_batch_size < 1:
            raise EagleError(f"max_batch_size {self.max_batch_size} is invalid: expected >= 1")
        if not 1 <= self.batch_size <= self.max_batch_size:
            raise EagleError(f"batch_size {self.batch_size} is invalid: expected 1 <= batch_size <= max_batch_size "
                             f"{self.max_batch_size}")
        if self.batch_token_budget < 0:
            raise EagleError(f"batch_token_budget {self.batch_token_budget} is invalid: expected >= 0 (0 = off)")
        if self.expand_by not in EXPAND_BY:
            raise EagleError(f"unknown expand_by {self.expand_by!r}: expected one of {', '.join(EXPAND_BY)}")
        spec.check(self, vocab_size)
        if spec.lookup:
            self.lookup_conf.validate()
        if spec.merges_lookup and self.lookup_conf.num_tokens > self.tree_size():
            raise EagleError(f"lookup.num_tokens {self.lookup_conf.num_tokens} is beyond the tree budget: expected <= "
                             f"the {self.tree_size()} draft tokens of the {spec.name} tree (lower lookup.num_tokens, "
                             f"or drop lookup: infer.method={spec.name.removesuffix(HYBRID)})")

    @property
    def is_resolved(self) -> bool:
        """Whether depth and total_tokens are integers (the tree arithmetic below resolves them first otherwise)."""
        return "auto" not in (self.depth, self.total_tokens)

    def paths(self):
        return DEFAULT_STATIC_PATHS if self.static_paths is None else self.static_paths

    def tree_size(self) -> int:
        """Draft nodes of this config's tree (resolved first), before any batch budget."""
        if not self.is_resolved:
            return self.resolved().tree_size()
        return self.spec.tree_size(self)

    def tree_budget(self, batch: int = 1) -> int:
        """Most draft nodes one cycle verifies per row when `batch` rows decode together."""
        if not self.batch_token_budget:
            return self.tree_size()
        return min(self.tree_size(), max(1, self.batch_token_budget // batch - 1))

    def feed_budget(self) -> int:
        """Most tree nodes one cycle feeds to the draft head (its cache needs that much room past the context)."""
        if not self.is_resolved:
            return self.resolved().feed_budget()
        return self.spec.feed_budget(self)

    def at_batch(self, batch: int) -> "InferConf":
        """This config with the tree cut to tree_budget(batch): EAGLE-2 keeps fewer nodes (and drafts no deeper
        than it can keep), EAGLE-1 keeps its first paths in breadth-first order, a chain gets shorter, lookup
        copies fewer tokens (a merged tree is cut to the smaller budget as well)."""
        if not self.is_resolved:
            return self.resolved().at_batch(batch)
        n = self.tree_budget(batch)
        return self if n == self.tree_size() else self.spec.cut(self, n)
