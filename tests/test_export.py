"""Export to the servers' layouts (eagle_train.export): what vLLM's and SGLang's loaders read
(tests/fixtures/serving_loaders.json), the same predictions when this toolkit loads the export back, and one-line
refusals of heads a server cannot run."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from eagle_infer.build import HEADS_DIR
from eagle_infer.draft_head import DraftHead, DraftHeadConfig, eagle3_layers, random_head
from eagle_infer.errors import EagleError
from eagle_infer.head_checkpoint import load_head
from eagle_infer.head_runner import HeadRunner
from eagle_train.export import export

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "serving_loaders.json").read_text())


def expectations(server: str, block: str) -> dict:
    entry = FIXTURE[server][block]
    return FIXTURE[entry["same_as"][0]][entry["same_as"][1]] if "same_as" in entry else entry


def check_layout(out: Path, head: DraftHead, fmt: str) -> None:
    """Every exported weight is one the server's loader has, of its shape; what it lacks is absent; config keys.
    The `eagle` format (SafeAILab's layout) is SGLang's but for the architecture name of SafeAILab's configs."""
    block = "eagle3" if head.config.block == "eagle3" else "eagle"
    want = expectations("sglang" if fmt == "eagle" else fmt, block)
    config = json.loads((out / "config.json").read_text())
    eagle1_reference = fmt == "eagle" and block == "eagle"
    assert config["architectures"] == (["LlamaForCausalLM"] if eagle1_reference else want["architectures"])
    assert all(k in config for k in want["config_keys"]), [k for k in want["config_keys"] if k not in config]
    assert all(config[k] == v for k, v in want.get("config_values", {}).items())
    c, t = head.config, head.target.config
    d = getattr(t, "head_dim", None) or t.hidden_size // t.num_attention_heads
    sizes = {"H": c.hidden_size, "2H": 2 * c.hidden_size, "3H": 3 * c.hidden_size, "I": t.intermediate_size,
             "Q": t.num_attention_heads * d, "KV": t.num_key_value_heads * d, "V": c.vocab_size,
             "Vd": c.draft_vocab_size or c.vocab_size}
    weights = load_file(str(out / "model.safetensors"))
    for name, tensor in weights.items():
        shapes = [shape for pattern, shape in want["weights"].items() if re.fullmatch(pattern, name)]
        assert shapes, f"{fmt} has no parameter for {name}"
        assert list(tensor.shape) == [sizes[s] for s in shapes[0]], (name, tensor.shape, shapes[0])
    assert not [n for n in want.get("absent", []) if n in weights]
    assert all(n in weights for n in want.get("required", []))
    if block == "eagle" and c.draft_vocab_size:
        assert (out / want["token_map"]).exists()


def same_predictions(a: DraftHead, b: DraftHead, target) -> None:
    """The two heads, drafting for `target`, predict equal features and draft logits bit for bit."""
    width = a.config.hidden_size * max(1, len(a.config.feature_layers))
    gen = torch.Generator().manual_seed(3)
    feats, tokens = torch.randn(1, 7, width, generator=gen).to(target.dtype), torch.randint(0, 400, (1, 7), generator=gen)
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
    from eagle_infer.target import load_target

    target = load_target("smollm2-135m", "float32", "cpu")
    head = load_head(HEADS_DIR / "smollm2-135m", target)
    files = export(head, server, tmp_path)
    assert sorted(p.name for p in files) == ["config.json", "model.safetensors", "token_map.pt"]
    check_layout(tmp_path, head, server)
    back = load_head(tmp_path, target)
    assert back.config.draft_vocab_size == 8192 and torch.equal(back.draft_vocab, head.draft_vocab)
    same_predictions(head, back, target)
    with pytest.raises(EagleError, match="^vLLM's EAGLE-1 drafter has no fc bias.*format=sglang"):
        export(head, "vllm", tmp_path / "vllm")


def stored(head: DraftHead, target, directory: Path) -> DraftHead:
    """The head as this toolkit stores it (bfloat16 weights, as exports are), loaded back."""
    head.save(directory)
    return load_head(directory, target)


def eagle3_head(target, draft_vocab: int) -> DraftHead:
    config = DraftHeadConfig.of_target(target)
    config.block, config.feature_layers, config.draft_vocab_size = "eagle3", list(eagle3_layers(6)), draft_vocab
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        head = DraftHead(config, target).eval()
        for p in head.parameters():  # norms start at 1: make every weight matter
            p.data.normal_(0, 0.05).add_(1.0 if p.dim() == 1 else 0.0)
    if draft_vocab:
        head.set_draft_vocab(torch.randperm(target.vocab_size, generator=torch.Generator().manual_seed(1))[:draft_vocab])
    return head


@pytest.mark.parametrize("server", ["vllm", "sglang", "eagle"])
@pytest.mark.parametrize("draft_vocab", [0, 300])
def test_eagle3_block_exports_to_every_server_and_loads_back_the_same(tiny_smol6, server, draft_vocab, tmp_path,
                                                                     monkeypatch):
    # A target that ties its embedding and LM head (as SmolLM2 does): the export must still name the head's own.
    monkeypatch.setattr(tiny_smol6.config, "tie_word_embeddings", True)
    head = stored(eagle3_head(tiny_smol6, draft_vocab), tiny_smol6, tmp_path / "saved")
    export(head, server, tmp_path)
    check_layout(tmp_path, head, server)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [i + 1 for i in eagle3_layers(6)]
    back = load_head(tmp_path, tiny_smol6)
    assert back.config.block == "eagle3" and back.config.feature_layers == head.config.feature_layers
    same_predictions(head, back, tiny_smol6)


@pytest.mark.parametrize("server", ["vllm", "sglang", "eagle"])
def test_a_plain_eagle_head_exports_to_every_server(tiny_smol, server, tmp_path):
    """A head vLLM can hold (no fc bias, the full vocabulary) exports to every layout and loads back the same."""
    head = random_head(tiny_smol, seed=4)
    torch.nn.init.zeros_(head.fc.bias)
    head = stored(head, tiny_smol, tmp_path / "saved")
    export(head, server, tmp_path)
    check_layout(tmp_path, head, server)
    same_predictions(head, load_head(tmp_path, tiny_smol), tiny_smol)


def test_heads_no_server_runs_are_refused_in_one_line(tiny_smol, tiny_smol6, tmp_path):
    fused = random_head(tiny_smol6, feature_layers=list(eagle3_layers(6)))
    for fmt in ("vllm", "sglang", "eagle"):
        with pytest.raises(EagleError, match="^fused features on the EAGLE-1 block run on no server: train with"):
            export(fused, fmt, tmp_path)
    with pytest.raises(EagleError, match="^unknown export format 'onnx': expected one of eagle, vllm, sglang$"):
        export(random_head(tiny_smol), "onnx", tmp_path)
    with pytest.raises(EagleError, match="^a head with input_mode 'token' runs on no server"):
        export(random_head(tiny_smol, input_mode="token"), "sglang", tmp_path)
    biased = random_head(tiny_smol, seed=2)  # a random fc bias: vLLM's fc has none
    with pytest.raises(EagleError, match="^vLLM's EAGLE-1 drafter has no fc bias"):
        export(biased, "vllm", tmp_path)


def test_push_uploads_an_export_with_its_card_and_offline_is_one_line(tiny_smol, tmp_path, monkeypatch):
    """stage=push against a local stand-in for the hub (never the network)."""
    import shutil

    import huggingface_hub

    from eagle_train.export import push

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
