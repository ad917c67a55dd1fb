"""Self-written prompts (the Magpie method): the target, given its chat template's user header and nothing else,
writes what a user would ask. The prompts kept here become one-turn conversations that regeneration
(eagle_train/data/regenerate.py) answers like ShareGPT's, so both sides of the data come from the target.

- user header: `user_header` renders a chat of one user message whose content is a sentinel (eagle_infer.models.chat, so
  any template works) and cuts at the sentinel: for SmolLM2 `<|im_start|>system\\n…<|im_end|>\\n<|im_start|>user\\n`
  (its template's default system message included). The end-of-turn marker is the first non-whitespace run after
  the content (`<|im_end|>`, vicuna's `ASSISTANT:`, llama2's `[/INST]`).
- sampling: vanilla decoding through the engine with `temperature` and `top_p`, up to `max_tokens` new tokens,
  stopping at the chat's stop ids (eagle_infer.models.chat.stop_ids) and at the marker's token when it is one token; a
  marker of several tokens ends the prompt where its text appears.
- steering (optional): with `system_prompts` [P0 … Pn-1], request i of a shard is sampled after the header of a chat
  whose system message is P(i mod n) (the Magpie paper's way to steer the domain: e.g. one system prompt per
  MT-bench category, recipes/smollm2-135m-self-steered.yaml); each kept prompt records its system prompt's index.
  With `openers` [O0 … Om-1], request i's user turn starts with O(i mod m) (prefilled after the header, so the
  sample continues it and the kept prompt is the opener and its continuation: a stronger handle on what a small
  model asks than a system message, recipes/smollm2-135m-self-openers.yaml); each kept prompt records its opener's
  index. Both together: system prompt i mod n, opener i mod m.
- rejection, one reason per sample, counted: `too_long` (no end of turn within max_tokens), `special_token`
  (another special token of the tokenizer in the text, e.g. a second header), the quality filters of
  eagle_train/data/prompt_filters.py (`too_short`, `repetitive`, `not_english`), `evaluation_set` (an exact or near
  duplicate of any turn of eval's six sets found in the benchmark data directory: they stay evaluation-only),
  `duplicate` / `near_duplicate` (of a prompt kept before it; eagle_train/data/near_duplicates.py).
- shards: `<out_dir>/shard-NNNNN.json`, `shard_size` samples each, request i of shard s seeded
  (seed · 1,000,003 + s) · shard_size + i. A shard's samples depend on the settings and s only (on one machine and
  dtype), and what it keeps on those and the prompts kept by the shards before it, so shards are written in order
  until `wanted` prompts are kept, each renamed into place when whole: a rerun reads the shards written and
  continues with the next, and an interrupted run loses and repeats nothing. A shard written with other settings
  is refused, naming the setting. Each shard records its samples' seconds and tokens; the rates (sampled and kept
  prompts/s, tokens/s) are logged per shard and for the run, and regeneration logs its answer tokens/s.
"""
from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from tqdm import tqdm

from eagle_infer.models.chat import Message, render, stop_ids
from eagle_infer.config import InferConf
from eagle_infer.decoding.engine import Engine
from eagle_infer.errors import EagleError
from eagle_infer.platform import machine_facts
from eagle_infer.config import SamplingParams

from ..plumbing.benchmarks import BENCHMARKS, benchmark_dir, load_benchmark
from .near_duplicates import DuplicateIndex
from .prompt_filters import QualityThresholds, quality_reason

log = logging.getLogger(__name__)
SENTINEL = "\u2063self-written prompt\u2063"  # invisible separators around it: text no template writes itself
SHARD_GLOB = "shard-*.json"


@dataclass
class SelfPromptConf(QualityThresholds):
    """data.self_prompts: how prompts are sampled and filtered (the module docstring; quality thresholds in
    eagle_train/data/prompt_filters.py). eval_data_dir: the benchmark question directory whose sets are excluded; null:
    eval's default (the sibling shared/data/benchmarks when present)."""

    temperature: float = 1.0
    top_p: float = 0.95
    max_tokens: int = 128
    near_duplicate: float = 0.7  # character 5-gram Jaccard similarity at which a prompt duplicates another
    shard_size: int = 256
    # requests decoded together; not recorded: in float32 a batch samples what its requests alone would (engine),
    # in bfloat16 a near-tie may round the other way, changing which prompts are written, never losing one
    batch_size: int = 48
    seed: int = 0
    eval_data_dir: Optional[str] = None
    system_prompts: list[str] = field(default_factory=list)  # steering, module docstring; [] = the template's own
    openers: list[str] = field(default_factory=list)  # the user turn's first words (module docstring); [] = none

    def check(self) -> None:
        super().check()
        if self.temperature <= 0:
            raise EagleError(f"data.self_prompts.temperature {self.temperature} is invalid: expected > 0 (sampling)")
        if not 0.0 < self.top_p <= 1.0:
            raise EagleError(f"data.self_prompts.top_p {self.top_p} is invalid: expected 0 < top_p <= 1")
        for name in ("max_tokens", "shard_size", "batch_size"):
            if getattr(self, name) < 1:
                raise EagleError(f"data.self_prompts.{name} {getattr(self, name)} is invalid: expected >= 1")
        if self.min_tokens > self.max_tokens:
            raise EagleError(f"data.self_prompts.min_tokens {self.min_tokens} is invalid: expected <= max_tokens "
                             f"{self.max_tokens}")
        DuplicateIndex(self.near_duplicate)  # checks the threshold
        for name in ("system_prompts", "openers"):
            for i, text in enumerate(getattr(self, name)):
                if not isinstance(text, str) or not text.strip():
                    raise EagleError(f"data.self_prompts.{name}[{i}] {text!r} is invalid: expected a non-empty string")


def header_ids(target) -> list[int]:
    """The token ids of the target's user header and nothing else: the request a self-written prompt is sampled
    from without a system prompt or opener (benchmarks decode copies of it)."""
    header, _ = user_header(target.tokenizer, target.template)
    return target.tokenizer(header, add_special_tokens=False)["input_ids"]


def user_header(tokenizer, template: str, system: str | None = None) -> tuple[str, str]:
    """(header, end marker) of `template`: the text rendered before a user message's content, and the first
    non-whitespace run after it (the module docstring); with `system`, after that system message."""
    messages = ([Message("system", system)] if system is not None else []) + [Message("user", SENTINEL)]
    text = render(messages, tokenizer, template, add_generation_prompt=True).text
    if system is not None and system not in text:
        raise EagleError(f"chat template {template!r} does not render a system message verbatim: "
                         "data.self_prompts.system_prompts needs a template that does (or an empty list)")
    at = text.find(SENTINEL)
    end = re.match(r"\s*(\S+)", text[at + len(SENTINEL):]) if at >= 0 else None
    if end is None:
        raise EagleError(f"chat template {template!r} does not render a user message's content verbatim followed by an "
                         "end-of-turn marker; expected a template that does (self-written prompts need its user header)")
    return text[:at], end.group(1)


def evaluation_questions(data_dir: str | None) -> dict[str, list[str]]:
    """Every turn of each of eval's six sets present as <data_dir>/<name>/question.jsonl, by set name (eval's
    loader, eagle_train/plumbing/benchmarks.py); {} without a directory."""
    if data_dir is None:
        return {}
    return {name: [turn for q in load_benchmark(name, data_dir) for turn in q.turns]
            for name in BENCHMARKS if (Path(data_dir) / name / "question.jsonl").is_file()}


@dataclass
class Sampler:
    """What sampling a shard needs, built once per run: the engine, the user header's ids, the end-of-turn marker,
    the stop ids, and the settings every shard records."""

    engine: Engine
    headers: list[str]  # one per system prompt (one, the template's own, without steering)
    openers: list[str]  # [""] without openers
    marker: str
    stops: list[int]
    settings: dict


def _sampler(target, conf: SelfPromptConf, evaluation: dict[str, list[str]]) -> Sampler:
    headers = [user_header(target.tokenizer, target.template, system) for system in conf.system_prompts or [None]]
    marker = headers[0][1]
    marker_ids = target.tokenizer(marker, add_special_tokens=False)["input_ids"]
    stops = sorted(set(stop_ids(target)) | (set(marker_ids) if len(marker_ids) == 1 else set()))
    # the steering settings are recorded only when set, so shards written before steering existed still read back
    recorded = {k: v for k, v in asdict(conf).items()
                if k not in ("batch_size", "eval_data_dir") and (k not in ("system_prompts", "openers") or v)}
    settings = {"target": target.name, "template": target.template, **recorded,  # a setting named before its header
                "header": headers[0][0] if len(headers) == 1 else [h for h, _ in headers],
                "evaluation_sets": {name: len(turns) for name, turns in evaluation.items()}}
    engine = Engine(target, None, InferConf(method="vanilla", max_batch_size=conf.batch_size))
    return Sampler(engine, [h for h, _ in headers], conf.openers or [""], marker, stops, settings)


def _request(sampler: Sampler, i: int) -> tuple[int, int]:
    """(system prompt index, opener index) of request i of a shard: i mod each list's length."""
    return i % len(sampler.headers), i % len(sampler.openers)


def _prompt_text(tokens: list[int], sampler: Sampler, tokenizer, opener: str = "") -> str | None:
    """The prompt a sample wrote after `opener`: the opener and its tokens before the first stop id, decoded and cut
    at the end-of-turn marker; None when neither ends it (too long)."""
    cut = next((k for k, t in enumerate(tokens) if t in sampler.stops), None)
    text = opener + tokenizer.decode(tokens[:cut], skip_special_tokens=False)
    if sampler.marker in text:
        return text[: text.index(sampler.marker)].strip()
    return text.strip() if cut is not None else None


def _reason(text: str | None, tokenizer, conf: SelfPromptConf, kept: DuplicateIndex, banned: DuplicateIndex) -> str | None:
    """Why a sample is rejected (module docstring), or None to keep it."""
    if text is None:
        return "too_long"
    if any(special in text for special in tokenizer.all_special_tokens):
        return "special_token"
    reason = quality_reason(text, len(tokenizer(text, add_special_tokens=False)["input_ids"]), conf)
    if reason is not None:
        return reason
    if banned.match(text):
        return "evaluation_set"
    return {"exact": "duplicate", "near": "near_duplicate", None: None}[kept.match(text)]


def _write_shard(path: Path, shard: int, sampler: Sampler, conf: SelfPromptConf, kept: DuplicateIndex,
                 banned: DuplicateIndex) -> dict:
    """Sample shard `shard`, keep what passes, add it to `kept`, and write the shard's record to `path`."""
    tokenizer = sampler.engine.target.tokenizer
    seed = (conf.seed * 1_000_003 + shard) * conf.shard_size
    start = time.perf_counter()
    requests = [_request(sampler, i) for i in range(conf.shard_size)]
    texts = [sampler.headers[s] + sampler.openers[o] for s, o in requests]
    result = sampler.engine.generate_batch([tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts],
                                           conf.max_tokens,
                                           SamplingParams(temperature=conf.temperature, top_p=conf.top_p),
                                           sampler.stops, seed=seed, batch_size=min(conf.batch_size, conf.shard_size))
    seconds = time.perf_counter() - start
    prompts, kept_requests, rejected = [], [], {}
    for (system, opener), sample in zip(requests, result.results):
        text = _prompt_text(sample.tokens, sampler, tokenizer, sampler.openers[opener])
        reason = _reason(text, tokenizer, conf, kept, banned)
        if reason is None:
            prompts.append(text)
            kept_requests.append((system, opener))
            kept.add(text)
        else:
            rejected.setdefault(reason, []).append(tokenizer.decode(sample.tokens) if text is None else text)
    record = {**sampler.settings, "shard": shard, "shard_seed": seed, "sampled": conf.shard_size,
              "generated_tokens": result.new_tokens, "seconds": seconds, **machine_facts(sampler.engine.target),
              "kept": prompts, "rejected": rejected,
              **({"kept_system": [s for s, _ in kept_requests]} if conf.system_prompts else {}),
              **({"kept_opener": [o for _, o in kept_requests]} if conf.openers else {})}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    tmp.rename(path)
    return record


def _read_shard(path: Path, settings: dict) -> dict:
    record = json.loads(path.read_text())
    for key, value in settings.items():
        if record.get(key) != value:
            raise EagleError(f"{str(path)!r} was written with {key}={record.get(key)!r}, not {value!r}: use another "
                             "features directory, or the settings it was written with (nothing there was changed)")
    return record


def rejection_counts(records: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for record in records:
        for reason, texts in record["rejected"].items():
            counts[reason] = counts.get(reason, 0) + len(texts)
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def _rates(records: list[dict]) -> str:
    sampled, kept = sum(r["sampled"] for r in records), sum(len(r["kept"]) for r in records)
    tokens, seconds = sum(r["generated_tokens"] for r in records), max(sum(r["seconds"] for r in records), 1e-9)
    return (f"{kept} kept of {sampled} sampled in {seconds:.0f} s: {sampled / seconds:.2f} sampled prompts/s, "
            f"{kept / seconds:.2f} kept prompts/s, {tokens / seconds:.0f} tokens/s")


def write_self_prompts(target, conf: SelfPromptConf, out_dir: str | Path, wanted: int) -> list[str]:
    """The first `wanted` self-written prompts kept, in shard order: shards already in out_dir are read (and their
    settings checked), further ones sampled and written until `wanted` are kept (module docstring)."""
    conf.check()
    if wanted < 1:
        raise EagleError(f"{wanted} self-written prompts asked for: expected >= 1")
    evaluation = evaluation_questions(benchmark_dir(conf.eval_data_dir, "data.self_prompts.eval_data_dir"))
    if not evaluation:
        log.warning("no evaluation set found (data.self_prompts.eval_data_dir): prompts are not checked against them")
    sampler = _sampler(target, conf, evaluation)
    banned, kept = DuplicateIndex(conf.near_duplicate), DuplicateIndex(conf.near_duplicate)
    for turn in (t for turns in evaluation.values() for t in turns):
        banned.add(turn)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    prompts, records, written = [], [], []
    bar = tqdm(total=wanted, unit="prompt", desc="self-written prompts")
    while len(prompts) < wanted:
        path = out / f"shard-{len(records):05d}.json"
        if path.exists():
            record = _read_shard(path, sampler.settings)
            for text in record["kept"]:
                kept.add(text)
        else:
            record = _write_shard(path, len(records), sampler, conf, kept, banned)
            written.append(record)
            log.info("self-prompts shard %d: %s; rejected %s", record["shard"], _rates([record]),
                     rejection_counts([record]) or "none")
        if not record["kept"]:
            raise EagleError(f"{str(path)!r} kept none of its {record['sampled']} samples (rejected "
                             f"{rejection_counts([record])}): expected prompts that pass; loosen data.self_prompts' "
                             "filters or sampling, in another features directory")
        records.append(record)
        prompts += record["kept"]
        bar.update(min(len(record["kept"]), wanted - bar.n))
    bar.close()
    if written:
        log.info("self-written prompts, sampled now: %s", _rates(written))
    log.info("self-written prompts: %d shards, rejected %s; the first %d kept prompts are used", len(records),
             rejection_counts(records) or "none", wanted)
    return prompts[:wanted]


def read_self_prompts(out_dir: str | Path) -> list[str]:
    """Every prompt kept in out_dir's shards, in shard order (no settings check: for reports)."""
    paths = sorted(Path(out_dir).glob(SHARD_GLOB))
    if not paths:
        raise EagleError(f"no self-written prompts in {str(out_dir)!r}: expected shards written by stage=self-prompts")
    return [text for path in paths for text in json.loads(path.read_text())["kept"]]
