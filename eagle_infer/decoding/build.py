"""Building what the schemas describe: the draft head an InferConf asks for, the auto budget's cost model (measured
on this machine, or read from its cache), and an Engine over a loaded target."""
from __future__ import annotations

from pathlib import Path

from ..config import InferConf
from ..trees.cost import CostModel
from ..trees.cost_measure import load_or_measure
from ..head.draft_head import DraftHead, random_head
from .engine import Engine, checked
from .methods import method_of, tree_size
from ..errors import EagleError
from ..head.head_checkpoint import load_head
from ..head.head_runner import HeadRunner, runner_for
from ..models.synthetic import is_synthetic

SHIPPED_HEADS_DIR = Path(__file__).resolve().parent.parent / "shipped_heads"


def shipped_head_dir(model_name: str) -> Path:
    """The head shipped for a registry model (eagle_infer/shipped_heads/<model>); a one-line error when there is none."""
    path = SHIPPED_HEADS_DIR / model_name
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
    return load_head_for(infer, target) if method_of(infer).head else None


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


def measure_cost(infer: InferConf, target, head: DraftHead | HeadRunner | None) -> CostModel | None:
    """The cost model an auto budget sizes its trees from: this machine's timings of `target` and `head` (cached per
    machine, model, dtype and head shape: eagle_infer.trees.cost_measure), measured when the cache has none; None under
    a fixed budget. A config the engine would refuse is refused first (one-line errors), before any timing."""
    config = checked(infer, target, head)
    return cost_of(config, target, runner_for(head, target) if method_of(config).head else None)


def cost_of(config: InferConf, target, runner: HeadRunner | None) -> CostModel | None:
    """measure_cost for a config already checked (engine.checked) and its head's runner."""
    if config.budget != "auto":
        return None
    return load_or_measure(target, runner, config.top_k, 1 + tree_size(config))


def build_engine(infer: InferConf, target, head=None, drafter=None) -> Engine:
    """An Engine for `target` configured by `infer`: its head loaded unless given, the config checked and the head's
    runner built once, the auto budget's cost model measured (cost_of); `drafter` replaces the method's (Engine's
    argument)."""
    if head is None:
        head = build_head(infer, target)
    config = checked(infer, target, head)
    runner = runner_for(head, target) if method_of(config).head else None
    return Engine(target, runner, config, drafter, cost_of(config, target, runner))
