"""One evaluator for every declared finding (lab.declared_findings): a measure, picked by the declaration's `effect`,
makes our number and its text from the figures the declaration reads; a rule, picked by its `rule`, sets that number
against the paper's effect (lab.published.PAPER_EFFECTS) and gives the verdict (lab.verdict).

A measure takes the declaration, the figures it reads (in its order; None where not measured yet) and what they are
(Refs of runs, or row names) and returns a Measured. Nothing here names a run, a row or a benchmark.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable

from eval.metrics import alpha, calibration
from lab import figure_text as ft
from lab.declaration import Declared
from lab.published import PAPER_EFFECTS
from lab.verdict import AtMost, Larger, Near, Rule, verdict



@dataclass
class Finding:
    """One published claim: the paper's figure, ours, the effect both are judged by, and the verdict."""

    claim: str
    paper: str
    rule: Rule
    ours: str
    effect: float | None
    source: str
    reason: str = ""

    @property
    def verdict(self) -> str:
        return verdict(self.rule, self.effect)


@dataclass
class Measured:
    ours: str  # our figures as the page shows them
    effect: float | None  # the number the rule judges; None while a figure is missing
    reason: str = ""  # what the page adds about how it was measured


RULES: dict[str, Callable[[float | None, float | None], Rule]] = {
    "larger": lambda paper, tolerance: Larger(paper),
    "at_most": lambda paper, tolerance: AtMost(paper),
    "near": lambda paper, tolerance: Near(paper, tolerance),
}


def evaluate(d: Declared, values: list, refs: list, source: str, reason: str = "") -> Finding:
    """The declared finding `d` judged on `values`, the figures it reads (`refs`: what they are) from `source`;
    `reason` (a pending row, a `because`) stands before the measure's own reason and the declared note."""
    paper, paper_effect = PAPER_EFFECTS[d.paper]
    measured = MEASURES[d.effect](d, values, refs)
    note = d.note + (f"; our tolerance {d.tolerance}" if d.rule == "near" and d.note else "")
    return Finding(d.claim, paper, RULES[d.rule](paper_effect, d.tolerance), measured.ours, measured.effect, source,
                   reason or measured.reason or note)


def gain(d: Declared, values: list, refs: list) -> Measured:
    """b / a − 1 of [a, b] (and, with `also`, the text of that figure's change: values[2:4])."""
    a, b = values[:2]
    ours = ft.figure_change_text(a, b, d.figure)
    if d.also and None not in values[2:4]:
        ours += f"; {d.also} " + ft.figure_change_text(*values[2:4], d.also)
    return Measured(ours, ft.change(a, b))


def drop(d: Declared, values: list, refs: list) -> Measured:
    """1 − b / a of [a, b]: how much lower b is."""
    return Measured(ft.figure_change_text(*values, d.figure), ft.drop(*values))


def difference(d: Declared, values: list, refs: list) -> Measured:
    """a − b of [a, b], shown with `labels`."""
    a, b = values
    return Measured(ft.pair(d.labels[0], a, d.labels[1], b), ft.diff(a, b))


def increase(d: Declared, values: list, refs: list) -> Measured:
    """b − a of [a, b], shown as "a → b (+b − a)"."""
    a, b = values
    unit, grown = ft.UNITS.get(d.figure, {}).get("unit", ""), ft.diff(b, a)
    return Measured("—" if grown is None else f"{a:.2f}{unit} → {b:.2f}{unit} ({grown:+.2f}{unit})", grown)


def above_one(d: Declared, values: list, refs: list) -> Measured:
    """a − 1 of [a] (a ratio to a baseline), shown at the batch size it was measured at."""
    [a] = values
    return Measured("—" if a is None else f"{a:.2f}x at batch {refs[0].batch}", ft.diff(a, 1.0))


def keeps_rising(d: Declared, values: list, refs: list) -> Measured:
    """τ's gain from small[0] to large[0] minus that from small[1] to large[1]: values small + large."""
    small, large = values[:2], values[2:]
    with_test, without = (ft.diff(b, a) for a, b in zip(small, large))
    ours = ("—" if with_test is None or without is None else
            f"τ gain {with_test:+.2f} with the test, {without:+.2f} without")
    return Measured(ours, ft.diff(with_test, without))


def lead(d: Declared, values: list, refs: list) -> Measured:
    """How far the first benchmark's figure is above the best other's (relative)."""
    by_bench = {r.bench: v for r, v in zip(refs, values)}
    effect = ft.lead(by_bench)
    return Measured(ft.listed(by_bench, d.figure != "tau"), effect,
                    "" if effect is None else f"highest here: {max(by_bench, key=by_bench.get)}")


def spread(d: Declared, values: list, refs: list) -> Measured:
    """max − min of the first half of the figures (rates), each kept when its count in the second half (the chains
    that reached it) is at least `min_count`."""
    rates, counts = values[: len(values) // 2], values[len(values) // 2:]
    kept = [rate for rate, count in zip(rates, counts) if count >= d.min_count]
    known = [v for v in kept if v is not None]
    width = max(known) - min(known) if len(known) > 1 else None
    return Measured("—" if width is None else f"spread {width:.2f} ({', '.join(map(ft.f, kept))})", width,
                    f"positions reached by ≥ {d.min_count} chains ({d.labels[0]}: "
                    f"{', '.join(map(str, counts))} chains)")


def falls(d: Declared, values: list, refs: list) -> Measured:
    """The first known rate minus the last (rates by depth, from depth 1)."""
    known = [v for v in values if v is not None]
    if len(known) < 2:
        return Measured("—", None)
    return Measured(f"{known[0]:.2f} at depth 1, {known[-1]:.2f} at depth {len(known)}", known[0] - known[-1])


def context_over_position(d: Declared, values: list, refs: list) -> Measured:
    """From answer records [records]: the spread of n-α across questions at one depth (the mean over depths of their
    standard deviation, questions whose chains reached the depth at least `min_count` times), minus the spread
    between depths (the standard deviation of the depths' pooled n-α)."""
    [records] = values
    depths = max((c["tree_depth"] for r in records for c in r["cycles"]), default=0)
    pooled, per_question = rates_by_depth(records, depths, d.min_count)
    pooled = [m for m in pooled if m is not None]
    spreads = [statistics.pstdev(qs) for qs in per_question if len(qs) > 1]
    within = sum(spreads) / len(spreads) if spreads else None
    between = statistics.pstdev(pooled) if len(pooled) > 1 else None
    if within is None or between is None:
        return Measured("—", None)
    return Measured(f"within a position across questions (sd) {within:.2f}, between positions {between:.2f}",
                    within - between)


def calibrated(d: Declared, values: list, refs: list) -> Measured:
    """From answer records [records]: the accepted share of the draft tokens in the `bucket` (first or last) of
    `bins` confidence buckets, when it holds at least `min_count` tokens."""
    [records] = values
    buckets = calibration(records, bins=d.bins)
    bucket = buckets[0] if d.bucket == "first" else buckets[-1]
    enough = bucket.n >= d.min_count
    return Measured("—" if bucket.rate is None else f"{bucket.rate:.1%} of {bucket.n} draft tokens",
                    bucket.rate if enough else None,
                    "" if enough else f"{bucket.n} draft tokens in the bucket, fewer than {d.min_count}")


def rates_by_depth(records: list[dict], depths: int, min_count: int) -> tuple[list, list[list[float]]]:
    """n-α at depths 0…depths−1: over every record's cycles pooled (None where no cycle reached it), and per
    question whose cycles reached the depth at least `min_count` times."""
    cycles = [c for r in records for c in r["cycles"]]
    return ([alpha(cycles, n) for n in range(depths)],
            [[alpha(r["cycles"], n) for r in records if reached(r["cycles"], n) >= min_count] for n in range(depths)])


def reached(cycles: list[dict], n: int) -> int:
    """How many cycles drafted past depth n with the n tokens before it accepted (n-α's denominator)."""
    return sum(1 for c in cycles if c["tree_depth"] > n and c["accepted"] >= n)


MEASURES: dict[str, Callable[[Declared, list, list], Measured]] = {
    m.__name__: m for m in (gain, drop, difference, increase, above_one, keeps_rising, lead, spread, falls,
                            context_over_position, calibrated)}
