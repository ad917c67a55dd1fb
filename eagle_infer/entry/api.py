"""The Python API: a target and its draft head loaded in one call, answering text or chat messages.

    from eagle_infer import load
    eagle = load("smollm2-135m")                        # the shipped head, the defaults of `make chat`
    answer = eagle.generate("Why is the sky blue?")     # a user message, rendered with the model's chat template
    print(answer.text, answer.tau, answer.tok_s)
    eagle.generate([{"role": "user", "content": "Hi"}], stream=lambda text: print(text, end=""))

Settings are InferConf's (`load(..., method="eagle1", temperature=0.7)`); the engine, the caches and the verifier are
the command line's, so output is lossless in the same way. Streamed text is detokenised incrementally by
transformers' TextStreamer rule (`TextStream`), so words split across tokens and multi-byte characters arrive whole.
"""
from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Callable

from ..decoding.build import build_engine
from ..models.chat import Message, prompt_ids, stop_ids
from ..config import InferConf
from ..errors import EagleError
from ..decoding.records import GenerationResult
from ..models.target import load_target


class TextStream:
    """Token ids in, text out as it becomes final (transformers' TextStreamer rule): the text decoded from the ids
    since the last line break is emitted up to its last space, or whole after a line break or a CJK character, so
    no word is cut and no multi-byte character is emitted in pieces; `end()` emits the rest."""

    def __init__(self, tokenizer, emit: Callable[[str], None]):
        self.tokenizer, self.emit = tokenizer, emit
        self.ids: list[int] = []
        self.printed = 0  # characters of the current line's text already emitted

    def push(self, ids: list[int]) -> None:
        self.ids += ids
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\n"):
            chunk, self.ids, self.printed = text[self.printed :], [], 0
        else:
            wide = bool(text) and unicodedata.east_asian_width(text[-1]) == "W" and text[-1] != "\ufffd"
            chunk = text[self.printed :] if wide else text[self.printed : text.rfind(" ") + 1]
            self.printed += len(chunk)
        if chunk:
            self.emit(chunk)

    def end(self) -> None:
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if text[self.printed :]:
            self.emit(text[self.printed :])
        self.ids, self.printed = [], 0


@dataclass
class Answer:
    """One answer: its text (special tokens skipped), token ids, τ (tokens per target forward), tokens/s, why it
    stopped ("stop" or "length"), and the engine's record of it (per-cycle statistics: result.stats())."""

    text: str
    tokens: list[int]
    tau: float
    tok_s: float
    stop_reason: str
    result: GenerationResult


Prompt = str | list[Message] | list[dict]


class Eagle:
    """A loaded target and the engine that decodes for it (built by `load`)."""

    def __init__(self, target, infer: InferConf):
        self.target, self.infer = target, infer
        self.engine = build_engine(infer, target)
        self.stops = stop_ids(target)

    def prompt(self, prompt: Prompt, raw: bool = False) -> list[int]:
        """Token ids of a user message (str) or a chat (Messages or {"role", "content"} dicts), special tokens only
        from the chat template (eagle_infer.models.chat.encode: a message saying "<|im_end|>" is text), or of raw text,
        tokenized as is (its special-token text becomes special ids: raw is the caller's own prompt format)."""
        tok = self.target.tokenizer
        if raw:
            if not isinstance(prompt, str) or not prompt.strip():
                raise EagleError(f"raw prompt {prompt!r} is invalid: expected non-empty text")
            return list(tok(prompt, add_special_tokens=True)["input_ids"])
        if isinstance(prompt, str):
            if not prompt.strip():
                raise EagleError(f"prompt {prompt!r} is empty: expected some text to answer")
            prompt = [Message("user", prompt)]
        messages = [m if isinstance(m, Message) else Message(m.get("role", ""), m.get("content", "")) for m in prompt]
        return prompt_ids(tok, messages, self.target.template)

    def answer(self, result: GenerationResult) -> Answer:
        text = self.target.tokenizer.decode(result.tokens, skip_special_tokens=True)
        return Answer(text, result.tokens, result.tau, result.tok_s, result.stop_reason, result)

    def max_new(self, max_new_tokens: int | None) -> int:
        """`max_new_tokens`, or InferConf's max_new_tokens for None; 0 or less is the engine's one-line error."""
        return self.infer.max_new_tokens if max_new_tokens is None else max_new_tokens

    def generate(self, prompt: Prompt, max_new_tokens: int | None = None, stream: Callable[[str], None] | None = None,
                 raw: bool = False) -> Answer:
        """One answer of at most `max_new_tokens` tokens (None: the settings' max_new_tokens; 0 is an error, not the
        default); `stream(text)` gets its text as it becomes final."""
        streamer = None if stream is None else TextStream(self.target.tokenizer, stream)
        result = self.engine.generate(self.prompt(prompt, raw), self.max_new(max_new_tokens),
                                      self.infer.sampling(), self.stops, streamer and streamer.push, self.infer.seed)
        if streamer is not None:
            streamer.end()
        return self.answer(result)

    def generate_batch(self, prompts: list[Prompt], max_new_tokens: int | None = None, batch_size: int | None = None,
                       raw: bool = False) -> list[Answer]:
        """Answers to every prompt, decoded together batch_size at a time (default: all, up to max_batch_size);
        each equals its answer alone (seed + i for prompt i when sampling)."""
        batch = self.engine.generate_batch([self.prompt(p, raw) for p in prompts], self.max_new(max_new_tokens),
                                           self.infer.sampling(), self.stops, seed=self.infer.seed, batch_size=batch_size)
        return [self.answer(r) for r in batch.results]


def load(model: str = "smollm2-135m", head: str = "shipped", dtype: str = "auto", device: str = "auto",
         pack: str = "auto", **infer) -> Eagle:
    """A target (registry name, Hugging Face id or local directory) and its draft head ("shipped", "random" or a
    head directory) ready to decode; `infer` are InferConf's fields (method, depth, top_k, temperature, ...)."""
    unknown = sorted(set(infer) - set(InferConf.__dataclass_fields__))
    if unknown:
        raise EagleError(f"unknown setting {unknown[0]!r}: expected InferConf's fields ({', '.join(InferConf.__dataclass_fields__)})")
    conf = InferConf(head=head, **infer)
    return Eagle(load_target(model, dtype, device, pack, conf.compile), conf)
