"""Building what the schemas describe: the draft head an InferConf asks for, and an Engine over a loaded target."""
from __future__ import annotations

from pathlib import Path

from .config import InferConf
from .draft_head import random_head
from .engine import Engine
from .errors import EagleError
from .head_checkpoint import load_head
from .head_runner import HeadRunner
from .synthetic import is_synthetic

HEADS_DIR = Path(__file__).resolve().parent / "heads"


def shipped_head_dir(model_name: str) -> Path:
    """The head shipped for a registry model (eagle_infer/heads/<model>); a one-line error when there is none."""
    path = HEADS_DIR / model_name
    if not (path / "config.json").exists():
        raise EagleError(
            f"no shipped draft head for model {model_name!r}: train one (make train MODEL={model_name}), "
            "give infer.head=<directory>, try infer.head=random, or decode without a head: infer.method=lookup "
            "(prompt lookup alone) or infer.method=vanilla"
        )
    return path


def build_head(infer: InferConf, target) -> HeadRunner | None:
    """The draft head an InferConf asks for, ready to draft for `target` (None for the headless methods vanilla and
    lookup: their registry entry needs none), else `load_head_for(infer, target)`."""
    return load_head_for(infer, target) if infer.spec.head else None


def load_head_for(infer: InferConf, target) -> HeadRunner:
    """The draft head infer.head names ("shipped", "random" or a head directory), drafting from infer.draft_vocab,
    whatever the method. A synthetic target's shipped head is a random head of its shape (its weights are random
    too)."""
    if infer.head == "random" or (infer.head == "shipped" and is_synthetic(target.name)):
        module = random_head(target, seed=infer.seed)
    else:
        module = load_head(shipped_head_dir(target.name) if infer.head == "shipped" else infer.head, target)
    if infer.draft_vocab == "full":
        module.use_full_vocabulary()
    return HeadRunner(module, target)


def build_engine(infer: InferConf, target, head=None) -> Engine:
    """An Engine for `target` configured by `infer` (its head loaded unless given)."""
    return Engine(target, head if head is not None else build_head(infer, target), infer)
