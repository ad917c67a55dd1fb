"""Quality filters for self-written prompts; each rejection names one reason (the first that applies, in this order):

- `too_short`: fewer than `min_tokens` tokens (the length limit above is `too_long`, decided while sampling: a
  prompt that reaches max_tokens without its end-of-turn marker).
- `repetitive`: the share of repeated word 3-grams, 1 − distinct / all over the lower-cased words (\\w+ runs), is
  above `max_repeated` (a text of fewer than 3 words repeats nothing).
- `not_english`, a heuristic on letters and function words, true when any of:
  - fewer than `min_ascii_letters` of its letters are ASCII letters (other scripts, accented languages);
  - for a text of at least STOP_WORD_MIN_WORDS words, fewer than `min_stop_words` of its words are in STOP_WORDS
    (short English function words that any English sentence of that length uses; other Latin-script languages,
    code-only or keyword-salad text score low). A short prompt ("Explain quantum computing.") is judged by its
    letters alone;
  - at least 2 of its words are in FOREIGN_STOP_WORDS (French, German, Spanish, Portuguese and Italian function
    words that are not English words) and they are more than a third of its function words of either list: a
    foreign passage with an English question after it, which the English share alone lets through.

Setting a threshold to 0 (max_repeated to 1) turns its filter off.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from eagle_infer.errors import EagleError

STOP_WORDS = frozenset(
    "a an the and or but if of to in on at for with from by about as into is are was were be been am do does did "
    "have has had i you he she it we they me my your our their this that these those what which who how why when "
    "where can could would should will please not no so than then there here".split()
)
FOREIGN_STOP_WORDS = frozenset(
    "le les des du une et est je ne pas pour qui avec dans sur au aux nous vous "  # French
    "der das und ist nicht ein eine mit sich auf für sind ich auch oder wir "  # German
    "los las del por para una muy como pero está "  # Spanish
    "não uma com mais são também "  # Portuguese
    "gli della che sono anche".split()  # Italian
)
STOP_WORD_MIN_WORDS = 8


@dataclass
class QualityThresholds:
    """The filters' thresholds (module docstring)."""

    min_tokens: int = 4
    max_repeated: float = 0.2
    min_ascii_letters: float = 0.9
    min_stop_words: float = 0.1

    def check(self) -> None:
        if self.min_tokens < 0:
            raise EagleError(f"min_tokens {self.min_tokens} is invalid: expected >= 0")
        for name in ("max_repeated", "min_ascii_letters", "min_stop_words"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise EagleError(f"{name} {getattr(self, name)} is invalid: expected a share in [0, 1]")


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def repeated_share(text: str, n: int = 3) -> float:
    """1 − distinct / all word n-grams; 0 for a text of fewer than n words."""
    tokens = words(text)
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return 1.0 - len(set(grams)) / len(grams) if grams else 0.0


def ascii_letter_share(text: str) -> float:
    """ASCII letters / all letters (1 for a text without letters)."""
    letters = [c for c in text if c.isalpha()]
    return sum(c.isascii() for c in letters) / len(letters) if letters else 1.0


def stop_word_share(text: str) -> float:
    tokens = words(text)
    return sum(t in STOP_WORDS for t in tokens) / len(tokens) if tokens else 0.0


def mostly_foreign_function_words(text: str) -> bool:
    """At least 2 words of FOREIGN_STOP_WORDS, more than a third of the words in either stop-word list."""
    tokens = words(text)
    foreign, english = sum(t in FOREIGN_STOP_WORDS for t in tokens), sum(t in STOP_WORDS for t in tokens)
    return foreign >= 2 and 3 * foreign > foreign + english


def quality_reason(text: str, n_tokens: int, limits: QualityThresholds) -> str | None:
    """The first filter `text` (of `n_tokens` tokens) fails, or None when it passes all (module docstring)."""
    if n_tokens < limits.min_tokens:
        return "too_short"
    if repeated_share(text) > limits.max_repeated:
        return "repetitive"
    if ascii_letter_share(text) < limits.min_ascii_letters or mostly_foreign_function_words(text) or (
        len(words(text)) >= STOP_WORD_MIN_WORDS and stop_word_share(text) < limits.min_stop_words
    ):
        return "not_english"
    return None
