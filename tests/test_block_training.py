"""A DFlash drafter trained on the EAGLE pipeline (eagle_train.training.train with head.block=dflash): offline features, a
held-out simulated acceptance length logged at each evaluation (for EAGLE heads too), the saved drafter and its
card, and the one-line refusals of settings it cannot train."""
from __future__ import annotations

import json

import pytest

from eagle_infer.errors import EagleError
from eagle_infer.head.dflash_head import DFlashHead
from eagle_infer.head.head_checkpoint import load_head
from eagle_train.training.block_objective import acceptance_of_chains, block_acceptance
from eagle_train.features.featurize import FeaturizeConfig, featurize
from eagle_train.features.shards import read_samples
from eagle_train.training.train import HeadConf, TrainConfig, build_head_config, objective, train
from tests.oracles import one_thread  # noqa: F401 (autouse)
from tests.test_train import DS_CPU, conversations

FEAT = FeaturizeConfig(max_length=64, batch_tokens=512, store_dtype="float32", features="fused")
DFLASH = HeadConf(block="dflash", features="fused", layers=2, block_size=4)


def test_train_a_dflash_drafter_and_log_its_simulated_acceptance(tiny_smol6, deepspeed_cpu_env, tmp_path):
    convs = conversations(12)
    featurize(convs[:10], tiny_smol6, tmp_path / "train", FEAT)
    featurize(convs[10:], tiny_smol6, tmp_path / "heldout", FEAT)
    cfg = TrainConfig(features_dir=str(tmp_path / "train"), heldout=str(tmp_path / "heldout"),
                      out_dir=str(tmp_path / "run"), deepspeed_config=DS_CPU, max_steps=4, batch_size=2, lr=1e-3,
                      warmup_steps=1, eval_every=2, save_every=4, wandb_mode="disabled", draft_vocab_size=256,
                      noise=0.0, anchors=16, decay_gamma=4.0)
    metrics = train(cfg, tiny_smol6, DFLASH)
    evals = [json.loads(line) for line in (tmp_path / "run" / "eval.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals] == [2, 4]
    assert all(1.0 <= e["heldout/acceptance"] <= 4.0 and {"heldout/loss", "heldout/top1_1", "heldout/top1_3"} <= set(e)
               for e in evals)
    head = load_head(tmp_path / "run" / "head", tiny_smol6)
    assert isinstance(head, DFlashHead) and head.config.mask_token_id == 0  # SmolLM2's <|endoftext|>
    assert (head.config.block_size, head.config.layers, head.config.draft_vocab_size) == (4, 2, 256)
    heldout = read_samples(tmp_path / "heldout", aux=True)
    anchors, accepted = zip(*(block_acceptance(head, s) for s in heldout))
    assert sum(accepted) / sum(anchors) == pytest.approx(metrics["heldout/acceptance"], abs=0.2)  # bfloat16 weights
    card = (tmp_path / "run" / "head" / "README.md").read_text()
    assert "DFlash block drafter, 2 decoder layer(s), blocks of 4 tokens" in card
    assert "held-out simulated acceptance length" in card and "export.format=speculators" in card


def test_chains_give_an_eagle_heads_acceptance_length():
    """Chains tried and hit per depth (a depth tried only after every earlier hit): 10 chains, 6 hit depth 0, 3 of
    them depth 1, 1 depth 2 -> 1 + (6 + 3 + 1) / 10."""
    assert acceptance_of_chains([10, 6, 3], [6, 3, 1]) == pytest.approx(2.0)
    assert acceptance_of_chains([0, 0], [0, 0]) != acceptance_of_chains([0, 0], [0, 0])  # NaN: no chains


@pytest.mark.parametrize("head,cfg,message", [
    (HeadConf(block="dflash", features="fused", mask_token_id=17), {},
     "head.mask_token_id 17 is text to the tokenizer ('!')"),
    (HeadConf(block="dflash", features="fused", mask_token_id=2), {}, "is emitted by the chat template"),
    (HeadConf(block="dflash", features="fused", block_size=1), {}, "head.block_size 1 is invalid"),
    (HeadConf(block="dflash", features="last"), {}, "head.block=dflash reads fused target layers"),
    (HeadConf(block="dflash", features="fused"), {"compile": True}, "train.compile compiles an EAGLE head"),
])
def test_settings_a_drafter_cannot_train_are_one_line(tiny_smol6, head, cfg, message):
    with pytest.raises(EagleError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        build_head_config(tiny_smol6, TrainConfig(**cfg), head)
    assert "\n" not in str(err.value)


def test_a_block_longer_than_the_context_is_one_line(tiny_smol6):
    config = build_head_config(tiny_smol6, TrainConfig(), HeadConf(block="dflash", features="fused", block_size=80))
    with pytest.raises(EagleError, match="head.block_size 80 is above the context: expected at most the features' "
                                         "max_length 64"):
        objective(TrainConfig(), 64, config)
