"""Exporting a head to the layouts the EAGLE servers load (`python -m eagle_train.cli stage=export export.head=DIR
export.format=vllm|sglang|eagle export.out=DIR`, `make export`).

- EAGLE block (fc over [token embedding ; feature] + decoder layers, the target's LM head): a Llama config of the
  head's shape (the target's, `num_hidden_layers` = the head's layers) and `fc.*`, `layers.N.*` (layer 0 without an
  input norm). `eagle` is SafeAILab's published layout (architectures LlamaForCausalLM, `bias` says whether fc has
  one); `vllm` its EagleLlamaForCausalLM reads the same (vLLM wraps the config; its fc has no bias); `sglang` names
  LlamaForCausalLMEagle (its fc has a bias: zeros when the head has none). A reduced draft vocabulary is the token
  map SGLang takes (`token_map.pt`, the draft tokens' target ids: `--speculative-token-map`); vLLM's EAGLE-1 drafter
  has none, so such a head is refused for vllm.
- EAGLE-3 block: the LlamaForCausalLMEagle3 layout for every format: `midlayer.*`, `fc` (3H -> H), `norm`,
  `lm_head` [Vd, H], `d2t` (draft id -> target id offsets), `t2d` (bool [V]); config with `draft_vocab_size`,
  `target_hidden_size` and the fused layers as vLLM's `eagle_aux_hidden_state_layer_ids` (its ids count the
  embedding as 0: our 0-based layer outputs + 1).
What the loaders expect is written down in tests/fixtures/serving_loaders.json (read from vLLM's and SGLang's
sources, commits named there); this toolkit's loader reads every exported layout back to the same predictions.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import huggingface_hub
import torch
from safetensors.torch import save_file

from eagle_infer.draft_head import INPUT_MODES, DraftHead
from eagle_infer.errors import EagleError
from eagle_infer.head_checkpoint import TOKEN_MAP_FILE

FORMATS = ("eagle", "vllm", "sglang")
ARCHITECTURES = {"eagle": "LlamaForCausalLM", "vllm": "LlamaForCausalLM", "sglang": "LlamaForCausalLMEagle"}
EAGLE3_ARCHITECTURE = "LlamaForCausalLMEagle3"


def check_servable(head: DraftHead, fmt: str) -> None:
    """A one-line error naming what to train instead when `fmt`'s servers cannot run `head` as it drafts here."""
    c = head.config
    if fmt not in FORMATS:
        raise EagleError(f"unknown export format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if c.architecture != "llama":
        raise EagleError(f"a head for a {c.architecture!r} target cannot be exported: the servers' EAGLE drafters are "
                         "Llama layers (expected a Llama target)")
    if c.input_mode != INPUT_MODES[0]:
        raise EagleError(f"a head with input_mode {c.input_mode!r} runs on no server: they feed (feature, next token); "
                         f"train with train.input_mode={INPUT_MODES[0]}")
    if c.block == "eagle" and c.fused:
        raise EagleError("fused features on the EAGLE-1 block run on no server: train with last-layer features "
                         "(head.features=last), or an EAGLE-3-block head")
    if c.block == "eagle" and fmt == "vllm":
        if head.fc.bias is not None and bool(head.fc.bias.detach().any()):
            raise EagleError("vLLM's EAGLE-1 drafter has no fc bias and this head has one (heads trained here have "
                             "one, as EAGLE's do): export format=sglang or eagle")
        if c.draft_vocab_size:
            raise EagleError(f"vLLM's EAGLE-1 drafter has no draft-vocabulary map and this head drafts "
                             f"{c.draft_vocab_size} of {c.vocab_size} tokens: export format=sglang (its token map) "
                             "or train with train.draft_vocab_size=0")


def _config(head: DraftHead, architecture: str, extra: dict) -> dict:
    """The target's Llama config with the head's shape and `extra` keys."""
    raw = head.target.config.to_dict()
    keep = {k: v for k, v in raw.items() if not k.startswith("_") and k not in ("quantization_config", "auto_map")}
    return {**keep, "architectures": [architecture], "model_type": "llama", "num_hidden_layers": head.config.layers,
            "torch_dtype": "bfloat16", **extra}


def _eagle_state(head: DraftHead, fmt: str) -> dict[str, torch.Tensor]:
    state = {k: v for k, v in head.state_dict().items() if k.startswith(("fc.", "layers."))}
    if fmt == "sglang" and "fc.bias" not in state:
        state["fc.bias"] = torch.zeros(head.config.hidden_size, dtype=state["fc.weight"].dtype)
    if fmt == "vllm":
        state.pop("fc.bias", None)  # all zeros (check_servable): vLLM's fc has none
    return state


def _eagle3_state(head: DraftHead) -> dict[str, torch.Tensor]:
    c = head.config
    state = {"midlayer." + k[len("layers.0."):]: v for k, v in head.state_dict().items() if k.startswith("layers.0.")}
    state.update({"norm.weight": head.norm.weight, "lm_head.weight": head.lm_head.weight})
    if head.fuse is not None:
        state["fc.weight"] = head.fuse.weight
    ids = head.draft_vocab if head.draft_vocab is not None else torch.arange(c.vocab_size)
    state["d2t"] = (ids.cpu() - torch.arange(ids.numel())).long()
    t2d = torch.zeros(c.vocab_size, dtype=torch.bool)
    t2d[ids.cpu()] = True
    state["t2d"] = t2d
    return state


def export(head: DraftHead, fmt: str, out: str | Path) -> list[Path]:
    """Write `head` in `fmt`'s layout into `out` (config.json, model.safetensors, a token map where needed, and the
    head's model card when it has one); returns the files written."""
    check_servable(head, fmt)
    c, out = head.config, Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if c.block == "eagle3":
        # the head's own LM head over the draft vocabulary: never the embedding (SGLang reads a tied config so)
        extra = {"draft_vocab_size": c.draft_vocab_size or c.vocab_size, "target_hidden_size": c.hidden_size,
                 "tie_word_embeddings": False}
        if c.fused:
            extra["eagle_config"] = {"use_aux_hidden_state": True,
                                     "eagle_aux_hidden_state_layer_ids": [i + 1 for i in c.feature_layers]}
        config, state = _config(head, EAGLE3_ARCHITECTURE, extra), _eagle3_state(head)
    else:
        config = _config(head, ARCHITECTURES[fmt], {"bias": head.fc.bias is not None and fmt != "vllm"})
        state = _eagle_state(head, fmt)
    weights = {k: v.detach().to("cpu", torch.bfloat16 if v.is_floating_point() else v.dtype).contiguous()
               for k, v in state.items()}
    save_file(weights, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    written = [out / "config.json", out / "model.safetensors"]
    if c.block == "eagle" and c.draft_vocab_size:
        torch.save(head.draft_vocab.cpu().long(), out / TOKEN_MAP_FILE)
        written.append(out / TOKEN_MAP_FILE)
    return written


def copy_card(source: str | Path, out: str | Path, fmt: str) -> Path | None:
    """The source head's model card beside the export, with a line on how the format's server takes it."""
    card = Path(source) / "README.md"
    if not card.exists():
        return None
    usage = {"vllm": "vLLM: `--speculative-config '{\"method\": \"eagle\" (or \"eagle3\"), \"model\": \"<this directory>\"}'`",
             "sglang": "SGLang: `--speculative-algorithm EAGLE (or EAGLE3) --speculative-draft-model-path <this "
                       "directory>` (and `--speculative-token-map <this directory>/token_map.pt` where there is one)",
             "eagle": "the EAGLE reference code: `ea_model_path=<this directory>`"}[fmt]
    target = Path(out) / "README.md"
    shutil.copyfile(card, target)
    with target.open("a") as f:
        f.write(f"\nExported in the `{fmt}` layout (eagle_train/export.py); served by {usage}.\n")
    return target


def push(directory: str | Path, repo_id: str, private: bool = False) -> str:
    """Upload an exported head (its config, weights, token map and card) to the Hugging Face hub as model repo
    `repo_id`, created when missing; returns the repository's URL. One line when the hub cannot be reached."""
    directory = Path(directory)
    if not (directory / "config.json").exists() or not (directory / "model.safetensors").exists():
        raise EagleError(f"{str(directory)!r} holds no exported head: expected config.json and model.safetensors "
                         "(stage=export writes them)")
    if not (directory / "README.md").exists():
        raise EagleError(f"{str(directory)!r} has no model card (README.md): export a head that has one")
    api = huggingface_hub.HfApi()
    try:
        url = api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        api.upload_folder(folder_path=str(directory), repo_id=repo_id, repo_type="model",
                          commit_message="Upload an EAGLE draft head (eagle-toolkit export)")
    except Exception as err:  # noqa: BLE001 (the hub client raises many types: offline, no token, no rights, ...)
        raise EagleError(f"pushing {str(directory)!r} to {repo_id!r} failed ({type(err).__name__}): check the network "
                         "and `huggingface-cli login`") from None
    return str(url)
