"""The one error type users see: a single line naming the bad value and what was expected."""


class EagleError(Exception):
    """Bad input or an unmet precondition; command lines print it as one line, without a traceback."""
