"""How much of an eval run's answers a head can draft at all: the share of the answer tokens (each record's turns,
tokenized again by the target's tokenizer) inside the head's draft vocabulary, per benchmark. A token outside it is
never drafted, so this share caps every acceptance rate of the head (infer.draft_vocab=full lifts the cap for a
head that borrows the target's LM head).

usage: python scripts/draft_vocab_coverage.py RUN_DIR [RUN_DIR ...] [--model smollm2-135m] [--head shipped]
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from eagle_infer.decoding.build import build_head  # noqa: E402
from eagle_infer.config import InferConf  # noqa: E402
from eagle_infer.errors import EagleError  # noqa: E402
from eagle_infer.models.target import load_target  # noqa: E402
from eval.records import read_records  # noqa: E402


def coverage(records: list[dict], inside: set[int], encode) -> dict[str, tuple[int, int]]:
    """benchmark -> (answer tokens, how many of them are in `inside`) over the records' turns; encode: text -> ids."""
    counts = defaultdict(lambda: [0, 0])
    for record in records:
        for turn in record["turns"]:
            ids = encode(turn)
            counts[record["benchmark"]][0] += len(ids)
            counts[record["benchmark"]][1] += sum(i in inside for i in ids)
    return {bench: (tokens, hit) for bench, (tokens, hit) in counts.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="eval run directories (each with records.jsonl)")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--head", default="shipped", help="as infer.head: 'shipped', a head directory or a hub id")
    args = ap.parse_args()
    try:
        records = []
        for run in args.runs:
            path = Path(run) / "records.jsonl"
            if not path.exists():
                raise EagleError(f"{run!r} has no records.jsonl: expected an eval run directory")
            records += read_records(path)
        target = load_target(args.model, "float32", "cpu")
        vocab = build_head(InferConf(head=args.head), target).draft_vocab  # the engine's own head loading
    except EagleError as err:
        raise SystemExit(f"error: {err}")
    if vocab is None:
        print(f"head {args.head}: drafts from the whole vocabulary (coverage 1.0)")
        return
    inside = set(vocab.tolist())
    counts = coverage(records, inside, lambda text: target.tokenizer(text, add_special_tokens=False)["input_ids"])
    print(f"draft vocabulary of head {args.head}: {len(inside)} ids")
    for bench, (tokens, hit) in sorted(counts.items()):
        print(f"{bench}: {hit / max(tokens, 1):.4f} of {tokens} answer tokens inside")


if __name__ == "__main__":
    main()
