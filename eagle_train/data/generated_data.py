"""What a target wrote for a recipe, kept with the recipes: its answers (each split's `regenerated/` under the features
directory: `train/`, `heldout/`) and its self-written prompt shards. Writing them is most of a recipe's featurize time
on a CPU (~2 h per 5,000 answers), and greedy answers depend on the machine's numerics (bfloat16 or float32, the
kernels), so the held-out split that scores every ablation row would change with the machine that featurized it.

`stage=save-generated` gzips those JSON shards into `data.generated_dir` (recipes/generated/), mirroring their path
under the cache root (`features/<recipe>/train/regenerated/shard-00000.json.gz`, …; a second part that shares a first
part's self-prompt directory shares its copies too); the generating stages (featurize, regenerate, self-prompts,
heldout-questions, export-conversations) first restore from there every shard their directories lack
(`data.generated_dir: null` turns that off). A restored shard is then read like a resumed one, its
conversation fingerprint and settings checked, so a copy made for other conversations or settings is refused in one
line, never mixed in. About 1.3 MB per 5,000 answers. They live in the checkout and are not installed with the
package: an installed toolkit generates its own.
"""
from __future__ import annotations

import gzip
from pathlib import Path

from eagle_infer.errors import EagleError
from eagle_infer.platform import cache_root

FEATURE_SHARDS = ("*/regenerated/shard-*.json",)  # each split's: train/, heldout/
PROMPT_SHARDS = ("shard-*.json",)


def _kept_copy(directory: Path, root: Path, generated: Path) -> Path:
    """Where `directory` (under the cache root `root`) is mirrored in `generated`; a one-line error elsewhere."""
    try:
        relative = directory.resolve().relative_to(root.resolve())
    except ValueError:
        raise EagleError(f"{str(directory)!r} is not under the cache root {str(root)!r}: generated data is kept for "
                         "directories there (${eagle_cache:}/features/...)") from None
    return generated / relative


def _directories(features_dir: str | Path, self_prompts_dir: str | Path | None):
    yield Path(features_dir), FEATURE_SHARDS
    if self_prompts_dir is not None:
        yield Path(self_prompts_dir), PROMPT_SHARDS


def save_generated(features_dir: str | Path, self_prompts_dir: str | Path | None, generated: Path,
                   root: Path | None = None) -> list[Path]:
    """Gzip every generated shard of the two directories (under the cache root `root`) into `generated`
    (byte-stable: no timestamp), skipping copies already identical. Returns the copies written."""
    root = root or cache_root()
    written = []
    for directory, patterns in _directories(features_dir, self_prompts_dir):
        copy_dir = _kept_copy(directory, root, generated)
        for pattern in patterns:
            for path in sorted(directory.glob(pattern)):
                data = path.read_bytes()
                copy = copy_dir / path.relative_to(directory).with_suffix(".json.gz")
                if copy.exists() and gzip.decompress(copy.read_bytes()) == data:
                    continue
                copy.parent.mkdir(parents=True, exist_ok=True)
                copy.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
                written.append(copy)
    return written


def restore_generated(features_dir: str | Path, self_prompts_dir: str | Path | None, generated: Path,
                      root: Path | None = None) -> list[Path]:
    """Write each kept shard the two directories lack (atomically), leaving every existing file as it is. Returns
    the files restored; none when nothing is kept for them or they lie outside the cache root."""
    root = root or cache_root()
    restored = []
    for directory, patterns in _directories(features_dir, self_prompts_dir):
        try:
            copy_dir = _kept_copy(directory, root, generated)
        except EagleError:
            continue
        for pattern in patterns:
            for copy in sorted(copy_dir.glob(pattern + ".gz")):
                path = directory / copy.relative_to(copy_dir).with_suffix("")
                if path.exists():
                    continue
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(".restoring")
                tmp.write_bytes(gzip.decompress(copy.read_bytes()))
                tmp.rename(path)
                restored.append(path)
    return restored
