"""stage=plan's costs (eagle_train.training.plan) for the 8B EAGLE-3 recipes without the hub, and the refusals that come
before any work: a disk too small for featurize, an online target that does not fit, an architecture the head cannot
take, more ranks than shards or micro batches."""
from __future__ import annotations

import json
import re

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import eagle_train.features.disk as disk_mod
import eagle_train.training.plan as plan_mod
from eagle_infer.paths import CONF_DIR, REPO
from eagle_infer.errors import EagleError
from eagle_train.cli import TrainRunConf, plan
from eagle_train.features.featurize import FeaturizeConfig, check_ranks, featurize
from eagle_train.training.train import train
from tests.test_train import FEAT, conversations
from tests.test_train_states import config


def recipe(name: str, *overrides: str) -> TrainRunConf:
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        cfg = compose("train", [f"recipes={name}", *overrides, f"hydra.searchpath=[file://{REPO}]"])
    return OmegaConf.to_object(cfg)


def one_line(err) -> str:
    assert "\n" not in str(err.value)
    return str(err.value)


@pytest.mark.parametrize("name, vocab, layers", [("llama3.1-8b-instruct", 128256, 32), ("qwen3-8b", 151936, 36)])
def test_plan_of_the_8b_eagle3_recipes(name, vocab, layers, monkeypatch):
    """Disk offline and cached, memory per rank offline and online, steps: from the registered shape on the meta
    device, nothing downloaded; the recipes train EAGLE-3's block online with the reference settings."""
    conf = recipe(name, "plan.ranks=8", "plan.time_steps=0")
    assert (conf.head.block, conf.train.features, conf.train.ttt_steps + 1, conf.train.draft_vocab_size,
            conf.featurize.max_length) == ("eagle3", "online", 7, 32000, 4096)
    text = plan(conf)
    assert "cost (8 ranks; data estimated at 4 characters a token):" in text
    # DeepSpeed's scheduler is sized at the start of training: the plan names it, not a placeholder step count
    assert "warmup_num_steps" not in text and "(its scheduler: constant after 1000 warmup steps," in text
    tokens = float(re.search(r"data: [\d,]+ training conversations, ([\d.]+)M tokens", text).group(1)) * 1e6
    disk = re.search(r"disk: offline ([\d,.]+) GB \(16,384 bfloat16 values a token\)", text)
    assert disk and float(disk.group(1).replace(",", "")) == pytest.approx(tokens * (16384 * 2 + 5) / 1e9, rel=0.01)
    assert "online" in text and "(tokens only)" in text
    weights = re.search(r"memory per rank, online \(and cached\): [\d.]+ GB = target weights ([\d.]+) GB", text)
    assert weights and float(weights.group(1)) == pytest.approx(16.1 if layers == 32 else 16.4, abs=0.1)
    assert "(ZeRO-2)" in text and re.search(r"steps: [\d,]+ an epoch \(1 conversations x 8 ranks x 2 accumulated\)", text)
    assert "time: not timed" in text


def test_plan_times_steps_where_asked(tmp_path):
    """plan.time_steps=N times N online steps on this machine (here the CPU, a synthetic SmolLM2 at 32 tokens)."""
    conf = recipe("demo", "plan.time_steps=1", "featurize.max_length=32", "train.batch_size=1", "model.dtype=float32")
    text = plan(conf)
    assert re.search(r"time \(online, timed on CPU, 1 steps of micro batch 1 x 32\): [\d,]+ tokens/s a rank, ~[\d.]+ h "
                     r"an epoch on 1 such rank", text), text


def test_featurize_refuses_a_disk_too_small(tiny_smol, tmp_path, monkeypatch):
    monkeypatch.setattr(disk_mod, "free_bytes", lambda path: 10_000)
    with pytest.raises(EagleError) as err:
        featurize(conversations(), tiny_smol, tmp_path / "train", FEAT)
    assert re.match(r"featurize \([\d,]+ tokens estimated, states\) needs ~[\d.]+ MB in '.*train', but its disk has "
                    r"0\.0 MB free", one_line(err)), str(err.value)
    assert not list((tmp_path / "train").glob("shard-*"))
    featurize(conversations(), tiny_smol, tmp_path / "tokens", FEAT, states=False)  # tokens fit in less


def test_online_refuses_a_target_that_does_not_fit(monkeypatch):
    monkeypatch.setattr(plan_mod, "available_memory", lambda device: 8 * 10**9)
    conf = recipe("llama3.1-8b-instruct")
    with pytest.raises(EagleError) as err:
        plan_mod.check_fits(conf, {"bf16": {"enabled": True}}, 8, torch.device("cpu"))
    assert re.match(r"train.features=online: llama3.1-8b-instruct needs ~[\d.]+ GB on each rank \(target weights 16.1 GB, "
                    r".*but cpu has 8.0 GB free", one_line(err))


def test_plan_refuses_an_architecture_the_head_cannot_take(tmp_path):
    model = tmp_path / "gpt2-model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4}))
    with pytest.raises(EagleError) as err:
        plan(recipe("demo", f"model.name={model}", "plan.time_steps=0"))
    assert "has architecture 'gpt2', which the draft head cannot take: expected one of llama" in one_line(err)


def test_more_ranks_than_shards_or_micro_batches(tiny_smol, deepspeed_cpu_env, tmp_path):
    with pytest.raises(EagleError) as err:
        check_ranks(300, FeaturizeConfig(shard_size=256, world=8))
    assert one_line(err) == ("featurize on 8 ranks, but the 300 training conversations make 2 shard(s) of "
                             "featurize.shard_size 256: expected at most 2 ranks, or a smaller featurize.shard_size")
    featurize(conversations(6), tiny_smol, tmp_path / "train", FEAT)
    cfg = config({"offline": tmp_path}, "offline", tmp_path / "run", heldout=None, batch_size=8)
    with pytest.raises(EagleError) as err:
        train(cfg, tiny_smol)
    assert "6 conversations cannot fill 1 micro batch(es) of 8 on each of 1 ranks: expected at most 0 ranks" in \
        one_line(err)


def test_an_fp16_config_plans_fp16(tmp_path):
    """DeepSpeed's precision has one reader (train.precision): an fp16 config plans 2-byte weights as bf16 does,
    where a float32 one plans 4 (a plan once read fp16 as float32 and doubled the memory)."""
    shipped = json.loads((REPO / "conf/deepspeed/zero2_bf16.json").read_text())
    weights = {}
    for name, section in (("bf16", "bf16"), ("fp16", "fp16"), ("fp32", None)):
        ds = {k: v for k, v in shipped.items() if k not in ("bf16", "fp16")}
        if section:
            ds[section] = {"enabled": True}
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(ds))
        text = plan(recipe("qwen3-8b", "plan.ranks=8", "plan.time_steps=0", f"train.deepspeed_config={path}"))
        weights[name] = float(re.search(r"online \(and cached\): [\d.]+ GB = target weights ([\d.]+) GB", text).group(1))
    assert weights["fp16"] == weights["bf16"] == pytest.approx(weights["fp32"] / 2, rel=0.01)
