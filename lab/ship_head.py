"""`make ship-head ROW=<row>` (python -m lab.ship_head row=<row>; conf/command/ship_head.yaml): an ablation row's head
becomes the shipped head.

Copies `<cache root>/ablate-head/<row>/head` (its weights and config) into `eagle_infer/shipped_heads/<model>` of the checkout
and writes the card (`eagle_infer.head.head_card`) from files only: the training facts of the row's own card (data, loss
tokens, steps, training time and machine), the row's line of the committed ablation file (held-out top-1 and α, τ
on MT-bench and on held-out prompts, EAGLE-2 × vanilla with the machine it ran on), and each data stage's time from
the row's feature directories (`eagle_train.data.stage_times`). `make results-docs` then renders docs/training.md's
shipped-head block from that card. A row missing from the ablation file, or without a trained head, is refused in
one line.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from eagle_infer.entry.cli_support import known_recipes, one_line_errors
from eagle_infer.paths import REPO
from eagle_infer.errors import EagleError
from eagle_infer.head.head_card import write_card
from eagle_infer.head.head_checkpoint import load_config
from eagle_infer.platform import cache_root
from eagle_train.cli import SELF, DataConf, self_count
from eagle_train.plumbing.command_line import command_settings
from eagle_train.data.stage_times import stage_times
from lab.ablate_head import load_spec, recipe, row_overrides
from lab.ablation_file import ABLATION, ablation_path
from lab.result_store import read

HEAD_FILES = ("model.safetensors", "config.json")


def shipped_dir(root: Path, model: str) -> Path:
    return root / "eagle_infer" / "shipped_heads" / model


def ship_facts(row: str, line: dict, trained: dict, stages: list[dict], command: str, heldout_of: str) -> dict:
    """The shipped card's facts: the row's training facts, its ablation figures (each with the command that measured
    it; the held-out τ on the first turns of recipe `heldout_of`'s held-out split, the spec's) and its data stages'
    times."""
    tau = [{"what": "10 MT-bench first turns, fixed tree (depth 6, top-k 8, 32 tokens)", "value": line["tau"],
            "command": command, "machine": f"{line['trained_on']}, bfloat16 unpacked"}]
    if line.get("tau_heldout") is not None:
        tau.append({"what": f"10 held-out first turns of recipe {heldout_of}, same tree", "value": line["tau_heldout"],
                    "command": command, "machine": f"{line['trained_on']}, bfloat16 unpacked"})
    facts = {**{k: v for k, v in trained.items() if k not in ("tau", "stages")}, "ablation_row": row, "tau": tau,
             "stages": stages}
    if line.get("speedup") is not None:
        facts["speedup"] = {"what": "EAGLE-2 tok/s over vanilla's, 10 MT-bench first turns, the defaults",
                            "value": line["speedup"], "command": command, "machine": line["speed_cpu"]}
    return facts


def row_provenance(spec_recipe: str, row: str, feature_recipes: list[str]) -> dict:
    """The card's data and recipe facts for a row: the sources of the recipes whose features it read (a row trains
    through the spec's recipe with other features, so the training run's own card names the spec's recipe and its
    source), and the recipe that reproduces it, `<spec recipe>-shipped` where one exists."""
    shipped = f"{spec_recipe}-shipped"
    sources = dict.fromkeys(recipe(n)["data"]["source"] for n in feature_recipes)
    return {"data_source": " + ".join(sources),
            "recipe": f"{shipped if shipped in known_recipes() else spec_recipe} (the ablation row {row})"}


def prompts_used(feature_recipes: list[str]) -> dict[Path, int]:
    """For each self-written prompt directory the recipes read, how many of its first kept prompts they used (the
    furthest recipe's data.skip + its self-written conversations): the card times only the shards holding those."""
    used: dict[Path, int] = {}
    for name in feature_recipes:
        data = DataConf(**recipe(name)["data"])
        count = self_count(data)
        if count:
            directory = Path(data.self_prompts_dir).resolve()
            used[directory] = max(used.get(directory, 0), (data.skip if data.source == SELF else 0) + count)
    return used


def ship(row: str, spec_name: str, root: Path, out: Path) -> Path:
    """Copy row `row`'s head (trained under `out`) into the checkout `root` as the shipped head; returns its card."""
    lines = read(ABLATION, ablation_path(root, spec_name))
    if row not in lines:
        raise EagleError(f"ablation row {row!r} is not in {ablation_path(root, spec_name)}: expected a row make "
                         f"ablate-head finished, one of {', '.join(lines) or 'none yet'}")
    head = out / row / "head"
    if not all((head / f).exists() for f in HEAD_FILES):
        raise EagleError(f"{head} holds no trained head ({', '.join(HEAD_FILES)}): run make ablate-head ROWS={row}")
    spec = load_spec(spec_name)
    row_spec = next(r for r in spec["rows"] if r["name"] == row)
    name = spec["recipe"]
    _, feature_dirs = row_overrides(spec, name, row_spec)
    roots = [Path(f).parent for f in feature_dirs]
    used = prompts_used([d.name for d in roots])
    stages = [{**asdict(t), "directory": Path(t.directory).name} for d in roots if d.is_dir()
              for t in stage_times(d, used.get((d / "self-prompts").resolve()))]
    trained = json.loads((head / "card.json").read_text()) if (head / "card.json").exists() else {}
    dest = shipped_dir(root, recipe(name)["model"]["name"])
    dest.mkdir(parents=True, exist_ok=True)
    for f in HEAD_FILES:
        shutil.copyfile(head / f, dest / f)
    trained.update(row_provenance(name, row, [Path(f).parent.name for f in feature_dirs]))
    facts = ship_facts(row, lines[row], trained, stages, f"make ablate-head ROWS={row}",
                       f"{name} ({recipe(name)['data']['source']})")
    return write_card(dest, load_config(dest), facts)


@dataclass
class ShipSettings:
    row: str
    spec: str
    out: str | None
    root: str | None


@one_line_errors
def main(argv: list[str] | None = None) -> None:
    conf = command_settings("ship_head", ShipSettings, argv)
    card = ship(conf.row, conf.spec, Path(conf.root) if conf.root else REPO,
                Path(conf.out) if conf.out else cache_root() / "ablate-head")
    print(f"shipped {conf.row}: {card.parent} (commit it, then run make results-docs)")


if __name__ == "__main__":
    main()
