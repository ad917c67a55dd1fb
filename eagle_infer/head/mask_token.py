"""The DFlash drafter's mask token (head.mask_token_id): the id at a block's B - 1 masked positions.

It is only ever an input of the drafter, embedded by the target's frozen embedding, so it must be an id that no
chat the target decodes contains: an embedding row beyond the tokenizer's ids (Qwen3-8B has 267 such rows, and
z-lab's Qwen3 drafters use 151669, the first), or a special token the chat template never emits. Special-token text
inside a message stays text here (eagle_infer.models.chat.encode), so a special id reaches the target only from the
template. For SmolLM2 that is `<|endoftext|>` (id 0): its vocabulary has no spare row (49152 ids, all the
tokenizer's), its chat template emits only `<|im_start|>` and `<|im_end|>`, and `<|endoftext|>` was pretrained as
the document separator, so its embedding is a trained vector of no content. An id that the tokenizer maps to text
would make the drafter read the masked positions as that text: refused in one line.
"""
from __future__ import annotations

from ..errors import EagleError
from ..models.chat import Message, encode, render

PROBE = [Message("system", "s"), Message("user", "u"), Message("assistant", "a"), Message("user", "u")]


def _special_ids(tokenizer) -> set[int]:
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    return set(getattr(tokenizer, "all_special_ids", None) or ()) | {i for i, t in added.items() if t.special}


def template_ids(target) -> set[int]:
    """The ids the target's chat template emits (a rendered probe chat of every role, with the generation prompt)."""
    rendered = render(PROBE, target.tokenizer, target.template, add_generation_prompt=True)
    return set(encode(target.tokenizer, rendered)[0])


def default_mask_token(target) -> int:
    """The first embedding row beyond the tokenizer's ids, else the lowest special id the chat template never emits;
    a one-line error when the target has neither. A target without a tokenizer (a shape on the meta device, a test's
    stand-in) takes its last row."""
    tokenizer = target.tokenizer
    if tokenizer is None:
        return target.vocab_size - 1
    if len(tokenizer) < target.vocab_size:
        return len(tokenizer)
    free = sorted(_special_ids(tokenizer) - template_ids(target))
    if not free:
        raise EagleError(f"target {target.name!r} has no spare embedding row and no special token its chat template "
                         "leaves unused: expected head.mask_token_id=<a token id the chats never contain>")
    return free[0]


def check_mask_token(target, token_id: int) -> None:
    """One line when `token_id` is no mask token for `target`: outside the vocabulary, mapped to text by its tokenizer,
    or emitted by its chat template. A target without a tokenizer (a test's) is checked for the range only."""
    if not 0 <= token_id < target.vocab_size:
        raise EagleError(f"head.mask_token_id {token_id} is outside the target's {target.vocab_size} token ids")
    tokenizer = target.tokenizer
    if tokenizer is None or token_id >= len(tokenizer):
        return
    if token_id not in _special_ids(tokenizer):
        raise EagleError(f"head.mask_token_id {token_id} is text to the tokenizer ({tokenizer.decode([token_id])!r}): "
                         f"expected a special token the chat template never emits, or an id >= {len(tokenizer)}; "
                         f"the default is {default_mask_token(target)}")
    if token_id in template_ids(target):
        raise EagleError(f"head.mask_token_id {token_id} ({tokenizer.decode([token_id])!r}) is emitted by the chat "
                         f"template: expected one it never emits; the default is {default_mask_token(target)}")
