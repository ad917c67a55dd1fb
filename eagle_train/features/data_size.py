"""How much a recipe's data is, and what featurize and cached training write for it: tokens and loss tokens estimated
from characters before featurize (CHARS_PER_TOKEN, each message's template markup TEMPLATE_TOKENS; capped at
max_length, regenerated answers at regenerate_max_new_tokens) or read exactly from a directory's manifest after, and
the bytes a token each training mode stores."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .disk import ID_BYTES
from .shards import Manifest

CHARS_PER_TOKEN = 4.0  # English text in Llama-3 / Qwen / SmolLM2 BPE vocabularies: ~4 characters a token
TEMPLATE_TOKENS = 6  # a message's role markers and separators


@dataclass
class DataSize:
    conversations: int
    tokens: int
    loss_tokens: int
    exact: bool  # from a manifest; else estimated from characters


def estimate_data(conversations, max_length: int, regenerate: bool, max_new_tokens: int, turns: int) -> DataSize:
    """Tokens and loss tokens of `conversations` (lists of eagle_infer.models.chat.Message) estimated from characters."""
    tokens = loss = 0
    for conv in conversations:
        if regenerate:
            users = [m for m in conv if m.role == "user"][:turns]
            answers = [m for m in conv if m.role == "assistant"][: len(users)]
            pieces = [(len(m.content) / CHARS_PER_TOKEN, False) for m in users]
            pieces += [(min(max(len(m.content) / CHARS_PER_TOKEN, max_new_tokens / 2), max_new_tokens), True)
                       for m in answers or users]  # a user turn without its answer gets one
        else:
            pieces = [(len(m.content) / CHARS_PER_TOKEN, m.role == "assistant") for m in conv]
        total = sum(n + TEMPLATE_TOKENS for n, _ in pieces)
        kept = min(1.0, max_length / max(total, 1))
        tokens += int(total * kept)
        loss += int(sum(n + 1 for n, answer in pieces if answer) * kept)
    return DataSize(len(conversations), tokens, loss, exact=False)


def manifest_data(directory: str | Path) -> DataSize | None:
    """The exact sizes of a featurized directory, or None before featurize."""
    if not (Path(directory) / "manifest.json").exists():
        return None
    m = Manifest.load(directory)
    return DataSize(m.conversations, m.tokens, m.loss_tokens, exact=True) if m.conversations else None


def state_values(target, fused: int) -> int:
    """Values stored a token: the last hidden state, and the `fused` layers beside it (EAGLE-3's three)."""
    return target.hidden_size * (1 + fused)


def disk_bytes(tokens: int, target, fused: int, store_bytes: int, mode: str) -> int:
    """Bytes a mode writes for `tokens` with `fused` layers: states at store_bytes a value (offline, cached) or tokens
    only (online)."""
    return tokens * (ID_BYTES + (0 if mode == "online" else state_values(target, fused) * store_bytes))
