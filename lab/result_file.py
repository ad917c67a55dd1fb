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

A file missing a field, or holding one not listed here, is refused in one line naming the file and the field.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from eagle_infer.errors import EagleError

FORMAT = 1
FILE_NAME = "headline.json"
DATA_DIR = Path("docs") / "results" / "data"


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


def write_result(result: HeadlineResult, path: str | os.PathLike) -> Path:
    """Write `result` as indented JSON (keys in field order, a final newline); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(result), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def read_result(path: str | os.PathLike) -> HeadlineResult:
    """A validated headline file; bad JSON, a missing or unknown field, or a wrong type is a one-line EagleError."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise EagleError(f"{path}: not a readable JSON file ({err}); expected a headline result file") from None
    top = _checked(data, HeadlineResult, path, "")
    if top["format"] != FORMAT:
        raise EagleError(f"{path}: format {top['format']!r}; expected {FORMAT}")
    if not top["methods"]:
        raise EagleError(f"{path}: field 'methods' is empty; expected one object per method")
    settings = RunSettings(**_checked(top["settings"], RunSettings, path, "settings."))
    methods = [MethodResult(**_checked(m, MethodResult, path, f"methods[{i}].")) for i, m in enumerate(top["methods"])]
    return HeadlineResult(**{**top, "settings": settings, "methods": methods})


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


_TYPES = {"int": int, "float": (int, float), "str": str, "bool": bool, "list": list, "None": type(None)}


def _checked(data, cls, path: Path, prefix: str) -> dict:
    """`data`'s fields as `cls` declares them: every field present, none unknown, each of a type its annotation
    names (nested objects are checked by the caller)."""
    if not isinstance(data, dict):
        raise EagleError(f"{path}: {prefix.rstrip('.') or 'the file'} is {data!r}; expected a JSON object")
    declared = {f.name: f.type for f in fields(cls)}
    for name in declared:
        if name not in data:
            raise EagleError(f"{path}: missing field '{prefix}{name}'; a {cls.__name__} needs {', '.join(declared)}")
    for name, value in data.items():
        if name not in declared:
            raise EagleError(f"{path}: unknown field '{prefix}{name}'; expected only {', '.join(declared)}")
        if not _accepts(declared[name], value):
            raise EagleError(f"{path}: field '{prefix}{name}' is {value!r}; expected {declared[name]}")
    return dict(data)


def _accepts(annotation: str, value) -> bool:
    """Whether a JSON value fits an annotation such as 'int | None' or 'list[str]' (a bool is no number; a nested
    dataclass accepts any object here)."""
    kinds = [part.split("[")[0] for part in annotation.split(" | ")]
    if any(kind not in _TYPES for kind in kinds):
        return isinstance(value, dict) or (value is None and "None" in kinds)
    if isinstance(value, bool):
        return "bool" in kinds
    return isinstance(value, tuple(_TYPES[kind] for kind in kinds))
