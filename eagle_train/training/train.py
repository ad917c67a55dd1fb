"""DeepSpeed training of the EAGLE draft head on feature shards; resumable, validated, W&B-logged.

Run under the `deepspeed` launcher (gloo on CPU with DS_ACCELERATOR=cpu, nccl on GPU). The data order is a
fixed function of (seed, epoch), so a resumed run continues at the exact batch where the checkpoint was taken:
no batch is lost or repeated.
"""
from __future__ import annotations

import json
import logging
import math
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

import torch

from eagle_infer.errors import missing_extra
from eagle_infer.paths import REPO
from eagle_infer.head.blocks import build_head
from eagle_infer.head.draft_head import DraftHeadConfig, eagle3_layers
from eagle_infer.head.head_card import machine as card_machine
from eagle_infer.head.head_card import target_revision, write_card
from eagle_infer.head.mask_token import check_mask_token, default_mask_token
from eagle_infer.errors import EagleError
from eagle_infer.platform import resolve_dtype

from .block_objective import BlockObjective, acceptance_of_chains, block_acceptance, block_losses
from ..features.disk import ID_BYTES, check_disk
from ..features.shards import Manifest, read_samples
from .objective import Objective, chain_acceptance, collate, compile_layers, frequent_tokens, losses, with_target_top
from ..features.states import CACHE_DIR, check_directory, check_mode, read_cached, states_in_batches, with_states, write_cached
from .train_numbers import check_train_numbers

log = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    # where the target's states come from (eagle_train.features.states): offline (features_dir holds them) | online (the
    # target computes each micro batch's, features_dir holds tokens only) | cached (online in epoch 1, kept after)
    features: str = "offline"
    features_dir: str = "runs/features/train"  # a feature directory (offline) or a token directory (online, cached)
    extra_features: list[str] = field(default_factory=list)  # more, of the same target and settings, read after it
    heldout: Optional[str] = "runs/features/heldout"
    out_dir: str = "runs/head"
    deepspeed_config: str = "conf/deepspeed/cpu_fp32.json"
    input_mode: str = "feature+shifted_token"
    epochs: int = 1
    max_conversations: Optional[int] = None  # train on the first N conversations of the features only
    max_loss_tokens: Optional[int] = None  # train on the first conversations holding this many loss tokens
    equal_shares: bool = False  # max_loss_tokens split equally: the first max_loss_tokens / n of each of n directories
    autocast: str = "auto"  # bfloat16 autocast of float32 training: auto (where bfloat16 matmuls are native) | on | off
    # the head's decoder layers and each step's loss through torch.compile (inductor, dynamic shapes): the same
    # losses to rounding, ~1.3x on a CPU for 20-35 s of warm-up (docs/training.md); eager where compiling fails
    compile: bool = False
    max_steps: Optional[int] = None  # optimizer steps; None = epochs
    batch_size: int = 4  # conversations per micro batch
    lr: float = 3e-5
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    weight_decay: float = 0.0
    warmup_steps: int = 100
    lr_schedule: str = "constant"  # after warmup: constant | linear (to 0, EAGLE-1's) | cosine (to 0)
    grad_clip: float = 0.5
    noise: float = 0.1  # U(-noise, noise) on input features
    draft_vocab_size: int = 0  # 0 = full vocabulary; else the most frequent training tokens (EAGLE-3 style)
    w_cls: float = 0.1
    w_reg: float = 1.0  # feature-regression weight (EAGLE-1/2: 1; EAGLE-3 drops it: 0)
    ttt_steps: int = 0  # training-time test: extra unrolled draft steps (EAGLE-3), 0 = off
    ttt_decay: float = 0.8  # step k's loss weight is ttt_decay ** k
    loss_per: str = "loss_token"  # each step's sum / its loss tokens (EAGLE-1/2) | position (B x T: EAGLE-3's trainer)
    draftable_only: bool = False  # count only positions whose target argmax is a draft token (EAGLE-3's trainer)
    # block drafters (head.block=dflash; eagle_train.training.block_objective): blocks sampled a row each step, and each
    # block slot's weight: decay exp(-(j - 1) / decay_gamma) (DFlash: 7 for blocks of 16, 4 for 8) | dpace (D-PACE's
    # detached acceptance weights, smoothed by dpace_alpha)
    anchors: int = 512
    decay_gamma: float = 7.0
    position_weights: str = "decay"
    dpace_alpha: float = 0.5
    eval_every: int = 100
    save_every: int = 200
    keep_checkpoints: int = 2  # the newest checkpoints kept (resuming reads the latest); 0 = keep all
    eval_conversations: int = 32
    seed: int = 0
    wandb_mode: str = "offline"  # offline | online | disabled
    wandb_project: str = "eagle-toolkit"

    def check(self) -> None:
        """One-line errors for settings that would train nothing (checked before any featurizing or loading)."""
        check_train_numbers(self)
        if self.max_steps is not None and self.max_steps < 1:
            raise EagleError(f"train.max_steps {self.max_steps} is invalid: expected >= 1 (or null: train.epochs)")
        if self.max_steps is None and self.epochs < 1:
            raise EagleError(f"train.epochs {self.epochs} is invalid: expected >= 1 (or set train.max_steps)")
        if self.keep_checkpoints < 0:
            raise EagleError(f"train.keep_checkpoints {self.keep_checkpoints} is invalid: expected >= 1, or 0 to keep "
                             "every checkpoint")
        if self.equal_shares and (self.max_loss_tokens is None or self.max_conversations is not None):
            raise EagleError("train.equal_shares splits train.max_loss_tokens over the feature directories: expected "
                             f"max_loss_tokens set and max_conversations null, got {self.max_loss_tokens} and "
                             f"{self.max_conversations}")


@dataclass
class HeadConf:
    """The head's shape: block ("eagle": fc + the target's decoder layer(s), the LM head borrowed from the target;
    "eagle3": EAGLE-3's layer, with its own norm and LM head over the draft vocabulary), decoder layers (1 = EAGLE's
    single layer; eagle3: 1) and input features ("last": the target's post-norm last hidden state; "fused": EAGLE-3's
    low/middle/high layer outputs, needs featurize.features=fused). fc_bias: whether the EAGLE block's fc has a bias
    (EAGLE's has; vLLM's EAGLE-1 drafter has none: false trains a head it serves)."""

    layers: int = 1
    features: str = "last"
    block: str = "eagle"
    fc_bias: bool = True
    # EAGLE-3.1 (block=eagle3, as speculators defines them): an RMSNorm of each fused layer before the fusion, and
    # the final norm's output as the predicted feature fed to the next step
    fc_norm: bool = False
    norm_output: bool = False
    # fused heads: the target's decoder layers read (0-based outputs; z-lab's target_layer_ids); null: EAGLE-3's
    # low/middle/high layers (speculators' default for EAGLE-3 and DFlash alike)
    feature_layers: Optional[list[int]] = None
    # block drafters (block=dflash, eagle_infer.head.dflash_head): tokens a block, the mask token (null: the target's
    # default, eagle_infer.head.mask_token), the context window (0: all) and attention inside the block
    block_size: int = 8
    mask_token_id: Optional[int] = None
    sliding_window: int = 0
    block_attention: str = "bidirectional"


def build_head_config(target, cfg: TrainConfig, head: HeadConf) -> DraftHeadConfig:
    """The DraftHeadConfig for training `head` on `target`; bad settings are one-line errors."""
    if head.features not in ("last", "fused"):
        raise EagleError(f"unknown head.features {head.features!r}: expected last or fused")
    if head.layers < 1:
        raise EagleError(f"head.layers {head.layers} is invalid: expected >= 1")
    if head.block == "eagle3" and head.features != "fused":
        raise EagleError(f"head.block=eagle3 reads EAGLE-3's fused low/middle/high layers: expected head.features=fused, "
                         f"got {head.features!r}")
    if head.block == "eagle3" and cfg.ttt_steps < 0:
        raise EagleError(f"train.ttt_steps {cfg.ttt_steps} gives EAGLE-3's block K = {cfg.ttt_steps + 1} unrolled steps: "
                         "expected K >= 1 (ttt_steps >= 0; the reference trains K = 7, ttt_steps=6)")
    if cfg.draft_vocab_size > target.vocab_size:
        raise EagleError(f"train.draft_vocab_size {cfg.draft_vocab_size} is larger than the target's vocabulary of "
                         f"{target.vocab_size}: expected at most {target.vocab_size} (0 = the full vocabulary)")
    config = DraftHeadConfig.of_target(target, cfg.input_mode)
    config.draft_vocab_size, config.layers = cfg.draft_vocab_size, head.layers
    if head.features == "fused":
        config.feature_layers = list(head.feature_layers or eagle3_layers(target.config.num_hidden_layers))
    config.block, config.fc_bias = head.block, head.fc_bias
    config.fc_norm, config.norm_output = head.fc_norm, head.norm_output
    if head.block == "dflash":
        config.block_size, config.sliding_window, config.block_attention = (head.block_size, head.sliding_window,
                                                                           head.block_attention)
        config.mask_token_id = default_mask_token(target) if head.mask_token_id is None else head.mask_token_id
        config.check()
        check_mask_token(target, config.mask_token_id)
        if cfg.compile:
            raise EagleError("train.compile compiles an EAGLE head's decoder layers: expected train.compile=false "
                             "with head.block=dflash")
    config.check()
    if head.block == "eagle3" and (cfg.w_reg != 0 or not cfg.draft_vocab_size):
        raise EagleError(f"head.block=eagle3 predicts no target feature and drafts from its own LM head over a draft "
                         f"vocabulary: expected train.w_reg=0 and train.draft_vocab_size > 0, got {cfg.w_reg} and "
                         f"{cfg.draft_vocab_size}")
    return config


def objective(cfg: TrainConfig, max_length: int, head: DraftHeadConfig | None = None) -> Objective | BlockObjective:
    """The training objective of `head` (a block drafter's, or EAGLE's) for sequences of max_length tokens."""
    if head is not None and head.block == "dflash":
        if head.block_size > max_length:
            raise EagleError(f"head.block_size {head.block_size} is above the context: expected at most the "
                             f"features' max_length {max_length}")
        return BlockObjective(cfg.anchors, cfg.decay_gamma, cfg.position_weights, cfg.dpace_alpha)
    if not 0 <= cfg.ttt_steps < max_length:
        raise EagleError(f"train.ttt_steps {cfg.ttt_steps} is invalid: expected 0 <= ttt_steps < max_length {max_length}")
    return Objective(cfg.w_cls, cfg.w_reg, cfg.ttt_steps, cfg.ttt_decay, cfg.loss_per, cfg.draftable_only,
                     compiled=cfg.compile)


def first_loss_tokens(samples: list, limit: Optional[int]) -> list:
    """The shortest prefix of `samples` (in feature order) holding at least `limit` loss tokens (all when None)."""
    if limit is None:
        return samples
    total = 0
    for n, s in enumerate(samples, 1):
        total += int(s.loss_mask[2:].sum())
        if total >= limit:
            return samples[:n]
    raise EagleError(f"train.max_loss_tokens {limit} exceeds the {total} loss tokens of the features: featurize more")


def training_samples(cfg: TrainConfig, fused: bool) -> list:
    """What a run trains on: the samples of train.features_dir then of each extra directory, cut to
    max_conversations and max_loss_tokens; with equal_shares the first max_loss_tokens / n loss tokens of each of
    the n directories."""
    directories = [cfg.features_dir, *cfg.extra_features]
    if cfg.equal_shares:
        share = cfg.max_loss_tokens // len(directories)
        return [s for d in directories for s in first_loss_tokens(read_samples(d, aux=fused), share)]
    everything = [s for d in directories for s in read_samples(d, aux=fused)]
    return first_loss_tokens(everything[: cfg.max_conversations], cfg.max_loss_tokens)


def new_head(hconf: DraftHeadConfig, target, cfg: TrainConfig, samples: list):
    """The untrained head a run starts from (the same for a seed): its draft vocabulary the train.draft_vocab_size
    most frequent training tokens; EAGLE-3's block's norm and LM head start as the target's."""
    torch.manual_seed(cfg.seed)
    head = build_head(hconf, target)
    if cfg.draft_vocab_size:
        head.set_draft_vocab(frequent_tokens(samples, cfg.draft_vocab_size))
        if hconf.block == "eagle3":
            head.start_from_target()
    return head


def prune_checkpoints(ckpt_dir: Path, keep: int) -> None:
    """Delete all but the newest `keep` checkpoints (DeepSpeed tags step<N> under ckpt_dir); keep=0 keeps all."""
    tags = sorted((p for p in ckpt_dir.glob("step*") if p.is_dir() and p.name[4:].isdigit()),
                  key=lambda p: int(p.name[4:]))
    for old in tags[:-keep] if keep else []:
        shutil.rmtree(old)


def use_autocast(mode: str, dtype: torch.dtype, device: torch.device) -> bool:
    """Whether float32 training runs its matmuls in bfloat16 (autocast; the weights and optimizer stay float32)."""
    if mode not in ("auto", "on", "off"):
        raise EagleError(f"unknown train.autocast {mode!r}: expected auto, on or off")
    if dtype != torch.float32 or mode == "off":
        return False
    return mode == "on" or resolve_dtype("auto", device) == torch.bfloat16


def lr_scheduler(cfg: TrainConfig, total_steps: int) -> dict:
    """DeepSpeed's scheduler block: linear warmup to cfg.lr over warmup_steps, then cfg.lr_schedule."""
    warmup = max(1, min(cfg.warmup_steps, total_steps))
    if cfg.lr_schedule == "constant":
        return {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": cfg.lr, "warmup_num_steps": warmup, "warmup_type": "linear"}}
    if cfg.lr_schedule == "linear":
        return {"type": "WarmupDecayLR", "params": {"total_num_steps": max(total_steps, warmup + 1), "warmup_min_lr": 0.0, "warmup_max_lr": cfg.lr,
                                                    "warmup_num_steps": warmup, "warmup_type": "linear"}}
    if cfg.lr_schedule == "cosine":
        return {"type": "WarmupCosineLR", "params": {"total_num_steps": max(total_steps, warmup + 1), "warmup_min_ratio": 0.0, "warmup_num_steps": warmup,
                                                     "cos_min_ratio": 0.0, "warmup_type": "linear"}}
    raise EagleError(f"unknown train.lr_schedule {cfg.lr_schedule!r}: expected constant, linear or cosine")


def precision(ds: dict) -> torch.dtype:
    """The dtype a DeepSpeed config trains in: bfloat16 or float16 where its bf16 / fp16 section is enabled, else
    float32. The one reader of it: training, the plan's memory model and the target's load all ask here."""
    if ds.get("bf16", {}).get("enabled"):
        return torch.bfloat16
    return torch.float16 if ds.get("fp16", {}).get("enabled") else torch.float32


def read_ds_config(path: str, cfg: TrainConfig, total_steps: int) -> dict:
    """The DeepSpeed JSON (ZeRO stage, precision, accumulation) plus the optimizer/scheduler from TrainConfig."""
    if not Path(path).exists() and (REPO / path).exists():  # a config shipped with the toolkit, from any directory
        path = str(REPO / path)
    try:
        ds = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise EagleError(f"DeepSpeed config {path!r} does not exist: expected a JSON file such as conf/deepspeed/cpu_fp32.json") from None
    except json.JSONDecodeError as err:
        raise EagleError(f"DeepSpeed config {path!r} does not parse: {err.msg} at line {err.lineno}") from None
    if not isinstance(ds, dict):
        raise EagleError(f"DeepSpeed config {path!r} is not a JSON object")
    ds["train_micro_batch_size_per_gpu"] = cfg.batch_size
    ds.setdefault("gradient_accumulation_steps", 1)
    ds.pop("train_batch_size", None)
    ds["gradient_clipping"] = cfg.grad_clip
    # torch's AdamW, the same update: DeepSpeed's FusedAdam first JIT-compiles an extension on every fresh machine
    # (a CUDA one with nvcc, a minute or more; on a CPU a C++ one, about as long on two cores)
    params = {"lr": cfg.lr, "betas": list(cfg.betas), "weight_decay": cfg.weight_decay, "torch_adam": True}
    ds["optimizer"] = {"type": "AdamW", "params": params}
    ds["scheduler"] = lr_scheduler(cfg, total_steps)
    ds.setdefault("steps_per_print", 10**9)
    return ds


def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    order = list(range(n))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order


def micro_batches(n: int, cfg: TrainConfig, epoch: int, rank: int, world: int, accum: int = 1) -> list[list[int]]:
    """This rank's micro batches of sample indices for an epoch: the same count on every rank, a multiple of the
    gradient accumulation, so optimizer steps never straddle epochs. The epoch's order is cut into global batches
    of world x batch_size, rank r taking the r-th batch_size of each: the global batches depend on the global batch
    size only, so N ranks of batch_size b train on what one rank of N x b does."""
    order = epoch_order(n, cfg.seed, epoch)
    size = cfg.batch_size * world
    per_rank = n // size
    per_rank -= per_rank % accum
    return [order[g * size + rank * cfg.batch_size : g * size + (rank + 1) * cfg.batch_size] for g in range(per_rank)]


def _truncate_jsonl(path: Path, keep) -> None:
    """Drop the lines a resumed run will redo (written after the checkpoint it resumes from)."""
    if path.exists():
        lines = [line for line in path.read_text().splitlines() if line.strip() and keep(json.loads(line))]
        path.write_text("".join(line + "\n" for line in lines))


ALPHA_STEPS = 7  # simulated chain acceptance 0-α..6-α
HELDOUT_SEED = 0  # a block drafter's held-out anchors: the same at every evaluation


def step_losses(head, batch, noise: float, obj: Objective | BlockObjective, accuracy: bool = False,
                generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """A micro batch's losses for either kind of head: a block drafter's (block_objective; anchors from `generator`),
    or EAGLE's with input noise."""
    if isinstance(obj, BlockObjective):
        return block_losses(head, batch, obj, accuracy, generator)
    return losses(head, batch, noise=noise, objective=obj, accuracy=accuracy)


@torch.no_grad()
def evaluate(head, samples, dtype, device, obj: Objective | BlockObjective = Objective()) -> dict[str, float]:
    """Held-out loss, top-1 accuracies and the simulated acceptance length (greedy, bonus included: `acceptance`):
    an EAGLE head's from simulated chains of ALPHA_STEPS (with their 0-α..6-α), a block drafter's from its blocks
    (block_objective.block_acceptance)."""
    if isinstance(obj, BlockObjective):
        return evaluate_blocks(head, samples, dtype, device, obj)
    head.eval()
    sums, tokens = {}, 0.0
    tried, hit = [0] * ALPHA_STEPS, [0] * ALPHA_STEPS
    weights = {}
    for s in samples:
        out = losses(head, collate([s], dtype, device, head.config.fused), noise=0.0, objective=obj, accuracy=True)
        n = float(out["tokens"])
        tokens += n
        for k, v in out.items():  # loss, reg_loss, cls_loss, top1, top3, and per training-time-test step loss_k, top1_k
            if k != "tokens" and not math.isnan(float(v)):  # a step past a short sample's end has no top1_k
                sums[k], weights[k] = sums.get(k, 0.0) + float(v) * n, weights.get(k, 0.0) + n
        for k, (t, h) in enumerate(chain_acceptance(head, s, steps=ALPHA_STEPS, dtype=dtype)):
            tried[k] += t
            hit[k] += h
    head.train()
    result = {f"heldout/{k}": v / max(weights[k], 1) for k, v in sums.items()}
    result.update({f"heldout/alpha_{k}": hit[k] / tried[k] if tried[k] else float("nan") for k in range(ALPHA_STEPS)})
    result["heldout/acceptance"] = acceptance_of_chains(tried, hit)
    return result


@torch.no_grad()
def evaluate_blocks(head, samples, dtype, device, obj: BlockObjective) -> dict[str, float]:
    """A block drafter's held-out loss and top-1 per slot (anchors drawn from HELDOUT_SEED: the same each time) and
    simulated acceptance length."""
    head.eval()
    generator = torch.Generator().manual_seed(HELDOUT_SEED)
    sums, weights, anchors, accepted = {}, {}, 0, 0
    for s in samples:
        out = block_losses(head, collate([s], dtype, device, fused=True), obj, accuracy=True, generator=generator)
        n = float(out.pop("tokens"))
        for k, v in out.items():
            if n and not math.isnan(float(v)):
                sums[k], weights[k] = sums.get(k, 0.0) + float(v) * n, weights.get(k, 0.0) + n
        a, total = block_acceptance(head, s, dtype=dtype)
        anchors, accepted = anchors + a, accepted + total
    head.train()
    result = {f"heldout/{k}": v / weights[k] for k, v in sums.items()}
    result["heldout/acceptance"] = accepted / anchors if anchors else float("nan")
    return result


def _wandb(cfg: TrainConfig, rank: int, config: dict):
    if rank != 0 or cfg.wandb_mode == "disabled":
        return None
    os.environ.setdefault("WANDB_SILENT", "true")
    try:
        import wandb  # optional (the `track` extra)
    except ImportError:
        log.warning("train.wandb_mode=%s: wandb is not installed (pip install 'eagle-toolkit[track]'); not logging",
                    cfg.wandb_mode)
        return None
    return wandb.init(project=cfg.wandb_project, mode=cfg.wandb_mode, dir=cfg.out_dir, config=config,
                      name=Path(cfg.out_dir).name, resume="allow", id=_run_id(cfg))


def _run_id(cfg: TrainConfig) -> str:
    path = Path(cfg.out_dir) / "wandb_run_id"
    if not path.exists():
        path.write_text(f"head-{int(time.time())}")
    return path.read_text().strip()


@dataclass
class Run:
    """What a training run trains on and with, fixed by `setup` before the loop: the head's config and objective,
    the features' manifest, the training and held-out samples, the target layers a fused head reads, the DeepSpeed
    engine and its config, the rank and world, micro batches per step and per epoch, the steps in all, the training
    dtype, whether float32 matmuls run in bfloat16 (autocast), the run directory, the states cache (train.features=
    cached; None otherwise), the W&B run (None when off) and the target dtypes the features were computed in."""

    cfg: TrainConfig
    target: object
    hconf: DraftHeadConfig
    obj: Objective | BlockObjective
    manifest: Manifest
    samples: list
    heldout: list
    layers: tuple[int, ...]
    engine: object
    ds_config: dict
    rank: int
    world: int
    accum: int
    per_epoch: int
    total_steps: int
    dtype: torch.dtype
    autocast: bool
    out: Path
    cache: Path | None
    wandb: object
    forward_dtypes: set[str]

    @property
    def online(self) -> bool:
        return self.cfg.features != "offline"


@dataclass
class Progress:
    """Where a run stands: optimizer steps taken, the epoch and its next micro batch, training seconds of earlier
    (resumed) runs, loss tokens trained on since this process started and when it started (perf_counter), the last
    step's metrics, and, cached, the states computed since the last cache shard (sample index -> Sample)."""

    step: int = 0
    epoch: int = 0
    position: int = 0
    before: float = 0.0
    tokens: float = 0.0
    start: float = 0.0
    metrics: dict = field(default_factory=dict)
    computed: dict = field(default_factory=dict)

    def elapsed(self) -> float:
        return self.before + time.perf_counter() - self.start


def check_features(cfg: TrainConfig, target, hconf: DraftHeadConfig, manifest: Manifest) -> set[str]:
    """One-line errors for feature directories training cannot read alike -> the target dtypes they were computed in."""
    online = cfg.features != "offline"
    forward_dtypes = set()
    for directory in [cfg.features_dir, *cfg.extra_features]:
        other = Manifest.load(directory)
        other.check_target(target, directory)
        check_directory(cfg.features, other, directory)
        forward_dtypes.add(str(target.dtype).removeprefix("torch.") if online else other.forward_dtype or "not recorded")
        for key in ("max_length", "template"):
            if getattr(other, key) != getattr(manifest, key):
                raise EagleError(f"feature directory {directory!r} has {key} {getattr(other, key)!r}, but "
                                 f"{cfg.features_dir!r} has {getattr(manifest, key)!r}: featurize both alike")
        if hconf.fused and not online and list(other.feature_layers) != hconf.feature_layers:
            raise EagleError(
                f"a fused head reads target layers {hconf.feature_layers}, but {directory!r} holds "
                f"{list(other.feature_layers) or 'no fused layers'}: featurize with featurize.features=fused"
            )
    return forward_dtypes


def setup(cfg: TrainConfig, target, head_shape: HeadConf, deepspeed) -> Run:
    """Everything a run needs before its first step: the checked features, the samples, the distributed world, the
    step counts, the head under DeepSpeed, autocast, W&B and the states cache's disk room."""
    manifest = Manifest.load(cfg.features_dir)
    hconf = build_head_config(target, cfg, head_shape)
    obj = objective(cfg, manifest.max_length, hconf)
    online = cfg.features != "offline"
    layers = tuple(hconf.feature_layers)
    forward_dtypes = check_features(cfg, target, hconf, manifest)
    samples = training_samples(cfg, hconf.fused)
    heldout = []
    if cfg.heldout:  # a token directory's states are computed once, here
        Manifest.load(cfg.heldout).check_target(target, cfg.heldout)
        heldout = states_in_batches(read_samples(cfg.heldout, aux=hconf.fused)[: cfg.eval_conversations], target,
                                    layers, cfg.batch_size)
    if not deepspeed.comm.is_initialized():
        from deepspeed.accelerator import get_accelerator

        deepspeed.init_distributed(dist_backend=get_accelerator().communication_backend_name())
    rank, world = deepspeed.comm.get_rank(), deepspeed.comm.get_world_size()
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    accum = int(read_ds_config(cfg.deepspeed_config, cfg, 1)["gradient_accumulation_steps"])
    per_epoch = len(micro_batches(len(samples), cfg, 0, rank, world, accum))
    if per_epoch == 0:
        raise EagleError(
            f"{len(samples)} conversations cannot fill {accum} micro batch(es) of {cfg.batch_size} on each of {world} "
            f"ranks: expected at most {len(samples) // (accum * cfg.batch_size)} ranks, or more conversations"
        )
    total_steps = cfg.max_steps or (cfg.epochs * per_epoch) // accum
    ds_config = read_ds_config(cfg.deepspeed_config, cfg, total_steps)

    head = new_head(hconf, target, cfg, samples)
    if cfg.compile:
        compile_layers(head)
    if cfg.draft_vocab_size and rank == 0:
        log.info("draft vocabulary: %d most frequent training tokens", cfg.draft_vocab_size)
    dtype = precision(ds_config)
    if dtype != target.dtype:
        raise EagleError(f"DeepSpeed precision {dtype} differs from the target's dtype {target.dtype}: load the target in the same dtype")
    engine, _, _, _ = deepspeed.initialize(model=head, model_parameters=[p for p in head.parameters() if p.requires_grad], config=ds_config)
    if online and target.device.type != engine.device.type:
        raise EagleError(f"train.features={cfg.features} runs the target on the rank's device {engine.device}, but "
                         f"it was loaded on {target.device}: expected model.device=auto")
    autocast = use_autocast(cfg.autocast, dtype, engine.device)
    if autocast and rank == 0:
        log.info("bfloat16 autocast: float32 weights, bfloat16 matmuls")
    cache = out / CACHE_DIR if cfg.features == "cached" else None
    wandb = _wandb(cfg, rank, {**asdict(cfg), "deepspeed": ds_config, "manifest_tokens": manifest.tokens})
    return Run(cfg, target, hconf, obj, manifest, samples, heldout, layers, engine, ds_config, rank, world, accum,
               per_epoch, total_steps, dtype, autocast, out, cache, wandb, forward_dtypes)


def resume(run: Run) -> Progress:
    """Where the run stands: from its last checkpoint (none: the start), the logs cut back to it, and the work done
    once per run directory before the first step (the target's argmax for the draftable-only objective, timed; the
    states cache's disk room on a first epoch)."""
    at = Progress()
    ckpt_dir, out, rank = run.out / "checkpoints", run.out, run.rank
    if (ckpt_dir / "latest").exists():
        _, client = run.engine.load_checkpoint(str(ckpt_dir))
        at.step, at.epoch, at.position = client["step"], client["epoch"], client["position"]
        at.before = client.get("elapsed", 0.0)
        if rank == 0:
            log.info("resumed from step %d (epoch %d, micro batch %d)", at.step, at.epoch, at.position)
    if rank == 0:  # a run interrupted before its first checkpoint starts over: its lines go too
        _truncate_jsonl(out / "eval.jsonl", lambda r: r["step"] <= at.step)
        _truncate_jsonl(out / "train.jsonl", lambda r: r["step"] <= at.step)
    _truncate_jsonl(out / f"seen-rank{rank}.jsonl", lambda r: (r["epoch"], r["position"]) < (at.epoch, at.position))
    obj = run.obj
    if isinstance(obj, Objective) and obj.draftable_only and not run.online:  # every epoch needs the target's full-vocabulary argmax: once per run directory (timed)
        started = time.perf_counter()
        run.samples[:] = with_target_top(run.samples, run.target, run.autocast, progress=rank == 0,
                                         cache=out / f"target-top-rank{rank}.safetensors")
        at.before += time.perf_counter() - started
    if run.cache is not None and rank == 0 and at.epoch == 0:  # every training conversation's states, in the target's dtype
        target = run.target
        values = target.hidden_size * (1 + len(run.layers))
        tokens_in_cache = sum(s.input_ids.numel() for s in run.samples)
        check_disk(tokens_in_cache * (values * target.dtype.itemsize + ID_BYTES), out, "train.features=cached")
    at.start = time.perf_counter()
    return at


def train_micro_batch(run: Run, at: Progress, batch_indices: list[int]) -> dict:
    """One micro batch forward and backward (DeepSpeed steps the optimizer every `accum` of them), logged to the
    rank's seen-rank<r>.jsonl; online, its states computed (and, cached, kept for later epochs and the cache's next
    shard) -> the step's losses."""
    cfg, samples = run.cfg, run.samples
    torch.manual_seed(cfg.seed * 1_000_003 + at.epoch * 100_003 + at.position)  # noise depends on where, not when
    chosen = [samples[i] for i in batch_indices]
    if run.online:
        chosen = with_states(chosen, run.target, run.layers)
        for i, s in zip(batch_indices, chosen) if run.cache is not None else ():
            if samples[i].hidden is None:  # kept for later epochs, and for the cache's next shard
                at.computed[i] = samples[i] = s
    batch = collate(chosen, run.dtype, run.engine.device, run.hconf.fused)
    with torch.autocast(run.engine.device.type, dtype=torch.bfloat16, enabled=run.autocast):
        result = step_losses(run.engine.module, batch, cfg.noise, run.obj)
    run.engine.backward(result["loss"])
    run.engine.step()
    with (run.out / f"seen-rank{run.rank}.jsonl").open("a") as f:
        f.write(json.dumps({"epoch": at.epoch, "position": at.position, "samples": batch_indices}) + "\n")
    return result


def log_step(run: Run, at: Progress, result: dict, deepspeed) -> dict:
    """A finished optimizer step's metrics (the global batch's loss across ranks, tokens/s, lr) to train.jsonl, W&B
    and, every eval_every steps, the held-out measures to eval.jsonl (rank 0) -> the metrics."""
    cfg, out = run.cfg, run.out
    rate = at.tokens / (time.perf_counter() - at.start)
    metrics = {k: float(v.detach()) for k, v in result.items() if k != "tokens"}
    if run.world > 1:  # the loss of the global batch: the ranks' mean (the gradient DeepSpeed averages)
        loss = result["loss"].detach().reshape(1).clone()
        deepspeed.comm.all_reduce(loss)
        metrics["loss"] = float(loss) / run.world
    metrics.update({"train/tok_s": rate, "lr": run.engine.get_lr()[0], "step": at.step})
    if run.rank == 0:  # the loss curves (every step's last micro batch; per-step terms with the test)
        with (out / "train.jsonl").open("a") as f:
            f.write(json.dumps({"epoch": at.epoch, **metrics}) + "\n")
    if run.wandb:
        run.wandb.log({f"train/{k}" if "/" not in k else k: v for k, v in metrics.items()}, step=at.step)
    if run.heldout and (at.step % cfg.eval_every == 0 or at.step == run.total_steps) and run.rank == 0:
        ev = evaluate(run.engine.module, run.heldout, run.dtype, run.engine.device, run.obj)
        metrics.update(ev)
        log.info("step %d: %s", at.step, " ".join(f"{k}={v:.3f}" for k, v in ev.items()))
        if run.wandb:
            run.wandb.log(ev, step=at.step)
        with (out / "eval.jsonl").open("a") as f:
            f.write(json.dumps({"step": at.step, **ev}) + "\n")
    return metrics


def keep_computed(run: Run, at: Progress) -> None:
    """cached: this rank's states computed since the last write become one cache shard, named by where they end (a
    resumed run redoing micro batches writes the same shard again)."""
    if run.cache is not None and at.computed:
        write_cached(run.cache, (at.epoch * run.per_epoch + at.position) * run.world + run.rank, at.computed,
                     run.manifest, run.layers)
        at.computed.clear()


def save(run: Run, at: Progress) -> None:
    """A checkpoint of the engine and where the run stands (rank 0 also saves the head and prunes old checkpoints)."""
    keep_computed(run, at)  # before the checkpoint: a checkpoint never counts states the cache lacks
    ckpt_dir = run.out / "checkpoints"
    run.engine.save_checkpoint(str(ckpt_dir), tag=f"step{at.step}", client_state={
        "step": at.step, "epoch": at.epoch, "position": at.position, "elapsed": at.elapsed()})
    if run.rank == 0:
        run.engine.module.save(run.out / "head")
        prune_checkpoints(ckpt_dir, run.cfg.keep_checkpoints)


def finish(run: Run, at: Progress, provenance: dict | None) -> dict:
    """The run's summary.json and the head's card (rank 0) -> the last metrics with the wall time."""
    metrics = {**at.metrics, "train/wall_s": at.elapsed()}
    if run.wandb:
        run.wandb.finish()
    if run.rank == 0:
        cfg, samples, manifest = run.cfg, run.samples, run.manifest
        summary = {"steps": at.step, "train_s": metrics["train/wall_s"], "conversations": len(samples),
                   "loss_tokens": int(sum(float(s.loss_mask[2:].sum()) for s in samples)), "epochs": cfg.epochs,
                   "autocast": run.autocast, **{k: v for k, v in metrics.items() if k.startswith("heldout/")}}
        (run.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        write_card(run.out / "head", run.hconf, {
            **(provenance or {}), **summary, "max_steps": cfg.max_steps, "template": manifest.template,
            "regenerated": manifest.regenerate, "target_revision": target_revision(run.target),
            "machine": card_machine(run.target), "features_forward_dtype": ", ".join(sorted(run.forward_dtypes))})
    return metrics


def train(cfg: TrainConfig, target, head_shape: HeadConf = HeadConf(), provenance: dict | None = None) -> dict:
    """Train (or resume) a head for `target`: setup, resume, then micro batches until total_steps, each optimizer
    step logged and every save_every steps a checkpoint; writes checkpoints and the engine-format head to
    out_dir/head with its model card (eagle_infer.head.head_card; `provenance`: what the caller knows of the data,
    e.g. its source and recipe). -> the last step's metrics."""
    check_mode(cfg.features)
    cfg.check()
    try:
        import deepspeed  # optional (the `train` extra): inference installs without it
    except ImportError:
        raise missing_extra("deepspeed", "train", "training a head") from None

    from tqdm import tqdm

    run = setup(cfg, target, head_shape, deepspeed)
    at = resume(run)
    bar = tqdm(total=run.total_steps, initial=at.step, desc="train", disable=run.rank != 0, unit="step")
    while at.step < run.total_steps:
        batches = micro_batches(len(run.samples), cfg, at.epoch, run.rank, run.world, run.accum)
        if run.cache is not None and at.epoch > 0 and any(s.hidden is None for s in run.samples):
            run.samples[:] = read_cached(run.cache, run.samples, run.hconf.fused)
        while at.position < len(batches) and at.step < run.total_steps:
            result = train_micro_batch(run, at, batches[at.position])
            at.position += 1
            at.tokens += float(result["tokens"])
            if at.position % run.accum == 0:
                at.step += 1
                bar.update(1)
                at.metrics = log_step(run, at, result, deepspeed)
                bar.set_postfix(loss=f"{at.metrics['loss']:.3f}", tok_s=f"{at.metrics['train/tok_s']:.0f}")
                if at.step % cfg.save_every == 0 or at.step == run.total_steps:
                    save(run, at)
        if at.position >= len(batches):
            keep_computed(run, at)
            if run.cache is not None and run.world > 1:  # every rank's first-epoch states are in the cache before any reads
                deepspeed.comm.barrier()
            at.epoch, at.position = at.epoch + 1, 0
    bar.close()
    return finish(run, at, provenance)
