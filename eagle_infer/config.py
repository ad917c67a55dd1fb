"""Typed configuration of the model and inference groups (Hydra schemas), and building an Engine from them."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from .errors import EagleError

HEADS_DIR = Path(__file__).resolve().parent / "heads"


@dataclass
class ModelConf:
    """name: registry name, Hugging Face id or local directory."""

    name: str = "smollm2-135m"
    dtype: str = "auto"  # bfloat16 on GPUs and CPUs with native bfloat16 matmuls, else float32 (see target.resolve_dtype)
    device: str = "auto"


@dataclass
class InferConf:
    """method: vanilla | chain | eagle1 | eagle2. head: "shipped" (the head in eagle_infer/heads/<model>),
    "random" (untrained, for trying the engine), or a head directory. batch_size: requests decoded together (eval
    answers questions in batches of it); max_batch_size refuses larger batches; batch_token_budget: most tokens of
    one verification forward over the whole batch, shrinking trees as the batch grows (0 = off)."""

    method: str = "eagle2"
    head: str = "shipped"
    depth: int = 6
    top_k: int = 8
    total_tokens: int = 32
    static_paths: Optional[list[Any]] = None
    expand_by: str = "value"
    rerank: bool = True
    temperature: float = 0.0
    top_p: float = 1.0
    sampling_top_k: int = 0
    max_new_tokens: int = 128
    seed: int = 0
    batch_size: int = 1
    max_batch_size: int = 16
    batch_token_budget: int = 0


def shipped_head_dir(model_name: str) -> Path:
    path = HEADS_DIR / model_name
    if not (path / "config.json").exists():
        raise EagleError(
            f"no shipped draft head for model {model_name!r}: train one (make train MODEL={model_name}), "
            "give infer.head=<directory>, or try infer.head=random"
        )
    return path


def build_head(infer: InferConf, target):
    """The draft head an InferConf asks for (None for vanilla)."""
    from .draft_head import load_head, random_head

    if infer.method == "vanilla":
        return None
    if infer.head == "random":
        return random_head(target, seed=infer.seed)
    return load_head(shipped_head_dir(target.name) if infer.head == "shipped" else infer.head, target)


def decode_config(infer: InferConf):
    from .engine import DecodeConfig

    paths = None if infer.static_paths is None else [list(p) for p in infer.static_paths]
    return DecodeConfig(
        infer.method, infer.depth, infer.top_k, infer.total_tokens, paths, infer.expand_by, infer.rerank,
        infer.max_batch_size, infer.batch_token_budget,
    )


def sampling_params(infer: InferConf):
    from .verify import SamplingParams

    return SamplingParams(infer.temperature, infer.top_p, infer.sampling_top_k)


def build_engine(infer: InferConf, target, head=None):
    """An Engine for `target` configured by `infer` (head loaded unless given)."""
    from .engine import Engine

    config = decode_config(infer)
    config.validate(target.vocab_size)
    return Engine(target, head if head is not None else build_head(infer, target), config)
