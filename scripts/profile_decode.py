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

--cycles counts instead what one decoding cycle dispatches on the eager path, in float32: for --methods among
eagle2 and eagle2+lookup (the shipped head) and dflash and dflash+lookup (--dflash-head: a DFlash drafter's
directory, or random, an untrained one); under the auto budget over a fixed cost model, deciding as it drafts
("auto", the CPU's default) and planning ahead ("ahead", infer.plan_ahead=on, the GPU's), and the fixed budget; at
batch 1 and 8: the aten operators a cycle dispatches inside the target's forward, inside the head's layer steps
(HeadRunner calls; a block drafter's context writes and block forwards, BlockRunner calls) and elsewhere (drafting,
acceptance, bookkeeping), and its host syncs (item, bool, tolist, equal, nonzero, ... of tensors: each one waits for
the device on a GPU), prefills excluded; with --baseline DIR the same for another checkout (its own eagle_infer, run
in a subprocess), side by side; with --by-function, for this checkout, the --rows eagle_infer functions whose own
lines dispatch the most operators elsewhere, per cycle (--by-line: the lines themselves, as 'module.py:line
function'). Operator counts, not timings: they do not depend on what else runs on the machine.

usage: python scripts/profile_decode.py [--model smollm2-135m] [--batch 256] [--new-tokens 32] [--rows 15]
       [--threads N] [--compiled] [--rounds 2]
       python scripts/profile_decode.py --cycles [--baseline DIR] [--by-function | --by-line] [--rows 15]
       [--methods eagle2,eagle2+lookup,dflash,dflash+lookup] [--dflash-head random|DIR]
       [--budgets auto,ahead,fixed] [--batches 1,8] [--new-tokens 32]
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import torch

REPO = Path(os.environ.get("PROFILE_REPO") or Path(__file__).resolve().parent.parent)  # --cycles' checkout
sys.path.insert(0, str(REPO))

from eagle_infer.config import InferConf  # noqa: E402
from eagle_infer.errors import EagleError  # noqa: E402
from eagle_infer.platform import cpu  # noqa: E402
from eagle_train.data.self_prompts import header_ids


def checkout_module(name: str):
    """Module `name` of the checkout at REPO, flat (eagle_infer/cycle.py) or in the subpackage layout
    (eagle_infer/decoding/cycle.py), so one worker profiles both sides of a comparison. Found by its file: an
    editable install's finder would otherwise lend a flat checkout another checkout's subpackages."""
    for where in ("", "decoding/", "models/", "head/", "trees/"):
        if (REPO / "eagle_infer" / where / f"{name}.py").exists():
            return importlib.import_module("eagle_infer." + where.replace("/", ".") + name)
    raise EagleError(f"no module {name!r} in {REPO / 'eagle_infer'}: expected a checkout of this repository")


Engine, load_target = checkout_module("engine").Engine, checkout_module("target").load_target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--rows", type=int, default=15, help="operators listed per table")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads(),
                    help="torch threads (default: this machine's, as torch counts them)")
    ap.add_argument("--compiled", action="store_true", help="then time the compiled target against the eager one")
    ap.add_argument("--rounds", type=int, default=2, help="timed rounds of --compiled")
    ap.add_argument("--cycles", action="store_true", help="count operators and host syncs per EAGLE cycle instead")
    ap.add_argument("--baseline", default="", help="with --cycles: another checkout counted alongside")
    ap.add_argument("--by-function", action="store_true",
                    help="with --cycles: also list the functions dispatching the most operators elsewhere")
    ap.add_argument("--by-line", action="store_true", help="with --cycles: the same by line (module.py:line function)")
    ap.add_argument("--methods", type=choices(*CYCLE_METHODS), default="eagle2,eagle2+lookup",
                    help=f"with --cycles: comma-separated, of {', '.join(CYCLE_METHODS)}")
    ap.add_argument("--dflash-head", default="random",
                    help="with --cycles: the dflash methods' drafter, a head directory or random (untrained)")
    ap.add_argument("--budgets", type=choices("auto", "ahead", "fixed"), default="auto,ahead,fixed",
                    help="with --cycles: comma-separated, of auto, ahead and fixed")
    ap.add_argument("--batches", type=choices("1", "8"), default="1,8", help="with --cycles: comma-separated, of 1 and 8")
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)  # one --cycles case, JSON out (a subprocess)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.worker:
        print(json.dumps(count_case(json.loads(args.worker))))
        return
    if args.cycles:
        compare_cycles(args)
        return
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


CYCLE_PROMPTS = [  # user turns; some repeat text, so prompt lookup finds copies
    "Write a short poem about the sea.",
    "Repeat this list twice: apples, pears, plums, figs, dates, limes.",
    "Explain what a hash table is in three sentences.",
    "def add(a, b):\n    return a + b\n\nWrite a function sub like add above, then one called mul.",
    "Give three tips for learning a new language.",
    "Copy this sentence exactly: the quick brown fox jumps over the lazy dog.",
    "What is the capital of France? Answer and explain briefly.",
    "List the first ten even numbers, separated by commas.",
]


CYCLE_METHODS = ("eagle2", "eagle2+lookup", "dflash", "dflash+lookup")


def count_case(case: dict) -> dict:
    """One --cycles case in this process (its eagle_infer is PROFILE_REPO's): {cycles, ops per region, syncs}. The
    operators counted as host syncs come with the case, from the checkout that runs the comparison."""
    from torch.utils._python_dispatch import TorchDispatchMode

    host_reads = tuple(case["host_reads"])
    cycle_mod = checkout_module("cycle")
    build_head, CostModel = checkout_module("build").build_head, checkout_module("cost").CostModel
    HeadRunner, BatchRun = checkout_module("head_runner").HeadRunner, checkout_module("scheduler").BatchRun
    method = case.get("method", "eagle2+lookup" if case.get("lookup") else "eagle2")
    blocks = method.startswith("dflash")
    if blocks and not (REPO / "eagle_infer" / "head" / "block_runner.py").exists():
        return None  # a checkout from before the block drafters
    Target = checkout_module("target").Target

    package = str(REPO / "eagle_infer") + os.sep

    class Counting(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.region, self.ops, self.syncs, self.cycles, self.names = "elsewhere", Counter(), 0, 0, Counter()
            self.functions = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops[self.region] += 1
            if self.region == "elsewhere":
                self.names[str(func)] += 1
                if case.get("by_function") or case.get("by_line"):
                    self.functions[caller(package, case.get("by_line", False))] += 1
            if self.region != "prefill" and str(func).startswith(host_reads):
                self.syncs += 1
            return func(*args, **(kwargs or {}))

    counter = Counting()

    def within(owner, name, region):
        original = getattr(owner, name)

        def wrapper(*a, **k):
            before = counter.region
            counter.region = before if before == "prefill" else region
            try:
                return original(*a, **k)
            finally:
                counter.region = before
        setattr(owner, name, wrapper)

    within(Target, "forward", "target")
    within(HeadRunner, "__call__", "head")
    if blocks:
        BlockRunner = checkout_module("block_runner").BlockRunner
        within(BlockRunner, "__call__", "head")
        within(BlockRunner, "draft", "head")
    head_call = HeadRunner.__call__

    def head_layers_only(self, *args, **kwargs):
        """What the head's call computes from its predictions (`after`: an EAGLE-2 level's draft logits and
        bookkeeping) counts where it was asked for, not as the head's layer steps."""
        if len(args) > 5 and args[5] is not None:
            after, outer = args[5], counter.region

            def counted(*inputs):
                before = counter.region
                counter.region = outer
                try:
                    return after(*inputs)
                finally:
                    counter.region = before
            args = args[:5] + (counted,) + args[6:]
        return head_call(self, *args, **kwargs)
    HeadRunner.__call__ = head_layers_only
    within(BatchRun, "admit", "prefill")
    tolist = torch.Tensor.tolist

    def counted_tolist(self):
        counter.syncs += counter.region != "prefill"
        return tolist(self)
    torch.Tensor.tolist = counted_tolist
    draft_cycle = cycle_mod.draft_cycle

    def counted_cycle(*args):
        counter.cycles += 1
        return draft_cycle(*args)
    cycle_mod.draft_cycle = counted_cycle

    target = load_target(case["model"], dtype="float32")
    ahead = {"plan_ahead": "on"} if case["budget"] == "ahead" else {}
    if ahead and "plan_ahead" not in InferConf.__dataclass_fields__:
        return None  # a checkout from before the schedule existed
    conf = InferConf(method=method.removesuffix("+lookup"), lookup=method.endswith("+lookup"),
                     budget="fixed" if case["budget"] == "fixed" else "auto", max_batch_size=case["batch"],
                     head=case.get("head", "shipped"), **ahead)
    # A fixed cost model (no timing): a forward of t tokens costs 25 + 0.4 t ms, a draft level 3 ms.
    sizes = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128]
    cost = CostModel({"fixed": True}, sizes, [25 + 0.4 * t for t in sizes], 3.0)
    engine = Engine(target, build_head(conf, target), conf, cost=cost)
    tok = target.tokenizer
    prompts = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True)
               for p in CYCLE_PROMPTS[: case["batch"]]]
    prompts = [list(p["input_ids"]) if hasattr(p, "keys") else list(p) for p in prompts]
    engine.generate_batch(prompts, case["new_tokens"])  # warm-up (caches, lazily built state)
    counter.ops.clear()
    counter.syncs = counter.cycles = 0
    with counter:
        result = engine.generate_batch(prompts, case["new_tokens"])
    torch.Tensor.tolist = tolist
    return {"cycles": counter.cycles, "ops": dict(counter.ops), "syncs": counter.syncs,
            "tau": sum(r.tau for r in result.results) / len(result.results),
            "elsewhere": dict(counter.names.most_common(12)),
            "functions": dict(counter.functions.most_common(case.get("rows", 12)))}


def choices(*allowed: str):
    """An argparse type: a comma-separated list of `allowed` values, in the order given."""
    def parse(text: str) -> list[str]:
        picked = [v.strip() for v in text.split(",") if v.strip()]
        bad = [v for v in picked if v not in allowed]
        if bad or not picked:
            raise argparse.ArgumentTypeError(f"{text!r} is invalid: expected a comma-separated list of {', '.join(allowed)}")
        return picked
    return parse


def caller(package: str, line: bool = False) -> str:
    """'folder/module.py:function' of the innermost frame under `package` (a path ending in a separator) on the
    running Python stack: the eagle_infer function whose line dispatched the operator ('folder/module.py:line
    function' with `line`)."""
    frame = sys._getframe(2)
    while frame is not None and not frame.f_code.co_filename.startswith(package):
        frame = frame.f_back
    if frame is None:
        return "(outside eagle_infer)"
    where = frame.f_code.co_filename.removeprefix(package)
    return f"{where}:{frame.f_lineno} {frame.f_code.co_name}" if line else f"{where}:{frame.f_code.co_name}"


def compare_cycles(args) -> None:
    """--cycles: every case in a subprocess per checkout (this one, and --baseline), one table."""
    from eagle_infer.platform import HOST_READ_OPS  # this checkout's (a baseline's may predate it)

    if any(m.startswith("dflash") for m in args.methods) and args.dflash_head != "random" \
            and not (Path(args.dflash_head) / "config.json").exists():
        raise SystemExit(f"error: --dflash-head {args.dflash_head!r} holds no config.json: expected a DFlash drafter's "
                         "directory (a training run's head/) or random")
    sides = {"this": Path(__file__).resolve().parent.parent}
    if args.baseline:
        root = Path(args.baseline) / "eagle_infer"
        if not (root / "cycle.py").exists() and not (root / "decoding" / "cycle.py").exists():
            raise SystemExit(f"error: --baseline {args.baseline!r} has no eagle_infer/decoding/cycle.py: expected a checkout "
                             "of this repository")
        sides["baseline"] = Path(args.baseline).resolve()
    print(f"machine: {cpu().label}, {args.threads} threads; {args.model} float32, eager, shipped head (dflash: "
          f"{args.dflash_head}), "
          f"{args.new_tokens} new tokens per prompt, prefills excluded; per cycle (one target verification):")
    print(f"{'checkout':9} {'method':14} {'budget':6} {'batch':>5} {'cycles':>6} {'tau':>5} {'target':>7} "
          f"{'head':>6} {'elsewhere':>9} {'syncs':>6}")
    for method in args.methods:
        for budget in args.budgets:
            for batch in map(int, args.batches):
                for side, repo in sides.items():
                    head = args.dflash_head if method.startswith("dflash") else "shipped"
                    case = {"model": args.model, "method": method, "head": head, "budget": budget, "batch": batch,
                            "host_reads": list(HOST_READ_OPS), "new_tokens": args.new_tokens,
                            "by_function": args.by_function and side == "this",
                            "by_line": args.by_line and side == "this", "rows": args.rows}
                    env = dict(os.environ, PROFILE_REPO=str(repo), PYTHONPATH=str(repo))
                    out = subprocess.run([sys.executable, __file__, "--threads", str(args.threads), "--worker",
                                          json.dumps(case)], env=env, capture_output=True, text=True)
                    if out.returncode:
                        raise SystemExit(f"error: the {side} case {case} failed: {out.stderr.strip()[-2000:]}")
                    r = json.loads(out.stdout.strip().splitlines()[-1])
                    if r is None:
                        print(f"{side:9} {method:14} {budget:6} {batch:5d}   (none)")
                        continue
                    n = max(r["cycles"], 1)
                    per = {k: r["ops"].get(k, 0) / n for k in ("target", "head", "elsewhere")}
                    print(f"{side:9} {method:14} {budget:6} {batch:5d} "
                          f"{r['cycles']:6d} {r['tau']:5.2f} {per['target']:7.0f} {per['head']:6.0f} "
                          f"{per['elsewhere']:9.0f} {r['syncs'] / n:6.1f}", flush=True)
                    if r.get("functions"):
                        print(f"          elsewhere by {'line' if args.by_line else 'function'}: " + "; ".join(
                            f"{name} {count / n:.0f}" for name, count in r["functions"].items()), flush=True)


if __name__ == "__main__":
    main()
