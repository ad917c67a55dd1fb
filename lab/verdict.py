"""Whether a published finding holds on our target: one verdict per finding, by a stated rule over one number.

Each finding is a claim about an effect, measured in the same units in the paper and here:
- `Larger(paper)`: the claim is that an effect is positive (a gain, a drop, a gap). It holds when ours is at least
  half the paper's, holds weaker when it is positive but smaller, and does not hold when it is zero or reversed.
  Where the paper states the direction without a figure (paper=None), a positive effect holds.
- `AtMost(limit)`: the claim is that a spread is small. It holds within the limit, holds weaker within twice it.
- `Near(value, tolerance)`: the claim is a value (a calibration rate). It holds within the tolerance, holds weaker
  within twice it.
A finding without our figure yet is pending.
"""
from __future__ import annotations

from dataclasses import dataclass

from eagle_infer.errors import EagleError

HOLDS, WEAKER, FAILS, PENDING = "holds", "holds weaker", "does not hold", "pending"


@dataclass(frozen=True)
class Larger:
    paper: float | None  # the paper's effect (None: a direction stated without a figure)

    def judge(self, ours: float) -> str:
        if ours <= 0:
            return FAILS
        if self.paper is None or ours >= 0.5 * self.paper:
            return HOLDS
        return WEAKER

    def __str__(self) -> str:
        if self.paper is None:
            return "holds if > 0"
        return f"holds if ≥ {0.5 * self.paper:.3g} (half the paper's {self.paper:.3g}), weaker if > 0"


@dataclass(frozen=True)
class AtMost:
    limit: float

    def judge(self, ours: float) -> str:
        return HOLDS if ours <= self.limit else WEAKER if ours <= 2 * self.limit else FAILS

    def __str__(self) -> str:
        return f"holds if ≤ {self.limit:.3g}, weaker if ≤ {2 * self.limit:.3g}"


@dataclass(frozen=True)
class Near:
    value: float
    tolerance: float

    def judge(self, ours: float) -> str:
        off = abs(ours - self.value)
        return HOLDS if off <= self.tolerance else WEAKER if off <= 2 * self.tolerance else FAILS

    def __str__(self) -> str:
        return f"holds if within {self.tolerance:.3g} of {self.value:.3g}, weaker if within {2 * self.tolerance:.3g}"


Rule = Larger | AtMost | Near


def verdict(rule: Rule, ours: float | None) -> str:
    """The verdict of `rule` on our effect; PENDING without one."""
    if ours is None:
        return PENDING
    if ours != ours:  # NaN: a figure computed from nothing is a bug upstream, not a verdict
        raise EagleError(f"effect {ours!r} is not a number: expected a measured effect or None (pending)")
    return rule.judge(ours)
