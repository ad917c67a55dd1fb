"""The target's forward compiled by torch.compile (`infer.compile=true`): the same lean steps the eager forward runs
(target.decode), through inductor with freezing (weights folded in as constants and packed for oneDNN on a CPU,
elementwise ops fused), CUDA graphs on a GPU (the KV cache's buffers are marked static, so writing them in place
does not stop capture). On a GPU the draft head's step (head_runner.head_step, with an EAGLE-2 level's bookkeeping
in the same call) is compiled too (HeadRunner, compile_step): a level is launch-bound there; so is acceptance +
commit (verify_batch.accept_and_commit, Engine.accept), a function without weights. On a CPU the head drafts
eagerly: compiling its step did not pay on the CPU measured (docs/design.md, "Compiled forward").

It runs over a static KV cache (kv_cache.KVCache with static=True): attention spans every preallocated slot under an
additive mask and the write slots arrive as tensors (kv_cache.Slots), so nothing the graph reads changes between
steps. The number of new tokens and the cache length are marked dynamic (target.forward, KVCache), so three graphs
serve a run: one-token steps, prefills and verifications (a new batch size is compiled once more, then dynamic too);
`compiles` counts every graph compiled, so a benchmark can show that none happens after warm-up. A forward whose
compile fails (no C++ compiler, an unsupported op) logs one warning and runs eagerly from then on (over the same
static cache): a missing compiler never stops decoding. Any other error raised inside the compiled call takes the
same path, and the eager rerun raises it again.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

import torch

log = logging.getLogger(__name__)
STATIC_ROUND = 256  # a static cache's length is rounded up to a multiple of this, so requests share graphs


def static_length(max_len: int) -> int:
    """A static cache's length for at least max_len positions: rounded up to STATIC_ROUND."""
    return -(-max_len // STATIC_ROUND) * STATIC_ROUND


def mark_dynamic_step(mask: torch.Tensor, rope: torch.Tensor, *inputs: torch.Tensor) -> None:
    """Before a compiled forward over a static cache: with several new tokens, the inputs' token dimension (1), the
    rotary table's (2, lean_layer.RopeTable.take) and the mask's query dimension (2) are dynamic, so one graph serves
    any number of tokens at once (one token stays a graph of its own); the mask's key dimension (3) is dynamic for
    any cache length."""
    if mask.shape[2] > 1:
        for x in inputs:
            torch._dynamo.maybe_mark_dynamic(x, 1)
        torch._dynamo.maybe_mark_dynamic(rope, 2)
        torch._dynamo.maybe_mark_dynamic(mask, 2)
    torch._dynamo.maybe_mark_dynamic(mask, 3)


class _Bound(torch.nn.Module):
    """fn(module, *args) as a module over `module`: reached through a module, the weights are parameters that
    freezing folds in and packs (reached through a plain object they would stay graph inputs)."""

    def __init__(self, module: torch.nn.Module, fn: Callable):
        super().__init__()
        self.inner, self.fn = module, fn

    def forward(self, *args):
        return self.fn(self.inner, *args)


class CompiledForward:
    """fn(module, *args) compiled (fn(*args) when module is None: a step without weights); calling it falls back to
    the eager fn, with one warning, if compiling fails."""

    def __init__(self, module: torch.nn.Module | None, fn: Callable, device: torch.device, what: str):
        """what: names it in the fallback warning ("the target's forward")."""
        self.fn = fn if module is None else _Bound(module, fn)
        self.what, self.compiles, self.compile_s, self.failed = what, 0, 0.0, ""
        # On a CPU freezing must be on while dynamo traces too (not only in the backend's config patches): else the
        # weights stay graph inputs and are neither folded in nor packed. On a GPU it stays off: it would fold the KV
        # cache's static-address buffers into the graph as constants (one request's cache baked in), where CUDA
        # graphs need them as static inputs.
        gpu = device.type == "cuda"
        self.options = {"freezing": not gpu, "triton.cudagraphs": gpu}

        def backend(graph, example_inputs):
            # Lazy: inductor is imported only when a graph is compiled (read at call time, so tests can stub it).
            from torch._inductor.compile_fx import compile_fx

            self.compiles += 1
            return compile_fx(graph, example_inputs)

        # Every target's graphs share one code object, whose graphs count against dynamo's recompile limit (8):
        # past it dynamo would quietly run eagerly. A process compiles a few shapes of a few targets at most.
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
        self._compiled = torch.compile(self.fn, backend=backend)

    @property
    def cudagraph_skips(self) -> int:
        """Graphs compiled on a GPU that run without CUDA graphs (inductor logs each reason; the count is
        process-wide): 0 when every graph is captured."""
        from torch._dynamo.utils import counters  # lazy: dynamo's internals only where a GPU run asks

        return int(counters["inductor"]["cudagraph_skips"])

    def __call__(self, *args, **kwargs):
        if self.failed:
            return self.fn(*args, **kwargs)
        before, start = self.compiles, time.perf_counter()
        graphs = self.options["triton.cudagraphs"]
        try:
            if graphs:  # each call is a new step: a graph replay may overwrite the last call's outputs
                torch.compiler.cudagraph_mark_step_begin()
            # suppress_errors off: a compile error reaches the fallback below (training sets it process-wide)
            with torch._dynamo.config.patch(suppress_errors=False), torch._inductor.config.patch(self.options):
                out = self._compiled(*args, **kwargs)
            if graphs:  # callers keep outputs across calls (features, logits): copy them out of the graph's pool
                out = torch.utils._pytree.tree_map_only(torch.Tensor, torch.clone, out)
        except Exception as err:  # noqa: BLE001 (any compile failure falls back: the eager forward is the same)
            self.failed = _first_line(err)
            log.warning("infer.compile: compiling %s failed (%s); running it eagerly", self.what, self.failed[:300])
            return self.fn(*args, **kwargs)
        if self.compiles > before:
            self.compile_s += time.perf_counter() - start
        return out


def _first_line(err: BaseException) -> str:
    """'Type: first line' of the innermost cause (dynamo wraps a backend's error in BackendCompilerFailed)."""
    while getattr(err, "inner_exception", None) or err.__cause__:
        err = getattr(err, "inner_exception", None) or err.__cause__
    lines = [line for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0].strip() if lines else ''}"
