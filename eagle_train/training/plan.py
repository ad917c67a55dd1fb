"""What a training run costs, worked out before it runs (stage=plan, `make train DRY_RUN=1`): its loss tokens, the
disk its states take offline or cached, memory per rank, steps, and, where a device is asked to time it
(plan.time_steps), tokens/s and hours per epoch. Also the refusals that come before any work: featurize without the
disk room for what it writes, online training with a target that does not fit beside the head, a target whose
architecture the head cannot take.

The target's shape comes without its weights: a registered name's architecture (eagle_infer.models.registry), a synthetic
stand-in's, or a local directory's config.json, built on PyTorch's meta device; the head is built on it the way
training builds it, so its parameter count is the real one. The data's tokens are estimated from its characters
before featurize and read from the manifest after (eagle_train.features.data_size).

Memory per rank (bytes a parameter; ZeRO stage z over N ranks): the target's weights in the training dtype (loaded
in every mode: the head reads its embedding and LM head; online it also runs its forward); the head's weights and
gradients in the training dtype (gradients / N from ZeRO-2); AdamW's two float32 moments, plus a float32 master copy
when training in bfloat16, / N from ZeRO-1; activations of one micro batch (batch x max_length tokens) through the
head, ACTIVATION_VALUES per token per decoder layer and unrolled step (Korthikanti et al. 2022's 34 x hidden bytes
for a layer kept for backward, with attention in fused kernels) plus the float32 draft-vocabulary distributions of
every step, and, online, the target's forward of that micro batch (no gradient: one layer's activations at a time).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from eagle_infer.head.blocks import build_head
from eagle_infer.errors import EagleError
from eagle_infer.platform import available_memory
from eagle_infer.models.registry import lookup
from eagle_infer.models.synthetic import PREFIX, is_synthetic, synthetic_model
from eagle_infer.models.target import SUPPORTED_ARCHITECTURES, Target, load_target

from ..features.data_size import CHARS_PER_TOKEN, DataSize, disk_bytes, estimate_data, manifest_data, state_values
from ..features.disk import size
from ..features.shards import Sample
from .objective import collate
from ..features.states import with_states
from .train import build_head_config, objective, precision, step_losses

ACTIVATION_VALUES = 17  # 34 x hidden bytes a token and layer in 16-bit values


def count(n: float) -> str:
    """12,345 -> "12.3k", 45,600,000 -> "45.6M"."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


@dataclass
class PlanConf:
    """stage=plan: ranks the run will have (make train DRY_RUN=1 passes NGPU) and, with a device, how many training
    steps to time (0: none; the default times 3 where CUDA is present)."""

    ranks: int = 1
    time_steps: int | None = None


def meta_target(name: str, dtype: torch.dtype):
    """The target `name` (registered, synthetic:<registered>, a local directory or a reachable hub id) on the meta
    device: its shape without weights; a one-line error for an architecture the head cannot take or a shape out of
    reach."""
    from transformers import AutoConfig, AutoModelForCausalLM

    spec = lookup(name.removeprefix("synthetic:") if is_synthetic(name) else name)
    if spec is not None:
        model = synthetic_model(spec.arch, dtype, torch.device("meta"))
    else:
        try:  # a local directory, or a hub id where the hub (or its cache) answers
            config = AutoConfig.from_pretrained(name)
        except (OSError, ValueError):
            raise EagleError(f"model {name!r} is neither registered nor a directory or hub id whose config.json can "
                             "be read here: its shape is needed; expected a registered name, synthetic:<name> or a "
                             "downloaded directory") from None
        check_architecture(name, config.model_type)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    check_architecture(name, model.config.model_type)
    return Target(name, model, None, "chatml", dtype, torch.device("meta"))


def check_architecture(name: str, model_type: str) -> None:
    if model_type not in SUPPORTED_ARCHITECTURES:
        raise EagleError(f"model {name!r} has architecture {model_type!r}, which the draft head cannot take: expected "
                         f"one of {', '.join(SUPPORTED_ARCHITECTURES)}")


@dataclass
class Memory:
    """Bytes per rank."""

    target: int
    head: int
    optimizer: int
    activations: int

    @property
    def total(self) -> int:
        return self.target + self.head + self.optimizer + self.activations


def draft_positions(conf, head) -> int:
    """Positions a row the head runs at once: max_length x the training-time test's steps for an EAGLE head, the
    anchored blocks' queries for a block drafter (A x B, each also attending the row's context)."""
    if head.config.block == "dflash":
        return min(conf.train.anchors, conf.featurize.max_length) * head.config.block_size
    return conf.featurize.max_length * (conf.train.ttt_steps + 1)


def memory_per_rank(target, head, dtype: torch.dtype, zero: int, ranks: int, batch: int, max_length: int,
                    positions: int, online: bool) -> Memory:
    """The module docstring's model of one rank's memory; `positions`: draft_positions."""
    width = torch.finfo(dtype).bits // 8
    target_params = sum(p.numel() for p in target.model.parameters())
    head_params = sum(p.numel() for p in head.parameters() if p.requires_grad)
    grads = head_params * width / (ranks if zero >= 2 else 1)
    optimizer = head_params * (8 + (4 if width < 4 else 0)) / (ranks if zero >= 1 else 1)
    tokens, h = batch * max_length, target.hidden_size
    vocab = head.config.draft_vocab_size or target.vocab_size
    inputs = tokens * h * (len(head.config.feature_layers) or 1) * width * 2  # the fused inputs and the goal
    head_acts = batch * positions * (head.config.layers * ACTIVATION_VALUES * h * width + 2 * vocab * 4)
    if head.config.block == "dflash":  # the block mask: each query's keys, context and blocks
        head_acts += batch * positions * (max_length + positions)
    cfg = target.config
    target_acts = tokens * (2 * h + 2 * cfg.intermediate_size) * width if online else 0
    return Memory(target_params * width, int(head_params * width + grads), int(optimizer),
                  int(inputs + head_acts + target_acts))


def zero_stage(ds: dict) -> int:
    return int(ds.get("zero_optimization", {}).get("stage", 0))


def data_size(conf, conversations) -> DataSize:
    """The training split's sizes: exact from its directory's manifest once featurized, else estimated from
    `conversations()` (the recipe's, held-out split included: scaled to the training share)."""
    exact = manifest_data(conf.train.features_dir)
    if exact is not None:
        return exact
    every = conversations()
    f = conf.featurize
    size = estimate_data(every, f.max_length, f.regenerate, f.regenerate_max_new_tokens, f.regenerate_turns)
    share = max(len(every) - conf.data.heldout, 0) / max(len(every), 1)
    return DataSize(int(size.conversations * share), int(size.tokens * share), int(size.loss_tokens * share), False)


def cost_lines(conf, conversations, ds: dict) -> list[str]:
    """The plan's cost lines for the recipe `conf` (an eagle_train.cli.TrainRunConf) over `ranks`; `conversations`:
    a callable returning the recipe's conversations (called only before featurize)."""
    ranks = conf.plan.ranks
    dtype = precision(ds)
    target = meta_target(conf.model.name, dtype)
    head = head_on_meta(conf, target)
    fused = len(head.config.feature_layers)
    data = data_size(conf, conversations)
    accum = int(ds.get("gradient_accumulation_steps", 1))
    per_epoch = data.conversations // (conf.train.batch_size * ranks) // accum
    steps = conf.train.max_steps or conf.train.epochs * per_epoch
    store = torch.finfo(getattr(torch, conf.featurize.store_dtype)).bits // 8
    how = "exact, from the manifest" if data.exact else f"estimated at {CHARS_PER_TOKEN:g} characters a token"
    lines = [f"cost ({ranks} rank{'s' if ranks > 1 else ''}; data {how}):",
             f"  data: {data.conversations:,} training conversations, {count(data.tokens)} tokens, "
             f"{count(data.loss_tokens)} loss tokens an epoch",
             f"  steps: {per_epoch:,} an epoch ({conf.train.batch_size} conversations x {ranks} ranks x {accum} "
             f"accumulated), {steps:,} in all",
             f"  disk: offline {size(disk_bytes(data.tokens, target, fused, store, 'offline'))} "
             f"({state_values(target, fused):,} {conf.featurize.store_dtype} values a token), cached "
             f"{size(disk_bytes(data.tokens, target, fused, dtype.itemsize, 'cached'))} (in the run directory), "
             f"online {size(disk_bytes(data.tokens, target, fused, store, 'online'))} (tokens only)"]
    for mode in ("offline", "online"):
        m = memory_per_rank(target, head, dtype, zero_stage(ds), ranks, conf.train.batch_size,
                            conf.featurize.max_length, draft_positions(conf, head), mode == "online")
        lines.append(f"  memory per rank, {mode}{' (and cached)' if mode == 'online' else ''}: {size(m.total)} = "
                     f"target weights {size(m.target)} + head {size(m.head)} + optimizer {size(m.optimizer)} "
                     f"(ZeRO-{zero_stage(ds)}) + activations {size(m.activations)} (micro batch "
                     f"{conf.train.batch_size} x {conf.featurize.max_length})")
    return lines + timing_lines(conf, ds, data)


def timed_steps(conf, ds: dict, steps: int) -> tuple[float, str]:
    """Loss tokens a second of `steps` online training steps (after one warm-up step) on this machine's device: the
    target's forward of a micro batch (batch x max_length random tokens, every position a loss position) and the
    head's forward, backward and AdamW step, as training runs them (eagle_train.features.states, eagle_train.training.objective),
    without DeepSpeed's communication. A registered target is timed as its synthetic stand-in (the same shape; a
    step's cost does not depend on the weights' values). Returns (tokens/s, the device in words)."""
    import time

    dtype = str(precision(ds)).removeprefix("torch.")
    name = PREFIX + conf.model.name if lookup(conf.model.name) else conf.model.name
    target = load_target(name, dtype, conf.model.device, "off", allow_synthetic=True)
    hconf = build_head_config(target, conf.train, conf.head)
    head = build_head(hconf, target).to(target.device)
    optimizer = torch.optim.AdamW([p for p in head.parameters() if p.requires_grad], lr=conf.train.lr)
    obj = objective(conf.train, conf.featurize.max_length, hconf)
    b, t = conf.train.batch_size, conf.featurize.max_length
    generator = torch.Generator().manual_seed(0)
    samples = [Sample(torch.randint(3, target.vocab_size, (t,), generator=generator), torch.ones(t), None)
               for _ in range(b)]
    layers = tuple(hconf.feature_layers)
    elapsed = 0.0
    for step in range(steps + 1):
        if target.device.type == "cuda":
            torch.cuda.synchronize(target.device)
        start = time.perf_counter()
        batch = collate(with_states(samples, target, layers), target.dtype, target.device, hconf.fused)
        result = step_losses(head, batch, conf.train.noise, obj)
        result["loss"].backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if target.device.type == "cuda":
            torch.cuda.synchronize(target.device)
        elapsed += (time.perf_counter() - start) if step else 0.0
    device = torch.cuda.get_device_name(target.device) if target.device.type == "cuda" else "CPU"
    return steps * b * (t - 2) / elapsed, device


def timing_lines(conf, ds: dict, data: DataSize) -> list[str]:
    """The plan's timed line, where plan.time_steps (default: 3 where CUDA is present, else none) asks for it."""
    steps = conf.plan.time_steps if conf.plan.time_steps is not None else (3 if torch.cuda.is_available() else 0)
    if steps <= 0:
        return ["  time: not timed (no CUDA device; plan.time_steps=N times N steps on this machine)"]
    rate, device = timed_steps(conf, ds, steps)
    ranks = conf.plan.ranks
    hours = data.tokens / (rate * ranks) / 3600
    return [f"  time (online, timed on {device}, {steps} steps of micro batch {conf.train.batch_size} x "
            f"{conf.featurize.max_length}): {rate:,.0f} tokens/s a rank, ~{hours:,.2f} h an epoch on {ranks} such "
            f"rank{'s' if ranks > 1 else ''} ({count(data.tokens)} tokens; communication not included)"]


def head_on_meta(conf, target):
    """The head training would build for `target` (a meta target), on the meta device: its parameters' shapes."""
    with torch.device("meta"):
        return build_head(build_head_config(target, conf.train, conf.head), target)


def check_fits(conf, ds: dict, ranks: int, device: torch.device) -> None:
    """Online training (and cached's first epoch) runs the target beside the head: a one-line refusal, before the
    target loads, when the memory model (module docstring) exceeds what `device` has free."""
    dtype = precision(ds)
    target = meta_target(conf.model.name, dtype)
    head = head_on_meta(conf, target)
    m = memory_per_rank(target, head, dtype, zero_stage(ds), ranks, conf.train.batch_size, conf.featurize.max_length,
                        draft_positions(conf, head), online=True)
    free = available_memory(device)
    if m.total > free:
        raise EagleError(f"train.features={conf.train.features}: {conf.model.name} needs ~{size(m.total)} on each rank "
                         f"(target weights {size(m.target)}, head {size(m.head)}, optimizer {size(m.optimizer)}, "
                         f"activations {size(m.activations)}), but {device} has {size(free)} free: expected a device "
                         "with that room, more ranks, a smaller train.batch_size or featurize.max_length, or "
                         "train.features=offline")
