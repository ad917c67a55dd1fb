"""Synthetic targets for systems measurements: `model.name=synthetic:<registered name>` is that model's architecture
(eagle_infer.models.registry.Architecture) with random weights, built on the device in the requested dtype, with a
stand-in tokenizer; no download, no hub, no files.

A forward's cost does not depend on the weights' values, so a synthetic target times a cycle as the real model
would (a 7B target where no hub is reachable); its outputs, acceptance and τ mean nothing. `load_target` therefore
refuses it unless asked (scripts/bench_engine.py and scripts/check_lossless.py ask): nothing that reports
acceptance as a result (eval, ablate-head, training, chat) can run on it. Its shipped head is a random head of
the matching shape (eagle_infer.decoding.build).
"""
from __future__ import annotations

import hashlib
import re

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from ..errors import EagleError
from .registry import MODELS, Architecture, ModelSpec, lookup

PREFIX = "synthetic:"
SEED = 0  # every build of one architecture on one device has the same weights (packed and plain copies compare)
WORD = re.compile(r"\w+|[^\w\s]")


def is_synthetic(model: str) -> bool:
    """Whether a model name asks for a synthetic target."""
    return str(model).startswith(PREFIX)


def synthetic_spec(model: str) -> ModelSpec:
    """The registered model "synthetic:<name>" stands for; a one-line error for a name not in the registry."""
    spec = lookup(model.removeprefix(PREFIX))
    if spec is None:
        raise EagleError(f"unknown synthetic target {model!r}: expected {PREFIX}<registered name>, one of "
                         + ", ".join(PREFIX + name for name in MODELS))
    return spec


def synthetic_refusal(model: str) -> EagleError:
    """The one-line error for a synthetic target where results are reported."""
    return EagleError(f"model {model!r} has random weights: a synthetic target is for speed measurements "
                      "(scripts/bench_engine.py, scripts/check_lossless.py), not for anything that reports acceptance "
                      "(eval, ablate-head, training, chat); expected a registered name, hub id or model directory")


class WordTokenizer:
    """A stand-in tokenizer over a vocabulary of `vocab_size` ids: each word or punctuation mark of a text is one id,
    a stable hash into [3, vocab_size), so a prompt gets about as many tokens as a real tokenizer gives it (its
    prefill costs about what it would); 0, 1 and 2 are unk, bos and eos, as in Llama's vocabulary. It offers what
    decoding reads of a tokenizer (eagle_infer.models.chat.prompt_ids and stop_ids): encoding, the eos id and the ids of
    special tokens. Nothing decodes a synthetic target's output to text."""

    unk_token_id, bos_token_id, eos_token_id = 0, 1, 2
    eos_token = "</s>"
    chat_template = None  # rendered with a named template instead (chat_template below)
    SPECIAL = {"<unk>": 0, "<s>": 1, "</s>": 2}

    def __init__(self, vocab_size: int):
        if vocab_size <= len(self.SPECIAL):
            raise EagleError(f"vocabulary size {vocab_size} is invalid for a synthetic target: expected > "
                             f"{len(self.SPECIAL)}")
        self.vocab_size = vocab_size

    def _id(self, piece: str) -> int:
        digest = int.from_bytes(hashlib.blake2b(piece.encode(), digest_size=8).digest(), "little")
        return len(self.SPECIAL) + digest % (self.vocab_size - len(self.SPECIAL))

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        """{"input_ids": one id per word or punctuation mark}, after bos when add_special_tokens."""
        ids = [self._id(piece) for piece in WORD.findall(text)]
        return {"input_ids": ([self.bos_token_id] if add_special_tokens else []) + ids}

    def convert_tokens_to_ids(self, token: str) -> int:
        return self.SPECIAL.get(token, self.unk_token_id)


def chat_template(spec: ModelSpec) -> str:
    """The registered model's named template; ChatML where it uses its tokenizer's own (the stand-in has none)."""
    return "chatml" if spec.template == "tokenizer" else spec.template


def synthetic_model(arch: Architecture, dtype: torch.dtype, device: torch.device):
    """A transformers causal LM of shape `arch`, random weights by transformers' own initialisation seeded with SEED,
    each tensor created on `device` in `dtype` (nothing is materialised on the host first: a 7B model in bfloat16
    takes its 13.5 GB on the GPU only). Eval mode, no gradients; the global random state is left as it was."""
    config = AutoConfig.for_model(
        arch.model_type, hidden_size=arch.hidden_size, num_hidden_layers=arch.layers,
        num_attention_heads=arch.heads, num_key_value_heads=arch.kv_heads, intermediate_size=arch.intermediate_size,
        vocab_size=arch.vocab_size, rope_theta=arch.rope_theta, max_position_embeddings=arch.max_positions,
        tie_word_embeddings=arch.tied,
    )
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), device:
        torch.manual_seed(SEED)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    return model.eval().requires_grad_(False)


def synthetic_parts(model: str, dtype: torch.dtype, device: torch.device) -> tuple[torch.nn.Module, WordTokenizer, str]:
    """(random-weight model, stand-in tokenizer, chat template name) of "synthetic:<registered name>"."""
    spec = synthetic_spec(model)
    return synthetic_model(spec.arch, dtype, device), WordTokenizer(spec.arch.vocab_size), chat_template(spec)
