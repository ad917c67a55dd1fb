"""The typed configuration of inference, the one schema Hydra reads and the engine runs on (`InferConf`), with the
model and prompt-lookup groups. Schemas only: building targets, heads and engines is `eagle_infer.decoding.build`'s job.

Tree settings: `depth` and `total_tokens` default to "auto", the measured-fastest lossless setting: EAGLE-2, prompt
lookup and their hybrid then choose their tree per cycle from a cost model measured on the running machine
(eagle_infer/trees/cost.py), with depth <= AUTO_MAX_DEPTH and at most AUTO_MAX_TOKENS nodes. Methods that cannot choose
per cycle (chain, eagle1, eagle2 without rerank) read "auto" as the paper's fixed values, FIXED_DEPTH and
FIXED_TOKENS; so does `budget="fixed"` (the fixed tree, one override away). An integer is a fixed setting, or a cap
when the other one is "auto" or budget is "auto"; the method registry's `resolve` (eagle_infer.decoding.methods)
turns the schema into the integers and the budget the engine runs. This module is the floor everything stands on: it
imports nothing of the project but its errors.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from .errors import EagleError, check_number

BUDGETS = ("fixed", "auto")
AUTO_ON_OFF = ("auto", "on", "off")  # infer.pad_trees, infer.plan_ahead
DRAFT_VOCABS = ("head", "full")  # infer.draft_vocab
AUTO_MAX_DEPTH, AUTO_MAX_TOKENS = 8, 64  # the caps of infer.depth=auto / infer.total_tokens=auto
FIXED_DEPTH, FIXED_TOKENS = 6, 32  # "auto" where a method cannot choose per cycle (EAGLE-2's paper tree, CPU-sized)
# The fastest lossless method measured (README): EAGLE-2 with prompt lookup merged in (the registry's "eagle2+lookup")
DEFAULT_METHOD = "eagle2+lookup"

# EAGLE-1 style static tree: each path lists child ranks from the root (rank 0 = the head's top-1). A CPU-sized
# default (26 nodes, depth 6): wide near the root where the head is surest, a long top-1 spine below.
DEFAULT_STATIC_PATHS: tuple[tuple[int, ...], ...] = (
    (0,), (1,), (2,), (3,),
    (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (3, 0),
    (0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 0), (0, 2, 0),
    (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 1, 0), (0, 1, 0, 0),
    (0, 0, 0, 0, 0), (0, 0, 0, 0, 1), (0, 0, 0, 1, 0),
    (0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 1), (0, 0, 0, 0, 1, 0),
)


@dataclass(frozen=True)
class SamplingParams:
    """temperature 0 means greedy; sampling_top_k 0 and top_p 1 disable those filters. (The filter is named
    sampling_top_k everywhere, Hydra's infer.sampling_top_k included, because `top_k` is EAGLE-2's expansion width.)"""

    temperature: float = 0.0
    top_p: float = 1.0
    sampling_top_k: int = 0

    def __post_init__(self):
        if self.temperature < 0:
            raise EagleError(f"temperature {self.temperature} is negative: expected >= 0 (0 = greedy)")
        if not 0 < self.top_p <= 1:
            raise EagleError(f"top_p {self.top_p} is out of range: expected 0 < top_p <= 1")
        if self.sampling_top_k < 0:
            raise EagleError(f"sampling_top_k {self.sampling_top_k} is negative: expected >= 0 (0 = off)")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class ModelConf:
    """name: registry name, Hugging Face id or local directory."""

    name: str = "smollm2-135m"
    dtype: str = "auto"  # bfloat16 on GPUs and CPUs with native bfloat16 matmuls, else float32 (platform.resolve_dtype)
    device: str = "auto"
    # auto | on | off: linear weights packed once for oneDNN; auto packs the CPU's native dtype (bfloat16 with native
    # bfloat16 matmuls, float32 without: eagle_infer.models.packed)
    pack: str = "auto"


MATCHES = ("leftmost", "recent")  # LookupConf.match


@dataclass
class LookupConf:
    """Prompt lookup (n-gram) drafting, the `lookup` group: the longest suffix of the context (n from max_ngram down
    to min_ngram) found earlier in the prompt and the text generated so far proposes the num_tokens tokens that
    followed it; match: which occurrence of the longest n, "leftmost" (transformers' rule) or "recent" (the latest,
    what a model repeating itself repeats). branches: most distinct continuations proposed per cycle (further
    matches, merged as a trie). choose: a head + lookup hybrid under an auto budget drafts each of a request's
    cycles the way that has emitted the most per predicted ms: its head's tree alone, the copies merged in, or the
    copies alone, the head not run (trees.copy_choice); false: always merged."""

    max_ngram: int = 2  # transformers' max_matching_ngram_size default
    min_ngram: int = 1
    num_tokens: int = 10
    branches: int = 1
    match: str = "leftmost"
    choose: bool = True

    def validate(self) -> None:
        if self.min_ngram < 1:
            raise EagleError(f"lookup.min_ngram {self.min_ngram} is invalid: expected >= 1")
        if self.min_ngram > self.max_ngram:
            raise EagleError(f"lookup.min_ngram {self.min_ngram} is invalid: expected <= lookup.max_ngram {self.max_ngram}")
        if self.num_tokens < 1:
            raise EagleError(f"lookup.num_tokens {self.num_tokens} is invalid: expected >= 1")
        if self.branches < 1:
            raise EagleError(f"lookup.branches {self.branches} is invalid: expected >= 1")
        if self.match not in MATCHES:
            raise EagleError(f"lookup.match {self.match!r} is invalid: expected one of {', '.join(MATCHES)}")


@dataclass
class InferConf:
    """How to decode: the `infer` group, and what Engine takes (each field's meaning beside it; "auto" tree settings:
    the module docstring)."""

    # a registered method (eagle_infer.decoding.methods): eagle2+lookup (the default: EAGLE-2 with prompt lookup merged in),
    # eagle2, eagle1, chain, dflash, dflash-tree (a DFlash drafter's block; and their +lookup hybrids), lookup (prompt
    # lookup alone, no head) or vanilla
    method: str = DEFAULT_METHOD
    head: str = "shipped"  # "shipped" (eagle_infer/shipped_heads/<model>), "random" (untrained) or a head directory
    # "head": draft from the head's own draft vocabulary; "full": from the target's whole vocabulary (a head that
    # borrows the target's LM head only: an EAGLE-1/2 block, never an eagle3 one with its own LM head)
    draft_vocab: str = "head"
    depth: Any = "auto"  # longest draft path (dflash: drafts of its block verified, "auto" all B - 1)
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
    def is_resolved(self) -> bool:
        """Whether depth and total_tokens are integers (methods.resolve turns "auto" into them)."""
        return "auto" not in (self.depth, self.total_tokens)

    def paths(self) -> list | tuple:
        """EAGLE-1's tree: static_paths, or DEFAULT_STATIC_PATHS when unset."""
        return DEFAULT_STATIC_PATHS if self.static_paths is None else self.static_paths

    def sampling(self) -> SamplingParams:
        """The verifier's SamplingParams of temperature, top_p and sampling_top_k."""
        check_number("temperature", self.temperature, 0)  # NaN and infinity, which SamplingParams' range test passes
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, sampling_top_k=self.sampling_top_k)
