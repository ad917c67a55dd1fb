"""Engine speed, measured side by side in one run (make bench-engine).

Prints, for the machine's native dtype (model.dtype=auto) unless --dtypes says otherwise:
  (a) the machine: CPU model and the flags that decide matmul speed, threads, measured memory read bandwidth, and
      the weights-read floor of a one-token step (bytes of weights a step reads / bandwidth);
  (b) one target forward of k tokens over a fixed prefix (--context, 300 tokens), k = 1..64 (--sizes) (eager,
      lean steps; with packed weights, model.pack, also the same target unpacked, as transformers loads it), the
      same weights through transformers' own decoder layers (and whether the logits are equal bit for bit), and the
      linear layers' products alone;
  (c) the engine against bare forwards: its vanilla step vs one bare one-token forward (and the ms it spends around
      the target forward inside the step), its draft time per level (a cycle's draft time / the head forwards it
      paid: one per level fed plus one feeding the last cycle's accepted tokens; each with draft logits and top-k)
      vs that forward, its verification of N tree tokens vs one bare
      forward of N + 1 tokens (bare forwards are timed between the prompts' runs, so drift hits both alike);
  (d) tokens/s of transformers' generate, the engine's vanilla decoding and EAGLE-2 on MT-bench first turns, with
      τ and the cycle split (draft / verify) for the head (shipped if present, else random), and what the host
      dispatches per vanilla step and per EAGLE-2 cycle (the first prompt once more, up to 64 new tokens, prefill
      excluded): aten operators (torch.profiler's, outermost only: an operator another one calls counts in it) and
      CUDA graph replays (a captured forward is one replay and no operator).
--hybrid adds EAGLE-2 with prompt lookup merged in (eagle2+lookup, the default method, the same tree settings) to
every engine column: tokens/s against vanilla, τ, equality with vanilla and what the host dispatches per cycle.
--compile adds the compiled target (infer.compile, eagle_infer/models/compiled.py): its forward per size and an engine
column "compiled" decoding through it (on a GPU the head's step with an EAGLE-2 level's bookkeeping and acceptance
are compiled too), with the compile time (warm-up, excluded from every timing) and how many graphs were compiled
after warm-up (0 expected).
A synthetic target (--model synthetic:vicuna-7b: that architecture with random weights, eagle_infer/models/synthetic.py)
adds (e) the cost of a cycle of EAGLE's draft tree (25 nodes, depth 5; drafted by a random head, verified) beside the
vanilla step, and the speedup projected from it at the τ the EAGLE paper reports for that target,
τ × vanilla step / (draft + verify per cycle), beside the paper's measured speedup (lab/projection.py): a
projection, since a random-weight target's own τ means nothing.
--baseline DIR loads the eagle_infer package of another checkout (e.g. `git worktree add /tmp/base main`) under
another name and measures its engine in the same run, interleaved prompt by prompt: a before/after table (its target
packed as this run's where that checkout can pack).
Writes results/bench-engine.json.

usage: python scripts/bench_engine.py [--model smollm2-135m | synthetic:vicuna-7b] [--dtypes auto] [--prompts 3]
       [--max-new 128] [--depth 6 --top-k 8 --total-tokens 32] [--pack auto] [--compile] [--hybrid] [--baseline DIR]
       [--plan-ahead on] [--sizes 1,2,4,...,64] [--context 300]
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import json
import math
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import NamedTuple

import torch
from transformers.cache_utils import DynamicCache

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from eagle_infer.models.chat import Message, prompt_ids, stop_ids  # noqa: E402
from eagle_infer.decoding.build import build_engine, shipped_head_dir  # noqa: E402
from eagle_infer.config import InferConf  # noqa: E402
from eagle_infer.platform import cpu, median_ms, sync  # noqa: E402
from eagle_infer.errors import EagleError  # noqa: E402
from eagle_infer.models.synthetic import PREFIX, is_synthetic  # noqa: E402
from eagle_infer.models.target import load_target  # noqa: E402
from eagle_train.plumbing.benchmarks import load_benchmark
from eagle_train.plumbing.markdown import table
from lab.projection import EAGLE_TREE, PAPER_FIGURES, PaperFigures, projected_speedup  # noqa: E402

FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "avx512_fp16")
SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64)


def machine(device: torch.device) -> dict:
    """CPU model, the matmul-relevant flags present, threads; the GPU's name on CUDA."""
    info = cpu()
    out = {"cpu": info.model, "flags": [f for f in FLAGS if f in info.flags], "threads": torch.get_num_threads(),
           "device": device.type}
    if device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(device)
    return out


def read_bandwidth_gbs(device: torch.device, mib: int = 512, reps: int = 5) -> float:
    """Memory read bandwidth: the best of `reps` sums over a `mib` MiB float32 tensor (GB/s, 1e9 bytes)."""
    x = torch.ones(mib * 2**20 // 4, device=device)
    best = float("inf")
    for _ in range(reps + 1):
        sync(device)
        start = time.perf_counter()
        x.sum()
        sync(device)
        best = min(best, time.perf_counter() - start)
    return x.numel() * 4 / best / 1e9


def level_weight_bytes(head) -> int:
    """Bytes one draft level reads: the head's own parameters and, without an LM head of its own, the rows of the
    target's LM head over its draft vocabulary (the target's embedding rows it reads are negligible)."""
    total = sum(p.numel() * p.element_size() for p in head.parameters())
    if head.lm_head is None:
        lm = head.target.lm_head.weight
        rows = head.config.draft_vocab_size or lm.shape[0]
        total += rows * lm.shape[1] * lm.element_size()
    return total


def step_weight_bytes(target) -> int:
    """Bytes a one-token step reads: every parameter once, except the input embedding (one row is read) unless
    it is tied to the LM head (then the LM head's product reads it whole)."""
    params = {p.data_ptr(): p for p in target.model.parameters()}
    total = sum(p.numel() * p.element_size() for p in params.values())
    emb = target.embed_tokens.weight
    if emb.data_ptr() != target.lm_head.weight.data_ptr():
        total -= emb.numel() * emb.element_size()
    return total


def matmul_ms(target, k: int, reps: int) -> float:
    """Median ms of the products alone that a forward of k tokens runs: every linear layer of the target (LM head
    included), in model order, each on a [k, in] input; the rest of a forward is attention and small ops."""
    from eagle_infer.models.packed import PackedLinear

    layers = [m for m in target.model.modules() if isinstance(m, (torch.nn.Linear, PackedLinear))]
    inputs = [torch.randn(k, m.in_features, dtype=target.dtype, device=target.device) for m in layers]
    return median_ms(lambda: [m(x) for m, x in zip(layers, inputs)], reps, target.device)


@torch.inference_mode()
def same_logits(a, b, k: int, prefix: int) -> bool:
    """Whether two targets give bit-for-bit equal logits for one forward of k tokens over the same cache (a's
    prefill of `prefix` tokens, copied for b, so only the k-token forward is compared)."""
    ids = torch.randint(100, 1000, (1, prefix + k), generator=torch.Generator().manual_seed(k)).to(a.device)
    pos = torch.arange(prefix + k, device=a.device)[None]
    cache = a.new_cache(1, prefix + k)
    a.forward(ids[:, :prefix], pos[:, :prefix], cache)
    cache.advance(prefix)
    copy = cache.copy()
    return torch.equal(*(t.forward(ids[:, prefix:], pos[:, prefix:], c)[0] for t, c in ((a, cache), (b, copy))))


@torch.inference_mode()
def _prefilled(target, ids: torch.Tensor, prefix: int) -> tuple:
    """The engine's prefill of ids' first `prefix` tokens: its KVCache (committed) and the same keys and values as a
    transformers DynamicCache, so that a forward after it compares the two forwards alone."""
    cache = target.new_cache(1, ids.shape[1])
    target.forward(ids[:, :prefix], torch.arange(prefix, device=target.device)[None], cache)
    cache.advance(prefix)
    past = DynamicCache()
    for i, (k, v) in enumerate(zip(cache.k, cache.v)):
        past.update(k[:, :, :prefix].clone(), v[:, :, :prefix].clone(), i)
    return cache, past


@torch.inference_mode()
def transformers_forward_ms(target, k: int, prefix: int, reps: int) -> float:
    """Median ms of transformers' own forward of k tokens over a `prefix`-token DynamicCache: the same weights as the
    engine's forward, through transformers' decoder layers."""
    ids = torch.randint(100, 1000, (1, prefix + k), device=target.device)
    _, past = _prefilled(target, ids, prefix)

    def step():
        target.model(input_ids=ids[:, prefix:], past_key_values=past, use_cache=True, logits_to_keep=1 if k == 1 else 0)
        past.crop(-k)

    return median_ms(step, reps, target.device)


@torch.inference_mode()
def same_as_transformers(target, k: int, prefix: int) -> bool:
    """Whether the engine's forward of k tokens gives transformers' own logits bit for bit, both after the same
    `prefix` cached keys and values (the engine's prefill)."""
    ids = torch.randint(100, 1000, (1, prefix + k), generator=torch.Generator().manual_seed(k)).to(target.device)
    cache, past = _prefilled(target, ids, prefix)
    mine = target.forward(ids[:, prefix:], torch.arange(prefix, prefix + k, device=target.device)[None], cache)[0]
    return torch.equal(mine, target.model(input_ids=ids[:, prefix:], past_key_values=past).logits.float())


def forward_ms(target, k: int, prefix: int, reps: int) -> float:
    """Median ms of one plain causal forward of k tokens over a `prefix`-token cache: mask=None, so transformers
    builds the causal mask itself, its fastest path (a tree verification must pass its tree mask on top)."""
    cache = target.new_cache(1, prefix + k)
    ids = torch.randint(100, 1000, (1, prefix), device=target.device)
    target.forward(ids, torch.arange(prefix, device=target.device)[None], cache)
    cache.advance(prefix)
    x = torch.randint(100, 1000, (1, k), device=target.device)
    pos = (prefix + torch.arange(k, device=target.device))[None]
    return median_ms(lambda: target.forward(x, pos, cache, None, last_only=k == 1), reps, target.device)


def hf_generate(target, ids: list[int], max_new: int, stops: list[int]) -> tuple[int, float]:
    x = torch.tensor([ids], device=target.device)
    sync(target.device)
    start = time.perf_counter()
    out = target.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=max_new, do_sample=False,
                                eos_token_id=stops, pad_token_id=stops[0])
    sync(target.device)
    return out.shape[1] - len(ids), time.perf_counter() - start


def baseline_target(module, args, dtype: str):
    """The baseline checkout's target, packed as this run's (`--pack`) where its load_target can pack, so a
    before/after column compares engines, not weight layouts; as transformers loads it where it cannot."""
    if "pack" in inspect.signature(module.load_target).parameters:
        return module.load_target(args.model, dtype, pack=args.pack)
    return module.load_target(args.model, dtype)


def load_baseline(directory: str):
    """The eagle_infer package of another checkout, imported as `eagle_infer_baseline` (its own modules): its
    build_engine, InferConf and target module, wherever that checkout keeps them (build_engine in config.py before
    the package's split, build.py after; modules in subpackages since the folder layout)."""
    root = Path(directory).resolve() / "eagle_infer"
    if not (root / "engine.py").exists() and not (root / "decoding" / "engine.py").exists():
        raise EagleError(f"--baseline {directory!r} has no eagle_infer/decoding/engine.py: "
                         "expected a checkout of this repository")
    spec = importlib.util.spec_from_file_location("eagle_infer_baseline", root / "__init__.py",
                                                  submodule_search_locations=[str(root)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["eagle_infer_baseline"] = module
    spec.loader.exec_module(module)
    flat = (root / "engine.py").exists()
    named = lambda flat_name, nested_name: importlib.import_module(  # noqa: E731
        "eagle_infer_baseline." + (flat_name if flat else nested_name))
    config = named("config", "config")
    builder = config if hasattr(config, "build_engine") else named("build", "decoding.build")
    return builder.build_engine, config.InferConf, named("target", "models.target")


class ForwardTimer:
    """Times every target.forward an engine makes (bench instrumentation): a request's first call is its prefill,
    then one per cycle, so a cycle's time minus its forward's is what the engine adds around the forward."""

    def __init__(self, target):
        self.calls: list[float] = []
        self._forward = target.forward

        def timed(*args, **kwargs):
            sync(target.device)
            start = time.perf_counter()
            out = self._forward(*args, **kwargs)
            sync(target.device)
            self.calls.append(time.perf_counter() - start)
            return out

        object.__setattr__(target, "forward", timed)

    def take(self) -> list[float]:
        calls, self.calls = self.calls, []
        return calls


class Runs:
    """Per method: tokens, wall seconds, per-cycle draft/verify seconds and target-forward seconds, taus, outputs."""

    def __init__(self):
        self.data: dict[str, dict] = {}

    def add(self, name: str, result, forwards: list[float]) -> None:
        d = self.data.setdefault(name, {"tokens": 0, "wall": 0.0, "draft": [], "verify": [], "tau": [], "sizes": [],
                                        "outputs": [], "forward": [], "per_level": []})
        d["tokens"] += len(result.tokens)
        d["wall"] += result.wall_s
        d["draft"] += [c.draft_s for c in result.cycles]
        d["verify"] += [c.verify_s for c in result.cycles]
        d["forward"] += forwards[1:]  # the prefill's first
        d["sizes"] += [c.tree_size for c in result.cycles]
        # a level = one head forward (a baseline engine that does not count them leaves this empty)
        d["per_level"] += [c.draft_s / c.head_forwards for c in result.cycles if getattr(c, "head_forwards", 0)]
        d["tau"].append(result.tau)
        d["outputs"].append(result.tokens)

    def overhead_ms(self, name: str) -> float:
        """Median over cycles of (verify time - the target forward inside it)."""
        d = self.data[name]
        return 1000 * statistics.median(v - f for v, f in zip(d["verify"], d["forward"]))

    def tok_s(self, name: str) -> float:
        return self.data[name]["tokens"] / self.data[name]["wall"]

    def step_ms(self, name: str, part: str) -> float:
        values = self.data[name][part]
        return 1000 * statistics.median(values) if values else float("nan")


def dispatched(engine, ids: list[int], max_new: int, stops: list[int]) -> dict:
    """What the host dispatches per cycle (a vanilla step or an EAGLE cycle) of `engine` answering `ids`, from the
    first emitted token on (the prefill excluded): {"aten_ops": outermost aten operators (torch.profiler, CPU
    activity: an operator called by another counts in it), "graph_replays": CUDA graphs replayed}, per cycle."""
    from torch.profiler import ProfilerActivity, profile

    prof, replays, replay = profile(activities=[ProfilerActivity.CPU]), [0], torch.cuda.CUDAGraph.replay

    def counted(graph):
        replays[0] += 1
        return replay(graph)

    def start(_tokens):
        if not prof.profiler:  # the prefill's token: every later one comes from a cycle
            replays[0] = 0
            prof.start()

    torch.cuda.CUDAGraph.replay = counted
    try:
        result = engine.generate(ids, max_new, stop_ids=stops, stream=start)
    finally:
        torch.cuda.CUDAGraph.replay = replay
        if prof.profiler:
            prof.stop()
    cycles = max(len(result.cycles), 1)  # (the prefill records no cycle)
    ops = sum(1 for e in prof.events() if e.name.startswith("aten::") and not _under_aten(e))
    return {"aten_ops": ops / cycles, "graph_replays": replays[0] / cycles}


def _under_aten(event) -> bool:
    """Whether a profiler event runs inside an aten operator (it is then part of that operator's dispatch)."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return True
        parent = parent.cpu_parent
    return False


class Column(NamedTuple):
    """One engine column's engines over its own target and the timer of its target's forwards; hybrid: the
    EAGLE-2 + prompt lookup engine (--hybrid), else None. (A NamedTuple: tests load this script without
    registering it as a module, which a dataclass's string annotations need.)"""

    vanilla: object
    eagle2: object
    timer: "ForwardTimer"
    hybrid: object | None = None

    def drafting(self) -> list[tuple[str, object]]:
        """(method, engine) of every drafting engine: EAGLE-2, then the hybrid where there is one."""
        return [("eagle2", self.eagle2)] + ([(HYBRID, self.hybrid)] if self.hybrid is not None else [])


HYBRID = "eagle2+lookup"


def engines(build, conf_class, target, head: str, args, plan_ahead: str = "") -> Column:
    """The engines of one eagle_infer package over its own target: `build` its build_engine, `conf_class` its
    InferConf; plan_ahead: its EAGLE-2's infer.plan_ahead ("": the default); with args.hybrid also EAGLE-2 with
    prompt lookup merged in (the same tree settings)."""
    timer = ForwardTimer(target)
    vanilla = build(conf_class(method="vanilla"), target)
    tree = {"head": head, "depth": args.depth, "top_k": args.top_k, "total_tokens": args.total_tokens,
            **({"plan_ahead": plan_ahead} if plan_ahead else {})}
    eagle2 = build(conf_class(method="eagle2", **tree), target)
    hybrid = build(conf_class(method=HYBRID, **tree), target) if args.hybrid else None
    return Column(vanilla, eagle2, timer, hybrid)


def tree_engines(targets: dict, head: str) -> dict:
    """Per engine column (name -> target), an engine drafting EAGLE's tree (lab.projection.EAGLE_TREE) with `head`."""
    conf = InferConf(method="eagle1", head=head, static_paths=[list(p) for p in EAGLE_TREE])
    return {name: build_engine(conf, target) for name, target in targets.items()}


def projection(runs: "Runs", prefix: str, figures: PaperFigures | None) -> dict:
    """One engine column's cycle of EAGLE's tree against its vanilla step (per-cycle medians, ms) and, with the
    paper's figures for the model, the speedup projected at its τ (lab.projection)."""
    step, tree = runs.step_ms(f"{prefix} vanilla", "verify"), f"{prefix} eagle tree"
    draft, verify = runs.step_ms(tree, "draft"), runs.step_ms(tree, "verify")
    return {"vanilla_step_ms": step, "draft_ms_per_cycle": draft, "draft_ms_per_level": runs.step_ms(tree, "per_level"),
            "verify_ms_per_cycle": verify, "cycle_vs_step": (draft + verify) / step,
            "projected_speedup": projected_speedup(figures.tau, step, draft, verify) if figures else None}


def bench_dtype(dtype: str, args) -> dict:
    target = load_target(args.model, dtype, pack=args.pack, allow_synthetic=True)
    # as transformers loads it: unpacked weights (a synthetic target's are the same random ones: seeded)
    plain = load_target(args.model, dtype, allow_synthetic=True) if target.packed else None
    fast = load_target(args.model, dtype, pack=args.pack, compile=True, allow_synthetic=True) if args.compile else None
    dtype_name = str(target.dtype).removeprefix("torch.")
    head = args.head
    if head == "shipped":
        try:
            shipped_head_dir(target.name)
        except EagleError:
            head = "random"
    questions = load_benchmark("mt_bench", args.data_dir if Path(args.data_dir).is_dir() else None, limit=args.prompts)
    prompts = [prompt_ids(target.tokenizer, [Message("user", q.turns[0])], target.template) for q in questions]
    stops = stop_ids(target)
    device = target.device

    info = machine(device)
    bandwidth = read_bandwidth_gbs(device)
    weights = step_weight_bytes(target)
    floor_ms = weights / (bandwidth * 1e9) * 1000
    sizes, cached = args.sizes, args.context
    with torch.inference_mode():
        fwd = {k: forward_ms(target, k, cached, args.reps) for k in sizes}
        fwd_plain = {k: forward_ms(plain, k, cached, args.reps) for k in sizes} if plain else {}
        products = {k: matmul_ms(target, k, args.reps) for k in sizes}
        same = {k: same_logits(target, plain, k, cached) for k in sizes} if plain else {}
        fwd_layers = {k: transformers_forward_ms(target, k, cached, args.reps) for k in sizes}
        same_lean = {k: same_as_transformers(target, k, cached) for k in sizes}
        fwd_compiled = {k: forward_ms(fast, k, cached, args.reps) for k in sizes} if fast else {}

    methods = {"this": engines(build_engine, InferConf, target, head, args, args.plan_ahead)}
    if fast:
        methods["compiled"] = engines(build_engine, InferConf, fast, head, args)
    columns = {"this": target, **({"compiled": fast} if fast else {})}
    trees = tree_engines(columns, head) if is_synthetic(args.model) else {}  # (e), the projection's cycles
    if args.baseline:
        base_build, base_conf, base_target = load_baseline(args.baseline)
        methods["baseline"] = engines(base_build, base_conf, baseline_target(base_target, args, dtype), head, args)
    for prefix, col in methods.items():  # warm-up, excluded: every prompt (compiled shapes)
        for ids in prompts:
            for engine in (col.vanilla, col.eagle2, col.hybrid, trees.get(prefix)):
                if engine is not None:
                    engine.generate(ids, 8, stop_ids=stops)
        col.timer.take()
    warm_compiles = fast.compiled_forward.compiles if fast else 0
    for model in filter(None, (target, plain)):
        hf_generate(model, prompts[0], 8, stops)
    level_bytes = level_weight_bytes(methods["this"].eagle2.head.module)
    runs, bare_1, bare_n, bare_1_fast, bare_n_fast = Runs(), [], [], [], []
    tree = args.total_tokens if isinstance(args.total_tokens, int) else 16
    sides = list(methods.items())
    for turn, ids in enumerate(prompts * args.rounds):  # interleaved per prompt: machine drift hits every method alike
        for name, model in (("hf_generate", target), ("hf_generate_unpacked", plain)):
            if model is not None:
                n, dt = hf_generate(model, ids, args.max_new, stops)
                runs.data.setdefault(name, {"tokens": 0, "wall": 0.0})
                runs.data[name]["tokens"] += n
                runs.data[name]["wall"] += dt
        # each side goes first in turn: what runs just before a side (another model's weights read through the
        # caches) would otherwise always favour the same side
        for prefix, col in sides[turn % len(sides):] + sides[:turn % len(sides)]:
            runs.add(f"{prefix} vanilla", col.vanilla.generate(ids, args.max_new, stop_ids=stops), col.timer.take())
            for method, engine in col.drafting():
                runs.add(f"{prefix} {method}", engine.generate(ids, args.max_new, stop_ids=stops), col.timer.take())
            if prefix in trees:
                tree_run = trees[prefix].generate(ids, args.max_new, stop_ids=stops)
                runs.add(f"{prefix} eagle tree", tree_run, col.timer.take())
        context = len(ids) + args.max_new // 2  # bare forwards at this prompt's mean context
        with torch.inference_mode():
            for model, one, many in ((target, bare_1, bare_n), (fast, bare_1_fast, bare_n_fast)):
                if model is not None:
                    one.append(forward_ms(model, 1, context, args.reps))
                    many.append(forward_ms(model, tree + 1, context, args.reps))
    dispatch = {}  # after every timing: the profiler slows what it watches
    for prefix, col in methods.items():
        dispatch[prefix] = {kind: dispatched(engine, prompts[0], min(args.max_new, 64), stops)
                            for kind, engine in [("vanilla", col.vanilla)] + col.drafting()}
        col.timer.take()
    context = int(statistics.mean(len(p) for p in prompts) + args.max_new // 2)
    bare_1, bare_n = statistics.median(bare_1), statistics.median(bare_n)
    bare_fast = (statistics.median(bare_1_fast), statistics.median(bare_n_fast)) if fast else None

    figures = PAPER_FIGURES.get(args.model.removeprefix(PREFIX))
    engine = {}
    for prefix, col in methods.items():
        eagle2, v, e = col.eagle2, f"{prefix} vanilla", f"{prefix} eagle2"
        step, per_level = runs.step_ms(v, "verify"), runs.step_ms(e, "per_level")
        one, n = bare_fast if prefix == "compiled" else (bare_1, bare_n)  # each against its own target's forwards
        engine[prefix] = {
            "vanilla_step_ms": step, "vanilla_step_vs_bare": step / one,
            "vanilla_overhead_ms": runs.overhead_ms(v), "verify_overhead_ms": runs.overhead_ms(e),
            "draft_ms_per_cycle": runs.step_ms(e, "draft"), "draft_ms_per_level": per_level,
            "draft_level_vs_step": per_level / one,
            "verify_ms_per_cycle": runs.step_ms(e, "verify"), "verify_vs_bare": runs.step_ms(e, "verify") / n,
            "vanilla_tok_s": runs.tok_s(v), "eagle2_tok_s": runs.tok_s(e), "eagle2_vs_vanilla": runs.tok_s(e) / runs.tok_s(v),
            "vanilla_vs_hf": runs.tok_s(v) / runs.tok_s("hf_generate"),
            "vanilla_vs_hf_unpacked": runs.tok_s(v) / runs.tok_s("hf_generate_unpacked") if plain else None, "eagle2_tau": statistics.mean(runs.data[e]["tau"]),
            "trees_padded": getattr(eagle2, "pad_trees", False),  # a baseline checkout may predate infer.pad_trees
            "plans_ahead": getattr(eagle2, "plan_ahead", False),  # ... and infer.plan_ahead
            "eagle2_identical_to_vanilla": sum(a == b for a, b in zip(runs.data[e]["outputs"], runs.data[v]["outputs"])),
            "dispatched": dispatch[prefix],
        }
        if col.hybrid is not None:  # --hybrid
            h = f"{prefix} {HYBRID}"
            engine[prefix] |= {
                "hybrid_tok_s": runs.tok_s(h), "hybrid_vs_vanilla": runs.tok_s(h) / runs.tok_s(v),
                "hybrid_tau": statistics.mean(runs.data[h]["tau"]),
                "hybrid_identical_to_vanilla": sum(a == b for a, b in zip(runs.data[h]["outputs"],
                                                                           runs.data[v]["outputs"])),
            }
    return {
        "machine": info, "model": target.name, "dtype": dtype_name, "head": head, "prompts": len(prompts) * args.rounds,
        "max_new_tokens": args.max_new, "read_bandwidth_gbs": bandwidth, "step_weight_mb": weights / 1e6,
        "weights_floor_ms": floor_ms, "level_weight_mb": level_bytes / 1e6,
        "level_floor_ms": level_bytes / (bandwidth * 1e9) * 1000, "packed": target.packed, "forward_ms": {str(k): v for k, v in fwd.items()},
        "forward_ms_unpacked": {str(k): v for k, v in fwd_plain.items()},
        "matmul_ms": {str(k): v for k, v in products.items()},
        "packed_logits_equal": {str(k): v for k, v in same.items()},
        "forward_ms_transformers": {str(k): v for k, v in fwd_layers.items()},
        "logits_equal_transformers": {str(k): v for k, v in same_lean.items()},
        "context": context, "tree_size": tree, "bare_forward_1_ms": bare_1, f"bare_forward_{tree + 1}_ms": bare_n,
        "bare_compiled_ms": list(bare_fast) if fast else None,
        "eagle2": {"depth": args.depth, "top_k": args.top_k, "total_tokens": args.total_tokens},
        "hf_generate_tok_s": runs.tok_s("hf_generate"), "engine": engine,
        "hf_generate_unpacked_tok_s": runs.tok_s("hf_generate_unpacked") if plain else None,
        "forward_ms_compiled": {str(k): v for k, v in fwd_compiled.items()}, "forward_context": cached,
        "projection": {"paper": asdict(figures) if figures else None,
                       "tree_nodes": len(EAGLE_TREE), "tree_depth": max(map(len, EAGLE_TREE)),
                       "engine": {prefix: projection(runs, prefix, figures) for prefix in trees}} if trees else None,
        "compile": {"graphs_at_warm_up": warm_compiles, "compile_s": fast.compiled_forward.compile_s,
                    "graphs_after_warm_up": fast.compiled_forward.compiles - warm_compiles,
                    "failed": fast.compiled_forward.failed,
                    "cudagraph_skips": fast.compiled_forward.cudagraph_skips if device.type == "cuda" else None}
        if fast else None,
    }


def print_tables(r: dict) -> None:
    m = r["machine"]
    where = m.get("gpu") or m["cpu"]
    print(f"\n## bench-engine: {r['model']} {r['dtype']} on {where} ({m['device']}, {m['threads']} threads, "
          f"flags: {' '.join(m['flags']) or 'none of ' + ' '.join(FLAGS)})\n")
    print(f"memory read bandwidth {r['read_bandwidth_gbs']:.1f} GB/s; a one-token step reads {r['step_weight_mb']:.0f} MB "
          f"of weights: floor {r['weights_floor_ms']:.1f} ms; a draft level reads {r['level_weight_mb']:.1f} MB: floor "
          f"{r['level_floor_ms']:.2f} ms\n")
    fwd = r["forward_ms"]
    print(f"| k tokens ({r['forward_context']}-token cache) | " + " | ".join(fwd) + " |")
    print("|---|" + "---|" * len(fwd))
    if r["packed"]:
        plain = r["forward_ms_unpacked"]
        print("| forward ms, packed weights (the engine's) | " + " | ".join(f"{v:.1f}" for v in fwd.values()) + " |")
        print("| forward ms, unpacked (as transformers loads it) | " + " | ".join(f"{plain[k]:.1f}" for k in fwd) + " |")
        print("| packed speedup | " + " | ".join(f"{plain[k] / fwd[k]:.2f}x" for k in fwd) + " |")
        same = r["packed_logits_equal"]
        print("| packed logits = unpacked, bit for bit | " + " | ".join("yes" if same[k] else "no" for k in fwd) + " |")
    else:
        print("| forward ms | " + " | ".join(f"{v:.1f}" for v in fwd.values()) + " |")
    if r["compile"]:
        fast = r["forward_ms_compiled"]
        print("| forward ms, compiled (infer.compile) | " + " | ".join(f"{fast[k]:.1f}" for k in fwd) + " |")
        print("| compiled speedup over the engine's eager forward | " + " | ".join(f"{fwd[k] / fast[k]:.2f}x" for k in fwd) + " |")
    layers = r["forward_ms_transformers"]
    print("| forward ms, transformers' own forward of the same weights | " + " | ".join(f"{layers[k]:.1f}" for k in fwd) + " |")
    print("| the engine's speedup over it | " + " | ".join(f"{layers[k] / fwd[k]:.2f}x" for k in fwd) + " |")
    same = r["logits_equal_transformers"]
    print("| logits = transformers', bit for bit | " + " | ".join("yes" if same[k] else "no" for k in fwd) + " |")
    products = r["matmul_ms"]
    print("| of which the linear layers' products alone | " + " | ".join(f"{products[k]:.1f}" for k in fwd) + " |\n")
    n = r["tree_size"] + 1
    print(f"Engine against bare forwards at a {r['context']}-token mean context, measured between the prompts' runs "
          f"(bare 1 token {r['bare_forward_1_ms']:.1f} ms, "
          f"bare {n} tokens {r[f'bare_forward_{n}_ms']:.1f} ms, on this engine's target"
          f"{', packed; a baseline loads its own target, packed where it can' if r['packed'] else ''}"
          + (f"; compiled: {r['bare_compiled_ms'][0]:.1f} and {r['bare_compiled_ms'][1]:.1f} ms, the compiled column's "
             "reference" if r["bare_compiled_ms"] else "")
          + f"), {r['prompts']} MT-bench prompts, {r['max_new_tokens']} "
          f"new tokens, {r['head']} head, depth {r['eagle2']['depth']}, top_k {r['eagle2']['top_k']}, total_tokens "
          f"{r['eagle2']['total_tokens']}:\n")
    cols = list(r["engine"])
    rows = [
        ("vanilla step ms (vs bare 1-token forward)", lambda e: f"{e['vanilla_step_ms']:.1f} ({e['vanilla_step_vs_bare']:.2f}x)"),
        ("vanilla step: ms around its target forward", lambda e: f"{e['vanilla_overhead_ms']:.2f}"),
        ("draft ms per level (vs bare 1-token forward)", lambda e: "– (head forwards not counted)"
         if math.isnan(e["draft_ms_per_level"]) else f"{e['draft_ms_per_level']:.2f} ({e['draft_level_vs_step'] * 100:.1f} %)"),
        (f"verify ms per cycle (vs bare {n}-token forward)", lambda e: f"{e['verify_ms_per_cycle']:.1f} ({e['verify_vs_bare']:.2f}x)"),
        ("verify: ms around its target forward", lambda e: f"{e['verify_overhead_ms']:.2f}"),
        ("draft + verify ms per cycle", lambda e: f"{e['draft_ms_per_cycle']:.1f} + {e['verify_ms_per_cycle']:.1f}"),
        ("vanilla tok/s (vs transformers generate, same target)", lambda e: f"{e['vanilla_tok_s']:.1f} ({e['vanilla_vs_hf']:.2f}x)"),
        *([("vanilla vs transformers generate as it loads the model (unpacked)",
            lambda e: f"{e['vanilla_vs_hf_unpacked']:.2f}x")] if r["packed"] else []),
        ("EAGLE-2 tok/s (vs vanilla)", lambda e: f"{e['eagle2_tok_s']:.1f} ({e['eagle2_vs_vanilla']:.2f}x)"),
        ("EAGLE-2 τ", lambda e: f"{e['eagle2_tau']:.2f}"),
        ("EAGLE-2 trees padded to a few widths (infer.pad_trees)", lambda e: "yes" if e["trees_padded"] else "no"),
        ("EAGLE-2 auto budget plans the next cycle (infer.plan_ahead)", lambda e: "yes" if e["plans_ahead"] else "no"),
        ("EAGLE-2 = vanilla output", lambda e: f"{e['eagle2_identical_to_vanilla']}/{r['prompts']}"),
        ("aten operators / CUDA graph replays the host dispatches per vanilla step", lambda e: dispatch_cell(e, "vanilla")),
        ("... per EAGLE-2 cycle", lambda e: dispatch_cell(e, "eagle2")),
    ]
    if any("hybrid_tok_s" in e for e in r["engine"].values()):  # --hybrid
        hybrid = lambda fmt: lambda e: fmt(e) if "hybrid_tok_s" in e else "–"  # noqa: E731
        rows += [
            ("EAGLE-2 + prompt lookup tok/s (vs vanilla)",
             hybrid(lambda e: f"{e['hybrid_tok_s']:.1f} ({e['hybrid_vs_vanilla']:.2f}x)")),
            ("EAGLE-2 + prompt lookup τ", hybrid(lambda e: f"{e['hybrid_tau']:.2f}")),
            ("EAGLE-2 + prompt lookup = vanilla output",
             hybrid(lambda e: f"{e['hybrid_identical_to_vanilla']}/{r['prompts']}")),
            ("... per EAGLE-2 + prompt lookup cycle", hybrid(lambda e: dispatch_cell(e, HYBRID))),
        ]
    print("| | " + " | ".join(cols) + " |\n|---|" + "---|" * len(cols))
    for label, fmt in rows:
        print(f"| {label} | " + " | ".join(fmt(r["engine"][c]) for c in cols) + " |")
    if r["compile"]:
        c = r["compile"]
        print(f"\ncompiled: {c['graphs_at_warm_up']} graphs compiled in warm-up ({c['compile_s']:.0f} s, excluded from "
              f"every timing), {c['graphs_after_warm_up']} after it" + (f"; compile FAILED, ran eagerly: {c['failed']}"
                                                                      if c["failed"] else "")
              + ("" if c.get("cudagraph_skips") is None else f"; graphs run without CUDA graphs: {c['cudagraph_skips']}"))
    print(f"\ntransformers generate: {r['hf_generate_tok_s']:.1f} tok/s on the engine's target"
          + (f" (packed weights); {r['hf_generate_unpacked_tok_s']:.1f} tok/s as transformers loads it (unpacked)"
             if r["packed"] else ""))
    if r["projection"]:
        print_projection(r)


def dispatch_cell(engine: dict, kind: str) -> str:
    """'ops / replays' of an engine column's `kind` ("vanilla", "eagle2", HYBRID) per cycle."""
    d = engine["dispatched"][kind]
    return f"{d['aten_ops']:.0f} / {d['graph_replays']:.1f}"


def print_projection(r: dict) -> None:
    """(e): the cycle of EAGLE's tree against the vanilla step, and the projected speedup beside the paper's."""
    p, paper = r["projection"], r["projection"]["paper"]
    cols = list(p["engine"])
    rows = [
        ("vanilla step ms", lambda e: f"{e['vanilla_step_ms']:.2f}"),
        ("draft ms per cycle (ms per level)",
         lambda e: f"{e['draft_ms_per_cycle']:.2f} ({e['draft_ms_per_level']:.2f})"),
        (f"verify ms per cycle ({p['tree_nodes'] + 1} tokens)", lambda e: f"{e['verify_ms_per_cycle']:.2f}"),
        ("draft + verify per cycle, in vanilla steps", lambda e: f"{e['cycle_vs_step']:.2f}"),
    ]
    if paper:
        rows.append((f"PROJECTED speedup at τ {paper['tau']} ({paper['tau_source']})",
                     lambda e: f"{e['projected_speedup']:.2f}x"))
    print(f"\n{r['model']} has random weights, so its τ above means nothing. A cycle of EAGLE's draft tree "
          f"({p['tree_nodes']} nodes, depth {p['tree_depth']}; a random head drafts it, the target verifies it), "
          "per-cycle medians:\n")
    print(table(["", *cols], [[label, *(fmt(p["engine"][c]) for c in cols)] for label, fmt in rows]))
    if not paper:
        print(f"No published τ for {r['model'].removeprefix(PREFIX)} (lab/projection.py): no projection.")
        return
    measured = (f"the paper measured {paper['speedup']:.2f}x ({paper['speedup_source']}) on its own GPU"
                if paper["speedup"] else "the paper reports no measured speedup for this target")
    print(f"The projection is τ × vanilla step / (draft + verify per cycle) with the paper's τ, not a measurement; "
          f"{measured}.")


def token_counts(text: str) -> tuple[int, ...]:
    """--sizes: comma-separated positive token counts."""
    try:
        sizes = tuple(int(k) for k in text.split(","))
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: expected comma-separated positive token counts, "
                                         "e.g. 1,16,64")
    return sizes


def token_count(text: str) -> int:
    """--context: one positive token count."""
    sizes = token_counts(text)
    if len(sizes) != 1:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: expected one positive token count")
    return sizes[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtypes", default="auto", help="comma-separated: auto (the machine's native dtype), bfloat16, float32")
    ap.add_argument("--head", default="shipped", help='"shipped", "random" or a head directory')
    ap.add_argument("--prompts", type=int, default=3, help="MT-bench first turns")
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=1, help="passes over the prompts (more averages out a busy machine)")
    ap.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data" / "benchmarks"))
    ap.add_argument("--out", default=str(REPO / "results" / "bench-engine.json"))
    int_or_auto = lambda v: v if v == "auto" else int(v)  # noqa: E731
    ap.add_argument("--depth", type=int_or_auto, default=InferConf.depth)
    ap.add_argument("--top-k", type=int, default=InferConf.top_k)
    ap.add_argument("--total-tokens", type=int_or_auto, default=InferConf.total_tokens, help="a number or auto")
    ap.add_argument("--pack", default="auto", help="the engine target's model.pack: auto, on or off")
    ap.add_argument("--compile", action="store_true", help="also measure the compiled target (infer.compile)")
    ap.add_argument("--hybrid", action="store_true",
                    help="also measure EAGLE-2 with prompt lookup merged in (eagle2+lookup, the same tree settings)")
    ap.add_argument("--baseline", default="", help="another checkout whose engine is measured alongside")
    ap.add_argument("--plan-ahead", default="", choices=["", "auto", "on", "off"],
                    help="this checkout's EAGLE-2 infer.plan_ahead (a baseline keeps its default): with --baseline "
                         "of the same commit, the auto budget's two schedules side by side")
    ap.add_argument("--sizes", type=token_counts, default=SIZES, help="comma-separated tokens per timed forward")
    ap.add_argument("--context", type=token_count, default=300, help="cached tokens before each timed forward")
    args = ap.parse_args()

    by_dtype = {}
    for dtype in args.dtypes.split(","):
        result = bench_dtype(dtype, args)
        by_dtype[result["dtype"]] = result
        print_tables(result)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"by_dtype": by_dtype}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
