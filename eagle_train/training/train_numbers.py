"""The numbers of a TrainConfig checked before anything is featurized or loaded: a negative or zero learning rate,
NaN noise or a zero batch would otherwise train (or crash) without a word."""
from __future__ import annotations

from eagle_infer.errors import check_number
from eagle_infer.errors import EagleError


def check_train_numbers(cfg) -> None:
    """One line naming the first train.* number out of its range (cfg: eagle_train.training.train.TrainConfig)."""
    check_number("train.lr", cfg.lr, 0, 1, low_open=True)
    if len(cfg.betas) != 2:
        raise EagleError(f"train.betas {list(cfg.betas)} is invalid: expected two numbers in [0, 1)")
    for beta in cfg.betas:
        check_number("train.betas", beta, 0, 0.999999)
    check_number("train.weight_decay", cfg.weight_decay, 0)
    check_number("train.warmup_steps", cfg.warmup_steps, 0, integer=True)
    check_number("train.grad_clip", cfg.grad_clip, 0)  # 0: DeepSpeed does not clip
    check_number("train.batch_size", cfg.batch_size, 1, integer=True)
    check_number("train.noise", cfg.noise, 0)
    check_number("train.w_cls", cfg.w_cls, 0)
    check_number("train.w_reg", cfg.w_reg, 0)
    check_number("train.ttt_steps", cfg.ttt_steps, 0, integer=True)
    check_number("train.ttt_decay", cfg.ttt_decay, 0, 1, low_open=True)
    check_number("train.draft_vocab_size", cfg.draft_vocab_size, 0, integer=True)
    check_number("train.eval_every", cfg.eval_every, 1, integer=True)
    check_number("train.save_every", cfg.save_every, 1, integer=True)
    check_number("train.eval_conversations", cfg.eval_conversations, 0, integer=True)
