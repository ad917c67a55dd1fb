"""Self-written prompts (the Magpie method): user headers, duplicates, filters, resumable shards, the mix with
ShareGPT, the evaluation-set exclusion and the category classifier."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from eagle_infer.models.chat import VICUNA_SYSTEM, Message, render
from eagle_infer.decoding.engine import Engine
from eagle_infer.errors import EagleError
from eagle_train.data import self_prompts as self_prompts_mod
from eagle_train.cli import CATEGORIES_DIR, DataConf, FeaturizeConfig, TrainRunConf, _check_self_answers, _conversations, prompt_categories
from eagle_train.data.near_duplicates import DuplicateIndex, normalise
from eagle_train.data.prompt_categories import CATEGORIES, OTHER, agreement, category_report, classify, share_table
from eagle_train.data.prompt_filters import QualityThresholds, quality_reason
from eagle_train.data.self_prompts import SelfPromptConf, evaluation_questions, read_self_prompts, user_header, write_self_prompts
from tests.conftest import make_tiny_smol

WORDS = ("the", "a", "is", "what", "how", "can", "you", "about", "of", "cat", "book", "history", "poem", "python",
         "learn", "good", "write", "today", "music", "river", "explain", "why")


@pytest.fixture(scope="module")
def talker(smol_tok):
    """A tiny random Llama over SmolLM2's vocabulary whose next token is (nearly) a fixed draw over WORDS and
    <|im_end|>: its embeddings share a large first coordinate, so the final hidden state is about 8 there and
    small elsewhere, and only those rows of its LM head are non-zero, in that coordinate. It writes short,
    distinct, finished word salads: prompts the filters can be set to keep."""
    target = make_tiny_smol(smol_tok, name="tiny-talker", seed=3)
    ids = [smol_tok.convert_tokens_to_ids("Ġ" + w) for w in WORDS]
    with torch.no_grad():
        target.model.model.embed_tokens.weight[:, 0] = 50.0
        head = target.model.lm_head.weight
        head.zero_()
        head[ids, 0] = (14.0 + 2.0 * torch.rand(len(ids), generator=torch.Generator().manual_seed(0))) / 8
        head[smol_tok.convert_tokens_to_ids("<|im_end|>"), 0] = 14.5 / 8
    return target


def settings(tmp_path, **changes) -> SelfPromptConf:
    """Small shards, word-salad-friendly filters, and an empty evaluation directory (unless changed)."""
    (tmp_path / "no-eval").mkdir(exist_ok=True)
    conf = SelfPromptConf(shard_size=8, batch_size=8, max_tokens=24, min_tokens=2, eval_data_dir=str(tmp_path / "no-eval"))
    return dataclasses.replace(conf, **changes)


def test_user_header_of_templates(smol_tok):
    header, marker = user_header(smol_tok, "tokenizer")  # SmolLM2's own template, with its default system message
    assert header == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                      "<|im_end|>\n<|im_start|>user\n") and marker == "<|im_end|>"
    assert user_header(None, "vicuna_v1.1") == (f"<s>{VICUNA_SYSTEM} USER: ", "ASSISTANT:")
    assert user_header(None, "llama2_chat") == ("<s>[INST] ", "[/INST]")
    assert user_header(None, "chatml") == ("<|im_start|>user\n", "<|im_end|>")


def test_steering_system_prompts(smol_tok, talker, tmp_path, monkeypatch):
    """system_prompts: request i follows system prompt i mod n; kept prompts name theirs; a run resumed with other
    system prompts is refused; shards written without steering still read back; an empty entry is refused."""
    header, marker = user_header(smol_tok, "tokenizer", "Ask about math.")
    assert header == "<|im_start|>system\nAsk about math.<|im_end|>\n<|im_start|>user\n" and marker == "<|im_end|>"
    assert user_header(None, "llama2_chat", "Ask about math.") == ("<s>[INST] <<SYS>>\nAsk about math.\n<</SYS>>\n\n",
                                                                  "[/INST]")
    dropping = lambda messages, *args, **kwargs: render([m for m in messages if m.role != "system"], *args, **kwargs)
    with monkeypatch.context() as m:  # a template that drops system messages cannot steer
        m.setattr(self_prompts_mod, "render", dropping)
        with pytest.raises(EagleError, match="does not render a system message"):
            user_header(None, "chatml", "Ask about math.")

    seen = []
    real = Engine.generate_batch

    def recording(engine, prompts, *args, **kwargs):
        seen.append([list(p) for p in prompts])  # each shard's requests: their headers
        return real(engine, prompts, *args, **kwargs)

    steered = settings(tmp_path, system_prompts=["Ask about math.", "Ask for a poem."])
    monkeypatch.setattr(Engine, "generate_batch", recording)
    prompts = write_self_prompts(talker, steered, tmp_path / "steered", 6)
    monkeypatch.undo()
    record = json.loads((tmp_path / "steered" / "shard-00000.json").read_text())
    assert record["system_prompts"] == steered.system_prompts and len(record["header"]) == 2
    assert len(record["kept_system"]) == len(record["kept"]) and set(record["kept_system"]) <= {0, 1}
    rows = [smol_tok.decode(row) for row in seen[0]]
    assert rows == [user_header(smol_tok, "tokenizer", steered.system_prompts[i % 2])[0] for i in range(8)]
    assert len(prompts) == 6 and prompts[: len(record["kept"])] == record["kept"][:6]  # in shard order

    with pytest.raises(EagleError, match="was written with system_prompts="):
        write_self_prompts(talker, dataclasses.replace(steered, system_prompts=["Ask about code."]),
                           tmp_path / "steered", 6)
    plain = settings(tmp_path)
    first = write_self_prompts(talker, plain, tmp_path / "plain", 4)
    assert "system_prompts" not in json.loads((tmp_path / "plain" / "shard-00000.json").read_text())
    assert write_self_prompts(talker, plain, tmp_path / "plain", 4) == first  # read back, not refused
    with pytest.raises(EagleError, match=r"system_prompts\[1\] ' ' is invalid"):
        write_self_prompts(talker, settings(tmp_path, system_prompts=["Ask.", " "]), tmp_path / "never", 4)


def test_steering_openers(smol_tok, talker, tmp_path, monkeypatch):
    """openers: request i's user turn is prefilled with opener i mod m (after system prompt i mod n when both are
    set); each kept prompt starts with its opener and names it; other openers on resume are refused; a blank one
    is refused."""
    seen = []
    real = Engine.generate_batch

    def recording(engine, prompts, *args, **kwargs):
        seen.append([list(p) for p in prompts])
        return real(engine, prompts, *args, **kwargs)

    steered = settings(tmp_path, openers=["Write a poem", "Explain why"], system_prompts=["A.", "B.", "C."])
    monkeypatch.setattr(Engine, "generate_batch", recording)
    prompts = write_self_prompts(talker, steered, tmp_path / "openers", 6)
    monkeypatch.undo()
    record = json.loads((tmp_path / "openers" / "shard-00000.json").read_text())
    rows = [smol_tok.decode(row) for row in seen[0]]
    assert rows == [user_header(smol_tok, "tokenizer", "ABC"[i % 3] + ".")[0] + ["Write a poem", "Explain why"][i % 2]
                    for i in range(8)]
    assert record["openers"] == steered.openers and len(record["kept_opener"]) == len(record["kept"])
    for text, opener in zip(record["kept"], record["kept_opener"]):
        assert text.startswith(steered.openers[opener] + " ") and len(text) > len(steered.openers[opener]) + 1
    assert len(prompts) == 6 and prompts[: len(record["kept"])] == record["kept"][:6]  # in shard order
    with pytest.raises(EagleError, match="was written with openers="):
        write_self_prompts(talker, dataclasses.replace(steered, openers=["Solve"]), tmp_path / "openers", 6)
    with pytest.raises(EagleError, match=r"openers\[0\] '' is invalid"):
        write_self_prompts(talker, settings(tmp_path, openers=[""]), tmp_path / "never", 4)


def test_duplicates_exact_and_near():
    index = DuplicateIndex(0.7)
    index.add("Can you suggest some good books about sustainable living?")
    assert index.match("  can you SUGGEST some good books about\nsustainable living?") == "exact"
    assert index.match("Can you suggest some good books on sustainable living?") == "near"  # Jaccard 0.75
    assert index.match("Can you suggest some good books about ancient history?") is None  # 0.49
    assert normalise(" A\t b \n") == "a b"
    with pytest.raises(EagleError, match="near-duplicate threshold 1.5 is invalid"):
        DuplicateIndex(1.5)


def test_filters_name_their_reason():
    limits = QualityThresholds(min_tokens=4, max_repeated=0.2, min_ascii_letters=0.9, min_stop_words=0.1)
    assert quality_reason("Hi there", 2, limits) == "too_short"
    assert quality_reason("buy now buy now buy now buy now buy now", 10, limits) == "repetitive"
    assert quality_reason("Как приготовить борщ дома быстро?", 9, limits) == "not_english"
    assert quality_reason("Quiero aprender cocinar platos típicos españoles durante vacaciones próximas", 12,
                          limits) == "not_english"  # Latin script, no English stop word in 9 words
    assert quality_reason("Explain quantum computing.", 5, limits) is None  # short: judged by its letters only
    assert quality_reason("What is a good way to learn the history of Rome in a month?", 15, limits) is None
    assert quality_reason("Hi there", 2, dataclasses.replace(limits, min_tokens=0)) is None


@pytest.mark.parametrize("change, needle", [({"temperature": 0.0}, "temperature 0.0 is invalid"),
                                             ({"top_p": 0.0}, "top_p 0.0 is invalid"),
                                             ({"min_tokens": 200}, "min_tokens 200 is invalid: expected <= max_tokens 128"),
                                             ({"max_repeated": 1.5}, "max_repeated 1.5 is invalid"),
                                             ({"near_duplicate": 0.0}, "near-duplicate threshold 0.0 is invalid")])
def test_bad_settings_are_one_line_errors(talker, tmp_path, change, needle):
    with pytest.raises(EagleError, match=needle):
        write_self_prompts(talker, dataclasses.replace(SelfPromptConf(), **change), tmp_path / "never", 4)
    assert not (tmp_path / "never").exists()


def test_resume_loses_and_repeats_nothing(talker, tmp_path, monkeypatch):
    conf = settings(tmp_path)
    whole = write_self_prompts(talker, conf, tmp_path / "whole", 20)
    assert len(whole) == 20 and len({normalise(p) for p in whole}) == 20
    for path in sorted((tmp_path / "whole").glob("shard-*.json")):
        record = json.loads(path.read_text())
        assert len(record["kept"]) + sum(len(t) for t in record["rejected"].values()) == record["sampled"] == 8

    real, written = self_prompts_mod._write_shard, []

    def killed_after_one(path, shard, *args):
        if written:
            raise KeyboardInterrupt  # the process dies while sampling the second shard
        written.append(shard)
        return real(path, shard, *args)

    monkeypatch.setattr(self_prompts_mod, "_write_shard", killed_after_one)
    with pytest.raises(KeyboardInterrupt):
        write_self_prompts(talker, conf, tmp_path / "cut", 20)
    assert [p.name for p in (tmp_path / "cut").iterdir()] == ["shard-00000.json"]
    written.clear()
    monkeypatch.setattr(self_prompts_mod, "_write_shard", lambda path, shard, *a: written.append(shard) or real(path, shard, *a))
    assert write_self_prompts(talker, conf, tmp_path / "cut", 20) == whole
    assert written[0] == 1  # shard 0 was read back, not sampled again
    written.clear()
    assert write_self_prompts(talker, conf, tmp_path / "cut", 20) == whole and not written  # every shard read back

    files = sorted((tmp_path / "cut").iterdir())
    with pytest.raises(EagleError, match=r"shard-00000.json' was written with temperature=1.0, not 0.5"):
        write_self_prompts(talker, dataclasses.replace(conf, temperature=0.5), tmp_path / "cut", 30)
    assert sorted((tmp_path / "cut").iterdir()) == files  # nothing already written was lost


def test_evaluation_sets_stay_out(talker, tmp_path):
    conf = settings(tmp_path, shard_size=16, batch_size=16)  # shard 0 keeps more than the two prompts barred below
    first = write_self_prompts(talker, conf, tmp_path / "open", 10)
    longest = max(first[1:], key=len)
    bench = tmp_path / "bench"
    (bench / "mt_bench").mkdir(parents=True)
    (bench / "gsm8k").mkdir()
    (bench / "mt_bench" / "question.jsonl").write_text(
        json.dumps({"question_id": 1, "category": "writing", "turns": ["Unrelated first turn.", first[0].upper()]}) + "\n")
    (bench / "gsm8k" / "question.jsonl").write_text(
        json.dumps({"question_id": 2, "category": "math", "turns": [longest + "?"]}) + "\n")
    assert evaluation_questions(str(bench)) == {"mt_bench": ["Unrelated first turn.", first[0].upper()],
                                                "gsm8k": [longest + "?"]}
    guarded = write_self_prompts(talker, dataclasses.replace(conf, eval_data_dir=str(bench)), tmp_path / "guarded", 10)
    assert first[0] not in guarded and longest not in guarded  # an exact (case-folded) and a near duplicate
    rejected = json.loads((tmp_path / "guarded" / "shard-00000.json").read_text())["rejected"]
    assert first[0] in rejected["evaluation_set"]
    with pytest.raises(EagleError, match=r"written with evaluation_sets=\{'mt_bench': 2, 'gsm8k': 1\}, not \{\}"):
        write_self_prompts(talker, conf, tmp_path / "guarded", 10)


def run_conf(tmp_path, source, **data) -> TrainRunConf:
    data.setdefault("self_prompts", settings(tmp_path))
    return TrainRunConf(data=DataConf(source=source, features_dir=str(tmp_path / "features"),
                                      self_prompts_dir=str(tmp_path / "prompts"), **data))


def test_mix_ratio_and_parts(talker, tmp_path, git_checkout):
    source = tmp_path / "sharegpt.jsonl"
    source.write_text("".join(json.dumps({"conversations": [{"from": "human", "value": f"question {i}"},
                                                            {"from": "gpt", "value": f"answer {i}"}]}) + "\n"
                              for i in range(10)))
    mixed = _conversations(run_conf(tmp_path, str(source), conversations=6, heldout=2, skip=1, self_fraction=0.5), talker)
    own = read_self_prompts(tmp_path / "prompts")
    assert [c[0].content for c in mixed[:4]] == [f"question {i}" for i in range(1, 5)]  # after data.skip
    assert mixed[4:] == [[Message("user", p)] for p in own[:4]]  # round(0.5 * (6 + 2)) self-written
    part2 = _conversations(run_conf(tmp_path, "self", conversations=3, heldout=0, skip=4), talker)
    assert part2 == [[Message("user", p)] for p in read_self_prompts(tmp_path / "prompts")[4:7]]  # the next three
    report = prompt_categories(run_conf(tmp_path, str(source), conversations=6, heldout=2, self_fraction=0.5))
    assert "| category | self-written (" in report and (tmp_path / "prompts" / "categories.md").exists()
    named = dataclasses.replace(run_conf(tmp_path, str(source), conversations=6, heldout=2, self_fraction=0.5),
                                recipe="trial")
    prompt_categories(named, results_root=git_checkout)  # a named recipe's report is also a result file
    text = (git_checkout / CATEGORIES_DIR / "trial-categories.md").read_text()
    assert "`python -m eagle_train.cli recipes=trial stage=prompt-categories`, commit " in text and report in text

    with pytest.raises(EagleError, match="data.self_fraction 1.5 is invalid"):
        _conversations(run_conf(tmp_path, str(source), self_fraction=1.5), talker)
    with pytest.raises(EagleError, match="data.self_fraction 0.5 with data.source=self: expected 1"):
        _conversations(run_conf(tmp_path, "self", self_fraction=0.5), talker)
    with pytest.raises(EagleError, match="needs a number of conversations"):
        _conversations(run_conf(tmp_path, str(source), conversations=None, self_fraction=0.2), talker)
    unanswered = dataclasses.replace(run_conf(tmp_path, "self"), stage="featurize",
                                     featurize=FeaturizeConfig(regenerate=True, regenerate_fraction=0.5))
    with pytest.raises(EagleError, match="self-written prompts need the target's answers"):
        _check_self_answers(unanswered)


HANDWRITTEN = {
    "writing": ["Write a short poem about autumn leaves.", "Draft a letter to my landlord about the broken heater."],
    "roleplay": ["Pretend you are a pirate captain and greet your crew.", "Act as a travel agent and plan my day."],
    "reasoning": ["Here is a riddle: what has keys but cannot open locks?",
                  "If all bloops are razzies and all razzies are lazzies, is this statement true or false: all bloops are lazzies?"],
    "math": ["Solve the equation 3x + 5 = 20.", "What is the probability of drawing two aces from a deck?"],
    "coding": ["How do I reverse a list in Python?", "Fix the bug in this JavaScript function that sorts an array."],
    "extraction": ["Extract every date from the following text and return them as JSON.",
                   "Summarize the key points of the given article in three bullets."],
    "stem": ["Why does the moon orbit the Earth and not the Sun?", "How do cells turn glucose into energy?"],
    "humanities": ["What caused the fall of the Roman Empire in history?", "Compare the ethics of Kant and Mill."],
}


def test_classifier_on_handwritten_prompts():
    assert {c: [classify(p) for p in prompts] for c, prompts in HANDWRITTEN.items()} == {
        c: [c] * len(prompts) for c, prompts in HANDWRITTEN.items()}
    assert set(HANDWRITTEN) == set(CATEGORIES) and classify("Hello there!") == OTHER
    text = share_table({"mine": ["Write a poem.", "Hello there!"], "theirs": ["Solve 2 + 2 = ?"]})
    assert "| category | mine (2) | theirs (1) |" in text and "| writing | 50.0% | 0.0% |" in text
    assert "| math | 0.0% | 100.0% |" in text and "| other | 50.0% | 0.0% |" in text
    agree, per_category = agreement([("Write a poem.", "writing"), ("Hello there!", "math")])
    assert agree == 1 and "| writing | 1/1 |" in per_category and "| math | 0/1 |" in per_category


def test_category_report_checks_labelled_sets(tmp_path):
    (tmp_path / "mt_bench").mkdir()
    (tmp_path / "mt_bench" / "question.jsonl").write_text("".join(
        json.dumps({"question_id": i, "category": c, "turns": [p[0], "Now shorter."]}) + "\n"
        for i, (c, p) in enumerate(HANDWRITTEN.items())))
    report = category_report({"self-written": ["Write a poem."]}, str(tmp_path))
    assert "mt_bench: 8/8 first turns classified as their own category (100%)" in report
    assert "gsm8k" not in report  # absent from the directory: not checked
