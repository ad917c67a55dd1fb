"""Whether a hybrid's copies pay for a request (eagle2+lookup and the other head+lookup hybrids under an auto budget).

The budget sizes each merged tree by the values it is given; where those values mislead it (copies priced by a
request's average rate, a head confident where the text turns), a hybrid can verify large trees that emit less per
millisecond than its head's tree alone. So each request also keeps score of what its cycles emitted per predicted
millisecond (the cost model's price of the cycle's draft levels and verification), with its copies merged and
without (its head's tree alone, no copy search), and drafts the way that emitted more: the first WARM cycles with
copies, the next WARM without, then the better one, the other tried once every EXPLORE cycles. Scores decay by DECAY
per cycle of their way, so a request whose text changes is followed. Tokens and predicted costs, not wall-clock time,
keep the choice deterministic: a seeded request drafts the same trees every run and in any batch. Which trees are
verified never changes what is emitted (greedy output stays the target's own; sampling stays exact).
"""
from __future__ import annotations

from dataclasses import dataclass, field

WARM = 2  # cycles of each way before choosing
EXPLORE = 4  # cycles of the chosen way before the other is tried once more
DECAY = 0.6  # per cycle of its way, what an older cycle's score still weighs


@dataclass
class CopyChoice:
    """A request's score per way (index 0: its head's tree alone, 1: with its copies merged): decayed tokens
    emitted and predicted ms, cycles drafted that way; since: cycles since the way not chosen was last tried."""

    tokens: list[float] = field(default_factory=lambda: [0.0, 0.0])
    ms: list[float] = field(default_factory=lambda: [0.0, 0.0])
    cycles: list[int] = field(default_factory=lambda: [0, 0])
    since: int = 0

    def best(self) -> bool:
        """Whether merging copies has emitted more per predicted ms (ties: with them)."""
        return self.tokens[1] * self.ms[0] >= self.tokens[0] * self.ms[1]

    def with_copies(self) -> bool:
        """Whether the next cycle merges the request's copies: warming up, the better way, or the other one for a
        cycle every EXPLORE."""
        if self.cycles[1] < WARM:
            return True
        if self.cycles[0] < WARM:
            return False
        return self.best() != (self.since >= EXPLORE)

    def update(self, with_copies: bool, tokens: int, ms: float) -> None:
        """Score a cycle drafted `with_copies` (as with_copies() said) that emitted `tokens` (accepted + bonus) at
        a predicted `ms`."""
        warm = min(self.cycles) >= WARM
        explored = warm and with_copies != self.best()
        i = int(with_copies)
        self.tokens[i] = DECAY * self.tokens[i] + tokens
        self.ms[i] = DECAY * self.ms[i] + ms
        self.cycles[i] += 1
        self.since = 0 if explored or not warm else self.since + 1
