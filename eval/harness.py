"""The one timing harness: every method answers the same prompts with the same settings, records as it goes.

Per (benchmark, question, method) one record (eval.records) is appended when the answer is complete, so an
interrupted run resumes where it stopped and a rerun skips what is done. Multi-turn questions (MT-bench) are
answered turn by turn, each later turn following the method's own earlier answers. With batch_size > 1 the
questions are answered in groups of that size, each turn of a group one engine batch (records are written per
group). A short warm-up generation per method runs first and is not timed.
"""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

from tqdm import tqdm

from eagle_infer.models.chat import Message, prompt_ids
from eagle_infer.errors import EagleError
from eagle_infer.config import SamplingParams

from eagle_train.plumbing.benchmarks import Question
from .records import RecordWriter

log = logging.getLogger(__name__)


@dataclass
class HarnessSettings:
    max_new_tokens: int = 128
    sampling: SamplingParams = SamplingParams()
    seed: int = 0
    max_turns: int = 2
    batch_size: int = 1


def prompt_for(target, chat: list[Message], where: str, max_new_tokens: int) -> list[int]:
    """Token ids of a chat prompt; a one-line error when prompt + max_new_tokens exceeds the context."""
    ids = prompt_ids(target.tokenizer, chat, target.template)
    if len(ids) + max_new_tokens > target.max_context:
        raise EagleError(
            f"{where}: a {len(ids)}-token prompt + {max_new_tokens} new tokens exceeds the model's context of "
            f"{target.max_context} tokens"
        )
    return ids


def answer_group(method, target, questions: list[Question], settings: HarnessSettings, stops: list[int]) -> list[dict]:
    """Answer every turn of each question with one method, the questions' turn t decoded as one batch (turn t + 1
    follows each question's own answer); returns the record bodies (without benchmark/method).

    Question j of a group samples turn t with seed + t + j (the engine's per-request seeds); a batch of one
    reproduces the unbatched seeds. A record's wall_s is its share of its batches' wall time in proportion to its tokens, so summed over records
    it is the time the batches took and tokens / wall_s is the throughput (for a batch of one: its own time).
    """
    chats: list[list[Message]] = [[] for _ in questions]
    bodies = [{"question_id": str(q.question_id), "category": q.category, "turns": [], "new_tokens": 0, "wall_s": 0.0,
               "cycles": [], "temperature": settings.sampling.temperature, "tokens": [], "turn_tokens": [],
               "turn_wall_s": [], "turn_steps": []} for q in questions]
    for turn in range(max(len(q.turns[: settings.max_turns]) for q in questions)):
        live = [i for i, q in enumerate(questions) if turn < len(q.turns[: settings.max_turns])]
        prompts = []
        for i in live:
            chats[i].append(Message("user", questions[i].turns[turn]))
            prompts.append(prompt_for(target, chats[i], f"question {questions[i].question_id} turn {turn + 1}",
                                      settings.max_new_tokens))
        batch = method.generate_batch(prompts, settings.max_new_tokens, settings.sampling, stops, settings.seed + turn,
                                      min(settings.batch_size, len(prompts)))
        for i, result in zip(live, batch.results):
            text = target.tokenizer.decode(result.tokens, skip_special_tokens=True)
            chats[i].append(Message("assistant", text))
            body = bodies[i]
            body["turns"].append(text)
            body["tokens"] += result.tokens
            body["cycles"] += [asdict(c) for c in result.cycles]
            share = batch.wall_s * len(result.tokens) / max(batch.new_tokens, 1)
            body["wall_s"] += share
            body["new_tokens"] += len(result.tokens)
            body["turn_tokens"].append(len(result.tokens))
            body["turn_wall_s"].append(share)
            body["turn_steps"].append(len(result.cycles))
    return bodies


def run(benchmarks: dict[str, list[Question]], methods: list, target, settings: HarnessSettings,
        writer: RecordWriter, stops: list[int]) -> int:
    """Answer every question with every method not already recorded, batch_size questions at a time; returns the
    number of new records."""
    done = writer.done_keys()
    todo = [(b, q, m) for b, qs in benchmarks.items() for q in qs for m in methods
            if (b, m.name, str(q.question_id)) not in done]
    if len(done):
        log.info("resuming: %d records already done, %d to go", len(done), len(todo))
    if not todo:
        return 0
    warm = next(iter(benchmarks.values()))[0]
    warm_ids = prompt_ids(target.tokenizer, [Message("user", warm.turns[0])], target.template)
    for m in {m.name: m for _, _, m in todo}.values():
        m.generate_batch([warm_ids], 8, settings.sampling, stops, 0)
    # Question-major: each group of questions is answered by every method back to back.
    groups: dict[tuple[str, str], list[Question]] = {}
    for bench, question, method in todo:
        groups.setdefault((bench, method.name), []).append(question)
    by_name = {m.name: m for m in methods}
    chunks = [(bench, qs[i : i + settings.batch_size], name) for (bench, name), qs in groups.items()
              for i in range(0, len(qs), settings.batch_size)]
    chunks.sort(key=lambda c: (list(benchmarks).index(c[0]), _position(benchmarks[c[0]], c[1][0])))
    bar = tqdm(total=len(todo), unit="answer")
    for bench, questions, name in chunks:
        bar.set_description(f"{bench}/{name}")
        for record in answer_group(by_name[name], target, questions, settings, stops):
            writer.append({"benchmark": bench, "method": name, **record})
        bar.update(len(questions))
    bar.close()
    return len(todo)


def _position(questions: list[Question], question: Question) -> int:
    return next(i for i, q in enumerate(questions) if q.question_id == question.question_id)
