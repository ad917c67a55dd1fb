"""Which of MT-bench's eight categories a prompt falls in, by keyword rules, and the share of each category in a set
of prompts (self-written prompts beside ShareGPT's first turns: `python -m eagle_train.cli recipes=<recipe>
stage=prompt-categories`).

The classifier: each category has a list of regular expressions (RULES, matched case-insensitively against the
prompt's first 2,000 characters); a prompt's score for a category is the number of its expressions that match, and
its category is the one with the highest score, ties going to the category listed first in RULES (the specific
before the generic: a "write a Python function" prompt matches writing's `write` and coding's `python` and
`function`, so it is coding). A prompt matching nothing is `other`. In words:

- coding: programming languages and tools (python, javascript, c++, sql, html, …), code, function, program,
  script, algorithm, bug/debug, implement, array, API, a code fence.
- math: calculate, solve, equation, inequality, integer, probability, percent, area, triangle, derivative,
  integral, remainder, arithmetic between numbers (`3 + 4`, `x^2`), math words.
- extraction: extract, identify/list the … in, from the following/given text, JSON/CSV/table output, parse,
  categorize/classify, reviews, named entities, count occurrences, summarize.
- roleplay: pretend, act as, role, persona, imagine/picture yourself, you are a …, embody, in character.
- reasoning: riddle, puzzle, logic, what could be the reason(s), relationship between two people, true/false/
  uncertain statements, which word does not belong, direction, how many … does … have, overtake.
- stem: the sciences and engineering (physics, chemistry, biology, quantum, molecule, reaction, photosynthesis,
  orbit, energy, engineering, machine learning, climate, medicine, …).
- humanities: history, philosophy, ethics, economics, law, politics, culture, art, literature, religion,
  psychology, society, business etiquette, film.
- writing: write, compose, draft, craft, essay, poem, story, blog, email, letter, article, speech, headline,
  paragraph, describe, rewrite/edit.

The rules were written with MT-bench's own first turns in view (each carries its category), so the agreement on them
that `category_report` prints is an optimistic, in-sample figure; it also prints how many of GSM8K's questions the
rules call math and of HumanEval's call coding (LABELLED_SETS), sets the rules were not written from.
"""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from ..plumbing.benchmarks import load_benchmark
from ..plumbing.markdown import table

OTHER = "other"
LABELLED_SETS = {"mt_bench": None, "gsm8k": "math", "humaneval": "coding"}  # None: each question's own category
TEXT_CHARS = 2000
RULES: dict[str, list[str]] = {
    "coding": [r"\bcode\b", r"\bpython\b", r"\bjava(script)?\b", r"c\+\+", r"\bsql\b", r"\bhtml\b", r"\bcss\b",
               r"\bfunctions?\b", r"\bprogram(s|ming)?\b", r"\bscript\b", r"\balgorithms?\b", r"\b(de)?bug\b",
               r"\bimplement\b", r"\barrays?\b", r"\bapi\b", r"```", r"\bcompile", r"\b(regex|database|github)\b",
               r"\b(binary tree|linked list|complexity)\b"],
    "math": [r"\bcalculat", r"\bsolve\b", r"\bequations?\b", r"\binequalit", r"\bintegers?\b", r"\bprobabilit",
             r"\bpercent|%", r"\barea of\b", r"\btriangle\b", r"\bderivative\b", r"\bintegral\b", r"\bremainder\b",
             r"\d\s*[-+*/^=]\s*\d", r"\b[a-z]\s*[-+*/^=]\s*\d", r"\bmath", r"\b(sum|product) of\b", r"\$\d",
             r"\bhow (much|many) .*\?"],
    "extraction": [r"\bextract", r"\bidentify\b", r"\bfrom the (following|given|presented|provided|above)\b",
                   r"\b(following|given) (text|data|passage|paragraph|article|records)\b", r"\bjson\b", r"\bcsv\b",
                   r"\bparse\b", r"\bcategori[sz]e|\bclassify\b|\bcategories\b", r"\breviews?\b",
                   r"\bnamed entities\b", r"\bcount how many\b", r"\bsummari[sz]e\b", r"\bkey (points|information)\b"],
    "roleplay": [r"\bpretend\b", r"\bact as\b", r"\brole\b", r"\bpersona\b",
                 r"\b(imagine|picture|suppose) (yourself|you are)\b", r"\byou are (a|an) (?!ai\b)\w+",
                 r"\bembody\b|\bembrace\b", r"\bin character\b", r"\bspeak like\b", r"\bnow you are\b"],
    "reasoning": [r"\briddle\b", r"\bpuzzle\b", r"\blogic(al)?\b", r"\bwhat could be the reasons?\b",
                  r"\brelationship between [A-Z]\b", r"\btrue, false\b|\btrue or false\b|\buncertain\b",
                  r"\bdoes not belong\b", r"\bdirection\b", r"\bhow many \w+ does \w+ have\b", r"\bovertak",
                  r"\bposition\b", r"\bstatements?\b", r"\bdeduc"],
    "stem": [r"\bphysic", r"\bchemi", r"\bbiolog", r"\bquantum\b", r"\bmolecul", r"\breactions?\b",
             r"\bphotosynthesis\b", r"\borbit", r"\benergy\b", r"\bengineer", r"\bmachine learning\b", r"\bscien",
             r"\bclimate\b", r"\bmedic", r"\bdisease\b", r"\bcells?\b", r"\bdna\b|\bgenes?\b", r"\bsolar\b",
             r"\bastronom|\bplanets?\b", r"\belectric", r"\bbridge\b|\bseismic|\bearthquake", r"\briver\b|\bgeograph"],
    "humanities": [r"\bhistor", r"\bphilosoph", r"\bethic", r"\beconom", r"\b(laws?|legal)\b", r"\bpolitic",
                   r"\bcultur", r"\bart(s|works?|ists?)?\b|\bmasterpieces?\b", r"\bliteratur", r"\breligio",
                   r"\bpsycholog", r"\bsociety|\bsocial\b", r"\betiquette\b", r"\bfilms?\b|\bdocumentar",
                   r"\bgdp\b|\binflation\b|\bfiscal\b|\bmarket\b", r"\bmortality\b|\bmeaning of life\b", r"\bargument\b",
                   r"\bsocrates\b|\bplato\b|\baristotle\b"],
    "writing": [r"\bwrite\b|\bwriting\b", r"\bcompose\b", r"\bdraft\b", r"\bcraft\b", r"\bessay\b", r"\bpoem\b",
                r"\bstory\b|\bstories\b", r"\bblog\b", r"\be-?mail\b", r"\bletter\b", r"\barticle\b", r"\bspeech\b",
                r"\bheadline\b", r"\bparagraph\b", r"\bdescribe\b", r"\brewrite\b|\bedit\b|\bproofread",
                r"\bslogan\b|\boutline\b"],
}
CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")  # MT-bench's
_COMPILED = {category: [re.compile(p, re.IGNORECASE) for p in patterns] for category, patterns in RULES.items()}


def classify(prompt: str) -> str:
    """The prompt's category (module docstring): most rules matched, ties to the earlier category; `other` if none."""
    text = prompt[:TEXT_CHARS]
    scores = {category: sum(bool(p.search(text)) for p in patterns) for category, patterns in _COMPILED.items()}
    best = max(scores.values())
    return next(c for c, s in scores.items() if s == best) if best else OTHER


def shares(prompts: list[str]) -> dict[str, float]:
    """Share of `prompts` in each category (CATEGORIES, then `other`), summing to 1."""
    counts = Counter(classify(p) for p in prompts)
    return {c: counts[c] / max(len(prompts), 1) for c in (*CATEGORIES, OTHER)}


def share_table(columns: dict[str, list[str]]) -> str:
    """A Markdown table: one row per category, one column of shares per named prompt set (its size in the header)."""
    per_set = {name: shares(prompts) for name, prompts in columns.items()}
    header = ["category", *(f"{name} ({len(prompts)})" for name, prompts in columns.items())]
    rows = [[c, *(f"{per_set[name][c]:.1%}" for name in columns)] for c in (*CATEGORIES, OTHER)]
    return table(header, rows)


def agreement(labelled: list[tuple[str, str]]) -> tuple[int, str]:
    """How many of `labelled` (prompt, its own category) the classifier puts in that category, and a Markdown
    table of the agreement per category."""
    per: dict[str, list[int]] = {}
    for prompt, category in labelled:
        per.setdefault(category, []).append(int(classify(prompt) == category))
    rows = [[c, f"{sum(hits)}/{len(hits)}"] for c, hits in per.items()]
    return sum(sum(hits) for hits in per.values()), table(["category", "classified as it"], rows)


def category_report(columns: dict[str, list[str]], data_dir: str | None) -> str:
    """The share table of `columns` and, for each of LABELLED_SETS found in eval's benchmark `data_dir`, how many
    of its first turns the classifier puts in their category."""
    lines = ["Prompt categories (keyword rules, eagle_train/data/prompt_categories.py):", "", share_table(columns)]
    for name, category in LABELLED_SETS.items():
        if data_dir is not None and (Path(data_dir) / name / "question.jsonl").is_file():
            questions = load_benchmark(name, data_dir)
            agree, per_category = agreement([(q.turns[0], category or q.category) for q in questions])
            lines += [f"{name}: {agree}/{len(questions)} first turns classified as "
                      f"{category or 'their own category'} ({agree / len(questions):.0%})"]
            lines += ["", per_category] if category is None else []
    return "\n".join(lines)
