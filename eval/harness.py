"""The one timing harness: every method answers the same prompts with the same settings, records as it goes.

Per (benchmark, question, method) one record (eval.records) is appended when the answer is complete, so an
interrupted run resumes where it stopped and a rerun skips what is done. Multi-turn questions (MT-bench) are
answered turn by turn, each later turn following the method's own earlier answers. A short warm-up generation per
method runs first and is not timed.
"""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

from tqdm import tqdm

from eagle_infer.chat import Message, prompt_ids
from eagle_infer.errors import EagleError
from eagle_infer.verify import SamplingParams

from .benchmarks import Question
from .records import RecordWriter

log = logging.getLogger(__name__)


@dataclass
class HarnessSettings:
    max_new_tokens: int = 128
    sampling: SamplingParams = SamplingParams()
    seed: int = 0
    max_turns: int = 2


def answer(method, target, question: Question, settings: HarnessSettings, stops: list[int]) -> dict:
    """Answer every turn of a question with one method; returns the record body (without benchmark/method)."""
    chat: list[Message] = []
    texts, tokens, cycles, wall, n_new = [], [], [], 0.0, 0
    for turn, user in enumerate(question.turns[: settings.max_turns]):
        chat.append(Message("user", user))
        ids = prompt_ids(target.tokenizer, chat, target.template)
        if len(ids) + settings.max_new_tokens > target.max_context:
            raise EagleError(
                f"question {question.question_id} turn {turn + 1}: a {len(ids)}-token prompt + {settings.max_new_tokens} "
                f"new tokens exceeds the model's context of {target.max_context} tokens"
            )
        result = method.generate(ids, settings.max_new_tokens, settings.sampling, stops, settings.seed + turn)
        text = target.tokenizer.decode(result.tokens, skip_special_tokens=True)
        chat.append(Message("assistant", text))
        texts.append(text)
        tokens += result.tokens
        cycles += [asdict(c) for c in result.cycles]
        wall += result.wall_s
        n_new += len(result.tokens)
    return {"question_id": str(question.question_id), "turns": texts, "new_tokens": n_new, "wall_s": wall,
            "cycles": cycles, "temperature": settings.sampling.temperature, "tokens": tokens}


def run(benchmarks: dict[str, list[Question]], methods: list, target, settings: HarnessSettings,
        writer: RecordWriter, stops: list[int]) -> int:
    """Answer every question with every method not already recorded; returns the number of new records."""
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
        m.generate(warm_ids, 8, settings.sampling, stops, 0)
    bar = tqdm(todo, unit="answer")
    for bench, question, method in bar:  # question-major: each question's methods run back to back
        bar.set_description(f"{bench}/{method.name}")
        record = answer(method, target, question, settings, stops)
        writer.append({"benchmark": bench, "method": method.name, **record})
    return len(todo)
