"""Feature shards: what featurize writes and training reads.

A feature directory holds `manifest.json` and shards `shard-NNNNN.safetensors`, each with
  input_ids int32 [T], loss_mask uint8 [T], hidden <dtype> [T, H], offsets int64 [n + 1]
(a token directory, `states` false in its manifest, lacks `hidden`: training computes the target's states itself,
train.features=online|cached; a cache of states a run computed adds `sample` int64 [n], each conversation's index
in the run's samples) and, when featurized for fused (EAGLE-3) heads, aux <dtype> [T, k * H]: the outputs of the manifest's
`feature_layers` side by side. n conversations are concatenated (conversation j is rows offsets[j]:offsets[j+1]).
`hidden` is the target's last hidden state after the final norm (what its LM head sees: every head's regression and
distillation target). A shard is written to a temporary name and renamed, so a shard that exists is complete; its
counts go to `shard-NNNNN.json` beside it, and the manifest's shard list is rebuilt from those, so ranks that
featurize disjoint shards of one directory merge without coordination.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from eagle_infer.errors import EagleError

MANIFEST = "manifest.json"


@dataclass
class Manifest:
    """What a feature directory was made from; training refuses features of another target."""

    target: str
    hidden_size: int
    vocab_size: int
    template: str
    dtype: str
    max_length: int
    overlong: str
    regenerate: bool
    fingerprint: str = ""  # hash of the input conversations, in order: a rerun must be given the same ones
    regenerate_fraction: float = 1.0  # share of conversations answered by the target (when regenerate)
    feature_layers: list = field(default_factory=list)  # decoder layers stored as `aux` ([] = last hidden only)
    # the target's dtype in the forward passes (and regeneration): hidden states computed in bfloat16 and in float32
    # differ, and a head scores differently on them (docs/training.md); "" in directories made before it was recorded
    forward_dtype: str = ""
    states: bool = True  # the target's states are stored (offline features); false: tokens only (online, cached)
    conversations: int = 0
    tokens: int = 0
    loss_tokens: int = 0
    skipped: dict = field(default_factory=dict)
    shards: list = field(default_factory=list)  # [{"file": ..., "conversations": n, "tokens": t, ...}]

    def refresh(self, directory: Path) -> None:
        """Rebuild the shard list and totals from the shards' count files (every rank's shards)."""
        stats = [json.loads(p.read_text()) for p in sorted(Path(directory).glob("shard-*.json"))]
        if not stats:
            return
        self.shards = stats
        self.conversations = sum(s["conversations"] for s in stats)
        self.tokens = sum(s["tokens"] for s in stats)
        self.loss_tokens = sum(s["loss_tokens"] for s in stats)
        self.skipped = {}
        for s in stats:
            for k, v in s["skipped"].items():
                self.skipped[k] = self.skipped.get(k, 0) + v

    def save(self, directory: Path) -> None:
        self.refresh(directory)
        tmp = directory / (MANIFEST + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.rename(directory / MANIFEST)

    @classmethod
    def load(cls, directory: str | Path) -> "Manifest":
        path = Path(directory) / MANIFEST
        if not path.exists():
            raise EagleError(f"feature directory {str(directory)!r} has no {MANIFEST}: run featurize first")
        raw = json.loads(path.read_text())
        manifest = cls(**{k: v for k, v in raw.items() if k in cls.__dataclass_fields__})
        manifest.refresh(Path(directory))
        return manifest

    def check_target(self, target, directory) -> None:
        """Refuse features made with another target, naming both."""
        for what, mine, theirs in (
            ("target", self.target, target.name),
            ("hidden size", self.hidden_size, target.hidden_size),
            ("vocabulary size", self.vocab_size, target.vocab_size),
        ):
            if mine != theirs:
                raise EagleError(f"features in {str(directory)!r} were made with {what} {mine!r}, but the target is {theirs!r}")


def shard_name(index: int) -> str:
    return f"shard-{index:05d}.safetensors"


def stats_name(index: int) -> str:
    """The count file written once shard `index` is complete (also for a shard with no usable conversation)."""
    return f"shard-{index:05d}.json"


def write_shard(path: Path, samples: list[tuple], dtype: torch.dtype, extra: dict | None = None) -> int:
    """samples: (input_ids, loss_mask, hidden [T, H] or None (tokens only), aux [T, k * H] or None) per
    conversation; extra: more tensors stored as they are. Returns the token count."""
    lengths = [len(s[0]) for s in samples]
    offsets = torch.tensor([0] + lengths).cumsum(0)
    tensors = {
        "input_ids": torch.tensor([t for s in samples for t in s[0]], dtype=torch.int32),
        "loss_mask": torch.tensor([m for s in samples for m in s[1]], dtype=torch.uint8),
        "offsets": offsets,
        **(extra or {}),
    }
    if samples[0][2] is not None:
        tensors["hidden"] = torch.cat([s[2].to(dtype) for s in samples]).contiguous()
    if samples[0][3] is not None:
        tensors["aux"] = torch.cat([s[3].to(dtype) for s in samples]).contiguous()
    tmp = path.with_suffix(".tmp")
    save_file(tensors, str(tmp))
    tmp.rename(path)
    return int(offsets[-1])


@dataclass
class Sample:
    """One conversation's features: input_ids [T] long, loss_mask [T] float, hidden [T, H] (post-norm last layer;
    None read from a token directory, until eagle_train.features.states computes it), aux [T, k * H] (fused layer outputs) or None; target_top [T] long, the target's argmax after each position, or None
    (not stored: eagle_train.training.objective.with_target_top adds it where training needs it every epoch)."""

    input_ids: torch.Tensor
    loss_mask: torch.Tensor
    hidden: torch.Tensor | None
    aux: torch.Tensor | None = None
    target_top: torch.Tensor | None = None


def read_samples(directory: str | Path, aux: bool = True) -> list[Sample]:
    """Every conversation of a feature directory, in shard order (every shard is read into memory; the fused layers'
    `aux` features only with aux=True: they are three times the size of the rest)."""
    directory = Path(directory)
    manifest = Manifest.load(directory)
    out = []
    for shard in (s for s in manifest.shards if s["conversations"] > 0):
        path = directory / shard["file"]
        try:
            t = load_file(str(path))
        except (SafetensorError, OSError) as err:
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise EagleError(f"feature shard {str(path)!r} cannot be read ({reason}): expected a complete shard; "
                             "delete it and featurize again (finished shards are kept)") from None
        off = t["offsets"].tolist()
        hidden, fused = t.get("hidden"), t.get("aux") if aux else None
        for a, b in zip(off[:-1], off[1:]):
            out.append(Sample(t["input_ids"][a:b].long(), t["loss_mask"][a:b].float(),
                              None if hidden is None else hidden[a:b], None if fused is None else fused[a:b]))
    if not out:
        raise EagleError(f"feature directory {str(directory)!r} holds no conversations")
    return out
