"""The one error type users see: a single line naming the bad value and what was expected, and the number check
that raises it."""
from __future__ import annotations

import math


class EagleError(Exception):
    """Bad input or an unmet precondition; command lines print it as one line, without a traceback."""


def check_number(name: str, value, low: float, high: float = math.inf, low_open: bool = False,
                 integer: bool = False) -> None:
    """One line unless `value` is a finite number (an integer when `integer`) in [low, high] ((low, high] when
    `low_open`): NaN and infinities are refused by name, not left to fail deep inside a step."""
    kind = "an integer" if integer else "a number"
    bound = f"{'>' if low_open else '>='} {low:g}" + ("" if high == math.inf else f" and <= {high:g}")
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and (not integer or isinstance(value, int))
    if not number or not math.isfinite(value) or value < low or (low_open and value == low) or value > high:
        raise EagleError(f"{name} {value!r} is invalid: expected {kind} {bound}")


def missing_extra(package: str, extra: str, what: str) -> EagleError:
    """The one-line error for an optional dependency that is not installed."""
    return EagleError(f"{what} needs {package}, which this install lacks: pip install 'eagle-toolkit[{extra}]'")
