"""Export to the servers' layouts (eagle_train.export.formats): what vLLM's, speculators' and SGLang's loaders read
(tests/fixtures/serving_loaders.json), every format complete (rope, embedding, dtypes, ascending draft ids), the same
predictions when this toolkit loads the export back, speculators' own classes drafting what the toolkit drafts
(scripts/check_export.py, when speculators imports), the model card's serve commands, and one-line refusals."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from eagle_infer.decoding.build import SHIPPED_HEADS_DIR
from eagle_infer.head.dflash_head import random_dflash_head
from eagle_infer.head.draft_head import DraftHead, DraftHeadConfig, eagle3_layers, random_head
from eagle_infer.errors import EagleError
from eagle_infer.head.head_checkpoint import load_head
from eagle_infer.head.head_runner import HeadRunner
from eagle_train.export.formats import FAMILIES, FORMATS, SERVERS, ExportSettings, check_servable, export, write_card
from scripts import check_export
from tests.tiny import LLAMA3_ROPE, tiny_target

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "serving_loaders.json").read_text())
VERIFIED = ExportSettings(verifier="someone/target")  # a hub id for the speculators config of a test target


def expectations(fmt: str, block: str) -> dict:
    """What the loader of `fmt` reads (the `eagle` format is SafeAILab's layout, SGLang's but for the EAGLE-1
    architecture name)."""
    return FIXTURE[{"eagle": "sglang"}.get(fmt, fmt)][block]


def check_layout(out: Path, head: DraftHead, fmt: str) -> None:
    """Every exported weight is one the server's loader has, of its shape; what it lacks is absent; config keys."""
    block = "eagle3" if head.config.block == "eagle3" else "eagle"
    want = expectations(fmt, block)
    config = json.loads((out / "config.json").read_text())
    eagle1_reference = fmt == "eagle" and block == "eagle"
    assert config["architectures"] == ["LlamaForCausalLM"] if eagle1_reference else (
        config["architectures"][0] in want["architectures"])
    assert all(k in config for k in want["config_keys"]), [k for k in want["config_keys"] if k not in config]
    layer = config.get("transformer_layer_config", config)
    assert all(k in layer for k in want.get("layer_config_keys", [])), want.get("layer_config_keys")
    assert all(config[k] == v for k, v in want.get("config_values", {}).items())
    assert not [k for k in want.get("config_absent", []) if k in config]
    c, t = head.config, head.target.config
    d = getattr(t, "head_dim", None) or t.hidden_size // t.num_attention_heads
    sizes = {"H": c.hidden_size, "2H": 2 * c.hidden_size, "3H": 3 * c.hidden_size, "I": t.intermediate_size,
             "Q": t.num_attention_heads * d, "KV": t.num_key_value_heads * d, "V": c.vocab_size, "D": d,
             "Vd": c.draft_vocab_size or c.vocab_size}
    weights = load_file(str(out / "model.safetensors"))
    for name, tensor in weights.items():
        shapes = [shape for pattern, shape in want["weights"].items() if re.fullmatch(pattern, name)]
        assert shapes, f"{fmt} has no parameter for {name}"
        assert list(tensor.shape) == [sizes[s] for s in shapes[0]], (name, tensor.shape, shapes[0])
    assert not [n for n in want.get("absent", []) if n in weights]
    assert all(n in weights for n in want.get("required", []))
    with_vocab = want.get("required_with_draft_vocab", [])
    assert [n for n in with_vocab if n in weights] == (with_vocab if c.draft_vocab_size else [])
    if block == "eagle" and c.draft_vocab_size:
        assert (out / want["token_map"]).exists()


def check_complete(out: Path, head: DraftHead, fmt: str, dtype: torch.dtype = torch.bfloat16) -> None:
    """What the loaders would otherwise default silently: rope_theta (and the rope scaling) at the top level, the
    target's embedding, dtypes that agree with the weights', draft ids ascending, aux layer ids at the top level."""
    config = json.loads((out / "config.json").read_text())
    layer = config.get("transformer_layer_config", config)
    rope = dict(head.target.config.rope_parameters)
    assert layer["rope_theta"] == rope["rope_theta"] and layer["rope_parameters"] == rope
    if rope["rope_type"] != "default":
        assert layer["rope_scaling"] == {k: v for k, v in rope.items() if k != "rope_theta"}
    name = str(dtype).removeprefix("torch.")
    assert config["torch_dtype"] == config["dtype"] == layer["torch_dtype"] == layer["dtype"] == name
    weights = load_file(str(out / "model.safetensors"))
    assert {v.dtype for v in weights.values() if v.is_floating_point()} == {dtype}
    assert torch.equal(weights["embed_tokens.weight"], head.target.embed_tokens.weight.detach().to(dtype))
    if head.config.block == "eagle3":
        if "d2t" in weights:
            ids = torch.arange(weights["d2t"].numel()) + weights["d2t"]
            assert bool((ids[1:] > ids[:-1]).all()) and torch.equal(weights["t2d"].nonzero()[:, 0], ids)
        assert config["eagle_aux_hidden_state_layer_ids"] == [i + 1 for i in head.config.feature_layers]
        assert config["norm_before_residual"] is False
    elif head.config.draft_vocab_size:
        ids = torch.load(out / "token_map.pt")
        assert bool((ids[1:] > ids[:-1]).all())


def same_predictions(a: DraftHead, b: DraftHead, target) -> None:
    """The two heads, drafting for `target`, predict equal features and draft logits bit for bit."""
    width = a.config.hidden_size * max(1, len(a.config.feature_layers))
    gen = torch.Generator().manual_seed(3)
    feats, tokens = torch.randn(1, 7, width, generator=gen).to(target.dtype), torch.randint(0, min(400, target.vocab_size), (1, 7), generator=gen)
    outs = []
    for head in (a, b):
        runner = HeadRunner(head, target)
        cache = runner.new_cache(1, 16)
        with torch.inference_mode():
            predicted = runner(feats, tokens, torch.arange(7)[None], cache, None)
            outs.append((predicted, runner.logits(predicted)))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])


@pytest.mark.integration
@pytest.mark.parametrize("server", ["sglang", "eagle"])
def test_shipped_head_exports_and_loads_back_the_same(server, tmp_path):
    from eagle_infer.models.target import load_target

    target = load_target("smollm2-135m", "float32", "cpu")
    head = load_head(SHIPPED_HEADS_DIR / "smollm2-135m", target)
    files = export(head, server, tmp_path)
    assert sorted(p.name for p in files) == ["config.json", "model.safetensors", "token_map.pt"]
    check_layout(tmp_path, head, server)
    check_complete(tmp_path, head, server)
    back = load_head(tmp_path, target)
    assert back.config.draft_vocab_size == 8192 and torch.equal(back.draft_vocab, head.draft_vocab.sort().values)
    same_predictions(head, back, target)
    with pytest.raises(EagleError, match="^vLLM's EAGLE-1 drafter has no fc bias.*train with head.fc_bias=false"):
        export(head, "vllm", tmp_path / "vllm")
    card = write_card(SHIPPED_HEADS_DIR / "smollm2-135m", tmp_path, head, server).read_text()
    assert card.startswith((SHIPPED_HEADS_DIR / "smollm2-135m" / "README.md").read_text().rstrip("\n"))
    assert "--speculative-draft-model-path" in card if server == "sglang" else "EaModel.from_pretrained" in card


def stored(head: DraftHead, target, directory: Path) -> DraftHead:
    """The head as this toolkit stores it (bfloat16 weights, as exports are), loaded back."""
    head.save(directory)
    return load_head(directory, target)


def eagle3_head(target, draft_vocab: int) -> DraftHead:
    config = DraftHeadConfig.of_target(target)
    layers = eagle3_layers(target.config.num_hidden_layers)
    config.block, config.feature_layers, config.draft_vocab_size = "eagle3", list(layers), draft_vocab
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        head = check_export.perturbed(DraftHead(config, target).eval())
    if draft_vocab:
        head.set_draft_vocab(torch.randperm(target.vocab_size, generator=torch.Generator().manual_seed(1))[:draft_vocab])
    return head


@pytest.mark.parametrize("server", FORMATS)
@pytest.mark.parametrize("draft_vocab", [0, 300])
def test_eagle3_block_exports_to_every_server_and_loads_back_the_same(tiny_smol6, server, draft_vocab, tmp_path,
                                                                     monkeypatch):
    # A target that ties its embedding and LM head (as SmolLM2 does): the export must still name the head's own.
    monkeypatch.setattr(tiny_smol6.config, "tie_word_embeddings", True)
    head = stored(eagle3_head(tiny_smol6, draft_vocab), tiny_smol6, tmp_path / "saved")
    export(head, server, tmp_path / "out", VERIFIED)
    check_layout(tmp_path / "out", head, server)
    check_complete(tmp_path / "out", head, server)
    # vocabulary maps only for a reduced draft vocabulary (a full one's d2t is refused by vLLM 0.32's CPU build)
    maps = {"d2t", "t2d"} & set(load_file(str(tmp_path / "out" / "model.safetensors")))
    assert maps == ({"d2t", "t2d"} if draft_vocab else set())
    back = load_head(tmp_path / "out", tiny_smol6)
    assert back.config.block == "eagle3" and back.config.feature_layers == head.config.feature_layers
    same_predictions(head, back, tiny_smol6)


@pytest.fixture(scope="module")
def llama3_target():
    """A tiny Llama with Llama 3's rope scaling and a rope_theta no loader defaults to."""
    return tiny_target(vocab=300, hidden=64, layers=8, arch="llama3", rope_theta=check_export.ROPE_THETA)


@pytest.mark.parametrize("server", FORMATS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_every_format_writes_rope_embedding_dtypes_and_ascending_ids(llama3_target, server, dtype, tmp_path):
    """Mutations that fail here: rope_theta or rope_scaling left out of a config (the converter and vLLM on
    transformers 4 fall back to theta 10,000 without rope scaling), the embedding left out (speculators drafts from
    an embedding that is not the target's), torch_dtype != dtype, the draft ids in the head's frequency order."""
    assert LLAMA3_ROPE["rope_type"] == "llama3"
    heads = [check_export.eagle3_head(llama3_target)]
    if server != "speculators":
        plain = random_head(llama3_target, seed=4, draft_vocab=None if server == "vllm" else torch.randperm(300)[:90])
        torch.nn.init.zeros_(plain.fc.bias)
        heads.append(plain)
    for n, head in enumerate(heads):
        export(head, server, tmp_path / str(n), ExportSettings(verifier="someone/target", dtype=dtype))
        check_complete(tmp_path / str(n), head, server, getattr(torch, dtype))
        check_layout(tmp_path / str(n), head, server)


@pytest.mark.parametrize("family", ["qwen3", "qwen2", "mistral"])
def test_heads_for_other_families_export_where_a_server_drafts_for_them(family, tmp_path):
    target = tiny_target(vocab=300, hidden=64, layers=8, arch=family)
    head = check_export.eagle3_head(target)
    for fmt in FORMATS:
        if family not in FAMILIES[("eagle3", fmt)]:
            with pytest.raises(EagleError, match=f"^{re.escape(SERVERS[fmt])} has no EAGLE-3 drafter for "
                                                 f"a '{family}' target .*: export format=speculators or vllm$"):
                export(head, fmt, tmp_path / fmt, VERIFIED)
            continue
        export(head, fmt, tmp_path / fmt, VERIFIED)
        check_layout(tmp_path / fmt, head, fmt)
        check_complete(tmp_path / fmt, head, fmt)
        config = json.loads((tmp_path / fmt / "config.json").read_text())
        layer = config.get("transformer_layer_config", config)
        assert layer["model_type"] == ("qwen3" if family == "qwen3" else "llama")
        assert layer["attention_bias"] is (family == "qwen2")
        if fmt == "vllm" and family == "qwen3":
            assert config["architectures"] == ["Eagle3Qwen3ForCausalLM"]
        weights = load_file(str(tmp_path / fmt / "model.safetensors"))
        o_bias = [v for k, v in weights.items() if k.endswith("o_proj.bias")]  # vLLM leaves a missing one unset
        assert [float(v.abs().max()) for v in o_bias] == ([0.0] if family == "qwen2" else [])
        if family != "qwen2":  # this toolkit's Qwen2 layer has no o_proj bias: speculators' check reads those
            same_predictions(head, load_head(tmp_path / fmt, target), target)


def test_bad_exports_are_refused_in_one_line(tiny_smol, tiny_smol6, tmp_path):
    fused = random_head(tiny_smol6, feature_layers=list(eagle3_layers(6)))
    for fmt in FORMATS:
        with pytest.raises(EagleError, match="^fused features on the EAGLE-1 block run on no server: train with"):
            export(fused, fmt, tmp_path)
    with pytest.raises(EagleError, match="^unknown export format 'onnx': expected one of speculators, vllm, sglang, "
                                         "eagle$"):
        export(random_head(tiny_smol), "onnx", tmp_path)
    with pytest.raises(EagleError, match="^a head with input_mode 'token' runs on no server"):
        export(random_head(tiny_smol, input_mode="token"), "sglang", tmp_path)
    biased = random_head(tiny_smol, seed=2)  # a random fc bias: vLLM's fc has none
    with pytest.raises(EagleError, match="^vLLM's EAGLE-1 drafter has no fc bias.*head.fc_bias=false"):
        export(biased, "vllm", tmp_path)
    with pytest.raises(EagleError, match="^speculators .* has no EAGLE-1 model.*export format=vllm"):
        export(biased, "speculators", tmp_path)
    qwen3 = random_head(tiny_target(vocab=96, layers=2, arch="qwen3"))  # an EAGLE-1 block: no server drafts it
    for fmt in ("vllm", "sglang", "eagle"):
        with pytest.raises(EagleError, match=f"^{re.escape(SERVERS[fmt])} has no EAGLE-1 drafter for a "
                                             "'qwen3' target .*: no server drafts for it$"):
            export(qwen3, fmt, tmp_path)
    unnamed = eagle3_head(tiny_smol6, 0)  # target "tiny-smol6": neither a hub id nor a directory
    with pytest.raises(EagleError, match="^a speculators export names its verifier .* target 'tiny-smol6' is neither: "
                                         "give export.verifier="):
        export(unnamed, "speculators", tmp_path / "spec")
    assert not (tmp_path / "spec").exists()
    export(unnamed, "sglang", tmp_path / "used")
    with pytest.raises(EagleError, match="^export directory '.*used' exists and is not empty: expected a new or empty "
                                         "directory, or export.overwrite=true$"):
        export(unnamed, "vllm", tmp_path / "used")
    export(unnamed, "speculators", tmp_path / "used", ExportSettings(verifier="someone/x", overwrite=True))
    assert json.loads((tmp_path / "used" / "config.json").read_text())["speculators_model_type"] == "eagle3"
    with pytest.raises(EagleError, match="^unknown export.dtype 'int8'"):
        export(unnamed, "vllm", tmp_path / "new", ExportSettings(dtype="int8"))


def test_every_family_and_format_is_accepted_or_refused_as_written():
    """check_servable follows FAMILIES for both blocks and every family the toolkit loads."""
    for family in ("llama", "mistral", "qwen2", "qwen3"):
        target = tiny_target(vocab=96, hidden=64, layers=8, arch=family)
        plain = random_head(target)
        torch.nn.init.zeros_(plain.fc.bias)  # vLLM refuses a bias, whatever the family
        for head in (plain, check_export.eagle3_head(target)):
            for fmt in FORMATS:
                accepted = family in FAMILIES[(head.config.block, fmt)]
                try:
                    check_servable(head, fmt)
                    assert accepted, (family, head.config.block, fmt)
                except EagleError as err:
                    assert not accepted and "\n" not in str(err), (family, head.config.block, fmt, err)


def test_card_names_complete_serve_commands(tiny_smol6, tmp_path):
    head = eagle3_head(tiny_smol6, 300)
    (tmp_path / "head").mkdir()
    (tmp_path / "head" / "README.md").write_text("# the head's card\n")
    for fmt in FORMATS:
        export(head, fmt, tmp_path / fmt, ExportSettings(verifier="someone/target", speculative_tokens=5))
        card = write_card(tmp_path / "head", tmp_path / fmt, head, fmt,
                          ExportSettings(verifier="someone/target", speculative_tokens=5)).read_text()
        assert card.startswith("# the head's card\n") and "## Serve" in card and "vLLM main" in card
        spec = '{"method": "eagle3", "model": "' + str(tmp_path / fmt) + '", "num_speculative_tokens": 5}'
        if fmt in ("speculators", "vllm"):
            assert f"vllm serve someone/target --speculative-config '{spec}'" in card
        if fmt == "speculators":
            assert f"vllm serve {tmp_path / fmt}\n" in card
            config = json.loads((tmp_path / fmt / "config.json").read_text())["speculators_config"]
            assert config["proposal_methods"][0]["speculative_tokens"] == 5
            assert config["verifier"]["name_or_path"] == "someone/target"
        if fmt == "sglang":
            assert ("--model-path someone/target --speculative-algorithm EAGLE3 --speculative-draft-model-path "
                    f"{tmp_path / fmt} --speculative-num-steps 5 --speculative-eagle-topk 1 "
                    "--speculative-num-draft-tokens 6") in card


def test_head_fc_bias_false_builds_the_fc_vllm_holds(tiny_smol, tmp_path):
    """head.fc_bias=false reaches the head config training builds (and saves), so the fc has no bias."""
    from eagle_train.training.train import HeadConf, TrainConfig, build_head_config

    for fc_bias in (True, False):
        config = build_head_config(tiny_smol, TrainConfig(draft_vocab_size=0), HeadConf(fc_bias=fc_bias))
        head = DraftHead(config, tiny_smol)
        assert config.fc_bias is fc_bias and (head.fc.bias is not None) is fc_bias
    stored(head, tiny_smol, tmp_path / "saved")
    assert json.loads((tmp_path / "saved" / "config.json").read_text())["fc_bias"] is False


def test_a_head_trained_without_fc_bias_exports_for_vllm(tiny_smol, deepspeed_cpu_env, tmp_path):
    """head.fc_bias=false: training builds, trains and saves an fc without a bias, and vLLM's layout takes it."""
    from eagle_train.features.featurize import featurize
    from eagle_train.training.train import HeadConf, train
    from tests.test_train import FEAT, conversations, train_config

    convs = conversations(8)
    featurize(convs[:6], tiny_smol, tmp_path / "train", FEAT)
    featurize(convs[6:], tiny_smol, tmp_path / "heldout", FEAT)
    cfg = train_config((tmp_path / "train", tmp_path / "heldout"), tmp_path / "run", max_steps=4, eval_every=4,
                       save_every=4, draft_vocab_size=0)
    train(cfg, tiny_smol, HeadConf(fc_bias=False))
    saved = tmp_path / "run" / "head"
    assert json.loads((saved / "config.json").read_text())["fc_bias"] is False
    assert "fc.bias" not in load_file(str(saved / "model.safetensors"))
    head = load_head(saved, tiny_smol)
    assert head.fc.bias is None
    export(head, "vllm", tmp_path / "vllm")
    check_layout(tmp_path / "vllm", head, "vllm")
    same_predictions(head, load_head(tmp_path / "vllm", tiny_smol), tiny_smol)


@pytest.mark.skipif(check_export.unavailable() is not None, reason=f"speculators is needed to load the exports with "
                    f"vLLM's own library: {check_export.unavailable()}; pip install --no-deps speculators")
def test_speculators_loads_every_export_and_drafts_what_the_toolkit_drafts(tmp_path, capsys):
    """make check-export's rows for tiny Llama and Qwen3 targets: every format speculators reads, through
    `speculators convert` where it applies, drafts the toolkit's logits (<= 1e-4) and top-1 (all positions)."""
    rows = check_export.run(families=("llama", "qwen3"), positions=19, work=tmp_path)
    loaded = {(r.family, r.fmt) for r in rows if r.loaded and r.head.startswith("eagle3")}
    assert loaded == {("llama", f) for f in FORMATS} | {("qwen3", "speculators")}
    assert {(r.family, r.fmt) for r in rows if r.loaded and r.head.startswith("dflash")} == {
        (family, fmt) for family in ("llama", "qwen3") for fmt in ("forward", "speculators")}
    assert all(r.ok for r in rows), [r.line() for r in rows if not r.ok]
    assert all(r.max_diff <= r.bound <= check_export.TOLERANCE and r.top1 == r.positions for r in rows if r.loaded)
    assert {r.positions for r in rows if r.loaded} == {2 * 19 - 1, (19 - 4) * 4}  # EAGLE-3: two steps; DFlash: blocks x B
    assert "speculators convert -> SpeculatorModel.from_pretrained" in capsys.readouterr().out


def test_push_uploads_an_export_with_its_card_and_offline_is_one_line(tiny_smol, tmp_path, monkeypatch):
    """stage=push against a local stand-in for the hub (never the network)."""
    import shutil

    import huggingface_hub

    from eagle_train.export.formats import push

    hub = tmp_path / "hub"

    class StandIn:
        def create_repo(self, repo_id, repo_type, private, exist_ok):
            assert repo_type == "model" and exist_ok
            return f"https://huggingface.co/{repo_id}"

        def upload_folder(self, folder_path, repo_id, repo_type, commit_message):
            shutil.copytree(folder_path, hub / repo_id)

    monkeypatch.setattr(huggingface_hub, "HfApi", StandIn)
    head = random_head(tiny_smol)
    export(head, "sglang", tmp_path / "out")
    with pytest.raises(EagleError, match="has no model card"):
        push(tmp_path / "out", "someone/head")
    (tmp_path / "out" / "README.md").write_text("# a card\n")
    assert push(tmp_path / "out", "someone/head") == "https://huggingface.co/someone/head"
    assert sorted(p.name for p in (hub / "someone" / "head").iterdir()) == ["README.md", "config.json",
                                                                            "model.safetensors"]
    with pytest.raises(EagleError, match="holds no exported head"):
        push(tmp_path, "someone/head")

    class Offline(StandIn):
        def create_repo(self, *args, **kwargs):
            raise ConnectionError("no network")

    monkeypatch.setattr(huggingface_hub, "HfApi", Offline)
    with pytest.raises(EagleError, match=r"^pushing .* to 'someone/head' failed \(ConnectionError\)"):
        push(tmp_path / "out", "someone/head")


def dflash_drafter(arch: str = "llama", draft_vocab: bool = True):
    target = tiny_target(vocab=300, hidden=64, layers=8, arch=arch, rope_theta=check_export.ROPE_THETA)
    if draft_vocab:
        return check_export.dflash_head(target, 299, layers=2, block_size=4)
    return check_export.perturbed(random_dflash_head(target, 299, layers=2, block_size=4))


@pytest.mark.skipif(check_export.unavailable() is not None, reason=str(check_export.unavailable()))
def test_dflash_export_is_loaded_by_speculators_and_its_aux_ids_are_checked_by_the_load(tmp_path):
    """make check-export's DFlash rows on a tiny Llama target: the forward within 1e-5, the speculators export
    (speculators_model_type dflash) loaded by SpeculatorModel.from_pretrained within 1e-4 and the same top-1, drafting
    from the target's states picked by its aux ids; the same export with the aux ids of our 0-based layers (not + 1)
    drafts something else."""
    head = dflash_drafter()
    verifier = tmp_path / "verifier"
    head.target.model.save_pretrained(str(verifier))
    rows = check_export.check_dflash(head, "llama", str(verifier), tmp_path, 13)
    loaded = {r.fmt: r for r in rows if r.loaded}
    assert set(loaded) == {"forward", "speculators"} and all(r.ok for r in rows), [r.line() for r in rows]
    config = json.loads((tmp_path / "dflash-llama-speculators" / "config.json").read_text())
    assert config["speculators_model_type"] == "dflash" and config["aux_hidden_state_layer_ids"] == [2, 4, 5]
    assert config["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == 3
    config["aux_hidden_state_layer_ids"] = [1, 3, 4]
    (tmp_path / "dflash-llama-speculators" / "config.json").write_text(json.dumps(config))
    from speculators import SpeculatorModel

    model = SpeculatorModel.from_pretrained(str(tmp_path / "dflash-llama-speculators")).float().eval()
    assert check_export.compare_dflash(head, model, 13, states="target")[0] > 100 * check_export.TOLERANCE


def test_dflash_sglang_layout_is_zlabs_and_formats_that_cannot_hold_it_are_one_line(tmp_path):
    head = dflash_drafter(draft_vocab=False)
    export(head, "sglang", tmp_path / "sglang")
    config = json.loads((tmp_path / "sglang" / "config.json").read_text())
    assert config["architectures"] == ["DFlashDraftModel"] and config["block_size"] == 4
    assert config["dflash_config"] == {"mask_token_id": 299, "target_layer_ids": [1, 3, 4]}
    assert config["num_target_layers"] == 8 and config["num_hidden_layers"] == 2
    weights = load_file(str(tmp_path / "sglang" / "model.safetensors"))
    assert set(weights) == set(head.trainable_state_dict()) and "lm_head.weight" not in weights
    for fmt in ("vllm", "eagle"):
        with pytest.raises(EagleError, match=f"the '{fmt}' layout cannot hold a DFlash drafter") as err:
            export(head, fmt, tmp_path / fmt)
        assert "\n" not in str(err.value)
    with pytest.raises(EagleError, match="SGLang's DFlash drafter scores with the target's whole LM head"):
        export(dflash_drafter(), "sglang", tmp_path / "subset")


def test_dflash_cards_name_vllm_and_sglang_commands(tmp_path):
    head = dflash_drafter(draft_vocab=False)
    settings = ExportSettings(verifier="someone/target")
    for fmt in ("speculators", "sglang"):
        export(head, fmt, tmp_path / fmt, settings)
        write_card(tmp_path, tmp_path / fmt, head, fmt, settings)
    vllm = (tmp_path / "speculators" / "README.md").read_text()
    assert f"vllm serve {tmp_path / 'speculators'}" in vllm
    assert ('"method": "dflash", "model": "' + str(tmp_path / "speculators") + '", "num_speculative_tokens": 3') in vllm
    sglang = (tmp_path / "sglang" / "README.md").read_text()
    assert (f"--speculative-algorithm DFLASH --speculative-draft-model-path {tmp_path / 'sglang'} "
            "--speculative-num-draft-tokens 4") in sglang


@pytest.mark.skipif(check_export.unavailable() is not None, reason=str(check_export.unavailable()))
def test_eagle31_exports_to_speculators_with_its_flags_and_loads_back(tmp_path):
    """An EAGLE-3.1 head (fc_norm, norm_output) exported in the speculators format: its flags and per-layer norms
    written, speculators drafting its two steps within 1e-4; this toolkit's loader reads it back to the same drafts;
    the same weights drafting without norm_output differ at the second step (the check sees the flag); the
    SafeAILab layouts refuse it in one line."""
    target = tiny_target(vocab=300, hidden=64, layers=8, rope_theta=check_export.ROPE_THETA)
    head = check_export.eagle3_head(target, eagle31=True)
    verifier = tmp_path / "verifier"
    target.model.save_pretrained(str(verifier))
    export(head, "speculators", tmp_path / "spec", ExportSettings(verifier=str(verifier), dtype="float32"))
    config = json.loads((tmp_path / "spec" / "config.json").read_text())
    assert config["speculators_model_type"] == "eagle3" and config["fc_norm"] and config["norm_output"]
    assert {f"fc_norm.{i}.weight" for i in range(3)} <= set(load_file(str(tmp_path / "spec" / "model.safetensors")))
    diff, top1 = check_export.compare(head, tmp_path / "spec", 19)
    assert diff <= check_export.TOLERANCE and top1 == 2 * 19 - 1
    loaded = load_head(tmp_path / "spec", target)
    assert (loaded.config.fc_norm, loaded.config.norm_output) == (True, True)
    features, tokens, positions = check_export.inputs(head, 19)
    torch.testing.assert_close(check_export.toolkit_logits(loaded, features, tokens, positions),
                               check_export.toolkit_logits(head, features, tokens, positions))
    head.config.norm_output = False
    assert check_export.compare(head, tmp_path / "spec", 19)[0] > 100 * check_export.TOLERANCE
    head.config.norm_output = True
    for fmt in ("vllm", "sglang", "eagle"):
        with pytest.raises(EagleError, match=r"has no fc_norm or norm_output.*export format=speculators"):
            export(head, fmt, tmp_path / fmt)
