"""Sizes a config declares, checked before anything is built from them: against the shapes its weights file holds
(a safetensors header, read without the tensors; a head's loaded state) and against sane limits. A config saying
`"layers": 1000000` or `num_hidden_layers: 1000000` is one line naming the field, not a build that fills the memory.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

from ..errors import EagleError

# Far above any model this toolkit runs (Llama-3 405B: 126 layers, width 16384, 128256 ids, 53248 MLP), far below
# what would exhaust a machine before a forward runs.
TARGET_LIMITS = {"num_hidden_layers": 1024, "hidden_size": 1 << 16, "intermediate_size": 1 << 18,
                 "vocab_size": 1 << 22, "num_attention_heads": 1024, "num_key_value_heads": 1024,
                 "max_position_embeddings": 1 << 24}
HEAD_LIMITS = {"layers": 64, "hidden_size": 1 << 16, "vocab_size": 1 << 22, "draft_vocab_size": 1 << 22,
               "target_layers": 1024}
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
MAX_HEADER = 1 << 27  # bytes of a safetensors JSON header (a large model's is well under 1 MB)


def check_numbers(values: dict, limits: dict[str, int], where: str) -> None:
    """Each field of `limits` present in `values` is an integer in [0, limit]; one line naming the first that is not."""
    for name, limit in limits.items():
        value = values.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise EagleError(f"{where} has {json.dumps(name)}: {value!r}: expected an integer")
        if not 0 <= value <= limit:
            raise EagleError(f"{where} has {json.dumps(name)}: {value}: expected 0..{limit}")


def safetensors_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape from a safetensors file's header (8-byte length, then JSON), reading nothing else."""
    try:
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            if length > MAX_HEADER:
                raise ValueError(f"a {length}-byte header")
            header = json.loads(f.read(length))
        return {k: tuple(v["shape"]) for k, v in header.items() if k != "__metadata__"}
    except (OSError, struct.error, ValueError, KeyError, TypeError, AttributeError) as err:
        raise EagleError(f"{str(path)!r} is not a readable safetensors file ({type(err).__name__}: {err}): expected "
                         "the weights the model was saved with") from None


def model_shapes(directory: Path) -> dict[str, tuple[int, ...]] | None:
    """Shapes of a model directory's safetensors weights (one file or an index's shards); None for torch .bin files.
    A directory with no weights file at all is a one-line error."""
    if (directory / "model.safetensors").is_file():
        return safetensors_shapes(directory / "model.safetensors")
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise EagleError(f"{str(index)!r} is not a safetensors index ({type(err).__name__}): expected "
                             "{\"weight_map\": {tensor: shard file}}") from None
        shapes: dict[str, tuple[int, ...]] = {}
        for shard in shards:
            shapes.update(safetensors_shapes(directory / shard))
        return shapes
    if any((directory / name).is_file() for name in WEIGHT_FILES):
        return None
    raise EagleError(f"model directory {str(directory)!r} has no weights: expected one of {', '.join(WEIGHT_FILES)} "
                     "beside its config.json")


def layer_count(names, prefix: str) -> int:
    """1 + the highest N among names starting with `prefix` + "N." (0 when none does)."""
    found = [name[len(prefix):].split(".", 1)[0] for name in names if name.startswith(prefix)]
    return 1 + max((int(n) for n in found if n.isdigit()), default=-1)


def _same(where: str, field: str, declared, held, what: str) -> None:
    if held is not None and declared != held:
        raise EagleError(f"{where} has {json.dumps(field)}: {declared}, but its weights hold {held} ({what}): "
                         "expected the config saved with them")


def check_model_config(config, directory: Path | None, where: str) -> None:
    """A target's transformers config: sane sizes, and for a local directory the sizes its weights' header holds
    (decoder layers, embedding rows and width, MLP width); before any model is built."""
    check_numbers({k: getattr(config, k, None) for k in TARGET_LIMITS}, TARGET_LIMITS, where)
    shapes = model_shapes(directory) if directory is not None else None
    if not shapes:
        return
    _same(where, "num_hidden_layers", config.num_hidden_layers, layer_count(shapes, "model.layers."), "decoder layers")
    vocab, hidden = shapes.get("model.embed_tokens.weight", (None, None))
    _same(where, "vocab_size", config.vocab_size, vocab, "embedding rows")
    _same(where, "hidden_size", config.hidden_size, hidden, "the embedding width")
    _same(where, "intermediate_size", getattr(config, "intermediate_size", None),
          shapes.get("model.layers.0.mlp.gate_proj.weight", (None,))[0], "the MLP width")


def check_head_config(raw: dict, shapes: dict[str, tuple[int, ...]], where: str) -> None:
    """A toolkit head's config.json: integer sizes within HEAD_LIMITS and the layer count, draft vocabulary and fused
    width its weights hold; before the head is built."""
    check_numbers(raw, HEAD_LIMITS, where)
    _same(where, "layers", raw.get("layers", 1), layer_count(shapes, "layers."), "decoder layers")
    if raw.get("draft_vocab_size"):
        _same(where, "draft_vocab_size", raw["draft_vocab_size"], shapes.get("draft_vocab", (None,))[0], "draft ids")
    if raw.get("feature_layers") and "fuse.weight" in shapes and isinstance(raw.get("hidden_size"), int):
        _same(where, "feature_layers", len(raw["feature_layers"]), shapes["fuse.weight"][1] // raw["hidden_size"],
              "fused layers")


def not_plain_tensors(path) -> EagleError:
    """The one line for a weights file that is a pickle of anything but tensors (refused by weights-only loading)."""
    return EagleError(f"{str(path)!r} is not a plain tensor file: expected safetensors or a weights-only torch file "
                      "(tensors only, as torch.save of a state dict writes)")

