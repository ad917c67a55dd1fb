"""Lossless on this device, in float32 (make check-lossless): greedy EAGLE-2 (the tree chosen per cycle) and
greedy EAGLE-2 with prompt lookup merged in (eagle2+lookup, the default method) equal vanilla greedy on MT-bench
first turns, eagerly and through the compiled target (infer.compile: CUDA graphs on a GPU), a batch equals its
batch of one, and compiled vanilla equals eager vanilla; the eager path with the target's
linear weights packed as model.pack says (--pack, default auto: packed in float32 on a CPU without native bfloat16
matmuls, eagle_infer/models/packed.py), as `make eval` and `make headline` run it there. It needs torch and transformers
only (no hydra, datasets or deepspeed), so it runs on a bare GPU machine. Prints one line per path and exits 1 if
any output differs (2, with one line, on bad input). A synthetic target (--model synthetic:vicuna-7b: random
weights of that shape, eagle_infer/models/synthetic.py) is checked with a random head.

usage: python scripts/check_lossless.py [--model smollm2-135m] [--head shipped] [--prompts 3] [--max-new 64]
       [--no-compile] [--pack auto|on|off] [--data-dir DIR]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from eagle_infer.models.chat import Message, prompt_ids, stop_ids  # noqa: E402
from eagle_infer.decoding.build import build_engine  # noqa: E402
from eagle_infer.config import InferConf  # noqa: E402
from eagle_infer.errors import EagleError  # noqa: E402
from eagle_infer.models.target import load_target  # noqa: E402
from eagle_train.plumbing.benchmarks import load_benchmark


def check(args, compile: bool) -> tuple[list[list[int]], bool, str]:
    """(vanilla outputs, every check passed, the path's line)."""
    target = load_target(args.model, "float32", pack=args.pack, compile=compile, allow_synthetic=True)
    questions = load_benchmark("mt_bench", args.data_dir if Path(args.data_dir).is_dir() else None,
                               limit=args.prompts)
    prompts = [prompt_ids(target.tokenizer, [Message("user", q.turns[0])], target.template) for q in questions]
    stops = stop_ids(target)
    vanilla = build_engine(InferConf(method="vanilla"), target)
    tree = {"head": args.head, "depth": "auto", "total_tokens": "auto"}
    eagle2 = build_engine(InferConf(method="eagle2", **tree), target)
    hybrid = build_engine(InferConf(method="eagle2+lookup", **tree), target)
    start = time.perf_counter()
    v = [vanilla.generate(p, args.max_new, stop_ids=stops).tokens for p in prompts]
    e = [eagle2.generate(p, args.max_new, stop_ids=stops).tokens for p in prompts]
    h = [hybrid.generate(p, args.max_new, stop_ids=stops).tokens for p in prompts]
    b = [r.tokens for r in eagle2.generate_batch(prompts, args.max_new, stop_ids=stops,
                                                  batch_size=len(prompts)).results]
    n = len(prompts)
    same, merged, batched = (sum(x == y for x, y in zip(a, c)) for a, c in ((v, e), (v, h), (e, b)))
    path = "compiled" if compile else "eager, packed" if target.packed else "eager"
    line = (f"{path} ({target.device.type}): EAGLE-2 = vanilla on {same}/{n}; eagle2+lookup = vanilla on "
            f"{merged}/{n}; a batch of {n} = its batch of one on {batched}/{n}; {time.perf_counter() - start:.0f} s")
    if compile:
        c = target.compiled_forward
        line += f"; {c.compiles} graphs, compile failed: {c.failed or 'no'}"
        if target.device.type == "cuda":
            line += f"; graphs run without CUDA graphs: {c.cudagraph_skips}"
    return v, same == n and merged == n and batched == n, line


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--head", default="shipped", help='"shipped", "random" or a head directory')
    ap.add_argument("--prompts", type=int, default=3, help="MT-bench first turns")
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--no-compile", action="store_true", help="check the eager path only")
    ap.add_argument("--pack", default="auto", help="model.pack of the eager path: auto | on | off")
    ap.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data" / "benchmarks"))
    args = ap.parse_args()
    try:
        eager, ok, line = check(args, compile=False)
        print(line, flush=True)
        if not args.no_compile:
            compiled, ok_compiled, line = check(args, compile=True)
            print(line)
            same = sum(x == y for x, y in zip(eager, compiled))
            print(f"compiled vanilla = eager vanilla on {same}/{len(eager)}")
            ok = ok and ok_compiled and same == len(eager)
    except EagleError as err:  # a bad model, head or data dir: one line, not a traceback
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
