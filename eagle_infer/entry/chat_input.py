"""What the chat command was asked, read from its arguments before Hydra parses anything.

Hydra's override grammar rejects ordinary text (an apostrophe, a comma, brackets), so the prompt never goes through
it: `split_arguments` takes from the command line

* words that are not `key=value` overrides: the prompt, joined by spaces (`eagle-chat What's up, doc?`);
* `-`: the prompt is standard input; `--file PATH` (or `--file=PATH`): the prompt is that UTF-8 file;
* `chat=TEXT` (a user message) or `prompt=TEXT` (raw text, tokenized as is): TEXT verbatim; one pair of quotes around
  all of it is dropped, as Hydra would (`chat="'Hi, you'"` is `Hi, you`);

and leaves the rest (`model.name=...`, `infer.temperature=0.7`, Hydra's own `--help`, `--cfg job`) to Hydra. An
argument is an override when it starts with a dotted name and `=` (`infer.top_k=4`, `+x=1`, `~y`); text of that form
is given with `chat=`, `-` or `--file`. Without a prompt the command is interactive when standard input is a
terminal, and answers standard input as one message when it is not (`echo Hi | eagle-chat`).
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ..errors import EagleError

OVERRIDE = re.compile(r"^(\+\+|\+)?[A-Za-z_][\w.@-]*=|^~[A-Za-z_][\w.@-]*(=|$)")  # key=value, +key=, ~key
HYDRA_FLAGS_WITH_VALUE = ("--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn",
                          "--config-dir", "-cd", "--info", "-i", "--experimental-rerun")
TEXT_KEYS = ("chat", "prompt")


@dataclass
class Request:
    """What to answer: `text` (None: interactive), raw (True: prompt= text, tokenized without the chat template),
    and where it came from (for errors): "chat=", "prompt=", "the command line", "standard input" or a file path."""

    text: str | None
    raw: bool = False
    source: str = "the command line"


def _unquote(value: str) -> str:
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"" else value


def _read_file(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise EagleError(f"prompt file {path!r} does not exist: expected a UTF-8 text file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise EagleError(f"prompt file {path!r} cannot be read ({type(err).__name__}): expected a UTF-8 text file") from None


def _read_stdin(stdin: TextIO) -> str:
    try:
        return stdin.read()
    except UnicodeDecodeError:
        raise EagleError("standard input is not UTF-8 text: expected the prompt as UTF-8") from None


def split_arguments(argv: list[str], stdin: TextIO | None = None) -> tuple[Request, list[str]]:
    """(the request, the arguments left for Hydra) of the chat command's arguments (without the program name)."""
    stdin = sys.stdin if stdin is None else stdin
    words, given, overrides = [], [], []
    args = iter(argv)
    for arg in args:
        key, eq, value = arg.partition("=")
        if eq and key in TEXT_KEYS:
            given.append(Request(_unquote(value), key == "prompt", f"{key}="))
        elif arg == "-":
            given.append(Request(None, source="standard input"))
        elif arg == "--file" or arg.startswith("--file="):
            path = arg.partition("=")[2] if eq else next(args, None)
            if not path:
                raise EagleError("--file needs a path: expected --file PATH (a UTF-8 text file holding the prompt)")
            given.append(Request(_read_file(path), source=path))
        elif arg in HYDRA_FLAGS_WITH_VALUE:
            overrides += [arg, *([next(args)] if arg != "--info" else [])]
        elif arg.startswith("-") or OVERRIDE.match(arg):
            overrides.append(arg)
        else:
            words.append(arg)
    if words:
        given.append(Request(" ".join(words)))
    if len(given) > 1:
        raise EagleError(f"the prompt is given {len(given)} times ({', '.join(g.source for g in given)}): expected one "
                         "of a positional prompt, -, --file PATH, chat=TEXT or prompt=TEXT")
    request = given[0] if given else Request(None, source="standard input")
    if request.text is None and (given or not stdin.isatty()):
        request.text = _read_stdin(stdin)
    if request.text is not None and not request.text.strip():
        what = f"{request.source}{request.text!r}" if request.source in ("chat=", "prompt=") else f"the prompt from {request.source}"
        raise EagleError(f"{what} is empty: expected some text to answer or continue")
    return request, overrides
