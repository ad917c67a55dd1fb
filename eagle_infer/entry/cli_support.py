"""What every command line shares: the conf/ location, typed-config checks, and one-line errors."""
from __future__ import annotations

import functools
import logging
import sys
from pathlib import Path

from omegaconf import OmegaConf

from ..errors import EagleError
from ..paths import CONF_DIR, RECIPES_DIR, REPO
from ..platform import cache_root



# Config groups a command line picks an option of by name ("optional" in the defaults lists, so Hydra would skip a
# misspelt one without a word): what each is called in errors and where its options live.
GROUPS = {"recipes": ("recipe", RECIPES_DIR), "block": ("block", Path(CONF_DIR) / "block")}


def known_options(group: str) -> list[str]:
    return sorted(p.stem for p in GROUPS[group][1].glob("*.yaml"))


def known_recipes() -> list[str]:
    return known_options("recipes")


def check_recipe_arg(argv: list[str]) -> None:
    """Refuse an unknown `recipes=NAME` or `block=NAME` before Hydra composes anything, listing the known ones."""
    for arg in argv:
        group, _, name = arg.partition("=")
        if group in GROUPS and name not in known_options(group):
            what = GROUPS[group][0]
            raise EagleError(f"unknown {what} {name!r}: known {what}s are {', '.join(known_options(group))}")


def fail(err: Exception) -> None:
    """Print `error: <first line>` on stderr and exit 2."""
    message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def one_line_errors(task):
    """Wrap a Hydra task function so that EagleError prints one line and exits 2, with no traceback."""

    @functools.wraps(task)
    def wrapper(*args, **kwargs):
        try:
            return task(*args, **kwargs)
        except EagleError as err:
            fail(err)

    return wrapper


def launch(hydra_main) -> None:
    """Entry point: check the recipe name first (Hydra's own message for a missing group option is long)."""
    try:
        check_recipe_arg(sys.argv[1:])
    except EagleError as err:
        fail(err)
    sys.argv.append(f"hydra.searchpath=[file://{REPO}]")  # makes recipes/ the config group `recipes`
    hydra_main()


def register_resolvers() -> None:
    """`${eagle_cache:}` in configs: the toolkit's cache root ($EAGLE_CACHE or ~/.cache/eagle-toolkit), where long
    jobs keep what must outlive a checkout (converted models, feature shards, ablation runs)."""
    if not OmegaConf.has_resolver("eagle_cache"):
        OmegaConf.register_new_resolver("eagle_cache", lambda: str(cache_root()))


register_resolvers()


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s", force=True)
    for noisy in ("httpx", "urllib3", "DeepSpeed", "torch.distributed", "datasets"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
