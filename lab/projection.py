"""A speedup projected from a cycle's measured cost and a paper's τ, for targets whose own τ means nothing
(synthetic targets: random weights, eagle_infer.models.synthetic), and the published figures it is projected from.

PAPER_FIGURES are the EAGLE paper's results on its GPUs (Li et al., 2024), not this toolkit's, each with the table
it comes from, read from lab/published.py (the one transcription of ../shared/reference/paper-tables.md). Their τ
was measured with EAGLE's draft tree, EAGLE_TREE, so a projection times a cycle of that tree.
"""
from __future__ import annotations

from dataclasses import dataclass

from eagle_infer.errors import EagleError
from lab.published import TABLE2, TABLE7


@dataclass(frozen=True)
class PaperFigures:
    """One target's published MT-bench figures, greedy (T=0): τ (tokens per target forward, EAGLE's tree) and the
    measured speedup over vanilla decoding at batch size 1 (None where the paper reports none), with their sources."""

    tau: float
    tau_source: str
    speedup: float | None = None
    speedup_source: str | None = None


# registry name -> the EAGLE paper's figures for that target
PAPER_FIGURES: dict[str, PaperFigures] = {
    "vicuna-7b": PaperFigures(TABLE2["Vicuna 7B"]["tau"], "EAGLE, Table 2", TABLE7["Vicuna 7B"][1],
                              "EAGLE, Table 7, batch size 1"),
    "vicuna-13b": PaperFigures(TABLE2["Vicuna 13B"]["tau"], "EAGLE, Table 2"),
    "llama2-chat-7b": PaperFigures(TABLE2["LLaMA2-Chat 7B"]["tau"], "EAGLE, Table 2"),
}

# EAGLE's static draft tree (the default tree of the EAGLE reference code, model/choices.py): 25 nodes, depth 5, the
# root's top 4; each path lists child ranks from the root (rank 0 = the head's top-1), as InferConf.static_paths.
EAGLE_TREE: tuple[tuple[int, ...], ...] = (
    (0,), (1,), (2,), (3,),
    (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0),
    (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 0), (0, 1, 1), (0, 2, 0), (0, 2, 1), (1, 0, 0),
    (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2),
    (0, 0, 0, 0, 0), (0, 0, 0, 0, 1),
)


def projected_speedup(tau: float, vanilla_step_ms: float, draft_ms: float, verify_ms: float) -> float:
    """τ × vanilla step / (draft + verify per cycle): tokens per ms of a cycle that emits τ tokens over vanilla
    decoding's one token per step. A projection from costs, not a measured speedup."""
    for name, value in (("tau", tau), ("vanilla step ms", vanilla_step_ms), ("draft ms", draft_ms),
                        ("verify ms", verify_ms)):
        if not value > 0:
            raise EagleError(f"{name} {value!r} is invalid for a projected speedup: expected a positive number")
    return tau * vanilla_step_ms / (draft_ms + verify_ms)
