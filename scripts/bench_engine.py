"""Engine speed, measured side by side in one run (make bench-engine).

(a) one target forward of k tree tokens over a fixed prefix, k = 1..64; (b) the engine's vanilla decoding against
transformers' generate (greedy) on the same prompts; (c) EAGLE-2 with a head (shipped if present, else random).
Prints a table and writes results/bench-engine.json.

usage: python scripts/bench_engine.py [--model smollm2-135m] [--dtypes bfloat16,float32] [--prompts 3] [--max-new 128]
The top-level figures in the JSON are those of the first dtype; `by_dtype` holds every dtype's.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from eagle_infer.chat import Message, prompt_ids  # noqa: E402
from eagle_infer.chat import stop_ids  # noqa: E402
from eagle_infer.config import InferConf, build_engine, shipped_head_dir  # noqa: E402
from eagle_infer.errors import EagleError  # noqa: E402
from eagle_infer.target import load_target  # noqa: E402
from eagle_infer.tree import causal_mask  # noqa: E402
from eval.benchmarks import load_benchmark  # noqa: E402


def forward_ms(target, k: int, prefix: int, reps: int) -> float:
    """Median ms of one forward of k tokens with a causal tree mask over a `prefix`-token cache."""
    cache = target.new_cache(1, prefix + k)
    ids = torch.randint(100, 1000, (1, prefix), device=target.device)
    target.forward(ids, torch.arange(prefix, device=target.device)[None], cache)
    cache.advance(prefix)
    x = torch.randint(100, 1000, (1, k), device=target.device)
    pos = (prefix + torch.arange(k, device=target.device))[None]
    mask = causal_mask(prefix, k, target.dtype, target.device)
    times = []
    for i in range(reps + 2):
        start = time.perf_counter()
        target.forward(x, pos, cache, mask)
        if target.device.type == "cuda":
            torch.cuda.synchronize()
        if i >= 2:
            times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def hf_generate(target, ids: list[int], max_new: int, stops: list[int]) -> tuple[int, float]:
    x = torch.tensor([ids], device=target.device)
    start = time.perf_counter()
    out = target.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=max_new, do_sample=False,
                                eos_token_id=stops, pad_token_id=stops[0])
    return out.shape[1] - len(ids), time.perf_counter() - start


def print_tables(result: dict, args) -> None:
    tok_s = {m: result[f"{m}_tok_s"] for m in ("hf_generate", "vanilla", "eagle2")}
    verify_ms = result["verify_ms"]
    print(f"\n## bench-engine: {result['model']} {result['dtype']}, {result['machine']}, {result['prompts']} MT-bench prompts, "
          f"{args.max_new} new tokens\n")
    print("| k tree tokens | " + " | ".join(verify_ms) + " |")
    print("|---|" + "---|" * len(verify_ms))
    print("| forward ms | " + " | ".join(f"{v:.1f}" for v in verify_ms.values()) + " |\n")
    print("| method | tokens/s | vs hf_generate | vs vanilla |\n|---|---|---|---|")
    for m in ("hf_generate", "vanilla", "eagle2"):
        print(f"| {m} | {tok_s[m]:.1f} | {tok_s[m] / tok_s['hf_generate']:.2f}x | {tok_s[m] / tok_s['vanilla']:.2f}x |")
    e = result["eagle2"]
    print(f"\neagle2 ({result['head']} head, depth {e['depth']}, top_k {e['top_k']}, total_tokens {e['total_tokens']}): "
          f"tau {result['eagle2_tau']:.2f}, draft {result['eagle2_draft_ms_per_cycle']:.1f} ms + verify "
          f"{result['eagle2_verify_ms_per_cycle']:.1f} ms per cycle, identical to vanilla {result['eagle2_identical_to_vanilla']}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--head", default="shipped", help='"shipped", "random" or a head directory')
    ap.add_argument("--prompts", type=int, default=3, help="MT-bench first turns")
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data" / "benchmarks"))
    ap.add_argument("--out", default=str(REPO / "results" / "bench-engine.json"))
    ap.add_argument("--depth", type=int, default=InferConf.depth)
    ap.add_argument("--top-k", type=int, default=InferConf.top_k)
    ap.add_argument("--total-tokens", type=int, default=InferConf.total_tokens)
    args = ap.parse_args()

    by_dtype = {}
    for dtype in args.dtypes.split(","):
        target = load_target(args.model, dtype)
        head = args.head
        if head == "shipped":
            try:
                shipped_head_dir(target.name)
            except EagleError:
                head = "random"
        questions = load_benchmark("mt_bench", args.data_dir if Path(args.data_dir).is_dir() else None, limit=args.prompts)
        prompts = [prompt_ids(target.tokenizer, [Message("user", q.turns[0])], target.template) for q in questions]
        stops = stop_ids(target)

        verify_ms = {k: forward_ms(target, k, 300, 5) for k in (1, 2, 4, 8, 16, 24, 32, 48, 64)}

        vanilla = build_engine(InferConf(method="vanilla"), target)
        eagle2 = build_engine(InferConf(method="eagle2", head=head, depth=args.depth, top_k=args.top_k,
                                        total_tokens=args.total_tokens), target)
        vanilla.generate(prompts[0], 8, stop_ids=stops)  # warm-up, excluded
        eagle2.generate(prompts[0], 8, stop_ids=stops)
        hf_generate(target, prompts[0], 8, stops)
        totals = {"hf_generate": [0, 0.0], "vanilla": [0, 0.0], "eagle2": [0, 0.0]}
        taus, draft_s, verify_s, identical = [], [], [], 0
        for ids in prompts:  # interleaved per prompt, so machine drift hits every method alike
            n, dt = hf_generate(target, ids, args.max_new, stops)
            totals["hf_generate"][0] += n
            totals["hf_generate"][1] += dt
            base = vanilla.generate(ids, args.max_new, stop_ids=stops)
            totals["vanilla"][0] += len(base.tokens)
            totals["vanilla"][1] += base.wall_s
            r = eagle2.generate(ids, args.max_new, stop_ids=stops)
            totals["eagle2"][0] += len(r.tokens)
            totals["eagle2"][1] += r.wall_s
            taus.append(r.tau)
            identical += r.tokens == base.tokens
            draft_s += [c.draft_s for c in r.cycles]
            verify_s += [c.verify_s for c in r.cycles]
        tok_s = {m: n / dt for m, (n, dt) in totals.items()}
        result = {
            "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, {target.device.type}",
            "model": target.name, "dtype": dtype, "head": head, "prompts": len(prompts), "max_new_tokens": args.max_new,
            "eagle2": {"depth": args.depth, "top_k": args.top_k, "total_tokens": args.total_tokens},
            "hf_generate_tok_s": tok_s["hf_generate"], "vanilla_tok_s": tok_s["vanilla"], "eagle2_tok_s": tok_s["eagle2"],
            "vanilla_vs_hf": tok_s["vanilla"] / tok_s["hf_generate"], "eagle2_vs_vanilla": tok_s["eagle2"] / tok_s["vanilla"],
            "eagle2_tau": statistics.mean(taus), "eagle2_identical_to_vanilla": f"{identical}/{len(prompts)}",
            "eagle2_draft_ms_per_cycle": 1000 * statistics.mean(draft_s), "eagle2_verify_ms_per_cycle": 1000 * statistics.mean(verify_s),
            "verify_ms": {str(k): v for k, v in verify_ms.items()},
        }
        by_dtype[dtype] = result
        print_tables(result, args)
    result = {**by_dtype[args.dtypes.split(",")[0]], "by_dtype": by_dtype}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
