"""The drafter blocks (head.block): which module each builds. A saved head's config.json names its block, and
loading, training and `infer.head=random` build it through `build_head`; a new block drafter (P-EAGLE, DSpark) is
one module and one entry here (docs/design.md, "Adding a block drafter")."""
from __future__ import annotations

from .dflash_head import DFlashHead
from .draft_head import DraftHead, DraftHeadConfig, SavedHead

DRAFTERS = {"eagle": DraftHead, "eagle3": DraftHead, "dflash": DFlashHead}


def build_head(config: DraftHeadConfig, target) -> SavedHead:
    """The untrained module of `config.block` for `target` (config.check() refuses an unknown block first)."""
    config.check()
    return DRAFTERS[config.block](config, target)
