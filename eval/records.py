"""Evaluation records: one JSON object a line, appended as answers finish, so an interrupted run resumes.

A record holds `RECORD_FIELDS`: benchmark, method, question_id (str), turns (answer strings), new_tokens (int),
wall_s (float), cycles (per-cycle stat dicts, see `eval.metrics`), temperature, tokens (generated token ids); and,
in records written since they were added, category (the question's), turn_tokens, turn_wall_s and turn_steps (new
tokens, seconds and target forwards per turn: eval.spec_bench's answer files).

A run directory is written by one process at a time (`RunLock`); a file that holds two records of one key anyway
(written before the lock existed) is repaired on opening, keeping the first of each key, with a warning.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
from pathlib import Path

from eagle_infer.errors import EagleError

log = logging.getLogger(__name__)
LOCK_FILE = ".lock"

RECORD_FIELDS = (
    "benchmark", "method", "question_id", "turns", "new_tokens", "wall_s", "cycles", "temperature", "tokens"
)


def record_key(record: dict) -> tuple[str, str, str]:
    """The identity of a record: (benchmark, method, question_id)."""
    return record["benchmark"], record["method"], str(record["question_id"])


class RunLock:
    """An exclusive lock on a run directory for the `with` block (created if missing): `.lock` inside it, flock'ed
    and holding the holder's pid. A second process gets a one-line error naming that pid; the kernel releases the
    lock when the holder exits, however it ends (SIGKILL included), so a stale `.lock` file never blocks a rerun."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)
        self.fd: int | None = None

    def __enter__(self) -> "RunLock":
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise EagleError(f"run directory {str(self.directory)!r} is in use by process {holder} (an eval with the "
                             "same run name): wait for it to end, or give another run=NAME") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd
        return self

    def __exit__(self, *exc) -> None:
        os.close(self.fd)  # releases the flock; the file stays, harmless
        self.fd = None


class RecordWriter:
    """Appends records to a JSONL file; opening it drops a truncated last line left by an interrupted run.
    fields / key: what every record must hold and its identity (default: answer records)."""

    def __init__(self, path: str | os.PathLike, fields: tuple[str, ...] = RECORD_FIELDS, key=record_key):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fields, self.key = fields, key
        self.records = _load_and_repair(self.path, key)
        self._keys = {key(record) for record in self.records}

    def done_keys(self) -> set[tuple]:
        """Keys (see `record_key`) of the records already in the file."""
        return set(self._keys)

    def append(self, record: dict) -> None:
        """Write one record as a line, flushed and fsynced so that a crash loses at most this line."""
        missing = [field for field in self.fields if field not in record]
        if missing:
            raise EagleError(f"record lacks fields {', '.join(missing)}; expected all of {', '.join(self.fields)}")
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")
            out.flush()
            os.fsync(out.fileno())
        self._keys.add(self.key(record))
        self.records.append(record)


def read_records(path: str | os.PathLike) -> list[dict]:
    """All complete records of a file (a truncated last line is ignored, the file left as it is)."""
    path = Path(path)
    if not path.is_file():
        raise EagleError(f"records file {path} does not exist; expected a JSONL file written by an eval run")
    return _parse(path)[0]


def _parse(path: Path) -> tuple[list[dict], bool]:
    """(records, whether the file must be rewritten: its last line is truncated or lacks its newline)."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    records = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if lineno == len(lines):  # cut off mid-write
                return records, True
            record = None
        if not isinstance(record, dict):
            raise EagleError(f"{path}:{lineno}: malformed record line; expected one JSON object")
        records.append(record)
    return records, bool(text) and not text.endswith("\n")


def _load_and_repair(path: Path, key=record_key) -> list[dict]:
    """Records of `path` (none when missing), rewriting the file without a truncated last line and keeping only the
    first record of each key (with a warning) when it holds several."""
    if not path.is_file():
        return []
    records, damaged = _parse(path)
    first: dict = {}
    for record in records:
        first.setdefault(key(record), record)
    if len(first) < len(records):
        log.warning("%s held %d duplicate record(s) (two writers at once?): kept the first of each key, e.g. %s",
                    path, len(records) - len(first), next(k for k in first if sum(key(r) == k for r in records) > 1))
        records, damaged = list(first.values()), True
    if damaged:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
        os.replace(tmp, path)
    return records
