"""How long each data stage took, read from what the stages record: `python -m eagle_train.data.stage_times
'directories=[DIR,DIR]'` (conf/command/stage_times.yaml).

For each feature directory (a recipe's `data.features_dir`):
- self-prompts: `self-prompts/shard-*.json` (seconds; samples written, prompts kept); with `prompts`, only the
  shards that hold the first `prompts` kept prompts (those the directory's recipes used: later shards may have been
  written for further parts of the data);
- regenerate: `train|heldout/regenerated/shard-*.json` (regenerate_s; answer tokens);
- forward: `train|heldout/shard-*.json` (forward_s; tokens).
A stage reports, for each machine and thread count its shards ran on, its shards, how many recorded their time there
(shards written before times were recorded, or answers read back from another run, have none), the seconds and units
of those, and their rate: a figure never mixes two machines. No model is loaded.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from eagle_infer.entry.cli_support import one_line_errors
from eagle_infer.errors import EagleError

from ..plumbing.command_line import command_settings
from ..plumbing.markdown import table as markdown

SPLITS = ("train", "heldout")


@dataclass(frozen=True)
class StageTime:
    """One stage of one feature directory on one machine, summed over its shards that recorded a time there."""

    directory: str
    stage: str
    shards: int  # of the stage, on every machine
    timed: int  # shards timed on this machine
    seconds: float
    units: int  # of the timed shards
    unit: str
    machine: str  # "<label>, <n> threads"; "" when untimed or not recorded

    @property
    def rate(self) -> float | None:
        return self.units / self.seconds if self.seconds else None


def _stage(directory: Path, stage: str, records: list[dict], seconds_key: str, units_key: str, unit: str
           ) -> list[StageTime]:
    """The stage's time per machine its timed shards (`records`) ran on (a figure never sums two machines' seconds),
    or one untimed entry when no shard recorded a time; none when the stage has no shard."""
    timed = [r for r in records if r.get(seconds_key) is not None]  # 0.0 is a time (a tiny shard)
    by_machine: dict[str, list[dict]] = {}
    for r in timed:
        by_machine.setdefault(f"{r['machine']}, {r['threads']} threads" if "machine" in r else "", []).append(r)
    if records and not by_machine:
        by_machine[""] = []
    return [StageTime(str(directory), stage, len(records), len(rs), sum(r[seconds_key] for r in rs),
                      sum(r[units_key] for r in rs), unit, machine) for machine, rs in sorted(by_machine.items())]


def _read(files: list[Path]) -> list[dict]:
    return [json.loads(p.read_text()) for p in files]


def first_prompt_shards(records: list[dict], prompts: int) -> list[dict]:
    """The leading prompt shards (in shard order) that hold the first `prompts` kept prompts; all of them when they
    hold fewer."""
    kept = 0
    for n, record in enumerate(records):
        if kept >= prompts:
            return records[:n]
        kept += len(record["kept"])
    return records


def stage_times(directory: str | Path, prompts: int | None = None) -> list[StageTime]:
    """The stages found in a feature directory, in pipeline order, one entry per machine a stage ran on (a stage
    with no shard is left out); `prompts`: count only the self-prompt shards holding the first that many kept
    prompts (module docstring)."""
    root = Path(directory)
    if not root.is_dir():
        raise EagleError(f"feature directory {str(root)!r} does not exist; expected a recipe's data.features_dir")
    prompt_shards = _read(sorted((root / "self-prompts").glob("shard-*.json")))
    if prompts is not None:
        prompt_shards = first_prompt_shards(prompt_shards, prompts)
    answers = _read([p for s in SPLITS for p in sorted((root / s / "regenerated").glob("shard-*.json"))])
    features = _read([p for s in SPLITS for p in sorted((root / s).glob("shard-*.json"))])
    return [
        *_stage(root, "self-prompts", prompt_shards, "seconds", "sampled", "samples"),
        *_stage(root, "regenerate", answers, "regenerate_s", "answer_tokens", "answer tokens"),
        *_stage(root, "forward", features, "forward_s", "tokens", "tokens"),
    ]


def table(times: list[StageTime]) -> str:
    return markdown(["directory", "stage", "shards timed", "minutes", "rate", "machine"], [
        [Path(t.directory).name, t.stage, f"{t.timed} of {t.shards}", f"{t.seconds / 60:.1f}",
         "—" if t.rate is None else f"{t.rate:.3g} {t.unit}/s", t.machine or "—"] for t in times])


@dataclass
class StageTimesSettings:
    directories: list[str]


@one_line_errors
def main(argv: list[str] | None = None) -> None:
    directories = command_settings("stage_times", StageTimesSettings, argv).directories
    print(table([t for d in directories for t in stage_times(d)]), end="")


if __name__ == "__main__":
    main()
