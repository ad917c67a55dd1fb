"""`eagle-chat "What's up?"` (or `python -m eagle_infer.entry.cli ...`, `make chat CHAT="..."`): the engine's answer with τ
and tokens/s. The prompt is any text: positional words, `-` for standard input, `--file PATH`, `chat=TEXT` (a user
message) or `prompt=TEXT` (raw text), read before Hydra sees the arguments (eagle_infer.entry.chat_input). Without one, on a
terminal, the command is an interactive chat: one message per line, the conversation kept, each answer streamed and
followed by its τ and tokens/s; `/reset` starts over, `/exit` or Ctrl-D ends.

output=json prints one JSON object instead: {"text", "tokens", "stats"}. Overrides: model.*, infer.*, lookup.* (see
eagle_infer.config), e.g. infer.method=vanilla infer.head=random infer.temperature=0.7, infer.method=eagle2 (EAGLE-2
without the default's prompt lookup), infer.method=lookup, or lookup.num_tokens=8 (the copies merged into the tree).
"""
from __future__ import annotations

import functools
import json
import sys
from dataclasses import dataclass, field

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from .api import Eagle
from ..models.chat import Message
from .chat_input import Request, split_arguments
from .cli_support import fail, launch, one_line_errors
from ..paths import CONF_DIR
from ..decoding.methods import method_of
from ..config import InferConf, LookupConf, ModelConf
from ..errors import EagleError
from ..decoding.records import GenerationResult
from ..models.target import Target, load_target

OUTPUTS = ("text", "json")


@dataclass
class InferRunConf:
    model: ModelConf = field(default_factory=ModelConf)
    infer: InferConf = field(default_factory=InferConf)
    lookup: LookupConf = field(default_factory=LookupConf)
    output: str = "text"
    stream: bool = True

    def __post_init__(self):
        self.infer.lookup_conf = self.lookup  # the `lookup` group is the engine config's lookup settings


ConfigStore.instance().store(name="infer_schema", node=InferRunConf)


def summary(infer: InferConf, target: Target, result: GenerationResult) -> str:
    """The line after an answer: method, tokens, τ, tokens/s and what ran it."""
    return (f"[{method_of(infer).name} | {len(result.tokens)} tokens | tau {result.tau:.2f} | {result.tok_s:.1f} tokens/s | "
            f"{target.name} {str(target.dtype).removeprefix('torch.')} on {target.device.type}]")


def show(chunk: str) -> None:
    print(chunk, end="", flush=True)


def interactive(eagle: Eagle, infer: InferConf) -> None:
    """Chat on the terminal: each line is a user message answered in the conversation so far (streamed, then its
    summary line); `/reset` forgets the conversation, `/exit`, `/quit` or Ctrl-D ends. A turn that fails (the
    conversation outgrew the context) prints its one-line error and leaves the conversation as it was."""
    import readline  # noqa: F401 (line editing and history for input())

    print(f"Chatting with {eagle.target.name} ({method_of(infer).name}): one message per line; /reset starts over, "
          "/exit or Ctrl-D ends.", file=sys.stderr, flush=True)
    history: list[Message] = []
    while True:
        try:
            line = input("> ")
        except (EOFError, KeyboardInterrupt):
            print()
            return
        if line.strip() in ("/exit", "/quit"):
            return
        if line.strip() == "/reset":
            history = []
            print("(the conversation is cleared)", file=sys.stderr, flush=True)
            continue
        if not line.strip():
            continue
        turn = history + [Message("user", line)]
        try:
            answer = eagle.generate(turn, stream=show)
        except EagleError as err:
            print(f"\nerror: {str(err).splitlines()[0]} (/reset starts a new conversation)", file=sys.stderr, flush=True)
            continue
        except KeyboardInterrupt:
            print("\n(interrupted: the conversation is as before this message)", file=sys.stderr, flush=True)
            continue
        history = turn + [Message("assistant", answer.text)]
        print("\n" + summary(infer, eagle.target, answer.result), file=sys.stderr, flush=True)


def main(cfg, request: Request) -> None:
    conf: InferRunConf = OmegaConf.to_object(cfg)
    if conf.output not in OUTPUTS:
        raise EagleError(f"unknown output {conf.output!r}: expected one of {', '.join(OUTPUTS)}")
    if request.text is None and conf.output == "json":
        raise EagleError("output=json needs a prompt: expected a positional prompt, -, --file PATH or chat=TEXT")
    conf.infer.sampling()  # temperature, top_p, sampling_top_k checked before anything loads
    target = load_target(conf.model.name, conf.model.dtype, conf.model.device, conf.model.pack,
                         conf.infer.compile)
    eagle = Eagle(target, conf.infer)
    if request.text is None:
        interactive(eagle, conf.infer)
        return
    streamed = conf.output == "text" and conf.stream
    answer = eagle.generate(request.text, raw=request.raw, stream=show if streamed else None)
    if conf.output == "json":
        print(json.dumps({"text": answer.text, "tokens": answer.tokens, "stats": answer.result.stats()}))
        return
    if not streamed:
        print(answer.text, end="")
    print("\n" + summary(conf.infer, target, answer.result), file=sys.stderr)


def run() -> None:
    """The console script's entry point: the prompt taken from the arguments, the rest given to Hydra."""
    try:
        request, sys.argv[1:] = split_arguments(sys.argv[1:])
    except EagleError as err:
        fail(err)
    task = functools.wraps(main)(lambda cfg: main(cfg, request))
    launch(hydra.main(version_base=None, config_path=CONF_DIR, config_name="infer")(one_line_errors(task)))


if __name__ == "__main__":
    run()
