"""What a wheel installs: every config and recipe (the command lines find them under <prefix>/share/eagle-toolkit),
the shipped heads, the console scripts; DeepSpeed and W&B only as extras."""
from __future__ import annotations

import glob
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_config_and_recipe_is_installed_as_data():
    setuptools = PYPROJECT["tool"]["setuptools"]
    installed = {f for patterns in setuptools["data-files"].values() for p in patterns for f in glob.glob(str(ROOT / p))}
    kept = ROOT / "recipes" / "generated"  # answers kept for reruns from a checkout (eagle_train.data.generated_data)
    shipped = {str(p) for d in ("conf", "recipes") for p in (ROOT / d).rglob("*") if p.is_file() and kept not in p.parents}
    assert shipped and shipped <= installed, sorted(shipped - installed)
    for target, patterns in setuptools["data-files"].items():  # each lands where eagle_infer.paths.REPO looks
        assert all(target == "share/eagle-toolkit/" + str(Path(p).parent) for p in patterns), target
    heads = setuptools["package-data"]["eagle_infer"]
    assert all(any(Path(f).match(p) for p in heads) for f in (ROOT / "eagle_infer" / "shipped_heads").rglob("*") if f.is_file())


def test_inference_installs_without_deepspeed_and_wandb():
    project = PYPROJECT["project"]
    core = " ".join(project["dependencies"])
    assert "deepspeed" not in core and "wandb" not in core
    assert project["optional-dependencies"]["train"] == ["deepspeed"] and project["optional-dependencies"]["track"] == ["wandb"]
    assert set(project["scripts"]) == {"eagle-chat", "eagle-train", "eagle-eval"}
    import importlib

    for entry in project["scripts"].values():
        module, function = entry.split(":")
        assert callable(getattr(importlib.import_module(module), function))
