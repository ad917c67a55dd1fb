"""Where a batched greedy decoding step's time goes: the engine answers BATCH copies of the target's user header
(vanilla, greedy, as regeneration answers) once to warm up, then again with torch.profiler (CPU and, where there is
one, CUDA) running from the last prefill on, and prints the machine, the wall ms per decoding step, the aten
operators a step dispatches, and the operators with the most host and device time.
Regeneration on a lent H100 ran ~60 ms a step at batch 256 (docs/gpu.md); this says whether that is the host's
dispatch, the device, or waits. With --compiled it then times the same batch through the compiled target
(featurize.compile / infer.compile: inductor, CUDA graphs on a GPU) against the eager one, side by side in one run
(a warm-up answer each, which for the compiled target includes compiling; then --rounds rounds taking turns going
first), and prints the compile seconds, each side's ms a step and new tokens/s, the ratio, and whether both wrote
the same tokens (greedy: in float32 they must; in bfloat16 fused kernels may round a near tie the other way).
Its last line, "compiled / eager: R x", is what scripts/gpu_self_data.sh reads to choose featurize.compile.

usage: python scripts/profile_decode.py [--model smollm2-135m] [--batch 256] [--new-tokens 32] [--rows 15]
       [--threads 4] [--compiled] [--rounds 2]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from eagle_infer.config import InferConf  # noqa: E402
from eagle_infer.engine import Engine  # noqa: E402
from eagle_infer.errors import EagleError  # noqa: E402
from eagle_infer.platform import cpu  # noqa: E402
from eagle_infer.target import load_target  # noqa: E402
from eagle_train.self_prompts import header_ids  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--rows", type=int, default=15, help="operators listed per table")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--compiled", action="store_true", help="then time the compiled target against the eager one")
    ap.add_argument("--rounds", type=int, default=2, help="timed rounds of --compiled")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    try:
        if args.new_tokens < 2 or args.rounds < 1:
            raise EagleError(f"--new-tokens {args.new_tokens} / --rounds {args.rounds}: expected >= 2 (a step after "
                             "the prefill's token) / >= 1")
        target = load_target(args.model)
        prompt = header_ids(target)
        engine = Engine(target, None, InferConf(method="vanilla", max_batch_size=args.batch))
        engine.generate_batch([prompt] * args.batch, args.new_tokens)  # warm-up
    except EagleError as err:  # a bad model or batch size: one line, not a traceback
        raise SystemExit(f"error: {err}")
    from torch.profiler import ProfilerActivity, profile

    cuda = target.device.type == "cuda"
    prof = profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else []))
    emitted, started = 0, []

    def stream(_i: int, _tokens: list[int]) -> None:
        nonlocal emitted
        emitted += 1
        if emitted == args.batch:  # every row has its prefill token: only decoding steps follow
            prof.start()
            started.append(time.perf_counter())

    engine.generate_batch([prompt] * args.batch, args.new_tokens, stream=stream)
    prof.stop()
    wall, steps = time.perf_counter() - started[0], args.new_tokens - 1
    machine = torch.cuda.get_device_name(target.device) if cuda else f"{cpu().label}, {args.threads} threads"
    print(f"machine: {machine}; {args.model} {target.dtype}, batch {args.batch}: {wall / steps * 1e3:.1f} ms a "
          f"decoding step under the profiler ({steps} steps after the prefills)")
    events = prof.key_averages()
    print(f"aten operators a step: {sum(e.count for e in events if e.key.startswith('aten::')) / steps:.0f}")
    print(events.table(sort_by="self_cpu_time_total", row_limit=args.rows))
    print(events.table(sort_by="count", row_limit=args.rows))
    if cuda:
        print(events.table(sort_by="self_device_time_total", row_limit=args.rows))
    if args.compiled:
        compare_compiled(args, engine, prompt)


def compare_compiled(args, eager: Engine, prompt: list[int]) -> None:
    """The same greedy batch through the eager engine and one over the compiled target, side by side (--compiled)."""
    target = load_target(args.model, compile=True)  # packing is skipped: the compiled graph packs its own weights
    compiled = Engine(target, None, InferConf(method="vanilla", max_batch_size=args.batch))
    start = time.perf_counter()
    compiled.generate_batch([prompt] * args.batch, args.new_tokens)  # warm-up: compiles its graphs
    warm_s = time.perf_counter() - start
    seconds, outputs, new = {"eager": 0.0, "compiled": 0.0}, {}, 0
    for round_ in range(args.rounds):
        for side in list(seconds)[:: 1 if round_ % 2 == 0 else -1]:
            result = (eager if side == "eager" else compiled).generate_batch([prompt] * args.batch, args.new_tokens)
            seconds[side] += result.wall_s
            outputs.setdefault(side, []).append([r.tokens for r in result.results])
            new += sum(len(r.tokens) for r in result.results) if side == "eager" else 0
    steps = args.new_tokens * args.rounds
    print(f"compiled target: {target.compiled_forward.compiles} graphs, warm-up {warm_s:.1f} s "
          f"({target.compiled_forward.compile_s:.1f} s compiling); {args.rounds} rounds of batch {args.batch} x "
          f"{args.new_tokens} new tokens")
    for side, s in seconds.items():
        print(f"{side}: {s / steps * 1e3:.1f} ms a step, {new / s:.0f} new tokens/s")
    print(f"same tokens: {outputs['eager'] == outputs['compiled']}")
    print(f"compiled / eager: {seconds['eager'] / seconds['compiled']:.2f} x")


if __name__ == "__main__":
    main()
