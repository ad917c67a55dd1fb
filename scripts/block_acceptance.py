"""Whether a block drafter's simulated acceptance predicts what decoding accepts, on benchmark questions: for each
first turn, the engine decodes with `dflash` drafting and verifying the whole block every cycle (infer.budget=fixed,
depth auto: all B - 1, no budget cutting the chain), and the training's simulator (block_objective.block_acceptance:
the drafter's greedy block at every answer position, its longest prefix equal to the target's argmax, plus the
bonus token) scores the same answer, its context the target's states of the prompt and answer computed in one
forward. Prints, per benchmark and over all, the answer positions scored, the simulated acceptance and the decoded τ
beside the drafter's held-out simulated acceptance from its card: where the two on the benchmark agree, decoding
loses nothing the simulator counts, and the gap to the held-out figure is the benchmark's distance from the training
data. Greedy, so the answers are the target's own (the engine is lossless).

usage: python scripts/block_acceptance.py --head DIR [--model smollm2-135m] [--dtype float32]
       [--benches mt_bench,gsm8k,humaneval] [--limit 10] [--max-new 128]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from eagle_infer.config import InferConf  # noqa: E402
from eagle_infer.decoding.build import build_engine, load_head_for  # noqa: E402
from eagle_infer.errors import EagleError  # noqa: E402
from eagle_infer.models.chat import Message, stop_ids  # noqa: E402
from eagle_infer.models.target import load_target  # noqa: E402
from eagle_infer.platform import machine_label  # noqa: E402
from eagle_train.features.shards import Sample  # noqa: E402
from eagle_train.plumbing.benchmarks import load_benchmark  # noqa: E402
from eagle_train.training.block_objective import block_acceptance  # noqa: E402
from eval.harness import prompt_for  # noqa: E402

EVERY_POSITION = 1 << 20  # block_acceptance's max_anchors: every answer position that has a whole block after it


def simulated(head, target, prompt: list[int], answer: list[int], at: list[int] | None = None) -> tuple[int, int]:
    """(answer positions scored, their accepted lengths summed, bonus included) of one decoded answer: at every
    answer position (offsets into `answer`), or at those `at` names, that has a whole block after it."""
    ids = torch.tensor(prompt + answer, device=target.device)
    with torch.inference_mode():
        hidden, fused = target.features(ids[None], torch.ones_like(ids)[None], tuple(head.config.feature_layers))
    scored = torch.zeros(ids.numel(), device=target.device)
    scored[len(prompt) + torch.tensor(range(len(answer)) if at is None else at, dtype=torch.long)] = 1
    with torch.no_grad():
        return block_acceptance(head, Sample(ids, scored, hidden[0], fused[0]), EVERY_POSITION, target.dtype)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--head", required=True, help="a block drafter's directory (head.block=dflash)")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--benches", default="mt_bench,gsm8k,humaneval")
    ap.add_argument("--limit", type=int, default=10, help="first turns of each benchmark")
    ap.add_argument("--max-new", type=int, default=128)
    args = ap.parse_args()
    try:
        target = load_target(args.model, args.dtype)
        infer = InferConf(method="dflash", head=args.head, budget="fixed", max_new_tokens=args.max_new)
        runner = load_head_for(infer, target)
        engine = build_engine(infer, target, head=runner)  # an EAGLE head: a one-line error (the engine's check)
        questions = {b: load_benchmark(b, None, args.limit) for b in args.benches.split(",")}
    except EagleError as err:
        raise SystemExit(f"error: {err}")
    card_path = Path(args.head) / "card.json"
    held_out = json.loads(card_path.read_text()).get("heldout/acceptance") if card_path.is_file() else None
    print(f"machine: {machine_label(target.device)}, {torch.get_num_threads()} threads; {target.name} {args.dtype}; "
          f"drafter {args.head}: block of {runner.block_size}, held-out simulated acceptance "
          f"{'—' if held_out is None else f'{held_out:.3f}'} (its card); {args.limit} first turns a benchmark, "
          f"{args.max_new} new tokens, dflash verifying all {runner.block_size - 1} drafts a cycle")
    print(f"{'benchmark':<12}{'questions':>10}{'positions':>11}{'simulated':>11}{'decoded τ':>11}")
    stops, totals = stop_ids(target), {"all": [0, 0, 0, 0, 0]}
    for bench, qs in questions.items():
        row = totals.setdefault(bench, [0, 0, 0, 0, 0])  # questions, positions, accepted, tokens, forwards
        for q in qs:
            where = f"{bench} question {q.question_id}"
            prompt = prompt_for(target, [Message("user", q.turns[0])], where, args.max_new)
            result = engine.generate(prompt, args.max_new, stop_ids=stops)
            scored = simulated(runner.module, target, prompt, result.tokens)
            for line in (row, totals["all"]):
                line[0] += 1
                line[1] += scored[0]
                line[2] += scored[1]
                line[3] += result.tau * len(result.cycles)  # tokens the cycles emitted
                line[4] += len(result.cycles)
        print(f"{bench:<12}{row[0]:>10}{row[1]:>11}{row[2] / max(row[1], 1):>11.3f}{row[3] / max(row[4], 1):>11.3f}",
              flush=True)
    a = totals["all"]
    print(f"{'all':<12}{a[0]:>10}{a[1]:>11}{a[2] / max(a[1], 1):>11.3f}{a[3] / max(a[4], 1):>11.3f}")


if __name__ == "__main__":
    main()
