"""Where a training run's target states come from (train.features):

- offline: a feature directory featurize wrote holds them (today's default);
- online: the frozen target computes each micro batch's states inside the training loop, on the rank's device,
  without gradients, through the same `Target.features` forward featurize runs (last layer, or EAGLE-3's fused
  low/middle/high layers); the run reads a token directory (featurize with states off) and writes no states;
- cached: online in the first epoch, every state it computes kept as feature shards in <out_dir>/states (a feature
  directory with a manifest; each shard also holds `sample`, its conversations' indices in the run's samples), written
  before each checkpoint, so a resumed run finds every state its checkpoint counts; later epochs read them, and
  compute (and keep) only those still missing.

For the same data, seed and settings the three train the same head: the states are the same forward's (offline's to
its store dtype; tests/test_train_states.py).
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
from pathlib import Path

import torch
from safetensors import safe_open

from eagle_infer.errors import EagleError

from .shards import Manifest, Sample, read_samples, shard_name, stats_name, write_shard

MODES = ("offline", "online", "cached")
CACHE_DIR = "states"  # under the run's out_dir


def check_mode(mode: str) -> None:
    """train.features must be one of MODES (the feature directory is train.features_dir): else a one-line error."""
    if mode not in MODES:
        raise EagleError(f"unknown train.features {mode!r}: expected one of {', '.join(MODES)} (the feature "
                         "directory is train.features_dir)")


def check_directory(mode: str, manifest: Manifest, directory) -> None:
    """Offline reads states a directory holds; online and cached compute them from a token directory's tokens."""
    if mode == "offline" and not manifest.states:
        raise EagleError(f"{str(directory)!r} holds tokens only (featurized for train.features=online or cached): "
                         "expected train.features=online or cached, or a directory featurized with the target's states")
    if mode != "offline" and manifest.states:
        raise EagleError(f"train.features={mode} computes the target's states while training, but {str(directory)!r} "
                         "is a feature directory that already holds them: expected train.features=offline to read "
                         "it, or a token directory (stage=featurize with train.features=" + mode + ")")


@torch.no_grad()
def with_states(samples: list[Sample], target, layers: tuple[int, ...]) -> list[Sample]:
    """The samples, those without states given the target's (one right-padded forward over them: post-norm last
    hidden [T, H] and, with `layers`, the fused layer outputs [T, k * H]; in the target's dtype, on the CPU)."""
    missing = [i for i, s in enumerate(samples) if s.hidden is None]
    if not missing:
        return samples
    out = list(samples)
    with flash_attention(target):
        computed = target_features(target, [samples[i].input_ids.tolist() for i in missing], list(layers))
    for i, (hidden, aux) in zip(missing, computed):
        out[i] = dataclasses.replace(samples[i], hidden=hidden, aux=aux)
    return out


def states_in_batches(samples: list[Sample], target, layers: tuple[int, ...], batch: int) -> list[Sample]:
    """with_states over `samples` `batch` at a time (the held-out conversations, once per run)."""
    return [s for i in range(0, len(samples), batch) for s in with_states(samples[i : i + batch], target, layers)]


def write_cached(directory: Path, index: int, computed: dict[int, Sample], tokens: Manifest,
                 layers: tuple[int, ...]) -> None:
    """Shard `index` of the cache `directory`: the states of `computed` ({sample index: Sample}) in the target's
    dtype, its count file and the manifest (the token directory's `tokens`, with states); a shard written again (a
    resumed run redoing micro batches) is replaced."""
    if not computed:
        return
    directory.mkdir(parents=True, exist_ok=True)
    order = sorted(computed)
    samples = [computed[i] for i in order]
    rows = [(s.input_ids.tolist(), s.loss_mask.long().tolist(), s.hidden, s.aux) for s in samples]
    dtype = samples[0].hidden.dtype
    count = write_shard(directory / shard_name(index), rows, dtype, {"sample": torch.tensor(order, dtype=torch.int64)})
    stats = {"file": shard_name(index), "conversations": len(rows), "tokens": count,
             "loss_tokens": int(sum(sum(r[1]) for r in rows)), "skipped": {}}
    tmp = directory / (stats_name(index) + ".tmp")
    tmp.write_text(json.dumps(stats) + "\n")
    tmp.rename(directory / stats_name(index))
    dataclasses.replace(tokens, states=True, feature_layers=list(layers), dtype=str(dtype).removeprefix("torch."),
                        shards=[]).save(directory)


def read_cached(directory: Path, samples: list[Sample], fused: bool) -> list[Sample]:
    """`samples` with the states the cache `directory` holds filled in (those it lacks stay without)."""
    if not (directory / "manifest.json").exists():
        return samples
    manifest = Manifest.load(directory)
    indices = []
    for shard in (s for s in manifest.shards if s["conversations"] > 0):
        with safe_open(str(directory / shard["file"]), "pt") as f:
            indices += f.get_tensor("sample").tolist()
    out = list(samples)
    for i, cached in zip(indices, read_samples(directory, aux=fused)):
        if not torch.equal(cached.input_ids, samples[i].input_ids):
            raise EagleError(f"the cached states in {str(directory)!r} were computed for other conversations: "
                             "expected this run's; delete that directory (or the run directory) and train again")
        out[i] = dataclasses.replace(samples[i], hidden=cached.hidden, aux=cached.aux)
    return out


def target_features(target, sequences: list[list[int]], layers: list[int],
                    to_cpu: bool = True) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """Right-padded batched forward; each sequence's (hidden [T_i, H], aux [T_i, k * H] or None), on the CPU or,
    with to_cpu=False, on the target's device."""
    longest = max(len(s) for s in sequences)
    ids = torch.zeros(len(sequences), longest, dtype=torch.long)
    attn = torch.zeros(len(sequences), longest, dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.tensor(seq)
        attn[row, : len(seq)] = 1
    hidden, aux = target.features(ids.to(target.device), attn.to(target.device), tuple(layers))
    if to_cpu:
        hidden, aux = hidden.cpu(), None if aux is None else aux.cpu()
    return [(hidden[row, : len(seq)], None if aux is None else aux[row, : len(seq)]) for row, seq in enumerate(sequences)]


@contextlib.contextmanager
def flash_attention(target):
    """Inside, the target runs flash-attention 2 (plain causal attention only) when on CUDA with flash-attn
    installed; elsewhere, and always for tree-masked verification, it keeps SDPA."""
    use = target.device.type == "cuda" and importlib.util.find_spec("flash_attn") is not None
    if use:
        target.model.set_attn_implementation("flash_attention_2")
    try:
        yield
    finally:
        if use:
            target.model.set_attn_implementation("sdpa")
