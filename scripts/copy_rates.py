"""How often prompt lookup's copies hold, by depth, over a regenerated shard's answers: each answer is walked as
greedy decoding with lookup alone would walk it (a chain of num_tokens copies a cycle, accepted while it matches,
plus the bonus token), counting at each depth j the chains that reached it and the ones whose copy there matched.
Beside each rate, the prior `eagle_infer.trees.lookup.prior_rate` gives that depth, and the τ lookup alone reaches.

usage: python scripts/copy_rates.py [SHARD ...] [--model smollm2-135m] [--match leftmost|recent] [--tokens 128]
(default shard: SmolLM2's answers to its 64 held-out self-written requests, as recipes/smollm2-135m-self-openers
regenerated them)
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from eagle_infer.config import LookupConf  # noqa: E402
from eagle_infer.entry.cli_support import one_line_errors  # noqa: E402
from eagle_infer.errors import EagleError  # noqa: E402
from eagle_infer.models.chat import Message, prompt_ids  # noqa: E402
from eagle_infer.models.target import load_target  # noqa: E402
from eagle_infer.trees.lookup import continuations, prior_rate  # noqa: E402

HELDOUT = (REPO / "recipes/generated/features/smollm2-135m-self-openers/heldout/regenerated/shard-00000.json.gz")


def chain_rates(pairs: list[tuple[list[int], list[int]]], conf: LookupConf) -> tuple[list[int], list[int], float]:
    """(hits, tries, tau) over (prompt ids, answer ids) pairs: tries[j - 1] chains reached depth j, hits[j - 1]
    of them matched there; tau, answer tokens per cycle."""
    hits, tries = [0] * conf.num_tokens, [0] * conf.num_tokens
    tokens = cycles = 0
    for prompt, answer in pairs:
        t = 0
        while t < len(answer):
            chain = next(iter(continuations(prompt + answer[:t], conf)), [])
            accepted = 0
            for j, (copy, truth) in enumerate(zip(chain, answer[t:])):
                tries[j] += 1
                if copy != truth:
                    break
                hits[j] += 1
                accepted += 1
            t += accepted + 1
            cycles += 1
        tokens += len(answer)
    return hits, tries, tokens / max(cycles, 1)


def shard_pairs(path: Path, target, max_tokens: int) -> list[tuple[list[int], list[int]]]:
    """Each conversation's first answer of a regenerated shard (json or json.gz) as (prompt ids, answer ids), the
    answer cut to max_tokens."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            conversations = json.load(f)["conversations"]
    except (OSError, ValueError, KeyError) as err:
        raise EagleError(f"{path}: {type(err).__name__} ({err}); expected a regenerated shard with conversations")
    pairs = []
    for conv in conversations:
        messages = [Message(role, text) for role, text in conv or []]
        first = next((i for i, m in enumerate(messages) if m.role == "assistant"), None)
        if first:
            answer = target.tokenizer(messages[first].content, add_special_tokens=False)["input_ids"][:max_tokens]
            pairs.append((prompt_ids(target.tokenizer, messages[:first], target.template), answer))
    return pairs


@one_line_errors
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shards", nargs="*", type=Path, default=[HELDOUT])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--match", default="leftmost", help="lookup.match: leftmost or recent")
    ap.add_argument("--tokens", type=int, default=128, help="answer tokens per conversation")
    args = ap.parse_args()
    conf = LookupConf(match=args.match)
    conf.validate()
    target = load_target(args.model, "float32", "cpu", "off")
    pairs = [p for shard in args.shards for p in shard_pairs(shard, target, args.tokens)]
    hits, tries, tau = chain_rates(pairs, conf)
    print(f"{len(pairs)} answers, lookup.match={args.match}, chains of {conf.num_tokens}: τ {tau:.3f}")
    print("| depth | chains | held | rate | prior |\n| --- | --- | --- | --- | --- |")
    for j, (hit, tried) in enumerate(zip(hits, tries), 1):
        if tried:
            print(f"| {j} | {tried} | {hit} | {hit / tried:.2f} | {prior_rate(j):.2f} |")


if __name__ == "__main__":
    main()
