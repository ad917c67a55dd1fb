"""Which code a result came from: the git commit of a checkout and whether its files differ from it. Every committed
result (training stage times, prompt categories, headline runs, ablation rows, the reproduction) is stamped with it."""
from __future__ import annotations

import subprocess
from pathlib import Path

from eagle_infer.errors import EagleError
from eagle_infer.platform import cache_root


def checkout_commit(root: Path, exclude: tuple[str, ...] = ()) -> tuple[str, bool]:
    """(short commit hash, whether tracked or untracked files differ from it) of the git checkout at `root`; changes
    under the `exclude` paths (e.g. the result files being written) do not count."""
    try:
        commit = _git(root, "rev-parse", "--short", "HEAD")
        changed = bool(_git(root, "status", "--porcelain", "--", ".", *(f":(exclude){p}" for p in exclude)))
    except (OSError, subprocess.CalledProcessError):
        raise EagleError(f"{str(root)!r} is not a git checkout; a result file needs the commit it measured") from None
    return commit, changed


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout.strip()


def shown_path(path: str | Path) -> str:
    """`path` as a committed result file prints it, the same on every machine: under the cache root as
    `<cache root>/...` (eagle_infer.platform.cache_root), else as given."""
    try:
        return "<cache root>/" + Path(path).resolve().relative_to(cache_root().resolve()).as_posix()
    except ValueError:
        return str(path)
