"""Each method's speed per question as the cost model prices its cycles, beside the speed measured: how a decoding
policy compares on a machine too busy to time it.

A cycle is priced as the auto budget prices it (eagle_infer.trees.cost.CostModel.cycle_ms): its head forwards at
the draft level's ms, plus one target forward of its batch x (1 + tree size) tokens; a vanilla cycle is one forward
of its batch. Prices depend only on the trees each method verified, not on the clock, so two runs of the same policy price
alike however busy the machine was; the measured column shows how far the clock agreed. Every method is priced with
the one cost model given (a method drafting with another head is priced at this head's level cost).

Per question: each method's tokens per priced ms over vanilla's, and the default method over the best of its parts
(priced, then measured). Then the geometric mean of that ratio, its minimum and how many questions fall below
--below; and per method and tree size, the cycles' measured ms (draft + verify) over their priced ms.

usage: python scripts/priced_speed.py RECORDS --cost COST_JSON [--default eagle2+lookup] [--parts eagle2,lookup]
       [--below 0.97]
RECORDS: an eval run's records.jsonl (results/<run>/records.jsonl); COST_JSON: a cost model cached under
~/.cache/eagle-toolkit/cost-models/ (its "key" says the machine, dtype and head it was measured for).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from eagle_infer.entry.cli_support import one_line_errors  # noqa: E402
from eagle_infer.errors import EagleError  # noqa: E402
from eagle_infer.trees.cost import CostModel  # noqa: E402


def read_cost(path: Path) -> CostModel:
    """The cost model stored at `path` (whatever machine it was measured on)."""
    try:
        return CostModel(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError) as err:
        raise EagleError(f"--cost {str(path)!r} is not a cost model JSON ({type(err).__name__}): expected a file "
                         f"from ~/.cache/eagle-toolkit/cost-models/") from None


def priced_ms(cycles: list[dict], cost: CostModel) -> float:
    """The ms the cost model prices these cycles at (a record's "cycles")."""
    return sum(cost.cycle_ms(c["head_forwards"], c.get("batch", 1) * (1 + c["tree_size"])) for c in cycles)


SIZES = ((0, 0), (1, 3), (4, 7), (8, 15), (16, 31), (32, 10**9))  # tree sizes grouped for measured / priced


def clock_over_price(records: list[dict], cost: CostModel) -> dict[str, list[tuple[int, float]]]:
    """method -> per SIZES group (cycles, their measured ms over their priced ms)."""
    out = {}
    for method in dict.fromkeys(r["method"] for r in records):
        groups = []
        for low, high in SIZES:
            cycles = [c for r in records if r["method"] == method for c in r["cycles"] if low <= c["tree_size"] <= high]
            measured = sum(c["draft_s"] + c["verify_s"] for c in cycles) * 1000
            groups.append((len(cycles), measured / priced_ms(cycles, cost) if cycles else float("nan")))
        out[method] = groups
    return out


def speeds(records: list[dict], cost: CostModel) -> dict[tuple[str, str], dict[str, tuple[float, float]]]:
    """(benchmark, question id) -> method -> (tokens per priced ms, tokens per measured s)."""
    table: dict[tuple[str, str], dict[str, tuple[float, float]]] = defaultdict(dict)
    for r in records:
        tokens = sum(c["accepted"] + 1 for c in r["cycles"])
        table[(r["benchmark"], str(r["question_id"]))][r["method"]] = (
            tokens / priced_ms(r["cycles"], cost), r["new_tokens"] / r["wall_s"])
    return table


def judged(table: dict, default: str, parts: list[str]) -> list[tuple[tuple[str, str], dict, float, float]]:
    """Per question with vanilla, the default and every part: (question, method -> (priced, measured) over
    vanilla's, default over its best part priced, the same measured)."""
    rows = []
    for question, by_method in table.items():
        if not all(m in by_method for m in ["vanilla", default, *parts]):
            continue
        base = by_method["vanilla"]
        ratio = {m: (p / base[0], w / base[1]) for m, (p, w) in by_method.items()}
        best = [max(ratio[m][i] for m in parts) for i in (0, 1)]
        rows.append((question, ratio, ratio[default][0] / best[0], ratio[default][1] / best[1]))
    return rows


@one_line_errors
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", type=Path)
    ap.add_argument("--cost", type=Path, required=True)
    ap.add_argument("--default", default="eagle2+lookup")
    ap.add_argument("--parts", default="eagle2,lookup")
    ap.add_argument("--below", type=float, default=0.97)
    args = ap.parse_args(argv)
    cost = read_cost(args.cost)
    try:
        records = [json.loads(line) for line in args.records.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as err:
        raise EagleError(f"{str(args.records)!r} is not an eval run's records.jsonl ({type(err).__name__})") from None
    parts = [p for p in args.parts.split(",") if p]
    rows = judged(speeds(records, cost), args.default, parts)
    if not rows:
        raise EagleError(f"{str(args.records)!r} has no question decoded by vanilla, {args.default} and "
                         f"{', '.join(parts)}: expected a run of those methods (--default, --parts)")
    methods = [m for m in rows[0][1] if m != "vanilla"]
    print(f"cost model: {json.dumps({k: v for k, v in cost.key.items() if k != 'flags'})}")
    print("| question | " + " | ".join(methods) + f" | {args.default} / best, priced | measured |")
    print("|" + " --- |" * (len(methods) + 3))
    for (bench, qid), ratio, priced, measured in rows:
        cells = " | ".join(f"{ratio[m][0]:.2f}x ({ratio[m][1]:.2f}x)" for m in methods)
        print(f"| {bench} {qid} | {cells} | {priced:.2f}x | {measured:.2f}x |")
    for i, name in ((2, "priced"), (3, "measured")):
        values = [r[i] for r in rows]
        geo = math.exp(sum(map(math.log, values)) / len(values))
        print(f"{name}: {args.default} / best of {', '.join(parts)}: geometric mean {geo:.3f}x, at worst "
              f"{min(values):.2f}x, below {args.below:.2f}x on {sum(v < args.below for v in values)} of {len(values)}")
    print("\nmeasured ms / priced ms, by tree size (cycles)")
    print("| method | " + " | ".join(f"{lo}" if lo == hi else f"{lo}+" if hi > 10**8 else f"{lo}-{hi}"
                                      for lo, hi in SIZES) + " |")
    print("|" + " --- |" * (len(SIZES) + 1))
    for method, groups in clock_over_price(records, cost).items():
        print(f"| {method} | " + " | ".join(f"{r:.2f} ({n})" if n else "—" for n, r in groups) + " |")


if __name__ == "__main__":
    main()
