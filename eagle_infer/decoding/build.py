"""Building what the schemas describe: the draft head an InferConf asks for, the auto budget's cost model (measured
on this machine, or read from its cache), and an Engine over a loaded target."""
from __future__ import annotations

from pathlib import Path

from ..config import InferConf
from ..trees.cost import CostModel
from ..trees.cost_measure import load_or_measure
from ..head.block_runner import BlockRunner
from ..head.dflash_head import DFlashHead, random_dflash_head
from ..head.draft_head import SavedHead, random_head
from ..head.mask_token import default_mask_token
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


def random_block_drafter(target, seed: int) -> DFlashHead:
    """An untrained DFlash drafter of the target's shape (dflash_head.random_dflash_head's defaults), masking with
    the target's default mask token (mask_token.default_mask_token)."""
    return random_dflash_head(target, default_mask_token(target), seed=seed)


# infer.head=random: the untrained head of each block a method drafts with (its registry entry's blocks[0])
RANDOM_HEADS = {"eagle": random_head, "dflash": random_block_drafter}


def build_head(infer: InferConf, target) -> HeadRunner | BlockRunner | None:
    """The draft head an InferConf asks for, ready to draft for `target` (None for the headless methods vanilla and
    lookup: their registry entry needs none), else `load_head_for(infer, target)`."""
    return load_head_for(infer, target) if method_of(infer).head else None


def load_head_for(infer: InferConf, target) -> HeadRunner | BlockRunner:
    """The draft head infer.head names ("shipped", "random" or a head directory), drafting from infer.draft_vocab.
    A random head (and a synthetic target's shipped head: its weights are random too) is of the first block the
    method drafts with (an EAGLE head; a DFlash drafter for dflash, dflash-tree and their hybrids); a loaded one is
    whatever its directory holds (the engine refuses a block its method does not draft with)."""
    if infer.head == "random" or (infer.head == "shipped" and is_synthetic(target.name)):
        module = RANDOM_HEADS[method_of(infer).blocks[0]](target, seed=infer.seed)
    else:
        module = load_head(shipped_head_dir(target.name) if infer.head == "shipped" else infer.head, target)
    if infer.draft_vocab == "full":
        module.use_full_vocabulary()
    return runner_for(module, target)


def measure_cost(infer: InferConf, target, head: SavedHead | HeadRunner | BlockRunner | None) -> CostModel | None:
    """The cost model an auto budget sizes its trees from: this machine's timings of `target` and `head` (cached per
    machine, model, dtype and head shape: eagle_infer.trees.cost_measure), measured when the cache has none; None under
    a fixed budget. A config the engine would refuse is refused first (one-line errors), before any timing."""
    config = checked(infer, target, head)
    return cost_of(config, target, runner_for(head, target) if method_of(config).head else None)


def cost_of(config: InferConf, target, runner: HeadRunner | BlockRunner | None) -> CostModel | None:
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
