"""The committed result files under `docs/results/data`: one read, one merge and one validation for every kind.

A file holds named records (an ablation file one per row, a curve file one per row, a headline file one, named
`ONLY`). Its `Kind` says how the text becomes records and back (`decode`, `encode`) and which dataclass every record
must match (`record`: every field present, none unknown, each value of a type its annotation names; a field whose
annotation names another dataclass of the same module, or a list of one, is checked as such), with an optional
`rule` for what types cannot say. A bad file, or a bad record given to `merge`, is refused in one line naming the
file and the field. The kinds: lab.ablation_file (CSV), lab.training_curves (JSON by row), lab.result_file (one
JSON object).
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path

from eagle_infer.errors import EagleError

DATA_DIR = Path("docs") / "results" / "data"
ONLY = "only"  # the name of the record in a file of one record


@dataclass(frozen=True)
class Kind:
    """One kind of result file: `decode` text -> {name: record dict} (ValueError on malformed text), `encode` the
    reverse (records in the order given); `record` the dataclass each record matches; `rule` a record's further
    problem ("" when none); `what` the file as an error names it; `ignored` fields a merge does not compare (a
    record equal but for them keeps the file's)."""

    what: str
    decode: Callable[[str], dict[str, dict]]
    encode: Callable[[dict[str, dict]], str]
    record: type
    rule: Callable[[dict], str] = lambda record: ""
    ignored: tuple[str, ...] = ()


def read(kind: Kind, path: str | Path) -> dict[str, dict]:
    """The file's records by name, each validated; a missing file reads as no records."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        records = kind.decode(path.read_text(encoding="utf-8"))
    except (ValueError, TypeError, KeyError) as err:
        raise EagleError(f"{path}: {err}; expected {kind.what}") from None
    for record in records.values():
        validate(kind, record, path)
    return records


def merge(kind: Kind, path: str | Path, records: dict[str, dict], order: list[str] = ()) -> bool:
    """Put `records` into the file at `path`: a record whose encoding differs from the file's (apart from the kind's
    ignored fields) replaces it, the file's other records stay; records named in `order` come first, in that order,
    the rest after in their own. Returns whether the file changed."""
    path = Path(path)
    merged = read(kind, path)
    for name, record in records.items():
        validate(kind, record, path)
        if name not in merged or _compared(kind, name, merged[name]) != _compared(kind, name, record):
            merged[name] = record
    names = [n for n in order if n in merged] + [n for n in merged if n not in order]
    text = kind.encode({n: merged[n] for n in names})
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return True


def validate(kind: Kind, record: dict, path: Path) -> None:
    """`record` as `kind.record` declares it, then its rule; a one-line EagleError naming `path` otherwise."""
    _check(record, kind.record, path, "")
    problem = kind.rule(record)
    if problem:
        raise EagleError(f"{path}: {problem}")


def build(cls: type, data: dict):
    """An instance of the dataclass `cls` from a validated record, nested dataclasses built too."""
    values = {}
    for f in fields(cls):
        nested, many = _nested(f.type, cls)
        value = data[f.name]
        if nested is not None:
            value = [build(nested, v) for v in value] if many else build(nested, value)
        values[f.name] = value
    return cls(**values)


def _compared(kind: Kind, name: str, record: dict) -> str:
    return kind.encode({name: {**record, **dict.fromkeys(kind.ignored)}})


_TYPES = {"int": int, "float": (int, float), "str": str, "bool": bool, "list": list, "dict": dict, "None": type(None)}


def _nested(annotation: str, cls: type) -> tuple[type | None, bool]:
    """The dataclass an annotation names ('RunSettings', or 'list[MethodResult]' for its items) in `cls`'s module,
    or None; and whether the annotation is a list of it."""
    many = annotation.startswith("list[")
    found = vars(sys.modules[cls.__module__]).get(annotation[5:-1] if many else annotation)
    return (found, many) if isinstance(found, type) and is_dataclass(found) else (None, many)


def _check(data, cls: type, path: Path, prefix: str) -> None:
    if not isinstance(data, dict):
        raise EagleError(f"{path}: {prefix.rstrip('.') or 'the record'} is {data!r}; expected a {cls.__name__} object")
    declared = {f.name: f.type for f in fields(cls)}
    for name in declared:
        if name not in data:
            raise EagleError(f"{path}: missing field '{prefix}{name}'; a {cls.__name__} needs {', '.join(declared)}")
    for name, value in data.items():
        if name not in declared:
            raise EagleError(f"{path}: unknown field '{prefix}{name}'; expected only {', '.join(declared)}")
        nested, many = _nested(declared[name], cls)
        if nested is not None and isinstance(value, list if many else dict):
            for i, item in enumerate(value if many else [value]):
                _check(item, nested, path, f"{prefix}{name}[{i}]." if many else f"{prefix}{name}.")
        elif nested is not None or not _accepts(declared[name], value):
            raise EagleError(f"{path}: field '{prefix}{name}' is {value!r}; expected {declared[name]}")


def _accepts(annotation: str, value) -> bool:
    """Whether a value fits an annotation such as 'int | None' or 'list[str]' (a bool is no number)."""
    kinds = [part.split("[")[0] for part in annotation.split(" | ")]
    if isinstance(value, bool):
        return "bool" in kinds
    return isinstance(value, tuple(_TYPES[kind] for kind in kinds))

