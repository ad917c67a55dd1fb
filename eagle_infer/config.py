"""Typed configuration of the model and inference groups (Hydra schemas), and building an Engine from them."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from .errors import EagleError

HEADS_DIR = Path(__file__).resolve().parent / "heads"
AUTO_MAX_DEPTH, AUTO_MAX_TOKENS = 8, 64  # the caps of infer.depth=auto / infer.total_tokens=auto


@dataclass
class ModelConf:
    """name: registry name, Hugging Face id or local directory."""

    name: str = "smollm2-135m"
    dtype: str = "auto"  # bfloat16 on GPUs and CPUs with native bfloat16 matmuls, else float32 (see target.resolve_dtype)
    device: str = "auto"
    # auto | on | off: linear weights packed once for oneDNN, bfloat16 on CPUs with native bfloat16 matmuls
    # (eagle_infer.packed; auto packs exactly there)
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
    """method: vanilla | chain | eagle1 | eagle2 | lookup (prompt lookup alone, no head). lookup: merge prompt
    lookup branches into the head's tree each cycle (chain, eagle1, eagle2; settings in the `lookup` group). head:
    "shipped" (the head in eagle_infer/heads/<model>), "random" (untrained, for trying the engine), or a head
    directory. batch_size: requests decoded together (eval answers questions in batches of it); max_batch_size
    refuses larger batches; batch_token_budget: most tokens of one verification forward over the whole batch,
    shrinking trees as the batch grows (0 = off). Every DecodeConfig field but lookup_conf (the `lookup` group)
    appears here under its own name (top_k: EAGLE-2's expansion width); sampling_top_k is the sampling filter
    (SamplingParams.sampling_top_k)."""

    method: str = "eagle2"
    head: str = "shipped"
    depth: Any = 6  # or "auto": up to AUTO_MAX_DEPTH levels, stopping per cycle when a level cannot pay
    top_k: int = 8
    # or "auto": up to AUTO_MAX_TOKENS nodes, as many per cycle as pay (eagle_infer/cost.py); for method lookup,
    # "auto" verifies as much of the copied chains (up to lookup.num_tokens x branches) as pays
    total_tokens: Any = 32
    static_paths: Optional[list[Any]] = None
    expand_by: str = "value"
    rerank: bool = True
    lookup: bool = False
    temperature: float = 0.0
    top_p: float = 1.0
    sampling_top_k: int = 0
    max_new_tokens: int = 128
    seed: int = 0
    batch_size: int = 1
    max_batch_size: int = 16
    batch_token_budget: int = 0
    budget: str = "fixed"  # "auto" when depth or total_tokens is "auto" (then they are caps)
    # decode through the target's forward compiled by torch.compile (eagle_infer/compiled.py); off by default: on
    # the CPUs measured it pays per step but costs minutes of compiling per process (README, "Compiled forward")
    compile: bool = False
    # auto | on | off: pad each cycle's trees to a power-of-two number of nodes (tree.padded_width), so verification
    # forwards come in few shapes; auto pads exactly where that pays, a target compiled on a GPU (one CUDA graph per
    # shape). The auto budget then verifies the whole bucket, since its padding costs the same as real nodes.
    pad_trees: str = "auto"


def shipped_head_dir(model_name: str) -> Path:
    path = HEADS_DIR / model_name
    if not (path / "config.json").exists():
        raise EagleError(
            f"no shipped draft head for model {model_name!r}: train one (make train MODEL={model_name}), "
            "give infer.head=<directory>, or try infer.head=random"
        )
    return path


def build_head(infer: InferConf, target):
    """The draft head an InferConf asks for (None for the headless methods vanilla and lookup)."""
    from .draft_head import load_head, random_head

    if infer.method in ("vanilla", "lookup"):
        return None
    if infer.head == "random":
        return random_head(target, seed=infer.seed)
    return load_head(shipped_head_dir(target.name) if infer.head == "shipped" else infer.head, target)


def decode_config(infer: InferConf, lookup: LookupConf | None = None):
    """The DecodeConfig of an InferConf and the `lookup` group: each DecodeConfig field is read by name from the
    InferConf field of the same name (one schema, tests/test_engine_errors.py checks it), but lookup_conf, which is
    the lookup group's settings."""
    from dataclasses import fields

    from .engine import DecodeConfig

    values = {f.name: getattr(infer, f.name) for f in fields(DecodeConfig) if f.name != "lookup_conf"}
    for name, cap in (("depth", AUTO_MAX_DEPTH), ("total_tokens", AUTO_MAX_TOKENS)):
        if values[name] == "auto":
            values[name], values["budget"] = cap, "auto"
    if values["static_paths"] is not None:
        values["static_paths"] = [list(p) for p in values["static_paths"]]
    return DecodeConfig(**values, lookup_conf=lookup or LookupConf())


def sampling_params(infer: InferConf):
    from .verify import SamplingParams

    return SamplingParams(temperature=infer.temperature, top_p=infer.top_p, sampling_top_k=infer.sampling_top_k)


def build_engine(infer: InferConf, target, head=None, lookup: LookupConf | None = None):
    """An Engine for `target` configured by `infer` and `lookup` (head loaded unless given)."""
    from .engine import Engine

    config = decode_config(infer, lookup)
    config.validate(target.vocab_size)
    return Engine(target, head if head is not None else build_head(infer, target), config)
