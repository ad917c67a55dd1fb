"""Synthetic targets (model.name=synthetic:<registered name>): the registered shapes, built without a download, with
a stand-in tokenizer and a random head of the matching shape; refused wherever acceptance is reported; decoding on a
scaled-down one is lossless."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import transformers

from eagle_infer.models import registry
from eagle_infer.decoding.build import build_engine, build_head
from eagle_infer.models.chat import Message, prompt_ids, stop_ids
from eagle_infer.config import InferConf
from eagle_infer.head.draft_head import random_head
from eagle_infer.decoding.engine import Engine
from eagle_infer.models.registry import MODELS, ModelSpec
from eagle_infer.models.synthetic import WordTokenizer, synthetic_model
from eagle_infer.models.target import converted_gguf_dir, load_target
from lab.projection import EAGLE_TREE
from tests.conftest import SMOL
from tests.oracles import one_thread, oracle_drafter  # noqa: F401 (one_thread is autouse)
from tests.test_engine_errors import one_line_error

REPO = Path(__file__).resolve().parent.parent

# Parameter counts of the released checkpoints (embeddings and LM head included; SmolLM2 ties them)
PUBLISHED_PARAMETERS = {
    "smollm2-135m": 134_515_008,
    "vicuna-7b": 6_738_415_616,
    "llama2-chat-7b": 6_738_415_616,
    "vicuna-13b": 13_015_864_320,
    "llama2-chat-13b": 13_015_864_320,
    "llama3-8b-instruct": 8_030_261_248,
    "llama3.1-8b-instruct": 8_030_261_248,
    "qwen3-8b": 8_190_735_360,
}
# Llama 3's shape scaled down (grouped-query attention kept: 4 query heads share 1 key/value head)
TINY = ModelSpec("tiny-llama3", "none/tiny-llama3", "tokenizer",
                 replace(MODELS["llama3-8b-instruct"].arch, hidden_size=64, layers=2, heads=4, kv_heads=1,
                         intermediate_size=128, vocab_size=512, max_positions=1024))


@pytest.fixture
def tiny_registered(monkeypatch):
    """TINY in the registry, and every download path of transformers raising: a synthetic target must not need one."""
    monkeypatch.setitem(registry.MODELS, TINY.name, TINY)

    def no_download(*args, **kwargs):
        raise AssertionError("a synthetic target read a pretrained file")

    for cls in (transformers.AutoConfig, transformers.AutoModelForCausalLM, transformers.AutoTokenizer):
        monkeypatch.setattr(cls, "from_pretrained", no_download)
    return "synthetic:" + TINY.name


@pytest.mark.parametrize("name", list(MODELS))
def test_registered_shapes_have_the_published_parameter_counts(name):
    """Built on the meta device (no memory): the registry's facts give each model's published size and context."""
    arch = MODELS[name].arch
    model = synthetic_model(arch, torch.bfloat16, torch.device("meta"))
    assert sum(p.numel() for p in model.parameters()) == PUBLISHED_PARAMETERS[name]
    assert model.config.max_position_embeddings == arch.max_positions
    assert model.config.rope_parameters["rope_theta"] == arch.rope_theta


def test_smollm2_shape_is_its_cached_config():
    config = transformers.AutoConfig.from_pretrained(str(converted_gguf_dir(*SMOL)))
    arch = MODELS["smollm2-135m"].arch
    assert (config.model_type, config.hidden_size, config.num_hidden_layers, config.num_attention_heads,
            config.num_key_value_heads, config.intermediate_size, config.vocab_size,
            config.rope_parameters["rope_theta"], config.max_position_embeddings, config.tie_word_embeddings) == (
        arch.model_type, arch.hidden_size, arch.layers, arch.heads, arch.kv_heads, arch.intermediate_size,
        arch.vocab_size, arch.rope_theta, arch.max_positions, arch.tied)


def test_synthetic_target_is_built_on_the_device_in_the_dtype_without_a_download(tiny_registered):
    state = torch.random.get_rng_state()
    target = load_target(tiny_registered, "bfloat16", "cpu", allow_synthetic=True)
    assert torch.equal(state, torch.random.get_rng_state())  # the caller's random stream is untouched
    assert target.name == tiny_registered and target.template == "chatml"  # its stand-in tokenizer has no template
    assert {(p.device.type, p.dtype) for p in target.model.parameters()} == {("cpu", torch.bfloat16)}
    cfg = target.config
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads,
            target.vocab_size) == (64, 2, 4, 1, 512)
    again = load_target(tiny_registered, "bfloat16", "cpu", allow_synthetic=True)
    assert all(torch.equal(a, b) for a, b in zip(target.model.parameters(), again.model.parameters()))  # seeded


def test_word_tokenizer_is_stable_and_inside_the_vocabulary():
    tok = WordTokenizer(512)
    ids = tok("Hello, world! Hello again.", add_special_tokens=False)["input_ids"]
    assert len(ids) == 7 and ids[0] == ids[4] and all(3 <= i < 512 for i in ids)  # 4 words, 3 marks
    assert WordTokenizer(512)("Hello")["input_ids"] == [tok.bos_token_id, ids[0]]
    assert (tok.convert_tokens_to_ids("</s>"), tok.convert_tokens_to_ids("<|im_end|>")) == (2, tok.unk_token_id)
    one_line_error(lambda: WordTokenizer(3), "vocabulary size 3", "> 3")


def test_unknown_synthetic_name_is_one_line():
    one_line_error(lambda: load_target("synthetic:vicuna-70b", "float32", "cpu", allow_synthetic=True),
                   "'synthetic:vicuna-70b'", "synthetic:vicuna-7b", "synthetic:llama3-8b-instruct")


def test_refused_wherever_acceptance_is_reported(tmp_path):
    from eagle_infer import load
    from eagle_infer.config import ModelConf
    from eval.cli import EvalRunConf, evaluate

    one_line_error(lambda: load_target("synthetic:vicuna-7b", "bfloat16", "cpu"), "'synthetic:vicuna-7b'",
                   "random weights", "scripts/bench_engine.py")
    one_line_error(lambda: load("synthetic:vicuna-7b"), "random weights")
    conf = EvalRunConf(model=ModelConf(name="synthetic:vicuna-7b"))
    one_line_error(lambda: evaluate(conf, tmp_path / "eval"), "'synthetic:vicuna-7b'", "random weights")
    train = subprocess.run(
        [sys.executable, "-m", "eagle_train.cli", "recipes=demo", "stage=featurize", "model.name=synthetic:vicuna-7b",
         f"data.features_dir={tmp_path / 'features'}", f"hydra.run.dir={tmp_path / 'hydra'}"],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    lines = [line for line in train.stderr.splitlines() if line.strip()]
    assert train.returncode == 2 and len(lines) == 1 and "random weights" in lines[0], train.stderr[-2000:]


def test_shipped_head_of_a_synthetic_target_is_a_random_head_of_its_shape(tiny_registered):
    target = load_target(tiny_registered, "float32", "cpu", allow_synthetic=True)
    runner = build_head(InferConf(method="eagle2", head="shipped", seed=3), target)
    head, expected = runner.module, random_head(target, seed=3)
    assert (head.config.hidden_size, head.config.vocab_size, head.config.architecture) == (64, 512, "llama")
    shapes = {k: v.shape for k, v in head.state_dict().items()}
    assert shapes == {k: v.shape for k, v in expected.state_dict().items()}
    assert shapes["layers.0.self_attn.k_proj.weight"] == (16, 64)  # one key/value head of 16 dims, as the target's
    assert all(torch.equal(a, b) for a, b in zip(head.state_dict().values(), expected.state_dict().values()))


def test_greedy_decoding_on_a_scaled_down_synthetic_target_is_lossless(tiny_registered):
    """float32: EAGLE-2, EAGLE's static tree (what bench-engine's projection times), a batch and an oracle's long
    accepted paths give vanilla's tokens, prompts encoded by the stand-in tokenizer with the registered model's
    template."""
    target = load_target(tiny_registered, "float32", "cpu", allow_synthetic=True)
    prompts = [prompt_ids(target.tokenizer, [Message("user", text)], target.template)
               for text in ("Why is the sky blue?", "Name three rivers, and say where each one ends.")]
    stops = stop_ids(target)
    assert stops == [target.tokenizer.eos_token_id]
    plain = build_engine(InferConf(method="vanilla"), target)
    vanilla = [plain.generate(p, 24, stop_ids=stops).tokens for p in prompts]
    eagle2 = build_engine(InferConf(method="eagle2", budget="fixed", depth=4, top_k=4, total_tokens=12), target)
    tree = build_engine(InferConf(method="eagle1", static_paths=[list(p) for p in EAGLE_TREE]), target)
    assert [eagle2.generate(p, 24, stop_ids=stops).tokens for p in prompts] == vanilla
    assert [tree.generate(p, 24, stop_ids=stops).tokens for p in prompts] == vanilla
    assert [r.tokens for r in eagle2.generate_batch(prompts, 24, stop_ids=stops, batch_size=2).results] == vanilla
    # a random head gets nothing accepted: an oracle drafting the true continuation drives accepted paths
    oracle = oracle_drafter(prompts[0] + vanilla[0], 5, branch=2, vocab=target.vocab_size)
    result = Engine(target, eagle2.head, oracle.config(), drafter=oracle).generate(prompts[0], 24, stop_ids=stops)
    assert result.tokens == vanilla[0] and max(c.accepted for c in result.cycles) >= 3
