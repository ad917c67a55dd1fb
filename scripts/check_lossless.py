"""Lossless on this device, in float32 (make check-lossless): greedy EAGLE-2 (the tree chosen per cycle), greedy
EAGLE-2 with prompt lookup merged in (eagle2+lookup, the default method), the DFlash block drafter (dflash, its
block cut per cycle) and dflash+lookup equal vanilla greedy on MT-bench first turns, eagerly and through the compiled
target (infer.compile: CUDA graphs on a GPU), a batch equals its batch of one (eagle2, dflash), and compiled vanilla
equals eager vanilla; the eager path with the target's
linear weights packed as model.pack says (--pack, default auto: packed in float32 on a CPU without native bfloat16
matmuls, eagle_infer/models/packed.py), as `make eval` and `make headline` run it there. It needs torch and transformers
only (no hydra, datasets or deepspeed), so it runs on a bare GPU machine. Prints one line per path and exits 1 if
any output differs (2, with one line, on bad input). A synthetic target (--model synthetic:vicuna-7b: random
weights of that shape, eagle_infer/models/synthetic.py) is checked with a random head. The DFlash drafter is
--dflash-head (default random: an untrained drafter of the target's shape; lossless whatever it drafts).

usage: python scripts/check_lossless.py [--model smollm2-135m] [--head shipped] [--dflash-head random] [--prompts 3]
       [--max-new 64] [--no-compile] [--pack auto|on|off] [--data-dir DIR]
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


METHODS = ("eagle2", "eagle2+lookup", "dflash", "dflash+lookup")  # each against vanilla
BATCHED = ("eagle2", "dflash")  # and a batch of every prompt against its batch of one


def check(args, compile: bool) -> tuple[list[list[int]], bool, str]:
    """(vanilla outputs, every check passed, the path's line)."""
    target = load_target(args.model, "float32", pack=args.pack, compile=compile, allow_synthetic=True)
    questions = load_benchmark("mt_bench", args.data_dir if Path(args.data_dir).is_dir() else None,
                               limit=args.prompts)
    prompts = [prompt_ids(target.tokenizer, [Message("user", q.turns[0])], target.template) for q in questions]
    stops = stop_ids(target)
    vanilla = build_engine(InferConf(method="vanilla"), target)
    engines = {}
    for method in METHODS:  # the tree chosen per cycle; the DFlash methods' drafter --dflash-head
        head = args.dflash_head if method.startswith("dflash") else args.head
        engines[method] = build_engine(InferConf(method=method, head=head, depth="auto", total_tokens="auto"), target)
    start = time.perf_counter()
    v = [vanilla.generate(p, args.max_new, stop_ids=stops).tokens for p in prompts]
    n, parts, passed = len(prompts), [], True
    for method, engine in engines.items():
        out = [engine.generate(p, args.max_new, stop_ids=stops).tokens for p in prompts]
        same = sum(x == y for x, y in zip(v, out))
        parts.append(f"{method} = vanilla on {same}/{n}")
        passed &= same == n
        if method in BATCHED:
            batch = engine.generate_batch(prompts, args.max_new, stop_ids=stops, batch_size=n).results
            batched = sum(x == r.tokens for x, r in zip(out, batch))
            parts.append(f"{method}, a batch of {n} = its batch of one on {batched}/{n}")
            passed &= batched == n
    path = "compiled" if compile else "eager, packed" if target.packed else "eager"
    line = f"{path} ({target.device.type}): {'; '.join(parts)}; {time.perf_counter() - start:.0f} s"
    if compile:
        c = target.compiled_forward
        line += f"; {c.compiles} graphs, compile failed: {c.failed or 'no'}"
        if target.device.type == "cuda":
            line += f"; graphs run without CUDA graphs: {c.cudagraph_skips}"
    return v, passed, line


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--head", default="shipped", help='"shipped", "random" or a head directory')
    ap.add_argument("--dflash-head", default="random", help='the DFlash drafter: "random" or a head directory')
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
