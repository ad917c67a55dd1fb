"""Headline result files: `docs/results/data/<platform>/headline.json`, one per platform measured, committed.

`make headline` writes one on the machine it runs on (`lab.headline`); `make results-docs` renders every file into
`docs/results/<platform>.md` and the README's results block (`lab.results_docs`). A file is one JSON object:

- format: FORMAT (this layout's version);
- machine: the GPU's name, or the CPU's model and widest matmul extension (`cpu().label`); device: cpu or cuda;
  threads: torch's CPU threads; dtype and torch: the target's dtype and torch's version;
- commit: the checkout's short commit hash; uncommitted_changes: whether its files (tracked, or untracked and not
  ignored) differed from that commit;
- command: what produced the records (e.g. `make headline`); date: the day it was written (UTC, YYYY-MM-DD);
  load_average: the machine's 1-minute load average when the file was written (other work running beside the eval);
- settings: what the eval run decoded (`RunSettings`: model, head, benchmarks, questions per benchmark, turns, new
  tokens, temperature, tree, packing, compiling);
- methods: one object per method, over all the run's questions: method, questions, new_tokens, tok_s, speedup
  (tok/s over vanilla's), tau (tokens per target forward; null for transformers' peers) and identical (share of
  answers equal to vanilla's, token for token; null for vanilla).

A file missing a field, or holding one not listed here, is refused in one line naming the file and the field
(lab.result_store, kind HEADLINE: the file's one record).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from eagle_infer.errors import EagleError
from lab.result_store import DATA_DIR, ONLY, Kind, build, merge, read

FORMAT = 1
FILE_NAME = "headline.json"


@dataclass(frozen=True)
class MethodResult:
    """One method's line of the headline table."""

    method: str
    questions: int
    new_tokens: int
    tok_s: float
    speedup: float | None
    tau: float | None
    identical: float | None


@dataclass(frozen=True)
class RunSettings:
    """What the eval run decoded, as its config.yaml gave it (depth and total_tokens may be 'auto')."""

    model: str
    head: str
    benchmarks: list[str]
    questions_per_benchmark: int | None
    max_turns: int
    max_new_tokens: int
    temperature: float
    depth: int | str
    top_k: int
    total_tokens: int | str
    pack: str
    compile: bool


@dataclass(frozen=True)
class HeadlineResult:
    """A platform's headline run: where and how it was measured, and its methods' figures (see the module doc)."""

    format: int
    machine: str
    device: str
    threads: int
    dtype: str
    torch: str
    commit: str
    uncommitted_changes: bool
    command: str
    date: str
    load_average: float
    settings: RunSettings
    methods: list[MethodResult]

    @property
    def platform(self) -> str:
        return platform_slug(self.machine)


def platform_slug(machine: str) -> str:
    """The file-name form of a machine label: 'AMD EPYC AVX-512-BF16' -> 'amd-epyc-avx-512-bf16'."""
    slug = re.sub(r"[^a-z0-9]+", "-", machine.lower()).strip("-")
    if not slug:
        raise EagleError(f"machine label {machine!r} has no letters or digits; expected e.g. 'AMD EPYC AVX-512-BF16'")
    return slug


def result_path(root: str | os.PathLike, machine: str) -> Path:
    """Where a machine's headline file lives under the checkout `root`."""
    return Path(root) / DATA_DIR / platform_slug(machine) / FILE_NAME


def _rule(record: dict) -> str:
    if record["format"] != FORMAT:
        return f"format {record['format']!r}; expected {FORMAT}"
    return "" if record["methods"] else "field 'methods' is empty; expected one object per method"


HEADLINE = Kind("a headline result file (a JSON object)", lambda text: {ONLY: json.loads(text)},
                lambda records: json.dumps(records[ONLY], indent=2, ensure_ascii=False) + "\n", HeadlineResult, _rule)


def write_result(result: HeadlineResult, path: str | os.PathLike) -> Path:
    """Write `result` as indented JSON (keys in field order, a final newline); returns the path."""
    merge(HEADLINE, path, {ONLY: asdict(result)})
    return Path(path)


def read_result(path: str | os.PathLike) -> HeadlineResult:
    """A validated headline file; bad JSON, a missing or unknown field, or a wrong type is a one-line EagleError."""
    records = read(HEADLINE, path)
    if not records:
        raise EagleError(f"{path} does not exist; expected a headline result file")
    return build(HeadlineResult, records[ONLY])


def read_all(root: str | os.PathLike) -> list[HeadlineResult]:
    """Every platform's headline file under the checkout `root`, in platform order; a file in a folder not named
    after its machine is refused."""
    results = []
    for path in sorted((Path(root) / DATA_DIR).glob(f"*/{FILE_NAME}")):
        result = read_result(path)
        if path.parent.name != result.platform:
            raise EagleError(f"{path}: machine {result.machine!r} belongs in folder {result.platform!r}, "
                             f"not {path.parent.name!r}")
        results.append(result)
    return results
