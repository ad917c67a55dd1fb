"""Which way a hybrid drafts a request's next cycle (eagle2+lookup and the other head+lookup hybrids under an auto
budget): its head's tree alone, its copies merged into it, or its copies alone.

The budget sizes each merged tree by the values it is given; where those values mislead it (copies priced by a
request's average rate, a head confident where the text turns), a hybrid can verify large trees that emit less per
millisecond than its head's tree alone; and where the text repeats itself, the copies alone emit as much as the
merged tree without the head's forwards (no levels drafted, nothing fed: the head's inputs wait, and the next cycle
that drafts with the head feeds them in one forward). So each request keeps score of what its cycles emitted per
predicted millisecond (the cost model's price of the cycle's head forwards and verification) per way, and drafts
the way that emitted more: the first WARM cycles merged, the next WARM with the head alone, then the best way, the
merged one tried once every EXPLORE cycles of another (and the head alone every EXPLORE merged ones). A merged cycle
also scores the copies alone as they would have done: the accepted path's leading copied nodes plus the bonus token,
at the price of verifying the tree's copied nodes with no head forward; so copies never cost a cycle to explore.
Scores decay by DECAY per cycle scored, so a request whose text changes is followed. Tokens and predicted costs,
not wall-clock time, keep the choice deterministic: a seeded request drafts the same trees every run. Which trees
are verified never changes what is emitted (greedy output stays the target's own; sampling stays exact).
"""
from __future__ import annotations

from dataclasses import dataclass, field

WARM = 2  # cycles merged, then with the head alone, before choosing
EXPLORE = 4  # cycles of the chosen way before another is tried once more
DECAY = 0.6  # per cycle scored, what an older cycle's score still weighs

HEAD, MERGED, COPIES = 0, 1, 2  # the ways: the head's tree alone, the copies merged into it, the copies alone


@dataclass
class CopyChoice:
    """A request's score per way (HEAD, MERGED, COPIES): decayed tokens emitted and predicted ms, cycles scored
    that way; since: cycles since a way other than the best was last drafted."""

    tokens: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    ms: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    cycles: list[int] = field(default_factory=lambda: [0, 0, 0])
    since: int = 0

    def warm(self) -> bool:
        """Whether the warm-up (WARM cycles merged, then WARM with the head alone) is over."""
        return self.cycles[MERGED] >= WARM and self.cycles[HEAD] >= WARM

    def best(self) -> int:
        """The way that emitted the most per predicted ms so far (ties: merged, then the head alone)."""
        best = MERGED
        for way in (HEAD, COPIES):
            if self.cycles[way] and self.tokens[way] * self.ms[best] > self.tokens[best] * self.ms[way]:
                best = way
        return best

    def way(self) -> int:
        """The way the next cycle drafts: warming up, the best one, or once every EXPLORE cycles another (the merged
        tree, which also scores the copies alone; beside a best merged tree, the head alone)."""
        if self.cycles[MERGED] < WARM:
            return MERGED
        if self.cycles[HEAD] < WARM:
            return HEAD
        best = self.best()
        if self.since < EXPLORE:
            return best
        return HEAD if best == MERGED else MERGED

    def update(self, way: int, tokens: int, ms: float, alone: tuple[int, float] | None = None) -> None:
        """Score a cycle drafted `way` that emitted `tokens` (accepted + bonus) at a predicted `ms`; alone: for a
        merged cycle, what its copies alone would have emitted and cost (tokens, ms)."""
        warm = self.warm()
        explored = warm and way != self.best()
        self._score(way, tokens, ms)
        if alone is not None:
            self._score(COPIES, *alone)
        self.since = 0 if explored or not warm else self.since + 1

    def _score(self, way: int, tokens: float, ms: float) -> None:
        self.tokens[way] = DECAY * self.tokens[way] + tokens
        self.ms[way] = DECAY * self.ms[way] + ms
        self.cycles[way] += 1
