"""featurize -> train (in-process DeepSpeed on CPU) -> load, resume, and the training pipeline's one-line errors.

The target is a tiny random Llama over the real SmolLM2 vocabulary and chat template (tests/conftest.py), so the
features, loss masks and draft vocabulary go through the same code paths as a real run, in seconds.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

import eagle_train.features.featurize as featurize_mod
import eagle_train.training.train as train_mod
from eagle_infer.models.chat import Message, loss_mask, prompt_ids, render
from eagle_infer.models.chat import stop_ids
from eagle_infer.head.head_checkpoint import load_head
from eagle_infer.config import InferConf
from eagle_infer.decoding.engine import Engine
from eagle_infer.errors import EagleError
from eagle_train.features.featurize import FeaturizeConfig, featurize
from eagle_train.features.shards import Manifest, read_samples, shard_name
from eagle_train.data.stage_times import stage_times
from eagle_train.training.objective import frequent_tokens
from eagle_train.training.train import TrainConfig, train

REPO = Path(__file__).resolve().parent.parent
DS_CPU = str(REPO / "conf" / "deepspeed" / "cpu_fp32.json")
FEAT = FeaturizeConfig(max_length=96, shard_size=8)
N_TRAIN, N_HELDOUT = 20, 4
WORDS = ["red", "green", "blue", "yellow", "black", "white"]


def conversations(n: int = N_TRAIN + N_HELDOUT) -> list[list[Message]]:
    """Short chats whose answers follow two learnable patterns: counting, and repeating a colour word."""
    out = []
    for i in range(n):
        if i % 2 == 0:
            chat = [Message("user", f"Count from {i}."), Message("assistant", " ".join(str(i + j) for j in range(10)))]
        else:
            word = WORDS[i % len(WORDS)]
            chat = [Message("user", f"Repeat {word}."), Message("assistant", " ".join([word] * 10))]
        out.append(chat)
    return out


@pytest.fixture(scope="module")
def features(tmp_path_factory, tiny_smol):
    """(train dir, held-out dir) featurized once for the module."""
    root = tmp_path_factory.mktemp("features")
    convs = conversations()
    featurize(convs[:N_TRAIN], tiny_smol, root / "train", FEAT)
    featurize(convs[N_TRAIN:], tiny_smol, root / "heldout", FEAT)
    return root / "train", root / "heldout"


def train_config(feats, out_dir, **over) -> TrainConfig:
    train_dir, heldout_dir = feats
    base = dict(
        features_dir=str(train_dir), heldout=str(heldout_dir), out_dir=str(out_dir), deepspeed_config=DS_CPU,
        max_steps=30, batch_size=2, lr=1e-3, warmup_steps=2, eval_every=10, save_every=10, wandb_mode="disabled",
        draft_vocab_size=512,
    )
    base.update(over)
    return TrainConfig(**base)


def seen(out_dir) -> list[dict]:
    return [json.loads(line) for line in (Path(out_dir) / "seen-rank0.jsonl").read_text().splitlines()]


def head_weights(out_dir) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(Path(out_dir) / "head" / "model.safetensors"))


def assert_same_weights(a, b):
    """Equal up to float noise: CPU kernels may round differently from one call to the next (seen: 4e-6), while a
    resume that lost the optimizer or LR-schedule state, or a batch, is off by orders of magnitude more."""
    wa, wb = head_weights(a), head_weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wa[k].float(), wb[k].float(), atol=2e-4, rtol=0, msg=lambda m, k=k: f"{k}: {m}")


# --- featurize -----------------------------------------------------------------------------------------------------


def counts(manifest: Manifest) -> Manifest:
    """The manifest without its shards' times and machines (a redone shard takes another time)."""
    timing = ("forward_s", "machine", "threads")
    return dataclasses.replace(manifest, shards=[{k: v for k, v in s.items() if k not in timing} for s in manifest.shards])


def test_featurize_manifest_and_rerun(tmp_path, tiny_smol, monkeypatch):
    convs = conversations()[:N_TRAIN]
    out = tmp_path / "train"
    manifest = featurize(convs, tiny_smol, out, FEAT)

    encoded = [loss_mask(tiny_smol.tokenizer, render(c, tiny_smol.tokenizer, "tokenizer", False), None) for c in convs]
    assert all(len(ids) <= FEAT.max_length for ids, _ in encoded)  # nothing truncated: counts are exact
    assert manifest.conversations == N_TRAIN and manifest.skipped == {}
    assert manifest.tokens == sum(len(ids) for ids, _ in encoded)
    assert manifest.loss_tokens == sum(sum(m) for _, m in encoded)
    assert [(s["file"], s["conversations"]) for s in manifest.shards] == [
        (shard_name(0), 8), (shard_name(1), 8), (shard_name(2), 4)
    ]
    assert (manifest.target, manifest.hidden_size, manifest.vocab_size) == ("tiny-smol", 64, len(tiny_smol.tokenizer))
    assert Manifest.load(out) == manifest
    assert all(s["forward_s"] >= 0 and s["machine"] and s["threads"] >= 1 for s in manifest.shards)
    times = stage_times(tmp_path)
    assert [(t.stage, t.shards, t.units) for t in times] == [("forward", 3, manifest.tokens)]

    samples = read_samples(out)
    assert len(samples) == N_TRAIN
    for s, (ids, mask) in zip(samples, encoded):  # shard order = conversation order
        assert s.input_ids.tolist() == ids and s.loss_mask.tolist() == mask
        assert s.hidden.shape == (len(ids), 64) and s.hidden.dtype == torch.bfloat16
    # Batched, right-padded features equal a lone forward of the same conversation (padding does not leak in).
    with torch.inference_mode():
        alone = tiny_smol.model.model(input_ids=samples[5].input_ids[None]).last_hidden_state[0]
    torch.testing.assert_close(samples[5].hidden.float(), alone.to(torch.bfloat16).float())

    calls = []
    real = featurize_mod.target_features
    monkeypatch.setattr(featurize_mod, "target_features", lambda t, seqs, layers: calls.append(len(seqs)) or real(t, seqs, layers))
    mtimes = {p.name: p.stat().st_mtime_ns for p in out.glob("shard-*")}
    assert featurize(convs, tiny_smol, out, FEAT) == manifest
    assert calls == []  # every shard finished: no target forward at all
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("shard-*")} == mtimes

    (out / shard_name(1)).unlink()  # as if interrupted while writing shard 1
    assert counts(featurize(convs, tiny_smol, out, FEAT)) == counts(manifest)
    assert sum(calls) == 8  # only shard 1's conversations went through the target again
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("shard-*") if not p.name.startswith("shard-00001")} == {
        k: v for k, v in mtimes.items() if not k.startswith("shard-00001")
    }
    assert [s.input_ids.tolist() for s in read_samples(out)] == [s.input_ids.tolist() for s in samples]

    shard = out / shard_name(2)
    shard.write_bytes(shard.read_bytes()[:100])  # truncated (a copy cut short, a full disk)
    with pytest.raises(EagleError, match=f"^feature shard '{shard}' cannot be read .*featurize again"):
        read_samples(out)
    shard.unlink()  # as the error says: featurize redoes that shard alone
    assert counts(featurize(convs, tiny_smol, out, FEAT)) == counts(manifest)
    assert [s.input_ids.tolist() for s in read_samples(out)] == [s.input_ids.tolist() for s in samples]

    with pytest.raises(EagleError, match="max_length=96, not 64"):
        featurize(convs, tiny_smol, out, dataclasses.replace(FEAT, max_length=64))


def test_featurize_rerun_with_other_conversations(tmp_path, tiny_smol):
    """A rerun into the same directory with more conversations (e.g. data.conversations raised) must either refuse
    or featurize them, never keep stale shards silently (the manifest's fingerprint makes it refuse)."""
    convs = conversations()
    out = tmp_path / "train"
    featurize(convs[:20], tiny_smol, out, FEAT)
    try:
        manifest = featurize(convs, tiny_smol, out, FEAT)
    except EagleError:
        return
    assert manifest.conversations == 24


# --- train ---------------------------------------------------------------------------------------------------------


def test_featurize_train_load_roundtrip(features, tiny_smol, deepspeed_cpu_env, tmp_path, monkeypatch):
    train_losses = []
    real_losses = train_mod.losses

    def recording(head, batch, *args, **kwargs):
        out = real_losses(head, batch, *args, **kwargs)
        if head.training:
            train_losses.append(float(out["loss"].detach()))
        return out

    monkeypatch.setattr(train_mod, "losses", recording)
    out_dir = tmp_path / "run"
    metrics = train(train_config(features, out_dir), tiny_smol)

    assert metrics["step"] == 30 and len(train_losses) == 30
    curve = [json.loads(line) for line in (out_dir / "train.jsonl").read_text().splitlines()]
    assert [c["step"] for c in curve] == list(range(1, 31)) and [c["loss"] for c in curve] == pytest.approx(train_losses)
    evals = [json.loads(line) for line in (out_dir / "eval.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals] == [10, 20, 30]
    assert evals[-1]["heldout/loss"] < evals[0]["heldout/loss"]
    assert evals[-1]["heldout/reg_loss"] < evals[0]["heldout/reg_loss"]
    assert sum(train_losses[-5:]) / 5 < sum(train_losses[:5]) / 5
    assert len(seen(out_dir)) == 30  # 10 micro batches per epoch, 3 epochs, each batch once per epoch
    for epoch in range(3):
        batches = [e["samples"] for e in seen(out_dir) if e["epoch"] == epoch]
        assert sorted(i for b in batches for i in b) == list(range(N_TRAIN))

    head = load_head(out_dir / "head", tiny_smol)
    assert head.config.target == "tiny-smol" and head.config.draft_vocab_size == 512
    assert head.draft_vocab.tolist() == frequent_tokens(read_samples(features[0]), 512).tolist()
    card = (out_dir / "head" / "README.md").read_text()  # the model card, from the run's own summary
    summary = json.loads((out_dir / "summary.json").read_text())
    assert "# EAGLE draft head for tiny-smol" in card and "| chat template | tokenizer |" in card
    assert f"{summary['loss_tokens']} loss tokens" in card and "30 steps (train.epochs 1, train.max_steps 30)" in card
    assert "features computed in float32" in card
    assert f"| held-out top-1 | {summary['heldout/top1']:.3f} |" in card and "τ | not measured yet" in card

    prompt = prompt_ids(tiny_smol.tokenizer, [Message("user", "Count from 3.")], tiny_smol.template)
    stops = stop_ids(tiny_smol)
    vanilla = Engine(tiny_smol, None, InferConf(method="vanilla")).generate(prompt, 24, stop_ids=stops)
    eagle = Engine(tiny_smol, head, InferConf(budget="fixed", method="eagle2")).generate(prompt, 24, stop_ids=stops)
    assert eagle.tokens == vanilla.tokens
    assert len(vanilla.tokens) > 1 and eagle.cycles


# Resume runs: noise 0 (the noise RNG is reseeded, not restored, on resume) and a warmup that spans the checkpoints,
# so that a lost LR-schedule state would show in the weights.
# float32 matmuls (no bfloat16 autocast): weights must match the uninterrupted run's to float noise.
RESUME = dict(heldout=None, save_every=5, noise=0.0, warmup_steps=8, autocast="off")


@pytest.fixture(scope="module")
def reference_run(features, tiny_smol, deepspeed_cpu_env, tmp_path_factory):
    """An uninterrupted 20-step run."""
    out_dir = tmp_path_factory.mktemp("reference")
    train(train_config(features, out_dir, **RESUME, max_steps=20), tiny_smol)
    return out_dir


def test_resume_after_finished_run(features, tiny_smol, deepspeed_cpu_env, reference_run, tmp_path):
    out_dir = tmp_path / "resumed"
    cfg = train_config(features, out_dir, **RESUME, max_steps=10)
    train(cfg, tiny_smol)
    assert len(seen(out_dir)) == 10
    metrics = train(dataclasses.replace(cfg, max_steps=20), tiny_smol)
    assert metrics["step"] == 20
    assert (out_dir / "checkpoints" / "latest").read_text().strip() == "step20"
    # train.keep_checkpoints=2: only the newest two of the four saved (steps 5..20) stay on disk
    assert sorted(p.name for p in (out_dir / "checkpoints").glob("step*")) == ["step15", "step20"]
    # 10 + 10 micro batches, crossing the epoch boundary at the checkpoint: same order as the uninterrupted run.
    assert seen(out_dir) == seen(reference_run)
    assert [(e["epoch"], e["position"]) for e in seen(out_dir)] == [(e, p) for e in range(2) for p in range(10)]
    assert_same_weights(out_dir, reference_run)  # optimizer and LR schedule state came back too

    before = seen(out_dir)
    assert "step" not in train(dataclasses.replace(cfg, max_steps=20), tiny_smol)  # nothing left to do
    assert seen(out_dir) == before


def test_resume_after_crash(features, tiny_smol, deepspeed_cpu_env, reference_run, tmp_path, monkeypatch):
    """A crash in step 8 with save_every=5 resumes from the step-5 checkpoint and redoes micro batches 5..6; a crash
    in step 3, before the first checkpoint, starts over. Either way the loss curve and the seen log are cut back to
    the checkpoint (nothing stale, nothing repeated) and equal the uninterrupted run's."""
    real_losses = train_mod.losses

    def crash_at(n):
        calls = []

        def losses(head, batch, *args, **kwargs):
            if head.training:
                calls.append(1)
                if len(calls) == n:
                    raise RuntimeError(f"simulated crash in step {n}")
            return real_losses(head, batch, *args, **kwargs)
        return losses

    for crash_step, checkpoint in ((8, "step5"), (3, None)):
        out_dir = tmp_path / f"crashed-{crash_step}"
        cfg = train_config(features, out_dir, **RESUME, max_steps=20)
        with monkeypatch.context() as m:
            m.setattr(train_mod, "losses", crash_at(crash_step))
            with pytest.raises(RuntimeError, match="simulated crash"):
                train(cfg, tiny_smol)
        latest = out_dir / "checkpoints" / "latest"
        assert (latest.read_text().strip() if latest.exists() else None) == checkpoint
        assert [e["position"] for e in seen(out_dir)] == list(range(crash_step - 1))  # steps before the crash

        metrics = train(cfg, tiny_smol)
        assert metrics["step"] == 20
        curve = [json.loads(line)["step"] for line in (out_dir / "train.jsonl").read_text().splitlines()]
        assert curve == list(range(1, 21)), crash_step  # the crashed run's steps past the checkpoint were cut
        assert seen(out_dir) == seen(reference_run), crash_step
        assert_same_weights(out_dir, reference_run)


def ds_engines(monkeypatch) -> list:
    """The DeepSpeed engines that train() creates from now on, in order (deepspeed.initialize is wrapped)."""
    import deepspeed

    engines, real = [], deepspeed.initialize

    def initialize(*args, **kwargs):
        out = real(*args, **kwargs)
        engines.append(out[0])
        return out

    monkeypatch.setattr(deepspeed, "initialize", initialize)
    return engines


def test_gradient_accumulation_steps_match_optimizer_steps(features, tiny_smol, deepspeed_cpu_env, tmp_path,
                                                           monkeypatch):
    """With gradient_accumulation_steps=2 (conf/deepspeed/zero2_bf16.json) and an odd number of micro batches per
    epoch, the counted steps must equal DeepSpeed's optimizer steps (epochs are cut to a multiple of the
    accumulation), so checkpoints never fall mid-accumulation and max_steps is exact."""
    engines = ds_engines(monkeypatch)
    ds = tmp_path / "accum2.json"
    ds.write_text(json.dumps({"gradient_accumulation_steps": 2, "zero_optimization": {"stage": 0}}))
    # 20 conversations, micro batch 4: 5 micro batches per epoch.
    cfg = train_config(features, tmp_path / "run", **RESUME, max_steps=6, batch_size=4, deepspeed_config=str(ds))
    metrics = train(cfg, tiny_smol)
    assert metrics["step"] == 6
    assert (engines[-1].global_steps, engines[-1].micro_steps) == (6, 12)


@pytest.mark.parametrize("schedule", ["constant", "linear", "cosine"])
def test_lr_schedule_after_warmup(features, tiny_smol, deepspeed_cpu_env, tmp_path, monkeypatch, schedule):
    """Warmup reaches cfg.lr; then constant stays there, linear and cosine decay to 0 at the last step."""
    engines = ds_engines(monkeypatch)
    lrs = []
    real_losses = train_mod.losses

    def record_lr(head, batch, *args, **kwargs):
        if head.training:
            lrs.append(engines[-1].get_lr()[0])
        return real_losses(head, batch, *args, **kwargs)

    monkeypatch.setattr(train_mod, "losses", record_lr)
    train(train_config(features, tmp_path / "run", max_steps=12, warmup_steps=2, lr_schedule=schedule, heldout=None), tiny_smol)
    assert len(lrs) == 12 and max(lrs) == pytest.approx(1e-3, rel=0.05)
    after = lrs[lrs.index(max(lrs)):]  # DeepSpeed's schedule lags the optimizer step by one
    assert len(after) >= 9
    if schedule == "constant":
        assert after == pytest.approx([1e-3] * len(after))
    else:
        assert all(a > b for a, b in zip(after, after[1:])) and after[-1] < 0.25e-3


def test_extra_feature_directories_train_after_the_first(features, tiny_smol, deepspeed_cpu_env, tmp_path):
    """train.extra_features: a second part of the data (here the held-out directory) is read after `features`,
    every conversation of both seen once per epoch."""
    train_dir, heldout_dir = features
    n_extra = Manifest.load(heldout_dir).conversations
    out_dir = tmp_path / "run"
    train(train_config(features, out_dir, extra_features=[str(heldout_dir)], heldout=None, max_steps=None, epochs=1,
                       eval_every=1000), tiny_smol)
    assert sorted(i for e in seen(out_dir) for i in e["samples"]) == list(range(N_TRAIN + n_extra))


def test_extra_features_made_otherwise_are_refused(features, tiny_smol, tmp_path):
    """One line naming the directory and the value that differs; nothing is trained."""
    other = tmp_path / "other"
    shutil.copytree(features[1], other)
    raw = json.loads((other / "manifest.json").read_text())
    (other / "manifest.json").write_text(json.dumps({**raw, "max_length": raw["max_length"] + 1}))
    with pytest.raises(EagleError) as err:
        train(train_config(features, tmp_path / "run", extra_features=[str(other)]), tiny_smol)
    assert str(other) in str(err.value) and "max_length" in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "run").exists()


# --- refusals and bad input ----------------------------------------------------------------------------------------


def test_features_of_another_target_are_refused(features, tiny_smol):
    train_dir = features[0]
    manifest = Manifest.load(train_dir)
    manifest.check_target(tiny_smol, train_dir)  # its own target passes
    other = dataclasses.replace(tiny_smol, name="tiny-other")
    with pytest.raises(EagleError) as err:
        manifest.check_target(other, train_dir)
    assert "'tiny-smol'" in str(err.value) and "'tiny-other'" in str(err.value) and "\n" not in str(err.value)
    # train refuses before touching DeepSpeed.
    with pytest.raises(EagleError, match="tiny-other"):
        train(train_config(features, "/nonexistent/never-created"), other)
    assert not os.path.exists("/nonexistent/never-created")


def test_features_of_another_hidden_size_are_refused(features, smol_tok):
    from tests.conftest import make_tiny_smol

    narrow = make_tiny_smol(smol_tok, hidden=32)  # same name, other shape
    with pytest.raises(EagleError, match="hidden size 64, but the target is 32"):
        Manifest.load(features[0]).check_target(narrow, features[0])


@pytest.mark.parametrize("content", [None, "{not json", "[1, 2]"], ids=["missing", "invalid-json", "not-object"])
def test_bad_deepspeed_config(features, tiny_smol, deepspeed_cpu_env, tmp_path, content):
    path = tmp_path / "ds.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(EagleError) as err:
        train(train_config(features, tmp_path / "out", deepspeed_config=str(path)), tiny_smol)
    message = str(err.value)
    assert "\n" not in message and str(path) in message


def test_optimizer_is_torch_adamw_on_every_device(monkeypatch, tmp_path):
    """DeepSpeed is told to use torch's AdamW, with CUDA or without (its FusedAdam would JIT-compile an extension
    first on every fresh machine: a CUDA one, or a C++ one on a CPU)."""
    cfg = train_mod.TrainConfig(features_dir=str(tmp_path), out_dir=str(tmp_path / "out"))
    for cuda in (False, True):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
        opt = train_mod.read_ds_config("conf/deepspeed/cpu_fp32.json", cfg, 10)["optimizer"]
        assert opt["type"] == "AdamW" and opt["params"]["torch_adam"] is True


def test_unknown_lr_schedule(features, tiny_smol, deepspeed_cpu_env, tmp_path):
    with pytest.raises(EagleError, match="unknown train.lr_schedule 'step': expected constant, linear or cosine"):
        train(train_config(features, tmp_path / "out", lr_schedule="step"), tiny_smol)


def test_featurize_nothing(tiny_smol, tmp_path):
    with pytest.raises(EagleError, match="no usable conversation"):
        featurize([], tiny_smol, tmp_path / "f", FEAT)
    with pytest.raises(EagleError, match="unknown overlong policy"):
        featurize(conversations(2), tiny_smol, tmp_path / "f", dataclasses.replace(FEAT, overlong="drop"))


def test_featurize_all_skipped(tiny_smol, tmp_path):
    with pytest.raises(EagleError, match="all were skipped.*overlong"):
        featurize(conversations(3), tiny_smol, tmp_path / "f", dataclasses.replace(FEAT, max_length=8, overlong="skip"))


def test_feature_dir_without_manifest(features, tiny_smol, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    for call in (lambda: Manifest.load(empty), lambda: read_samples(empty),
                 lambda: train(train_config(features, tmp_path / "out", features_dir=str(empty)), tiny_smol),
                 lambda: train(train_config(features, tmp_path / "out", heldout=str(empty)), tiny_smol)):
        with pytest.raises(EagleError, match="has no manifest.json: run featurize first"):
            call()
    copy = tmp_path / "copy"
    shutil.copytree(features[0], copy)
    for shard in copy.glob("shard-*"):
        shard.unlink()
    manifest = Manifest.load(copy)
    manifest.shards = [dict(s, conversations=0) for s in manifest.shards]
    manifest.save(copy)
    with pytest.raises(EagleError, match="holds no conversations"):
        read_samples(copy)


def test_role_content_conversations_featurize(tiny_smol, tmp_path):
    """An UltraChat-style file (role/content `messages`) is featurized as ShareGPT is: the assistant turns are the
    loss tokens, the conversations counted in the manifest."""
    from eagle_train.data.conversations import load_conversations
    from tests.test_conversations import ULTRACHAT

    path = tmp_path / "ultrachat.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ULTRACHAT))
    convs, _ = load_conversations(str(path))
    manifest = featurize(convs, tiny_smol, tmp_path / "features", FEAT)
    encoded = [loss_mask(tiny_smol.tokenizer, render(c, tiny_smol.tokenizer, "tokenizer", False), None) for c in convs]
    assert manifest.conversations == 3 and manifest.loss_tokens == sum(sum(m) for _, m in encoded) > 0
    assert [s.input_ids.tolist() for s in read_samples(tmp_path / "features")] == [ids for ids, _ in encoded]


def test_training_samples_in_equal_shares(monkeypatch):
    """train.max_loss_tokens over two directories: in order (the first directory first), or with equal_shares the
    first half of the loss tokens of each; equal_shares without a cap is a one-line error."""
    from eagle_train.features.shards import Sample

    def fake(directory, aux=True):  # 4 conversations of 10 loss tokens each (loss_mask[2:] counts)
        return [Sample(torch.tensor([i] * 12), torch.ones(12), torch.zeros(12, 2)) for i in range(4)] if directory == "a" \
            else [Sample(torch.tensor([9] * 12), torch.ones(12), torch.zeros(12, 2)) for _ in range(4)]

    monkeypatch.setattr(train_mod, "read_samples", fake)
    cfg = TrainConfig(features_dir="a", extra_features=["b"], max_loss_tokens=40)
    assert [int(s.input_ids[0]) for s in train_mod.training_samples(cfg, False)] == [0, 1, 2, 3]
    shares = train_mod.training_samples(dataclasses.replace(cfg, equal_shares=True), False)
    assert [int(s.input_ids[0]) for s in shares] == [0, 1, 9, 9]
    with pytest.raises(EagleError, match="train.equal_shares splits train.max_loss_tokens"):
        dataclasses.replace(cfg, equal_shares=True, max_loss_tokens=None).check()


def test_stale_extension_build_locks_are_removed_fresh_ones_kept(tmp_path, monkeypatch):
    """A killed DeepSpeed extension build leaves its lock, and torch waits for it for ever: the suite's first process
    removes locks older than a build takes, and leaves a build in progress alone."""
    from tests.conftest import STALE_LOCK_S, remove_stale_build_locks

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    old, fresh = tmp_path / "py311_cpu" / "fused_adam" / "lock", tmp_path / "py311_cpu" / "shm_comm" / "lock"
    for lock in (old, fresh):
        lock.parent.mkdir(parents=True)
        lock.touch()
    now = fresh.stat().st_mtime + 60
    os.utime(old, (now - STALE_LOCK_S - 1, now - STALE_LOCK_S - 1))
    assert remove_stale_build_locks(now) == [old]
    assert not old.exists() and fresh.exists()
