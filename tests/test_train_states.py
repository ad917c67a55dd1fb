"""train.features=offline|online|cached (eagle_train.features.states): for the same data, seed and settings the three train
the same head. The target is tiny and float32 and offline features are stored in float32, so the states are the same
forward's: the losses agree to float rounding (a batched forward over other rows rounds differently, ~1e-7)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import eagle_train.training.train as train_mod
from eagle_infer.errors import EagleError
from eagle_train.features.featurize import featurize
from eagle_train.features.shards import Manifest
from eagle_train.training.train import HeadConf, TrainConfig, train
from tests.test_train import DS_CPU, FEAT, conversations

STATES = dataclasses.replace(FEAT, store_dtype="float32")
LOSS_TOLERANCE = dict(rel=1e-5, abs=1e-6)


def directories(root: Path, target, fused: bool = False) -> dict[str, Path]:
    """{offline, tokens}: feature directories with the states and token directories, train/ and heldout/ in each."""
    convs, feat = conversations(), dataclasses.replace(STATES, features="fused" if fused else "last")
    out = {}
    for kind, states in (("offline", True), ("tokens", False)):
        featurize(convs[:16], target, root / kind / "train", feat, states=states)
        featurize(convs[16:20], target, root / kind / "heldout", feat, states=states)
        out[kind] = root / kind
    return out


def config(dirs: dict, mode: str, out_dir: Path, **over) -> TrainConfig:
    root = dirs["offline" if mode == "offline" else "tokens"]
    base = dict(features=mode, features_dir=str(root / "train"), heldout=str(root / "heldout"), out_dir=str(out_dir),
                deepspeed_config=DS_CPU, max_steps=8, batch_size=2, lr=1e-3, warmup_steps=2, eval_every=8,
                save_every=4, wandb_mode="disabled", draft_vocab_size=256, autocast="off")
    return TrainConfig(**{**base, **over})


def curve(out_dir: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (out_dir / "train.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def last_dirs(tmp_path_factory, tiny_smol):
    return directories(tmp_path_factory.mktemp("states"), tiny_smol)


@pytest.fixture(scope="module")
def offline_run(last_dirs, tiny_smol, deepspeed_cpu_env, tmp_path_factory):
    """8 steps offline over 2 epochs (8 micro batches of 2 per epoch: max_steps 12 crosses into epoch 2)."""
    out = tmp_path_factory.mktemp("offline")
    metrics = train(config(last_dirs, "offline", out, max_steps=12), tiny_smol)
    return out, metrics


def test_token_directory_holds_no_states(last_dirs):
    tokens, offline = Manifest.load(last_dirs["tokens"] / "train"), Manifest.load(last_dirs["offline"] / "train")
    assert not tokens.states and offline.states
    assert (tokens.conversations, tokens.tokens, tokens.loss_tokens) == (offline.conversations, offline.tokens,
                                                                         offline.loss_tokens)
    size = lambda d: sum(p.stat().st_size for p in (d / "train").glob("shard-*.safetensors"))  # noqa: E731
    assert size(last_dirs["tokens"]) * 20 < size(last_dirs["offline"])


@pytest.mark.parametrize("mode", ["online", "cached"])
def test_online_and_cached_train_what_offline_trains(mode, last_dirs, offline_run, tiny_smol, deepspeed_cpu_env,
                                                     tmp_path):
    """The same losses step by step (12 steps, into the second epoch, where cached reads its cache), the same held-out
    measures; online writes no states, cached writes every training conversation's once."""
    out = tmp_path / mode
    metrics = train(config(last_dirs, mode, out, max_steps=12), tiny_smol)
    assert curve(out) == pytest.approx(curve(offline_run[0]), **LOSS_TOLERANCE)
    assert metrics["heldout/top1"] == pytest.approx(offline_run[1]["heldout/top1"], **LOSS_TOLERANCE)
    cache = out / "states"
    if mode == "online":
        assert not cache.exists()
        return
    manifest = Manifest.load(cache)
    assert manifest.states and manifest.conversations == 16  # epoch 1's 8 micro batches, each conversation once
    assert manifest.dtype == "float32" and manifest.target == tiny_smol.name


def test_cached_resumes_from_its_cache(last_dirs, offline_run, tiny_smol, deepspeed_cpu_env, tmp_path, monkeypatch):
    """A cached run stopped in its first epoch (after the step-4 checkpoint) and rerun: the cache holds the states
    its checkpoint counts, the rest of epoch 1 is computed again, and the losses are the uninterrupted run's."""
    out = tmp_path / "cached"
    real, calls = train_mod.losses, []

    def crash(head, batch, *args, **kwargs):
        if head.training:
            calls.append(1)
            if len(calls) == 6:
                raise RuntimeError("simulated crash")
        return real(head, batch, *args, **kwargs)

    cfg = config(last_dirs, "cached", out, max_steps=12, heldout=None)
    with monkeypatch.context() as m:
        m.setattr(train_mod, "losses", crash)
        with pytest.raises(RuntimeError, match="simulated crash"):
            train(cfg, tiny_smol)
    assert Manifest.load(out / "states").conversations == 8  # the 4 micro batches of the step-4 checkpoint
    train(cfg, tiny_smol)
    assert curve(out) == pytest.approx(curve(offline_run[0]), **LOSS_TOLERANCE)
    assert Manifest.load(out / "states").conversations == 16


# draftable_only off: the random target's argmax is rarely among the data's 256 most frequent tokens, which would
# leave nothing in the loss
FUSED_HEADS = {
    "eagle3": (HeadConf(layers=1, features="fused", block="eagle3"),
               dict(ttt_steps=2, w_reg=0.0, w_cls=1.0, noise=0.0, loss_per="position", max_steps=4, heldout=None)),
    "dflash": (HeadConf(layers=1, features="fused", block="dflash", block_size=4),
               dict(noise=0.0, anchors=8, max_steps=4, heldout=None)),
}


@pytest.mark.parametrize("block", sorted(FUSED_HEADS))
def test_fused_online_trains_what_offline_trains(tiny_smol6, deepspeed_cpu_env, tmp_path, block):
    """EAGLE-3's block and a DFlash drafter over the fused low/middle/high layers: online computes the same three
    layers (and a DFlash step draws the same anchors in either mode)."""
    dirs = directories(tmp_path / "features", tiny_smol6, fused=True)
    head, settings = FUSED_HEADS[block]
    train(config(dirs, "offline", tmp_path / "offline", **settings), tiny_smol6, head)
    train(config(dirs, "online", tmp_path / "online", **settings), tiny_smol6, head)
    assert min(curve(tmp_path / "offline")) > 0
    assert curve(tmp_path / "online") == pytest.approx(curve(tmp_path / "offline"), **LOSS_TOLERANCE)


@pytest.mark.parametrize("mode, kind, needle", [
    ("stream", "offline", "unknown train.features 'stream': expected one of offline, online, cached"),
    ("online", "offline", "train.features=online computes the target's states while training, but"),
    ("offline", "tokens", "holds tokens only (featurized for train.features=online or cached)"),
])
def test_bad_feature_modes(mode, kind, needle, last_dirs, tiny_smol, tmp_path):
    cfg = config(last_dirs, "offline", tmp_path / "out")
    cfg = dataclasses.replace(cfg, features=mode, features_dir=str(last_dirs[kind] / "train"))
    with pytest.raises(EagleError, match=needle.replace("(", r"\(").replace(")", r"\)")) as err:
        train(cfg, tiny_smol)
    assert "\n" not in str(err.value)


def test_online_trains_on_regenerated_answers(tiny_smol, deepspeed_cpu_env, tmp_path):
    """featurize.regenerate writes the target's answers into a token directory as into a feature directory; online
    training reads them (self-written prompts reach featurize as conversations, the same path)."""
    feat = dataclasses.replace(STATES, regenerate=True, regenerate_turns=1, regenerate_max_new_tokens=8)
    manifest = featurize(conversations(8), tiny_smol, tmp_path / "tokens" / "train", feat, states=False)
    assert manifest.regenerate and not manifest.states and (tmp_path / "tokens" / "train" / "regenerated").is_dir()
    cfg = config({"tokens": tmp_path / "tokens"}, "online", tmp_path / "run", heldout=None, max_steps=2)
    assert train(cfg, tiny_smol)["step"] == 2


def test_a_directory_given_as_train_features_is_a_one_line_error(last_dirs):
    """train.features names a mode; a feature directory there (its meaning before the modes) is refused in one
    line pointing to train.features_dir."""
    from eagle_train.features.states import check_mode

    for mode in ("offline", "online", "cached"):
        check_mode(mode)
    with pytest.raises(EagleError, match=r"^unknown train.features '.*/train': expected one of offline, online, "
                                         r"cached \(the feature directory is train.features_dir\)$"):
        check_mode(str(last_dirs["offline"] / "train"))
