"""Metrics computed from evaluation records only (see `eval.records`).

A cycle is one target forward pass verifying a draft tree, as a dict: tree_size and tree_depth (draft nodes /
deepest draft level, root excluded; 0 for vanilla decoding), accepted (0..tree_depth draft tokens accepted; the
pass also emits one bonus token), draft_s, verify_s (seconds), tested_conf and tested_hit (equal-length lists: the
draft confidence of each node whose parent was on the accepted path, and whether it was accepted), lookup_size and
lookup_accepted (tree nodes prompt lookup proposed, alone or with the head, and accepted tokens among them; absent
in older records).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, fields

from eagle_infer.errors import EagleError
from eval.records import record_key

ALL = "all"
ALPHA_POSITIONS = 5


@dataclass
class Row:
    """One (benchmark, method) line of the results table; benchmark `ALL` aggregates a method's records."""

    benchmark: str
    method: str
    questions: int
    new_tokens: int
    tok_s: float | None
    speedup_vs_vanilla: float | None
    speedup_vs_hf: float | None
    tau: float | None
    alpha_0: float | None
    alpha_1: float | None
    alpha_2: float | None
    alpha_3: float | None
    alpha_4: float | None
    identical_share: float | None
    lookup_share: float | None = None  # accepted draft tokens that prompt lookup proposed; None without lookup


ROW_COLUMNS = tuple(field.name for field in fields(Row))


@dataclass
class Bucket:
    """Calibration bucket: tested draft nodes with confidence in [low, high); `rate` = accepted share and
    `confidence` = their mean confidence (both None if n=0). Calibrated: rate = confidence."""

    low: float
    high: float
    n: int
    rate: float | None
    confidence: float | None = None


def tau(cycles: list[dict]) -> float | None:
    """Mean tokens emitted per target forward, mean(accepted + 1); None without cycles."""
    return _mean([cycle["accepted"] + 1 for cycle in cycles])


def alpha(cycles: list[dict], n: int) -> float | None:
    """n-α: among cycles that drafted past level n (tree_depth > n) and accepted >= n tokens, the share that
    accepted > n; None when no cycle qualifies."""
    reached = [cycle["accepted"] > n for cycle in cycles if cycle["tree_depth"] > n and cycle["accepted"] >= n]
    return _mean(reached)


def lookup_share(cycles: list[dict]) -> float | None:
    """Share of accepted draft tokens that prompt lookup proposed; None when no cycle drafted with lookup or none
    accepted a draft token."""
    if not any(cycle.get("lookup_size", 0) for cycle in cycles):
        return None
    return _ratio(sum(cycle.get("lookup_accepted", 0) for cycle in cycles), sum(cycle["accepted"] for cycle in cycles))


def summarize(records: list[dict], baseline_method: str = "vanilla", hf_method: str = "hf_generate") -> list[Row]:
    """Rows per (benchmark, method) in order of first appearance, then one `ALL` row per method.

    Speedups are tok/s ratios to the same benchmark's `baseline_method` / `hf_method` rows; identical_share
    compares generated `tokens` with the baseline's on questions both answered.
    """
    duplicates = [key for key, count in Counter(map(record_key, records)).items() if count > 1]
    if duplicates:
        raise EagleError(f"duplicate records for {duplicates[0]}; expected one per (benchmark, method, question_id)")
    groups = _groups(records)
    return [
        _row(
            benchmark,
            method,
            group,
            groups.get((benchmark, baseline_method)),
            groups.get((benchmark, hf_method)),
            compare_tokens=method != baseline_method,
        )
        for (benchmark, method), group in groups.items()
    ]


def accept_length_hist(records: list[dict]) -> dict[str, list[int]]:
    """Per method, counts[k] = number of drafting cycles (tree_depth > 0) that accepted k draft tokens."""
    hist: dict[str, list[int]] = {}
    for method, cycles in _cycles_by_method(records).items():
        accepted = [cycle["accepted"] for cycle in cycles if cycle["tree_depth"] > 0]
        if accepted:
            hist[method] = [accepted.count(k) for k in range(max(accepted) + 1)]
    return hist


def calibration(records: list[dict], bins: int = 10) -> list[Bucket]:
    """`bins` equal-width confidence buckets over [0, 1] of every tested draft node (tested_conf / tested_hit)."""
    if bins < 1:
        raise EagleError(f"calibration bins {bins!r} is not a positive number of buckets")
    counts, hits, confs = [0] * bins, [0] * bins, [0.0] * bins
    for conf, hit in _tested_nodes(records):
        index = min(int(conf * bins), bins - 1)
        counts[index] += 1
        hits[index] += hit
        confs[index] += conf
    return [
        Bucket(i / bins, (i + 1) / bins, counts[i], *((hits[i] / counts[i], confs[i] / counts[i]) if counts[i] else
                                                      (None, None)))
        for i in range(bins)
    ]


@dataclass
class CycleRow:
    """Where one (benchmark, method)'s time goes, per cycle (means; None for peers, which keep no cycles):
    draft and verify ms, tree nodes verified, draft tokens accepted and how many of them prompt lookup proposed;
    ms_per_head_forward: draft time over the draft head's forwards (one per level fed, plus feeding the accepted
    tokens; None without a head or in records that predate the count); ms_per_token: wall time over new tokens."""

    benchmark: str
    method: str
    cycles: int
    draft_ms: float | None
    verify_ms: float | None
    tree_nodes: float | None
    accepted: float | None
    copied_accepted: float | None
    ms_per_head_forward: float | None
    ms_per_token: float | None


def cycle_split(records: list[dict]) -> list[CycleRow]:
    """One CycleRow per (benchmark, method) in record order, then per method over all benchmarks (`ALL`)."""
    rows = []
    for (benchmark, method), group in _groups(records).items():
        cycles = [cycle for record in group for cycle in record["cycles"]]
        mean = lambda key, scale=1.0: _mean([scale * cycle.get(key, 0) for cycle in cycles])  # noqa: E731
        speed = _tok_s(group)
        forwards = sum(cycle.get("head_forwards", 0) for cycle in cycles)
        per_forward = 1000.0 * sum(cycle["draft_s"] for cycle in cycles) / forwards if forwards else None
        rows.append(CycleRow(benchmark, method, len(cycles), mean("draft_s", 1000.0), mean("verify_s", 1000.0),
                             mean("tree_size"), mean("accepted"), mean("lookup_accepted"), per_forward,
                             1000.0 / speed if speed else None))
    return rows


def _groups(records: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """Records per (benchmark, method) in order of first appearance, then per (ALL, method) over every benchmark."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for record in records:
        groups.setdefault((record["benchmark"], record["method"]), []).append(record)
    for method in dict.fromkeys(record["method"] for record in records):
        groups[(ALL, method)] = [record for record in records if record["method"] == method]
    return groups


def _tested_nodes(records: list[dict]):
    """Yield (confidence in [0, 1], accepted: bool) for every tested draft node of every cycle."""
    for record in records:
        for cycle in record["cycles"]:
            conf, hit = cycle["tested_conf"], cycle["tested_hit"]
            if len(conf) != len(hit) or not all(0.0 <= c <= 1.0 for c in conf):
                raise EagleError(
                    f"cycle tested_conf {conf!r} / tested_hit {hit!r} of {record_key(record)}; "
                    "expected equal-length lists with confidences in [0, 1]"
                )
            yield from zip(conf, map(bool, hit))


def _row(
    benchmark: str,
    method: str,
    group: list[dict],
    baseline: list[dict] | None,
    hf: list[dict] | None,
    compare_tokens: bool,
) -> Row:
    """The table row of one group of records, compared with its benchmark's baseline and HF groups."""
    cycles = [cycle for record in group for cycle in record["cycles"]]
    speed = _tok_s(group)
    return Row(
        benchmark=benchmark,
        method=method,
        questions=len(group),
        new_tokens=sum(record["new_tokens"] for record in group),
        tok_s=speed,
        speedup_vs_vanilla=_ratio(speed, _tok_s(baseline)),
        speedup_vs_hf=_ratio(speed, _tok_s(hf)),
        tau=tau(cycles),
        **{f"alpha_{n}": alpha(cycles, n) for n in range(ALPHA_POSITIONS)},
        identical_share=_identical_share(group, baseline) if compare_tokens else None,
        lookup_share=lookup_share(cycles),
    )


def _tok_s(group: list[dict] | None) -> float | None:
    """Total new tokens / total wall seconds; None for a missing group or zero wall time."""
    if not group:
        return None
    wall = sum(record["wall_s"] for record in group)
    return sum(record["new_tokens"] for record in group) / wall if wall > 0 else None


def _ratio(value: float | None, reference: float | None) -> float | None:
    return value / reference if value is not None and reference else None


def _identical_share(group: list[dict], baseline: list[dict] | None) -> float | None:
    """Share of questions answered by both whose generated tokens equal the baseline's; None without overlap."""
    reference = {(record["benchmark"], str(record["question_id"])): record["tokens"] for record in baseline or []}
    same = [
        record["tokens"] == reference[key]
        for record in group
        if (key := (record["benchmark"], str(record["question_id"]))) in reference
    ]
    return _mean(same)


def _cycles_by_method(records: list[dict]) -> dict[str, list[dict]]:
    by_method: dict[str, list[dict]] = {}
    for record in records:
        by_method.setdefault(record["method"], []).extend(record["cycles"])
    return by_method


def _mean(values: list) -> float | None:
    return sum(values) / len(values) if values else None
