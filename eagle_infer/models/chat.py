"""The project's one chat-template module: training, inference and evaluation all render chats here.

A chat is rendered to text plus the character spans of its assistant turns; `loss_mask` turns
those spans into a per-token mask, `prompt_ids` gives the ids a model continues from.

Assistant span invariant: for every assistant turn, `text[start:end]` is exactly the turn's
content followed by the end-of-turn marker the model must learn to emit, nothing before it
(no role header, no separator space):

* ``chatml`` and SmolLM2-style tokenizer templates: ``content + "<|im_end|>"`` (not the ``"\\n"``);
* ``vicuna_v1.1``: ``content + "</s>"``;
* ``llama2_chat``: ``content + " </s>"`` (the space before ``</s>`` is part of the span);
* ``tokenizer``: content as the template writes it (a template that trims content gets the
  trimmed text) plus the marker found by `_end_marker`.

Template-safe tokenization (`encode`): message contents are user text, so special-token text inside them (a
message saying ``<|im_end|>``) stays text: only the template's own markers become special ids. The rendered chat
records each content's character span; where a special token's text overlaps one, the text is tokenized piecewise
between the template's markers with ``split_special_tokens=True``; otherwise (every ordinary chat) in one call, as
the tokenizer would.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from eagle_infer.errors import EagleError

ROLES = ("system", "user", "assistant")
VICUNA_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)


@dataclass
class Message:
    """One chat turn; `role` is "system", "user" or "assistant"."""

    role: str
    content: str


@dataclass
class RenderedChat:
    """A rendered chat: `assistant_spans` are sorted, disjoint [start, end) character offsets into
    `text`, one per assistant turn, each covering the turn's content and its end-of-turn marker;
    `content_spans` are those of every message's content as rendered (user text: never special tokens)."""

    text: str
    assistant_spans: list[tuple[int, int]] = field(default_factory=list)
    content_spans: list[tuple[int, int]] = field(default_factory=list)


class _Builder:
    """Concatenates text pieces, recording the spans of the pieces marked as assistant output and of the message
    contents (`content`: how many leading characters of the piece are a message's content)."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.spans: list[tuple[int, int]] = []
        self.contents: list[tuple[int, int]] = []
        self.length = 0

    def add(self, piece: str, assistant: bool = False, content: int = 0) -> None:
        if assistant:
            self.spans.append((self.length, self.length + len(piece)))
        if content:
            self.contents.append((self.length, self.length + content))
        self.parts.append(piece)
        self.length += len(piece)

    def result(self) -> RenderedChat:
        return RenderedChat("".join(self.parts), self.spans, self.contents)


def _leading_system(messages: list[Message], template: str) -> tuple[str | None, list[Message]]:
    """Split off a leading system message; named templates accept no system message elsewhere."""
    system = messages[0].content if messages and messages[0].role == "system" else None
    turns = messages[1:] if system is not None else messages
    if any(m.role == "system" for m in turns):
        raise EagleError(f"template {template!r} got a system message after the first turn; expected it only first")
    return system, turns


def _vicuna(messages: list[Message], add_generation_prompt: bool) -> RenderedChat:
    """FastChat vicuna_v1.1: ``<s>{system} USER: {u} ASSISTANT: {a}</s>USER: ...``;
    the generation prompt is a trailing ``ASSISTANT:`` (the model emits the space)."""
    system, turns = _leading_system(messages, "vicuna_v1.1")
    b = _Builder()
    b.add("<s>")
    b.add((VICUNA_SYSTEM if system is None else system) + " ", content=0 if system is None else len(system))
    for m in turns:
        if m.role == "user":
            b.add("USER: ")
            b.add(f"{m.content} ", content=len(m.content))
        else:
            b.add("ASSISTANT: ")
            b.add(m.content + "</s>", assistant=True, content=len(m.content))
    if add_generation_prompt:
        b.add("ASSISTANT:")
    return b.result()


def _llama2(messages: list[Message], add_generation_prompt: bool) -> RenderedChat:
    """Meta's Llama-2 chat: ``<s>[INST] <<SYS>>\\n{system}\\n<</SYS>>\\n\\n{u} [/INST] {a} </s><s>[INST] ...``.
    Every user turn already ends with ``[/INST]``, so `add_generation_prompt` changes nothing."""
    system, turns = _leading_system(messages, "llama2_chat")
    if system is not None and (not turns or turns[0].role != "user"):
        raise EagleError("template 'llama2_chat' got a system message not followed by a user message; expected system, user, ...")
    b = _Builder()
    for i, m in enumerate(turns):
        if m.role == "user":
            b.add("<s>[INST] ")
            if i == 0 and system is not None:
                b.add("<<SYS>>\n")
                b.add(system + "\n<</SYS>>\n\n", content=len(system))
            b.add(m.content + " [/INST]", content=len(m.content))
        else:
            b.add(" ")
            b.add(m.content + " </s>", assistant=True, content=len(m.content))
    return b.result()


def _chatml(messages: list[Message], add_generation_prompt: bool) -> RenderedChat:
    """Plain ChatML, no default system message: ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per turn."""
    b = _Builder()
    for m in messages:
        b.add(f"<|im_start|>{m.role}\n")
        b.add(m.content + "<|im_end|>", assistant=m.role == "assistant", content=len(m.content))
        b.add("\n")
    if add_generation_prompt:
        b.add("<|im_start|>assistant\n")
    return b.result()


def _qwen3(messages: list[Message], add_generation_prompt: bool) -> RenderedChat:
    """Qwen3's template in its non-thinking mode (enable_thinking=False): ChatML with every assistant turn opened by
    an empty reasoning block, ``<think>\n\n</think>\n\n``, as the model sees it before the answer it writes (not
    in the loss). Prefix-stable, unlike Qwen3's own Jinja template, which keeps the block in the last turn only."""
    b = _Builder()
    for m in messages:
        b.add(f"<|im_start|>{m.role}\n" + ("<think>\n\n</think>\n\n" if m.role == "assistant" else ""))
        b.add(m.content + "<|im_end|>", assistant=m.role == "assistant", content=len(m.content))
        b.add("\n")
    if add_generation_prompt:
        b.add("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    return b.result()


NAMED_TEMPLATES: dict[str, Callable[[list[Message], bool], RenderedChat]] = {
    "vicuna_v1.1": _vicuna,
    "llama2_chat": _llama2,
    "chatml": _chatml,
    "qwen3": _qwen3,
}


def _apply_tokenizer_template(tokenizer, messages: list[Message], add_generation_prompt: bool) -> str:
    """The tokenizer's own Jinja chat template rendered to text; template errors become EagleError."""
    try:
        return tokenizer.apply_chat_template(
            [{"role": m.role, "content": m.content} for m in messages],
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
        )
    except Exception as err:  # jinja2 raises its own types, including the template's raise_exception()
        raise EagleError(f"the tokenizer's chat template rejected the conversation: {err}") from err


def _require_prefix(prefix: str, text: str, turn: int) -> None:
    if not text.startswith(prefix):
        raise EagleError(
            f"the tokenizer's chat template is not prefix-stable at turn {turn}: rendering the first turns "
            "does not give a prefix of the whole chat; expected a template that renders history unchanged"
        )


def _end_marker(tail: str, eos_token: str | None) -> int:
    """Length of the end-of-turn marker at the start of `tail` (the text the template writes between an
    assistant content's end and the end of that turn): optional whitespace, then the eos token if it comes
    next, else the next non-whitespace run (e.g. ``<|im_end|>``, ``<|eot_id|>``, ``</s>``); 0 if `tail`
    is only whitespace."""
    stripped = tail.lstrip()
    if not stripped:
        return 0
    lead = len(tail) - len(stripped)
    if eos_token and stripped.startswith(eos_token):
        return lead + len(eos_token)
    return lead + len(re.match(r"\S+", stripped).group())


def _tokenizer_render(tokenizer, messages: list[Message], add_generation_prompt: bool) -> RenderedChat:
    """Render with the tokenizer's template and locate each assistant turn i by rendering prefixes:
    ``messages[:i]`` with a generation prompt ends where turn i's content starts, ``messages[:i+1]`` ends
    where the turn ends; both must be prefixes of the whole render. The content (stripped, in case the
    template trims it) is searched for between the two; the span then extends over `_end_marker`."""
    if not getattr(tokenizer, "chat_template", None):
        raise EagleError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has no chat_template; "
            "expected one, or a named template: " + ", ".join(NAMED_TEMPLATES)
        )
    text = _apply_tokenizer_template(tokenizer, messages, add_generation_prompt)
    spans = []
    for i, m in enumerate(messages):
        if m.role != "assistant":
            continue
        before = _apply_tokenizer_template(tokenizer, messages[:i], True)
        through = _apply_tokenizer_template(tokenizer, messages[: i + 1], False)
        _require_prefix(before, text, i)
        _require_prefix(through, text, i)
        content = m.content.strip()
        start = text.find(content, len(before), len(through))
        if start < 0:
            raise EagleError(f"the tokenizer's chat template changed assistant turn {i}; expected its content verbatim or trimmed")
        end = start + len(content)
        spans.append((start, end + _end_marker(text[end : len(through)], tokenizer.eos_token)))
    return RenderedChat(text, spans, _content_spans(tokenizer, messages, add_generation_prompt, text))


_SLOT = re.compile("\ue000(\\d+)\ue001")  # a message's place in a skeleton render (private-use characters)


def _content_spans(tokenizer, messages: list[Message], add_generation_prompt: bool, text: str) -> list[tuple[int, int]]:
    """Where each message's content lies in `text`, the template's render of `messages`: the chat is rendered again
    with every content replaced by a numbered slot, and `text` is matched piece by piece against that skeleton,
    each slot taking its content verbatim or trimmed (as templates such as Llama 3's write it)."""
    slots = [Message(m.role, f"\ue000{i}\ue001") for i, m in enumerate(messages)]
    pieces = _SLOT.split(_apply_tokenizer_template(tokenizer, slots, add_generation_prompt))
    spans, pos = [], 0
    for k in range(0, len(pieces), 2):
        if not text.startswith(pieces[k], pos):
            break
        pos += len(pieces[k])
        if k + 1 == len(pieces):
            return spans if pos == len(text) else _content_changed()
        content, after = messages[int(pieces[k + 1])].content, pieces[k + 2]
        written = next((c for c in (content, content.strip(), content.lstrip(), content.rstrip())
                        if text.startswith(c + after, pos)), None)
        if written is None:
            break
        if written:
            spans.append((pos, pos + len(written)))
        pos += len(written)
    return _content_changed()


def _content_changed():
    raise EagleError("the tokenizer's chat template changes message contents beyond trimming them; expected a template "
                     "that writes each content verbatim or trimmed")


def _check_messages(messages: list[Message]) -> None:
    for i, m in enumerate(messages):
        if m.role not in ROLES:
            raise EagleError(f"message {i} has role {m.role!r}; expected one of {', '.join(ROLES)}")
        if not isinstance(m.content, str):
            raise EagleError(f"message {i} has content of type {type(m.content).__name__}; expected str")


def check_template(template: str) -> None:
    """A one-line error unless `template` is "tokenizer" or one of NAMED_TEMPLATES."""
    if template != "tokenizer" and template not in NAMED_TEMPLATES:
        raise EagleError(f"unknown chat template {template!r}; expected one of: tokenizer, {', '.join(NAMED_TEMPLATES)}")


def render(messages: list[Message], tokenizer, template: str, add_generation_prompt: bool) -> RenderedChat:
    """Render `messages` with `template` ("tokenizer" for the tokenizer's own Jinja template, or one of
    `NAMED_TEMPLATES`). The text carries BOS text itself where the format has it (``<s>`` for vicuna and
    llama2), so tokenize it with ``add_special_tokens=False``. See the module docstring for the spans."""
    _check_messages(messages)
    check_template(template)
    if template == "tokenizer":
        return _tokenizer_render(tokenizer, messages, add_generation_prompt)
    return NAMED_TEMPLATES[template](messages, add_generation_prompt)


def _overlaps(token: tuple[int, int], spans: list[tuple[int, int]]) -> bool:
    start, end = token
    return any(start < span_end and end > span_start for span_start, span_end in spans)


def _special_tokens(tokenizer) -> re.Pattern | None:
    """A pattern matching any special token's text, longest first (as the tokenizer's own matcher); None when the
    tokenizer has none (a stand-in that parses no special tokens)."""
    tokens = set(getattr(tokenizer, "all_special_tokens", None) or ())
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    tokens |= {t.content for t in added.values() if getattr(t, "special", False)}
    tokens = sorted(filter(None, tokens), key=len, reverse=True)
    return re.compile("|".join(map(re.escape, tokens))) if tokens else None


def _tokenize(tokenizer, text: str, offsets: bool, **kwargs) -> tuple[list[int], list[tuple[int, int]]]:
    encoded = tokenizer(text, add_special_tokens=False, **({"return_offsets_mapping": True} if offsets else {}), **kwargs)
    return list(encoded["input_ids"]), [tuple(o) for o in encoded["offset_mapping"]] if offsets else []


def encode(tokenizer, rendered: RenderedChat, offsets: bool = False) -> tuple[list[int], list[tuple[int, int]]]:
    """Token ids of `rendered.text` (no special tokens added) in which only the template's own markers are special
    ids: special-token text overlapping a message content stays text. With `offsets`, each token's character span in
    the text (needs a fast tokenizer); else []."""
    pattern, text = _special_tokens(tokenizer), rendered.text
    found = [m.span() for m in pattern.finditer(text)] if pattern else []
    markers = [(a, b) for a, b in found if not _overlaps((a, b), rendered.content_spans)]
    if len(markers) == len(found):  # no forged marker: the tokenizer's own single call
        return _tokenize(tokenizer, text, offsets)
    ids, spans, pos = [], [], 0
    for start, end in markers + [(len(text), len(text))]:
        if start > pos:
            piece_ids, piece_spans = _tokenize(tokenizer, text[pos:start], offsets, split_special_tokens=True)
            ids += piece_ids
            spans += [(a + pos, b + pos) for a, b in piece_spans]
        if end > start:
            ids.append(tokenizer.convert_tokens_to_ids(text[start:end]))
            spans += [(start, end)] if offsets else []
        pos = end
    return ids, spans


def loss_mask(tokenizer, rendered: RenderedChat, max_length: int | None) -> tuple[list[int], list[int]]:
    """Tokenize `rendered.text` (`encode`) into `input_ids` and a same-length `loss_mask`:
    1 where the token's character span overlaps an assistant span, else 0. Both are cut to `max_length`
    tokens when given. Needs a fast tokenizer (character offsets)."""
    if max_length is not None and max_length < 1:
        raise EagleError(f"max_length is {max_length}; expected a positive number of tokens or None")
    if not getattr(tokenizer, "is_fast", False):
        raise EagleError(f"tokenizer {type(tokenizer).__name__} gives no character offsets; expected a fast tokenizer")
    ids, offsets = encode(tokenizer, rendered, offsets=True)
    mask = [int(_overlaps(o, rendered.assistant_spans)) for o in offsets[:max_length]]
    return ids[:max_length], mask


def prompt_ids(tokenizer, messages: list[Message], template: str) -> list[int]:
    """Token ids of `messages` rendered with a generation prompt, ready for the model to answer (`encode`: special
    tokens only from the template, never from a message)."""
    return encode(tokenizer, render(messages, tokenizer, template, add_generation_prompt=True))[0]


def stop_ids(target) -> list[int]:
    """End-of-answer ids: the tokenizer's eos plus the chat template's end-of-turn token when it has one."""
    tok = target.tokenizer
    ids = {tok.eos_token_id} if tok.eos_token_id is not None else set()
    for marker in ("<|im_end|>", "<|eot_id|>", "</s>"):
        tid = tok.convert_tokens_to_ids(marker)
        if isinstance(tid, int) and tid != tok.unk_token_id and tid >= 0:
            ids.add(tid)
    return sorted(ids)
