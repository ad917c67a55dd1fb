"""Methods to compare, each a small adapter with one `generate_batch` signature, all timed by the same harness.

Engine methods (the method registry's: vanilla, chain, eagle1, eagle2, lookup, and the hybrids chain/eagle1/eagle2
+ "+lookup"; eagle_infer.decoding.methods) call the one engine; peers from transformers (hf_generate, pld, assisted) call `generate` on the same target model
object, so dtype, weights and threads are shared. pld runs with the `lookup` group's max_ngram and num_tokens, so
lookup and pld compare at equal settings. vLLM itself is a peer too: "vllm" and "vllm:LABEL" (eval.vllm_backend).
"""
from __future__ import annotations

import time
from dataclasses import replace

import torch

from eagle_infer.decoding.build import build_engine
from eagle_infer.config import InferConf, LookupConf
from eagle_infer.errors import EagleError
from eagle_infer.head.head_checkpoint import load_head
from eagle_infer.head.head_runner import runner_for
from eagle_infer.decoding.methods import Method, method_named, method_names
from eagle_infer.decoding.records import BatchResult, GenerationResult
from eagle_infer.models.target import load_target
from eagle_infer.config import SamplingParams

from .vllm_backend import VLLM, VllmConf, VllmMethod

PEER_METHODS = ("hf_generate", "pld", "assisted", VLLM)


def all_methods() -> tuple[str, ...]:
    """Every method name eval runs: the registered engine methods, then transformers' peers."""
    return method_names() + PEER_METHODS


def engine_method(name: str) -> Method | None:
    """The registry's entry of an engine method name such as "eagle2+lookup:LABEL" (None for a peer)."""
    base = name.split(":")[0]
    return method_named(base) if base in method_names() else None


def needs_head(name: str) -> bool:
    method = engine_method(name)
    return method is not None and method.head


class EngineMethod:
    """name: an engine method, optionally with ":LABEL" naming which head it drafts with."""

    def __init__(self, name: str, target, infer: InferConf, head):
        self.name = name
        method = engine_method(name)
        settings = replace(infer, method=method.name, lookup=False)
        if method.tree == "none":  # vanilla: the run's tree settings do not apply (lookup keeps them: auto or fixed)
            settings = replace(settings, budget="fixed", depth=1, total_tokens=1)
        self.engine = build_engine(settings, target, head)

    def generate_batch(self, prompts, max_new, sampling: SamplingParams, stops, seed, batch_size: int = 1) -> BatchResult:
        return self.engine.generate_batch(prompts, max_new, sampling, stops, seed=seed, batch_size=batch_size)


class PeerMethod:
    """transformers' generate: plain (hf_generate), prompt lookup (pld) or assisted by a smaller model."""

    def __init__(self, name: str, target, assistant=None, lookup: LookupConf = LookupConf()):
        self.name, self.target, self.assistant, self.lookup = name, target, assistant, lookup

    def generate_batch(self, prompts, max_new, sampling: SamplingParams, stops, seed, batch_size: int = 1) -> BatchResult:
        if len(prompts) != 1 or batch_size != 1:
            raise EagleError(f"method {self.name!r} answers one request at a time: use batch_size=1 or engine methods")
        result = self._generate(prompts[0], max_new, sampling, stops, seed)
        return BatchResult(results=[result], wall_s=result.wall_s, batch_size=1, cache_bytes=0)

    def _generate(self, ids, max_new, sampling: SamplingParams, stops, seed) -> GenerationResult:
        target = self.target
        x = torch.tensor([ids], device=target.device)
        kwargs = dict(attention_mask=torch.ones_like(x), max_new_tokens=max_new, eos_token_id=stops, pad_token_id=stops[0])
        if sampling.greedy:
            kwargs["do_sample"] = False
        else:
            kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.sampling_top_k)
            torch.manual_seed(seed)
        if self.name == "pld":
            kwargs.update(prompt_lookup_num_tokens=self.lookup.num_tokens, max_matching_ngram_size=self.lookup.max_ngram)
        elif self.name == "assisted":
            kwargs["assistant_model"] = self.assistant.model
        start = time.perf_counter()
        with torch.inference_mode():
            out = target.model.generate(x, **kwargs)
        if target.device.type == "cuda":
            torch.cuda.synchronize()
        wall = time.perf_counter() - start
        tokens = out[0, len(ids):].tolist()
        reason = "stop" if tokens and tokens[-1] in stops else "length"
        return GenerationResult(tokens=tokens, cycles=[], prefill_s=0.0, wall_s=wall, stop_reason=reason)


def make_methods(names: list[str], target, infer: InferConf, head, assistant_model: str | None, dtype: str,
                 heads: dict[str, str] | None = None, vllm: VllmConf | None = None) -> list:
    """Adapters for `names`, in order. "eagle2:LABEL" (any engine method) drafts with the head heads[LABEL] instead
    of the run's head, so several heads share one table; "vllm:LABEL" serves heads[LABEL] in vLLM (`vllm`'s
    settings). Unknown names are one-line errors. The peers' prompt lookup (pld) takes infer.lookup_conf's
    settings."""
    heads = heads or {}
    unknown = [n for n in names if n.split(":")[0] not in all_methods()]
    if unknown:
        raise EagleError(f"unknown method {unknown[0]!r}: expected some of {', '.join(all_methods())} (optionally :LABEL)")
    labels = [n.split(":", 1)[1] for n in names if ":" in n]
    missing = [label for label in labels if label not in heads]
    if missing:
        raise EagleError(f"method label {missing[0]!r} has no head: add heads.{missing[0]}=<head directory>")
    assistant = None
    if "assisted" in names:
        if not assistant_model:
            raise EagleError("method 'assisted' needs eval.assistant_model=<smaller model of the same tokenizer>")

        # Like the target's transformers model, which a compiled target leaves unpacked (its graph holds the packing).
        modules_packed = target.packed and target.compiled_forward is None
        assistant = load_target(assistant_model, dtype, str(target.device), "on" if modules_packed else "off")
    methods = []
    for name in names:
        base, _, label = name.partition(":")
        if base == VLLM:
            methods.append(VllmMethod(name, target, infer, load_head(heads[label], target) if label else None,
                                      vllm or VllmConf()))
        elif base in PEER_METHODS:
            methods.append(PeerMethod(name, target, assistant, infer.lookup_conf))
        elif not needs_head(name):
            methods.append(EngineMethod(name, target, infer, None))
        else:
            own = runner_for(load_head(heads[label], target), target) if label else head
            methods.append(EngineMethod(name, target, infer, own))
    return methods
