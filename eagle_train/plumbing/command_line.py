"""The settings of a small command, in the style of eval.cli and eagle_train.cli: Hydra overrides (`key=value`,
lists as `key=[a,b]`, text with spaces quoted as `'key=a b'`) applied to its config, conf/command/<name>.yaml (the
settings with their defaults and what each means), and typed by the command's dataclass. An unknown key, a value of
the wrong type, a missing required setting or bad syntax is one line (EagleError) naming it and the command's keys.
"""
from __future__ import annotations

import sys
from dataclasses import fields
from pathlib import Path
from typing import TypeVar

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from eagle_infer.paths import CONF_DIR
from eagle_infer.errors import EagleError

COMMAND_DIR = Path(CONF_DIR) / "command"
Settings = TypeVar("Settings")


def command_settings(name: str, schema: type[Settings], argv: list[str] | None = None) -> Settings:
    """conf/command/<name>.yaml with the overrides `argv` (default: the command line) applied, as a `schema`
    (a dataclass whose fields are the file's keys)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    keys = ", ".join(f.name for f in fields(schema))
    try:
        with initialize_config_dir(config_dir=str(COMMAND_DIR), version_base=None):
            cfg = compose(name, overrides=argv)
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), cfg))
    except (HydraException, OmegaConfBaseException, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise EagleError(f"{' '.join(argv) or 'no settings'}: {first}; expected key=value settings of "
                         f"conf/command/{name}.yaml ({keys})") from None
