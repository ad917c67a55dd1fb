"""Sampled decoding's top-p ranking, side by side in one run: the engine writes self-prompt-like requests (the
target's user header and nothing else, temperature 1, top-p 0.95 as data.self_prompts samples them) with the
nucleus found among the most likely tokens first (windows of eagle_infer.decoding.verify.NUCLEUS_WINDOWS, what a CPU does:
nucleus_floor) against a sort of the whole vocabulary for every row. Sides take turns going first; prints the machine, each side's
wall seconds and new tokens/s, the ratio, the median nucleus size and whether both sides wrote the same tokens (they
must: the nucleus is the same set either way).

usage: python scripts/bench_sampling.py [--model smollm2-135m] [--batch 48] [--new-tokens 64] [--rounds 2]
       [--threads 2]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import eagle_infer.decoding.verify as verify  # noqa: E402
from eagle_infer.config import InferConf  # noqa: E402
from eagle_infer.decoding.engine import Engine  # noqa: E402
from eagle_infer.errors import EagleError  # noqa: E402
from eagle_infer.platform import cpu  # noqa: E402
from eagle_infer.models.target import load_target  # noqa: E402
from eagle_train.data.self_prompts import header_ids

SAMPLING = verify.SamplingParams(temperature=1.0, top_p=0.95)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--batch", type=int, default=48, help="requests decoded together (data.self_prompts' default)")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    try:
        if args.new_tokens < 1 or args.rounds < 1:
            raise EagleError(f"--new-tokens {args.new_tokens} / --rounds {args.rounds}: expected both >= 1")
        target = load_target(args.model)
        prompt = header_ids(target)
        engine = Engine(target, None, InferConf(method="vanilla", max_batch_size=args.batch))
    except EagleError as err:  # a bad model or batch size: one line, not a traceback
        raise SystemExit(f"error: {err}")
    windows, vocab = verify.NUCLEUS_WINDOWS, target.model.config.vocab_size
    sizes = []
    with torch.inference_mode():  # nucleus sizes on the logits of one request's prompt and its sampled answer
        tokens = engine.generate(prompt, args.new_tokens, sampling=SAMPLING, seed=0).tokens
        logits = target.model(input_ids=torch.tensor([prompt + tokens], device=target.device)).logits[0, len(prompt) - 1:]
        probs = verify.target_probs(logits.float(), SAMPLING)
        sizes = (probs > 0).sum(-1).float()
    seconds, outputs = {"window": 0.0, "full sort": 0.0}, {}
    for round_ in range(args.rounds):
        order = list(seconds) if round_ % 2 == 0 else list(seconds)[::-1]
        for side in order:
            verify.NUCLEUS_WINDOWS = windows if side == "window" else ()
            result = engine.generate_batch([prompt] * args.batch, args.new_tokens, sampling=SAMPLING, seed=1)
            seconds[side] += result.wall_s
            outputs.setdefault(side, []).append([r.tokens for r in result.results])
    verify.NUCLEUS_WINDOWS = windows
    new = sum(len(t) for t in outputs["window"][0]) * args.rounds
    print(f"machine: {cpu().label if target.device.type == 'cpu' else torch.cuda.get_device_name()}, "
          f"{args.threads} threads; {args.model}, {args.batch} requests x {args.new_tokens} new tokens, "
          f"temperature 1, top-p 0.95, {args.rounds} rounds; nucleus median {int(sizes.median())} tokens "
          f"(max {int(sizes.max())}) of {vocab}, windows {windows}")
    for side, s in seconds.items():
        print(f"{side}: {s:.1f} s, {new / s:.0f} new tokens/s")
    print(f"window / full sort: {seconds['full sort'] / seconds['window']:.2f}x; same tokens: "
          f"{outputs['window'] == outputs['full sort']}")


if __name__ == "__main__":
    main()
