"""User errors are one-line EagleErrors naming the bad value; draft heads save, load and refuse the wrong target."""
from __future__ import annotations

import json
from functools import lru_cache

import pytest
import torch

from eagle_infer.decoding.methods import resolve
from eagle_infer.head.draft_head import DraftHead, DraftHeadConfig, random_head
from eagle_infer.head.head_checkpoint import load_head
from eagle_infer.config import InferConf
from eagle_infer.decoding.engine import Engine
from eagle_infer.errors import EagleError
from eagle_infer.config import SamplingParams
from tests.oracles import one_thread  # noqa: F401 (autouse fixture)
from tests.tiny import tiny_target

PROMPT = [5, 17, 3, 88, 41, 2, 9]


@lru_cache(maxsize=None)
def target(**kw):
    return tiny_target(**kw)


@lru_cache(maxsize=None)
def head():
    return random_head(target(), seed=0)


def one_line_error(fn, *needles) -> str:
    """Run fn, expect an EagleError whose message is one line containing every needle."""
    with pytest.raises(EagleError) as info:
        fn()
    message = str(info.value)
    assert "\n" not in message and message.strip() == message and message, repr(message)
    for needle in needles:
        assert str(needle) in message, (needle, message)
    return message


def engine(config: InferConf, with_head: bool = True) -> Engine:
    return Engine(target(), head() if with_head else None, config)


@pytest.mark.parametrize(
    "config,needles",
    [
        (InferConf(method="eagle3"), ["'eagle3'", "vanilla", "chain", "eagle1", "eagle2"]),
        (InferConf(method="EAGLE2"), ["'EAGLE2'"]),
        (InferConf(budget="fixed", top_k=97), ["top_k 97", "vocabulary size 96"]),
        (InferConf(budget="fixed", top_k=0), ["top_k 0"]),
        (InferConf(budget="fixed", total_tokens=0), ["total_tokens 0", ">= 1"]),
        (InferConf(budget="fixed", total_tokens=-3), ["total_tokens -3"]),
        (InferConf(budget="fixed", depth=0), ["depth 0"]),
        (InferConf(budget="fixed", expand_by="prob"), ["'prob'", "value", "confidence"]),
        (InferConf(budget="fixed", pad_trees="yes"), ["'yes'", "auto", "on", "off"]),
        (InferConf(budget="fixed", draft_vocab="all"), ["'all'", "head", "full"]),
        (InferConf(method="eagle1", static_paths=[[0], [0, 0, 1]]), ["[0, 0, 1]", "[0, 0]"]),
        (InferConf(method="eagle1", static_paths=[]), ["empty"]),
    ],
)
def test_bad_config(config, needles):
    one_line_error(lambda: engine(config), *needles)


@pytest.mark.parametrize("method", ["chain", "eagle1", "eagle2"])
def test_method_needs_a_head(method):
    one_line_error(lambda: engine(InferConf(method=method), with_head=False), f"'{method}'", "head")
    Engine(target(), None, InferConf(method="vanilla"))  # vanilla needs none


def test_tree_budget_too_large_for_the_cache():
    eng = engine(InferConf(budget="fixed", method="eagle2", total_tokens=600))
    one_line_error(lambda: eng.generate(PROMPT, 10), "600", "512")
    eng = engine(InferConf(budget="fixed", method="eagle2", total_tokens=400))
    one_line_error(lambda: eng.generate(PROMPT, 200), "400", "512")
    assert len(eng.generate(PROMPT, 8).tokens) == 8  # a request that fits runs
    eng = engine(InferConf(method="chain", depth=520))
    one_line_error(lambda: eng.generate(PROMPT, 4), "520", "512")


def test_prompt_and_length_errors():
    eng = engine(InferConf(method="eagle2", depth=3, top_k=2, total_tokens=4))
    one_line_error(lambda: eng.generate([], 4), "empty")
    one_line_error(lambda: eng.generate([1] * 600, 4), "600", "512")
    one_line_error(lambda: eng.generate([1] * 512, 1), "512")
    one_line_error(lambda: eng.generate(PROMPT, 0), "max_new_tokens 0")
    one_line_error(lambda: eng.generate([1] * 500, 20), "500", "max_new_tokens 20", "512")
    vanilla = engine(InferConf(method="vanilla"), with_head=False)
    one_line_error(lambda: vanilla.generate([], 4), "empty")
    one_line_error(lambda: vanilla.generate([1] * 600, 4), "600", "512")


def test_vanilla_request_that_fills_the_context_exactly_is_accepted():
    """prompt + max_new_tokens == context: the last token is never fed back, so the cache needs only
    context - 1 positions; vanilla has no tree, yet _check_room demands prompt + max_new + 0 + 1 positions and
    refuses with 'tree budget of 0 tokens does not fit' (engine.py, Engine._check_room: `need = ... + 1`)."""
    vanilla = engine(InferConf(method="vanilla"), with_head=False)
    result = vanilla.generate([1] * 510, 2)
    assert len(result.tokens) == 2


@pytest.mark.parametrize(
    "kwargs,needles",
    [
        ({"temperature": -0.5}, ["temperature -0.5"]),
        ({"temperature": 1.0, "top_p": 0.0}, ["top_p 0.0"]),
        ({"temperature": 1.0, "top_p": 1.5}, ["top_p 1.5"]),
        ({"temperature": 1.0, "sampling_top_k": -1}, ["sampling_top_k -1"]),
    ],
)
def test_bad_sampling_params(kwargs, needles):
    one_line_error(lambda: SamplingParams(**kwargs), *needles)


def test_static_tree_rank_beyond_the_vocabulary():
    """A static path ranking past the vocabulary cannot be drafted: it should be refused like top_k > vocab,
    not surface as a torch RuntimeError from topk inside draft_static."""
    small = tiny_target(vocab=8, hidden=32, layers=1, seed=0)
    small_head = random_head(small)
    one_line_error(lambda: Engine(small, small_head, InferConf(method="eagle1", static_paths=[[0], [8]]))
                   .generate([1, 2, 3], 4), "8")


# ----------------------------------------------------------------------------------------------------------------
# Draft heads on disk.


def test_load_head_missing_directory(tmp_path):
    missing = tmp_path / "no-such-head"
    one_line_error(lambda: load_head(missing, target()), str(missing), "does not exist")
    (tmp_path / "empty").mkdir()
    one_line_error(lambda: load_head(tmp_path / "empty", target()), "config.json")
    (tmp_path / "no-weights").mkdir()
    (tmp_path / "no-weights" / "config.json").write_text("{}")
    one_line_error(lambda: load_head(tmp_path / "no-weights", target()), "model.safetensors", "pytorch_model.bin")


def test_load_head_corrupt_files_name_the_file(tmp_path):
    """A head directory whose config.json is not JSON, or whose weights are truncated: one line naming the file."""
    good = tmp_path / "good"
    head().save(good)
    for name, mangle in (("config.json", lambda b: b[: len(b) // 2]), ("model.safetensors", lambda b: b[: len(b) // 3]),
                         ("model.safetensors", lambda b: b"not a weights file")):
        bad = tmp_path / f"bad-{name}-{len(list(tmp_path.iterdir()))}"
        bad.mkdir()
        for f in good.iterdir():
            data = f.read_bytes()
            (bad / f.name).write_bytes(mangle(data) if f.name == name else data)
        message = one_line_error(lambda: load_head(bad, target()), str(bad / name))
        assert ("not valid JSON" if name == "config.json" else "cannot be read") in message
    (tmp_path / "list").mkdir()
    (tmp_path / "list" / "config.json").write_text("[1, 2]")
    one_line_error(lambda: load_head(tmp_path / "list", target()), "config.json", "JSON object")


@pytest.mark.parametrize("settings,needles", [
    (dict(batch_size=0), ["batch_size 0", "max_batch_size 16"]),
    (dict(batch_size=1000), ["batch_size 1000", "max_batch_size 16"]),
])
def test_batch_size_outside_its_range_is_refused(settings, needles):
    one_line_error(lambda: Engine(target(), head(), InferConf(**settings)), *needles)


@pytest.mark.parametrize(
    "other_kw,needles",
    [
        ({"hidden": 32}, ["hidden size", "64", "32"]),
        ({"vocab": 80}, ["vocabulary size", "96", "80"]),
        ({"name": "another-model"}, ["'tiny-llama'", "'another-model'"]),
        ({"arch": "qwen2", "name": "tiny-llama"}, ["'llama'", "'qwen2'"]),
    ],
)
def test_head_saved_for_another_target_is_refused(tmp_path, other_kw, needles):
    head().save(tmp_path / "head")
    other = tiny_target(**other_kw)
    one_line_error(lambda: load_head(tmp_path / "head", other), str(tmp_path / "head"), *needles)


def same_run(head_a, head_b, config, sampling, with_stats=True):
    ra = Engine(target(), head_a, config).generate(PROMPT, 12, sampling=sampling, seed=3)
    rb = Engine(target(), head_b, config).generate(PROMPT, 12, sampling=sampling, seed=3)
    assert ra.tokens == rb.tokens
    if with_stats:
        assert [c.accepted for c in ra.cycles] == [c.accepted for c in rb.cycles]
        assert [c.tested_conf for c in ra.cycles] == [c.tested_conf for c in rb.cycles]


def draft_vocab_head(seed: int, ids: list[int]) -> DraftHead:
    config = DraftHeadConfig.of_target(target())
    config.draft_vocab_size = len(ids)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        h = DraftHead(config, target()).eval()
    h.set_draft_vocab(torch.tensor(ids))
    return h


def test_head_save_load_round_trip_gives_identical_outputs(tmp_path):
    config = InferConf(method="eagle2", depth=3, top_k=4, total_tokens=10)
    heads = {
        "shifted": random_head(target(), seed=4),
        "unshifted": random_head(target(), seed=5, input_mode="feature+token"),
        "draft-vocab": draft_vocab_head(6, [90, 3, 41, 7, 64, 12, 33, 58, 21, 80]),
    }
    for name, original in heads.items():
        original.save(tmp_path / name, dtype=torch.float32)
        loaded = load_head(tmp_path / name, target())
        assert loaded.config == original.config
        a, b = original.trainable_state_dict(), loaded.trainable_state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
        for sampling in (SamplingParams(), SamplingParams(temperature=1.0)):
            same_run(original, loaded, config, sampling)
    assert torch.equal(load_head(tmp_path / "draft-vocab", target()).draft_vocab, heads["draft-vocab"].draft_vocab)


def test_head_saved_in_bfloat16_by_default(tmp_path):
    original = random_head(target(), seed=4)
    original.save(tmp_path / "head")
    loaded = load_head(tmp_path / "head", target())
    a, b = original.trainable_state_dict(), loaded.trainable_state_dict()
    assert all(b[k].dtype == torch.float32 for k in b)
    assert all(torch.equal(a[k].to(torch.bfloat16).float(), b[k]) for k in a)
    again = load_head(tmp_path / "head", target())
    config = InferConf(method="eagle2", depth=3, top_k=4, total_tokens=10)
    same_run(loaded, again, config, SamplingParams(temperature=1.0))
    same_run(original, loaded, config, SamplingParams(), with_stats=False)  # greedy output never depends on the head


def eagle_style_checkpoint(directory, source: DraftHead, config: dict, extra: dict | None = None):
    """Write a published-EAGLE-style head: a LlamaConfig-like config.json and pytorch_model.bin with keys
    fc.*, layers.0.*, embed_tokens.weight."""
    directory.mkdir(parents=True, exist_ok=True)
    state = {}
    for key, value in source.trainable_state_dict().items():
        state[("layers.0." + key[len("layer."):]) if key.startswith("layer.") else key] = value.clone()
    state["embed_tokens.weight"] = torch.randn(config["vocab_size"], config["hidden_size"])
    state.update(extra or {})
    torch.save(state, directory / "pytorch_model.bin")
    (directory / "config.json").write_text(json.dumps(config))
    return state


def llama_config_dict(tgt) -> dict:
    c = tgt.config
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size, "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads, "num_hidden_layers": 1, "vocab_size": c.vocab_size,
        "max_position_embeddings": c.max_position_embeddings, "rms_norm_eps": c.rms_norm_eps,
        "torch_dtype": "float16", "bias": False,
    }


def test_published_eagle_checkpoint_loads(tmp_path):
    source = random_head(target(), seed=9)
    state = eagle_style_checkpoint(tmp_path / "eagle", source, llama_config_dict(target()))
    assert {"fc.weight", "fc.bias", "layers.0.self_attn.q_proj.weight", "layers.0.self_attn.o_proj.weight",
            "layers.0.mlp.down_proj.weight", "layers.0.post_attention_layernorm.weight",
            "embed_tokens.weight"} <= set(state)
    loaded = load_head(tmp_path / "eagle", target())
    assert loaded.config.hidden_size == 64 and loaded.config.vocab_size == 96 and loaded.config.fc_bias
    a, b = source.trainable_state_dict(), loaded.trainable_state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    config = InferConf(method="eagle2", depth=3, top_k=3, total_tokens=8)
    ra = Engine(target(), source, config).generate(PROMPT, 16)
    rb = Engine(target(), loaded, config).generate(PROMPT, 16)
    assert ra.tokens == rb.tokens and [c.tested_conf for c in ra.cycles] == [c.tested_conf for c in rb.cycles]


def test_published_eagle_checkpoint_errors(tmp_path):
    source = random_head(target(), seed=9)
    cfg = llama_config_dict(target())
    eagle_style_checkpoint(tmp_path / "wide", source, {**cfg, "hidden_size": 128})
    one_line_error(lambda: load_head(tmp_path / "wide", target()), "hidden size 128", "64")
    eagle_style_checkpoint(tmp_path / "vocab", source, {**cfg, "vocab_size": 32000})
    one_line_error(lambda: load_head(tmp_path / "vocab", target()), "vocabulary size 32000", "96")
    # A second layer makes a two-layer head (head.layers); an incomplete one is refused, naming what is missing.
    two = {"layers.1.mlp.up_proj.weight": torch.zeros(128, 64)}
    eagle_style_checkpoint(tmp_path / "two", source, cfg, two)
    one_line_error(lambda: load_head(tmp_path / "two", target()), "missing", "layers.1.")
    bad = {"layers.0.self_attn.q_proj.bias": torch.zeros(64)}
    eagle_style_checkpoint(tmp_path / "bias", source, cfg, bad)
    one_line_error(lambda: load_head(tmp_path / "bias", target()), "layers.0.self_attn.q_proj.bias")


def test_one_schema_from_the_command_line_to_the_engine():
    """One schema: the command line's infer group (with the lookup group as its lookup settings) is the InferConf
    the engine runs, field for field (distinct values per field, so a swapped or dropped field shows)."""
    from hydra import compose, initialize_config_dir

    from eagle_infer.entry.cli import InferRunConf  # noqa: F401 (registers the schema)
    from eagle_infer.paths import CONF_DIR
    from eagle_infer.config import InferConf, LookupConf
    from omegaconf import OmegaConf

    values = dict(method="chain", depth=5, top_k=5, total_tokens=11, expand_by="confidence", rerank=False,
                  max_batch_size=7, batch_token_budget=13, pad_trees="on", budget="fixed", temperature=0.5, draft_vocab="full",
                  top_p=0.9, sampling_top_k=4, lookup=True)
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        cfg = compose("infer", [f"infer.{k}={v}" for k, v in values.items()] + ["lookup.max_ngram=3",
                                                                                 "lookup.num_tokens=4"])
    conf = OmegaConf.to_object(cfg)
    assert conf.infer == InferConf(**values, lookup_conf=LookupConf(max_ngram=3, num_tokens=4))
    assert Engine(target(), head(), conf.infer).config == resolve(conf.infer)
    assert conf.infer.sampling() == SamplingParams(temperature=0.5, top_p=0.9, sampling_top_k=4)


def test_head_hub_id_downloads_once_and_offline_is_one_line(tmp_path, monkeypatch):
    """infer.head=<owner/name> fetches the head's snapshot through huggingface_hub (a local stand-in here, never the
    network); offline, one line names the id and the local alternative."""
    import huggingface_hub

    from eagle_infer.models.registry import is_hub_id

    snapshot = tmp_path / "snapshot"
    head().save(snapshot)
    asked = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo, **kw: asked.append(repo) or str(snapshot))
    loaded = load_head("someone/eagle-tiny", target())
    assert asked == ["someone/eagle-tiny"] and loaded.config == head().config
    assert not is_hub_id(str(snapshot)) and not is_hub_id("./a/b") and is_hub_id("a/b")

    def offline(repo, **kw):
        raise OSError("no network")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    one_line_error(lambda: load_head("someone/eagle-tiny", target()), "'someone/eagle-tiny'", "OSError",
                   "infer.head=<its local directory>")


def test_model_hub_id_offline_is_one_line(monkeypatch):
    import transformers

    from eagle_infer.models.target import load_target

    def offline(*args, **kwargs):  # what from_pretrained raises without the hub (the network is never asked)
        raise OSError("We couldn't connect to 'https://huggingface.co'")

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", offline)

    one_line_error(lambda: load_target("someone/not-cached-model", "float32", "cpu"), "'someone/not-cached-model'",
                   "model.name=<its local directory>")
