"""Answers by the target itself: ShareGPT prompts answered by the project's own batched engine (greedy).

The EAGLE papers' "data by the target" option: the head learns the target's own continuations, which is what it
drafts against at inference. A mix ratio keeps some conversations' dataset answers (the papers' fixed-data default):
conversation j of a shard is regenerated when floor((j + 1) * fraction) > floor(j * fraction), which spreads the
regenerated ones evenly and is a pure function of (j, fraction).

Regenerated shards are written next to the features (`regenerated/shard-NNNNN.json`, one JSON object per shard with
the fingerprint of its input conversations and the settings), so `stage=regenerate` can run alone, on another
machine (a GPU), and featurize later picks the answers up; a shard made from other conversations or settings is
refused rather than silently mixed in.
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from eagle_infer.models.chat import Message, prompt_ids, stop_ids
from eagle_infer.errors import EagleError
from eagle_infer.platform import machine_facts

log = logging.getLogger(__name__)
REGENERATED_DIR = "regenerated"


@dataclass
class RegenerateSettings:
    """What decides a shard's regenerated answers (recorded with them and checked on reuse)."""

    fraction: float  # share of conversations answered by the target (0..1); the rest keep the dataset's answers
    turns: int  # user turns kept; each is answered in turn
    max_new_tokens: int
    max_length: int  # a prompt leaving fewer than max_new_tokens of it is dropped (None in the output)

    def check(self) -> None:
        if not 0.0 <= self.fraction <= 1.0:
            raise EagleError(f"regenerate fraction {self.fraction} is invalid: expected 0 <= fraction <= 1")
        if self.turns < 1:
            raise EagleError(f"regenerate_turns {self.turns} is invalid: expected >= 1")
        if not 1 <= self.max_new_tokens < self.max_length:
            raise EagleError(
                f"regenerate_max_new_tokens {self.max_new_tokens} is invalid: expected 1 <= it < max_length {self.max_length}"
            )


def is_regenerated(j: int, fraction: float) -> bool:
    """Whether conversation j (0-based, in shard order) is answered by the target under this mix ratio."""
    return int((j + 1) * fraction + 1e-9) > int(j * fraction + 1e-9)


def conversations_fingerprint(conversations: list[list[Message]]) -> str:
    return hashlib.sha1(json.dumps([[(m.role, m.content) for m in c] for c in conversations]).encode()).hexdigest()


def fits(prompt: list[int], settings: RegenerateSettings) -> bool:
    """Whether a prompt leaves max_new_tokens of max_length for its answer (regeneration answers only those)."""
    return len(prompt) <= settings.max_length - settings.max_new_tokens


@dataclass
class FirstTurn:
    """A conversation's opening as regeneration asks it: its system message ([] or [m]) and first user turn."""

    system: list[Message]
    user: Message | None

    @classmethod
    def of(cls, conv: list[Message]) -> "FirstTurn":
        return cls([m for m in conv[:1] if m.role == "system"], next((m for m in conv if m.role == "user"), None))

    def prompt(self, target, settings: RegenerateSettings) -> list[int] | None:
        """Prompt ids of the system message and user turn; None without a user turn or when they do not fit."""
        if self.user is None:
            return None
        ids = prompt_ids(target.tokenizer, self.system + [self.user], target.template)
        return ids if fits(ids, settings) else None


def answer_text(tokenizer, tokens: list[int]) -> str:
    """An answer's text as regeneration keeps it: decoded without special tokens, stripped."""
    return tokenizer.decode(tokens, skip_special_tokens=True).strip()


def first_turn_questions(conversations: list[list[Message]], target, settings: RegenerateSettings) -> list[dict]:
    """FastChat questions ({"question_id", "category", "turns"}) of the first user turns that regeneration answers,
    question_id the conversation's index: eval then decodes the prompts a head was trained on the answers to."""
    questions = []
    for i, conv in enumerate(conversations):
        opening = FirstTurn.of(conv)
        if opening.prompt(target, settings) is not None:
            questions.append({"question_id": str(i), "category": "heldout", "turns": [opening.user.content]})
    return questions


def answer_turns(conversations: list[list[Message]], engine, settings: RegenerateSettings, batch_size: int) -> list[list[Message] | None]:
    """Each conversation's system message and first `turns` user turns, every user turn answered greedily by the
    engine (continuous batching over all conversations of a turn). A conversation whose first prompt would leave
    less than max_new_tokens of max_length becomes None; later turns that do not fit are dropped."""
    target = engine.target
    users = [[m for m in conv if m.role == "user"][: settings.turns] for conv in conversations]
    chats: list[list[Message] | None] = [FirstTurn.of(conv).system for conv in conversations]
    stops = stop_ids(target)
    for turn in range(max((len(u) for u in users), default=0)):
        prompts = {}
        for i, u in enumerate(users):
            if chats[i] is not None and turn < len(u):
                ids = prompt_ids(target.tokenizer, chats[i] + [u[turn]], target.template)
                if fits(ids, settings):
                    prompts[i] = ids
                elif turn == 0:
                    chats[i] = None
        if not prompts:
            break
        order = sorted(prompts, key=lambda i: len(prompts[i]))
        with tqdm(desc=f"answer turn {turn + 1} ({len(order)} prompts)", unit="tok", leave=False) as bar:
            result = engine.generate_batch([prompts[i] for i in order], settings.max_new_tokens, stop_ids=stops,
                                           stream=lambda _i, tokens: bar.update(len(tokens)),
                                           batch_size=min(batch_size, len(order)))
        for i, r in zip(order, result.results):
            chats[i] += [users[i][turn], Message("assistant", answer_text(target.tokenizer, r.tokens))]
    return chats


def _shard_file(out_dir: Path, index: int) -> Path:
    return out_dir / REGENERATED_DIR / f"shard-{index:05d}.json"


def _expected(chunk: list[list[Message]], settings: RegenerateSettings) -> dict:
    return {"fingerprint": conversations_fingerprint(chunk), **settings.__dict__}


def _write(path: Path, expected: dict, convs: list[list[Message] | None], regenerated: int, answer_tokens: int,
           seconds: float, target) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({
        **expected, "regenerated": regenerated, "answer_tokens": answer_tokens, "regenerate_s": seconds,
        **machine_facts(target),
        "conversations": [None if c is None else [(m.role, m.content) for m in c] for c in convs],
    }))
    tmp.rename(path)


def _answer_tokens(convs, tokenizer) -> int:
    return sum(len(tokenizer(m.content, add_special_tokens=False)["input_ids"])
               for c in convs if c for m in c if m.role == "assistant")


def regenerated_shard(chunk: list[list[Message]], index: int, out_dir: Path, engine, settings: RegenerateSettings,
                      batch_size: int) -> tuple[list[list[Message] | None], dict]:
    """Shard `index`'s conversations with the mix ratio applied: read from out_dir/regenerated when that shard was
    answered before (by this or another machine, or by answer_shards), else answered now and written there. Returns
    the conversations (None = dropped) and {"regenerated": n, "answer_tokens": t, "regenerate_s": s} (s = 0 when read
    back)."""
    path = _shard_file(out_dir, index)
    expected = _expected(chunk, settings)
    if path.exists():
        saved = json.loads(path.read_text())
        for key, value in expected.items():
            if saved.get(key) != value:
                raise EagleError(
                    f"{str(path)!r} was regenerated with {key}={saved.get(key)!r}, not {value!r}: "
                    "use another features directory or delete that shard"
                )
        convs = [None if c is None else [Message(r, t) for r, t in c] for c in saved["conversations"]]
        return convs, {"regenerated": saved["regenerated"], "answer_tokens": saved["answer_tokens"], "regenerate_s": 0.0}
    picked = [j for j in range(len(chunk)) if is_regenerated(j, settings.fraction)]
    start = time.perf_counter()
    answered = answer_turns([chunk[j] for j in picked], engine, settings, batch_size) if picked else []
    seconds = time.perf_counter() - start
    convs: list[list[Message] | None] = list(chunk)
    for j, conv in zip(picked, answered):
        convs[j] = conv
    answer_tokens = _answer_tokens(answered, engine.target.tokenizer)
    _write(path, expected, convs, len(picked), answer_tokens, seconds, engine.target)
    if picked:
        log.info("shard %d: %d conversations answered by the target, %d answer tokens in %.0f s (%.0f tokens/s)",
                 index, len(picked), answer_tokens, seconds, answer_tokens / max(seconds, 1e-9))
    return convs, {"regenerated": len(picked), "answer_tokens": answer_tokens, "regenerate_s": seconds}


@dataclass
class _PendingShard:
    """A shard answer_shards is answering: its input, its conversations so far and the answers it still awaits."""

    chunk: list[list[Message]]
    convs: list[list[Message] | None]  # the picked ones hold their system message until answered; None = dropped
    picked: int  # conversations the mix ratio gives the target
    asked: int  # of them, those with a prompt that fits (the others are dropped or have no user turn)
    answered: list[list[Message]]

    @property
    def complete(self) -> bool:
        return len(self.answered) == self.asked


def answer_shards(chunks: dict[int, list[list[Message]]], out_dir: Path, engine, settings: RegenerateSettings,
                  batch_size: int) -> int:
    """Answer the shards of `chunks` ({index: conversations}) that out_dir/regenerated lacks in one continuous batch
    over all of their prompts, admitted in shard order (each shard's shortest prompts first, as answer_turns), and
    write each shard's file, as regenerated_shard would, as soon as its last answer is in: the batch stays full
    across shard boundaries instead of draining at the end of every shard, where its longest answers decode a few
    rows at a time. A shard's regenerate_s is the time since the previous shard was written. Single-turn settings
    only (the caller answers other settings shard by shard); returns the shards written."""
    if settings.turns != 1:
        raise EagleError(f"answer_shards answers first turns only, not regenerate_turns {settings.turns}")
    target = engine.target
    pending: dict[int, _PendingShard] = {}
    prompts, owners = [], []  # owners[k]: (shard index, position in the shard) of prompts[k]
    for index, chunk in sorted(chunks.items()):
        if _shard_file(out_dir, index).exists():
            continue
        picked = [j for j in range(len(chunk)) if is_regenerated(j, settings.fraction)]
        convs: list[list[Message] | None] = list(chunk)
        asked = {}
        for j in picked:
            opening = FirstTurn.of(chunk[j])
            ids = opening.prompt(target, settings)
            convs[j] = opening.system if ids is not None or opening.user is None else None
            if ids is not None:
                asked[j] = ids
        pending[index] = _PendingShard(chunk, convs, len(picked), len(asked), [])
        for j in sorted(asked, key=lambda j: len(asked[j])):
            prompts.append(asked[j])
            owners.append((index, j))
    start = last = time.perf_counter()
    written = total_tokens = 0

    def write(index: int) -> None:
        nonlocal last, written, total_tokens
        shard = pending.pop(index)
        now = time.perf_counter()
        seconds, last = now - last, now
        tokens = _answer_tokens(shard.answered, target.tokenizer)
        written, total_tokens = written + 1, total_tokens + tokens
        _write(_shard_file(out_dir, index), _expected(shard.chunk, settings), shard.convs, shard.picked, tokens,
               seconds, target)
        log.info("shard %d: %d conversations answered by the target, %d answer tokens (%.0f s since the last shard)",
                 index, shard.picked, tokens, seconds)

    for index in [i for i, shard in pending.items() if shard.complete]:  # nothing to answer
        write(index)

    def finished(k: int, result) -> None:
        index, j = owners[k]
        shard = pending[index]
        user = FirstTurn.of(shard.chunk[j]).user
        shard.convs[j] = shard.convs[j] + [user, Message("assistant", answer_text(target.tokenizer, result.tokens))]
        shard.answered.append(shard.convs[j])
        if shard.complete:
            write(index)

    if prompts:
        with tqdm(desc=f"answers ({len(prompts)} prompts, {len(pending)} shards)", unit="tok") as bar:
            engine.generate_batch(prompts, settings.max_new_tokens, stop_ids=stop_ids(target),
                                  stream=lambda _i, tokens: bar.update(len(tokens)),
                                  batch_size=min(batch_size, len(prompts)), on_finish=finished)
        seconds = time.perf_counter() - start
        log.info("answers: %d tokens in %.0f s (%.0f tokens/s)", total_tokens, seconds, total_tokens / seconds)
    return written
