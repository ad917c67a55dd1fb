"""How a finding's numbers are compared and printed, for the paper's figures (lab.published) and ours alike: changes,
differences and the short texts the reproduction page shows. Missing figures (None) give None and "—"."""
from __future__ import annotations

UNITS = {"tau": {"name": "τ "}, "speedup": {"unit": "x"}, "speedup_vs_vanilla": {"unit": "x"}}  # by figure


def change(before: float | None, after: float | None) -> float | None:
    """after / before − 1, None while either is missing."""
    return None if before is None or after is None or not before else after / before - 1


def drop(before: float | None, after: float | None) -> float | None:
    """1 − after / before: how much lower `after` is, None while either is missing."""
    grown = change(before, after)
    return None if grown is None else -grown


def diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def change_text(before: float | None, after: float | None, unit: str = "", name: str = "") -> str:
    """"τ 2.00 → 2.50 (+25%)" (`name` τ) or "1.20x → 1.50x (+25%)" (`unit` x)."""
    grown = change(before, after)
    return "—" if grown is None else f"{name}{before:.2f}{unit} → {after:.2f}{unit} ({grown:+.0%})"


def figure_change_text(before: float | None, after: float | None, figure: str) -> str:
    """change_text with the name or unit of `figure` (a column of the ablation file or an eval figure)."""
    return change_text(before, after, **UNITS.get(figure, {}))


def pair(a_name: str, a, b_name: str, b) -> str:
    """"0-α 0.50, 1-α 0.40 (+0.10)"."""
    return "—" if a is None or b is None else f"{a_name} {a:.2f}, {b_name} {b:.2f} ({a - b:+.2f})"


def lead(values: dict) -> float | None:
    """How far the first value is above the best of the others (relative), None while any is missing."""
    if any(v is None for v in values.values()):
        return None
    first, *rest = values.values()
    return first / max(rest) - 1


def listed(values: dict, speed: bool) -> str:
    """"humaneval 1.20x, gsm8k 1.10x" (speeds) or "humaneval 2.50, gsm8k 2.40"."""
    return ", ".join(f"{k} {x(v) if speed else f(v)}" for k, v in values.items())


def f(value, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def x(value) -> str:
    return "—" if value is None else f"{value:.2f}x"
