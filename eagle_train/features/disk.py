"""Disk room for what featurize and cached training write: bytes a token, free space, the one-line refusal."""
from __future__ import annotations

import shutil
from pathlib import Path

from eagle_infer.errors import EagleError

ID_BYTES = 5  # input_ids int32 + loss_mask uint8, a token


def size(n: float) -> str:
    """Bytes as TB, GB or MB."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n / 1e6:,.1f} MB"


def free_bytes(path: str | Path) -> int:
    """Free bytes on the file system that holds `path` (its nearest existing parent)."""
    path = Path(path).resolve()
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free


def check_disk(needed: int, path: str | Path, what: str) -> None:
    """A one-line refusal when `needed` bytes do not fit on the disk that holds `path`."""
    free = free_bytes(path)
    if needed > free:
        raise EagleError(f"{what} needs ~{size(needed)} in {str(path)!r}, but its disk has {size(free)} "
                         "free: free space, choose another directory (data.features_dir), or train.features=online "
                         "(no states on disk)")
