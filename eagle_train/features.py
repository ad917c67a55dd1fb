"""Feature shards: what featurize writes and training reads.

A feature directory holds `manifest.json` and shards `shard-NNNNN.safetensors`, each with
  input_ids int32 [T], loss_mask uint8 [T], hidden <dtype> [T, H], offsets int64 [n + 1]
for n conversations concatenated (conversation j is rows offsets[j]:offsets[j+1]). `hidden` is the target's last
hidden state after the final norm (what its LM head sees). A shard is written to a temporary name and renamed, so
a shard that exists is complete.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

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
    conversations: int = 0
    tokens: int = 0
    loss_tokens: int = 0
    skipped: dict = field(default_factory=dict)
    shards: list = field(default_factory=list)  # [{"file": ..., "conversations": n, "tokens": t}]

    def save(self, directory: Path) -> None:
        tmp = directory / (MANIFEST + ".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.rename(directory / MANIFEST)

    @classmethod
    def load(cls, directory: str | Path) -> "Manifest":
        path = Path(directory) / MANIFEST
        if not path.exists():
            raise EagleError(f"feature directory {str(directory)!r} has no {MANIFEST}: run featurize first")
        raw = json.loads(path.read_text())
        return cls(**{k: v for k, v in raw.items() if k in cls.__dataclass_fields__})

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


def write_shard(path: Path, samples: list[tuple[list[int], list[int], torch.Tensor]], dtype: torch.dtype) -> int:
    """samples: (input_ids, loss_mask, hidden [T, H]) per conversation. Returns the token count."""
    from safetensors.torch import save_file

    lengths = [len(ids) for ids, _, _ in samples]
    offsets = torch.tensor([0] + lengths).cumsum(0)
    tensors = {
        "input_ids": torch.tensor([t for ids, _, _ in samples for t in ids], dtype=torch.int32),
        "loss_mask": torch.tensor([m for _, mask, _ in samples for m in mask], dtype=torch.uint8),
        "hidden": torch.cat([h.to(dtype) for _, _, h in samples]).contiguous(),
        "offsets": offsets,
    }
    tmp = path.with_suffix(".tmp")
    save_file(tensors, str(tmp))
    tmp.rename(path)
    return int(offsets[-1])


@dataclass
class Sample:
    """One conversation's features: input_ids [T] long, loss_mask [T] float, hidden [T, H]."""

    input_ids: torch.Tensor
    loss_mask: torch.Tensor
    hidden: torch.Tensor


def read_samples(directory: str | Path) -> list[Sample]:
    """Every conversation of a feature directory, in shard order (memory-mapped, cheap to call)."""
    from safetensors.torch import load_file

    directory = Path(directory)
    manifest = Manifest.load(directory)
    out = []
    for shard in (s for s in manifest.shards if s["conversations"] > 0):
        t = load_file(str(directory / shard["file"]))
        off = t["offsets"].tolist()
        for a, b in zip(off[:-1], off[1:]):
            out.append(Sample(t["input_ids"][a:b].long(), t["loss_mask"][a:b].float(), t["hidden"][a:b]))
    if not out:
        raise EagleError(f"feature directory {str(directory)!r} holds no conversations")
    return out
