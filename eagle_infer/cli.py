"""`python -m eagle_infer.cli chat="Hello"` (or prompt="raw text"): the engine's answer with τ and tokens/s.

output=json prints one JSON object instead: {"text", "tokens", "stats"}. Overrides: model.*, infer.*, lookup.* (see
eagle_infer.config), e.g. infer.method=vanilla infer.head=random infer.temperature=0.7, infer.method=lookup, or
infer.lookup=true lookup.num_tokens=8 (prompt lookup merged into EAGLE-2's tree).
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Optional

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from .api import Eagle
from .cli_support import CONF_DIR, launch, one_line_errors
from .config import InferConf, LookupConf, ModelConf
from .errors import EagleError
from .target import load_target

OUTPUTS = ("text", "json")


@dataclass
class InferRunConf:
    model: ModelConf = field(default_factory=ModelConf)
    infer: InferConf = field(default_factory=InferConf)
    lookup: LookupConf = field(default_factory=LookupConf)
    chat: Optional[str] = None  # a user message, rendered with the model's chat template
    prompt: Optional[str] = None  # raw text, tokenized as is
    output: str = "text"
    stream: bool = True

    def __post_init__(self):
        self.infer.lookup_conf = self.lookup  # the `lookup` group is the engine config's lookup settings


ConfigStore.instance().store(name="infer_schema", node=InferRunConf)


def the_prompt(chat: str | None, prompt: str | None) -> tuple[str, bool]:
    """(text, raw) of the command line's chat= (a user message) or prompt= (raw text): exactly one, not empty."""
    if (chat is None) == (prompt is None):
        raise EagleError('give exactly one of chat="..." (a user message) or prompt="..." (raw text)')
    given = ("chat", chat) if chat is not None else ("prompt", prompt)
    if not given[1].strip():
        raise EagleError(f'{given[0]}={given[1]!r} is empty: expected some text to answer or continue')
    return given[1], prompt is not None


@hydra.main(version_base=None, config_path=CONF_DIR, config_name="infer")
@one_line_errors
def main(cfg) -> None:
    conf: InferRunConf = OmegaConf.to_object(cfg)
    if conf.output not in OUTPUTS:
        raise EagleError(f"unknown output {conf.output!r}: expected one of {', '.join(OUTPUTS)}")
    text, raw = the_prompt(conf.chat, conf.prompt)
    target = load_target(conf.model.name, conf.model.dtype, conf.model.device, conf.model.pack,
                         conf.infer.compile)
    show = conf.output == "text" and conf.stream
    answer = Eagle(target, conf.infer).generate(text, raw=raw,
                                                stream=(lambda chunk: print(chunk, end="", flush=True)) if show else None)
    result = answer.result
    if conf.output == "json":
        print(json.dumps({"text": answer.text, "tokens": result.tokens, "stats": result.stats()}))
        return
    if not show:
        print(answer.text, end="")
    method = conf.infer.method + ("+lookup" if conf.infer.lookup else "")
    print(
        f"\n[{method} | {len(result.tokens)} tokens | tau {result.tau:.2f} | {result.tok_s:.1f} tokens/s | "
        f"{target.name} {str(target.dtype).removeprefix('torch.')} on {target.device.type}]",
        file=sys.stderr,
    )


def run() -> None:
    """The console script's entry point."""
    launch(main)


if __name__ == "__main__":
    run()
